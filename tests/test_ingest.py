"""Ingest at real size: our XSpace decoder against jax's own reader and XProf, the streamed Chrome
JSON reader, the columnar cache, the Parquet export, damaged files and the progress bar."""

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import rooflens as rl
from rooflens.trace import background, load, op_stats
from rooflens.trace.cache import identity, location, read_cached
from rooflens.trace.formats.chrome.reader import read_chrome
from rooflens.trace.formats.xspace.reader import read_xspace
from tests.conftest import FIXTURES, IN_CI, fixture_path

DATA = Path(__file__).parent / "data"
V6E = ("tpu", "xprof_tpu_inference_2.v6e-4.xplane.pb")


def run(*args, env=None):
    return subprocess.run([sys.executable, "-m", "rooflens.cli", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def cpu_trace(sharded_cpu_trace):
    """A real capture on 8 CPU devices: a sharded matmul chain with a psum, 4 steps (conftest)."""
    return sharded_cpu_trace


def _profiledata_ops(path: Path) -> dict:
    """(program, op) → (count, total ns), read by jax's own ProfileData: the reference reader."""
    from jax.profiler import ProfileData

    out: dict = {}
    for plane in ProfileData.from_file(str(path)).planes:
        for line in plane.lines:
            for e in line.events:
                st = dict(e.stats)
                if "hlo_op" in st:
                    key = (str(st["hlo_module"]), str(st["hlo_op"]))
                    c, t = out.get(key, (0, 0.0))
                    out[key] = (c + 1, t + e.duration_ns)
    return out


def test_decoder_matches_jaxs_own_reader_on_a_real_cpu_trace(cpu_trace):
    raw = read_xspace(cpu_trace)
    ref = _profiledata_ops(cpu_trace)
    t = raw.table
    assert raw.platform == "cpu" and set(t.device.tolist()) == set(range(8))
    assert len(t) == sum(c for c, _ in ref.values())
    ours: dict = {}
    for p, n, d in zip(t.program.tolist(), t.name.tolist(), t.dur_ps.tolist()):
        key = (t.programs[p].split("(")[0], t.names[n])
        c, s = ours.get(key, (0, 0))
        ours[key] = (c + 1, s + d)
    assert ours.keys() == ref.keys()
    for k, (c, ps) in ours.items():
        assert c == ref[k][0] and ps / 1e3 == pytest.approx(ref[k][1], abs=1.0 * c), k  # jax truncates to ns
    # every event of the file was walked (jax counts the same), and the python frames were kept apart
    from jax.profiler import ProfileData

    n_all = sum(1 for p in ProfileData.from_file(str(cpu_trace)).planes for ln in p.lines for _ in ln.events)
    assert raw.events_total == n_all
    assert raw.steps and [s[0] for s in raw.steps] == sorted(s[0] for s in raw.steps)


def test_tpu_op_stats_equal_xprofs_hlo_stats():
    """XProf times TPU ops by device_offset_ps/device_duration_ps; the reference is xprof's own
    hlo_stats of the same file (tests/data/xprof_hlo_stats_v6e.json says how it was made)."""
    ref = json.loads((DATA / "xprof_hlo_stats_v6e.json").read_text())["rows"]
    prof = load(fixture_path(*V6E))
    ids = {k: v for k, v in ((raw.rsplit("(", 1)[-1].rstrip(")"), shown) for shown, raw in
                             prof.table.program_keys.items())}
    ours = {(s.program, s.name): s for s in op_stats(prof).op_stats}
    assert len(ours) == len(ref) == 17
    for row in ref:
        program = ids.get(row["program_id"]) or next(p for p in prof.table.programs
                                                      if row["program_id"] in prof.table.program_keys.get(p, p))
        s = ours[(program, row["hlo_op_name"])]
        assert s.occurrences == row["occurrences"], row
        assert s.total_time_s * 1e6 == pytest.approx(row["total_time"], rel=2e-3), row
        assert s.self_time_s * 1e6 == pytest.approx(row["total_self_time"], rel=2e-3), row


def test_the_event_span_rule_differs_from_xprof_on_four_tpu_ops():
    """Both rules, side by side: the events' own spans are off XProf by up to 13 % on 4 of 17 ops."""
    path = fixture_path(*V6E)
    xprof = {(r.table.programs[p], r.table.names[n]): 0 for r in [read_xspace(path)]
             for p, n in r.table.pairs().tolist()}
    dev, own = read_xspace(path), read_xspace(path, device_time=False)

    def totals(raw):
        t = raw.table
        out = dict.fromkeys(xprof, 0)
        for p, n, d in zip(t.program.tolist(), t.name.tolist(), t.dur_ps.tolist()):
            out[(t.programs[p], t.names[n])] += d
        return out

    a, b = totals(dev), totals(own)
    # beyond rounding: more than 1 % and more than 1 µs over the capture
    off = {k: b[k] / a[k] - 1 for k in a if a[k] and abs(b[k] / a[k] - 1) > 0.01 and abs(b[k] - a[k]) > 1e6}
    assert len(off) == 4 and 0.10 < max(abs(v) for v in off.values()) < 0.14, off
    assert sum(k[1].startswith("copy-done") for k in off) >= 2  # the host-offload waits move most


def test_chrome_json_of_the_tpu_fixture_gets_the_same_rule():
    a = op_stats(load(fixture_path(*V6E)))
    b = op_stats(load(fixture_path("tpu", "xprof_tpu_inference_2.v6e-4.DERIVED.trace.json.gz")))
    ta = {(s.program, s.name): (s.occurrences, s.total_time_s) for s in a.op_stats}
    tb = {(s.program, s.name): (s.occurrences, s.total_time_s) for s in b.op_stats}
    assert ta.keys() == tb.keys()
    for k in ta:
        assert ta[k][0] == tb[k][0] and ta[k][1] == pytest.approx(tb[k][1], rel=1e-6), k


def test_a_concatenated_xspace_merges_its_repeated_planes(cpu_trace, tmp_path):
    twice = tmp_path / "twice.xplane.pb"
    twice.write_bytes(cpu_trace.read_bytes() * 2)
    one, two = read_xspace(cpu_trace), read_xspace(twice)
    assert len(two.table) == 2 * len(one.table) and two.events_total == 2 * one.events_total
    assert set(two.table.device.tolist()) == set(one.table.device.tolist())
    s1 = {(x.program, x.name): x.occurrences for x in op_stats(load(cpu_trace)).op_stats}
    s2 = {(x.program, x.name): x.occurrences for x in op_stats(load(twice)).op_stats}
    assert s2 == {k: 2 * v for k, v in s1.items()}


def test_a_planes_own_stats_are_read_only_where_a_report_uses_them(monkeypatch):
    """XLA GPU (jax 0.11) writes a ``/host:__ScopeRangeCallStack__`` plane whose own stats are one per scope range:
    156 in the H100 capture, 400,068 in a 100,000-step GPU loop (2.6 s of a 6 s report on two cores, read in Python
    and never used). The reader reads the device plane's and the ``Task Environment``'s alone; asked for, the device
    plane's are jax's ``ProfileData``'s, and the scope ranges' are all there."""
    from jax.profiler import ProfileData

    from rooflens.trace.formats.xspace import decode

    path = fixture_path("gpu_nvidia", "h100_jax0112", "annotated_whole_run", "vm.xplane.pb")
    asked = []
    stats = decode.Plane.stats.func
    monkeypatch.setattr(decode.Plane, "stats", property(lambda plane: asked.append(plane.name) or stats(plane)))
    raw = read_xspace(path)
    assert raw.device_kind == "Nvidia" and raw.plane_stats["device_vendor"] == "Nvidia"
    assert set(asked) == {"/device:GPU:0", "Task Environment"}, asked
    x = decode.decode(path)
    assert {p.name: len(p.stat_spans) for p in x.planes}["/host:__ScopeRangeCallStack__"] == 156
    reference = {p.name: dict(p.stats) for p in ProfileData.from_file(str(path)).planes}
    mine = {p.name: p.stats for p in x.planes}
    assert mine["/device:GPU:0"] == reference["/device:GPU:0"] and len(mine["/device:GPU:0"]) == 9
    assert len(mine["/host:__ScopeRangeCallStack__"]) == 156  # (ProfileData keeps one per stat name: 3)


def test_every_fixture_still_reads():
    for parts, platform, min_ops in ((V6E, "tpu", 6000),
                                     (("tpu", "vllm_tpu_qwen3_2026_01_11_21_26_41.trace.json.gz"), "tpu", 1000),
                                     (("gpu_amd", "tracelens_mi300x_jax08_gemm.xplane.pb"), "gpu", 10),
                                     (("gpu_amd", "tracelens_mi300x_jax08_gemm.DERIVED.trace.json.gz"), "gpu", 10),
                                     (("gpu_amd", "tracelens_mi300x_jax_conv_minimal_legacy.xplane.pb"), "gpu", 10)):
        prof = load(fixture_path(*parts))
        assert prof.platform == platform and len(prof.table) >= min_ops, parts
    amd = load(fixture_path("gpu_amd", "tracelens_mi300x_jax08_gemm.xplane.pb"))
    # the device planes' own stats, as jax's ProfileData reads them (every GPU plane carries the same ones)
    from jax.profiler import ProfileData

    reference = {plane.name: dict(plane.stats) for plane in
                 ProfileData.from_file(str(fixture_path("gpu_amd", "tracelens_mi300x_jax08_gemm.xplane.pb"))).planes
                 if plane.name.startswith("/device:GPU:")}
    assert len(reference) == 8 and amd.plane_stats == reference["/device:GPU:0"]
    assert amd.plane_stats["device_vendor"] == "AMD" and amd.plane_stats["core_count"] == 304  # MI300X: 304 CUs
    xs = op_stats(amd)
    js = op_stats(load(fixture_path("gpu_amd", "tracelens_mi300x_jax08_gemm.DERIVED.trace.json.gz")))

    def by_name(stats):  # the JSON export drops the kernels' program_id: compare by module name
        out: dict = {}
        for s in stats.op_stats:
            key = (s.program.split("(")[0], s.name)
            out[key] = out.get(key, 0) + s.occurrences
        return out

    assert by_name(xs) == by_name(js)


def _truncations(data: bytes):
    for cut in (len(data) // 3, len(data) // 2, len(data) - 7):
        yield data[:cut]


def test_truncated_and_corrupt_xspace_name_where_they_broke(tmp_path):
    data = fixture_path(*V6E).read_bytes()
    for k, cut in enumerate(_truncations(data)):
        p = tmp_path / f"cut{k}.xplane.pb"
        p.write_bytes(cut)
        with pytest.raises(rl.RooflensError, match=r"damaged or truncated XSpace profile: .* at byte [\d,]+"):
            read_xspace(p)
        r = run("report", str(p))
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "at byte" in r.stderr, r.stderr
    bad = fixture_path("corrupt", "xprof_tpu_inference_2.HEAD_utf8_mangled.xplane.pb")
    r = run("report", str(bad), "--json")
    assert r.returncode == 2 and "damaged or truncated" in r.stderr and r.stdout == ""


def _chrome(tmp_path: Path, name: str, doc) -> Path:
    p = tmp_path / name
    p.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return p


def test_chrome_fields_of_the_wrong_type_are_one_sentence(tmp_path):
    meta = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/host:CPU"}}]
    ok = {"ph": "X", "pid": 1, "tid": 2, "ts": 1.0, "dur": 2.0, "name": "dot.1",
          "args": {"hlo_op": "dot.1", "hlo_module": "jit_f", "device_ordinal": 0}}
    cases = [("ts.trace.json.gz", {"traceEvents": meta + [ok, {**ok, "ts": "abc"}]}, "'ts'"),
             ("dev.trace.json.gz", {"traceEvents": meta + [{**ok, "args": {**ok["args"], "device_ordinal": "zz"}}]},
              "'device_ordinal'"),
             ("deep.trace.json.gz", None, "not valid JSON")]
    for name, doc, msg in cases:
        if doc is None:
            p = tmp_path / name
            p.write_bytes(gzip.compress(b'{"traceEvents": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}"))
        else:
            p = _chrome(tmp_path, name, doc)
        r = run("report", str(p), "--json")
        assert r.returncode == 2 and msg in r.stderr and len(r.stderr.strip().splitlines()) == 1, (name, r.stderr)
    good = read_chrome(_chrome(tmp_path, "good.trace.json.gz", {"traceEvents": meta + [ok, {}]}))
    assert len(good.table) == 1 and good.table.dur_ps[0] == 2_000_000 and good.platform == "cpu"


def test_chrome_stream_handles_events_split_across_chunks(tmp_path, monkeypatch):
    """A small read size makes every event straddle chunk boundaries; the result must not change."""
    from rooflens.trace.formats.chrome import events as chrome

    path = fixture_path("gpu_amd", "tracelens_mi300x_jax08_gemm.DERIVED.trace.json.gz")
    monkeypatch.setenv("ROOFLENS_PLAIN", "0")  # the compiled stream (a small file is otherwise read whole)
    whole = read_chrome(path)
    monkeypatch.setattr(chrome, "READ_BYTES", 97)
    pieces = read_chrome(path)
    assert len(pieces.table) == len(whole.table) and pieces.events_total == whole.events_total
    assert np.array_equal(pieces.table.dur_ps, whole.table.dur_ps)


#: every Chrome trace the repository carries (a new one is covered with no change here): JAX's exports, vLLM's, TF's and
#: PyTorch's Kineto trace (whose ``deviceProperties`` array comes before ``traceEvents``)
CHROME_FIXTURES = sorted(p.relative_to(FIXTURES).parts for p in FIXTURES.rglob("*.json.gz"))
assert CHROME_FIXTURES or not IN_CI, f"no Chrome trace under {FIXTURES}: the fixtures are missing"


@pytest.mark.parametrize("where", CHROME_FIXTURES, ids=lambda w: w[1].split(".")[0])
def test_chrome_plain_twin_reads_every_fixture_as_the_compiled_scan(where, monkeypatch):
    """A small Chrome trace is read by orjson and a Python loop while numba is not loaded (no numba import for a
    small report); the trace it gives equals the compiled scan's, column for column, on every real fixture."""
    from rooflens.trace.formats import compiled

    path = fixture_path(*where)

    def columns(raw):
        t = raw.table
        words = {c: getattr(t, c).tolist() for c in ("host", "device", "line", "name", "program", "start_ps",
                                                       "dur_ps", "step")}
        return {**words, "names": t.names, "programs": t.programs, "lines": t.lines, "op_meta": t.op_meta,
                "hlo_text": t.hlo_text, "steps": raw.steps, "notes": raw.notes, "host_events": raw.host_events,
                "events_total": raw.events_total, "end_ps": raw.end_ps, "device_kind": raw.device_kind,
                "dispatches": {k: v.tolist() for k, v in raw.dispatches.items()}}

    monkeypatch.setenv("ROOFLENS_PLAIN", "0")
    fast = columns(read_chrome(path))
    assert compiled.loaded()
    monkeypatch.delenv("ROOFLENS_PLAIN")
    monkeypatch.setattr(compiled, "loaded", lambda: False)  # as in a fresh process, before numba
    from rooflens.trace.formats.chrome import events as chrome

    took, twin = [], chrome.read_events_plain
    monkeypatch.setattr(chrome, "read_events_plain", lambda *a: took.append(1) or twin(*a))
    plain = columns(read_chrome(path))
    assert took and fast["events_total"] > 0
    assert plain == fast


def _tree(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")}


def test_second_read_comes_from_the_cache_and_a_changed_file_is_decoded_again(cpu_trace, tmp_path, monkeypatch):
    from rooflens.trace.formats.xspace import reader

    trace = tmp_path / cpu_trace.name
    trace.write_bytes(cpu_trace.read_bytes())
    before = _tree(tmp_path)
    first = read_cached(trace)
    background.flush()  # the entry is written on the writer thread
    assert _tree(tmp_path) == before  # nothing written beside the trace: it is the user's directory
    assert location(identity(trace)).is_file()

    def no_decode(*a, **k):
        raise AssertionError("decoded again")

    monkeypatch.setattr(reader, "read_xspace", no_decode)
    again = read_cached(trace)
    for col in ("host", "device", "line", "name", "program", "start_ps", "dur_ps"):
        assert np.array_equal(getattr(first.table, col), getattr(again.table, col)), col
    assert again.steps == first.steps and again.hlo_protos == first.hlo_protos
    assert again.table.hlo_text == first.table.hlo_text and again.host_events == first.host_events
    # the cache's own checksums of its columns stand for the table's digest: the same digest as computed afresh
    from rooflens.trace import memo

    class NoChecksums:
        @staticmethod
        def crc32(data, *rest):
            raise AssertionError("a column's checksum computed again")

    with monkeypatch.context() as m:
        m.setattr(memo, "zlib", NoChecksums)
        from_cache = memo.table_digest(again.table, steps=False)
    assert from_cache == memo.table_digest(first.table, steps=False)
    os.utime(trace, ns=(trace.stat().st_atime_ns, trace.stat().st_mtime_ns + 10**9))
    with pytest.raises(AssertionError, match="decoded again"):
        read_cached(trace)


def test_a_read_only_trace_directory_gets_no_cache_files(tmp_path):
    """A trace in a read-only directory: nothing is added there, and the cache is the user's."""
    shared = tmp_path / "shared"
    shared.mkdir()
    v6e = shared / V6E[-1]
    v6e.write_bytes(fixture_path(*V6E).read_bytes())
    shared.chmod(0o555)
    try:
        before = _tree(shared)
        read_cached(v6e)
        background.flush()
        assert _tree(shared) == before
        assert location(identity(v6e)).is_file()
    finally:
        shared.chmod(0o755)


@pytest.mark.parametrize("damage", ["truncate", "flip", "flip, checked on two threads", "junk", "other-key"])
def test_a_damaged_cache_is_never_trusted(cpu_trace, tmp_path, damage, monkeypatch):
    """Whatever happened to the cache file, the op columns are the trace's own: decoded again, and replaced
    (a large entry's columns are checked on two threads: this one, written on one, is read as if it were large)."""
    trace = tmp_path / cpu_trace.name
    trace.write_bytes(cpu_trace.read_bytes())
    fresh = read_cached(trace, use_cache=False)
    read_cached(trace)
    background.flush()
    if "threads" in damage:
        from rooflens.trace import cache

        monkeypatch.setattr(cache, "PARALLEL_CRC_BYTES", 0)
    from types import SimpleNamespace

    from rooflens.trace import formats

    def no_decoding(*args, **kwargs):
        raise AssertionError("decoded: the entry as written was not trusted")

    with monkeypatch.context() as m:  # the entry as written is read back, not decoded again
        m.setattr(formats, "reader_for", lambda *a, **k: SimpleNamespace(read=no_decoding))
        assert read_cached(trace).steps == fresh.steps
    loc = location(identity(trace))
    data = bytearray(loc.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage.startswith("flip"):  # inside the column data, past the schema: Arrow itself would not notice
        data[len(data) // 2] ^= 0xFF
    elif damage == "junk":
        data = bytearray(b"not an arrow file" * 10)
    else:
        data = data.replace(b'"size": ', b'"size": 1', 1)
    loc.write_bytes(bytes(data))
    again = read_cached(trace)
    for col in ("name", "program", "start_ps", "dur_ps", "device"):
        assert np.array_equal(getattr(fresh.table, col), getattr(again.table, col)), (damage, col)
    assert read_cached(trace).steps == fresh.steps  # and the replaced entry reads back
    background.flush()
    assert location(identity(trace)).stat().st_size > 1000


def test_the_cache_keeps_within_its_cap_least_recently_used_first(cpu_trace, tmp_path, monkeypatch):
    from rooflens.trace.cache import traces_dir

    monkeypatch.setenv("ROOFLENS_CACHE_DIR", str(tmp_path / "cache"))
    copies = []
    for i in range(3):
        p = tmp_path / f"h{i}" / cpu_trace.name
        p.parent.mkdir()
        p.write_bytes(cpu_trace.read_bytes())
        copies.append(p)
    read_cached(copies[0])
    background.flush()
    one = location(identity(copies[0])).stat().st_size
    monkeypatch.setenv("ROOFLENS_CACHE_MAX", str(int(2.5 * one)))
    read_cached(copies[1])
    read_cached(copies[0])  # a hit: now the most recently used
    read_cached(copies[2])  # over the cap: the least recently used (copies[1]) goes
    background.flush()
    assert location(identity(copies[0])).is_file() and location(identity(copies[2])).is_file()
    assert not location(identity(copies[1])).exists()
    assert sum(p.stat().st_size for p in traces_dir().glob("*.arrow")) <= 2.5 * one


def test_export_parquet_holds_the_op_table(cpu_trace, tmp_path):
    import pyarrow.parquet as pq

    out = tmp_path / "pq"
    r = run("export", str(cpu_trace), "--parquet", str(out))
    assert r.returncode == 0, r.stderr
    table = pq.read_table(out / "ops.parquet")
    assert table.column_names == ["host", "device", "line", "program", "op", "category", "named_scope", "step",
                                  "start_ps", "duration_ps", "self_ps"]
    prof = load(cpu_trace)
    stats = op_stats(prof)
    assert table.num_rows == len(prof.table)
    rows = table.to_pydict()
    total: dict = {}
    for p, o, d in zip(rows["program"], rows["op"], rows["duration_ps"]):
        total[(p, o)] = total.get((p, o), 0) + d
    for s in stats.op_stats:
        assert total[(s.program, s.name)] * 1e-12 == pytest.approx(s.total_time_s, rel=1e-9)
    assert set(rows["category"]) >= {"matmul"} and all(s >= -1 for s in rows["step"])
    r = run("export", str(cpu_trace), "--parquet", str(out))
    assert r.returncode == 2 and "exists" in r.stderr and "--force" in r.stderr


def test_progress_goes_to_stderr_and_json_stays_pure(cpu_trace, monkeypatch):
    from rooflens import cli
    from rooflens.trace import progress

    monkeypatch.setattr(progress, "SHOW_AFTER_S", 0.0)
    monkeypatch.setenv("ROOFLENS_PROGRESS", "1")
    monkeypatch.setenv("ROOFLENS_NO_CACHE", "1")
    res = CliRunner().invoke(cli.cli, ["report", str(cpu_trace), "--json", "--no-calibrate"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["op_stats"] and "reading the trace" in res.stderr


def test_a_child_forked_while_a_cache_write_is_queued_does_not_wait_for_it():
    """A process pool forked while the parent's writer thread still has work (a host read in this process a
    moment before): the child has no writer thread, and must not wait for the parent's writes."""
    import multiprocessing
    import threading

    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork here")
    release = threading.Event()
    background.submit(lambda: release.wait(60), tag="slow")
    try:
        child = multiprocessing.get_context("fork").Process(target=background.flush, args=("slow",))
        child.start()
        child.join(20)
        stuck = child.is_alive()
        if stuck:
            child.kill()
        assert not stuck and child.exitcode == 0
    finally:
        release.set()
        background.flush("slow")
