"""Capture a trace the way the seeds say to: warm-up outside, a short steady-state window,
``block_until_ready`` after every step, one step annotation per step, and the HLO kept.

``rl.capture(fn, *args, steps=5, warmup=1, logdir=None)`` writes a normal TensorBoard/XProf
logdir (``<logdir>/plugins/profile/<run>/<host>.xplane.pb``) and, in the run directory,
``rooflens.json`` (versions, devices, arguments, steps) and ``hlo/<program>.txt`` (the compiled
HLO of ``fn``, named as the trace names the program), then returns the loaded Profile.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from rooflens.errors import RooflensError
from rooflens.trace.killers import recording

STEP_NAME = "rooflens_step"


def _describe_args(args) -> list:
    import jax

    def one(x):
        if hasattr(x, "shape") and hasattr(x, "dtype"):
            sharding = getattr(x, "sharding", None)
            return {"shape": list(x.shape), "dtype": str(x.dtype), "sharding": str(sharding) if sharding else None}
        return {"value": repr(x)[:80]}

    return [jax.tree_util.tree_map(one, a) for a in args]


def wait_for_fresh_run_name(logdir: Path) -> None:
    """The profiler names a run by the second it starts; never let a new run land in (and
    overwrite) an existing run directory of the same second."""
    profile = logdir / "plugins" / "profile"
    for _ in range(50):
        now = time.time()
        names = {time.strftime("%Y_%m_%d_%H_%M_%S", f(now)) for f in (time.localtime, time.gmtime)}
        if not any((profile / n).exists() for n in names):
            return
        time.sleep(0.1)


def _new_run_dir(logdir: Path, before: set[Path]) -> Path:
    runs = {p for p in (logdir / "plugins" / "profile").glob("*") if p.is_dir()}
    new = sorted(runs - before)
    if not new:
        raise RooflensError(f"the profiler wrote no run under {logdir}/plugins/profile.")
    return new[-1]


def capture(fn, *args, steps: int = 5, warmup: int = 1, logdir: str | Path | None = None, feed=None, **kwargs):
    """Trace ``steps`` steady-state calls of ``fn(*args)`` and return the loaded Profile.

    ``feed(out, args) -> args`` turns one step's output into the next step's arguments (for a
    training step that donates its parameters); by default the same arguments are reused.
    The warm-up (compile + ``warmup`` runs) happens before the trace starts. If ``fn`` raises
    inside the window, the trace is stopped, what was captured stays in the logdir, and the
    exception propagates unchanged.
    """
    import jax

    from rooflens.trace.profile import load

    if steps < 1:
        raise RooflensError("steps must be at least 1.")
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    logdir = Path(logdir) if logdir is not None else Path(tempfile.mkdtemp(prefix="rooflens-"))
    logdir.mkdir(parents=True, exist_ok=True)
    hlo = jitted.lower(*args, **kwargs).compile().as_text()
    for _ in range(max(warmup, 1)):  # at least one: the first call compiles and must stay outside
        out = jax.block_until_ready(jitted(*args, **kwargs))
        if feed is not None:
            args = tuple(feed(out, args))
    wait_for_fresh_run_name(logdir)
    before = {p for p in (logdir / "plugins" / "profile").glob("*") if p.is_dir()}
    t0 = time.time()
    jax.profiler.start_trace(str(logdir))
    try:
        with recording() as rec:
            for i in range(steps):
                with jax.profiler.StepTraceAnnotation(STEP_NAME, step_num=i):
                    out = jax.block_until_ready(jitted(*args, **kwargs))
                if feed is not None:
                    args = tuple(feed(out, args))
    finally:
        jax.profiler.stop_trace()
    run = _new_run_dir(logdir, before)
    module_name = hlo.split(None, 2)[1].rstrip(",") if hlo.startswith("HloModule") else "program"
    (run / "hlo").mkdir(exist_ok=True)
    (run / "hlo" / f"{module_name}.txt").write_text(hlo)
    devices = jax.devices()
    meta = {
        "captured_by": "rooflens.capture", "when_unix_s": t0, "steps": steps, "warmup": warmup,
        "jax_version": jax.__version__, "jaxlib_version": getattr(jax.lib, "__version__", ""),
        "backend": jax.default_backend(), "device_kind": devices[0].device_kind, "num_devices": len(devices),
        "devices": [{"id": d.id, "kind": d.device_kind, "platform": d.platform} for d in devices],
        "programs": [module_name], "args": _describe_args(args),
        "function": getattr(fn, "__name__", repr(fn)),
        "in_window": rec.to_dict(),
    }
    (run / "rooflens.json").write_text(json.dumps(meta, indent=2, default=str))
    return load(run)
