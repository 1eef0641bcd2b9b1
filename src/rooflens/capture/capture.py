"""Capture a trace the way the seeds say to: warm-up outside, a short steady-state window,
``block_until_ready`` after every step, one step annotation per step, and the HLO kept.

``rl.capture(fn, *args, steps=5, warmup=1, logdir=None)`` writes a normal TensorBoard/XProf
logdir (``<logdir>/plugins/profile/<run>/<host>.xplane.pb``) and, in the run directory,
``rooflens.json`` (versions, devices, arguments, steps) and ``hlo/<program>.txt`` (the compiled
HLO of ``fn``, named as the trace names the program), then returns the loaded Profile.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from rooflens.errors import RooflensError

STEP_NAME = "rooflens_step"


def _describe_args(args) -> list:
    import jax

    def one(x):
        if hasattr(x, "shape") and hasattr(x, "dtype"):
            sharding = getattr(x, "sharding", None)
            return {"shape": list(x.shape), "dtype": str(x.dtype), "sharding": str(sharding) if sharding else None}
        return {"value": repr(x)[:80]}

    return [jax.tree_util.tree_map(one, a) for a in args]


def step_range(steps: int | range, warmup: int) -> tuple[int, range]:
    """``steps=5, warmup=1`` or ``steps=range(100, 105)`` (calls 100…104 traced, the 100 before them
    untraced) → (warm-up calls, the traced steps' numbers)."""
    if isinstance(steps, range):
        if steps.step != 1 or len(steps) < 1 or steps.start < 0:
            raise RooflensError(f"steps={steps!r}: give a range of consecutive steps, e.g. range(100, 105).")
        return steps.start, steps
    if steps < 1:
        raise RooflensError("steps must be at least 1.")
    return warmup, range(steps)


def capture(fn, *args, steps: int | range = 5, warmup: int = 1, logdir: str | Path | None = None, feed=None,
            **kwargs):
    """Trace ``steps`` steady-state calls of ``fn(*args)`` and return the loaded Profile.

    ``steps=range(100, 105)``: the window is calls 100…104 (the 100 calls before run untraced).

    ``feed(out, args) -> args`` turns one step's output into the next step's arguments (for a
    training step that donates its parameters); by default the same arguments are reused.
    The warm-up (compile + ``warmup`` runs) happens before the trace starts. If ``fn`` raises
    inside the window, the trace is stopped, what was captured stays in the logdir, and the
    exception propagates unchanged.
    """
    import jax

    from rooflens.trace.loading import load

    warmup, numbers = step_range(steps, warmup)
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    logdir = Path(logdir) if logdir is not None else Path(tempfile.mkdtemp(prefix="rooflens-"))
    logdir.mkdir(parents=True, exist_ok=True)
    dump = Path(tempfile.mkdtemp(prefix="rooflens-dump-"))
    try:  # the program as compiled, with XLA's memory dumps (buffer assignment, live ranges)
        compiled = jitted.lower(*args, **kwargs).compile(compiler_options={"xla_dump_to": str(dump)})
        hlo = compiled.as_text()
        memory_stats = _memory_stats(compiled)
        memory_files = {k: p.read_text() for k in ("buffer-assignment", "live-range", "memory-usage-report")
                        for p in sorted(dump.glob(f"*after_optimizations-{k}.txt"))[-1:]}
    finally:
        shutil.rmtree(dump, ignore_errors=True)
    for _ in range(max(warmup, 1)):  # at least one: the first call compiles and must stay outside
        out = jax.block_until_ready(jitted(*args, **kwargs))
        if feed is not None:
            args = tuple(feed(out, args))
    snapshots = {"before": jax.profiler.device_memory_profile()}
    module_name = hlo.split(None, 2)[1].rstrip(",") if hlo.startswith("HloModule") else "program"
    from rooflens.capture.window import TraceWindow  # the recorder and the manifest: only when capturing

    window = TraceWindow(logdir, "rooflens.capture").open()
    try:
        for i in numbers:
            with jax.profiler.StepTraceAnnotation(STEP_NAME, step_num=i):
                out = jax.block_until_ready(jitted(*args, **kwargs))
            snapshots[f"step_{i}"] = jax.profiler.device_memory_profile()  # live device memory after the step
            if feed is not None:
                args = tuple(feed(out, args))
    finally:
        run = window.close(steps=len(numbers), warmup=warmup, window={"steps": [numbers.start, numbers.stop]},
                           programs=[module_name], args=_describe_args(args),
                           function=getattr(fn, "__name__", repr(fn)), memory={module_name: memory_stats})
        mem = run / "memory"
        mem.mkdir(exist_ok=True)
        for label, data in snapshots.items():
            (mem / f"{label}.pb.gz").write_bytes(data)
        for kind, text in memory_files.items():
            (mem / f"{module_name}.{kind}.txt").write_text(text)
        # the program too, also when fn raised in the window: the kept trace is readable in full
        (run / "hlo").mkdir(exist_ok=True)
        (run / "hlo" / f"{module_name}.txt").write_text(hlo)
    return load(run)


def _memory_stats(compiled) -> dict:
    """``compiled.memory_analysis()`` as plain numbers ({} where the backend gives none)."""
    try:
        ma = compiled.memory_analysis()
    except Exception:  # some backends do not implement it
        return {}
    if ma is None:
        return {}
    return {k: int(getattr(ma, k)) for k in dir(ma) if k.endswith("_in_bytes") and isinstance(getattr(ma, k), int)}
