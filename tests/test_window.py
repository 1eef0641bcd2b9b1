"""A window of a real run (`rooflens run --steps A:B`, `--delay/--duration`, `rl.capture` and `Session`
with `steps=range(a, b)`) and profiles of running jobs taken on demand (`rooflens capture`).

Every run is a real script in a subprocess, through the real CLI, on the CPU backend.
"""

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rooflens as rl
from rooflens.capture.ondemand import empty_trace, parse_targets, profile_request
from rooflens.trace.warmup import execution_index

SCRIPTS = Path(__file__).parent / "window_scripts"
FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    e["JAX_PLATFORMS"] = "cpu"
    return e


def rooflens(env, *args, timeout=120):
    return subprocess.run([sys.executable, "-m", "rooflens.cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def report(env, path):
    r = rooflens(env, "report", str(path), "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


STEP_CALL = "the loop's step call"  # the comment on each library script's line that calls its step


def step_line(script: str, text: str = STEP_CALL) -> int:
    """The line of ``script`` that holds ``text`` (by default, the loop's call of its step)."""
    lines = (SCRIPTS / script).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def window_run(env, tmp_path, script, steps, *args, timeout=240, options=()):
    """``rooflens run --steps STEPS [options] script args``: (its manifest, its run directory)."""
    r = rooflens(env, "run", "--logdir", str(tmp_path / "logs"), "--steps", steps, *options, str(SCRIPTS / script),
                 *args, timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    (run,) = (tmp_path / "logs" / "plugins" / "profile").iterdir()
    return json.loads((run / "rooflens.json").read_text()), run


def runs_of(table, program: str) -> int:
    sel = np.asarray([table.programs[p] for p in table.program]) == program
    return int(execution_index(table)[sel & (table.device == table.device[sel][0])].max()) + 1


def test_steps_window_traces_those_steps_only_and_records_the_recompilation_before_it_uncounted(env, tmp_path):
    r = rooflens(env, "run", "--logdir", str(tmp_path), "--steps", "20:25", str(SCRIPTS / "train.py"), "60")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "loss" in r.stdout and "profile written to" in r.stderr
    (run,) = (tmp_path / "plugins" / "profile").iterdir()
    meta = json.loads((run / "rooflens.json").read_text())
    assert meta["window"]["steps"] == [20, 25] and meta["window"]["counted"] == "step"
    assert meta["window"]["traced_steps"] == 5 and meta["warmup_in_window"] is False
    prof = rl.load(run)
    assert runs_of(prof.table, "jit_step") == 5  # the trace holds the window's five executions, no more
    assert [n for n, _, _ in prof.steps] == [20, 21, 22, 23, 24]
    # the recompilation at step 5, long before the window: recorded with its time and JAX's reason, not counted
    (before,) = meta["in_window"]["recompilations_outside"]
    assert meta["in_window"]["compilations"] == []
    assert before["function"] == "step" and before["module"] == "jit_step" and before["nth"] == 2
    assert "now f32[16,64] and before f32[32,64]" in before["reason"] and before["in_trace"] is False
    assert before["end_unix_s"] * 1e9 < meta["trace_start_unix_ns"]
    data = report(env, run)
    assert data["steps"]["count"] == 5
    assert not [f for f in data["findings"] if f["rule"] == "recompilation"]
    # a step of a few hundred kB on a machine with gigabytes: memory is information, never an alarm
    assert all(f["severity"] == "low" for f in data["findings"] if f["rule"] == "memory-peak")
    assert data["memory"]["main_program"] == "jit_step" and data["memory"]["peak_over_device"] < 0.01
    # nothing about the init programs
    assert not any("normal" in op["program"] + op["name"] for f in data["findings"] for op in f["ops"])


def test_a_window_the_run_never_reaches_says_so_and_keeps_the_exit_status(env, tmp_path):
    r = rooflens(env, "run", "--logdir", str(tmp_path), "--steps", "5000:5005", str(SCRIPTS / "train.py"), "30", "3")
    assert r.returncode == 3, r.stderr[-3000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("rooflens:")]
    assert len(lines) == 1 and "before step 5000 of the window 5000:5005" in lines[0]
    # the loop's 30 calls, counted at their line (the call of another shape at step 5 is another line's)
    assert f"30 calls of step from {SCRIPTS / 'train.py'}:{step_line('train.py', 'w = step(w, x)')}" in lines[0]


def test_a_time_window_past_the_runs_end_says_when_the_run_ended_and_keeps_the_exit_status(env, tmp_path):
    r = rooflens(env, "run", "--logdir", str(tmp_path), "--delay", "30", "--duration", "1", str(SCRIPTS / "train.py"),
                 "30", "3")
    assert r.returncode == 3, r.stderr[-3000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("rooflens:")]
    assert len(lines) == 1, r.stderr
    m = re.search(r"the run ended ([0-9.]+) s after JAX came up, before the window opened \(--delay 30 s", lines[0])
    assert m and 0 < float(m.group(1)) < 30 and "no trace" in lines[0] and "wrote no trace" not in lines[0]
    assert not list((tmp_path / "plugins" / "profile").glob("*/*.xplane.pb"))


def test_delay_and_duration_bound_the_trace_in_time(env, tmp_path):
    r = rooflens(env, "run", "--logdir", str(tmp_path), "--delay", "1.0", "--duration", "0.5",
                 str(SCRIPTS / "timed.py"), "3")
    assert r.returncode == 0, r.stderr[-3000:]
    (run,) = (tmp_path / "plugins" / "profile").iterdir()
    meta = json.loads((run / "rooflens.json").read_text())
    assert meta["window"]["delay_s"] == 1.0 and meta["window"]["duration_s"] == 0.5
    # the trace lasted at least the window (its stop, a drain and a write, takes what the machine's load makes it
    # take: the bound in time is the events' span below, against the 3 s the script runs)
    assert meta["wall_s"] > 0.45
    prof = rl.load(run)
    span_s = (prof.table.end_ns.max() - prof.table.start_ns.min()) * 1e-9
    assert 0.2 < span_s < 0.8
    assert len(prof.steps) >= 3  # the executions of the step program, the two cut at the edges left out


def test_capture_and_session_take_a_range_of_steps(tmp_path):
    f = jax.jit(lambda x: jnp.tanh(x @ x))
    x = jnp.ones((64, 64))
    prof = rl.capture(f, x, steps=range(3, 6), logdir=tmp_path / "a")
    assert [n for n, _, _ in prof.steps] == [3, 4, 5] and prof.metadata["warmup"] == 3
    with rl.trace.Session(tmp_path / "b", steps=range(4, 6)) as session:
        for _ in range(10):
            with session.step():
                x = f(x)
    assert session.count == 10 and [n for n, _, _ in session.profile.steps] == [4, 5]
    with pytest.raises(rl.RooflensError, match="consecutive"):
        rl.capture(f, x, steps=range(0, 6, 2))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(env, seconds: float):
    port = _free_port()
    job = subprocess.Popen([sys.executable, str(SCRIPTS / "served.py"), str(port), str(seconds)], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert job.stdout.readline().strip() == "ready"
    return job, port


def test_capture_of_running_jobs_is_compared_with_the_roofline(env, tmp_path):
    (a, pa), (b, pb) = _serve(env, 20), _serve(env, 20)
    try:
        r = rooflens(env, "capture", f"localhost:{pa},127.0.0.1:{pb}", "--duration", "1", "--logdir", str(tmp_path))
    finally:
        a.kill(), b.kill()
    assert r.returncode == 0, r.stderr[-3000:]
    (run,) = (tmp_path / "plugins" / "profile").iterdir()
    assert sorted(p.name for p in run.glob("*.xplane.pb")) == [f"127.0.0.1.port{pb}.xplane.pb",
                                                               f"localhost.port{pa}.xplane.pb"]
    data = report(env, run)
    assert len(data["hosts"]) == 2 and data["steps"]["count"] >= 10
    # the HLO came with the trace: ops priced by it (a ratio may be withheld, where an op beats a calibration made
    # on a busy machine: CI's once withheld every one)
    priced = [c for c in data["comparison"] if c["predicted_s"]]
    assert priced and {c["category"] for c in priced} & {"matmul", "fusion"}


def test_capture_errors_are_one_sentence(env, tmp_path):
    port = _free_port()
    r = rooflens(env, "capture", f"127.0.0.1:{port}", "--duration", "1", "--logdir", str(tmp_path))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "nothing answers at" in r.stderr
    r = rooflens(env, "capture", "nohostport", "--duration", "1")
    assert r.returncode == 2 and "is not HOST:PORT" in r.stderr
    job, port = _serve(env, 1.0)  # it finishes a second into a three-second capture
    try:
        r = rooflens(env, "capture", f"127.0.0.1:{port}", "--duration", "3", "--logdir", str(tmp_path))
    finally:
        job.kill()
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "127.0.0.1" in r.stderr, r.stderr


def test_profile_request_wire_format():
    req = profile_request(1500, "/logs/plugins/profile", "run1", "host")
    assert req[:3] == bytes([0x08, 0xDC, 0x0B])  # field 1 (duration_ms) = 1500 as a varint
    assert b"/logs/plugins/profile" in req and b"run1" in req
    assert empty_trace(bytes([0x38, 0x01])) and not empty_trace(b"")
    assert [t.address for t in parse_targets("a:1,b:2")] == ["a:1", "b:2"]
    with pytest.raises(rl.RooflensError):
        parse_targets("a:1,a:1")


# ---- the step program of scripts written with real libraries ----------------------------------------


def test_flax_linen_window_is_the_train_step_not_inits_eager_primitives(env, tmp_path):
    """Flax linen (nn.scan(nn.remat(Block)), optax.adamw, numpy batches, an Orbax checkpoint every 4 steps):
    init dispatches dozens of eager primitives (jit_broadcast_in_dim, …) before the first step; the window
    is the train step's, opened at the loop's 5th call."""
    meta, run = window_run(env, tmp_path, "linen_gpt.py", "5:8", "12", "--ckpt", str(tmp_path / "ckpt"),
                           "--ckpt-every", "4")
    taken = meta["step_program"]
    line = step_line("linen_gpt.py")
    assert taken["function"] == "train_step" and taken["program"] == "jit_train_step"
    assert taken["chosen_by"] == "call site" and taken["calls_before_window"] == 5
    assert taken["call_site"] == f"{SCRIPTS / 'linen_gpt.py'}:{line} (main)"
    assert "eager primitive dispatches (jit_broadcast_in_dim" in taken["reason"] or \
        "jit_broadcast_in_dim ×" in taken["reason"], taken["reason"]
    assert meta["window"]["counted"] == "train_step" and meta["window"]["traced_steps"] == 3
    assert meta["window"]["programs"] == ["train_step"]
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step_12", "step_4", "step_8"]  # Orbax saved
    prof = rl.load(run)
    assert runs_of(prof.table, "jit_train_step") == 3
    assert not [p for p in prof.table.programs if p.startswith(("jit_broadcast_in_dim", "jit_convert_element_type"))]
    data = report(env, run)
    assert data["steps"]["count"] == 3 and data["steps"]["steps"] == [5, 6, 7]
    assert data["steps"]["breakdown"]["program"] == "jit_train_step"
    assert any(n.startswith("the window's step program: train_step (jit_train_step)") for n in data["notes"])
    idle = [f for f in data["findings"] if f["rule"] == "idle" and f["severity"] == "high"]
    assert not idle, idle


@pytest.mark.parametrize("script", ["nnx_gpt.py", "eqx_gpt.py"])
def test_flax_nnx_and_equinox_windows_are_the_train_step(env, tmp_path, script):
    """nnx.jit and eqx.filter_jit wrap jax.jit in their own code: the step is still the user's train_step,
    called from the loop's line; the eager module construction before it is not counted."""
    meta, run = window_run(env, tmp_path, script, "3:5", "6")
    taken = meta["step_program"]
    assert taken["function"] == "train_step" and taken["chosen_by"] == "call site"
    assert taken["call_site"] == f"{SCRIPTS / script}:{step_line(script)} (main)"
    assert "eager primitive dispatches" in taken["reason"]
    assert meta["window"]["traced_steps"] == 2
    assert runs_of(rl.load(run).table, "jit_train_step") == 2


@pytest.mark.parametrize("mode,function", [("shard_map", "local_step"), ("pjit", "global_step")])
def test_shard_map_and_pjit_steps_on_8_devices(env, tmp_path, mode, function):
    """A jax.jit(jax.shard_map(f)) step (lax.scan over layers, jax.checkpoint) and a pjit'd one: JAX's own
    wrappers are peeled off to the user's function, the eager sharded set-up is not counted."""
    meta, run = window_run(env, tmp_path, "sharded.py", "3:5", "8", mode)
    taken = meta["step_program"]
    assert taken["function"] == function and taken["program"] == f"jit_{function}"
    assert taken["call_site"].endswith(f"sharded.py:{step_line('sharded.py')} "
                                       "(<module>)")
    table = rl.load(run).table
    assert meta["num_devices"] == 8 and len(np.unique(table.device)) == 8
    assert runs_of(table, f"jit_{function}") == 2  # on each device


def test_a_pmap_step_is_counted_by_its_own_functions_name(env, tmp_path):
    """jax.pmap's step (jax ≥ 0.8: a jit of a shard_map of jax's own ``_fun``, every pmapped function's program
    ``jit__fun``) is the user's function: the window opens on its calls, it is taken by --step-fn by its own name,
    and its program is named after it (``jit_local_step``: a pmapped evaluation is another program)."""
    meta, run = window_run(env, tmp_path, "sharded.py", "3:5", "8", "pmap")
    taken = meta["step_program"]
    assert taken["chosen_by"] == "call site" and taken["function"] == "local_step"
    assert taken["program"] == "jit_local_step"
    assert taken["call_site"].endswith(f"sharded.py:{step_line('sharded.py')} (<module>)")
    table = rl.load(run).table
    assert "jit__fun" not in table.programs
    assert runs_of(table, "jit_local_step") == 2 and len(np.unique(table.device)) == 8
    assert [n for n, _, _ in rl.load(run).steps] == [3, 4]
    assert (run / "hlo").is_dir() and any("local_step" in p.name for p in (run / "hlo").iterdir())
    # named by --step-fn over a script that annotates its steps: its 5 calls are the steps (the annotations, cut at
    # the window's edges, held 3 of them)
    meta, run = window_run(env, tmp_path / "named", "sharded.py", "3:8", "8", "pmap", "annotate",
                           options=("--step-fn", "local_step"))
    assert meta["step_program"]["function"] == "local_step" and meta["step_program"]["program"] == "jit_local_step"
    prof = rl.load(run)
    assert [n for n, _, _ in prof.steps] == [3, 4, 5, 6, 7] and meta["window"]["traced_steps"] == 5
    assert any("opened on the calls of jit_local_step (--step-fn)" in n for n in prof.notes), prof.notes


def test_step_annotations_take_precedence_over_calls(env, tmp_path):
    meta, run = window_run(env, tmp_path, "sharded.py", "4:6", "8", "shard_map", "annotate")
    taken = meta["step_program"]
    assert taken["chosen_by"] == "StepTraceAnnotation" and taken["function"] is None
    assert "StepTraceAnnotation" in taken["reason"] and meta["window"]["traced_steps"] == 2
    assert [n for n, _, _ in rl.load(run).steps] == [4, 5]
    # a function named by --step-fn rules over the annotations: its calls 4 and 5
    meta, run = window_run(env, tmp_path / "named", "sharded.py", "4:6", "8", "shard_map", "annotate",
                           options=("--step-fn", "local_step"))
    taken = meta["step_program"]
    assert taken["chosen_by"] == "--step-fn" and taken["function"] == "local_step"
    assert meta["window"]["traced_steps"] == 2 and runs_of(rl.load(run).table, "jit_local_step") == 2


def test_whole_run_of_a_flax_script_holds_every_step_it_dispatched(env, tmp_path):
    """The linen script dispatches its steps asynchronously and returns without reading a result back: the
    whole run's trace still holds the train step's executions (all but the first, which XLA:CPU runs
    untraced right after compiling it; without the wait for the device: 1 or 2 of them), none left queued,
    and the report's steps are the train step's. (A whole run traces Flax's init too: the slowest test here.)"""
    r = rooflens(env, "run", "--logdir", str(tmp_path), str(SCRIPTS / "linen_gpt.py"), "6", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    (run,) = (tmp_path / "plugins" / "profile").iterdir()
    prof = rl.load(run)
    assert runs_of(prof.table, "jit_train_step") >= 5
    assert not [u for u in prof.unran if u.function == "train_step"], prof.unran
    data = report(env, run)
    assert data["steps"]["breakdown"]["program"] == "jit_train_step" and data["steps"]["count"] >= 4


def test_session_waits_for_work_whose_outputs_were_dropped(tmp_path):
    """A loop that drops its results leaves executions queued when the window opens and closes: the
    Session's trace holds none of the warm-up's and all of its two steps' (its steps' own wait only covers
    the arrays still alive; without the waits for the devices it held 5 of the 24)."""
    f = jax.jit(lambda x: jnp.tanh(x @ x) * 0.5)
    x = jnp.ones((256, 256))
    f(x).block_until_ready()
    with rl.trace.Session(tmp_path, warmup=1, steps=2) as session:
        for _ in range(3):
            with session.step() as step:
                for _ in range(12):
                    f(x)  # dropped
                step.block(x)
    prof = session.profile
    assert runs_of(prof.table, "jit__lambda") == 24
    assert prof.metadata["drained_s"] >= 0


# ---- the step function of scripts shaped like third-party programs ------------------------------------


def candidate(taken: dict, function: str) -> dict:
    (c,) = [c for c in taken["candidates"] if c["function"] == function]
    return c


def test_equinox_classifier_window_counts_make_step_not_the_evaluations_loss(env, tmp_path):
    """Equinox's MNIST shape: make_step once per step, and at step 0 (and every 6 steps) an evaluation
    calling the jitted loss and compute_accuracy once per test batch (8 batches, the last one of 16).
    loss reaches call 5 first, inside the first evaluation; by then make_step (one loop, not two) has
    compiled and does more work per call: the window counts make_step's calls 5, 6, 7."""
    meta, run = window_run(env, tmp_path, "eqx_classifier.py", "5:8", "12", "6")
    taken = meta["step_program"]
    assert taken["function"] == "make_step" and taken["program"] == "jit_make_step"
    assert taken["chosen_by"] == "call site" and taken["loop_depth"] == 1
    assert taken["call_site"] == f"{SCRIPTS / 'eqx_classifier.py'}:{step_line('eqx_classifier.py')} (train)"
    assert meta["window"]["counted"] == "make_step" and meta["window"]["traced_steps"] == 3
    assert taken["calls_in_run"] == 12
    loss = candidate(taken, "loss")
    evals = 3 * 8  # evaluations at steps 0, 6 and 11, of 8 test batches each
    assert loss["loop_depth"] == 2 and loss["calls_in_run"] == evals and loss["calls_at_choice"] == 8
    assert candidate(taken, "compute_accuracy")["calls_in_run"] == evals
    # the per-call costs are XLA's own for the programs that ran: the step's (forward, backward, update)
    # is more than the forward of one test batch
    compiled = {c["module"]: c for c in meta["in_window"]["first_compilations"]}
    assert taken["flops_per_call"] == compiled["jit_make_step"]["flops"]
    assert taken["flops_per_call"] > 2 * loss["flops_per_call"] > 0
    assert "loss ×24 in the run" in taken["reason"] and "--step-fn NAME takes another" in taken["reason"]
    assert runs_of(rl.load(run).table, "jit_make_step") == 3
    # the evaluation's recompilations for its last batch of 16 (loss and compute_accuracy alike) happen at
    # step 0, before the window: kept with JAX's reason, not counted
    assert meta["in_window"]["compilations"] == []
    outside = {c["function"]: c for c in meta["in_window"]["recompilations_outside"]}
    assert sorted(outside) == ["compute_accuracy", "loss"]
    assert all("now f32[16,1,16,16] and before f32[32,1,16,16]" in c["reason"] for c in outside.values())
    data = report(env, run)
    note = next(n for n in data["notes"] if n.startswith("the window's step program: make_step (jit_make_step)"))
    assert "compute_accuracy ×24" in note and "--step-fn" in note
    assert not [f for f in data["findings"] if f["rule"] == "recompilation"]


def test_gpt_that_samples_before_it_trains_takes_the_sampler_unless_told(env, tmp_path):
    """The sampler's step_fn is called 20 times before train_step first runs: at call 3 only the sampler
    is known, so it is taken, and the manifest and the report name train_step as a candidate; --step-fn
    (a program name works too) windows train_step's calls 3 and 4."""
    meta, run = window_run(env, tmp_path / "a", "gpt_sampler.py", "3:5", "20", "6")
    taken = meta["step_program"]
    assert taken["function"] == "step_fn" and taken["calls_in_run"] == 20
    late = candidate(taken, "train_step")
    assert late["calls_in_run"] == 6 and late["calls_before_window"] == 0 and late["calls_at_choice"] is None
    assert late["flops_per_call"] > taken["flops_per_call"] > 0  # known only once it had compiled, too late
    assert taken["choose_another"].startswith("rooflens run --steps 3:5 --step-fn NAME")
    data = report(env, run)
    note = next(n for n in data["notes"] if n.startswith("the window's step program: step_fn (jit_step_fn)"))
    assert "train_step ×6 in the run" in note and "first called after the window opened" in note

    r = rooflens(env, "run", "--logdir", str(tmp_path / "b"), "--steps", "3:5", "--step-fn", "jit_train_step",
                 str(SCRIPTS / "gpt_sampler.py"), "20", "6", timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    (run,) = (tmp_path / "b" / "plugins" / "profile").iterdir()
    meta = json.loads((run / "rooflens.json").read_text())
    taken = meta["step_program"]
    assert taken["chosen_by"] == "--step-fn" and taken["function"] == "train_step"
    assert taken["call_site"] == f"{SCRIPTS / 'gpt_sampler.py'}:{step_line('gpt_sampler.py')} (main)"
    assert candidate(taken, "step_fn")["calls_in_run"] == 20 and meta["window"]["traced_steps"] == 2
    table = rl.load(run).table
    assert runs_of(table, "jit_train_step") == 2 and "jit_step_fn" not in table.programs


def test_step_fn_names_a_function_of_a_whole_run_and_an_unknown_name_is_one_sentence(env, tmp_path):
    r = rooflens(env, "run", "--logdir", str(tmp_path / "w"), "--step-fn", "step", str(SCRIPTS / "train.py"), "10")
    assert r.returncode == 0, r.stderr[-3000:]
    (run,) = (tmp_path / "w" / "plugins" / "profile").iterdir()
    meta = json.loads((run / "rooflens.json").read_text())
    taken = meta["step_program"]
    assert taken["chosen_by"] == "--step-fn" and taken["program"] == "jit_step"
    assert taken["calls_in_run"] == 11 and meta["warmup_in_window"] is True  # 10 in the loop, 1 at step 5
    # an unknown name: the functions the script called, with their calls; a window is then never opened
    r = rooflens(env, "run", "--logdir", str(tmp_path / "u"), "--steps", "2:4", "--step-fn", "trian_step",
                 str(SCRIPTS / "train.py"), "10", "3")
    assert r.returncode == 3, r.stderr[-3000:]
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("rooflens:")]
    assert "--step-fn trian_step: the script's own code called no jitted function of that name" in line
    assert "step ×11" in line and "no trace was taken" in line
    r = rooflens(env, "run", "--step-fn", "x", "--delay", "1", "--duration", "1", str(SCRIPTS / "train.py"), "3")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--step-fn" in r.stderr


def test_neural_ode_recompilations_are_counted_only_inside_the_window(env, tmp_path):
    """Diffrax's shape: make_step recompiles at its call 1 (a Python float: a weak type) and at call 5 (the
    second stage's longer series: a new shape). The window 3:7 holds the second only: both are in
    rooflens.json with their time, function and JAX's reason; the report's finding counts one."""
    meta, run = window_run(env, tmp_path, "node.py", "3:7", "5", "5", timeout=400)
    w = meta["in_window"]
    t0, t1 = meta["trace_start_unix_ns"] / 1e9, meta["trace_stop_unix_ns"] / 1e9
    (inside,) = w["compilations"]
    (outside,) = w["recompilations_outside"]
    assert inside["function"] == outside["function"] == "make_step" and inside["module"] == "jit_make_step"
    assert (outside["nth"], inside["nth"]) == (2, 3)
    assert "now f32[]{weak_type=True} and before f32[]{weak_type=False}" in outside["reason"]
    assert "at ts, now f32[16] and before f32[8]" in inside["reason"]
    assert outside["end_unix_s"] < t0 < inside["start_unix_s"] < inside["end_unix_s"] < t1
    assert inside["in_trace"] is True and outside["in_trace"] is False and inside["duration_s"] > 0
    assert w["cache_misses"] and "f32[16]" in w["cache_misses"][0] and "weak_type" not in w["cache_misses"][0]
    data = report(env, run)
    (f,) = [f for f in data["findings"] if f["rule"] == "recompilation"]
    assert f["title"].startswith("1 recompilation of ") and "f32[16]" in " ".join(f["evidence"])
    assert "weak_type" not in " ".join(f["evidence"])


@pytest.mark.parametrize("mode,evaluation", [("nested", "eval_batch"), ("inline", "eval_full")])
def test_an_evaluation_heavier_than_the_step_is_not_the_step(env, tmp_path, mode, evaluation):
    """Evaluation more work per call than the step: nested, its calls come from a deeper loop (the
    shallowest loop's function is taken); inline, in the training loop's own body every 4 steps, it has
    1 call when step has 3 (a function of the same loop that the step outpaces is left out)."""
    meta, run = window_run(env, tmp_path, "heavy_eval.py", "3:5", "12", mode)
    taken = meta["step_program"]
    assert taken["function"] == "step" and meta["window"]["traced_steps"] == 2
    other = candidate(taken, evaluation)
    assert other["flops_per_call"] > 4 * taken["flops_per_call"]  # XLA's own cost: the evaluation is heavier
    assert (other["loop_depth"], taken["loop_depth"]) == ((2, 1) if mode == "nested" else (1, 1))
    assert other["calls_in_run"] == (12 if mode == "nested" else 3)  # evaluations at steps 0, 4, 8
    assert runs_of(rl.load(run).table, "jit_step") == 2


def test_a_sampler_loop_that_ended_before_training_is_not_the_step(env, tmp_path):
    """The sampler's loop (2 calls, one loop) ended before the training loop (two loops: epochs and
    steps) began: at step's call 3 the sampler, though shallower, no longer runs around the call, and
    step is taken (a shallower finished loop would wait for a call 3 that never comes: no trace)."""
    meta, run = window_run(env, tmp_path, "sample_then_train.py", "3:5", "2", "4")
    taken = meta["step_program"]
    assert taken["function"] == "step" and taken["loop_depth"] == 2 and meta["window"]["traced_steps"] == 2
    sampler = candidate(taken, "sample_step")
    assert sampler["loop_depth"] == 1 and sampler["calls_in_run"] == 2
    assert runs_of(rl.load(run).table, "jit_step") == 2


def test_a_step_function_of_an_inner_loop_is_said_to_be_a_part_of_the_outer_loops_step(env, tmp_path):
    """Gradient accumulation: grads_of runs 4 times per iteration of the outer loop, apply once. When the window
    opens at grads_of's call 2, apply has not run yet, so grads_of is taken; the manifest and the report say that
    each counted step is one of its calls, not an iteration, and name apply as the function that counts a step per
    iteration. --step-fn apply then counts updates: the window holds its calls 2 and 3 and the 4 gradients
    dispatched between them (a step runs from one update to the next)."""
    meta, run = window_run(env, tmp_path / "a", "grad_accum.py", "2:4", "8", "4")
    taken = meta["step_program"]
    assert taken["function"] == "grads_of" and taken["calls_in_run"] == 32
    assert taken["outer"] == {"function": "apply", "calls_per_call": 4.0}
    note = next(n for n in report(env, run)["notes"] if n.startswith("the window's step program: grads_of"))
    assert "grads_of ran 4 times per call of apply" in note and "--step-fn apply counts a step per iteration" in note

    meta, run = window_run(env, tmp_path / "b", "grad_accum.py", "2:4", "8", "4", options=("--step-fn", "apply"))
    taken = meta["step_program"]
    assert taken["function"] == "apply" and taken["outer"] is None
    table = rl.load(run).table
    assert runs_of(table, "jit_apply") == 2 and runs_of(table, "jit_grads_of") == 4


def test_a_step_holding_another_functions_first_compilation_in_the_window_is_warm_up(env, tmp_path):
    """The evaluation is first called at iteration 4, inside the window of steps 3:7: its compilation and first
    run fall in step 4, which is left out of the steps as warm-up (a whole run's is) and said so; the other three
    are the steps. The same window opened before the evaluation is ever called keeps its four steps; annotated
    steps are judged alike."""
    meta, run = window_run(env, tmp_path / "a", "first_eval.py", "3:7", "12", "4")
    data = report(env, run)
    (said,) = [n for n in data["notes"] if n.startswith("warm-up inside the window")]
    assert "step 4 (evaluate)" in said, said
    # step 3 too where the device idled in it while the host compiled (a loaded machine: the fixture's test below)
    assert data["steps"]["steps"] == ([5, 6] if "step 3 (evaluate)" in said else [3, 5, 6]), (data["steps"], said)
    meta, run = window_run(env, tmp_path / "b", "first_eval.py", "3:7", "12", "20")
    data = report(env, run)
    assert data["steps"]["steps"] == [3, 4, 5, 6] and not [n for n in data["notes"] if "warm-up inside" in n]
    # annotated, the evaluation inside marked step 4: the step program is still the one every marked step
    # dispatches (the evaluation's one heavy first run had made it the step program, with one step), and step 4 is
    # warm-up
    meta, run = window_run(env, tmp_path / "c", "first_eval.py", "3:7", "12", "4", "annotated")
    data = report(env, run)
    (said,) = [n for n in data["notes"] if n.startswith("warm-up inside the window")]
    assert data["steps"]["program"] == "jit_step" and "step 4 (evaluate)" in said, (data["steps"], said)
    assert data["steps"]["steps"] == ([5, 6] if "step 3 (evaluate)" in said else [3, 5, 6]), (data["steps"], said)
    # an NNX evaluation compiled at step 4, long before the window opens, and run inside it (step 14): no step is
    # warm-up (its compilation was once placed inside the window, timed by programs compiled before the trace,
    # whose first op in it is not their first run)
    meta, run = window_run(env, tmp_path / "d", "nnx_eval_between.py", "10:20")
    data = report(env, run)
    assert data["steps"]["count"] == 10 and not [n for n in data["notes"] if "warm-up inside" in n], \
        (data["steps"], data["notes"])


def test_a_step_the_device_idles_in_while_the_host_compiles_is_warm_up():
    """The same window run under load (a real run, tests/fixtures/cpu_runs): the host began tracing the evaluation
    before the device had begun step 4, already dispatched: the device idled 3.7 ms of step 3's 4.6 ms, 2.5 ms of it
    while the host compiled (a quiet machine traces it after step 4 has begun, and step 3 is clean). Step 3 holds the compilation as
    step 4 does: both are warm-up, and the steps are 5 and 6 (step 3 kept made the mean step 1.87 ms, its clean
    steps' 0.5 ms). A compilation is its tracing, lowering and XLA compilation as one: the evaluation's is one."""
    from rooflens.trace.warmup import compilations_unix_s

    (run,) = (FIXTURES / "cpu_runs" / "first_eval_loaded" / "plugins" / "profile").iterdir()
    prof = rl.load(run)
    assert [n for n, _, _ in prof.steps] == [5, 6]
    assert all((e - s) * 1e-6 < 1.0 for _, s, e in prof.steps), prof.steps  # clean steps, under a millisecond
    (said,) = [n for n in prof.notes if n.startswith("warm-up inside the window")]
    assert "step 3 (evaluate), step 4 (evaluate) hold" in said, said
    ev = [(a, b) for a, b, name in compilations_unix_s(prof.manifest) if "evaluate" in name]
    assert len(ev) == 1 and ev[0][1] - ev[0][0] > 0.18, ev


def _host_wait(name: str):
    """The idle or overhead finding of a real run in tests/fixtures/cpu_runs, and the run's report."""
    from rooflens.analysis.invariants import document_violations
    from rooflens.api import load_report

    (run,) = (FIXTURES / "cpu_runs" / name / "plugins" / "profile").iterdir()
    rep = load_report(str(run))
    assert not document_violations(rep.to_json())
    (f,) = [f for f in rep.findings if f.rule in ("idle", "overheads")]
    return rep, f


def test_an_input_bound_loop_names_the_host_function_the_device_waits_for():
    """A loop of annotated async steps whose micro-batches are made on the host with numpy
    (tests/window_scripts/input_bound.py ... host): the device runs no op a fifth of the step, and the Python tracer
    saw the host in ``batch`` for over half of those gaps. The finding names it (file and line), as cause and fix:
    not "launch latency" or "host callbacks", which it said before. The host's frames never cover more than the
    device's idle time."""
    rep, f = _host_wait("input_bound_host")
    (line,) = [e for e in f.evidence if "the host's Python was in" in e]
    assert line.split("was in: ")[1].startswith("batch (input_bound.py:36) "), line
    assert "the host was in batch (input_bound.py:36)" in f.cause, f.cause
    assert f.fix.startswith("take batch (input_bound.py:36) off the critical path"), f.fix
    for d in rep.stats.hosts:
        frames = {frame: s for frame, s, _ in d.host_in_gaps}  # (batch is the script's own: no caller named)
        assert sum(frames.values()) <= d.idle_s and frames["input_bound.py:36 batch"] >= 0.3 * sum(frames.values())
    # (rooflens's own frames are no work of the program's: its poll's sleep and the jitted call it wraps are not named)
    assert "time.sleep" not in line and "stepwindow" not in line, line


def test_a_loop_reading_values_back_every_step_is_told_so():
    """The same loop fed fixed batches, printing the loss and a gradient's sum every step
    (tests/window_scripts/input_bound.py ... readback): most of the device's gaps are the host waiting in
    ``jax.Array._value``, which drains the queue each step. The cause is the reading back, and no host function is
    blamed."""
    _, f = _host_wait("input_bound_readback")
    assert f.cause.startswith("reading values back in the steps"), f.cause
    assert "after the next step is dispatched" in f.fix and "batch" not in f.cause + f.fix


def test_a_librarys_jit_dispatching_in_python_is_told_apart_from_the_programs_work():
    """An Equinox loop (tests/window_scripts/eqx_loader.py) fed by a loader thread that keeps up: the device's gaps
    are the host inside eqx.filter_jit's `_call`, flattening the model and optimizer state on each call, made
    slower by the Python tracer the window runs. The cause is dispatch in a library's jit, with the tracer's part in
    it said, not "the host's own work … input preparation"."""
    _, f = _host_wait("eqx_loader")
    (line,) = [e for e in f.evidence if "the host's Python was in" in e]
    assert "_call (_jit.py:229) (a library's jit, in Python on each call)" in line, line
    assert f.cause.startswith("the Python around each jitted call") and "Python tracer" in f.cause, f.cause
    assert "eqx.partition" in f.fix and "input preparation" not in f.cause


def test_eager_jax_ops_between_a_samplers_steps_are_named_as_the_cause():
    """A greedy sampler (tests/window_scripts/greedy_decode.py) makes each step's position with jnp.full outside jit:
    the device's gaps are the host in lax.full, converting and binding eager ops. The cause is JAX's eager ops and
    the fix moves them into the jitted step (done, the step took half as long: 1.18 ms → 0.59 ms)."""
    _, f = _host_wait("greedy_decode")
    (line,) = [e for e in f.evidence if "the host's Python was in" in e]
    assert line.split("was in: ")[1].startswith("full (lax.py:"), line
    assert f.cause.startswith("JAX's eager ops between the jitted calls"), f.cause
    assert f.fix.startswith("move that work into the jitted step"), f.fix


def test_the_scripts_function_that_called_a_library_is_named_as_the_work():
    """A loop that saves a checkpoint with NumPy every 4 steps (tests/window_scripts/checkpoint_every.py): the
    device's gaps are the host inside NumPy's `_savez`, called from the script's `save_checkpoint`. The cause names
    the script's function (where the user acts) and the library frame inside it, and the fix takes the script's
    function off the critical path."""
    rep, f = _host_wait("checkpoint_every")
    assert "the host was in save_checkpoint (checkpoint_every.py:45), in _savez (_npyio_impl.py:" in f.cause, f.cause
    assert f.fix.startswith("take save_checkpoint (checkpoint_every.py:45) off the critical path"), f.fix
    (line,) = [e for e in f.evidence if "the host's Python was in" in e]
    assert "_savez (_npyio_impl.py:756) from save_checkpoint (checkpoint_every.py:45) " in line, line
    assert any(caller == "checkpoint_every.py:45 save_checkpoint" for d in rep.stats.hosts
               for frame, _, caller in d.host_in_gaps if frame.endswith(" _savez")), rep.stats.hosts[0].host_in_gaps


def test_eager_preprocessing_inside_the_steps_is_judged_in_the_step(env, tmp_path):
    """Eager jnp programs between the step's calls run inside the annotated steps: their ops are judged against
    that step (a preprocessing op's 46 µs over its roofline read "44.6 % of the step", HIGH, against its own
    104 µs); the NumPy batch put on the device each step is an implicit transfer whose size JAX recorded only for
    the first, before the window: said so, not "0 B in all"."""
    from rooflens.analysis.rules.common import step_of
    from rooflens.api import load_report

    _, run = window_run(env, tmp_path, "eager_prep.py", "10:16", "24")
    rep = load_report(str(run))  # (this test's environment has no calibration: no roofline, every other finding)
    st = rep.steps
    side = [p for p, _ in st.other_programs]
    assert st.basis == "steps" and st.program == "jit_step" and side
    assert all(step_of(rep, p) is st for p in side)
    for f in rep.findings:
        if f.ops and all(o.program in side for o in f.ops):
            assert f.step_s == st.step_time_s, f
    (t,) = [f for f in rep.findings if f.rule == "host-transfers"]
    assert any("sizes are not recorded" in e for e in t.evidence) and not any("0 B in all" in e for e in t.evidence)
