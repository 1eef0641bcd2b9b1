"""The measurement model on real traces: an op's time per execution is all its kernels in one execution of its
program (not one kernel), a trace that stopped with dispatched work still queued says so, and control ops
(``while``, ``conditional``, ``call``) hold no time of their own whichever line their body ran on.

Every expected figure is computed here from the raw events by other means than rooflens's (jax's own
``ProfileData`` reader and the host's dispatch events; the nsys-jax archive's NVTX ranges), never taken from
the code under test."""

import dataclasses
import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import rooflens as rl
from rooflens.analysis import analyze
from rooflens.analysis.compare import runs_in_execution
from rooflens.trace import op_stats
from rooflens.trace.dispatch import unran_dispatches
from rooflens.trace.formats.chrome.reader import read_chrome
from rooflens.trace.formats.xspace.reader import read_xspace
from rooflens.trace.warmup import (
    cut_executions,
    execution_spans,
    judge_window,
    program_executions,
)
from tests.conftest import fixture_path, self_times_from_events

SCRIPTS = Path(__file__).parent / "run_scripts"


def _stat(stats, name: str, program: str | None = None):
    return next(s for s in stats.op_stats if s.name == name and (program is None or s.program == program))


def _runs(xspace: Path, module: str) -> dict[tuple[int, int], list[tuple[str, float, float]]]:
    """A program's executions as XLA:CPU's thunk executor stamps its op events, read by jax's own reader:
    (device_ordinal, run_id) → [(op, start ns, duration ns)], each execution's events in time order."""
    from jax.profiler import ProfileData

    out: dict[tuple[int, int], list] = {}
    for plane in ProfileData.from_file(str(xspace)).planes:
        for line in plane.lines:
            for e in line.events:
                st = dict(e.stats)
                if st.get("hlo_module") == module and "run_id" in st:
                    out.setdefault((st["device_ordinal"], st["run_id"]), []).append(
                        (st.get("hlo_op", e.name), e.start_ns, e.duration_ns))
    return {k: sorted(v, key=lambda x: x[1]) for k, v in out.items()}


def _most_runs_on_a_device(runs: dict) -> int:
    per_device: dict[int, int] = {}
    for device, _ in runs:
        per_device[device] = per_device.get(device, 0) + 1
    return max(per_device.values(), default=0)


# -- time per execution: the sum of an op's kernels in one execution -------------------------------------------

def _outermost(events: list[tuple[float, float]]) -> list[float]:
    """Starts of the events not nested in an earlier one (jaxlib records a dispatch twice, one inside the other)."""
    out, end = [], -np.inf
    for s, d in sorted(events):
        if s >= end:
            out.append(s)
        end = max(end, s + d)
    return out


def test_an_amd_convolution_is_timed_by_its_two_kernels_per_execution():
    """MIOpen runs the convolution as two kernels (``Im3d2Col`` and a GEMM) under one HLO op: its time per
    execution is their sum, computed here from jax's own reader, each execution the kernels between one host
    dispatch of the function and the next."""
    from jax.profiler import ProfileData

    path = fixture_path("gpu_amd", "tracelens_mi300x_jax_conv_minimal_legacy.xplane.pb")
    data = ProfileData.from_file(str(path))
    kernels, dispatches = [], []
    for plane in data.planes:
        for line in plane.lines:
            for e in line.events:
                st = dict(e.stats)
                if plane.name.startswith("/device:GPU") and st.get("hlo_op") == "cudnn-conv.1.0":
                    kernels.append((e.start_ns, e.duration_ns))
                elif plane.name == "/host:CPU" and e.name == "PjitFunction(forward_3d_conv)":
                    dispatches.append((e.start_ns, e.duration_ns))
    starts = _outermost(dispatches)
    bounds = np.asarray(starts + [np.inf])
    at = np.searchsorted(bounds, [s for s, _ in kernels], side="right") - 1
    sums = np.bincount(at, weights=[d for _, d in kernels])
    per_execution = sums[sums > 0] * 1e-9
    assert len(kernels) == 10 and len(per_execution) == 5  # two kernels in each of five executions

    prof = rl.load(path)
    s = _stat(op_stats(prof), "cudnn-conv.1.0")
    assert (s.occurrences, s.executions) == (10, 5)
    assert s.median_execution_s == pytest.approx(np.median(per_execution), rel=1e-9)
    assert s.min_execution_s == pytest.approx(per_execution.min(), rel=1e-9)
    assert s.max_execution_s == pytest.approx(per_execution.max(), rel=1e-9)
    assert s.median_execution_s > 1.8 * s.median_time_s  # the per-kernel figure is half the op

    # the comparison measures the op by its executions, with events and executions kept apart
    rep = analyze(prof)
    c = next(c for c in rep.comparison if c.name == "cudnn-conv.1.0")
    assert (c.occurrences, c.executions, c.runs_per_execution) == (10, 5, 1.0)
    # the report's one statistic: the median per execution, the mean beside it
    assert c.measured_s == pytest.approx(np.median(per_execution), rel=1e-9)
    assert c.mean_s == pytest.approx(np.mean(per_execution), rel=1e-9)
    assert s.mean_execution_s == pytest.approx(np.mean(per_execution), rel=1e-9)
    doc = rep.to_json()
    assert doc["measured_statistic"] == "median per execution"
    row = next(r for r in doc["comparison"] if r["name"] == "cudnn-conv.1.0")
    assert (row["occurrences"], row["executions"]) == (10, 5)
    op = next(r for r in doc["op_stats"] if r["name"] == "cudnn-conv.1.0")
    assert op["median_execution_s"] == pytest.approx(np.median(per_execution), rel=1e-9)

    # its Chrome twin (jaxlib's export of the same XSpace) gives the same figures
    chrome = _stat(op_stats(rl.load(fixture_path("gpu_amd",
                                                 "tracelens_mi300x_jax_conv_minimal_legacy.DERIVED.trace.json.gz"))),
                   "cudnn-conv.1.0")
    assert (chrome.occurrences, chrome.executions) == (10, 5)
    assert chrome.median_execution_s == pytest.approx(s.median_execution_s, rel=1e-6)


def test_an_nvidia_op_with_eight_thunks_per_step_is_timed_by_their_sum():
    """In the Pax A100 archive ``copy_fusion`` runs 8 times in every step program execution: its time per
    execution is the sum of its 8 NVTX-projected ranges under that execution's ``XlaModule`` range."""
    import pyarrow.parquet as pq

    path = fixture_path("gpu_nvidia", "nsys_jax_pax_fsdp4_a100", "pax_fsdp4_4proc_proc0.zip")
    with zipfile.ZipFile(path) as z:
        rows = pq.read_table(io.BytesIO(z.read("nvtx_gpu_proj_trace/trace.parquet"))).to_pydict()
    name = [n or "" for n in rows["Name"]]
    module = {rows["RangeId"][i] for i, n in enumerate(name) if "XlaModule:#hlo_module=pjit__wrapped_step_fn," in n}
    sums: dict[float, int] = {}
    for i, n in enumerate(name):
        if n.endswith("hlo_op=copy_fusion#") and rows["ParentId"][i] in module:
            sums[rows["ParentId"][i]] = sums.get(rows["ParentId"][i], 0) + rows["Projected Duration"][i]
    per_execution = np.asarray(list(sums.values())) * 1e-9
    assert len(per_execution) == 5

    s = _stat(op_stats(rl.load(path)), "copy_fusion", "pjit__wrapped_step_fn")
    assert (s.occurrences, s.executions) == (40, 5)
    assert s.median_execution_s == pytest.approx(np.median(per_execution), rel=1e-9)
    assert s.mean_execution_s == pytest.approx(np.mean(per_execution), rel=1e-9)
    assert (s.min_execution_s, s.max_execution_s) == pytest.approx((per_execution.min(), per_execution.max()),
                                                                   rel=1e-9)


@pytest.mark.parametrize("parts", [("gpu_nvidia", "nsys_jax_pax_fsdp4_a100", "pax_fsdp4_4proc_proc0.zip"),
                                   ("tpu", "xprof_tpu_inference_2.v6e-4.xplane.pb")])
def test_execution_sums_by_key_tables_equal_the_grouped_ones(parts, monkeypatch):
    """The sums per (op, execution) made from a table indexed by their key (few enough possible keys) are the
    ones grouping every key gives (the way of a trace with too many)."""
    from rooflens.trace import stats as S
    from rooflens.trace.groupby import unique_inverse

    t = rl.load(fixture_path(*parts)).table
    inv = unique_inverse(t.program.astype(np.int64) * (len(t.names) + 1) + t.name)[1]
    table, tables = S._sums_by_key, []
    monkeypatch.setattr(S, "_sums_by_key", lambda *a: tables.append(a[-1]) or table(*a))
    by_key = S.execution_sums(t, inv)
    monkeypatch.setattr(S, "dense", lambda *a, **k: False)  # as if the possible keys were too many for a table
    grouped = S.execution_sums(t, inv)
    assert len(tables) == 1  # the first by the table, the second grouped
    assert np.array_equal(by_key[0], grouped[0]) and np.array_equal(by_key[1], grouped[1])
    assert len(grouped[0]) <= len(t) and grouped[1].sum() == t.dur_ps.sum()


@pytest.fixture(scope="module")
def loops(tmp_path_factory):
    """A real JAX CPU program with a scan (3 iterations of sin and a 256×256 matmul), a fori_loop (2) and a
    cond, captured for 3 steps."""
    @jax.jit
    def loops_step(x):
        def body(c, _):
            return jnp.sin(c) @ c * 1e-3, None
        y, _ = lax.scan(body, x, None, length=3)
        z = lax.fori_loop(0, 2, lambda i, c: c * 0.5 + 1.0, y)
        return lax.cond(z.sum() > 0, lambda a: a + 1.0, lambda a: a - 1.0, z)

    x = jax.device_put(jnp.ones((256, 256)), jax.devices()[0])
    return rl.capture(loops_step, x, steps=3, logdir=str(tmp_path_factory.mktemp("loops")))


def test_a_loop_body_op_is_measured_per_execution_against_its_roofline_times_its_trip_count(loops):
    """An op in a scan body runs 3 times per program execution: its time in an execution holds every
    iteration, and its roofline for an execution is 3 runs of it (the HLO's trip count)."""
    from rooflens.cost.model import costs, price

    program = next(p for p in loops.table.programs if "loops_step" in p)
    module = loops.module_for(program)
    runs = runs_in_execution(module)
    body = [n for n, k in runs.items() if k == 3 and module.find(n).opcode == "fusion"]
    assert body, runs
    chip = rl.chip("tpu-v5e")  # any catalogue chip: the roofline's arithmetic, not this machine's
    per_run = {oc.name: price(oc, chip, num_devices=module.num_devices).t_pred_s for oc in costs(module)}
    rep = analyze(loops, chip=chip)
    runs_of = _runs(Path(loops.sources[0]), program)  # the executions as the trace's own run_ids tell them
    assert len(runs_of) == 3
    checked = 0
    for c in (c for c in rep.comparison if c.name in body):
        per_execution = np.asarray([sum(d for op, _, d in evs if op == c.name) for evs in runs_of.values()]) * 1e-9
        assert (per_execution > 0).all()
        assert c.runs_per_execution == 3 and c.executions == 3 and c.occurrences == 9 and c.runs == 3
        assert c.measured_s == pytest.approx(np.median(per_execution), rel=1e-6)
        assert c.mean_s == pytest.approx(np.mean(per_execution), rel=1e-6)
        if c.predicted_s is not None:
            assert c.predicted_s == pytest.approx(3 * per_run[c.name], rel=1e-9)
            assert any("× 3 runs in one execution" in line for line in c.explanation)
            checked += 1
    assert checked


# -- control ops: no time of their own -------------------------------------------------------------------------

def test_control_ops_hold_no_time_of_their_own_on_any_line(loops):
    """The loops' and the branch's self time is their span less their body's; with the body's events moved to
    another line (as a GPU's streams or a CPU's worker threads hold them) it still is, where XProf's rule
    (children nested on the same line) would give the loop its whole span."""
    t = loops.table
    info = loops.op_info
    control = {n for (p, n), oi in info.items() if oi.opcode in ("while", "conditional")}
    assert {info[k].opcode for k in info if k[1] in control} == {"while", "conditional"}
    stats = op_stats(loops)
    # each control event's own time, from the events: its span less the union of the spans (cut at its end) of
    # the program's other events on its device that start inside it. Exact whatever the machine's load (a loaded
    # machine stretches the loop's overhead; it cannot make this sum differ).
    is_ctrl = np.isin(t.name, [t.names.index(n) for n in control])
    start, end = t.start_ps.tolist(), (t.start_ps + t.dur_ps).tolist()
    key = list(zip(t.host.tolist(), t.device.tolist(), t.program.tolist()))
    own: dict[str, int] = {}
    for i in np.flatnonzero(is_ctrl).tolist():
        inside = sorted((start[j], min(end[j], end[i])) for j in range(len(start))
                        if j != i and key[j] == key[i] and start[i] <= start[j] < end[i])
        covered, (cs, ce) = 0, (start[i], start[i])
        for a, b in inside:
            if a > ce:
                covered, cs, ce = covered + ce - cs, a, b
            else:
                ce = max(ce, b)
        name = t.names[t.name[i]]
        own[name] = own.get(name, 0) + end[i] - start[i] - (covered + ce - cs)
    for s in (s for s in stats.op_stats if s.name in control):
        assert s.self_time_s == pytest.approx(own[s.name] * 1e-12, rel=1e-9, abs=1e-12), s.name
        assert s.self_time_s < s.total_time_s  # the body's time is not the loop's

    # the body's events on a line of their own: nesting on the line no longer sees them
    is_control = np.isin(t.name, [t.names.index(n) for n in control])
    moved = dataclasses.replace(t, line=np.where(is_control, t.line, len(t.lines)).astype(np.int32),
                                lines=[*t.lines, "another stream"])
    other = dataclasses.replace(loops, table=moved)
    line_rule = self_times_from_events(moved)  # each line's time to its innermost event: XProf's rule
    assert line_rule[is_control].sum() == t.dur_ps[is_control].sum()  # there, the whole span
    moved_stats = op_stats(other)
    for s in (s for s in moved_stats.op_stats if s.name in control):
        assert s.self_time_s == pytest.approx(_stat(stats, s.name, s.program).self_time_s, abs=1e-9)


# -- the async tail: dispatches against executions -------------------------------------------------------------

def _traced(tmp: Path, steps: int, *flags: str) -> Path:
    logdir = tmp / ("run" + "".join(flags))
    r = subprocess.run([sys.executable, str(SCRIPTS / "traced_tail.py"), str(logdir), str(steps), *flags],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    return logdir


@pytest.fixture(scope="module")
def tail(tmp_path_factory):
    """The same 30-step loop under its own jax.profiler.trace, not waiting for the device, and waiting."""
    tmp = tmp_path_factory.mktemp("tail")
    return _traced(tmp, 30), _traced(tmp, 30, "--block")


def _dispatches(logdir: Path) -> int:
    """The host's dispatches of train_step in the XSpace, read by jax's own reader (outermost events only)."""
    from jax.profiler import ProfileData

    xspace = next(logdir.rglob("*.xplane.pb"))
    events = [(e.start_ns, e.duration_ns) for p in ProfileData.from_file(str(xspace)).planes
              if p.name == "/host:CPU" for line in p.lines for e in line.events if e.name == "PjitFunction(train_step)"]
    return len(_outermost(events))


def test_a_trace_stopped_with_steps_queued_says_how_many_never_ran(tail):
    unblocked, _ = tail
    assert _dispatches(unblocked) == 30
    prof = rl.load(unblocked)
    t = prof.table
    ran = _most_runs_on_a_device(_runs(next(unblocked.rglob("*.xplane.pb")), "jit_train_step"))
    complete = program_executions(t)["jit_train_step"].runs_per_device
    assert complete in (ran, ran - 1)  # the one running when the trace stopped may show its first ops only
    u = next(u for u in prof.unran if u.program == "jit_train_step")
    assert (u.function, u.dispatched, u.ran, u.queued) == ("train_step", 30, ran, True)
    assert 0 < ran < 30 and u.missing_s > 0
    assert any(n.startswith(f"{30 - ran} of 30 dispatches of jit_train_step") and "block_until_ready" in n
               for n in prof.notes), prof.notes
    # the Chrome trace written beside it tells the same
    chrome = rl.load(next(unblocked.rglob("*.trace.json.gz")))
    assert [(v.program, v.dispatched, v.ran, v.queued) for v in chrome.unran] == \
        [(v.program, v.dispatched, v.ran, v.queued) for v in prof.unran]

    rep = analyze(prof, require_roofline=False)
    f = next(f for f in rep.findings if f.rule == "async-tail")
    assert f.severity == "high" and "block_until_ready" in f.fix and f"{30 - ran} of 30" in f.evidence[0]
    out = subprocess.run([sys.executable, "-m", "rooflens.cli", "report", str(unblocked), "--json",
                          "--no-calibrate"], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert "async-tail" in {f["rule"] for f in doc["findings"]}
    assert {(u["program"], u["dispatched"], u["ran"]) for u in doc["unran"]} >= {("jit_train_step", 30, ran)}


def test_a_trace_that_waited_for_the_device_has_no_tail(tail):
    _, blocked = tail
    assert _dispatches(blocked) == 30
    prof = rl.load(blocked)
    assert prof.unran == () and program_executions(prof.table)["jit_train_step"].runs_per_device == 30
    assert "async-tail" not in {f.rule for f in analyze(prof, require_roofline=False).findings}


def test_annotated_steps_whose_work_never_ran_are_not_steps(tmp_path):
    """Each dispatch inside a StepTraceAnnotation, not waiting at the end: the host annotated 30 steps, the
    devices ran the work of fewer; the steps are those whose work ran."""
    prof = rl.load(_traced(tmp_path, 30, "--annotate"))
    u = next(u for u in prof.unran if u.program == "jit_train_step")
    assert u.queued and u.ran < 30
    assert [n for n, _, _ in prof.steps] == list(range(30 - u.unran))
    assert any(n.startswith(f"the last {u.unran} annotated step(s)") for n in prof.notes), prof.notes
    assert set(np.unique(prof.table.step).tolist()) <= {-1, *range(30 - u.unran)}


def test_a_trace_with_no_device_event_at_all_names_the_queued_dispatches(tmp_path):
    """A loop of heavy steps dispatched and left: the trace ends before the device has finished one op."""
    script = tmp_path / "all_queued.py"
    script.write_text(
        "import sys, jax, jax.numpy as jnp\n"
        "f = jax.jit(lambda x: jnp.tanh(x @ x) @ x)\n"
        "x = jnp.ones((1024, 1024)); f(x).block_until_ready()\n"
        "with jax.profiler.trace(sys.argv[1]):\n"
        "    for _ in range(20):\n"
        "        x = f(x)\n")
    r = subprocess.run([sys.executable, str(script), str(tmp_path / "log")], capture_output=True, text=True,
                       timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    # how many executions the device began before the trace closed, from the trace's own run_ids: none on a
    # machine as slow as the test expects, some on a faster (or less loaded) one; the report must tell which
    runs = _runs(next((tmp_path / "log").rglob("*.xplane.pb")), "jit__lambda")
    ran = _most_runs_on_a_device(runs)
    assert ran < 20
    out = subprocess.run([sys.executable, "-m", "rooflens.cli", "report", str(tmp_path / "log"), "--no-calibrate",
                          "--json"], capture_output=True, text=True, timeout=240)
    if ran == 0:
        assert out.returncode == 2 and "Traceback" not in out.stderr and out.stdout == ""
        assert "20 of 20 dispatches of jit__lambda" in out.stderr and "block_until_ready" in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
        return
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert [(u["program"], u["dispatched"], u["ran"]) for u in doc["unran"]] == [("jit__lambda", 20, ran)]
    assert "async-tail" in {f["rule"] for f in doc["findings"]}


def test_dispatches_read_alike_from_xspace_and_chrome_and_counted_once():
    """The TPU capture's host records ``PjitFunction(f)`` twice per call, one inside the other: 100 calls, all
    run by every device."""
    x = read_xspace(fixture_path("tpu", "xprof_tpu_inference_2.v6e-4.xplane.pb"))
    c = read_chrome(fixture_path("tpu", "xprof_tpu_inference_2.v6e-4.DERIVED.trace.json.gz"))
    assert {k: len(v) for k, v in x.dispatches.items()} == {k: len(v) for k, v in c.dispatches.items()}
    assert len(x.dispatches["f"]) == 100
    prof = rl.load(fixture_path("tpu", "xprof_tpu_inference_2.v6e-4.xplane.pb"))
    assert program_executions(prof.table)["jit_f"].runs_per_device == 100 and prof.unran == ()


def test_dispatches_whose_device_events_the_trace_dropped_are_not_a_tail():
    """The AMD convolution trace: 10 dispatches, kernels of 5 on the device, then 8 s of trace with nothing:
    the device had the time, so the trace holds no events of theirs; it is said, and no async-tail is found."""
    prof = rl.load(fixture_path("gpu_amd", "tracelens_mi300x_jax_conv_minimal_legacy.xplane.pb"))
    assert [(u.program, u.dispatched, u.ran, u.queued) for u in prof.unran] == [("jit_forward_3d_conv", 10, 5, False)]
    assert any(n.startswith("5 of 10 dispatches of jit_forward_3d_conv") and "no execution on the device" in n
               and "block_until_ready" not in n and "?" not in n for n in prof.notes), prof.notes
    assert "async-tail" not in {f.rule for f in analyze(prof).findings}


def test_an_execution_cut_by_the_traces_end_is_not_a_step(tail):
    """The waited-for trace cut in the middle of its last step execution (as a stop at that moment leaves it):
    that execution is cut short, so it is not a step and its partial sums are not an execution of any op."""
    _, blocked = tail
    prof = rl.load(blocked)
    t = prof.table
    step = t.programs.index("jit_train_step")
    mine = t.program == step
    # the executions from the trace's own run_ids (one device ran them, one after the other)
    runs = _runs(next(blocked.rglob("*.xplane.pb")), "jit_train_step")
    assert len({d for d, _ in runs}) == 1 and len(runs) == 30
    order = sorted(runs.values(), key=lambda evs: evs[0][1])
    last = len(order) - 1  # executions 0 … last - 1 run whole before the cut
    raw_starts = np.sort([s for evs in order for _, s, _ in evs])
    shift = raw_starts[0] - t.start_ns[mine].min()  # the table's time origin against the reader's
    assert np.allclose(np.sort(t.start_ns[mine]) + shift, raw_starts, atol=1.0)
    in_last = order[-1]
    stop = in_last[len(in_last) // 2][1] - shift
    cut = t.select(np.flatnonzero(t.start_ns < stop))
    assert len(cut) < len(t)
    flagged = cut_executions(cut)
    last_start = in_last[0][1] - shift
    expected = (cut.program == step) & (cut.start_ns >= last_start - 0.5)  # the last execution's events, cut
    assert expected.any() and np.array_equal(flagged, expected)
    assert cut_executions(t).sum() == 0  # the whole trace has none

    truncated = dataclasses.replace(prof, table=cut, steps=[], notes=[], metadata={"window": {"steps": [0, 30]}})
    judged = judge_window(truncated)
    assert len(judged.steps) == last  # executions 0 … last - 1 are steps; the cut one is not
    assert any("cut short by the trace's end" in n for n in judged.notes)
    runs = program_executions(cut)["jit_train_step"]
    assert runs.runs_per_device == last
    whole = op_stats(prof)
    part = op_stats(dataclasses.replace(prof, table=cut))
    for s in (s for s in part.op_stats if s.program == "jit_train_step"):
        w = _stat(whole, s.name, s.program)
        assert s.executions == last and s.min_execution_s >= 0.5 * w.min_execution_s


def test_unran_dispatches_is_pure_and_matches_programs_by_their_names():
    """Programs are matched by name as JAX writes them (``<lambda>`` → ``jit__lambda``; ``pjit_`` in older jax),
    several compilations of one function together."""
    prof = rl.load(fixture_path("gpu_amd", "tracelens_mi300x_jax08_gemm.xplane.pb"))
    t = prof.table
    dots = [p for p in t.programs if p.startswith("jit_dot")]
    assert len(dots) >= 2
    spans = execution_spans(t)
    assert unran_dispatches(t, spans, prof.dispatches_of, prof.end_ns_of) == ()
    # one dispatch more than the devices ran, at the very end: queued
    host = t.hosts[0]
    more = {fn: np.append(d, prof.end_ns_of[host] - 1.0) for fn, d in prof.dispatches_of[host].items()}
    u = unran_dispatches(t, spans, {host: more}, prof.end_ns_of)
    assert {v.function for v in u} == set(more) and all(v.unran == 1 and v.queued for v in u)
    assert next(v for v in u if v.function == "dot").program == "jit_dot"


# -- a dispatch is a call that launched an execution ------------------------------------------------------------

TRACED_ONLY = """
import sys, jax, jax.numpy as jnp
from jax import lax

@jax.jit
def train_step(x, w):
    for _ in range(6):
        x = jnp.tanh(x @ w)
    return x

def body(c, _):
    return jnp.add(c, 1.0), None  # jitted jnp.add called on a tracer, outside any jit

def only_traced(x):  # jitted jnp functions called on tracers at top level: nothing of theirs runs
    jax.eval_shape(lambda a: jnp.multiply(jnp.add(a, 1.0), 2.0), x)
    jax.make_jaxpr(lambda a: lax.scan(body, a, None, length=3)[0])(x)

x, w = jnp.ones((512, 512)), jnp.full((512, 512), 1e-3)
train_step(x, w).block_until_ready()  # compiled before the trace
steps = int(sys.argv[2])
with jax.profiler.trace(sys.argv[1]):
    for _ in range(steps):
        x = train_step(x, w)
    jax.block_until_ready(x)
    only_traced(x)
    y = jnp.add(x, 2.0)  # really run, eagerly
    jax.block_until_ready(y)
    if "--tail" in sys.argv:  # as many steps again, dispatched and left queued at the trace's end, then more tracing
        for _ in range(steps):
            x = train_step(x, w)
        only_traced(x)
"""


def _calls(logdir: Path, name: str) -> tuple[int, int]:
    """The host's outermost calls named ``name`` in the XSpace, read by jax's own reader, and of them those
    holding a runtime's execute event (``…LoadedExecutable::Execute…``) on their thread."""
    from jax.profiler import ProfileData

    xspace = next(logdir.rglob("*.xplane.pb"))
    calls, executes = {}, {}
    for p in ProfileData.from_file(str(xspace)).planes:
        if p.name != "/host:CPU":
            continue
        for line in p.lines:
            for e in line.events:
                if e.name == name:
                    calls.setdefault(line.name, []).append((e.start_ns, e.duration_ns))
                elif "LoadedExecutable::Execute" in e.name:
                    executes.setdefault(line.name, []).append(e.start_ns)
    total = launched = 0
    for ln, events in calls.items():
        for s in _outermost(events):
            d = max(d for s2, d in events if s2 == s)
            total += 1
            launched += any(s <= x < s + d for x in executes.get(ln, []))
    return total, launched


@pytest.fixture(scope="module")
def traced_only(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("traced_only")
    (tmp / "traced_only.py").write_text(TRACED_ONLY)
    out = []
    for flags in ((), ("--tail",)):
        logdir = tmp / ("log" + "".join(flags))
        r = subprocess.run([sys.executable, str(tmp / "traced_only.py"), str(logdir), "10", *flags],
                           capture_output=True, text=True, timeout=240)
        assert r.returncode == 0, r.stderr[-2000:]
        out.append(logdir)
    return out


def test_calls_made_on_tracers_are_not_dispatches(traced_only):
    """jaxlib records ``PjitFunction(add)`` for jnp.add called on tracers (eval_shape, a scan traced at top
    level) as for the eager call that runs: only the one that launched an execution is a dispatch, so no note
    claims the device lost the others' executions."""
    logdir, _ = traced_only
    adds, launched = _calls(logdir, "PjitFunction(add)")
    assert adds >= 3 and launched == 1  # the trace holds the tracing-only calls, and one eager add that ran
    assert _calls(logdir, "PjitFunction(multiply)") == (1, 0)
    raw = read_xspace(next(logdir.rglob("*.xplane.pb")))
    assert {k: len(v) for k, v in raw.dispatches.items()} == {"train_step": 10, "add": 1}
    chrome = read_chrome(next(logdir.rglob("*.trace.json.gz")))
    assert {k: len(v) for k, v in chrome.dispatches.items()} == {"train_step": 10, "add": 1}
    prof = rl.load(logdir)
    assert prof.unran == (), prof.unran
    assert not any("dispatches of" in n for n in prof.notes), prof.notes
    out = subprocess.run([sys.executable, "-m", "rooflens.cli", "report", str(logdir), "--json", "--no-calibrate"],
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert doc["unran"] == [] and "async-tail" not in {f["rule"] for f in doc["findings"]}


def test_a_queued_tail_is_still_found_beside_calls_made_on_tracers(traced_only):
    """Steps left queued at the trace's end, then calls made on tracers: the steps are the tail, and the calls
    (which never ran, after them) are no queued dispatches of their own."""
    _, logdir = traced_only
    assert _calls(logdir, "PjitFunction(multiply)") == (2, 0)
    prof = rl.load(logdir)
    ran = _most_runs_on_a_device(_runs(next(logdir.rglob("*.xplane.pb")), "jit_train_step"))
    assert [(u.program, u.function, u.dispatched, u.ran, u.queued) for u in prof.unran] == \
        [("jit_train_step", "train_step", 20, ran, True)]
    assert 10 <= ran < 20
    f = next(f for f in analyze(prof, require_roofline=False).findings if f.rule == "async-tail")
    assert f"{20 - ran} of 20" in f.evidence[0] and "jit_add" not in " ".join(f.evidence)
