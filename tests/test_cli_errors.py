"""The command line's own error paths, each run for real: a usage error, an OS error, an internal error (a bug
of ours), `rooflens run`'s window validation, and `rooflens run -m module`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest


def _env(**extra) -> dict:
    e = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "ROOFLENS_DEBUG")}
    e.update(JAX_PLATFORMS="cpu", **extra)
    return e


def _rooflens(*args, env=None, cwd=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "rooflens.cli", *args], capture_output=True, text=True,
                          env=env or _env(), cwd=cwd, timeout=timeout)


def _with_failing_catalogue(error: str, env=None):
    """`rooflens chips` with the catalogue's row reader raising ``error`` (a Python expression): the handlers of
    rooflens.cli.main see what a real failure there would raise."""
    code = textwrap.dedent(f"""
        import sys
        import rooflens.hardware as C
        def broken(*a, **k):
            raise {error}
        C.chip_rows = broken
        from rooflens.cli import main
        main(["chips"])
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env or _env(),
                          timeout=120)


def test_a_usage_error_is_one_sentence_naming_the_help():
    r = _rooflens("report", "--top", "-1", "somewhere")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == "rooflens: Invalid value for '--top': -1 is not in the range x>=0 (see 'rooflens report -h').\n"
    r = _rooflens("chips", "--no-such-option")
    assert r.returncode == 2 and r.stderr == "rooflens: No such option '--no-such-option' (see 'rooflens chips -h').\n"


def test_an_os_error_names_the_file_and_the_systems_reason():
    r = _with_failing_catalogue("PermissionError(13, 'Permission denied', '/srv/chips.toml')")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr == "rooflens: cannot use /srv/chips.toml: permission denied.\n"
    # an OSError naming no file is not the user's to fix: it is an internal error (below)
    r = _with_failing_catalogue("OSError(28, 'No space left on device')")
    assert r.returncode == 1 and r.stderr.startswith("rooflens: internal error (OSError:")


def test_an_internal_error_is_one_sentence_and_the_traceback_on_request():
    r = _with_failing_catalogue("KeyError('tpu-v9')")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == ("rooflens: internal error (KeyError: 'tpu-v9'); set ROOFLENS_DEBUG=1 for the traceback.\n")
    debug = _with_failing_catalogue("KeyError('tpu-v9')", env=_env(ROOFLENS_DEBUG="1"))
    assert debug.returncode == 1 and "Traceback (most recent call last)" in debug.stderr
    assert debug.stderr.rstrip().endswith("KeyError: 'tpu-v9'")


@pytest.mark.parametrize("window,said", [
    (("--steps", "5"), "--steps"),
    (("--steps", "5:3"), "--steps"),
    (("--steps", "a:b"), "--steps"),
    (("--steps", "1:3", "--delay", "1", "--duration", "1"), "give either --steps or --delay/--duration, not both."),
    (("--delay", "1"), "--duration SECONDS (more than 0) says how long the window lasts."),
    (("--duration", "0"), "--duration SECONDS (more than 0) says how long the window lasts."),
    (("--delay", "-1", "--duration", "1"), "--delay takes the seconds to wait (0 or more) before the window opens."),
    (("--duration", "nan"), "--duration"),
])
def test_a_window_that_cannot_be_is_refused_before_the_script_runs(tmp_path, window, said):
    script = tmp_path / "never.py"
    script.write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write('ran')\n")
    r = _rooflens("run", "--logdir", str(tmp_path / "logs"), *window, str(script))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rooflens: ") and said in lines[0], r.stderr
    assert not (tmp_path / "ran").exists() and not (tmp_path / "logs").exists()  # nothing ran, nothing written


def test_run_a_module_as_python_m_does(tmp_path):
    """`rooflens run -m pkg.train ARGS` runs the module as `python -m` would (its __name__, argv, the working
    directory first on sys.path) and profiles it."""
    pkg = tmp_path / "proj" / "mytrain"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "loop.py").write_text(textwrap.dedent("""
        import sys
        import jax
        import jax.numpy as jnp

        print("name", __name__, "argv", sys.argv[1:], "path0", sys.path[0], flush=True)

        @jax.jit
        def step(x):
            return jnp.tanh(x @ x) * 0.5

        x = jnp.ones((64, 64))
        for _ in range(int(sys.argv[1])):
            x = step(x)
        x.block_until_ready()
    """))
    cwd = tmp_path / "proj"
    plain = subprocess.run([sys.executable, "-m", "mytrain.loop", "4", "extra"], capture_output=True, text=True,
                           env=_env(), cwd=cwd, timeout=300)
    assert plain.returncode == 0, plain.stderr[-2000:]
    r = _rooflens("run", "--logdir", "logs", "-m", "mytrain.loop", "4", "extra", cwd=cwd)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout == plain.stdout and "name __main__ argv ['4', 'extra']" in r.stdout
    (xspace,) = list((cwd / "logs").rglob("*.xplane.pb"))
    meta = json.loads((xspace.parent / "rooflens.json").read_text())
    assert meta["argv"] == ["4", "extra"] and meta["exit"]["status"] == 0
    rep = _rooflens("report", str(cwd / "logs"), "--json", "--no-calibrate", cwd=cwd)
    assert rep.returncode == 0, rep.stderr[-2000:]
    ops = {o["program"] for o in json.loads(rep.stdout)["op_stats"]}
    assert "jit_step" in ops
