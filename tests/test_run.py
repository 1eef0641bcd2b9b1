"""`rooflens run` on real, unmodified scripts (tests/run_scripts/), through the real CLI.

Each script is profiled in a subprocess exactly as a user would (`rooflens run script.py`), on a
fresh user cache (the first report calibrates this CPU by itself), then read back with
`rooflens report --json`: pathologies raise their finding, healthy twins raise no medium or high
alarm and see the devices they see under plain python; exits, signals, chdir, concurrent runs and
a multi-process jax.distributed job keep their profiles.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import interruptible

SCRIPTS = Path(__file__).parent / "run_scripts"
ALARMS = {"idle", "recompilation", "weights-all-gathered", "communication-share", "tiny-ops", "host-transfers"}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """The user's environment: no XLA_FLAGS of ours (scripts set their own), a fresh cache."""
    e = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    e["ROOFLENS_CACHE_DIR"] = str(tmp_path_factory.mktemp("fresh-user-cache"))
    e["JAX_PLATFORMS"] = "cpu"
    return e


def rooflens(env, *args, stdin=None, cwd=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "rooflens.cli", *args], capture_output=True, text=True,
                          env=env, input=stdin, cwd=cwd, timeout=timeout)


def profile(env, tmp_path, script, *args):
    logs = tmp_path / Path(script).name
    r = rooflens(env, "run", "--logdir", str(logs), str(SCRIPTS / f"{script}.py"), *args)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = rooflens(env, "report", str(logs), "--json")
    assert rep.returncode == 0, rep.stderr[-3000:]
    return r, json.loads(rep.stdout), rep.stderr


def findings(data, severities=("high", "medium")):
    return {f["rule"] for f in data["findings"] if f["severity"] in severities}


@pytest.fixture(scope="module")
def healthy(env, tmp_path_factory):
    """The healthy loop, profiled first: its report is the first use (no calibration yet)."""
    return profile(env, tmp_path_factory.mktemp("healthy"), "healthy_loop")


def test_first_report_calibrates_once_and_judges_the_steady_state(healthy):
    run, data, err = healthy
    assert "calibrating this CPU once" in err and "calibration saved" in err
    assert data["chip"] == "local" and data["comparison"], "a fresh cache still gets the roofline comparison"
    assert not findings(data) & ALARMS, data["findings"]
    assert data["steps"]["count"] >= 8  # inferred: the executions of jit_step, its first one left out
    assert any("executions of jit_step" in n for n in data["notes"])
    warm = next(n for n in data["notes"] if n.startswith("warm-up"))
    assert "jit_step" in warm and "compiled in" in warm and "first run" in warm
    steady = {s["program"]: s["occurrences"] for s in data["op_stats"]}
    assert any(p.startswith("jit_step") for p in steady)
    assert "profile written to" in run.stderr and "loss" in run.stdout


def test_include_warmup_puts_first_runs_back(env, healthy):
    _, data, _ = healthy
    logs = Path(data["path"])
    full = json.loads(rooflens(env, "report", str(logs), "--json", "--include-warmup").stdout)
    occ = lambda d: sum(s["occurrences"] for s in d["op_stats"])  # noqa: E731
    assert occ(full) > occ(data)
    assert full["metadata"]["steady_state"]["excluded"] is False


def test_memory_reads_a_run_logdir(env, healthy):
    _, data, _ = healthy
    r = rooflens(env, "memory", data["path"], "--json")
    assert r.returncode == 0, r.stderr
    mem = json.loads(r.stdout)
    names = {p["program"] for p in mem["programs"]}
    assert "jit_step" in names and mem["peak_bytes"] > 0
    assert any(p["peak_buffers"] for p in mem["programs"] if p["program"] == "jit_step")
    assert mem["snapshots"] and mem["snapshots"][0]["total_bytes"] > 0


def test_script_that_sets_its_own_xla_flags_gets_its_8_devices(env, tmp_path):
    plain = subprocess.run([sys.executable, str(SCRIPTS / "healthy_8dev.py")], capture_output=True, text=True,
                           env=env, timeout=300)
    run, data, _ = profile(env, tmp_path, "healthy_8dev")
    assert plain.stdout.strip() == run.stdout.strip() == "devices 8"
    assert data["num_devices"] == 8 and data["metadata"]["num_devices"] == 8
    assert not findings(data) & ALARMS, data["findings"]


@pytest.mark.parametrize("script,rule", [
    ("fsdp", "weights-all-gathered"),
    ("churn", "recompilation"),
    ("host_stall", "idle"),
    ("tiny_ops", "tiny-ops"),
    ("transfers", "host-transfers"),
])
def test_pathology_raises_its_finding(env, healthy, tmp_path, script, rule):
    _, data, _ = profile(env, tmp_path, script)
    assert rule in findings(data), [(f["rule"], f["severity"], f["title"]) for f in data["findings"]]
    if script == "churn":
        f = next(f for f in data["findings"] if f["rule"] == "recompilation")
        assert f["severity"] == "high" and any("now f32[" in e for e in f["evidence"])
        # the host's compile time spread over the steps, uncapped and no share of a step (capped at the step it
        # read "would save 28.4 ms of a 28.4 ms step (100.0%)": a fix does not make the step take no time)
        total_s = sum(c["duration_s"] for c in data["in_window"]["compilations"])
        b = data["steps"]["breakdown"]  # no steps marked: per execution of the step program
        assert f["step_s"] == 0 and f["recoverable_s"] == pytest.approx(total_s / b["periods"], rel=1e-6)
        assert f["recoverable_s"] > b["step_time_s"] and f["per"] == (
            f"execution of {b['program']} on average (the host's time compiling, not the device's)")
    if script == "host_stall":  # the sleeps, not the compilations, make the device wait
        assert data["steps"]["count"] >= 7


def test_jax_functions_that_share_a_name_with_the_scripts_are_no_recompilation(env, healthy, tmp_path):
    """A Flax linen model's init runs jnp.add outside jit (a bias added at two lines, once per shape): jnp.add is a
    jitted function of JAX's own whose programs are named jit_add, as the script's own jitted `add` (a tree sum of
    gradients) is. The whole run's report took jnp.add's second and third shapes for recompilations of the
    script's `add` ("2 recompilations of already-compiled functions", MEDIUM, "keep shapes static"). Each
    compilation now records whose function it compiles: JAX's are never recompilations."""
    _, data, _ = profile(env, tmp_path, "../window_scripts/input_bound", "8", "host")
    assert "recompilation" not in {f["rule"] for f in data["findings"]}, data["in_window"]["compilations"]
    (manifest,) = (tmp_path / "input_bound").rglob("rooflens.json")
    first = json.loads(manifest.read_text())["in_window"]["first_compilations"]
    adds = [c["own"] for c in first if c["module"] == "jit_add"]
    assert adds.count(True) == 1 and adds.count(False) >= 2, adds  # the script's `add` once, jnp.add per shape
    assert [c["own"] for c in first if c["module"] in ("jit_grad_fn", "jit_update")] == [True, True]


def test_a_whole_run_leaves_the_python_tracer_off_unless_asked(env, healthy, tmp_path):
    """A whole run is traced without JAX's Python tracer (a frame per Python call: it slowed a Python-heavy loop
    tenfold): its report says so and no gap names a frame; with --python-tracer the slow loader's gaps name the
    sleep the host was in."""
    _, off, _ = profile(env, tmp_path, "host_stall")
    assert off["metadata"]["python_tracer"] is False
    assert any("without JAX's Python tracer" in n for n in off["notes"]), off["notes"]
    idle = next(f for f in off["findings"] if f["rule"] == "idle")
    assert not any("the host was in" in e for e in idle["evidence"]), idle["evidence"]
    # the finding itself says how to learn what the host did in its gaps
    assert any(e.startswith("no Python frame of the host is known in these gaps") and "--python-tracer" in e
               for e in idle["evidence"]), idle["evidence"]
    logs = tmp_path / "traced"
    # run by an interpreter named python3, as the `rooflens` command's shebang names it: the profiler names the
    # Python thread's line after it ("python3"), and its frames were dropped as not the Python tracer's line
    python3 = Path(sys.executable).with_name("python3")
    r = subprocess.run([str(python3 if python3.exists() else sys.executable), "-m", "rooflens.cli", "run", "--logdir",
                        str(logs), "--python-tracer", str(SCRIPTS / "host_stall.py")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = rooflens(env, "report", str(logs), "--json")
    assert rep.returncode == 0, rep.stderr[-3000:]
    on = json.loads(rep.stdout)
    assert on["metadata"]["python_tracer"] is True and not any("Python tracer" in n for n in on["notes"])
    idle = next(f for f in on["findings"] if f["rule"] == "idle")
    assert any("the host was in time.sleep" in e for e in idle["evidence"]), idle["evidence"]
    assert not any(e.startswith("no Python frame") for e in idle["evidence"]), idle["evidence"]


def test_exit_status_message_and_traceback_are_the_scripts(env, tmp_path):
    logs = tmp_path / "logs"
    script = SCRIPTS / "exits.py"
    for how, status in (("three", 3), ("message", 1), ("raise", 1)):
        plain = subprocess.run([sys.executable, str(script), how], capture_output=True, text=True, env=env,
                               input="hello\n", cwd=tmp_path, timeout=300)
        r = rooflens(env, "run", "--logdir", "logs", str(script), how, stdin="hello\n", cwd=tmp_path)
        assert plain.returncode == r.returncode == status, r.stderr[-2000:]
        assert r.stdout == plain.stdout  # same argv, sys.path[0], __main__, __file__, cwd and stdin
        mine = [ln for ln in r.stderr.splitlines() if not ln.startswith("rooflens: ")]
        assert mine == plain.stderr.splitlines()  # the message / traceback, without frames of ours
        said = next(ln for ln in r.stderr.splitlines() if "profile written to" in ln)
        run_dir = Path(said.split("profile written to ", 1)[1].split(";")[0])
        assert run_dir.is_absolute() and list(run_dir.glob("*.xplane.pb")), said  # though the script chdir'd
        meta = json.loads((run_dir / "rooflens.json").read_text())
        assert meta["exit"]["status"] == status and meta["argv"] == [how]
        assert meta["xla_flags_added"] == ["--xla_gpu_enable_command_buffer="]  # a whole run (capture/launch.py)
        # what each ending prints, written out here rather than taken from the plain run alone
        expected_tail = {"three": [], "message": ["fatal: config missing"],
                         "raise": ["ValueError: the script itself failed"]}[how]
        assert mine[len(mine) - len(expected_tail):] == expected_tail, mine
        assert how != "three" or mine == [], mine
        if how == "raise":
            assert mine[0] == "Traceback (most recent call last):" and str(script) in r.stderr
    assert len(list((logs / "plugins" / "profile").iterdir())) == 3  # one run directory each


def test_two_pmapped_functions_are_two_programs_and_the_train_step_is_the_step(env, tmp_path):
    """A pmapped train step and a pmapped evaluation: jax names both programs jit__fun; under rooflens run each is
    named after its function, so the steps are the train step's executions and the evaluation is another program."""
    _, data, _ = profile(env, tmp_path, "pmap_eval")
    functions = {re.sub(r"\(\d+\)$", "", p) for p in data["by_program_s"]}  # jit_train_step(22): a compilation of it
    assert {"jit_train_step", "jit_evaluate"} <= functions and "jit__fun" not in functions
    assert data["steps"]["program"].startswith("jit_train_step") and 24 <= data["steps"]["count"] <= 29
    assert all(p.startswith("jit_train_step") for p in data["steps"]["breakdown"]["programs"])


def test_a_window_holding_an_evaluations_first_compilation_says_no_idle_past_its_step(env, tmp_path):
    """A window of the pmapped train step that holds the evaluation's first call (its compilation, and a gather's):
    that step is left out as warm-up, and the idle finding's time per step is the window's idle share of a step,
    not the window's idle over the steps left (it said 6.6 ms per step in a 1.86 ms step)."""
    from rooflens.analysis.invariants import document_violations

    r = rooflens(env, "run", "--logdir", str(tmp_path / "logs"), "--steps", "5:12", str(SCRIPTS / "pmap_eval.py"))
    assert r.returncode == 0, r.stderr[-3000:]
    rep = rooflens(env, "report", str(tmp_path / "logs"), "--json")
    assert rep.returncode == 0, rep.stderr[-3000:]
    data = json.loads(rep.stdout)
    assert not document_violations(data), document_violations(data)
    step = data["steps"]["breakdown"]["step_time_s"]
    for f in data["findings"]:
        if f["rule"] == "idle":
            assert f["time_s"] <= step * (1 + 1e-6) and f["recoverable_s"] <= step * (1 + 1e-6), f


def test_a_static_argument_that_changes_is_named_as_the_recompilations_cause(env, tmp_path):
    """A schedule's learning rate passed as a static argument recompiles the step at each new value: JAX's reason
    names the static value, and the fix says to pass it as an array (shape churn's fix does not)."""
    _, data, _ = profile(env, tmp_path, "static_lr")
    (f,) = [f for f in data["findings"] if f["rule"] == "recompilation"]
    assert any("Static(" in e for e in f["evidence"]) and "static_argnums" in f["fix"]
    _, churn, _ = profile(env, tmp_path, "churn")
    assert "static_argnums" not in next(f for f in churn["findings"] if f["rule"] == "recompilation")["fix"]


def test_a_run_that_failed_before_its_devices_ran_anything_is_reported_as_such(env, tmp_path):
    """A script that raises once JAX is up and before any program ran: its trace holds no op, and the report says
    in one sentence that the run stopped at that exception (not "was anything running on the devices?")."""
    r = rooflens(env, "run", "--logdir", "logs", str(SCRIPTS / "exits.py"), "early", cwd=tmp_path)
    assert r.returncode == 1 and "RuntimeError: the config has no model section" in r.stderr
    rep = rooflens(env, "report", "logs", cwd=tmp_path)
    assert rep.returncode == 2 and not rep.stdout and len(rep.stderr.strip().splitlines()) == 1, rep.stderr
    assert "stopped at an exception before anything ran on a device (RuntimeError: the config has no model " \
           "section)" in rep.stderr


def test_ctrl_c_exits_130_and_keeps_the_profile(env, tmp_path):
    p = subprocess.Popen(interruptible([sys.executable, "-m", "rooflens.cli", "run", "--logdir", str(tmp_path / "logs"),
                                        str(SCRIPTS / "exits.py"), "sleep"]), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    p.stdin.write("x\n")
    p.stdin.flush()
    for line in p.stdout:
        if line.startswith("sleeping"):
            break
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert "KeyboardInterrupt" in err and "profile written to" in err
    assert list((tmp_path / "logs").rglob("*.xplane.pb"))


def test_bad_command_lines_are_one_sentence(env, tmp_path):
    for args in (("run", str(tmp_path / "missing.py")), ("run", "-m", "no_such_module_here"), ("run",)):
        r = rooflens(env, *args)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_concurrent_runs_and_a_distributed_job_keep_every_profile(env, tmp_path):
    """Two processes of one jax.distributed job under `rooflens run`, and at the same time an
    unrelated run into the same logdir: three profiles, the job's in one run directory."""
    logs = tmp_path / "logs"
    port = _free_port()
    cmd = [sys.executable, "-m", "rooflens.cli", "run", "--logdir", str(logs)]
    procs = [subprocess.Popen([*cmd, str(SCRIPTS / "distributed.py"), str(port), "2", str(i)], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(2)]
    time.sleep(0.2)
    procs.append(subprocess.Popen([*cmd, str(SCRIPTS / "exits.py"), "three"], env=env, text=True,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 3], [e[-2000:] for _, e in outs]
    for i in range(2):
        assert f"process {i} of 2 sum" in outs[i][0]
    host = socket.gethostname()
    files = sorted(f.relative_to(logs / "plugins" / "profile") for f in logs.rglob("*.xplane.pb"))
    job = [f for f in files if ".process" in f.name]
    assert sorted(f.name for f in job) == [f"{host}.process0.xplane.pb", f"{host}.process1.xplane.pb"], files
    assert job[0].parent == job[1].parent  # one run directory for the job
    assert len(files) == 3 and len({f.parent for f in files}) == 2
    data = json.loads(rooflens(env, "report", str(logs / "plugins" / "profile" / job[0].parent), "--json").stdout)
    assert sorted(data["hosts"]) == [f"{host}.process0", f"{host}.process1"]


def _executions(run_dir: Path, program: str) -> int:
    import numpy as np

    import rooflens as rl
    from rooflens.trace.warmup import execution_index

    t = rl.load(run_dir).table
    sel = np.asarray([t.programs[p] for p in t.program]) == program
    return int(execution_index(t)[sel & (t.device == t.device[sel][0])].max()) + 1 if sel.any() else 0


def test_a_script_that_exits_with_steps_queued_has_them_all_in_its_trace(env, tmp_path):
    """No async tail: async_exit.py dispatches 30 steps inside main() and returns without reading a result
    back (the outputs are gone, the steps still queued); the launcher waits for the device before it stops
    the trace, so the trace holds the loop's 30 executions of the step (without: 1 or 2 of them)."""
    import rooflens as rl

    r = rooflens(env, "run", "--logdir", str(tmp_path), str(SCRIPTS / "async_exit.py"), "30")
    assert r.returncode == 0 and "dispatched 30 steps" in r.stdout, r.stderr[-3000:]
    (run,) = (tmp_path / "plugins" / "profile").iterdir()
    assert _executions(run, "jit_step") >= 30
    prof = rl.load(run)
    assert sum(len(d.get("step", ())) for d in prof.dispatches_of.values()) == 31  # the loop's and the first
    assert not [u for u in prof.unran if u.function == "step"], prof.unran
    meta = json.loads((run / "rooflens.json").read_text())
    assert meta["drained_s"] > 0.05  # it did wait: the steps take ~10 ms each


def test_a_time_window_holds_the_work_dispatched_inside_it(env, tmp_path):
    """The time window closes on the script's thread and waits for what it dispatched: every step the host
    dispatched inside the window ran inside the trace."""
    r = rooflens(env, "run", "--logdir", str(tmp_path), "--delay", "1", "--duration", "0.5",
                 str(SCRIPTS / "async_exit.py"), "1200")  # device work well past the window on a loaded machine
    assert r.returncode == 0, r.stderr[-3000:]
    made = list((tmp_path / "plugins" / "profile").iterdir())
    assert len(made) == 1, (made, r.stderr[-3000:])
    (run,) = made
    import rooflens as rl

    prof = rl.load(run)
    assert prof.dispatches_of, "the trace holds the host's dispatches"
    dispatched = sum(len(d.get("step", ())) for d in prof.dispatches_of.values())
    assert dispatched >= 5 and _executions(run, "jit_step") >= dispatched
