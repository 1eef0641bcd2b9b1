"""A window of a real run (`rooflens run --steps A:B`, `--delay/--duration`, `rl.capture` and `Session`
with `steps=range(a, b)`) and profiles of running jobs taken on demand (`rooflens capture`).

Every run is a real script in a subprocess, through the real CLI, on the CPU backend.
"""

import json
import os
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
    assert not any("normal" in op for f in data["findings"] for op in f["ops"])  # nothing about the init programs


def test_a_window_the_run_never_reaches_says_so_and_keeps_the_exit_status(env, tmp_path):
    r = rooflens(env, "run", "--logdir", str(tmp_path), "--steps", "5000:5005", str(SCRIPTS / "train.py"), "30", "3")
    assert r.returncode == 3, r.stderr[-3000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("rooflens:")]
    assert len(lines) == 1 and "before step 5000 of the window 5000:5005" in lines[0]
    assert "31 calls of step" in lines[0]  # 30 steps and the one of another shape
    bad = rooflens(env, "run", "--logdir", str(tmp_path), "--steps", "9:3", str(SCRIPTS / "train.py"), "3")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "STOP greater than START" in bad.stderr


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
