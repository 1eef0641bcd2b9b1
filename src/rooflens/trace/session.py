"""The loop form of capture: profile a training loop you already have.

    with rl.trace.Session("logs", warmup=1, steps=5) as session:
        for batch in data:
            with session.step():
                state, loss = train_step(state, batch)
    prof = session.profile          # rl.load of the run

or, as a decorator: ``train_step = session.wrap(train_step)`` (each call is one step).

The first ``warmup`` steps run untraced (compilation, first run); the trace then covers the
next ``steps`` steps only (a short steady-state window) and stops by itself. Each traced step
gets a step annotation and ends with a ``block_until_ready`` (on the wrapped function's result,
or on every live array for ``with session.step()``), so the device work of a step lands inside it.
A result the loop drops at once is not live and cannot be waited for: keep the loop's state (as
training loops do) or pass it, ``session.step(block_on=loss)``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import tempfile
import time
from pathlib import Path

from rooflens.errors import RooflensError
from rooflens.trace.capture import STEP_NAME, _new_run_dir, wait_for_fresh_run_name
from rooflens.trace.killers import recording


def _block(value) -> None:
    import jax

    if value is not None:
        jax.block_until_ready(value)
        return
    for a in jax.live_arrays():
        a.block_until_ready()


class Session:
    def __init__(self, logdir: str | Path | None = None, warmup: int = 1, steps: int | None = 5):
        self.logdir = Path(logdir) if logdir is not None else Path(tempfile.mkdtemp(prefix="rooflens-"))
        self.warmup, self.max_steps = warmup, steps
        self.count = 0  # steps seen
        self.traced = 0
        self.run_dir: Path | None = None
        self._tracing = False
        self._rec_ctx = None
        self._rec = None
        self._before: set[Path] = set()
        self._t0 = 0.0
        self._profile = None

    # -- the trace window ---------------------------------------------------------------------
    def _start(self) -> None:
        import jax

        self.logdir.mkdir(parents=True, exist_ok=True)
        wait_for_fresh_run_name(self.logdir)
        self._before = {p for p in (self.logdir / "plugins" / "profile").glob("*") if p.is_dir()}
        self._t0 = time.time()
        jax.profiler.start_trace(str(self.logdir))
        self._rec_ctx = recording()
        self._rec = self._rec_ctx.__enter__()
        self._tracing = True

    def _stop(self) -> None:
        import jax

        if not self._tracing:
            return
        self._tracing = False
        try:
            self._rec_ctx.__exit__(None, None, None)
        finally:
            jax.profiler.stop_trace()
        self.run_dir = _new_run_dir(self.logdir, self._before)
        devices = jax.devices()
        meta = {
            "captured_by": "rooflens.trace.Session", "when_unix_s": self._t0, "steps": self.traced,
            "warmup": self.warmup, "jax_version": jax.__version__, "backend": jax.default_backend(),
            "device_kind": devices[0].device_kind, "num_devices": len(devices), "in_window": self._rec.to_dict(),
        }
        (self.run_dir / "rooflens.json").write_text(json.dumps(meta, indent=2, default=str))

    def __enter__(self) -> Session:
        if self.warmup <= 0:
            self._start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop()  # on an exception too: what was captured is kept, the exception propagates

    # -- steps ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def step(self, block_on=None):
        """One step. Blocks at its end on ``block_on`` (or on every live array) while traced."""
        import jax

        if not self._tracing and self.count >= self.warmup and self.run_dir is None:
            self._start()
        if not self._tracing:
            self.count += 1
            yield
            _block(block_on)  # warm-up work must finish before the window opens
            return
        with jax.profiler.StepTraceAnnotation(STEP_NAME, step_num=self.traced):
            yield
            _block(block_on)
        self.count += 1
        self.traced += 1
        if self.max_steps is not None and self.traced >= self.max_steps:
            self._stop()

    def wrap(self, fn):
        """Decorator form: every call of ``fn`` is one step, blocked on its result."""
        import jax

        @functools.wraps(fn)
        def stepped(*args, **kwargs):
            if not self._tracing and self.count >= self.warmup and self.run_dir is None:
                self._start()
            if not self._tracing:
                self.count += 1
                return jax.block_until_ready(fn(*args, **kwargs))
            with jax.profiler.StepTraceAnnotation(STEP_NAME, step_num=self.traced):
                out = jax.block_until_ready(fn(*args, **kwargs))
            self.count += 1
            self.traced += 1
            if self.max_steps is not None and self.traced >= self.max_steps:
                self._stop()
            return out

        return stepped

    @property
    def profile(self):
        """The captured run, loaded (after the window closed)."""
        from rooflens.trace.profile import load

        if self._tracing:
            raise RooflensError("the trace window is still open; leave the `with` block (or run all its steps) first.")
        if self.run_dir is None:
            raise RooflensError(f"nothing was traced: the loop ran {self.count} step(s), not more than the "
                                f"{self.warmup} warm-up step(s).")
        if self._profile is None:
            self._profile = load(self.run_dir)
        return self._profile
