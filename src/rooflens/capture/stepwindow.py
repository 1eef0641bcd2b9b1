"""When ``rooflens run --steps A:B`` / ``--delay S --duration S`` traces: standard library only.

Loaded by path in the launched interpreter by :mod:`rooflens.capture.launch` (its ``_sibling``);
JAX is imported lazily, only once the script has imported it. Outside the window no tracer runs;
what the program pays there is one Python call per jitted call (measured in
``bench/capture_overhead.py``).

**steps**: the steps are the script's own ``jax.profiler.StepTraceAnnotation`` blocks when it has
any (the ``A``-th annotated step opens the window); otherwise the **step program** is decided from
what the script's own loop calls repeatedly: the first jitted function that the script's own code
calls ``A`` times from one line. A call counts when

* the jitted function is not one of JAX's own: not an eagerly applied primitive (JAX compiles
  each primitive applied outside ``jit`` as a tiny program ``jit_<primitive>``, marked
  ``_apply_primitive``; Flax's ``init`` dispatches dozens of them) and not a function whose code
  lives in jax, jaxlib or rooflens once its wrappers are peeled off (``shard_map``, ``vmap``,
  ``grad``, ``checkpoint``, ``functools.partial``, Flax NNX's and Equinox's jit wrappers all keep
  the user's function under ``__wrapped__``/``func``);
* it is a dispatch, not a call made while JAX traces another function (optax's jitted helpers
  called inside the train step's trace);
* its call site, the innermost stack frame of the script's own code (not jax, jaxlib, rooflens,
  the standard library or an installed package such as flax, optax, equinox or orbax, told apart
  by their real directories), exists: a call from a library's own thread has none.

Calls are counted per (function, call site), so the training loop's line is told apart from an
evaluation or a recompilation elsewhere. Each jitted function is wrapped by :class:`Counted` (a
call counter that forwards everything else), and ``StepTraceAnnotation``'s ``__enter__``/
``__exit__`` count annotated steps. The window opens before the ``A``-th counted call is
dispatched, once every device has finished what was dispatched before (so the trace holds no tail
of an earlier step), and closes when call ``B − 1`` has finished on every device.

**time**: a timer opens the window ``delay_s`` after the script's JAX backend came up, like
``nsys --delay/--duration``; ``duration_s`` later the window is due, and closes at the script's next
jitted call (on the thread that dispatches the work, which is the stream the wait for the devices
must be dispatched on), or by the timer itself when no call comes within ``max(1 s, duration_s)``.

Either way the names of the jitted functions called inside the window are kept, so the capture
saves the HLO and memory data of those programs only; :meth:`Window.step_program` says which
function was taken as the step and why (the manifest's ``step_program``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import threading
import time
import types
from collections.abc import Callable

if __package__:
    from rooflens.capture import common
else:  # loaded by path, after the launcher loaded common the same way (its ``_sibling``)
    common = sys.modules["_rooflens_common"]

ANNOTATION = "StepTraceAnnotation"
_UNWRAP_LIMIT = 32  # wrappers peeled off a jitted function, at most


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


def program_name(function: str) -> str:
    """The module name JAX gives the program of a jitted function (``step`` → ``jit_step``)."""
    return f"jit_{re.sub(r'[^0-9A-Za-z_]', '_', function)}"


# ---- whose function, whose call ------------------------------------------------------------------

#: directories of code that is the user's even where it is installed (``rooflens run -m pkg``)
USER_DIRS: list[str] = []


@functools.lru_cache(maxsize=4096)
def is_script_code(filename: str) -> bool:
    """Whether a frame's file is the script's own code: not jax, jaxlib, rooflens, the standard
    library or an installed package (by their real directories), or under :data:`USER_DIRS`."""
    if USER_DIRS and filename and not filename.startswith("<") and common.under(os.path.realpath(filename), USER_DIRS):
        return True
    return not common.is_library(filename, installed=True)


def call_site(frame) -> tuple[str, int, str] | None:
    """(file, line, function) of the innermost frame of the script's own code from ``frame`` out,
    or None (a call from a library's own thread)."""
    while frame is not None:
        code = frame.f_code
        if is_script_code(code.co_filename):
            return code.co_filename, frame.f_lineno, code.co_name
        frame = frame.f_back
    return None


def where(site: tuple[str, int, str] | None) -> str:
    return f"{site[0]}:{site[1]} ({site[2]})" if site else ""


def own_code_of(fun) -> str:
    """The file of the Python code a jitted function runs, its wrappers peeled off ("" if unknown)."""
    for _ in range(_UNWRAP_LIMIT):
        if isinstance(fun, functools.partial):
            fun = fun.func
        elif getattr(fun, "__wrapped__", None) is not None:
            fun = fun.__wrapped__
        else:
            break
    code = getattr(fun, "__code__", None)
    if code is None:  # a callable object: its class's __call__
        call = next((vars(k)["__call__"] for k in type(fun).__mro__ if "__call__" in vars(k)), None)
        code = getattr(call, "__code__", None)
    return code.co_filename if code is not None else ""


def kind_of(fun) -> str:
    """``"primitive"`` (JAX's eager dispatch of one primitive), ``"jax"`` (a function of JAX's own,
    or rooflens's) or ``"function"`` (the script's or a library's: a step program candidate)."""
    if getattr(fun, "_apply_primitive", False):
        return "primitive"
    filename = own_code_of(fun)
    core = common.core_library_dirs()
    if filename and not filename.startswith("<") and common.under(os.path.realpath(filename), core):
        return "jax"
    return "function"


# ---- waiting for the device ----------------------------------------------------------------------


def _block(value) -> None:
    """Wait until the device has finished ``value``."""
    import jax

    with contextlib.suppress(Exception):  # a donated or deleted output: the drain that follows waits for all
        jax.block_until_ready(value)


class Counted:
    """A jitted function with a call counter; attributes, ``.lower`` and method binding pass through."""

    def __init__(self, fn, window: Window, kind: str = "function") -> None:
        object.__setattr__(self, "__wrapped__", fn)
        object.__setattr__(self, "_window", window)
        object.__setattr__(self, "_primitive", kind == "primitive")
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
    """The window of one run. ``open_trace()`` / ``close_trace()`` start and stop the profiler;
    ``drain()`` waits until every device has finished what was dispatched (before a steps window opens)."""

    def __init__(self, spec: dict, open_trace: Callable[[], bool], close_trace: Callable[[], None],
                 drain: Callable[[], None] | None = None) -> None:
        self.spec = spec
        self.steps = tuple(spec["steps"]) if "steps" in spec else None
        self.open_trace, self.close_trace = open_trace, close_trace
        self.drain = drain or (lambda: None)
        self.watching = self.steps is not None  # counting calls (steps) or recording names (an open window)
        self.tracing = False
        self.closed = False
        self.counted = ""  # what the steps are: the step function's name, or "StepTraceAnnotation"
        self.annotated = 0  # StepTraceAnnotation blocks entered so far
        self.done = 0  # steps finished inside the window
        self.calls: dict[tuple[str, tuple[str, int]], int] = {}  # (function, call site) → dispatches counted
        self.sites: dict[tuple[str, int], tuple[str, int, str]] = {}  # call site → (file, line, function)
        self.most: tuple[tuple[str, tuple[str, int]] | None, int] = (None, 0)  # the most counted pair
        self.step_key: tuple[str, tuple[str, int]] | None = None  # the step program's (function, call site)
        self.eager: dict[str, int] = {}  # eager primitive dispatches before the window, by primitive
        self.unsited = 0  # dispatches before the window from no frame of the script's own (a library's thread)
        self.names: set[str] = set()
        self.made: set[str] = set()  # the names of the step program candidates the script made (its programs)
        self.lock = threading.RLock()
        self.timers: list[threading.Timer] = []
        self.clean: Callable[[], bool] = lambda: True  # JAX is not tracing (set by hook_pjit)
        self.armed_at = self.opened_at = self.closed_at = None  # time.monotonic() of each
        self.due = False  # a time window's duration is over: the next jitted call closes it
        self.ended = threading.Event()  # set once closed

    # ---- the jitted functions ----

    def call(self, fn: Counted, args, kwargs):
        if self.tracing and self.due:  # a time window past its end: closed on the dispatching thread
            self.close()
            return fn.__wrapped__(*args, **kwargs)
        if self.tracing:
            self.names.add(fn.__name__)
            key = self.step_key
            step = (key is not None and fn.__name__ == key[0] and not fn._primitive and self.clean()
                    and (call_site(sys._getframe(1)) or ("", 0))[:2] == key[1])
            out = fn.__wrapped__(*args, **kwargs)
            if step:
                self.done += 1
                if self.done >= self.steps[1] - self.steps[0]:
                    _block(out)
                    self.close()
            return out
        if self.steps is None or self.closed:
            return fn.__wrapped__(*args, **kwargs)
        if fn._primitive:
            self.eager[fn.__name__] = self.eager.get(fn.__name__, 0) + 1
            return fn.__wrapped__(*args, **kwargs)
        if self.annotated or not self.clean():  # annotated steps rule; a call inside a trace is no dispatch
            return fn.__wrapped__(*args, **kwargs)
        site = call_site(sys._getframe(1))
        if site is None:
            self.unsited += 1
            return fn.__wrapped__(*args, **kwargs)
        key = (fn.__name__, site[:2])
        self.sites.setdefault(site[:2], site)
        k = self.calls.get(key, 0)
        self.calls[key] = k + 1
        if k + 1 > self.most[1]:
            self.most = (key, k + 1)
        if k == self.steps[0]:
            self.step_key, self.counted = key, fn.__name__
            if self.open():
                return self.call(fn, args, kwargs)
        return fn.__wrapped__(*args, **kwargs)

    # ---- the script's own step annotations ----

    def enter_step(self) -> None:
        self.annotated += 1
        if self.steps is not None and not self.tracing and not self.closed and self.annotated - 1 == self.steps[0]:
            self.step_key, self.counted = None, ANNOTATION
            self.open()

    def exit_step(self) -> None:
        if self.tracing and self.counted == ANNOTATION:
            self.done += 1
            if self.done >= self.steps[1] - self.steps[0]:
                self.close()

    # ---- opening and closing ----

    def arm(self) -> None:
        """The script's backend is up: a time window starts its clock."""
        self.armed_at = time.monotonic()
        if self.steps is None:
            self._later(float(self.spec.get("delay_s") or 0.0), self._open_timed)

    def _later(self, seconds: float, what) -> None:
        t = threading.Timer(max(seconds, 0.0), what)
        t.daemon = True
        self.timers.append(t)
        t.start()

    def _open_timed(self) -> None:
        if self.open():
            self._later(float(self.spec["duration_s"]), self._due)

    def _due(self) -> None:
        """The time window's end: the script's next jitted call closes it; failing that, the timer."""
        self.due = True
        if not self.ended.wait(max(1.0, float(self.spec["duration_s"]))):
            self.close()

    def open(self) -> bool:
        with self.lock:
            if self.tracing or self.closed:
                return False
            if self.steps is not None:  # no tail of the steps before the window inside it
                self.drain()
            self.watching = True
            self.opened_at = time.monotonic()
            self.tracing = self.open_trace()
            if not self.tracing:
                self.closed, self.watching = True, False
            return self.tracing

    def close(self) -> None:
        """Stop the trace (once; from any thread, or at the script's end). ``close_trace`` waits for
        the devices to finish what was dispatched before it stops the profiler."""
        with self.lock:
            for t in self.timers:
                if t is not threading.current_thread():
                    t.cancel()
            if self.closed:
                return
            self.closed, self.watching = True, False
            self.closed_at = time.monotonic()
            was, self.tracing = self.tracing, False
        try:
            if was:
                self.close_trace()
        finally:
            self.ended.set()

    # ---- what it was ----

    def step_program(self) -> dict | None:
        """Which function was taken as the step and why (the manifest's ``step_program``); None
        before the window opened."""
        if not self.counted:
            return None
        a = self.steps[0]
        if self.counted == ANNOTATION:
            return {"chosen_by": ANNOTATION, "function": None, "program": None, "call_site": None,
                    "calls_before_window": a,
                    "reason": f"the script marks its steps with jax.profiler.StepTraceAnnotation: the window opened "
                              f"at annotated step {a}, and annotated steps take precedence over counting calls"}
        name, site = self.step_key
        file, line, func = self.sites.get(site, (site[0], site[1], "?"))
        short = f"{os.path.basename(file)}:{line} in {func}"
        passed = self.passed_over()
        reason = (f"{name} ({program_name(name)}), the first jitted function that the script's own code called {a} "
                  f"times from one line ({short})" if a else
                  f"{name} ({program_name(name)}), the first jitted function that the script's own code called "
                  f"(at {short}; with START 0 no call could be seen to repeat)")
        if passed:
            reason += f"; not counted: {passed}"
        return {"chosen_by": "call site", "function": name, "program": program_name(name),
                "call_site": where((file, line, func)), "calls_before_window": a, "reason": reason}

    def passed_over(self) -> str:
        """What was dispatched before the window and not counted, in a few words ("" when nothing)."""
        parts = []
        if self.eager:
            top = sorted(self.eager.items(), key=lambda kv: -kv[1])[:3]
            parts.append(f"{sum(self.eager.values())} eager primitive dispatches ("
                         + ", ".join(f"{program_name(n)} ×{c}" for n, c in top)
                         + (", …" if len(self.eager) > 3 else "") + ")")
        if self.unsited:
            parts.append(f"{self.unsited} calls from library threads")
        return " and ".join(parts)

    def describe(self) -> dict:
        """The manifest's ``window`` entry."""
        out = dict(self.spec)
        if self.steps is not None:
            out.update({"counted": self.counted, "traced_steps": self.done})
            if not self.counted:
                key, calls = self.most
                out["reached"] = self.annotated if self.annotated else calls
                out["most_called"] = ANNOTATION if self.annotated else key[0] if key else ""
                if key and not self.annotated:
                    out["most_called_from"] = where(self.sites.get(key[1]))
        else:
            out["opened_s"] = self._since_arm(self.opened_at)
            out["closed_s"] = self._since_arm(self.closed_at)
        out["programs"] = sorted(self.names)
        return out

    def _since_arm(self, t: float | None) -> float | None:
        return None if t is None or self.armed_at is None else round(t - self.armed_at, 3)

    def shortfall(self, ended_s: float | None = None) -> str:
        """One sentence when the run ended before the window did ("" when it was all traced).
        ``ended_s``: when the run ended, in seconds after JAX came up (for a time window)."""
        if self.steps is None:
            delay, duration = float(self.spec.get("delay_s") or 0.0), float(self.spec["duration_s"])
            if self.opened_at is None:
                ran = f"{ended_s:.3g} s" if ended_s is not None else "less than that"
                return (f"the run ended {ran} after JAX came up, before the window opened (--delay {delay:g} s, "
                        f"--duration {duration:g} s): no trace was taken; a --delay under {ran} would trace it")
            held = (self.closed_at or time.monotonic()) - self.opened_at
            if not self.due and held < duration * 0.95:
                return (f"the run ended {held:.3g} s into the window of {duration:g} s; "
                        "the trace holds that part")
            return ""
        a, b = self.steps
        if not self.counted:
            d = self.describe()
            what = (f"{d['reached']} annotated steps" if self.annotated else
                    f"{d['reached']} calls of {d['most_called']} from {d['most_called_from']}, the jitted function "
                    "its own code called most from one line" if d["reached"]
                    else "no call of a jitted function of its own")
            return f"the run ended after {what}, before step {a} of the window {a}:{b}: no trace was taken"
        if self.done < b - a:
            return f"the run ended after {self.done} of the window's {b - a} steps ({a}:{b}); the trace holds those"
        return ""


def hook_pjit(pjit, window: Window) -> None:
    """Every ``jax.jit`` made from now on whose code is not JAX's own is wrapped by :class:`Counted`
    (the step program's candidates, and JAX's eager primitives, counted apart); JAX's own jitted
    functions (``jnp``'s, made at import) are left alone."""
    original = pjit._cpp_pjit
    try:
        from jax._src import core

        window.clean = core.trace_state_clean
    except (ImportError, AttributeError):  # another jax: every call counts as a dispatch
        pass

    def _cpp_pjit(fun, *args, **kwargs):
        fn = original(fun, *args, **kwargs)
        kind = kind_of(fun)
        if kind == "jax":
            return fn
        if kind == "function":
            window.made.add(getattr(fn, "__name__", ""))
        return Counted(fn, window, kind)

    _cpp_pjit.__wrapped__ = original
    pjit._cpp_pjit = _cpp_pjit


def hook_step_annotation(profiler, window: Window) -> None:
    """Annotated steps are counted when made (``with StepTraceAnnotation(…)`` makes then enters one): the
    profiler's ``TraceMe`` records nothing when no trace is active as it is made, so the window must be
    open before step ``A``'s annotation is made for the trace to hold it."""
    cls = profiler.StepTraceAnnotation
    init, exit_ = cls.__init__, cls.__exit__

    def __init__(self, *args, **kwargs):
        window.enter_step()
        init(self, *args, **kwargs)

    def __exit__(self, *exc):
        out = exit_(self, *exc)
        window.exit_step()
        return out

    cls.__init__, cls.__exit__ = __init__, __exit__
