"""Plain Nsight Systems: SQLite exports and raw ``.nsys-rep`` reports.

The PyTorch exports are real (``nsys export --type sqlite`` of nsys 2026.2 on 2 × H100); every expected
count, time and NVTX context here comes from the export itself through SQL, independently of the
reader. The JAX export is DERIVED from the real nsys-jax archive (tools/derive_nsys_sqlite.py, see
tests/fixtures/SOURCES.md): read through it, a JAX program must be what the nsys-jax reader makes of
the same archive.
"""

import importlib
import json
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

import rooflens as rl
from rooflens.errors import RooflensError
from rooflens.trace import background, discover
from rooflens.trace.cache import identity, location, read_cached
from rooflens.trace.formats.nsys.reader import read_nsys
from rooflens.trace.formats.nsys_sqlite.reader import read_nsys_sqlite
from rooflens.trace.formats.xspace.hlo_protos import print_modules
from rooflens.trace.stats import op_stats
from tests.conftest import fixture_path

SQLITE = ("gpu_nvidia", "nsys_sqlite")
TORCH_1S, TORCH_MFU = "nsysai_pytorch_h100x2_1s.sqlite", "nsysai_pytorch_h100x2_mfu_before.sqlite"
JAX = "pax_fsdp4_proc0.DERIVED.sqlite"
ARCHIVE = ("gpu_nvidia", "nsys_jax_pax_fsdp4_a100", "pax_fsdp4_4proc_proc0.zip")
REPORTS = ("gpu_nvidia", "nsys_rep")
STEP = "pjit__wrapped_step_fn"


def _export(name: str) -> Path:
    return fixture_path(*SQLITE, name)


def _sql(path: Path, query: str) -> list[tuple]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        return con.execute(query).fetchall()


def _kernel_sums(path: Path) -> dict[str, tuple[int, int]]:
    """shortName → (count, total ns), the export's own sums."""
    rows = _sql(path, "SELECT s.value, count(*), sum(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                      "JOIN StringIds s ON s.id = k.shortName GROUP BY k.shortName")
    return {n: (c, t) for n, c, t in rows}


def _env(tmp: Path, path_dirs: str | None = None) -> dict:
    env = dict(os.environ, ROOFLENS_CACHE_DIR=str(tmp / "cache"))
    if path_dirs is not None:
        env["PATH"] = path_dirs
    return env


@pytest.fixture(scope="module")
def torch_mfu():
    return rl.load(_export(TORCH_MFU))


@pytest.fixture(scope="module")
def jax_derived():
    return rl.load(_export(JAX))


@pytest.fixture(scope="module")
def archive():
    """The nsys-jax reader's view of the archive the JAX export was derived from."""
    return read_nsys(fixture_path(*ARCHIVE))


@pytest.mark.parametrize("name", [TORCH_1S, TORCH_MFU])
def test_two_devices_and_each_kernels_count_and_time_equal_the_exports_own_sums(name):
    path = _export(name)
    prof = rl.load(path)
    assert sorted(set(prof.table.device.tolist())) == [0, 1] and prof.platform == "gpu"
    stats = {s.name: s for s in op_stats(prof).op_stats}
    want = _kernel_sums(path)
    top = sorted(want, key=lambda n: -want[n][1])[:10]
    for kernel in top:
        count, total_ns = want[kernel]
        assert stats[kernel].occurrences == count, kernel
        assert stats[kernel].total_time_s == pytest.approx(total_ns * 1e-9, rel=1e-9), kernel
        assert stats[kernel].devices == len(_sql(path, "SELECT DISTINCT k.deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                                                       f"JOIN StringIds s ON s.id = k.shortName "
                                                       f"WHERE s.value = '{kernel}'"))
    # every kernel, memcpy and memset is an event
    n = sum(_sql(path, f"SELECT count(*) FROM {t}")[0][0]
            for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"))
    assert len(prof.table) == n
    assert any("no roofline" in note for note in prof.notes)  # said once: no HLO, no roofline
    assert sum("no roofline" in note for note in prof.notes) == 1 and not any("no HLO for" in n for n in prof.notes)


def test_nccl_kernels_are_collectives_and_memcpy_is_a_transfer(torch_mfu):
    path = _export(TORCH_MFU)
    stats = {s.name: s for s in op_stats(torch_mfu).op_stats}
    nccl = [n for n in _kernel_sums(path) if n.startswith("nccl")]
    assert nccl and all(stats[n].category == "collective" for n in nccl)
    (h2d_count, h2d_ns), = _sql(path, "SELECT count(*), sum(end - start) FROM CUPTI_ACTIVITY_KIND_MEMCPY "
                                      "WHERE copyKind = 1")
    h2d = stats["[CUDA memcpy Host-to-Device]"]
    assert h2d.category == "host transfer" and h2d.occurrences == h2d_count
    assert h2d.total_time_s == pytest.approx(h2d_ns * 1e-9, rel=1e-9)
    assert stats["[CUDA memcpy Device-to-Device]"].category == "copy/transpose"
    rep = rl.analyze(torch_mfu, chip="h100-sxm")  # 2 × H100 (SOURCES.md); the export does not say
    assert rep.stats.by_category_s["collective"] == pytest.approx(sum(stats[n].self_time_s for n in nccl))
    assert rep.stats.by_category_s["host transfer"] > 0


def _sql_scope(path: Path, kernel: str) -> str:
    """The NVTX range path (outermost first) a kernel's launches spent the most GPU time under, by SQL alone:
    the launching call (same process and correlationId) and the push/pop ranges open on its thread then.
    A ``[CUDA memcpy …]`` name stands for the host-to-device copies and their launching calls."""
    if kernel == "[CUDA memcpy Host-to-Device]":
        launches = _sql(path, """
            SELECT m.end - m.start, r.globalTid, r.start FROM CUPTI_ACTIVITY_KIND_MEMCPY m
            JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = m.correlationId
                 AND r.globalTid / 16777216 = m.globalPid / 16777216 WHERE m.copyKind = 1""")
    else:
        launches = _sql(path, f"""
            SELECT k.end - k.start, r.globalTid, r.start FROM CUPTI_ACTIVITY_KIND_KERNEL k
            JOIN StringIds s ON s.id = k.shortName
            JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
                 AND r.globalTid / 16777216 = k.globalPid / 16777216
            WHERE s.value = '{kernel}'""")
    assert launches, f"no launching call found for {kernel}"
    by_path: dict[str, int] = defaultdict(int)
    for dur, tid, t in launches:
        names = _sql(path, f"""
            SELECT coalesce(n.text, s.value) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
            WHERE n.eventType = 59 AND n.globalTid = {tid} AND n.start <= {t} AND n.end >= {t}
            ORDER BY n.start, n.end DESC""")
        cut = [n[0].split(", seq = ")[0].split(", op_id = ")[0] for n in names]
        by_path["/".join(cut)] += dur
    return max(by_path, key=by_path.get) if by_path else ""


@pytest.mark.parametrize("kernel", ["flash_fwd_kernel", "ncclDevKernel_SendRecv", "vectorized_layer_norm_kernel",
                                    "[CUDA memcpy Host-to-Device]"])
def test_each_kernels_scope_is_the_nvtx_ranges_open_at_its_launch(torch_mfu, kernel):
    path = _export(TORCH_MFU)
    stats = {s.name: s for s in op_stats(torch_mfu).op_stats}
    want = _sql_scope(path, kernel)  # the transfers have launching calls too, under aten::to ranges
    assert want, kernel
    assert stats[kernel].named_scope == want, (kernel, stats[kernel].named_scope, want)


def test_report_json_through_the_cli(tmp_path):
    path = _export(TORCH_1S)
    r = subprocess.run([sys.executable, "-m", "rooflens.cli", "report", str(path), "--json"], capture_output=True,
                       text=True, env=_env(tmp_path), timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    data = json.loads(r.stdout)
    names = {s["name"]: s for s in data["op_stats"]}
    want = _kernel_sums(path)
    top = max(want, key=lambda n: want[n][1])
    assert names[top]["occurrences"] == want[top][0]
    assert names["[CUDA memcpy Host-to-Device]"]["category"] == "host transfer"
    assert data["num_devices"] == 2 and data["platform"] == "gpu"
    # 2,184 kernels and transfers per GPU in one second, half under 2.4 µs: judged over the capture (no program)
    tiny = [f for f in data["findings"] if f["rule"] == "tiny-ops"]
    assert len(tiny) == 1 and "vectorized_elementwise_kernel" in str(tiny[0])


def test_an_nsys_rep_without_nsys_is_one_sentence_naming_the_export(tmp_path):
    rep = fixture_path(*REPORTS, "apax_jax_rtx4070_laptop.nsys-rep")
    no_nsys = str(Path(sys.executable).parent)  # this Python's directory, and nothing else
    assert shutil.which("nsys", path=no_nsys) is None
    r = subprocess.run([sys.executable, "-m", "rooflens.cli", "report", str(rep)], capture_output=True, text=True,
                       env=_env(tmp_path, no_nsys), timeout=300)
    assert r.returncode == 2 and r.stdout == ""
    (line,) = r.stderr.strip().splitlines()
    sqlite_name = str(rep.with_suffix("").with_suffix(".sqlite"))  # beside it, named after it (quoted if need be)
    assert "nsys export --type sqlite" in line and f"--output {shlex.join([sqlite_name, str(rep)])}" in line
    assert f"rooflens report {shlex.quote(sqlite_name)}" in line and "Traceback" not in r.stderr


_FAKE_NSYS = """import shutil, sys
args = sys.argv[1:]
open({log!r}, "w").write("\\n".join(args))
assert args[:3] == ["export", "--type", "sqlite"] and args[3] == "--output"
shutil.copyfile({export!r}, args[4])
"""


def test_an_nsys_rep_is_exported_into_the_user_cache_never_beside_it(tmp_path):
    """With ``nsys`` on PATH the report is exported to a temporary file in the user cache and read. Nsight
    Systems is not installed here: an executable named nsys stands in for it and writes the real export of
    the derived JAX file, so what is checked is rooflens's side (the command, where, what is left)."""
    reports = tmp_path / "reports"
    reports.mkdir()
    rep = reports / "run.nsys-rep"
    shutil.copyfile(fixture_path(*REPORTS, "apax_jax_rtx4070_laptop.nsys-rep"), rep)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "nsys-args.txt"
    (bindir / "nsys.py").write_text(_FAKE_NSYS.format(log=str(log), export=str(_export(JAX))))
    (bindir / "nsys").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(bindir / "nsys.py"))} "$@"\n')
    (bindir / "nsys").chmod(0o755)
    before = sorted(p.name for p in reports.iterdir())
    r = subprocess.run([sys.executable, "-m", "rooflens.cli", "report", str(rep), "--json", "--no-calibrate"],
                       capture_output=True, text=True, env=_env(tmp_path, f"{bindir}:{os.environ['PATH']}"),
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    args = log.read_text().splitlines()
    out = Path(args[4])
    assert args[-1] == str(rep) and out.name == "run.sqlite" and (tmp_path / "cache") in out.parents
    assert not out.exists()  # the temporary export is gone: the columnar cache holds what was read
    assert sorted(p.name for p in reports.iterdir()) == before
    data = json.loads(r.stdout)
    assert data["hosts"] == ["run"] and {s["program"] for s in data["op_stats"]} >= {STEP}


def test_the_jax_program_is_what_the_nsys_jax_reader_makes_of_the_same_archive(jax_derived, archive):
    derived = read_nsys_sqlite(_export(JAX))

    def ops(raw):
        t, out = raw.table, defaultdict(lambda: [0, 0])
        for p, n, d in zip(t.program.tolist(), t.name.tolist(), t.dur_ps.tolist()):
            out[(t.programs[p], t.names[n])][0] += 1
            out[(t.programs[p], t.names[n])][1] += d
        return out

    mine, theirs = ops(derived), ops(archive)
    assert {p for p, _ in mine} == {p for p, _ in theirs} and STEP in {p for p, _ in mine}
    same = set(mine) & set(theirs)
    assert len(same) > 2700 and all(mine[k] == theirs[k] for k in same)
    # the nsys-jax reader names a collective wrapped in an async-start by the wrapper (it reads the HLO);
    # the runtime's ranges name the wrapped instruction: the same executions under the two names
    assert sorted(v for k, v in mine.items() if k not in theirs) == sorted(v for k, v in theirs.items()
                                                                            if k not in mine)
    assert all(n.startswith("reduce-scatter.") for _, n in set(mine) - same)
    assert derived.steps == archive.steps and len(derived.steps) == 5
    assert any("autotuner measurements" in n and "308 kernels" in n for n in derived.notes)
    assert derived.plane_stats["core_count"] == 108 and derived.device_kind == "NVIDIA A100-SXM4-40GB"
    assert [h[0] for h in derived.host_events] == [h[0] for h in archive.host_events]
    assert jax_derived.steps and jax_derived.hosts == ["pax_fsdp4_proc0.DERIVED"]


def test_the_jax_program_priced_with_the_archives_hlo_dump(tmp_path, archive):
    """--hlo DUMP: the archive's optimized HLO of the step program, printed as text, names, categorises and
    prices the export's ops as the nsys-jax reader's own tests expect of the archive (test_nsys.py)."""
    dump = tmp_path / "dump"
    dump.mkdir()
    (key,) = [k for k in archive.hlo_protos if k.startswith(STEP + "(")]  # its program id: the dump's module_0040
    text = print_modules({key: archive.hlo_protos[key]})[key]
    (dump / f"module_0040.{STEP}.sm_8.0_gpu_after_optimizations.txt").write_text(text)
    prof = rl.load(_export(JAX), hlo_dir=dump)
    module = prof.module_for(STEP)
    ops = {s.name for s in op_stats(prof).op_stats if s.program == STEP}
    unknown = {n for n in ops if module.find(n) is None}
    assert len(ops) > 2000 and unknown == {f"reduce-scatter.{k}" for k in range(131, 135)}  # the wrapped four
    rep = rl.analyze(prof)
    assert rep.chip == "a100-sxm-40gb" and rep.steps.program == STEP and rep.steps.steps == 5
    step = [c for c in rep.comparison if c.program == STEP and c.ratio is not None]
    gemms = [c for c in step if c.category == "matmul" and c.opcode == "custom-call"]
    assert len(step) >= 20 and len(gemms) >= 20
    top = max(gemms, key=lambda c: c.total_time_s)  # the 8192 x 768 x 50304 logits GEMM
    assert top.bound == "compute" and 1.0 < top.ratio < 1.5
    assert any(c.category == "collective" and c.name.startswith("all-gather-start") for c in step)


def test_an_export_beside_its_report_is_read_and_other_sqlite_files_are_not_profiles(tmp_path):
    run = tmp_path / "run dir"
    run.mkdir()
    shutil.copyfile(_export(TORCH_1S), run / "node0.sqlite")
    shutil.copyfile(fixture_path(*REPORTS, "alpa_jax_rtx3090_2023_no_xla_ranges.nsys-rep"), run / "node0.nsys-rep")
    with sqlite3.connect(run / "notes.sqlite") as con:
        con.execute("CREATE TABLE t (a)")
    _, files = discover.find([str(run)])
    assert [(Path(f.path).name, f.host) for f in files] == [("node0.sqlite", "node0")]
    with pytest.raises(RooflensError, match="not an Nsight Systems export"):
        rl.load(run / "notes.sqlite")


def test_a_second_read_comes_from_the_cache(tmp_path, monkeypatch):
    path = tmp_path / "export.sqlite"
    shutil.copyfile(_export(TORCH_MFU), path)
    before = sorted(p.name for p in tmp_path.iterdir())
    first = read_cached(path)
    background.flush()
    assert location(identity(path)).is_file() and sorted(p.name for p in tmp_path.iterdir()) == before

    def no_decode(*a, **k):
        raise AssertionError("decoded again")

    monkeypatch.setattr(importlib.import_module("rooflens.trace.formats.nsys_sqlite.reader"), "read_nsys_sqlite",
                        no_decode)
    again = read_cached(path)
    for col in ("device", "line", "name", "program", "start_ps", "dur_ps"):
        assert np.array_equal(getattr(first.table, col), getattr(again.table, col)), col
    assert again.table.op_meta == first.table.op_meta and again.notes == first.notes


@pytest.mark.parametrize("name", [TORCH_MFU, JAX])
def test_the_innermost_open_range_equals_a_search_of_every_range(name):
    """Nest (sorted ranges, depths, parents, a walk up) against the definition: of the ranges open at t on
    the thread, the one that started last (and of those, the shortest)."""
    from rooflens.trace.formats.nsys_sqlite import db as D
    from rooflens.trace.formats.nsys_sqlite import tables as T
    from rooflens.trace.formats.nsys_sqlite.nest import Nest

    with D.Export(_export(name)) as db:
        r = T.ranges(db, 1 << 62)
    nest = Nest(r.thread, r.start, r.end)
    rng = np.random.default_rng(0)
    pick = rng.choice(len(r), 400)
    thread, t = r.thread[pick], r.start[pick] + rng.integers(-5000, 5000, len(pick))
    got = nest.innermost(thread, t)
    for i in range(len(pick)):
        open_ = np.flatnonzero((r.thread == thread[i]) & (r.start <= t[i]) & (r.end >= t[i]) & (r.end > r.start))
        if not len(open_):
            assert got[i] == -1
            continue
        want = open_[np.lexsort((r.end[open_] - r.start[open_], -r.start[open_]))][0]
        found = nest.rows[got[i]]
        assert (r.start[found], r.end[found]) == (r.start[want], r.end[want])
    assert nest.depth.max() >= 3  # nested: PyTorch's aten ranges, XLA's module → op → NCCL call


# -- the host's dispatches against the GPU's executions ------------------------------------------------------------

def test_every_dispatch_of_the_jax_export_ran_and_reads_as_the_archives(jax_derived, archive):
    """The XlaModule ranges in NVTX_EVENTS on the launching thread are the host's dispatches, as the nsys-jax
    reader reads them from the same host ranges in the archive; every one ran (the Pax run blocked)."""
    derived = read_nsys_sqlite(_export(JAX))
    assert {k: v.tolist() for k, v in derived.dispatches.items()} == \
        {k: v.tolist() for k, v in archive.dispatches.items()}
    steps = _sql(_export(JAX), "SELECT n.start FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId WHERE s.value "
                               f"LIKE 'XlaModule:#hlo_module={STEP},%' ORDER BY n.start")
    assert derived.dispatches[f"{STEP}(40)"].tolist() == [s * 1000 for (s,) in steps] and len(steps) == 5
    (last,) = _sql(_export(JAX), 'SELECT max(k."end"), (SELECT max(n."end") FROM NVTX_EVENTS n) '
                                 "FROM CUPTI_ACTIVITY_KIND_KERNEL k")
    assert derived.end_ps == max(last) * 1000
    assert jax_derived.unran == () and not any("dispatches of" in n for n in jax_derived.notes)
    assert "async-tail" not in {f.rule for f in rl.analyze(jax_derived).findings}


def test_an_export_stopped_with_two_steps_queued_says_so(tmp_path, jax_derived):
    """The JAX export as if the trace had stopped while the step program's last 2 executions were queued: no GPU
    activity from the 4th one's first kernel on (the host's ranges and calls as recorded). 2 of the 5 dispatches
    never ran, in a note and an async-tail finding; the steps are the 3 executions that ran."""
    cut = tmp_path / "pax stopped.DERIVED.sqlite"
    shutil.copy(_export(JAX), cut)
    with sqlite3.connect(cut) as con:  # the 4th step execution: its first kernel, launched inside its range
        con.execute(f"""DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE start >= (
            SELECT min(k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
              ON r.correlationId = k.correlationId
            WHERE r.start >= (SELECT n.start FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId
                              WHERE s.value LIKE 'XlaModule:#hlo_module={STEP},%' ORDER BY n.start LIMIT 1 OFFSET 3))""")
    prof = rl.load(cut)
    step = next(u for u in prof.unran if u.function == f"{STEP}(40)")
    assert (step.program, step.dispatched, step.ran, step.queued) == (STEP, 5, 3, True)
    assert any(n.startswith(f"2 of 5 dispatches of {STEP}(40)") and "block_until_ready" in n for n in prof.notes)
    rep = rl.analyze(prof)
    (tail,) = [f for f in rep.findings if f.rule == "async-tail"]
    assert any(e.startswith(f"2 of 5 dispatches of {STEP}(40)") for e in tail.evidence)
    assert [n for n, _, _ in prof.steps] == [0, 1, 2] and rep.steps.steps == 3 and rep.steps.program == STEP
    assert [s for _, s, _ in prof.steps] == [s for _, s, _ in jax_derived.steps[:3]]


# -- the columnar read: ADBC into Arrow, or sqlite3 where that driver is missing ------------------------------------

def _raw_columns(raw) -> dict:
    t = raw.table
    cols = {c: getattr(t, c).tolist() for c in ("host", "device", "line", "name", "program", "start_ps", "dur_ps",
                                                "step", "copy_bytes", "host_pinned") if getattr(t, c) is not None}
    return {**cols, "names": t.names, "programs": t.programs, "lines": t.lines, "op_meta": t.op_meta,
            "steps": raw.steps, "notes": raw.notes, "host_events": raw.host_events, "end_ps": raw.end_ps,
            "events_total": raw.events_total, "dispatches": {k: v.tolist() for k, v in raw.dispatches.items()}}


@pytest.mark.parametrize("name", [TORCH_1S, TORCH_MFU, JAX])
def test_the_pages_adbc_and_sqlite3_readings_give_identical_tables(name, monkeypatch):
    """The three readings of an export's large tables on the real exports: the file's pages (compiled; the default
    for a large export), ADBC into Arrow (a small one's), and sqlite3 (the fallback) give the same columns, NULL
    masks and coded names, and the same trace, column for column; the pages reading takes every large table (SQL
    made to fail, it still reads), and the ADBC path reads through ADBC."""
    from rooflens.trace.formats.nsys_sqlite import db as D
    from rooflens.trace.formats.nsys_sqlite import tables as T

    scans = [(D.KERNEL, ["start", "end", "deviceId", "streamId", "correlationId", "globalPid"], None),
             (D.RUNTIME, ["correlationId", "globalTid", "start"], None),
             (D.NVTX, ["start", "end", "eventType", "globalTid", "textId"], "text")]
    readings = {}
    for how in ("pages", "adbc", "sqlite3"):
        monkeypatch.setenv("ROOFLENS_SQLITE", how)
        with D.Export(_export(name)) as db:
            assert db.reads_through == ("sqlite3" if how == "sqlite3" else "adbc")
            got = [db.scan(t, [c for c in cols if c in db.columns(t)], text if text in db.columns(t) else None,
                           T.TORCH_ARGS) for t, cols, text in scans]
        readings[how] = ([({c: v.tolist() for c, v in g.ints.items()},
                                      {c: v.tolist() for c, v in g.nulls.items()},
                                      None if g.codes is None else g.codes.tolist(), g.words) for g in got],
                                    _raw_columns(read_nsys_sqlite(_export(name))))
    assert readings["pages"] == readings["adbc"] == readings["sqlite3"]
    kernels, runtime, nvtx = readings["pages"][0]
    assert len(kernels[0]["start"]) and len(runtime[0]["start"]) and len(nvtx[0]["start"])
    # the columns' contents, not only their agreement: sqlite3's own rows
    want = _sql(_export(name), "SELECT correlationId, globalTid, start FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    assert list(zip(runtime[0]["correlationId"], runtime[0]["globalTid"], runtime[0]["start"])) == \
        [tuple(0 if v is None else v for v in r) for r in want]
    monkeypatch.setenv("ROOFLENS_SQLITE", "pages")

    def no_sql(*a, **k):
        raise AssertionError("a large table read through SQL")

    monkeypatch.setattr(D.Export, "table", no_sql)
    assert _raw_columns(read_nsys_sqlite(_export(name))) == readings["pages"][1]


def test_a_null_where_the_export_has_integers_is_one_sentence_on_every_path(tmp_path, monkeypatch):
    """A kernel row without a start (Nsight writes one for every row): a clear error either way, not a traceback."""
    path = tmp_path / "export.sqlite"
    shutil.copyfile(_export(TORCH_1S), path)
    with sqlite3.connect(path) as con:  # start is NOT NULL in Nsight's schema: that constraint dropped first
        (schema,) = con.execute("SELECT sql FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL'").fetchone()
        con.execute("PRAGMA writable_schema = ON")
        con.execute("UPDATE sqlite_master SET sql = ? WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL'",
                    (re.sub(r"start\s+INTEGER\s+NOT NULL", "start INTEGER", schema, count=1),))
    with sqlite3.connect(path) as con:
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = NULL WHERE rowid = 7")
    for how in ("pages", "adbc", "sqlite3"):
        monkeypatch.setenv("ROOFLENS_SQLITE", how)
        with pytest.raises(RooflensError, match=r"cannot read as an integer \(its 'start' values are int64, 1 of"):
            read_nsys_sqlite(path)


def test_a_small_export_is_read_without_loading_numba():
    """Below PAGES_MIN_BYTES the export is read through SQL (ADBC), numba's import and load left off the path (a
    fresh process: numba is loaded by nothing else the reader does)."""
    code = ("import importlib, sys; from pathlib import Path; "
            "r = importlib.import_module('rooflens.trace.formats.nsys_sqlite.reader').read_nsys_sqlite(Path(sys.argv[1]));"
            " print(len(r.table), 'numba' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(_export(TORCH_MFU))], capture_output=True, text=True,
                         env={**os.environ, "ROOFLENS_SQLITE": ""}, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    rows, numba = out.stdout.split()
    assert int(rows) > 0 and numba == "False"


@pytest.mark.parametrize("page_size", [512, 65536])  # the fixtures have 4096
def test_the_pages_reader_follows_sqlites_format_or_declines(tmp_path, monkeypatch, page_size):
    """The real export rewritten by SQLite itself with another page size (the smallest, the largest), a column added by ALTER TABLE (older rows
    lack it: NULL), a table with an INTEGER PRIMARY KEY (stored as the rowid), and rows long enough to spill onto
    overflow pages (the pages reader declines, SQL reads them): every scan equals sqlite3's, also when the table
    interning the text has to grow many times during the read, and when a table is read in two halves at once."""
    from rooflens.trace.formats.nsys_sqlite import db as D
    from rooflens.trace.formats.nsys_sqlite import tables as T

    path = tmp_path / "export.sqlite"
    with sqlite3.connect(f"file:{_export(TORCH_MFU)}?mode=ro", uri=True) as src:
        src.execute(f"PRAGMA page_size = {page_size}")
        src.execute("VACUUM INTO ?", (str(path),))
    with sqlite3.connect(path) as con:
        con.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_RUNTIME ADD COLUMN later INTEGER")
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET later = start % 7 WHERE rowid % 3 = 0")
        con.execute("CREATE TABLE keyed (id INTEGER PRIMARY KEY, v INTEGER, big TEXT)")
        con.executemany("INSERT INTO keyed VALUES (?, ?, ?)", [(10 * i + 3, i - 50, f"k{i % 5}, seq = {i}")
                                                               for i in range(3000)])
        con.execute("CREATE TABLE spilled (v INTEGER, big TEXT)")
        con.executemany("INSERT INTO spilled VALUES (?, ?)", [(i, "x" * (70_000 if i == 7 else 5)) for i in range(20)])
    scans = [("CUPTI_ACTIVITY_KIND_RUNTIME", ["correlationId", "globalTid", "start", "later"], None),
             ("NVTX_EVENTS", ["start", "end", "eventType", "globalTid", "textId"], "text"),
             ("keyed", ["id", "v"], "big"), ("spilled", ["v"], "big")]

    def read(how):
        monkeypatch.setenv("ROOFLENS_SQLITE", how)
        with D.Export(path) as db:
            got = [db.scan(t, cols, text, T.TORCH_ARGS) for t, cols, text in scans]
            took = [db.scan_pages(t, cols, text, T.TORCH_ARGS) is not None for t, cols, text in scans] \
                if how == "pages" else None
        return [({c: v.tolist() for c, v in g.ints.items()}, {c: v.tolist() for c, v in g.nulls.items()},
                 None if g.codes is None else g.codes.tolist(), g.words) for g in got], took

    pages, took = read("pages")
    plain, _ = read("sqlite3")
    assert pages == plain
    from rooflens.trace.formats.nsys_sqlite import pages as P

    monkeypatch.setattr(P, "INTERN_SLOTS", 4)  # the names' table full again and again, mid-leaf: each read resumed
    assert read("pages") == (plain, took)
    monkeypatch.setattr(P, "SPLIT_MIN_ROWS", 2)  # every table read in two halves side by side, their names merged
    assert read("pages") == (plain, took)
    monkeypatch.setattr(P, "INTERN_SLOTS", 1 << 12)
    assert read("pages") == (plain, took)
    assert took == [True, True, True, False]  # the 70 kB row spills onto overflow pages: SQL reads that table
    runtime, keyed = pages[0], pages[2]
    (absent,) = _sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE later IS NULL")[0]
    assert sum(runtime[1]["later"]) == absent > 0 and not all(runtime[1]["later"])
    assert keyed[0]["id"][:3] == [3, 13, 23] and keyed[0]["v"][:3] == [-50, -49, -48]
    assert keyed[3] == [f"k{i}" for i in range(5)]  # cut at PyTorch's ", seq = ", coded in order of appearance


def test_damaged_pages_make_the_pages_reader_decline_or_agree_never_crash(tmp_path):
    """The real export with bytes overwritten in its table pages (cell pointers, record headers, varints): the
    compiled reader, which does no bounds checks of its own, must stay inside the file (a crash would kill the
    child process) and either decline or read what it reads; run in a child so that a crash is a failure."""
    code = """
import os, sys
import numpy as np
from pathlib import Path
from rooflens.errors import RooflensError
from rooflens.trace.formats.nsys_sqlite import db as D
from rooflens.trace.formats.nsys_sqlite import tables as T
os.environ["ROOFLENS_SQLITE"] = "pages"
src = Path(sys.argv[1]).read_bytes()
rng = np.random.default_rng(0)
outcomes = {"declined": 0, "read": 0, "error": 0}
for k in range(40):
    data = bytearray(src)
    for at in rng.integers(4096, len(data), 64):  # past the header page: table pages, cells, records
        data[at] = int(rng.integers(0, 256))
    path = Path(sys.argv[2]) / f"damaged{k}.sqlite"
    path.write_bytes(bytes(data))
    try:
        with D.Export(path) as db:
            for table, cols, text in [(D.KERNEL, ["start", "end", "correlationId"], None),
                                      (D.RUNTIME, ["correlationId", "globalTid", "start"], None),
                                      (D.NVTX, ["start", "eventType", "globalTid"], "text")]:
                got = db.scan_pages(table, cols, text, T.TORCH_ARGS)
                outcomes["declined" if got is None else "read"] += 1
    except RooflensError:
        outcomes["error"] += 1
print(outcomes["declined"], outcomes["read"], outcomes["error"])
"""
    out = subprocess.run([sys.executable, "-c", code, str(_export(TORCH_MFU)), str(tmp_path)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    declined, read, errors = map(int, out.stdout.split())
    assert declined > 0 and read > 0  # both outcomes met (seed 0: 67 declined, 29 read, 8 schema errors)
