"""``rooflens run script.py args…``: profile an unmodified script in this process.

The profiler starts before the script runs (so it sees every jitted program, compilations
included, which it reports as compilations in the window), the script runs as ``__main__`` with
its own ``sys.argv``, and the trace is stopped and written whatever happens. Each program's HLO
is in the XSpace itself (its metadata plane), so no XLA dump flags are needed.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

from rooflens.errors import RooflensError
from rooflens.trace.window import TraceWindow


def run_script(script: str, argv: list[str], logdir: str | Path) -> tuple[Path, BaseException | None]:
    """Run ``script`` under the profiler; returns (run directory, the script's exception or None)."""

    path = Path(script)
    if not path.is_file():
        raise RooflensError(f"{script} does not exist.")
    logdir = Path(logdir)
    logdir.mkdir(parents=True, exist_ok=True)
    old_argv, old_path = sys.argv, list(sys.path)
    sys.argv = [str(path), *argv]
    sys.path.insert(0, str(path.parent.resolve()))
    error: BaseException | None = None
    window = TraceWindow(logdir, "rooflens run").open()
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            error = e
    except BaseException as e:  # the user's error: reported after the trace is safely written
        error = e
    finally:
        sys.argv, sys.path[:] = old_argv, old_path
        run_dir = window.close(script=str(path), argv=argv, script_error=repr(error) if error else None)
    return run_dir, error
