"""``rooflens run script.py args…``: profile an unmodified script in this process.

The profiler starts before the script runs (so it sees every jitted program, compilations
included, which it reports as compilations in the window), the script runs as ``__main__`` with
its own ``sys.argv``, and the trace is stopped and written whatever happens. Each program's HLO
is in the XSpace itself (its metadata plane), so no XLA dump flags are needed.
"""

from __future__ import annotations

import json
import runpy
import sys
import time
from pathlib import Path

from rooflens.errors import RooflensError
from rooflens.trace.capture import wait_for_fresh_run_name
from rooflens.trace.killers import recording


def run_script(script: str, argv: list[str], logdir: str | Path) -> tuple[Path, BaseException | None]:
    """Run ``script`` under the profiler; returns (run directory, the script's exception or None)."""
    import jax

    path = Path(script)
    if not path.is_file():
        raise RooflensError(f"{script} does not exist.")
    logdir = Path(logdir)
    logdir.mkdir(parents=True, exist_ok=True)
    wait_for_fresh_run_name(logdir)
    before = {p for p in (logdir / "plugins" / "profile").glob("*") if p.is_dir()}
    old_argv, old_path = sys.argv, list(sys.path)
    sys.argv = [str(path), *argv]
    sys.path.insert(0, str(path.parent.resolve()))
    error: BaseException | None = None
    t0 = time.time()
    jax.profiler.start_trace(str(logdir))
    try:
        with recording() as rec:
            runpy.run_path(str(path), run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            error = e
    except BaseException as e:  # the user's error: reported after the trace is safely written
        error = e
    finally:
        jax.profiler.stop_trace()
        sys.argv, sys.path[:] = old_argv, old_path
    runs = sorted({p for p in (logdir / "plugins" / "profile").glob("*") if p.is_dir()} - before)
    if not runs:
        raise RooflensError(f"the profiler wrote nothing under {logdir}.")
    devices = jax.devices()
    meta = {
        "captured_by": "rooflens run", "script": str(path), "argv": argv, "when_unix_s": t0,
        "wall_s": time.time() - t0, "jax_version": jax.__version__, "backend": jax.default_backend(),
        "device_kind": devices[0].device_kind, "num_devices": len(devices),
        "in_window": rec.to_dict(), "script_error": repr(error) if error else None,
    }
    (runs[-1] / "rooflens.json").write_text(json.dumps(meta, indent=2, default=str))
    return runs[-1], error
