"""nsys-jax archives (JAX on 4 × A100 through Nsight Systems): the real Pax FSDP fixtures.

Expected counts and times are computed here, independently of the reader, from the archive's own
projected ranges with pyarrow (thunk ranges whose parent is a top-level XlaModule range).
"""

import io
import lzma
import subprocess
import sys
import zipfile
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import rooflens as rl
from rooflens.trace.formats.nsys.reader import TRACE
from rooflens.trace.stats import op_stats
from tests.conftest import fixture_path

DIR = ("gpu_nvidia", "nsys_jax_pax_fsdp4_a100")
STEP = "pjit__wrapped_step_fn"


def _archive(i: int = 0) -> Path:
    return fixture_path(*DIR, f"pax_fsdp4_4proc_proc{i}.zip")


def _expected(zip_path: Path) -> tuple[dict, dict]:
    """(module → (count, total ns)), ((module, hlo_op) → (count, total ns)) of program executions,
    straight from trace.parquet: a Thunk range whose parent is an XlaModule range at the top level."""
    with zipfile.ZipFile(zip_path) as z:
        t = pq.read_table(io.BytesIO(z.read(TRACE))).to_pydict()
    top_modules = {}
    for name, rid, pid in zip(t["Name"], t["RangeId"], t["ParentId"]):
        if name and name.startswith("TSL:XlaModule:") and pid is None:
            top_modules[rid] = name.split("hlo_module=")[1].split(",")[0].split("#")[0]
    per_module, per_op = defaultdict(lambda: [0, 0]), defaultdict(lambda: [0, 0])
    for name, pid, dur in zip(t["Name"], t["ParentId"], t["Projected Duration"]):
        if name and name.startswith("TSL:Thunk:") and pid in top_modules:
            module, op = top_modules[pid], name.rsplit("hlo_op=", 1)[1].rstrip("#")
            for d, k in ((per_module, module), (per_op, (module, op))):
                d[k][0] += 1
                d[k][1] += dur
    return dict(per_module), dict(per_op)


@pytest.fixture(scope="module")
def proc0():
    return rl.load(_archive(0))


@pytest.fixture(scope="module")
def report0(proc0):
    return rl.analyze(proc0)


def test_op_counts_and_times_equal_the_archives_own_ranges(proc0):
    per_module, per_op = _expected(_archive(0))
    stats = op_stats(proc0).op_stats
    got_module = defaultdict(lambda: [0, 0.0])
    for s in stats:
        base = s.program.split("(")[0]
        got_module[base][0] += s.occurrences
        got_module[base][1] += s.total_time_s
    assert set(got_module) == set(per_module)
    for module, (count, total_ns) in per_module.items():
        assert got_module[module][0] == count, module
        assert got_module[module][1] == pytest.approx(total_ns * 1e-9, rel=5e-3), module
    # the step program op by op (a collective the HLO wraps in an async-start is shown by that name)
    want = {op: v for (m, op), v in per_op.items() if m == STEP}
    got = {s.name: (s.occurrences, s.total_time_s) for s in stats if s.program == STEP}
    assert len(got) == len(want) > 2000
    for op in set(want) & set(got):
        assert got[op][0] == want[op][0], op
        assert got[op][1] == pytest.approx(want[op][1] * 1e-9, rel=5e-3), op
    renamed_want = sorted((c, t) for op, (c, t) in want.items() if op not in got)
    renamed_got = sorted((c, round(t * 1e9)) for op, (c, t) in got.items() if op not in want)
    assert renamed_want == renamed_got and all(op.startswith("reduce-scatter-start")
                                               for op in got if op not in want)


def test_steps_autotuner_chip_and_hosts(proc0, report0):
    assert len(proc0.steps) == 5 and [n for n, _, _ in proc0.steps] == [0, 1, 2, 3, 4]
    programs = {s.program for s in op_stats(proc0).op_stats}
    assert STEP in programs
    assert not any(p.startswith(("gemm_fusion_dot", "extracted")) for p in programs)
    assert any("autotuner ran 29 measurements" in n for n in proc0.notes)
    assert report0.chip == "a100-sxm-40gb"
    assert proc0.plane_stats["core_count"] == 108 and proc0.plane_stats["memory_bandwidth"] == 1_555_200_000_000
    assert proc0.device_kind == "NVIDIA A100-SXM4-40GB" and proc0.platform == "gpu"
    assert proc0.hosts == ["pax_fsdp4_4proc_proc0"]


def test_a_whole_process_capture_is_judged_over_its_steps(proc0, report0):
    """nsys captured the whole process: 78 s of XLA compilation and the set-up before the first step
    are not the device waiting to be fed; over the 5 steps the device is busy."""
    assert "idle" not in {f.rule for f in report0.findings}
    (unit,) = report0.steady.idle
    dev, idle_s, left_out_s = unit.unit, unit.idle_s, unit.warmup_s
    steps = proc0.steps
    span_s = (max(e for _, _, e in steps) - min(s for _, s, _ in steps)) * 1e-9
    assert left_out_s > 60 and dev.window_s <= span_s + 1e-9 and idle_s < 0.1 * dev.window_s


def test_step_program_priced_gemms_and_collectives(report0):
    step = [c for c in report0.comparison if c.program == STEP]
    compared = [c for c in step if c.ratio is not None]
    assert len(compared) >= 20
    gemms = [c for c in compared if c.category == "matmul" and c.opcode == "custom-call"]
    assert len(gemms) >= 20
    top = max(gemms, key=lambda c: c.total_time_s)  # the 8192 x 768 x 50304 logits GEMM
    assert top.bound == "compute" and 1.0 < top.ratio < 1.5
    coll = {c.name: c for c in compared if c.category == "collective"}
    assert any(n.startswith("all-gather-start") for n in coll) and any(n.startswith("reduce-scatter-start")
                                                                        for n in coll)
    assert any("NVLink" in line for c in coll.values() for line in c.explanation)
    assert report0.steps.program == STEP and report0.steps.steps == 5


@pytest.fixture(scope="module")
def four_processes():
    return rl.load(fixture_path(*DIR))


def test_four_archives_are_four_hosts(four_processes):
    prof = four_processes
    assert sorted(prof.hosts) == [f"pax_fsdp4_4proc_proc{i}" for i in range(4)]
    assert sorted(set(prof.table.device.tolist())) == [0, 1, 2, 3]
    assert len(Counter(prof.table.host.tolist())) == 4
    # the job's 5 steps (each from the first process's start to the last one's end), not 4 × 5
    assert [n for n, _, _ in prof.steps] == sorted({n for n, _, _ in prof.steps}) and len(prof.steps) == 5
    assert (prof.table.step >= 0).mean() > 0.9  # every host's ops sit in its own steps


def test_zip_and_extracted_directory_agree(tmp_path, proc0):
    out = tmp_path / "proc0"
    with zipfile.ZipFile(_archive(0)) as z:
        z.extractall(out)
    prof = rl.load(out)
    assert prof.steps == proc0.steps and prof.notes == proc0.notes and prof.plane_stats == proc0.plane_stats
    assert set(prof.hlo_texts) == set(proc0.hlo_texts)
    for col in ("name", "program", "start_ps", "dur_ps", "device", "line"):
        assert (getattr(prof.table, col) == getattr(proc0.table, col)).all(), col
    key = lambda s: (s.program, s.name, s.occurrences, s.total_time_s, s.self_time_s)  # noqa: E731
    assert sorted(map(key, op_stats(prof).op_stats)) == sorted(map(key, op_stats(proc0).op_stats))


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "rooflens.cli", *args], capture_output=True, text=True, timeout=300)


def test_bad_archives_one_sentence(tmp_path):
    not_zip = tmp_path / "not_a_zip.zip"
    not_zip.write_bytes(b"this is not a zip archive\n" * 10)
    no_parquet = tmp_path / "no_parquet.zip"
    with zipfile.ZipFile(no_parquet, "w") as z:
        z.writestr("device-metadata.parquet", b"x")
    truncated = tmp_path / "truncated.zip"
    truncated.write_bytes(_archive(0).read_bytes()[:1_000_000])
    broken_dir = tmp_path / "broken_dir"
    (broken_dir / TRACE).parent.mkdir(parents=True)
    (broken_dir / TRACE).write_bytes(b"PAR1 not really")
    # nsys-jax-combine's layout (a member that differs between its inputs, once per input: <member>/<stem>),
    # made from two real archives' ranges
    combined = tmp_path / "combined.DERIVED.zip"
    with zipfile.ZipFile(combined, "w") as out:
        for i in (0, 1):
            with zipfile.ZipFile(_archive(i)) as z:
                out.writestr(f"{TRACE}/pax_fsdp4_4proc_proc{i}", z.read(TRACE))
    for bad, words in ((not_zip, "not a zip"), (no_parquet, "without nvtx_gpu_proj_trace/trace.parquet"),
                       (truncated, "truncated zip"), (broken_dir, "damaged or truncated"),
                       (combined, "nsys-jax-combine archive of 2 processes")):
        r = _cli("report", str(bad))
        assert r.returncode == 2, (bad, r.stderr)
        err = r.stderr.strip()
        assert words in err and "Traceback" not in err and len(err.splitlines()) == 1, err


def test_l2_held_reads_explain_the_ops_faster_than_hbm(report0):
    """A layer norm reading the 25 MB residual the op before wrote runs at 2 TB/s on a 1.555 TB/s A100:
    priced with those reads from the 40 MiB L2, it is within its roofline. 39 ops were 'unreliable' with
    every operand from HBM; 3 are left (their writes, not their reads, outrun HBM)."""
    ln = next(c for c in report0.comparison if c.program == STEP and c.name == "loop_convert_fusion.28")
    assert ln.roofline_reliable and "L2" in ln.roofline_note
    assert ln.bytes == pytest.approx(12.6e6, rel=0.01) and ln.bytes_fraction_of_peak < 1.0
    bad = [c for c in report0.comparison if not c.roofline_reliable]
    assert len(bad) <= 3
    assert all((c.bytes_fraction_of_peak or 0) <= 1.0 and (c.flops_fraction_of_peak or 0) <= 1.0
               for c in report0.comparison)


# -- one process driving several GPUs; archives without device-metadata.parquet --------------------

def derive_one_process_archive(dst: Path, thread_names: bool = True, hlo: bool = True) -> Path:
    """A DERIVED 1-process × 4-GPU nsys-jax archive, made mechanically from the 4 real per-process
    archives (no public 1-process × N-GPU archive is obtainable: JAX-Toolbox's
    ``test_data/pax_fsdp4_1proc.zip`` is over the 4 MiB the snapshot store keeps). What is derived:

    * ``trace.parquet``: the 4 processes' rows, every value as recorded except PID (all process 0's),
      TID (each process's main-thread rows moved to that process's own ``XlaLauncher`` thread, as XLA
      launches each GPU's work from it when one process drives several) and RangeId/ParentId/RangeStack
      (process i's ids + i × 10⁶, so they stay unique);
    * ``thread-metadata.parquet``: the main thread and the 4 launcher threads, named as the real ones
      with ``process=i`` → ``process=0`` (left out with ``thread_names=False``);
    * no ``device-metadata.parquet`` (the older layout): the GPU comes from process 0's real
      ``dump/*.gpu_target_config.pbtxt.xz``; its optimized HLO, ``system-metadata.parquet`` and host
      ranges as recorded (the optimized HLO left out with ``hlo=False``). The 4 sessions' clocks are kept
      (not aligned)."""
    import re

    import pyarrow as pa
    import pyarrow.compute as pc

    tables, launchers, pid0 = [], [], None
    for i in range(4):
        with zipfile.ZipFile(_archive(i)) as z:
            t = pq.read_table(io.BytesIO(z.read(TRACE))).replace_schema_metadata(None)
            threads = pq.read_table(io.BytesIO(z.read("thread-metadata.parquet"))).to_pydict()
        pid = int(pc.mode(t.column("PID"))[0]["mode"].as_py())
        pid0 = pid if pid0 is None else pid0
        (name, tid), = [(n, d) for n, p, d in zip(threads["Name"], threads["PID"], threads["TID"])
                        if n.startswith("XlaLauncher:") and p == pid]
        off = i * 1_000_000
        tids = t.column("TID").to_numpy()
        stack = [None if s is None else ":".join(str(int(x) + off) if x else "" for x in s.split(":"))
                 for s in t.column("RangeStack").to_pylist()]  # ":25598:28078" (ids, ":"-joined)
        cols = {"TID": pa.array(np.where(tids == pid, tid, tids)), "PID": pa.array(np.full(t.num_rows, pid0)),
                "RangeId": pc.add(t.column("RangeId"), float(off)),
                "ParentId": pc.add(t.column("ParentId"), float(off)), "RangeStack": pa.array(stack, pa.string())}
        for col, values in cols.items():
            t = t.set_column(t.schema.get_field_index(col), col, values)
        tables.append(t)
        launchers.append((name.replace(f"process={i},", "process=0,"), tid))
    members = {TRACE: pa.concat_tables(tables)}
    if thread_names:
        members["thread-metadata.parquet"] = pa.table({
            "Name": ["main.py"] + [n for n, _ in launchers], "Priority": [0] * 5, "PID": [pid0] * 5,
            "TID": [pid0] + [t for _, t in launchers]})
    with zipfile.ZipFile(_archive(0)) as z, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as out:
        for name in z.namelist():
            wanted = r"(_gpu_after_optimizations\.hlo\.pb|\.gpu_target_config\.pbtxt)\.xz$" if hlo else \
                r"\.gpu_target_config\.pbtxt\.xz$"
            if re.search(wanted, name) or name in (
                    "system-metadata.parquet", "report_nvtx_pushpop_trace.csv.xz"):
                out.writestr(name, z.read(name))
        for name, table in members.items():
            buf = io.BytesIO()
            pq.write_table(table, buf)
            out.writestr(name, buf.getvalue())
    return dst


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    path = derive_one_process_archive(tmp_path_factory.mktemp("nsys 1proc") / "pax_fsdp4_1proc_4gpu.DERIVED.zip")
    return path, rl.load(path)


def test_one_process_driving_four_gpus_is_four_devices(one_process, four_processes):
    """Each GPU is its own device (its launcher thread says which), its 5 step-program executions are the
    5 steps (not 4 × 5), and every op's count, time and self time (nested per GPU) is what the same
    ranges give read as 4 per-process archives."""
    _, prof = one_process
    assert len(prof.hosts) == 1 and sorted(set(prof.table.device.tolist())) == [0, 1, 2, 3]
    assert [n for n, _, _ in prof.steps] == [0, 1, 2, 3, 4]
    # one sentence on the steps (the step choice's, not the reader's beside it)
    (said,) = [n for n in prof.notes if n.startswith("steps: ")]
    assert said.startswith("steps: the 5 step(s) are the executions of pjit__wrapped_step_fn")
    mine, theirs = op_stats(prof), op_stats(four_processes)
    key = lambda s: (s.program, s.name)  # noqa: E731
    got = {key(s): s for s in mine.op_stats}
    want = {key(s): s for s in theirs.op_stats}
    assert set(got) == set(want) and len(got) > 2000
    for k, s in want.items():
        g = got[k]
        assert (g.occurrences, g.devices) == (s.occurrences, s.devices), k
        assert g.total_time_s == pytest.approx(s.total_time_s, rel=1e-9), k
        assert g.self_time_s == pytest.approx(s.self_time_s, rel=1e-9, abs=1e-12), k
    by_dev = {d.device: d for d in theirs.devices}
    for d in mine.devices:
        assert (d.events, d.busy_s, d.window_s) == pytest.approx(
            (by_dev[d.device].events, by_dev[d.device].busy_s, by_dev[d.device].window_s), rel=1e-9)
    step = [s for s in mine.op_stats if s.program == STEP]
    assert {s.devices for s in step} == {4} and max(s.pct_device_time for s in mine.op_stats) <= 100


def test_the_gpu_of_an_archive_without_device_metadata_comes_from_the_xla_dump(one_process):
    _, prof = one_process
    assert prof.device_kind == "NVIDIA A100-SXM4-40GB"
    assert {k: prof.plane_stats[k] for k in ("core_count", "memory_bandwidth", "memory_size", "clock_rate",
                                             "compute_cap_major", "compute_cap_minor")} == {
        "core_count": 108, "memory_bandwidth": 1_555_200_000_000, "memory_size": 42_505_273_344,
        "clock_rate": 1_410_000, "compute_cap_major": 8, "compute_cap_minor": 0}
    assert any("gpu_target_config" in n and "no device-metadata.parquet" in n for n in prof.notes)
    assert rl.analyze(prof).chip == "a100-sxm-40gb"


def test_without_thread_names_the_threads_running_programs_are_the_gpus(tmp_path):
    prof = rl.load(derive_one_process_archive(tmp_path / "no_thread_names.DERIVED.zip", thread_names=False,
                                              hlo=False))
    assert sorted(set(prof.table.device.tolist())) == [0, 1, 2, 3] and len(prof.steps) == 5
    assert any("names no thread that launches work" in n and "4 threads" in n for n in prof.notes)
    # each GPU holds one process's ranges (13,519 of process 0, 13,516 of each other), whatever its number
    assert sorted(np.bincount(prof.table.device).tolist()) == [13516, 13516, 13516, 13519]


def test_one_process_four_gpus_through_the_cli(one_process):
    """What the command line says of it: 4 devices, 5 steps, the A100 (from the dump), no op over
    100 % of its device, control ops no share of op time (the Pax step has no while loop)."""
    import json

    path, _ = one_process
    r = _cli("report", str(path), "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["num_devices"] == 4 and sorted(d["device"] for d in rep["devices"]) == [0, 1, 2, 3]
    assert rep["steps"]["count"] == 5 and rep["chip"] == "a100-sxm-40gb"
    assert rep["device_kind"] == "NVIDIA A100-SXM4-40GB"
    # the logits GEMM runs once per step on every GPU: 5 steps per device
    (gemm,) = [o for o in rep["op_stats"] if o["program"] == STEP and o["name"] == "custom-call.219.0"]
    assert (gemm["occurrences"], gemm["devices"]) == (20, 4)
    assert max(o["pct_device_time"] for o in rep["op_stats"]) <= 100
    total = sum(o["self_time_s"] for o in rep["op_stats"])
    control = sum(o["self_time_s"] for o in rep["op_stats"] if o["category"] == "control")
    assert total > 0 and control <= 0.05 * total


def test_the_real_maxtext_archive_of_one_process_driving_four_h100s():
    """JAX-Toolbox's real MaxText FSDP=4 archive, one process driving 4 × H100 (what the derived archive above
    stands for): every Thunk range is an op event, 4 GPUs from the threads that run programs together (no
    XlaLauncher names), 5 steps of jit_train_step, the H100 from the dumped GpuTargetConfig, its collectives
    (async all-gather, reduce-scatter, all-reduce, all-to-all), and a gap the GPUs wait in together said once."""
    path = fixture_path("gpu_nvidia", "maxtext_fsdp4_h100.nsys-jax.zip")
    with zipfile.ZipFile(path) as z:
        names = pq.read_table(io.BytesIO(z.read(TRACE)), columns=["Name"]).column("Name").to_pylist()
    prof = rl.load(path)
    assert len(prof.table) == sum(1 for n in names if n and n.startswith("TSL:Thunk:")) == 20733
    assert sorted(set(prof.table.device.tolist())) == [0, 1, 2, 3]
    assert prof.device_kind == "NVIDIA H100 80GB HBM3" and prof.platform == "gpu"
    assert any("gpu_target_config" in n and "no device-metadata.parquet" in n for n in prof.notes)
    assert any("names no thread that launches work" in n and "4 threads" in n for n in prof.notes)
    rep = rl.analyze(prof)
    assert rep.chip == "h100-sxm" and rep.num_devices == 4
    assert rep.steps.program == "jit_train_step" and rep.stats.steps.count == 5
    kinds = {c.opcode.removesuffix("-start") for c in rep.comparison if c.category == "collective"}
    assert {"all-gather", "reduce-scatter", "all-reduce", "all-to-all"} <= kinds
    (over,) = [f for f in rep.findings if f.rule == "overheads"]
    assert len(over.evidence) == len(set(over.evidence))  # the same gap on 3 GPUs: one line naming them
    assert any(e.startswith("gap inside an execution on devices 0, 2, 3: 2.32 s") for e in over.evidence)


def test_gpu_target_config_of_xla_names_the_chip():
    """XLA's own H100 spec (a GpuTargetConfigProto in text format) gives the H100, by name and, without
    it, by its properties; the A100 archive's dumped config says what its device-metadata says."""
    from rooflens.hardware.infer import infer_chip
    from rooflens.trace.formats.nsys.archive import DEVICE_METADATA, Archive, gpu_info, target_config

    name, stats = target_config(fixture_path("gpu_nvidia", "xla_gpu_specs", "h100_sxm.txtpb").read_text())
    assert name == "NVIDIA H100 80GB HBM3"
    assert stats == {"device_name": name, "device_vendor": "NVIDIA", "core_count": 132,
                     "memory_bandwidth": 3_352_320_000_000, "memory_size": 84_942_979_072, "clock_rate": 1_980_000,
                     "l2_cache_size": 52_428_800, "compute_cap_major": 9, "compute_cap_minor": 0}
    assert infer_chip(name, stats)[0].name == "h100-sxm"
    unnamed = {k: v for k, v in stats.items() if k != "device_name"}
    chip, why = infer_chip("GPU", unnamed)
    assert chip.name == "h100-sxm" and "132 cores" in why
    # XLA's 2023 spec layout: the compute capability first, device_description_str a model string, no name
    name, stats = target_config(fixture_path("gpu_nvidia", "xla_gpu_specs", "a100_hlo_opt_2023.txtpb").read_text())
    assert name == "" and (stats["compute_cap_major"], stats["compute_cap_minor"], stats["core_count"]) == (8, 0, 56)
    archive = Archive(_archive(0))
    try:
        text = lzma.decompress(archive.read("dump/module_0040.pjit__wrapped_step_fn.gpu_target_config.pbtxt.xz"))
        name, stats = target_config(text.decode())
        info, _ = gpu_info(archive)
    finally:
        archive.close()
    assert info.source == DEVICE_METADATA and name == info.name == "NVIDIA A100-SXM4-40GB"
    assert stats == {k: v for k, v in info.plane_stats.items() if k in stats}


def test_thunk_names_are_the_optimized_hlos_own(proc0):
    """Every op name of every program is an instruction of the program's optimized HLO as dumped, XLA's
    suffixes included (``custom-call.219.0``, ``cublas-gemm.2.0``, ``reduce.3509.1``): joined as they are."""
    from rooflens.trace.formats.nsys.reader import is_collective

    names = {(proc0.table.programs[p], proc0.table.names[n]) for p, n in proc0.table.pairs().tolist()}
    with_hlo = [(p, n) for p, n in names if proc0.module_for(p) is not None]
    assert len(with_hlo) > 2500 and all(proc0.module_for(p).find(n) is not None for p, n in with_hlo)
    assert {"cublas-gemm.2.0", "custom-call.219.0"} <= {n for _, n in with_hlo}
    assert not any("not instructions of their program" in n for n in proc0.notes)
    # without the HLO, a collective's name still says what it is, a loop's copies included
    start = next(n for _, n in with_hlo if n.startswith("all-gather-start"))
    assert all(is_collective({}, start + s) for s in ("", ".double_buffer_clone", ".peeled_double_buffer"))
    assert not is_collective({}, "cublas-gemm.2.0.double_buffer_clone")


def test_the_a100_archives_hold_no_control_op_ranges(proc0):
    """The Pax step has no while/conditional/call thunk (XLA unrolled nothing into loops here): no
    control op has time of its own, and every op nests within its own GPU's lanes."""
    from rooflens.trace.stats import line_groups, self_times_ps

    opcodes = {proc0.module_for(proc0.table.programs[p]).find(proc0.table.names[n]).opcode
               for p, n in proc0.table.pairs().tolist() if proc0.module_for(proc0.table.programs[p]) is not None}
    assert not opcodes & {"while", "conditional", "call"}
    t = proc0.table
    self_ps = self_times_ps(t, line_groups(t))
    for d in op_stats(proc0).devices:
        assert self_ps[t.device == d.device].sum() * 1e-12 <= d.window_s


@pytest.mark.parametrize("layout", ["2024.5", "2026.1"])
def test_newer_nsight_column_layouts_read_the_same(tmp_path, layout):
    """Nsight 2024.5 on writes ``Text``/``Start``/``End``/``Range ID``/``Parent ID`` (names without the ``TSL:``
    domain), 2026.1 adds a ``Domain`` column (as nsys-jax's data_loaders.py reads them): proc 0's ranges
    renamed into each layout (a DERIVED archive: same rows and values; the HLO left out of both) read as
    the original."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from rooflens.trace.formats.nsys.reader import read_nsys

    with zipfile.ZipFile(_archive(0)) as z:
        t = pq.read_table(io.BytesIO(z.read(TRACE))).replace_schema_metadata(None)
        keep = {n: z.read(n) for n in z.namelist() if n != TRACE and not n.endswith(".hlo.pb.xz")}
    domain = pc.utf8_slice_codeunits(t.column("Name"), 0, 4)  # "TSL:" / "NCCL"
    cols = {"Text": pc.replace_substring_regex(t.column("Name"), r"^(TSL|NCCL):", ""),
            "Start": t.column("Projected Start"),
            "End": pc.add(t.column("Projected Start"), t.column("Projected Duration")),
            "Children Count": t.column("NumChild"), "Range ID": t.column("RangeId"), "Parent ID": t.column("ParentId"),
            "PID": t.column("PID"), "TID": t.column("TID"), "Stack Level": t.column("Lvl"), "Rank": t.column("Rank")}
    if layout == "2026.1":
        none = pa.scalar(None, pa.string())
        cols["Domain"] = pc.if_else(pc.equal(domain, "TSL:"), "TSL", pc.if_else(pc.equal(domain, "NCCL"), "NCCL", none))
    reads = []
    for name, table in (("original", t), (layout, pa.table(cols))):
        buf = io.BytesIO()
        pq.write_table(table, buf)
        dst = tmp_path / f"proc0_{name}.DERIVED.zip"
        with zipfile.ZipFile(dst, "w") as out:
            out.writestr(TRACE, buf.getvalue())
            for n, data in keep.items():
                out.writestr(n, data)
        reads.append(read_nsys(dst))
    want, got = reads
    assert len(got.table) == len(want.table) > 13000 and got.steps == want.steps and len(got.steps) == 5
    for col in ("name", "program", "start_ps", "dur_ps", "device", "line"):
        assert (getattr(got.table, col) == getattr(want.table, col)).all(), col
    assert got.table.names == want.table.names and got.table.programs == want.table.programs
    assert [n for n in got.notes if "autotuner" in n] == [n for n in want.notes if "autotuner" in n] != []


# -- the host's dispatches against the GPU's executions ------------------------------------------------------------

def _host_step_dispatches(zip_path: Path) -> list[int]:
    """The starts (ns) of the step program's XlaModule ranges on the host, straight from the archive's host CSV."""
    import pyarrow.csv as pcsv

    with zipfile.ZipFile(zip_path) as z:
        t = pcsv.read_csv(io.BytesIO(lzma.decompress(z.read("report_nvtx_pushpop_trace.csv.xz")))).to_pydict()
    step = f"TSL:XlaModule:#hlo_module={STEP},"
    return sorted(s for s, n in zip(t["Start (ns)"], t["Name"]) if (n or "").startswith(step))


def _host_end(zip_path: Path) -> int:
    import pyarrow.csv as pcsv

    with zipfile.ZipFile(zip_path) as z:
        t = pcsv.read_csv(io.BytesIO(lzma.decompress(z.read("report_nvtx_pushpop_trace.csv.xz"))))
    return max(t.column("End (ns)").to_pylist())


def cut_archive(dst: Path, drop: int = 2, stopped: bool = True) -> Path:
    """A DERIVED archive: process 0's, its ``trace.parquet`` less the GPU projection of the step program's last
    ``drop`` executions, every other member (the host-side CSV included) as recorded. ``stopped``: as if the trace
    had stopped while they were queued, so the GPU ran nothing from the first of them on (every projected range
    from its start is dropped: the jit__psum the host dispatched after them too); else only their own ranges (the
    XlaModule range and every range under it, by ``RangeStack``) go, and the GPU still runs what came after."""
    import pyarrow.compute as pc

    with zipfile.ZipFile(_archive(0)) as z:
        t = pq.read_table(io.BytesIO(z.read(TRACE))).replace_schema_metadata(None)
        keep = {n: z.read(n) for n in z.namelist() if n != TRACE}
    d = t.to_pydict()
    runs = sorted((s, rid) for n, s, rid, p in zip(d["Name"], d["Projected Start"], d["RangeId"], d["ParentId"])
                  if (n or "").startswith(f"TSL:XlaModule:#hlo_module={STEP},") and p is None)
    assert len(runs) == 5
    if stopped:
        gone = pc.greater_equal(t.column("Projected Start"), runs[-drop][0])
    else:
        stacks = t.column("RangeStack")
        gone = pc.or_(*[pc.starts_with(stacks, f":{int(rid)}") for _, rid in runs[-drop:]])
    t = t.filter(pc.invert(gone))
    buf = io.BytesIO()
    pq.write_table(t, buf)
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as out:
        out.writestr(TRACE, buf.getvalue())
        for n, data in keep.items():
            out.writestr(n, data)
    return dst


def test_every_dispatch_of_the_real_archives_ran(proc0, report0, four_processes, one_process):
    """The host's XlaModule ranges (report_nvtx_pushpop_trace.csv.xz) are its dispatches, keyed by the program
    they name; the autotuner's candidate modules (under XlaCompile) are not. The Pax run blocked on its steps:
    every dispatch ran on its GPU inside the trace, on one archive, four, and one process driving four GPUs."""
    from rooflens.trace.dispatch import program_of
    from rooflens.trace.formats.nsys.reader import read_nsys

    raw = read_nsys(_archive(0))
    host = _host_step_dispatches(_archive(0))
    assert len(host) == 5 and raw.dispatches[f"{STEP}(40)"].tolist() == [s * 1000 for s in host]
    # the 33 top-level XlaModule ranges of the main thread; none of the 290 the autotuner ran while compiling
    assert sum(len(d) for d in raw.dispatches.values()) == 33 and len(raw.dispatches["jit__psum(1)"]) == 4
    assert not any(k.startswith(("gemm_fusion_dot", "extracted")) for k in raw.dispatches)
    with zipfile.ZipFile(_archive(0)) as z:  # where the trace ends: its last range, host-side or projected
        gpu = pq.read_table(io.BytesIO(z.read(TRACE))).to_pydict()
    gpu_end = max(s + d for s, d in zip(gpu["Projected Start"], gpu["Projected Duration"]) if s is not None)
    assert raw.end_ps == max(gpu_end, _host_end(_archive(0))) * 1000
    # the dispatch names its program: matched to it (shown plainly) and to no other compilation of its name
    t = proc0.table
    assert program_of(f"{STEP}(40)", t.programs) == [t.programs.index(STEP)]
    assert program_of("jit__psum(1)", t.programs) == [t.programs.index("jit__psum(1)")]
    for prof in (proc0, four_processes, one_process[1]):
        assert prof.dispatches_of and prof.unran == () and not any("dispatches of" in n for n in prof.notes)
    assert "async-tail" not in {f.rule for f in report0.findings}


def test_one_process_driving_several_gpus_dispatches_once_per_execution():
    """One process driving N GPUs pushes an XlaModule range per GPU for each execution, on each GPU's launcher
    thread: a program's dispatches are one thread's. The 4 real processes' host ranges read as one process's
    threads (each process's main thread one launcher thread) give the step program 5 dispatches, not 20."""
    import pyarrow.csv as pcsv

    from rooflens.trace.formats import tsl

    names, threads, starts, ends = [], [], [], []
    for i in range(4):
        with zipfile.ZipFile(_archive(i)) as z:
            t = pcsv.read_csv(io.BytesIO(lzma.decompress(z.read("report_nvtx_pushpop_trace.csv.xz")))).to_pydict()
        names += [n or "" for n in t["Name"]]
        threads += [i] * len(t["Name"])
        starts += t["Start (ns)"]
        ends += t["End (ns)"]
    words = sorted(set(names))
    code = np.searchsorted(np.asarray(words, dtype=object), np.asarray(names, dtype=object))
    got = tsl.dispatches(tsl.range_kinds(words), code, np.asarray(threads), np.asarray(starts) * 1000,
                         np.asarray(ends) * 1000)
    assert sum(n.startswith(f"TSL:XlaModule:#hlo_module={STEP},") for n in names) == 20  # 5 on each thread
    # the tie goes to the first thread: process 0's main thread, whose ranges these are
    assert got[f"{STEP}(40)"].tolist() == [s * 1000 for s in _host_step_dispatches(_archive(0))]
    assert not any(k.startswith(("gemm_fusion_dot", "extracted")) for k in got)


def test_a_trace_stopped_with_two_steps_queued_says_so(tmp_path, proc0):
    """Process 0's real archive cut as if the trace stopped while its last 2 steps were queued (the GPU runs
    nothing from the 4th step on; the host CSV as recorded): 2 of its 5 dispatches never ran, said in one note
    and an async-tail finding (through the CLI, --json), and the steps are the 3 executions that ran."""
    import json

    path = cut_archive(tmp_path / "pax proc0 stopped.DERIVED.zip")
    r = _cli("report", str(path), "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    unran = {u["function"]: u for u in rep["unran"]}
    step = unran[f"{STEP}(40)"]
    assert (step["program"], step["dispatched"], step["ran"], step["queued"]) == (STEP, 5, 3, True)
    assert (unran["jit__psum(1)"]["dispatched"], unran["jit__psum(1)"]["ran"]) == (4, 3)  # dispatched after them
    (tail,) = [f for f in rep["findings"] if f["rule"] == "async-tail"]
    assert any(e.startswith(f"2 of 5 dispatches of {STEP}(40) never ran") for e in tail["evidence"]), tail
    assert "block_until_ready" in tail["fix"]
    notes = [n for n in rep["notes"] if n.startswith(f"2 of 5 dispatches of {STEP}(40)")]
    assert len(notes) == 1 and "still queued" in notes[0] and "block_until_ready" in notes[0]
    # steps judged on the 3 executions that ran: the whole archive's first 3, none left out as unrun
    assert (rep["steps"]["count"], rep["steps"]["steps"], rep["steps"]["breakdown"]["program"]) == (3, [0, 1, 2], STEP)
    assert not any("left out of the steps" in n for n in rep["notes"])
    assert rep["steps"]["times_s"][:2] == pytest.approx([(e - s) * 1e-9 for _, s, e in proc0.steps[:2]], rel=1e-9)


def test_dispatches_whose_executions_are_missing_though_later_work_ran_are_no_tail(tmp_path):
    """Only the last 2 step executions' own ranges taken out, the jit__psum dispatched after them still on the
    GPU: the device ran later work, so they were not queued at the trace's end (no async tail); said plainly."""
    prof = rl.load(cut_archive(tmp_path / "pax proc0 holes.DERIVED.zip", stopped=False))
    (u,) = prof.unran
    assert (u.function, u.dispatched, u.ran, u.queued) == (f"{STEP}(40)", 5, 3, False)
    assert any(n.startswith(f"2 of 5 dispatches of {STEP}(40)") and "ran work dispatched after them" in n
               for n in prof.notes)
    assert len(prof.steps) == 3 and "async-tail" not in {f.rule for f in rl.analyze(prof).findings}
