"""Big traces: the XSpace walk on every core gives the same columns, bit for bit, as one walk; the
report's aggregates served from the cache equal fresh ones."""

from pathlib import Path

import numpy as np
import pytest

import rooflens as rl
from rooflens.trace.formats.xspace import decode as D
from rooflens.trace.formats.xspace import walk, wire
from tests.conftest import fixture_path

V6E = ("tpu", "xprof_tpu_inference_2.v6e-4.xplane.pb")
V100 = ("gpu_nvidia", "tfprof_GPU-multi-worker_34.83.195.179_6003.v100x8.xplane.pb")


@pytest.fixture(scope="module")
def cpu_trace(sharded_cpu_trace, tmp_path_factory) -> Path:
    """The real 8-device CPU capture of conftest, written three times over into one XSpace so that it has
    many lines to share out."""
    big = tmp_path_factory.mktemp("scale_big") / "x3.xplane.pb"
    big.write_bytes(sharded_cpu_trace.read_bytes() * 3)
    return big


def _decode(path: Path, threads: int, monkeypatch) -> D.XSpaceColumns:
    monkeypatch.setenv("ROOFLENS_DECODE_THREADS", str(threads))
    return D.decode(path)


def _same(a: D.XSpaceColumns, b: D.XSpaceColumns) -> None:
    assert len(a) == len(b) > 0
    assert a.strings == b.strings
    assert a.origin_ns == b.origin_ns and a.events_total == b.events_total
    for k, (x, y) in enumerate(zip(a.cols, b.cols)):
        assert x.dtype == y.dtype and np.array_equal(x, y), f"column {k} differs"


@pytest.mark.parametrize("parts", [V6E, V100])
def test_parallel_walk_equals_one_walk_on_real_fixtures(parts, monkeypatch):
    path = fixture_path(*parts)
    one = _decode(path, 1, monkeypatch)
    for threads in (2, 3, 7):
        _same(one, _decode(path, threads, monkeypatch))


def test_parallel_walk_equals_one_walk_on_a_real_cpu_capture(cpu_trace, monkeypatch):
    one = _decode(cpu_trace, 1, monkeypatch)
    assert len(walk.split_lines(_kept_lines(cpu_trace), 4)) == 4  # the capture does give every thread lines of its own
    for threads in (2, 4):
        many = _decode(cpu_trace, threads, monkeypatch)
        _same(one, many)
    # and the op table read from it is the same
    monkeypatch.setenv("ROOFLENS_NO_CACHE", "1")
    monkeypatch.setenv("ROOFLENS_DECODE_THREADS", "1")
    a = rl.load(str(cpu_trace)).table
    monkeypatch.setenv("ROOFLENS_DECODE_THREADS", "4")
    b = rl.load(str(cpu_trace)).table
    assert a.names == b.names and a.programs == b.programs
    for c in ("device", "line", "name", "program", "start_ps", "dur_ps", "step"):
        assert np.array_equal(getattr(a, c), getattr(b, c)), c


@pytest.mark.parametrize("parts", [V6E, ("gpu_nvidia", "h100_jax0112", "annotated_whole_run", "vm.xplane.pb")])
def test_a_long_lines_header_is_read_in_parts_and_its_pages_handed_back_as_it_goes(parts, monkeypatch):
    """A long whole run's host thread is one line of hundreds of megabytes: the header pass reads such a line a part
    at a time and hands each part's pages back (it held the whole line: a 365 MB GPU trace peaked at 524 MB there).
    Real fixtures, with the part size made small enough that their lines count as long: the same headers as one
    pass, and pages handed back from inside lines, each range within the line and in order."""
    path = fixture_path(*parts)
    mm, buf = D.map_file(path)
    planes, spans, _ = D.planes_of(buf, path)
    whole = walk.line_headers(buf, spans, 1)
    sizes = spans[:, 1] - spans[:, 0]
    piece = int(np.sort(sizes)[-3]) // 4  # the largest lines span several parts
    monkeypatch.setattr(walk, "PIECE_BYTES", piece)
    monkeypatch.setattr(walk, "LONG_LINE_BYTES", 2 * piece)
    for threads in (1, 2):
        released: list[tuple[int, int]] = []
        got = walk.line_headers(buf, spans, threads, lambda s, e, out=released: out.append((s, e)))
        np.testing.assert_array_equal(got, whole)
        inside = [(s, e) for s, e in released if any(a == s and s < e < b for a, b in spans.tolist())]
        long_lines = [(a, b) for a, b in spans.tolist() if b - a > 2 * piece]
        assert long_lines and len(inside) >= sum((b - a) // piece for a, b in long_lines) - len(long_lines)
        for a, b in long_lines:  # each long line's parts grow from its start, never past its end
            ends = [e for s, e in released if s == a and e < b]
            assert ends == sorted(ends) and len(ends) >= (b - a) // piece - 1


def test_a_damaged_long_line_is_named_at_the_same_byte_read_whole_or_in_parts(tmp_path, monkeypatch):
    """A long line read in parts breaks where it breaks read whole: the real H100 whole-run capture with one event
    tag in the middle of its largest line given an invalid wire type."""
    from rooflens.errors import RooflensError
    from rooflens.trace.formats.protowire import field_spans

    path = fixture_path("gpu_nvidia", "h100_jax0112", "annotated_whole_run", "vm.xplane.pb")
    data = bytearray(path.read_bytes())
    _, buf = D.map_file(path)
    _, spans, _ = D.planes_of(buf, path)
    a, b = max(spans.tolist(), key=lambda ab: ab[1] - ab[0])
    events = [at for num, wt, at, _, _ in field_spans(bytes(data), a, b) if (num, wt) == (4, 2)]
    bad_at = events[len(events) // 2]
    data[bad_at] = (4 << 3) | 7  # field 4 with wire type 7: no such type
    bad = tmp_path / "bad.xplane.pb"
    bad.write_bytes(bytes(data))
    _, buf2 = D.map_file(bad)
    _, spans2, _ = D.planes_of(buf2, bad)
    whole = walk.line_headers(buf2, spans2, 1)
    piece = (b - a) // 5
    monkeypatch.setattr(walk, "PIECE_BYTES", piece)
    monkeypatch.setattr(walk, "LONG_LINE_BYTES", 2 * piece)
    parts = walk.line_headers(buf2, spans2, 2)
    assert whole[0] is None and parts[0] is None and whole[1].tolist() == parts[1].tolist()
    assert int(parts[1][1]) == bad_at
    with pytest.raises(RooflensError, match=f"at byte {bad_at:,}"):
        D.decode(bad)


def test_the_event_walk_hands_back_a_long_lines_pages_as_it_goes(monkeypatch):
    """The event walk hands a line's pages back every CHUNK_BYTES, inside the line: a long GPU run's host thread (two
    lines of 47 and 75 MB in the linen GPT capture 150 times over) kept up to two 64 MB chunks resident per thread.
    On the real H100 GPT window, with a chunk small enough that its lines are long: the same columns, and pages handed
    back from inside lines, each range growing in order."""
    path = fixture_path("gpu_nvidia", "h100_jax0112", "linen_gpt_window_no_command_buffers", "vm.xplane.pb")
    monkeypatch.setenv("ROOFLENS_DECODE_THREADS", "1")
    whole = D.decode(path)
    released: list[tuple[int, int]] = []
    real = D._release
    monkeypatch.setattr(D, "_release", lambda mm, s, e: (released.append((s, e)), real(mm, s, e)))
    monkeypatch.setattr(walk, "CHUNK_BYTES", 1 << 16)
    _same(whole, D.decode(path))
    mm, buf = D.map_file(path)
    _, spans, _ = D.planes_of(buf, path)
    inside = [(s, e) for s, e in released if any(a < e < b and e - a > 1 << 16 for a, b in spans.tolist())]
    assert len(inside) >= 10
    for a, b in spans.tolist():  # within a line, each release reaches further than the last
        ends = [e for s, e in released if a < e < b]
        assert ends == sorted(ends)


def test_split_lines_balances_bytes_and_never_splits_a_line():
    sizes = np.array([10, 10, 10, 70, 10, 10, 10, 10], np.int64)
    ends = np.cumsum(sizes)
    lines = np.stack([ends - sizes, ends], axis=1)
    ranges = walk.split_lines(lines, 3)
    assert ranges[0][0] == 0 and ranges[-1][1] == len(lines)
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))  # contiguous, in order
    assert len(ranges) <= 3 and max(int(sizes[lo:hi].sum()) for lo, hi in ranges) <= 80
    assert walk.split_lines(lines, 1) == [(0, len(lines))]


def _kept_lines(path: Path) -> np.ndarray:
    buf = D.map_file(path)[1]
    planes, spans, line_plane = D.planes_of(buf, path)
    return D.lines_of(buf, planes, spans, line_plane, path)[2]


def test_a_damaged_event_is_named_the_same_on_every_thread(tmp_path, monkeypatch):
    """An event with an invalid wire type in the last walked line: the same one sentence, however many
    threads walk the file."""
    src = fixture_path(*V100)
    data = np.frombuffer(bytearray(src.read_bytes()), np.uint8)
    start, end = (int(v) for v in _kept_lines(src)[-1, :2])
    fields = np.empty((10_000, 4), np.int64)
    n = wire.fields(data, start, end, fields, np.zeros(2, np.int64))
    event = fields[:n][fields[:n, 0] == 4][-1]
    data[event[2]] = 0x0F  # field 1 with wire type 7: there is no such wire type
    bad = tmp_path / "bad.xplane.pb"
    bad.write_bytes(data.tobytes())
    errors = set()
    for threads in ("1", "3"):
        monkeypatch.setenv("ROOFLENS_DECODE_THREADS", threads)
        with pytest.raises(rl.errors.RooflensError) as e:
            D.decode(bad)
        errors.add(str(e.value))
    assert len(errors) == 1
    assert "invalid protobuf wire type" in (msg := errors.pop()) and "line " in msg


def test_report_aggregates_from_the_cache_equal_fresh_ones(cpu_trace, tmp_path, monkeypatch):
    """A second report of the same trace reads its op stats, execution index and priced programs from the user
    cache and gives the same report, field for field; a damaged entry is computed again."""
    from rooflens.analysis import compare
    from rooflens.api import load_report
    from rooflens.trace import background, memo, op_stats
    from rooflens.trace.warmup import execution_index

    monkeypatch.setenv("ROOFLENS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ROOFLENS_NO_CACHE", raising=False)
    monkeypatch.setattr(memo, "DISK_MIN_EVENTS", 0)
    monkeypatch.setattr(compare, "PRICED_ON_DISK_MIN_INSTRUCTIONS", 0)
    calls = {"op_stats": 0}
    real = memo.remembered

    def counting(kind, key, n, compute, in_memory=False, **kw):
        def counted():
            calls[kind] = calls.get(kind, 0) + 1
            return compute()
        return real(kind, key, n, counted, in_memory, **kw)

    monkeypatch.setattr(memo, "remembered", counting)
    memo._memory.clear()
    fresh = load_report(str(cpu_trace)).to_json()
    assert calls["op_stats"] == 1 and calls["execution_index"] == 1  # asked for 3 times, computed once
    # the rest of what a second report would compute again: the 8 CPU devices' concurrency, each unit's
    # executions (idle time), the HLO jaxlib printed from the XSpace's protos (no run directory beside it), the
    # distinct (program, op) pairs and each program's busy time
    remembered_too = ("busy_together", "unit_executions", "printed_hlo", "pairs", "program_busy")
    assert all(calls.get(kind) == 1 for kind in remembered_too), calls
    background.flush()  # entries are written on the writer thread
    files = sorted(memo.memo_dir().glob("*.memo"))
    assert len(files) >= 5
    memo._memory.clear()
    again = load_report(str(cpu_trace)).to_json()
    assert calls["op_stats"] == 1 and calls["execution_index"] == 1  # served from disk
    assert all(calls[kind] == 1 for kind in remembered_too), calls
    assert again == fresh
    # its programs priced on a chip: priced once, then served; on another chip priced again
    on_chip = load_report(str(cpu_trace), chip="h100-sxm").to_json()
    priced = calls.get("priced_module", 0)
    assert priced >= 1
    background.flush()
    assert load_report(str(cpu_trace), chip="h100-sxm").to_json() == on_chip
    assert calls["priced_module"] == priced
    load_report(str(cpu_trace), chip="tpu-v5e")
    assert calls["priced_module"] == 2 * priced
    # the same table with other steps is another table: computed again
    prof = rl.load(str(cpu_trace))
    op_stats(prof)
    assert calls["op_stats"] == 1  # the same table as the report's: served
    prof.table.step[:] = -1
    op_stats(prof)
    assert calls["op_stats"] == 2
    with pytest.raises(ValueError):
        execution_index(prof.table)[0] = 7  # one array for every caller: read-only
    # a damaged entry is never trusted
    memo._memory.clear()
    background.flush()
    for f in memo.memo_dir().glob("*.memo"):
        data = bytearray(f.read_bytes())
        data[-3] ^= 0xFF
        f.write_bytes(bytes(data))
    n = calls["op_stats"]
    assert load_report(str(cpu_trace)).to_json() == fresh and calls["op_stats"] == n + 1


@pytest.mark.parametrize("make", [
    lambda r, n: r.integers(0, 3000, n),  # dense codes: the table of their range
    lambda r, n: r.integers(0, 3000, n).astype(np.int32) - 5,  # negative, int32
    lambda r, n: np.where(r.random(n) < 0.3, np.iinfo(np.int64).min, r.integers(1, 1 << 62, 40)[r.integers(0, 40, n)]),
    lambda r, n: r.integers(-(1 << 62), 1 << 62, n),  # all distinct, wide: the hash table grows
])
def test_group_by_codes_equals_np_unique(make, monkeypatch):
    from rooflens.trace import groupby

    monkeypatch.setattr(groupby, "HASH_MIN_KEYS", 1000)
    key = make(np.random.default_rng(7), 200_000)
    u, inv = groupby.unique_inverse(key)
    eu, einv = np.unique(key, return_inverse=True)
    assert u.dtype == eu.dtype and np.array_equal(u, eu) and np.array_equal(inv, einv.ravel())


def test_a_memo_entry_rebuilds_nothing_but_stats_and_arrays(tmp_path, monkeypatch):
    """A memo file holding any other callable (here os.system, with a valid CRC) is not used: the value
    is computed again and nothing is called."""
    import os
    import pickle
    import struct
    import zlib

    from rooflens.trace import background, memo

    monkeypatch.setenv("ROOFLENS_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("ROOFLENS_NO_CACHE", raising=False)
    calls = []

    def compute():
        calls.append(1)
        return np.arange(10)

    assert np.array_equal(memo.remembered("test", ("k",), 10**6, compute), np.arange(10)) and len(calls) == 1
    assert np.array_equal(memo.remembered("test", ("k",), 10**6, compute), np.arange(10)) and len(calls) == 1
    background.flush()
    evil = pickle.dumps(type("X", (), {"__reduce__": lambda self: (os.system, ("touch " + str(tmp_path / "pwned"),))})())
    for f in memo.memo_dir().glob("*.memo"):
        f.write_bytes(struct.pack("<I", zlib.crc32(evil)) + evil)
    assert np.array_equal(memo.remembered("test", ("k",), 10**6, compute), np.arange(10)) and len(calls) == 2
    assert not (tmp_path / "pwned").exists()


def test_compiled_group_kernels_equal_their_numpy_twins(cpu_trace):
    """Each group-by kernel (run compiled once numba is loaded, as numpy before) gives its twin's result,
    on random codes with ties and on a real capture's table; the O(n) orders equal numpy's sorts."""
    from rooflens.trace import stats, warmup
    from rooflens.trace.events import unique_rows
    from rooflens.trace.formats import compiled

    compiled.compile_kernels()
    kernel = {k.__name__: k for k in compiled._KERNELS}  # the declared kernels: compiled, and their twins
    rng = np.random.default_rng(3)
    n, m = 50_000, 37
    inv = rng.integers(0, m, n)
    start = np.sort(rng.integers(0, 2_000, n))  # sorted, with many ties
    dur = rng.integers(0, 50, n)
    values = rng.random(n)
    for k, args in ((kernel["grouped_order"], (inv, m)), (kernel["grouped_sorted"], (inv, m, values)),
                    (kernel["timeline_order"], (inv, m, start, dur)),
                    (kernel["group_extent"], (inv, m, values, values + 1))):
        got, want = k.dispatcher(*args), k.plain(*args)
        assert all(np.array_equal(g, w) for g, w in zip(got if isinstance(got, tuple) else [got],
                                                       want if isinstance(want, tuple) else [want])), k
    assert np.array_equal(kernel["grouped_order"].dispatcher(inv, m), np.argsort(inv, kind="stable"))
    # a real table: self times by the O(n) order equal those by the lexsort, execution index likewise
    t = rl.load(str(cpu_trace)).table
    group = stats.line_groups(t)
    order = np.lexsort((-t.dur_ps, t.start_ps, group))
    want = kernel["_self_times_sorted"].dispatcher(t.start_ps, t.dur_ps, group, order)
    assert np.array_equal(stats.self_times_ps(t, group), want) and want.sum() > 0
    keys, ginv = unique_rows(t.host, t.device, t.program)
    order = np.lexsort((t.start_ns, ginv))
    bounds = np.concatenate([[0], np.cumsum(np.bincount(ginv, minlength=len(keys)))])
    args = (order, bounds, t.name.astype(np.int64), len(t.names), t.start_ns, warmup.control_names(t.names))
    runs = kernel["executions_of"].dispatcher(*args)
    assert np.array_equal(runs, kernel["executions_of"].plain(*args)) and runs.max() >= 2


@pytest.mark.parametrize("cols", [
    lambda r, n: (r.integers(0, 5, n), r.integers(-3, 700, n).astype(np.int32)),
    lambda r, n: (r.integers(0, 1 << 40, n), r.integers(0, 1 << 40, n)),  # ranges past int64: ranked first
])
def test_unique_rows_equals_np_unique_of_rows(cols):
    from rooflens.trace.events import unique_rows

    a, b = cols(np.random.default_rng(5), 20_000)
    rows, inv = unique_rows(a, b)
    want, winv = np.unique(np.stack([a, b], axis=1).astype(np.int64), axis=0, return_inverse=True)
    assert np.array_equal(rows, want) and np.array_equal(inv, winv.ravel())


@pytest.mark.parametrize("parts", [V6E, V100])
def test_many_small_pieces_give_the_same_columns(parts, monkeypatch):
    """Pieces of a few kilobytes (dozens of them, placed in turn by up to three threads, each with its own
    string table) give the columns of one walk; stat columns no kept event has stay zero-memory broadcasts."""
    path = fixture_path(*parts)
    one = _decode(path, 1, monkeypatch)
    monkeypatch.setattr(walk, "PIECE_BYTES", 1 << 12)
    assert len(walk.pieces_of(_kept_lines(path))) > 20
    for threads in (1, 3):
        many = _decode(path, threads, monkeypatch)
        _same(one, many)
        absent = [k for k, c in enumerate(many.cols) if (c == wire.absent_in(c)).all()]
        assert absent and all(many.cols[k].strides == (0,) for k in absent)
        assert all(c.strides == (c.itemsize,) for k, c in enumerate(many.cols) if k not in absent)
        assert [k for k, c in enumerate(many.cols) if c.dtype == np.int32] == list(wire.NARROW)


def _as_rows(x: D.XSpaceColumns, n: int) -> np.ndarray:
    """The first ``n`` decoded events as the walk's scratch rows (int64, an absent stat as wire.NONE)."""
    return np.ascontiguousarray(np.stack([np.where(np.asarray(c[:n]) == wire.absent_in(c), wire.NONE,
                                                   np.asarray(c[:n], np.int64)) for c in x.cols], axis=1))


def test_a_stat_column_first_met_in_a_later_piece_is_filled_before_it():
    """Placing pieces: a stat column whose first value comes in the second piece gets its absent value in every
    row before it (NONE32 in a narrow column); a column with no value is never written; string codes go through
    the piece's table. The compiled placement and its plain twin agree."""
    from rooflens.trace.formats import compiled
    from rooflens.trace.formats.xspace import plain

    x = D.decode(fixture_path(*V100))
    real = [k for k, c in enumerate(x.cols) if k >= wire.STAT_BASE and not (c == wire.absent_in(c)).all()]
    n = min(400, len(x) // 2)
    rows = _as_rows(x, 2 * n)
    rows[:, wire.COL_LINE] = 0
    late = [k for k in real if (rows[n:, k] != wire.NONE).any()][-1]
    rows[:n, late] = wire.NONE  # the first piece has no value in this column
    assert (rows[n:, late] != wire.NONE).any()
    lut = np.arange(len(x.strings), dtype=np.int64)[::-1].copy()  # the pieces' codes, renumbered
    line_index = np.asarray([7], np.int64)
    compiled.compile_kernels()
    got = []
    for place in (wire.place, plain.place):
        cols, wide, thin, slot = walk.final_columns(2 * n + 5)
        for c in cols:
            c[:] = 12345
        flags = np.zeros(wire.N_COLS, np.int64)
        flags[:wire.STAT_BASE] = 1
        assert place(rows[:n], n, wide, thin, slot, 0, lut, line_index, 0, flags) == 0
        assert place(rows[n:], n, wide, thin, slot, n, lut, line_index, 0, flags) == 0
        got.append((cols, flags))
    (a, fa), (b, fb) = got
    np.testing.assert_array_equal(fa, fb)
    for k in range(wire.N_COLS):
        assert a[k].dtype == b[k].dtype
        np.testing.assert_array_equal(a[k], b[k], err_msg=f"column {k}")
    none = wire.absent_in(a[late])
    assert fa[late] == 1 and (a[late][:n] == none).all()
    assert np.array_equal(a[late][n:2 * n], np.where(rows[n:, late] == wire.NONE, none,
                                                     lut[np.clip(rows[n:, late], 0, None)])
                          if late - wire.STAT_BASE in wire.STRING_STATS else
                          np.where(rows[n:, late] == wire.NONE, none, rows[n:, late]))
    assert (a[wire.COL_LINE][:2 * n] == 7).all() and (a[0][2 * n:] == 12345).all()
    never = [k for k in range(wire.STAT_BASE, wire.N_COLS) if (rows[:, k] == wire.NONE).all()]
    assert never and all(fa[k] == 0 and (a[k] == 12345).all() for k in never)


def test_a_value_too_large_for_its_narrow_column_is_placed_nowhere_and_walked_again_wide(monkeypatch):
    """A metadata id past 2**31 (or equal to the narrow absent value) does not fit int32: the placement says so,
    compiled and plain alike; the walk then walks the file again with every column int64 and keeps the value
    whole (here: the real V100 trace's walk, its first kept event's metadata id made too large as it is placed)."""
    from rooflens.trace.formats import compiled
    from rooflens.trace.formats.xspace import plain

    x = D.decode(fixture_path(*V100))
    k = wire.COL_META
    assert k in wire.NARROW and len(x)
    rows = _as_rows(x, len(x))
    line_index = np.arange(len(x.line_names) + 1, dtype=np.int64)
    compiled.compile_kernels()
    for big in (1 << 40, wire.NONE32, wire.INT32_MAX + 1):
        for place in (wire.place, plain.place):
            r = rows.copy()
            r[np.flatnonzero(r[:, k] != wire.NONE)[0], k] = big
            _, wide, thin, slot = walk.final_columns(len(r))
            flags = np.zeros(wire.N_COLS, np.int64)
            flags[:wire.STAT_BASE] = 1
            assert place(r, len(r), wide, thin, slot, 0, np.arange(len(x.strings), dtype=np.int64), line_index,
                         0, flags) == 1, (place, big)

    real_place = wire.place
    placed = []

    def one_too_large(rows, n, wide, narrow, slot, at, *rest):  # each walk's first metadata id: 2**40
        hit = np.flatnonzero(rows[:n, k] != wire.NONE)
        if at == 0 and len(hit):
            rows = rows.copy()
            rows[hit[0], k] = 1 << 40
            placed.append(len(wide))
        return real_place(rows, n, wide, narrow, slot, at, *rest)

    monkeypatch.setattr(wire, "place", one_too_large)
    wide = D.decode(fixture_path(*V100))
    assert placed == [wire.N_COLS - len(wire.NARROW), wire.N_COLS]  # placed narrow, refused, walked again wide
    assert all(c.dtype == np.int64 for c in wide.cols)
    assert (wide.cols[k] == 1 << 40).sum() == 1
    for j, (c, w) in enumerate(zip(x.cols, wide.cols)):
        if j != k:
            np.testing.assert_array_equal(np.where(c == wire.absent_in(c), wire.NONE, np.asarray(c, np.int64)), w,
                                          err_msg=f"column {j}")
    # pieces of a few kilobytes on three threads: the piece that breaks stops the others, and the walk again
    # gives the same columns
    placed.clear()
    monkeypatch.setattr(walk, "PIECE_BYTES", 1 << 12)
    monkeypatch.setenv("ROOFLENS_DECODE_THREADS", "3")
    assert len(walk.pieces_of(_kept_lines(fixture_path(*V100)))) > 20
    again = D.decode(fixture_path(*V100))
    assert placed[0] == wire.N_COLS - len(wire.NARROW) and placed[-1] == wire.N_COLS
    _same(wide, again)


def test_op_and_program_codes_compiled_equal_their_twin(cpu_trace):
    """The one-pass coding of op strings and (module, program id) pairs gives the numpy twin's result: on
    a real capture's decoded columns, and on random pairs with absent values and enough distinct pairs to
    grow the kernel's table several times."""
    import importlib

    from rooflens.trace.formats import compiled

    importlib.import_module("rooflens.trace.formats.xspace.reader")  # declares the kernels
    compiled.compile_kernels()
    kernel = {k.__name__: k for k in compiled._KERNELS}
    x = D.decode(cpu_trace)
    rows = np.flatnonzero(x.has("hlo_op"))
    rng = np.random.default_rng(11)
    n = 30_000
    mod = rng.integers(0, 400, n)
    pid = np.where(rng.random(n) < 0.1, wire.NONE, rng.integers(-(1 << 62), 1 << 62, 5)[rng.integers(0, 5, n)])
    cases = [(rows, x.col("hlo_op"), x.col("hlo_module"), x.col("program_id"), len(x.strings)),
             (rng.permutation(n), rng.integers(0, 50, n), mod, pid, 50)]
    for rows, op, mod, pid, n_strings in cases:
        got, want = [], []
        for fn, out in ((kernel["pair_codes"].dispatcher, got), (kernel["pair_codes"].plain, want)):
            present = np.zeros(n_strings, np.bool_)
            pair, pm, pp = fn(rows, op, mod, pid, present)
            order = np.lexsort((pp, pm))  # numbered in first-seen order: compared in lexicographic order
            rank = np.empty(len(order), np.int64)
            rank[order] = np.arange(len(order))
            out.append((present, pm[order], pp[order], rank[pair]))
        for g, w in zip(got[0], want[0]):
            assert np.array_equal(g, w)
    assert len(got[0][1]) > 1000 and (got[0][2] == wire.NONE).any()  # the table grew; absent ids coded too
    lut, plut = np.arange(50, dtype=np.int32)[::-1].copy(), np.arange(7, dtype=np.int32) * 3
    pair = rng.integers(0, 7, n).astype(np.int32)
    args = (cases[1][0], cases[1][1], lut)
    a = kernel["apply_codes"].dispatcher(*args, pair.copy(), plut)
    b = kernel["apply_codes"].plain(*args, pair.copy(), plut)
    assert all(np.array_equal(u, v) for u, v in zip(a, b)) and a[0].max() == 49
