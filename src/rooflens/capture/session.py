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
training loops do) or hand it over, ``with session.step() as step: …; step.block(loss)``.
"""

from __future__ import annotations

import contextlib
import functools
import tempfile
from pathlib import Path

from rooflens.capture.capture import STEP_NAME, step_range
from rooflens.capture.window import TraceWindow
from rooflens.errors import RooflensError


class _Step:
    """The handle ``with session.step() as step`` gives: ``step.block(x)`` names what to wait for."""

    def __init__(self) -> None:
        self.values: list = []

    def block(self, value):
        self.values.append(value)
        return value

    def wait(self) -> None:
        import jax

        if self.values:
            jax.block_until_ready(self.values)
            return
        for a in jax.live_arrays():  # nothing named: wait for everything still alive
            a.block_until_ready()


class Session:
    def __init__(self, logdir: str | Path | None = None, warmup: int = 1, steps: int | range | None = 5):
        """``steps=range(100, 105)``: steps 100…104 traced, the 100 before them untraced (the warm-up)."""
        self.logdir = Path(logdir) if logdir is not None else Path(tempfile.mkdtemp(prefix="rooflens-"))
        self.first = 0  # the first traced step's number
        if isinstance(steps, range):
            warmup, numbers = step_range(steps, warmup)
            self.first, steps = numbers.start, len(numbers)
        self.warmup, self.max_steps = warmup, steps
        self.count = 0  # steps seen
        self.traced = 0
        self.run_dir: Path | None = None
        self._window: TraceWindow | None = None
        self._profile = None

    @property
    def _tracing(self) -> bool:
        return self._window is not None and self._window.is_open

    def _stop(self) -> None:
        if self._tracing:
            self.run_dir = self._window.close(steps=self.traced, warmup=self.warmup,
                                              window={"steps": [self.first, self.first + self.traced]})

    def __enter__(self) -> Session:
        if self.warmup <= 0:
            self._window = TraceWindow(self.logdir, "rooflens.trace.Session").open()
        return self

    def __exit__(self, *exc) -> None:
        self._stop()  # on an exception too: what was captured is kept, the exception propagates

    @contextlib.contextmanager
    def step(self, block_on=None):
        """One step of the loop; at its end, waits for ``block_on`` / ``step.block(x)`` (else every live array)."""
        import jax

        if self._window is None and self.count >= self.warmup:
            self._window = TraceWindow(self.logdir, "rooflens.trace.Session").open()
        handle = _Step()
        if block_on is not None:
            handle.block(block_on)
        if not self._tracing:  # warm-up, or after the window: run, and finish before the window opens
            self.count += 1
            yield handle
            handle.wait()
            return
        with jax.profiler.StepTraceAnnotation(STEP_NAME, step_num=self.first + self.traced):
            yield handle
            handle.wait()
        self.count += 1
        self.traced += 1
        if self.max_steps is not None and self.traced >= self.max_steps:
            self._stop()

    def wrap(self, fn):
        """Decorator form: every call of ``fn`` is one step, which waits for its result."""

        @functools.wraps(fn)
        def stepped(*args, **kwargs):
            with self.step() as step:
                return step.block(fn(*args, **kwargs))

        return stepped

    @property
    def profile(self):
        """The captured run, loaded (after the window closed)."""
        from rooflens.trace.loading import load

        if self._tracing:
            raise RooflensError("the trace window is still open; leave the `with` block (or run all its steps) first.")
        if self.run_dir is None:
            raise RooflensError(f"nothing was traced: the loop ran {self.count} step(s), not more than the "
                                f"{self.warmup} warm-up step(s).")
        if self._profile is None:
            self._profile = load(self.run_dir)
        return self._profile
