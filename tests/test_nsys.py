"""nsys-jax archives (JAX on 4 × A100 through Nsight Systems): the real Pax FSDP fixtures.

Expected counts and times are computed here, independently of the reader, from the archive's own
projected ranges with pyarrow (thunk ranges whose parent is a top-level XlaModule range).
"""

import io
import subprocess
import sys
import zipfile
from collections import Counter, defaultdict
from pathlib import Path

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


def test_four_archives_are_four_hosts():
    d = fixture_path(*DIR)
    prof = rl.load(d)
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
    for bad, words in ((not_zip, "not a zip"), (no_parquet, "without nvtx_gpu_proj_trace/trace.parquet"),
                       (truncated, "truncated zip"), (broken_dir, "damaged or truncated")):
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
