"""Warm-up in a trace rooflens did not make (an nsys-jax archive, a ``jax.profiler.trace`` of one's own): a first
step that is an outlier against the others is the program's first execution (NCCL set-up, autotuning, a collective
waiting for a process still compiling) and is left out of the steps and stats; a first step like the others stays."""

import subprocess
import sys

import numpy as np
import pytest

import rooflens as rl
from rooflens.analysis import analyze
from rooflens.trace import op_stats
from rooflens.trace.warmup import first_step_outlier, with_warmup
from tests.conftest import fixture_path


def _archive(proc: int):
    return fixture_path("gpu_nvidia", "nsys_jax_pax_fsdp4_a100", f"pax_fsdp4_4proc_proc{proc}.zip")


@pytest.fixture(scope="module")
def proc1():
    return rl.load(_archive(1))


def test_the_rule_on_real_step_times():
    assert first_step_outlier([3.7832, 0.1445, 0.1319, 0.1298, 0.1263])  # pax proc1: waits 3.7 s in a collective
    assert not first_step_outlier([0.1567, 0.1461, 0.1312, 0.1312, 0.1269])  # pax proc0: the one the others waited for
    assert not first_step_outlier([3.78, 0.13])  # two steps: nothing to judge the first against
    assert not first_step_outlier([0.012, 0.004, 0.005, 0.004])  # 3× but 7 ms longer: scheduler noise on a CPU
    assert not first_step_outlier([1.2, 0.1, 1.0, 0.1])  # steps that swing this widely have no outlier


def test_a_processes_first_step_waiting_in_its_first_collective_is_warm_up(proc1):
    steps_s = [(e - s) * 1e-9 for _, s, e in proc1.steps]
    assert [n for n, _, _ in proc1.steps] == [1, 2, 3, 4] and max(steps_s) < 0.15, steps_s
    info = proc1.metadata["steady_state"]
    assert info["excluded"] and info["warmup_steps"] == [0] and info["events"] == 2610 + info["setup_events"]
    assert 0 < info["setup_events"] < 466  # the set-up before it (jit__psum's 2.6 s sync among them), not all
    (s0, e0), = info["intervals_ns"]
    assert (e0 - s0) * 1e-9 == pytest.approx(3.78, abs=0.01)
    assert not (proc1.table.step == 0).any()
    note = next(n for n in proc1.notes if n.startswith("step 0 took"))
    assert note.startswith("step 0 took 3.78 s, 29× the median of the other 4 (0.131 s): warm-up") and \
        "--include-warmup" in note
    full = with_warmup(proc1)
    assert [n for n, _, _ in full.steps] == [0, 1, 2, 3, 4] and len(full.table) == len(proc1.table) + info["events"]
    assert rl.load(_archive(1), include_warmup=True).steps == full.steps


def test_the_slow_collective_no_longer_rests_on_the_warm_up_wait(proc1):
    after = analyze(proc1, require_roofline=False)
    before = analyze(with_warmup(proc1), require_roofline=False)
    slow = [f for f in before.findings if f.rule == "slow-collective"]
    assert slow and max(f.recoverable_s for f in slow) > 0.4  # the 3.7 s wait spread over 5 steps
    assert all(f.recoverable_s < 0.01 and f.severity != "high" for f in after.findings if f.rule == "slow-collective")
    assert "communication-share" not in {f.rule for f in after.findings}
    proc0 = analyze(rl.load(_archive(0)), require_roofline=False)
    mfu = {k: r.steps.mfu for k, r in (("before", before), ("after", after), ("proc0", proc0))}
    assert mfu["before"] < 0.05 and mfu["after"] == pytest.approx(mfu["proc0"], rel=0.15), mfu


def test_a_process_with_no_outlier_keeps_every_step():
    proc0 = rl.load(_archive(0))
    assert [n for n, _, _ in proc0.steps] == [0, 1, 2, 3, 4] and "steady_state" not in proc0.metadata
    assert not any(n.startswith("step 0 took") for n in proc0.notes)


def test_a_cpu_trace_of_ones_own_after_warm_up_drops_nothing(tmp_path):
    """A real jax.profiler.trace of 6 annotated steps, warmed up before the trace: no step is left out."""
    script = tmp_path / "own.py"
    script.write_text(
        "import sys, jax, jax.numpy as jnp\n"
        "f = jax.jit(lambda x: jnp.tanh(x @ x) @ x)\n"
        "x = jnp.ones((256, 256)); f(x).block_until_ready()\n"
        "with jax.profiler.trace(sys.argv[1]):\n"
        "    for i in range(6):\n"
        "        with jax.profiler.StepTraceAnnotation('train', step_num=i):\n"
        "            x = f(x); x.block_until_ready()\n")
    r = subprocess.run([sys.executable, str(script), str(tmp_path / "log")], capture_output=True, text=True,
                       timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    prof = rl.load(tmp_path / "log")
    steps_s = [(e - s) * 1e-9 for _, s, e in prof.steps]
    assert [n for n, _, _ in prof.steps] == list(range(6)), prof.steps
    assert not first_step_outlier(steps_s) and "steady_state" not in (prof.metadata or {}), steps_s
    assert len(np.unique(prof.table.step[prof.table.step >= 0])) == 6


def test_the_pods_two_merges_leave_out_the_same_first_step():
    path = fixture_path("gpu_nvidia", "nsys_jax_pax_fsdp4_a100")
    events, merged = rl.load(path, merge="events"), rl.load(path, merge="aggregates")
    assert [n for n, _, _ in events.steps] == [1, 2, 3, 4] and merged.steps == events.steps
    assert op_stats(merged).by_category_s == pytest.approx(op_stats(events).by_category_s, rel=1e-9)
    note = [n for n in events.notes if n.startswith("step 0 took")]
    assert len(note) == 1 and note == [n for n in merged.notes if n.startswith("step 0 took")]
    assert note[0].startswith("step 0 took 6.0")
