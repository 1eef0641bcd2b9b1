"""``rooflens run script.py args…`` / ``rooflens run -m module args…``: profile an unmodified program.

This process checks the command line and then replaces itself (``exec``) with a fresh Python
interpreter that runs the script exactly as ``python script.py`` would, under the profiler; see
:mod:`rooflens.capture.launch` for how (the profiler starts only when the script's own JAX backend
comes up). The exit status, exit message and traceback are the script's.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rooflens.capture import launch, memwatch, stepwindow
from rooflens.errors import RooflensError, existing

DEFAULT_LOGDIR = "rooflens-logs"


def window_spec(steps: str | None = None, delay_s: float | None = None, duration_s: float | None = None,
                step_fn: str | None = None) -> dict | None:
    """``--steps A:B`` or ``--delay S --duration S`` as the launcher's window (None: the whole run), with
    ``--step-fn NAME`` (the step function, named: of a steps window or of the whole run, ``{"step_fn":
    NAME}``); raises RooflensError for a window that cannot be."""
    if steps is not None and (delay_s is not None or duration_s is not None):
        raise RooflensError("give either --steps or --delay/--duration, not both.")
    if step_fn is not None:
        step_fn = step_fn.strip()
        if not step_fn:
            raise RooflensError("--step-fn takes the name of a jitted function (train_step) or of its program "
                                "(jit_train_step).")
        if delay_s is not None or duration_s is not None:
            raise RooflensError("--step-fn names the step of a --steps window or of a whole run; a --delay/--duration "
                                "window counts no steps.")
    named = {"step_fn": step_fn} if step_fn is not None else {}
    if steps is not None:
        try:
            return {"steps": list(stepwindow.parse_steps(steps)), **named}
        except ValueError as e:
            raise RooflensError(str(e)) from None
    if delay_s is None and duration_s is None:
        return named or None
    if duration_s is None or duration_s <= 0:
        raise RooflensError("--duration SECONDS (more than 0) says how long the window lasts.")
    if delay_s is not None and delay_s < 0:
        raise RooflensError("--delay takes the seconds to wait (0 or more) before the window opens.")
    return {"delay_s": float(delay_s or 0.0), "duration_s": float(duration_s)}


def command(target: str, args: list[str], logdir: str | Path | None = None, module: bool = False,
            dump: bool = True, window: dict | None = None, max_trace_bytes: int | None = None,
            python_tracer: bool | None = None) -> list[str]:
    """The interpreter command line that runs ``target`` under rooflens (a file, or a module with
    ``module=True``), over the whole run or a ``window`` (:func:`window_spec`; ``{"step_fn": NAME}``
    alone: the whole run, its step function named); raises RooflensError
    when the target cannot be run."""
    if module:
        import importlib.util

        sys.path.insert(0, os.getcwd())  # `python -m` looks in the working directory first
        try:
            spec = importlib.util.find_spec(target)
        except (ImportError, ValueError) as e:
            raise RooflensError(f"cannot find module {target!r} ({type(e).__name__}: {e}).") from None
        finally:
            sys.path.pop(0)
        if spec is None:
            raise RooflensError(f"there is no module named {target!r} (as `python -m {target}` would look for it).")
    else:
        p = Path(target)
        existing(target)
        if p.is_dir() and not (p / "__main__.py").is_file():
            raise RooflensError(f"{target} is a directory without a __main__.py; give a Python script.")
    logdir = Path(logdir or DEFAULT_LOGDIR).absolute()
    try:
        logdir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RooflensError(f"cannot create the log directory {logdir} ({e.strerror or e}).") from None
    from rooflens.hardware.catalog import local_chip_path

    whole_run = window is None or not ("steps" in window or "duration_s" in window)  # --step-fn alone: a whole run
    if max_trace_bytes is None and whole_run:
        max_trace_bytes = memwatch.default_limit_bytes()
    return launch.command(str(logdir), "module" if module else "path", target, list(args), dump=dump, window=window,
                          calibration_file=str(local_chip_path()), max_trace_bytes=max_trace_bytes,
                          python_tracer=python_tracer)


def exec_run(target: str, args: list[str], logdir: str | Path | None = None, module: bool = False,
             window: dict | None = None, max_trace_bytes: int | None = None,
             python_tracer: bool | None = None) -> None:
    """Become the profiled program (never returns)."""
    argv = command(target, args, logdir, module, window=window, max_trace_bytes=max_trace_bytes,
                   python_tracer=python_tracer)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os.execv(argv[0], argv)
