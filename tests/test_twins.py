"""Each compiled kernel and its plain twin give the same results on real inputs.

A kernel with a plain twin (:func:`rooflens.trace.formats.compiled.plain_twin`) runs the twin while numba is not
loaded and its input is small (a small CLI report), the compiled walk otherwise (the pytest process, a large
trace): both must give one answer. Here both are called on the inputs their callers build from real traces
(the TPU v6e XSpace, the vLLM Chrome trace, the Pax nsys-jax archive, a CPU capture with loops and a branch),
through the kernels' test hook (``compiled.kernels()``), and compared value for value. A kernel that gains a
twin joins ``CHECKED`` with its check, or test_every_twin_is_checked fails.
"""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import rooflens as rl
from rooflens.trace.events import row_key, unique_rows
from rooflens.trace.formats import compiled
from rooflens.trace.groupby import is_sorted, unique_inverse
from tests.conftest import fixture_path

#: every kernel with a plain twin → the test that checks the two against each other
CHECKED = {
    "rooflens.trace.warmup.executions_of": "test_execution_kernels_and_their_twins_agree",
    "rooflens.trace.warmup.execution_rows": "test_execution_kernels_and_their_twins_agree",
    "rooflens.trace.stats._covered_after": "test_control_op_coverage_and_its_twin_agree",
    "rooflens.trace.stats._self_times_sorted": "test_grouping_kernels_and_their_twins_agree",
    "rooflens.trace.groupby.dense_inverse": "test_grouping_kernels_and_their_twins_agree",
    "rooflens.trace.groupby.radix_step": "test_grouping_kernels_and_their_twins_agree",
    "rooflens.trace.groupby.grouped_order": "test_grouping_kernels_and_their_twins_agree",
    "rooflens.trace.groupby.grouped_sorted": "test_grouping_kernels_and_their_twins_agree",
    "rooflens.trace.groupby.group_extent": "test_grouping_kernels_and_their_twins_agree",
    "rooflens.trace.groupby.timeline_order": "test_grouping_kernels_and_their_twins_agree",
    # the XSpace walks: test_fixed_cost.py::test_plain_and_compiled_walks_decode_every_fixture_alike decodes every
    # XSpace fixture both ways, and the reader's code tables with them
    "rooflens.trace.formats.xspace.wire.fields": "test_fixed_cost",
    "rooflens.trace.formats.xspace.wire.metadata_entries": "test_fixed_cost",
    "rooflens.trace.formats.xspace.wire.line_headers": "test_fixed_cost",
    "rooflens.trace.formats.xspace.wire.decode_events": "test_fixed_cost",
    "rooflens.trace.formats.xspace.wire.place": "test_fixed_cost",
    "rooflens.trace.formats.compiled.rehash": "test_fixed_cost",  # the string table's growth, in the same walks
    "rooflens.trace.formats.xspace.reader.pair_codes": "test_reader_code_kernels_and_their_twins_agree",
    "rooflens.trace.formats.xspace.reader.apply_codes": "test_reader_code_kernels_and_their_twins_agree",
    "rooflens.trace.formats.nsys_sqlite.nest.links": "test_nvtx_nesting_kernel_and_its_twin_agree",
    "rooflens.trace.stats._busy_sums": "test_busy_time_together_and_its_twin_agree",
    "rooflens.trace.stats.merged_of": "test_busy_intervals_of_a_device_and_their_twin_agree",
    "rooflens.trace.stats._in_steps_sums": "test_time_inside_the_steps_and_its_twin_agree",
    "rooflens.trace.groupby.weighted_sums": "test_weighted_sums_and_their_twin_agree",
    "rooflens.trace.groupby.group_medians": "test_grouping_kernels_and_their_twins_agree",
    "rooflens.trace.stats._sums_by_key": "test_sums_per_execution_and_their_twin_agree",
    "rooflens.trace.stats._devices_seen": "test_sums_per_execution_and_their_twin_agree",
    "rooflens.trace.stats._frame_in_gaps": "test_the_host_frame_in_each_gap_and_its_twin_agree",
}

TRACES = [("tpu", "xprof_tpu_inference_2.v6e-4.xplane.pb"),
          ("tpu", "vllm_tpu_qwen3_2026_01_11_21_26_41.trace.json.gz"),
          ("gpu_nvidia", "nsys_jax_pax_fsdp4_a100", "pax_fsdp4_4proc_proc0.zip"),
          ("gpu_amd", "tracelens_mi300x_jax_conv_minimal_legacy.xplane.pb")]


def _pair(name: str):
    """(compiled, plain) of a kernel named ``module.function`` (its module imported here: a test run alone
    may not have imported it yet)."""
    importlib.import_module(name.rpartition(".")[0])
    compiled.compile_kernels()
    k = compiled.kernels()[name]
    assert k.plain is not None and k.dispatcher is not None, name
    return k.dispatcher, k.plain


def _same(a, b, what: str) -> None:
    a = a if isinstance(a, tuple) else (a,)
    b = b if isinstance(b, tuple) else (b,)
    assert len(a) == len(b), what
    for k, (x, y) in enumerate(zip(a, b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=f"{what}: result {k}")


def test_every_twin_is_checked():
    import rooflens.trace.formats.nsys_sqlite.nest  # noqa: F401
    import rooflens.trace.formats.xspace.plain  # noqa: F401  (declares the walks' twins)
    import rooflens.trace.formats.xspace.reader  # noqa: F401
    import rooflens.trace.stats  # noqa: F401
    import rooflens.trace.warmup  # noqa: F401

    twins = {name for name, k in compiled.kernels().items() if k.plain is not None}
    assert twins == set(CHECKED), twins ^ set(CHECKED)
    # and each check named is a test that exists: here, or test_fixed_cost's walk over every XSpace fixture
    from tests import test_fixed_cost

    for name, check in CHECKED.items():
        where = test_fixed_cost if check == "test_fixed_cost" else None
        test = getattr(where, "test_plain_and_compiled_walks_decode_every_fixture_alike", None) if where else \
            globals().get(check)
        assert callable(test), f"{name}: its check {check!r} is no test"


@pytest.fixture(scope="module", params=TRACES, ids=lambda p: p[-1])
def table(request):
    return rl.load(fixture_path(*request.param)).table


def test_execution_kernels_and_their_twins_agree(table):
    """execution_index's walks (which execution of its program each event is; each execution's first and last
    event) on a real table, built as the grouping builds them."""
    t = table
    keys, inv = unique_rows(t.host, t.device, t.program)
    start = t.start_ns
    order = (_pair("rooflens.trace.groupby.grouped_order")[0](inv, len(keys)) if is_sorted(start)
             else np.lexsort((start, inv)))
    bounds = np.concatenate([[0], np.cumsum(np.bincount(inv, minlength=len(keys)))])
    fast, plain = _pair("rooflens.trace.warmup.executions_of")
    from rooflens.trace.warmup import control_names

    args = (order, bounds, t.name.astype(np.int64), max(len(t.names), 1), start, control_names(t.names))
    idx = fast(*args)
    _same(idx, plain(*args), "executions_of")
    fast, plain = _pair("rooflens.trace.warmup.execution_rows")
    _same(fast(order, bounds, idx, start, t.end_ns), plain(order, bounds, idx, start, t.end_ns), "execution_rows")


def test_grouping_kernels_and_their_twins_agree(table):
    t = table
    key = t.host.astype(np.int64) << 40 | (t.device.astype(np.int64) + 1) << 20 | t.line
    codes, inv = unique_inverse(key)
    m = len(codes)
    lo = int(t.line.min())
    for name, args in (("dense_inverse", (t.line, lo, int(t.line.max()) - lo + 1)),
                       ("dense_inverse", (t.device.astype(np.int64) * 7 - 3, -3, int(t.device.max()) * 7 + 1)),
                       ("grouped_order", (inv, m)), ("grouped_sorted", (inv, m, t.start_ps.copy())),
                       ("group_extent", (inv, m, t.start_ns, t.end_ns)),
                       ("timeline_order", (inv, m, t.start_ps, t.dur_ps)), ("group_medians", (inv, m, t.dur_ns)),
                       ("group_medians", (inv[:3], m, t.dur_ns[:3]))):  # groups with no member: zeros
        fast, plain = _pair(f"rooflens.trace.groupby.{name}")
        _same(fast(*args), plain(*args), name)
    # each timeline's median, smallest and largest duration, as numpy finds them group by group
    medians, lo, hi = _pair("rooflens.trace.groupby.group_medians")[0](inv, m, t.dur_ns)
    for g in range(m):
        d = t.dur_ns[inv == g]
        assert (medians[g], lo[g], hi[g]) == (np.median(d), d.min(), d.max()), g
    # a row key's digit, in place: the same key either way, and the key row_key's tables are grouped by
    fast, plain = _pair("rooflens.trace.groupby.radix_step")
    keys = [np.arange(len(t), dtype=np.int64) % 5 for _ in range(2)]
    for step, key in zip((fast, plain), keys):
        step(key, t.line, int(t.line.max()) + 2, -1)
        step(key, t.device, int(t.device.max()) + 1, 0)
    _same(keys[0], keys[1], "radix_step")
    want = ((np.arange(len(t)) % 5) * (int(t.line.max()) + 2) + t.line + 1) * (int(t.device.max()) + 1) + t.device
    np.testing.assert_array_equal(keys[0], want)
    # self times: events on their lines in time order, the longest first of those starting together
    start, dur = t.start_ps, t.dur_ps
    order = np.lexsort((-dur, start, inv))
    fast, plain = _pair("rooflens.trace.stats._self_times_sorted")
    _same(fast(start, dur, inv, order), plain(start, dur, inv, order), "self times")


def test_control_op_coverage_and_its_twin_agree(tmp_path):
    """How much of each loop's and branch's span the program's other events cover (what control_self_ps takes
    away), on a real CPU capture with a scan, a fori_loop and a cond, 3 steps."""
    @jax.jit
    def loops_step(x):
        y, _ = lax.scan(lambda c, _: (jnp.sin(c) @ c * 1e-3, None), x, None, length=3)
        z = lax.fori_loop(0, 2, lambda i, c: c * 0.5 + 1.0, y)
        return lax.cond(z.sum() > 0, lambda a: a + 1.0, lambda a: a - 1.0, z)

    prof = rl.capture(loops_step, jax.device_put(jnp.ones((128, 128)), jax.devices()[0]), steps=3,
                      logdir=str(tmp_path / "loops"))
    t = prof.table
    from rooflens.trace.stats import control_rows

    rows = control_rows(t, prof.op_info)
    assert len(rows) >= 9  # two loops and a branch, three executions
    _, group = unique_rows(t.host, t.device, t.program)
    sel = np.flatnonzero(np.isin(group, np.unique(group[rows])))
    codes, inv = unique_inverse(group[sel])
    start, dur = t.start_ps[sel], t.dur_ps[sel]
    order = np.lexsort((-dur, start, inv))
    place = np.empty(len(sel), np.int64)
    place[order] = np.arange(len(sel))
    targets = place[np.searchsorted(sel, rows)]
    fast, plain = _pair("rooflens.trace.stats._covered_after")
    covered = fast(order, inv, start, start + dur, targets)
    _same(covered, plain(order, inv, start, start + dur, targets), "covered_after")
    assert (covered > 0).all() and (covered <= t.dur_ps[rows]).all()
    # self times where ops really nest (the loops' bodies inside them on the CPU thread)
    _, lanes = unique_rows(t.host, t.device, t.line)
    order = np.lexsort((-t.dur_ps, t.start_ps, lanes))
    fast, plain = _pair("rooflens.trace.stats._self_times_sorted")
    got = plain(t.start_ps, t.dur_ps, lanes, order)
    _same(fast(t.start_ps, t.dur_ps, lanes, order), got, "self times, nested")
    assert (got[rows] < t.dur_ps[rows]).any()


def test_reader_code_kernels_and_their_twins_agree():
    """The XSpace reader's (module, program_id) pair codes: the compiled walk numbers pairs as they first appear,
    the twin by numpy's sort; each row's pair is the same either way, and so are the op and program codes."""
    from rooflens.trace.formats.xspace import reader

    raw = reader.read_xspace(fixture_path(*TRACES[0]))
    t = raw.table
    # a real row set: every event's op code, and its (module, program id) pair, taken from the table
    rows = np.arange(len(t), dtype=np.int64)
    op = t.name.astype(np.int64)
    mod = t.program.astype(np.int64)
    pid = (t.program.astype(np.int64) * 7 + 3) % 5  # several ids per module, as programs compiled twice have
    fast, plain = _pair("rooflens.trace.formats.xspace.reader.pair_codes")
    seen_a, seen_b = np.zeros(len(t.names), bool), np.zeros(len(t.names), bool)
    a, b = fast(rows, op, mod, pid, seen_a), plain(rows, op, mod, pid, seen_b)
    _same(seen_a, seen_b, "ops present")
    _same((a[1][a[0]], a[2][a[0]]), (b[1][b[0]], b[2][b[0]]), "each row's pair")
    lut = np.arange(len(t.names), dtype=np.int32)[::-1].copy()
    plut = np.arange(len(a[1]), dtype=np.int32) * 2
    fast, plain = _pair("rooflens.trace.formats.xspace.reader.apply_codes")
    _same(fast(rows, op, lut, a[0].copy(), plut), plain(rows, op, lut, a[0].copy(), plut), "apply_codes")


@pytest.mark.parametrize("export", ["nsysai_pytorch_h100x2_mfu_before.sqlite", "pax_fsdp4_proc0.DERIVED.sqlite"])
def test_nvtx_nesting_kernel_and_its_twin_agree(export):
    """NVTX push/pop ranges' depths and parents: the compiled pass (a heap of open ends) and its numpy twin (a
    search of the sorted ends, then one depth at a time or one sort), on a real PyTorch export's aten ranges and a
    real JAX export's module → thunk ranges, and on the same ranges cut to overlap (ends moved at random), where
    push/pop ranges no longer nest and the two must still agree by their one definition."""
    from rooflens.trace.formats.nsys_sqlite import db as D
    from rooflens.trace.formats.nsys_sqlite import nest as N
    from rooflens.trace.formats.nsys_sqlite import tables as T

    with D.Export(fixture_path("gpu_nvidia", "nsys_sqlite", export)) as db:
        r = T.ranges(db, 1 << 62)
    fast, plain = _pair("rooflens.trace.formats.nsys_sqlite.nest.links")
    rng = np.random.default_rng(0)
    for end in (r.end, r.start + (r.end - r.start) * rng.uniform(0.2, 3.0, len(r)).astype(np.int64) + 1):
        nest = N.Nest(r.thread, r.start, end)
        depth, parent = fast(nest.t, nest.start, nest.end)
        assert depth.max() >= 3 and (parent >= 0).any()
        _same((depth, parent), plain(nest.t, nest.start, nest.end), export)
        deep = N.LEVEL_BY_LEVEL
        try:  # the twin's other way to parents (nestings deeper than it walks level by level) agrees too
            N.LEVEL_BY_LEVEL = 0
            _same(N._parents_np(nest.t, depth), parent, f"{export}: parents by one sort")
        finally:
            N.LEVEL_BY_LEVEL = deep


def test_busy_time_together_and_its_twin_agree(table):
    """Each device's busy time summed and all devices' as one (the CPU's concurrency), some ops left out (as the
    collectives are): the compiled walk and its numpy twin, in the table's order and through an order that sorts
    it; and both equal the union measured here, device by device, from the events themselves."""
    t = table
    skip = np.zeros((max(len(t.programs), 1), len(t.names) + 1), bool)
    skip.flat[::3] = True
    fast, plain = _pair("rooflens.trace.stats._busy_sums")
    start, dur, order = t.start_ps, t.dur_ps, np.argsort(t.start_ps, kind="stable")
    none = np.zeros(0, np.int64)
    args = (t.device, t.program, t.name, skip)
    got = fast(start, dur, *args, order)
    _same(tuple(int(v) for v in got), tuple(int(v) for v in plain(start, dur, *args, order)), "busy together")
    if is_sorted(start):
        _same(tuple(int(v) for v in fast(start, dur, *args, none)), tuple(int(v) for v in got), "in table order")
    kept = ~skip[t.program, t.name]

    def union(rows) -> int:  # merged intervals, by a walk over the sorted events here
        total, s0, e0 = 0, None, None
        for s, e in sorted(zip(start[rows].tolist(), (start + dur)[rows].tolist())):
            if s0 is None or s > e0:
                total += 0 if s0 is None else e0 - s0
                s0, e0 = s, e
            else:
                e0 = max(e0, e)
        return total + (0 if s0 is None else e0 - s0)

    per = sum(union(np.flatnonzero(kept & (t.device == d))) for d in np.unique(t.device))
    assert (int(got[0]), int(got[1])) == (per, union(np.flatnonzero(kept))) and per >= int(got[1]) > 0


def test_time_inside_the_steps_and_its_twin_agree():
    """Each op's time and events inside the steps, on the Pax pod's process (steps marked, some ops outside them):
    the compiled pass and its numpy twin agree value for value, and both equal the sums made here op by op."""
    t = rl.load(fixture_path("gpu_nvidia", "nsys_jax_pax_fsdp4_a100", "pax_fsdp4_4proc_proc0.zip")).table
    inside = t.step >= 0
    assert 0 < inside.sum() < len(t)  # both kinds of event: the pass must tell them apart
    uniq, inv = unique_inverse(t.program.astype(np.int64) * (len(t.names) + 1) + t.name)
    fast, plain = _pair("rooflens.trace.stats._in_steps_sums")
    got = fast(t.step, inv, t.dur_ps, len(uniq))
    _same(got, plain(t.step, inv, t.dur_ps, len(uniq)), "in steps")
    for k in (0, len(uniq) // 2, len(uniq) - 1):
        mine = inside & (inv == k)
        assert got[1][k] == mine.sum() and got[0][k] == float(t.dur_ps[mine].astype(np.float64).sum())


def test_weighted_sums_and_their_twin_agree(table):
    """Each op's time, from its events' integer ps scaled to ns and from float ns: the compiled sums equal numpy's
    bincount of the same weights bit for bit (the op stats' totals must not move by a rounding)."""
    t = table
    uniq, inv = unique_inverse(t.program.astype(np.int64) * (len(t.names) + 1) + t.name)
    fast, plain = _pair("rooflens.trace.groupby.weighted_sums")
    for weights, scale in ((t.dur_ps, 1e-3), (t.dur_ps, 1.0), (t.dur_ns, 1.0)):
        got = fast(inv, weights, len(uniq), scale)
        _same(got, plain(inv, weights, len(uniq), scale), f"{weights.dtype} × {scale}")
        _same(got, np.bincount(inv, weights=weights * scale, minlength=len(uniq)), "bincount")
    assert fast(inv, t.dur_ns, len(uniq), 1.0).sum() > 0


def test_sums_per_execution_and_their_twin_agree(table, request):
    """Each op's time in each (host, device, execution) it ran in, the trace whole and cut at 61 % of its events
    (its last executions cut short, left out): the table of sums by key and its numpy twin agree, and both give the
    sums grouped here key by key, in key order."""
    from rooflens.trace.warmup import cut_executions, execution_index

    fast, plain = _pair("rooflens.trace.stats._sums_by_key")
    cut_any = False
    for t in (table, table.select(np.arange(int(len(table) * 0.61)))):
        _, inv = unique_inverse(t.program.astype(np.int64) * (len(t.names) + 1) + t.name)
        idx, ran = execution_index(t), ~cut_executions(t)
        cut_any |= not ran.all()
        cols = (inv, t.host, t.device, idx)
        lo = np.asarray([int(c.min()) for c in cols], np.int64)
        span = np.asarray([int(c.max()) - int(c.min()) + 1 for c in cols], np.int64)
        args = (*cols, ran, t.dur_ps, lo, span, int(np.prod(span)))
        at, sums = fast(*args)
        _same((at, sums), plain(*args), "sums by key")
        want: dict[tuple, float] = {}
        for row in np.flatnonzero(ran).tolist():
            k = tuple(int(c[row]) for c in cols)
            want[k] = want.get(k, 0.0) + float(t.dur_ps[row])
        keys = sorted(want)
        assert len(at) == len(keys) and sums.tolist() == [want[k] for k in keys]
    if request.node.callspec.params["table"][-1].startswith(("xprof_tpu", "pax_")):  # executions of many ops
        assert cut_any  # the cut trace leaves its last executions out
    # and the devices each op ran on, as flags by (op, device): both ways, and as the events have them
    fast, plain = _pair("rooflens.trace.stats._devices_seen")
    _, inv = unique_inverse(table.program.astype(np.int64) * (len(table.names) + 1) + table.name)
    lo, span, m = int(table.device.min()), int(table.device.max() - table.device.min()) + 1, int(inv.max()) + 1
    seen = fast(inv, table.device, lo, span, m)
    _same(seen, plain(inv, table.device, lo, span, m), "devices seen")
    assert set(np.flatnonzero(seen).tolist()) == {int(g) * span + int(d) - lo for g, d in zip(inv, table.device)}


def test_busy_intervals_of_a_device_and_their_twin_agree(table):
    """Each device's events (and each host's, all together) merged into busy intervals: the compiled pass and its
    numpy twin give the same first positions, starts and ends, value for value, and both the merge that
    ``busy_union`` makes of the events' own starts and ends."""
    from rooflens.trace.stats import busy_union
    from rooflens.trace.steps import groups_of

    t = table
    fast, plain = _pair("rooflens.trace.stats.merged_of")
    start, dur = t.start_ns, t.dur_ns
    groups = list(groups_of(row_key(t.host, t.device)[0], dense=True)) + list(groups_of(t.host))
    merged = 0
    for sel in groups:
        got = fast(start, dur, sel)
        _same(got, plain(start, dur, sel), "merged intervals")
        busy, ms, me = busy_union(start[sel], start[sel] + dur[sel])
        _same(got[1:], (ms, me), "the union's intervals")
        assert float((got[2] - got[1]).sum()) == busy and (got[0] == np.searchsorted(start[sel], ms)).all()
        merged += len(ms)
    assert merged > len(groups)  # idle gaps were found, not one interval per device


def test_unique_values_and_median_are_numpys(table):
    """``groupby.unique_values`` and ``groupby.median`` stand for ``np.unique`` and ``np.median`` everywhere (numpy's
    own import numpy.ma, 50 ms, the first time either runs): the same answers on a real table's columns, whole and
    cut to odd and even lengths, dense codes and sparse ones, with a NaN and with none."""
    from rooflens.trace.groupby import median, unique_values

    t = table
    rng = np.random.default_rng(0)
    columns = [t.program, t.name, t.device, t.step, t.start_ps, t.dur_ps, t.dur_ns, t.name.astype(np.int64) << 40,
               (t.start_ps % 7919).astype(np.int16)]
    for col in columns:
        for part in (col, col[: max(len(col) - 1, 1)], col[rng.permutation(len(col))][:101], col[:0], col[:1]):
            u = unique_values(part)
            assert u.dtype == np.unique(part).dtype and np.array_equal(u, np.unique(part))
            if len(part):
                assert median(part) == float(np.median(part))
    assert np.isnan(median(np.append(t.dur_ns, np.nan))) and np.isnan(median([]))
    assert median(list(t.dur_ns[:10])) == float(np.median(t.dur_ns[:10]))


@pytest.mark.parametrize("run", [("cpu_runs", "input_bound_host"), ("cpu_runs", "input_bound_readback")],
                         ids=lambda r: r[-1])
def test_the_host_frame_in_each_gap_and_its_twin_agree(run):
    """The sweep that credits each gap of a device to the host's Python frame then (stats.host_in_gaps), on real
    runs' frames (JAX's Python tracer) and the gaps between their devices' busy intervals; some gaps are credited
    to a frame and some to none (-1), so both branches are compared."""
    from rooflens.trace.stats import _own, host_spans

    (path,) = (fixture_path(*run) / "plugins" / "profile").iterdir()
    prof = rl.load(path)
    names, fs, fe = host_spans(prof.host_events)
    t = prof.table
    order = np.argsort(t.start_ns, kind="stable")
    s, e = t.start_ns[order].astype(np.float64), t.end_ns[order].astype(np.float64)
    run_end = np.maximum.accumulate(e)
    gap = np.flatnonzero(s[1:] > run_end[:-1])
    g0, g1 = run_end[:-1][gap], s[1:][gap]
    by = np.lexsort((fs - fe, fs))
    own = np.asarray([_own(n.lstrip("$")) for n in names], bool)[by]
    mine = np.asarray([n.lstrip("$").startswith("input_bound.py:") for n in names], bool)[by]
    fast, plain = _pair("rooflens.trace.stats._frame_in_gaps")
    got = fast(fs[by], fe[by], own, mine, g0, g1)
    _same(got, plain(fs[by], fe[by], own, mine, g0, g1), "_frame_in_gaps")
    at, at_mine = got
    assert len(g0) > 20 and (at >= 0).any() and (at < 0).any(), (len(g0), np.unique(at).size)
