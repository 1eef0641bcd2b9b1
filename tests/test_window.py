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


def window_run(env, tmp_path, script, steps, *args, timeout=240):
    """``rooflens run --steps STEPS script args``: (its manifest, its run directory)."""
    r = rooflens(env, "run", "--logdir", str(tmp_path / "logs"), "--steps", steps, str(SCRIPTS / script), *args,
                 timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    (run,) = (tmp_path / "logs" / "plugins" / "profile").iterdir()
    return json.loads((run / "rooflens.json").read_text()), run


def runs_of(table, program: str) -> int:
    sel = np.asarray([table.programs[p] for p in table.program]) == program
    return int(execution_index(table)[sel & (table.device == table.device[sel][0])].max()) + 1


def test_steps_window_traces_those_steps_only_and_reports_the_recompilation_before_it(env, tmp_path):
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
    data = report(env, run)
    assert data["steps"]["count"] == 5
    # the recompilation at step 5, long before the window, is still reported
    rec = [f for f in data["findings"] if f["rule"] == "recompilation"]
    assert rec and "f32[16,64]" in " ".join(rec[0]["evidence"])
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
    bad = rooflens(env, "run", "--logdir", str(tmp_path), "--steps", "9:3", str(SCRIPTS / "train.py"), "3")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "STOP greater than START" in bad.stderr


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
    assert 0.45 < meta["wall_s"] < 2.5  # the window, with its stop under load; the whole run is 3 s
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
    priced = [c for c in data["comparison"] if c["ratio"]]
    assert priced and {c["category"] for c in priced} & {"matmul", "fusion"}  # the HLO came with the trace


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


def test_step_annotations_take_precedence_over_calls(env, tmp_path):
    meta, run = window_run(env, tmp_path, "sharded.py", "4:6", "8", "shard_map", "annotate")
    taken = meta["step_program"]
    assert taken["chosen_by"] == "StepTraceAnnotation" and taken["function"] is None
    assert "StepTraceAnnotation" in taken["reason"] and meta["window"]["traced_steps"] == 2
    assert [n for n, _, _ in rl.load(run).steps] == [4, 5]


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
