"""The step model on real scripts (tests/step_scripts/), profiled with ``rooflens run`` and read back with
``rooflens report --json`` as a user would: a step is the device's work, every program that ran counts, a step
function keeps its steps across its recompilations, other programs inside a step are not idle, and
``--step-fn`` chooses the step program.

Expected figures come from the raw trace through jax's own reader (``ProfileData``: op events grouped by their
``run_id``, one per program execution), from the scripts' own constants, or from the report's other sections;
never from the step model itself.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rooflens.analysis.invariants import document_violations
from rooflens.trace.steps import check_steps

SCRIPTS = Path(__file__).parent / "step_scripts"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # the scripts run as a user runs them
    e["ROOFLENS_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    e["JAX_PLATFORMS"] = "cpu"
    e["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"), e.get("PYTHONPATH", "")])
    return e


def rooflens(env, *args, timeout=300):
    return subprocess.run([sys.executable, "-m", "rooflens.cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


@pytest.fixture(scope="module")
def runs(env, tmp_path_factory):
    """Each script profiled once for the module: name (and arguments) → its logdir."""
    made: dict[tuple, Path] = {}

    def run(script: str, *args: str) -> Path:
        key = (script, *args)
        if key not in made:
            logs = tmp_path_factory.mktemp(script.replace(" ", "_")) / "logs with space"
            r = rooflens(env, "run", "--logdir", str(logs), str(SCRIPTS / f"{script}.py"), *args)
            assert r.returncode == 0, r.stderr[-3000:]
            made[key] = logs
        return made[key]

    return run


def report(env, logs: Path, *args: str) -> dict:
    # the module's cache holds no calibration: the steps need none (a CPU report without a roofline)
    r = rooflens(env, "report", str(logs), "--json", "--no-calibrate", *args)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def executions(logs: Path, module: str) -> list[tuple[float, float]]:
    """(start ns, end ns) of every execution of the programs named ``module``, from jax's own reader: the op
    events that carry one ``run_id`` are one execution."""
    from jax.profiler import ProfileData

    xplane = next(logs.rglob("*.xplane.pb"))
    runs: dict[int, list[float]] = {}
    for plane in ProfileData.from_file(str(xplane)).planes:
        for line in plane.lines:
            for e in line.events:
                st = dict(e.stats)
                if st.get("hlo_module") == module and "run_id" in st:
                    s, d = runs.setdefault(st["run_id"], [np.inf, -np.inf]), e.start_ns
                    s[0], s[1] = min(s[0], d), max(s[1], d + e.duration_ns)
    return sorted((a, b) for a, b in runs.values())


def marked_end(logs: Path, name: str, step: int) -> float:
    """The end (ns) of the host's StepTraceAnnotation ``name`` with step number ``step``, from jax's own reader."""
    from jax.profiler import ProfileData

    xplane = next(logs.rglob("*.xplane.pb"))
    (end,) = [e.start_ns + e.duration_ns for plane in ProfileData.from_file(str(xplane)).planes
              for line in plane.lines for e in line.events
              if e.name == name and dict(e.stats).get("step_num") in (step, str(step))]
    return end


def op_events(logs: Path) -> list[tuple[float, float]]:
    """(start ns, end ns) of every op event of every program, from jax's own reader."""
    from jax.profiler import ProfileData

    xplane = next(logs.rglob("*.xplane.pb"))
    return [(e.start_ns, e.start_ns + e.duration_ns) for plane in ProfileData.from_file(str(xplane)).planes
            for line in plane.lines for e in line.events if "hlo_op" in dict(e.stats)]


def union_ns(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of intervals."""
    total, end = 0.0, -np.inf
    for s, e in sorted(intervals):
        if e > end:
            total += e - max(s, end)
            end = e
    return total


def nothing_impossible(doc: dict) -> None:
    """No impossible number in the report (rooflens.analysis.invariants, the checker every report sweep uses):
    no share above 100 %, no part of the step larger than the step, the parts (other programs included) summing
    to the step, MFU at most 100 %, no saving larger than its step."""
    assert not document_violations(doc), document_violations(doc)


# -- a step is the device's work ---------------------------------------------------------------------------------

def test_an_annotated_loop_is_timed_by_the_device_whether_or_not_it_blocks(env, runs):
    """The loop without block_until_ready (the host's annotations span ~15 µs dispatches) and the same loop
    blocking each step give the same steps: their number, and times equal to the spacing of the device's own
    executions."""
    docs = {}
    for block in (False, True):
        logs = runs("annotated", *(["--block"] if block else []))
        doc = report(env, logs)
        st = doc["steps"]
        assert st["basis"] == "dispatch" and st["program"].startswith("jit_train_step"), st
        assert st["breakdown"]["program"] == st["program"]  # the Step line and the steps name one program
        assert any(n.startswith("steps: the ") and "jit_train_step" in n for n in doc["notes"])
        ex = executions(logs, "jit_train_step")
        assert len(ex) == 20  # the script's 20 steps, one execution each
        spacing = np.diff([s for s, _ in ex])[-(st["count"] - 1):] * 1e-9  # the last `count` executions
        np.testing.assert_allclose(st["times_s"][:-1], spacing, rtol=1e-6, atol=2e-9)
        # the last step, with no next one, ends when its execution and the host's marked step both have
        held = marked_end(logs, "train", st["steps"][-1])
        assert st["times_s"][-1] == pytest.approx((max(ex[-1][1], held) - ex[-1][0]) * 1e-9, rel=1e-6)
        nothing_impossible(doc)
        docs[block] = doc
    free, blocked = docs[False]["steps"], docs[True]["steps"]
    assert free["count"] == blocked["count"] == 18  # 20, less the two steps holding compilations
    assert 1 / 3 < free["mean_s"] / blocked["mean_s"] < 3  # the same work; was ~1/300 with host spans as steps
    assert free["host_mean_s"] < 0.5 * free["mean_s"]  # the host's view: dispatches, far shorter than the step


def test_an_evaluation_inside_the_steps_is_shown_by_program_not_idle(env, runs):
    """Flax NNX, 30 annotated steps, an evaluation every 10 outside the annotation: every step is counted but
    those holding a warm-up, and the evaluation's device time is its own line of the step, not idle."""
    logs = runs("nnx_eval")
    doc = report(env, logs)
    st, b = doc["steps"], doc["steps"]["breakdown"]
    warm = doc["metadata"]["steady_state"].get("warmup_steps", [])
    assert st["count"] == 30 - len(warm) and len(warm) <= 2, (st["count"], warm)  # was 20
    assert st["program"] == b["program"] == "jit_train_step"
    others = dict(b["other_programs"])
    assert others.get("jit_eval_step", 0) > 0, b
    # its time per step: the op stats' own sum of its ops' self time, inside the steps, over the steps
    eval_total = sum(s["self_time_s"] for s in doc["op_stats"] if s["program"] == "jit_eval_step")
    assert others["jit_eval_step"] <= eval_total / st["count"] * (1 + 1e-9)
    # idle is the time the device runs no op: each counted step's span (one train execution's start to the next's,
    # found by its time among the steps') less the union of every op event in it, from jax's own reader
    ops = sorted(op_events(logs))
    train = executions(logs, "jit_train_step")
    spans = [(a, train[i + 1][0] if i + 1 < len(train) else b_) for i, (a, b_) in enumerate(train)]
    counted, k = [], 0
    for a, b_ in spans:
        if k < len(st["times_s"]) and (b_ - a) * 1e-9 == pytest.approx(st["times_s"][k], rel=1e-6):
            counted.append((a, b_))
            k += 1
    assert len(counted) == st["count"]
    idle_ns = sum((b_ - a) - union_ns([(max(s, a), min(e, b_)) for s, e in ops if e > a and s < b_])
                  for a, b_ in counted)
    assert b["idle_s"] == pytest.approx(idle_ns * 1e-9 / len(counted), rel=1e-3)
    # the parts, the other programs and the idle time sum to the step, less the op time that ran at once (the CPU's
    # threads run several ops of one step together)
    own = sum(b[k] for k in ("compute_s", "communication_s", "layout_s", "host_s", "other_s"))
    assert own + sum(others.values()) + b["idle_s"] - b["concurrent_s"] == pytest.approx(b["step_time_s"], rel=1e-9)
    assert len(executions(logs, "jit_eval_step")) == 48  # 3 evaluations of 16 batches, all in the trace
    # the evaluation holds more device time in the steps than training: a finding names it, with its time
    f = next(f for f in doc["findings"] if f["rule"] == "other-programs")
    assert "jit_eval_step" in f["evidence"][0] and f["program"] == "jit_train_step"
    assert f["recoverable_s"] == pytest.approx(min(sum(others.values()), b["step_time_s"]), rel=1e-9)
    nothing_impossible(doc)


def test_step_fn_chooses_the_step_program_and_a_bad_name_lists_the_candidates(env, runs):
    logs = runs("nnx_eval")
    doc = report(env, logs, "--step-fn", "eval_step")
    assert doc["steps"]["program"] == doc["steps"]["breakdown"]["program"] == "jit_eval_step"
    note = next(n for n in doc["notes"] if n.startswith("steps: "))
    assert "chosen by --step-fn eval_step" in note and "jit_train_step (" in note and "--step-fn NAME" in note
    bad = rooflens(env, "report", str(logs), "--no-calibrate", "--step-fn", "no_such_fn")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and "jit_train_step" in bad.stderr, bad.stderr


# -- every program that ran counts -------------------------------------------------------------------------------

def test_a_training_jitted_whole_is_one_execution_the_unit(env, runs):
    """PureJaxRL's shape: a lax.scan of 12 PPO updates inside one jit, called once. Its execution is analysed
    (not warm-up), reported per execution with its loop's 12 iterations, and has no step-variance finding."""
    logs = runs("ppo_scan")
    doc = report(env, logs)
    ex = executions(logs, "jit_train")
    assert len(ex) == 1
    st, b = doc["steps"], doc["steps"]["breakdown"]
    assert (st["count"], st["basis"], st["program"]) == (1, "execution", "jit_train")
    assert st["mean_s"] == pytest.approx((ex[0][1] - ex[0][0]) * 1e-9, rel=1e-6)
    assert (b["program"], b["basis"], b["trip_count"]) == ("jit_train", "executions", 12)  # UPDATES in the script
    assert any(s["program"] == "jit_train" for s in doc["op_stats"])
    assert "step-variance" not in {f["rule"] for f in doc["findings"]}
    assert any("the unit is the one execution of jit_train" in n for n in doc["notes"])
    # every finding counts per execution of its unit, none per step (tiny-ops' title once said "per step per device")
    said = [t for f in doc["findings"] for t in (f["title"], *f["evidence"])]
    assert said and not [t for t in said if "per step" in t], said
    # and no finding asks to jit the step or turn its loop into lax.scan: both are done; its loop is named instead
    fixes = {f["rule"]: f["fix"] for f in doc["findings"]}
    assert not [r for r, fix in fixes.items() if "jit the whole step" in fix or "into lax.scan" in fix], fixes
    looped = [r for r in ("tiny-ops", "overheads") if r in fixes]
    assert looped and all("loop runs 12 iterations" in fixes[r] for r in looped), fixes
    nothing_impossible(doc)


def test_a_step_whose_cond_takes_a_heavy_branch_every_fifth_call_keeps_every_step(env, runs):
    """Its last op on the device is in a lax.cond branch, the light one four times in five: the executions were
    counted by that op (24 of 30), the heavy ones merged into the one before, and the trace read as "24 of 30
    dispatches of jit_step have no execution", 4 steps. The cond op itself runs once an execution: 29 steps (the
    first is warm-up), the heavy ones about 8 times the light."""
    logs = runs("cond_heavy")
    doc = report(env, logs)
    assert doc["steps"]["count"] == 29 and doc["steps"]["program"] == "jit_step"
    assert not [n for n in doc["notes"] if "have no execution" in n], doc["notes"]
    assert len(executions(logs, "jit_step")) == 30
    times = sorted(doc["steps"]["times_s"])
    assert times[-1] > 3 * times[0]  # six heavy steps, the slowest, against the light ones
    nothing_impossible(doc)


def test_pallas_kernels_run_once_are_analysed(env, runs):
    logs = runs("pallas_once")
    doc = report(env, logs)
    ran = {s["program"] for s in doc["op_stats"]}
    assert {"jit_add", "jit_scale"} <= ran, ran  # each ran once: analysed, not left out as warm-up
    for name in ("jit_add", "jit_scale"):
        assert len(executions(logs, name)) == 1
    st = doc["steps"]  # judged per execution: no steps, or one kernel holding most of the time as the unit
    assert st["breakdown"]["basis"] == "executions" and (st["count"] == 0 or st["basis"] == "execution"), st
    nothing_impossible(doc)


# -- steps of a function ------------------------------------------------------------------------------------------

def test_a_recompiled_step_function_keeps_its_steps_and_no_while_loop_is_cut(env, runs):
    """make_step compiled three times (a weak type, then a new shape), 8 calls each, its while_loop running a
    data-dependent number of iterations: 24 executions less each program's first (warm-up) are the steps (less a
    step holding another program's warm-up), and none is called cut short though their op counts differ."""
    logs = runs("recompile")
    doc = report(env, logs)
    st, b = doc["steps"], doc["steps"]["breakdown"]
    progs = sorted({s["program"] for s in doc["op_stats"] if s["program"].startswith("jit_make_step")})
    assert len(progs) == 3, progs
    # a step that also holds another program's warm-up (an eager op compiled for the new shape, its first run) is
    # warm-up: at each of the two recompilations at most one
    warm = doc["metadata"]["steady_state"].get("warmup_steps", [])
    assert st["count"] == 24 - 3 - len(warm) and len(warm) <= 2 and st["basis"] == "executions", (st["count"], warm)
    assert sorted(b["programs"]) == progs
    assert not any("cut short" in n for n in doc["notes"]), doc["notes"]
    ops = {}
    for p in progs:
        pid = int(p[p.rindex("(") + 1:-1])
        ops[p] = _ops_per_run(logs, pid)
    assert any(len(set(v)) > 1 for v in ops.values()) or len({v[0] for v in ops.values()}) > 1, ops
    nothing_impossible(doc)


def _ops_per_run(logs: Path, program_id: int) -> list[int]:
    """How many op events each execution of a program ran (jax's own reader, by run_id)."""
    from jax.profiler import ProfileData

    xplane = next(logs.rglob("*.xplane.pb"))
    count: dict[int, int] = {}
    for plane in ProfileData.from_file(str(xplane)).planes:
        for line in plane.lines:
            for e in line.events:
                st = dict(e.stats)
                if st.get("program_id") == program_id and "run_id" in st and "hlo_op" in st:
                    count[st["run_id"]] = count.get(st["run_id"], 0) + 1
    return sorted(count.values())


def test_markers_without_dispatch_events_are_grouped_by_time_alike(env, runs):
    """The same annotated trace with its host dispatch events taken out (as TPU and GPU captures of other tools
    and Chrome exports may come): the steps are the step program's executions one per marked step, in order,
    and time the same as the dispatch-matched ones; the steps' note says which basis was used."""
    import dataclasses

    import rooflens as rl
    from rooflens.trace import discover
    from rooflens.trace.assemble import assemble
    from rooflens.trace.formats.xspace.reader import read_xspace

    logs = runs("annotated")
    matched = rl.load(logs)
    run_dirs, host_files = discover.find([str(logs)])
    raws = [dataclasses.replace(read_xspace(Path(f.path)), dispatches={}) for f in host_files]
    by_time = assemble([str(logs)], run_dirs, raws, [f.path for f in host_files])
    assert matched.step_choice.basis == "dispatch" and by_time.step_choice.basis == "time"
    assert [n for n, _, _ in by_time.steps] == [n for n, _, _ in matched.steps]
    np.testing.assert_allclose([e - s for _, s, e in by_time.steps], [e - s for _, s, e in matched.steps],
                               rtol=1e-9)
    assert any(n.startswith("steps: ") and "grouping by time" in n for n in by_time.notes), by_time.notes
    for prof in (matched, by_time):  # the step model's own invariants: in order, none overlapping
        check_steps(prof.steps)
    with pytest.raises(AssertionError, match="overlaps"):
        check_steps([(0, 0.0, 10.0), (1, 5.0, 12.0)])


def test_an_events_step_does_not_depend_on_the_tables_order():
    """Events in time order are given their steps a slice a step (a 6 M-event table's report spent 0.3 s on it);
    the same events in any other order are looked up one by one. Both give each event the same step: the real
    H100 window's 10 steps, whole, with every other step boundary moved onto an event's start (a tie), and with
    the first held open over the next two (the second cut short inside it)."""
    import dataclasses

    import rooflens as rl
    from rooflens.trace.formats.raw import assign_steps
    from tests.conftest import fixture_path

    t = rl.load(str(fixture_path("gpu_nvidia", "h100_jax0112", "linen_gpt_window_command_buffers",
                                 "vm.xplane.pb"))).table
    steps = sorted({(int(n), float(t.start_ns[t.step == n].min()), float(t.end_ns[t.step == n].max()))
                    for n in np.unique(t.step[t.step >= 0])}, key=lambda s: s[1])
    assert len(steps) == 10 and (np.diff(t.start_ps) >= 0).all()
    # every other step starts at an event of the one before, ends where the next starts: ties on both sides
    tied = [(n, float(t.start_ns[int(np.searchsorted(t.start_ns, s)) - 1]) if k % 2 and k else s,
             steps[k + 1][1] if k % 2 and k + 1 < len(steps) else e) for k, (n, s, e) in enumerate(steps)]
    # the first step held open over the next two, the second cut at its middle: the first's events after the second's
    # start are the second's or none
    (n0, s0, _), (n1, s1, e1) = steps[:2]
    nested = [(n0, s0, steps[2][2]), (n1, s1, (s1 + e1) / 2), *steps[2:]]
    order = np.random.default_rng(0).permutation(len(t))
    for marks in (steps, tied, nested):
        in_order = dataclasses.replace(t, step=np.full(len(t), -7, np.int32))
        assign_steps(in_order, marks)
        shuffled = in_order.select(order)
        shuffled.step[:] = -7
        assign_steps(shuffled, marks)
        assert np.array_equal(in_order.step[order], shuffled.step)
        assert (in_order.step >= 0).sum() >= 0.9 * len(t) and (in_order.step != -7).all()
    # the whole steps give back the reader's own assignment
    again = dataclasses.replace(t, step=np.full(len(t), -7, np.int32))
    assign_steps(again, steps)
    assert np.array_equal(again.step, t.step)


def test_the_devices_busy_time_inside_the_steps_is_each_device_and_steps_union():
    """The devices' busy time inside the steps, on the Pax pod's process (5 steps on its GPU, ops outside them):
    the table in time order (grouped in one pass) and the same events in reverse (sorted) give one answer, and it
    is the sum over (device, step) of the union of its events, merged here one by one."""
    import rooflens as rl
    from rooflens.trace.stats import steps_busy_ns
    from tests.conftest import fixture_path

    t = rl.load(fixture_path("gpu_nvidia", "nsys_jax_pax_fsdp4_a100", "pax_fsdp4_4proc_proc0.zip")).table
    assert 0 < (t.step >= 0).sum() < len(t) and len(np.unique(t.step[t.step >= 0])) > 1
    busy = steps_busy_ns(t)
    assert busy == steps_busy_ns(t.select(np.arange(len(t))[::-1]))
    want = 0.0
    for key in {(h, d, s) for h, d, s in zip(t.host.tolist(), t.device.tolist(), t.step.tolist()) if s >= 0}:
        rows = np.flatnonzero((t.host == key[0]) & (t.device == key[1]) & (t.step == key[2]))
        spans = sorted(zip(t.start_ps[rows].tolist(), (t.start_ps + t.dur_ps)[rows].tolist()))
        s0, e0 = spans[0]
        for s, e in spans[1:]:
            if s > e0:
                want += e0 - s0
                s0, e0 = s, e
            else:
                e0 = max(e0, e)
        want += e0 - s0
    assert busy == pytest.approx(want * 1e-3, rel=1e-9) and busy > 0
