"""``rooflens run``: profile an unmodified Python program (see :mod:`rooflens.capture.run`)."""

from __future__ import annotations

import click

from rooflens.cli.common import FiniteFloat, UserError


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--logdir", default=None, metavar="DIR", help="Where to write the profile (default: ./rooflens-logs).")
@click.option("-m", "module", default=None, metavar="MODULE", help="Run a module, as `python -m MODULE` does.")
@click.option("--steps", default=None, metavar="START:STOP", help="Trace only calls START…STOP-1 of the step "
              "function (the script's StepTraceAnnotation steps, else --step-fn, else, of the jitted functions its "
              "code has called when one reaches START calls, the shallowest loop's with the most work per call).")
@click.option("--step-fn", "step_fn", default=None, metavar="NAME",
              help="The step function, by its name (train_step) or its program's (jit_train_step): --steps counts "
                   "its calls; without --steps the whole run is traced and its report takes it as the step.")
@click.option("--delay", "delay_s", type=FiniteFloat(), default=None, metavar="SECONDS",
              help="With --duration: open the window this long after JAX comes up.")
@click.option("--duration", "duration_s", type=FiniteFloat(), default=None, metavar="SECONDS",
              help="Trace this long only (after --delay), like nsys --delay/--duration.")
@click.option("--max-trace-memory", "max_trace_memory", default=None, metavar="SIZE",
              help="A whole run's trace is stopped early (and written, and the report says why) once the process's "
              "memory has grown by a sixth of SIZE while tracing (writing it takes the rest), e.g. 4GB "
              "(default: half of this machine's memory).")
@click.option("--python-tracer/--no-python-tracer", "python_tracer", default=None,
              help="Record every Python call in the trace (JAX's Python tracer): what the host was doing in a gap. "
              "Default: on for a window (--steps, --duration), off for a whole run, whose Python-heavy loops it can "
              "slow tenfold.")
@click.argument("script", required=False)
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
def run(logdir: str | None, module: str | None, steps: str | None, step_fn: str | None, delay_s: float | None,
        duration_s: float | None, max_trace_memory: str | None, python_tracer: bool | None, script: str | None,
        script_args: tuple[str, ...]) -> None:
    """Profile an unmodified Python program: `rooflens run script.py ARGS` or `rooflens run -m MODULE ARGS`.

    The program runs exactly as under `python` (its own __main__, argv, environment, exit status);
    the profiler starts when its JAX backend comes up. Writes a TensorBoard/XProf logdir with the
    HLO and memory data of every program, and prints where; `rooflens report` reads it.
    """
    from rooflens.capture.memwatch import parse_size
    from rooflens.capture.run import exec_run, window_spec

    if module is None and script is None:
        raise UserError("give a script to run (rooflens run script.py ARGS) or a module (rooflens run -m MODULE).")
    args = ([script] if module is not None and script is not None else []) + list(script_args)
    try:
        max_trace_bytes = parse_size(max_trace_memory) if max_trace_memory is not None else None
    except ValueError as e:
        raise UserError(f"--max-trace-memory {e}") from None
    exec_run(module or script, args, logdir, module=module is not None,
             window=window_spec(steps, delay_s, duration_s, step_fn), max_trace_bytes=max_trace_bytes,
             python_tracer=python_tracer)
