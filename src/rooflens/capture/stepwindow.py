"""When ``rooflens run --steps A:B`` / ``--delay S --duration S`` traces: standard library only.

Loaded by path in the launched interpreter by :mod:`rooflens.capture.launch` (its ``_sibling``);
JAX is imported lazily, only once the script has imported it. Outside the window no tracer runs;
what the program pays there is one Python call per jitted call (measured in
``bench/capture_overhead.py``):

* **steps**: the step program is the first jitted function called ``A`` times, or the steps
  are the script's own ``jax.profiler.StepTraceAnnotation`` blocks when it has any (then the
  ``A``-th annotated step opens the window). Each ``jax.jit`` made by the script is wrapped by
  :class:`Counted` (a call counter that forwards everything else), and ``StepTraceAnnotation``'s
  ``__enter__``/``__exit__`` count annotated steps. The window opens before the ``A``-th call is
  dispatched, once the device has finished the call before it (so the trace holds no tail of an
  earlier step), and closes when call ``B − 1`` has finished on the device.
* **time**: a timer opens the window ``delay_s`` after the script's JAX backend came up and
  closes it ``duration_s`` later, like ``nsys --delay/--duration``.

Either way the names of the jitted functions called inside the window are kept, so the capture
saves the HLO and memory data of those programs only.
"""

from __future__ import annotations

import os
import sys
import threading
import types
from collections.abc import Callable

if __package__:
    from rooflens.capture import common
else:  # loaded by path, after the launcher loaded common the same way (its ``_sibling``)
    common = sys.modules["_rooflens_common"]


def parse_steps(text: str) -> tuple[int, int]:
    """``"20:25"`` → (20, 25); raises ValueError with a sentence for anything else."""
    a, sep, b = text.partition(":")
    try:
        start, stop = int(a), int(b)
    except ValueError:
        raise ValueError(f"--steps takes START:STOP (two whole numbers, e.g. 100:105), not {text!r}.") from None
    if not sep or start < 0 or stop <= start:
        raise ValueError(f"--steps {text}: START must be at least 0 and STOP greater than START (e.g. 100:105).")
    return start, stop


def _block(value) -> None:
    """Wait until the device has finished ``value`` (anything else: every live array)."""
    import jax

    try:
        if value is not None:
            jax.block_until_ready(value)
            return
    except Exception:  # noqa: S110 (a donated or deleted output: wait for everything instead)
        pass
    for a in jax.live_arrays():
        try:
            a.block_until_ready()
        except Exception:  # noqa: S112 (deleted meanwhile)
            continue


class Counted:
    """A jitted function with a call counter; attributes, ``.lower`` and method binding pass through."""

    def __init__(self, fn, window: Window) -> None:
        object.__setattr__(self, "__wrapped__", fn)
        object.__setattr__(self, "_window", window)
        object.__setattr__(self, "calls", 0)
        for k in ("__name__", "__qualname__", "__doc__", "__module__"):
            try:
                object.__setattr__(self, k, getattr(fn, k))
            except AttributeError:
                continue

    def __call__(self, *args, **kwargs):
        w = self._window
        if not w.watching:  # before a time window, and after any window: one attribute test
            return self.__wrapped__(*args, **kwargs)
        return w.call(self, args, kwargs)

    def __getattr__(self, name):
        return getattr(self.__wrapped__, name)

    def __setattr__(self, name, value) -> None:
        setattr(self.__wrapped__, name, value)

    def __get__(self, obj, objtype=None):
        return self if obj is None else types.MethodType(self, obj)

    def __repr__(self) -> str:
        return repr(self.__wrapped__)


class Window:
    """The window of one run. ``open_trace()`` / ``close_trace()`` start and stop the profiler."""

    def __init__(self, spec: dict, open_trace: Callable[[], bool], close_trace: Callable[[], None]) -> None:
        self.spec = spec
        self.steps = tuple(spec["steps"]) if "steps" in spec else None
        self.open_trace, self.close_trace = open_trace, close_trace
        self.watching = self.steps is not None  # counting calls (steps) or recording names (an open window)
        self.tracing = False
        self.closed = False
        self.step_fn: Counted | None = None
        self.counted = ""  # what the steps are: a function's name, or "StepTraceAnnotation"
        self.annotated = 0  # StepTraceAnnotation blocks entered so far
        self.done = 0  # steps finished inside the window
        self.most = ("", 0)  # the most called jitted function and its calls (for "never reached")
        self.names: set[str] = set()
        self.made: set[str] = set()  # the names of the jitted functions the script made (its own programs)
        self.lock = threading.RLock()
        self.timers: list[threading.Timer] = []

    # ---- the jitted functions ----

    def call(self, fn: Counted, args, kwargs):
        if self.tracing:
            self.names.add(fn.__name__)
            out = fn.__wrapped__(*args, **kwargs)
            if fn is self.step_fn:
                self.done += 1
                if self.done >= self.steps[1] - self.steps[0]:
                    _block(out)
                    self.close()
            return out
        if self.steps is None or self.closed or self.annotated:
            return fn.__wrapped__(*args, **kwargs)
        k = fn.calls
        object.__setattr__(fn, "calls", k + 1)
        if k + 1 > self.most[1]:
            self.most = (fn.__name__, k + 1)
        if k == self.steps[0]:
            _block(getattr(fn, "_rooflens_prev", None) if "_rooflens_prev" in vars(fn) else None)
            vars(fn).pop("_rooflens_prev", None)
            self.step_fn, self.counted = fn, fn.__name__
            if self.open():
                return self.call(fn, args, kwargs)
        out = fn.__wrapped__(*args, **kwargs)
        if k == self.steps[0] - 1:
            vars(fn)["_rooflens_prev"] = out  # waited for before the window opens, then dropped
        return out

    # ---- the script's own step annotations ----

    def enter_step(self) -> None:
        self.annotated += 1
        if self.steps is not None and not self.tracing and not self.closed and self.annotated - 1 == self.steps[0]:
            _block(None)
            self.counted = "StepTraceAnnotation"
            self.open()

    def exit_step(self) -> None:
        if self.tracing and self.counted == "StepTraceAnnotation":
            self.done += 1
            if self.done >= self.steps[1] - self.steps[0]:
                _block(None)
                self.close()

    # ---- opening and closing ----

    def arm(self) -> None:
        """The script's backend is up: a time window starts its clock."""
        if self.steps is None:
            self._later(float(self.spec.get("delay_s") or 0.0), self._open_timed)

    def _later(self, seconds: float, what) -> None:
        t = threading.Timer(max(seconds, 0.0), what)
        t.daemon = True
        self.timers.append(t)
        t.start()

    def _open_timed(self) -> None:
        if self.open():
            self._later(float(self.spec["duration_s"]), self.close)

    def open(self) -> bool:
        with self.lock:
            if self.tracing or self.closed:
                return False
            self.watching = True
            self.tracing = self.open_trace()
            if not self.tracing:
                self.closed, self.watching = True, False
            return self.tracing

    def close(self) -> None:
        """Stop the trace (once; from any thread, or at the script's end)."""
        with self.lock:
            for t in self.timers:
                t.cancel()
            if self.closed:
                return
            self.closed, self.watching = True, False
            was, self.tracing = self.tracing, False
        if was:
            self.close_trace()

    def describe(self) -> dict:
        """The manifest's ``window`` entry."""
        out = dict(self.spec)
        if self.steps is not None:
            out.update({"counted": self.counted, "traced_steps": self.done})
            if not self.counted:
                name, calls = self.most
                out["reached"] = self.annotated if self.annotated else calls
                out["most_called"] = "StepTraceAnnotation" if self.annotated else name
        out["programs"] = sorted(self.names)
        return out

    def shortfall(self) -> str:
        """One sentence when the run ended before the window did ("" when it was all traced)."""
        if self.steps is None:
            return "" if self.closed or self.tracing else (
                f"the run ended before the window opened ({self.spec.get('delay_s')} s after JAX came up): "
                "no trace was taken")
        a, b = self.steps
        if not self.counted:
            d = self.describe()
            what = (f"{d['reached']} annotated steps" if self.annotated else
                    f"{d['reached']} calls of {d['most_called']}, its most called jitted function" if d["reached"]
                    else "no call of a jitted function")
            return f"the run ended after {what}, before step {a} of the window {a}:{b}: no trace was taken"
        if self.done < b - a:
            return f"the run ended after {self.done} of the window's {b - a} steps ({a}:{b}); the trace holds those"
        return ""


def made_by_user(frame) -> bool:
    """Whether the code that called into JAX at ``frame`` (walking out of jax's own frames) is the
    user's or a third-party package's, not JAX itself, the standard library or an import."""
    core = tuple(d + os.sep for d in common.core_library_dirs())
    while frame is not None:
        f = frame.f_code.co_filename
        if not os.path.realpath(f).startswith(core):
            return not common.is_library(f, installed=False)
        frame = frame.f_back
    return False


def hook_pjit(pjit, window: Window) -> None:
    """Every ``jax.jit`` the script (or a library it calls) makes from now on is wrapped by
    :class:`Counted`; JAX's own (``jnp`` functions, made at import) are left alone."""
    original = pjit._cpp_pjit

    def _cpp_pjit(*args, **kwargs):
        fn = original(*args, **kwargs)
        if not made_by_user(sys._getframe(1)):
            return fn
        window.made.add(getattr(fn, "__name__", ""))
        return Counted(fn, window)

    _cpp_pjit.__wrapped__ = original
    pjit._cpp_pjit = _cpp_pjit


def hook_step_annotation(profiler, window: Window) -> None:
    cls = profiler.StepTraceAnnotation
    enter, exit_ = cls.__enter__, cls.__exit__

    def __enter__(self):
        window.enter_step()
        return enter(self)

    def __exit__(self, *exc):
        out = exit_(self, *exc)
        window.exit_step()
        return out

    cls.__enter__, cls.__exit__ = __enter__, __exit__
