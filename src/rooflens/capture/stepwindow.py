"""When ``rooflens run --steps A:B`` / ``--delay S --duration S`` traces: standard library only.

Loaded by path in the launched interpreter by :mod:`rooflens.capture.launch` (its ``_sibling``);
JAX is imported lazily, only once the script has imported it. Outside the window no tracer runs;
what the program pays there is one Python call per jitted call (measured in
``bench/capture_overhead.py``).

**steps**: the steps are the script's own ``jax.profiler.StepTraceAnnotation`` blocks when it has
any (the ``A``-th annotated step opens the window); else the calls of the **step function**: the one
``--step-fn NAME`` names (its own name or its program's, ``jit_NAME``: each of its dispatches from the
script's code is a step), or else the one decided online from what is known when the window must
open. A call counts when

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

Calls are counted per (function, call site): a :class:`.stepfn.Candidate`, with its **loop depth**
(the loops of the script's own code around the call, over its whole stack, read from the source with
``ast``: :func:`.stepfn.loop_chain`) and its program's compiled **cost per call** (FLOPs and bytes from
XLA's ``cost_analysis()`` of the executable, taken in the launcher's compile hook while this function
is being dispatched: nothing compiles twice). Each time a candidate is dispatched with ``A`` calls or
more behind it, :func:`.stepfn.choose` picks among the candidates so far whose loops still run around
it (a loop that ended, a sampler's before training, no longer counts): the shallowest loop's (a candidate
with fewer than ``A`` calls is left out when one of the same or a shallower loop has reached ``A``:
an evaluation every N steps, a set-up call), there the most work per call; the window opens when the
pick is the one being dispatched. So Equinox's MNIST, whose evaluation calls ``loss`` 157 times per
pass from a loop inside the training loop, is windowed on ``make_step`` (one loop, more work), and a
script that samples 500 times before it trains is windowed on the sampler unless ``--step-fn``
names the train step (what is not compiled yet cannot be chosen). Dispatches inside and after the
window are still counted (by function) so that the manifest lists every candidate with its calls.

Each jitted function is wrapped by :class:`Counted` (a call counter that forwards everything else),
and ``StepTraceAnnotation``'s ``__enter__``/``__exit__`` count annotated steps. The window opens
before the step function's ``A``-th counted call is dispatched, once every device has finished what
was dispatched before (so the trace holds no tail of an earlier step), and closes when call ``B − 1``
has finished on every device. ``--step-fn`` without ``--steps`` traces the whole run and only counts
calls (:attr:`Window.whole`): the manifest then names the function for the report.

**time**: a timer opens the window ``delay_s`` after the script's JAX backend came up, like
``nsys --delay/--duration``; ``duration_s`` later the window is due, and closes at the script's next
jitted call (on the thread that dispatches the work, which is the stream the wait for the devices
must be dispatched on), or by the timer itself when no call comes within ``max(1 s, duration_s)``.

Either way the names of the jitted functions called inside the window are kept, so the capture
saves the HLO and memory data of those programs only; :meth:`Window.step_program` says which
function was taken as the step and why, with the other candidates (the manifest's ``step_program``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import types
from collections.abc import Callable

if __package__:
    from rooflens import units
    from rooflens.capture import common, stepfn
else:  # loaded by path, after the launcher loaded units, common and stepfn the same way (its ``_sibling``)
    units = sys.modules["_rooflens_units"]
    common = sys.modules["_rooflens_common"]
    stepfn = sys.modules["_rooflens_stepfn"]

ANNOTATION = "StepTraceAnnotation"


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


program_name = common.program_name  # jit_<name>, as JAX names a jitted function's program
Candidate, call_site, choose, where = stepfn.Candidate, stepfn.call_site, stepfn.choose, stepfn.where
names_function, loop_chain, kind_of = stepfn.names_function, stepfn.loop_chain, stepfn.kind_of
user_name = stepfn.user_name


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
        if not w.watching:  # outside a time window (a steps window counts on): one attribute test
            return self.__wrapped__(*args, **kwargs)
        if w.after:  # after a steps window (or the whole run with --step-fn): a function seen before is counted
            name = self.__name__
            n = w.known.get(name)
            if n is not None and not self._primitive and w.clean():
                w.known[name] = n + 1
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
        self.step_fn: str | None = spec.get("step_fn")  # --step-fn: the step function, named by the user
        self.open_trace, self.close_trace = open_trace, close_trace
        self.drain = drain or (lambda: None)
        self.whole = "steps" not in spec and "duration_s" not in spec  # the whole run traced: calls only counted
        self.watching = self.steps is not None or self.whole  # counting calls, or recording names (an open window)
        self.tracing = False
        self.closed = False
        self.counted = ""  # what the steps are: the step function's name, or "StepTraceAnnotation"
        self.annotated = 0  # StepTraceAnnotation blocks entered so far
        self.done = 0  # steps finished inside the window
        self.cands: dict[tuple[str, tuple[str, int]], Candidate] = {}  # (function, call site) → its candidate
        self.by_name: dict[str, int] = {}  # function → dispatches before the window from the script's code
        self.run_calls: dict[str, int] = {}  # function → its dispatches in the whole run (any line, any thread)
        self.known: dict[str, int] = {}  # after the window: the functions whose call site is known → their calls
        self.after = False  # after a steps window, or a whole run: Counted counts known functions itself
        if self.whole:
            self.known, self.after = self.run_calls, True
        self.late: dict[str, Candidate] = {}  # functions first called inside or after the window, at their first call
        self.step_key: tuple[str, tuple[str, int] | None] | None = None  # the step's (function, call site or None)
        self.taken: Candidate | None = None  # the step function's candidate (chosen, not named)
        self.costs: dict[int, tuple[float, float, str]] = {}  # id(Counted) → (FLOPs, bytes, module) of its program
        self.dispatch = threading.local()  # .fn: the Counted being dispatched on this thread (its compilation's)
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

    # ---- what each program costs ----

    def dispatching(self):
        """The jitted function this thread is dispatching before the window (its compilations are its
        programs), or None."""
        return getattr(self.dispatch, "fn", None)

    def compiled(self, fn, flops: float, nbytes: float, module: str) -> None:
        """``fn`` compiled a program of ``flops`` FLOPs and ``nbytes`` bytes per call (``cost_analysis``)."""
        self.costs[id(fn)] = (float(flops), float(nbytes), module)

    def cost_of(self, c: Candidate) -> tuple[float, float] | None:
        got = self.costs.get(id(c.fn))
        return got[:2] if got else None

    def _run(self, fn: Counted, args, kwargs):
        before = getattr(self.dispatch, "fn", None)
        self.dispatch.fn = fn
        try:
            return fn.__wrapped__(*args, **kwargs)
        finally:
            self.dispatch.fn = before

    # ---- the jitted functions ----

    def call(self, fn: Counted, args, kwargs):
        if self.tracing and self.due:  # a time window past its end: closed on the dispatching thread
            self.close()
            return fn.__wrapped__(*args, **kwargs)
        if self.tracing:
            self.names.add(fn.__name__)
            key = self.step_key
            clean = not fn._primitive and self.clean()
            if clean and self.steps is not None:
                self._tally(fn, sys._getframe(1))
            step = (key is not None and fn.__name__ == key[0] and clean
                    and (key[1] is None or (call_site(sys._getframe(1)) or ("", 0))[:2] == key[1]))
            out = self._run(fn, args, kwargs)
            if step:
                self.done += 1
                if self.done >= self.steps[1] - self.steps[0]:
                    _block(out)
                    self.close()
            return out
        if self.whole:  # the whole run: the step function named by --step-fn, among those counted
            if not fn._primitive and self.clean():
                self._tally(fn, sys._getframe(1))
            return self._run(fn, args, kwargs)
        if self.steps is None:
            return fn.__wrapped__(*args, **kwargs)
        if fn._primitive:
            if not self.closed:
                self.eager[fn.__name__] = self.eager.get(fn.__name__, 0) + 1
            return fn.__wrapped__(*args, **kwargs)
        if not self.clean():  # a call inside a trace is no dispatch
            return fn.__wrapped__(*args, **kwargs)
        if self.closed or (self.annotated and self.step_fn is None):  # after the window, or annotated steps rule
            self._tally(fn, sys._getframe(1))
            return self._run(fn, args, kwargs)
        frame = sys._getframe(1)
        site = call_site(frame)
        self.run_calls[fn.__name__] = self.run_calls.get(fn.__name__, 0) + 1  # (the window's own call: again there)
        if site is None:
            self.unsited += 1
            return self._run(fn, args, kwargs)
        name = fn.__name__
        key = (name, site[:2])
        c = self.cands.get(key)
        if c is None:
            c = self.cands[key] = Candidate(name, site, loop_chain(frame), fn, len(self.cands))
        k = c.calls
        c.calls += 1
        n = self.by_name.get(name, 0)
        self.by_name[name] = n + 1
        a = self.steps[0]
        if self.step_fn is not None:  # named: its calls from anywhere, the window at call START
            if n == a and names_function(self.step_fn, name):
                self.step_key, self.counted, self.taken = (name, None), name, c
                self._snapshot()
                if self.open():
                    self.run_calls[name] -= 1
                    return self.call(fn, args, kwargs)
        elif k >= a:  # a function the script's code has called START times: the window may open
            best = choose(list(self.cands.values()), a, self.cost_of, now=c)
            if best is c:
                self.step_key, self.counted, self.taken = key, name, c
                self._snapshot()
                if self.open():
                    self.run_calls[name] -= 1
                    return self.call(fn, args, kwargs)
        return self._run(fn, args, kwargs)

    def _tally(self, fn: Counted, frame) -> None:
        """One more dispatch of ``fn`` in the run (inside or after the window); a function not seen
        before the window gets its call site and loop depth at its first call (the report's candidates).
        After the window, :class:`Counted` counts a function already in ``known`` (= ``run_calls``) itself."""
        name = fn.__name__
        self.run_calls[name] = self.run_calls.get(name, 0) + 1
        if name not in self.by_name and name not in self.late:
            site = call_site(frame)
            if site is not None:
                self.late[name] = Candidate(name, site, loop_chain(frame), fn, len(self.cands) + len(self.late))

    def _snapshot(self) -> None:
        """Each candidate's calls when the step function was taken (the one being dispatched not yet counted)."""
        for c in self.cands.values():
            c.calls_at_choice = c.calls - (1 if c is self.taken else 0)
    # ---- the script's own step annotations ----

    def enter_step(self) -> None:
        self.annotated += 1
        if (self.steps is not None and self.step_fn is None and not self.tracing and not self.closed
                and self.annotated - 1 == self.steps[0]):  # (a function named by --step-fn rules instead)
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
            self.closed = True
            self.watching = self.steps is not None  # a steps window counts the calls after it (the candidates)
            if self.watching:
                self.known = self.run_calls
                self.after = True
            self.closed_at = time.monotonic()
            was, self.tracing = self.tracing, False
        try:
            if was:
                self.close_trace()
        finally:
            self.ended.set()

    # ---- what it was ----

    def step_program(self) -> dict | None:
        """Which function was taken as the step and why (the manifest's ``step_program``): its call
        site, loop depth, calls and compiled cost per call, the other candidates with theirs, and how
        to take another; None before the window opened."""
        if self.whole:
            return self._named_whole()
        if not self.counted:
            return None
        a = self.steps[0]
        if self.counted == ANNOTATION:
            return {"chosen_by": ANNOTATION, "function": None, "program": None, "call_site": None,
                    "calls_before_window": a,
                    "reason": f"the script marks its steps with jax.profiler.StepTraceAnnotation: the window opened "
                              f"at annotated step {a}, and annotated steps take precedence over counting calls"}
        c = self.taken
        name = c.function
        others = self.candidates(exclude=c)
        rest = "; ".join(self._says(o) for o in others[:5]) + ("; …" if len(others) > 5 else "")
        if self.step_fn is not None:
            reason = (f"{name} ({program_name(name)}), named by --step-fn {self.step_fn}: each of its dispatches from "
                      f"the script's own code is a step (the window opened at its call {a}, from {self._short(c)})")
        elif a:
            reason = (f"{name} ({program_name(name)}), called from {self._short(c)} inside {self._loops(c)}: of the "
                      f"jitted functions the script's own code had called when the window opened at its call {a}, "
                      f"the one of the shallowest loop with the most work per call ({self._cost(c)})")
        else:
            reason = (f"{name} ({program_name(name)}), the first jitted function that the script's own code called "
                      f"(at {self._short(c)}; with START 0 nothing else was known yet)")
        if rest:
            reason += f"; the other candidates: {rest}"
        outer = self.outer_of(c) if self.step_fn is None else None
        if outer is not None:
            o, per = outer
            reason += (f"; {name} ran {units.fmt_number(per)} times per call of {o.function}, which is called in a "
                       f"shallower loop ({self._loops(o)} against {self._loops(c)}): each step of this window is one "
                       f"of {name}'s calls, not one iteration of the outer loop (--step-fn {o.function} counts a "
                       "step per iteration)")
        passed = self.passed_over()
        if passed:
            reason += f"; not counted: {passed}"
        how = (f"rooflens run --steps {a}:{self.steps[1]} --step-fn NAME takes another (a function's or its "
               "program's name)")
        reason += f"; {how}"
        cost = self.cost_of(c)
        return {"chosen_by": "--step-fn" if self.step_fn is not None else "call site", "function": name,
                "program": program_name(name), "call_site": where(c.site), "calls_before_window": a,
                "reason": reason, "loop_depth": c.loops,
                "calls_in_run": self.run_calls.get(name, 0),
                "flops_per_call": cost[0] if cost else None, "bytes_per_call": cost[1] if cost else None,
                "candidates": [self._candidate(o) for o in others], "choose_another": how,
                "outer": None if outer is None else {"function": outer[0].function, "calls_per_call": outer[1]}}

    def outer_of(self, c: Candidate) -> tuple[Candidate, float] | None:
        """A function called in a shallower loop than ``c``, at most half as often in the run (the outer loop's
        step, ``c`` its inner loop's: gradient accumulation's micro-batches), with ``c``'s calls per call of it;
        the most called such one. None when there is none (or a loop depth is unknown)."""
        mine = self.run_calls.get(c.function, 0)
        found = [(o, mine / n) for o in self.candidates(exclude=c)
                 if c.loops is not None and o.loops is not None and 0 < o.loops < c.loops
                 and (n := self.run_calls.get(o.function, 0)) and mine >= 2 * n]
        return found[0] if found else None

    def _named_whole(self) -> dict | None:
        """A whole run's step function named by --step-fn (None when the script called none of that name)."""
        c = self._would_take()
        if c is None:
            return None
        name = c.function
        others = self.candidates(exclude=c)
        reason = (f"{name} ({program_name(name)}), named by --step-fn {self.step_fn}: called "
                  f"{self.run_calls.get(name, 0)} times in the run, first from {self._short(c)}")
        if others:
            reason += "; the other jitted functions: " + "; ".join(self._says(o) for o in others[:5]) + \
                ("; …" if len(others) > 5 else "")
        cost = self.cost_of(c)
        return {"chosen_by": "--step-fn", "function": name, "program": program_name(name), "call_site": where(c.site),
                "calls_before_window": None, "reason": reason, "loop_depth": c.loops,
                "calls_in_run": self.run_calls.get(name, 0),
                "flops_per_call": cost[0] if cost else None, "bytes_per_call": cost[1] if cost else None,
                "candidates": [self._candidate(o) for o in others]}

    def unknown_step_fn(self) -> str:
        """One sentence when --step-fn named no function the script called ("" otherwise)."""
        if self.step_fn is None or self._would_take() is not None:
            return ""
        seen = ", ".join(f"{n} ×{k}" for n, k in sorted(self.run_calls.items(), key=lambda kv: -kv[1])[:8])
        return (f"--step-fn {self.step_fn}: the script's own code called no jitted function of that name (or whose "
                "program has that name); " + (f"the jitted functions it called: {seen}" if seen else
                                              "it called no jitted function of its own"))

    def candidates(self, exclude: Candidate | None = None) -> list[Candidate]:
        """The script's (function, call site) pairs before the window and the functions first called
        after it opened, other than ``exclude``; most called in the run first."""
        every = [*self.cands.values(), *self.late.values()]
        return sorted((o for o in every if o is not exclude),
                      key=lambda o: (-self.run_calls.get(o.function, 0), -o.calls, o.seen))

    def _candidate(self, c: Candidate) -> dict:
        cost = self.cost_of(c)
        return {"function": c.function, "program": program_name(c.function), "call_site": where(c.site),
                "loop_depth": c.loops, "calls_before_window": c.calls, "calls_at_choice": c.calls_at_choice,
                "calls_in_run": self.run_calls.get(c.function, 0),
                "flops_per_call": cost[0] if cost else None, "bytes_per_call": cost[1] if cost else None}

    @staticmethod
    def _short(c: Candidate) -> str:
        return f"{os.path.basename(c.site[0])}:{c.site[1]} in {c.site[2]}"

    @staticmethod
    def _loops(c: Candidate) -> str:
        return "a loop (its source unread)" if c.loops is None else f"{c.loops} loop{'s' * (c.loops != 1)}"

    def _cost(self, c: Candidate) -> str:
        cost = self.cost_of(c)
        if not cost:
            return "cost unknown"
        return f"{units.fmt_si(cost[0], 'FLOP')} and {units.fmt_bytes(cost[1])} per call, compiled"

    def _says(self, c: Candidate) -> str:
        late = "" if c.calls else ", first called after the window opened"
        return (f"{c.function} ×{self.run_calls.get(c.function, 0)} in the run, from {self._short(c)} "
                f"({self._loops(c)}; {self._cost(c)}{late})")

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
                best = self._would_take()
                out["reached"] = self.annotated if self.annotated else best.calls if best else 0
                out["most_called"] = ANNOTATION if self.annotated else best.function if best else ""
                if best and not self.annotated:
                    out["most_called_from"] = where(best.site)
                out["functions_called"] = dict(sorted(self.by_name.items(), key=lambda kv: -kv[1]))
        else:
            out["opened_s"] = self._since_arm(self.opened_at)
            out["closed_s"] = self._since_arm(self.closed_at)
        out["programs"] = sorted(self.names)
        return out

    def _would_take(self) -> Candidate | None:
        """The step function the window was waiting for (the run ended first), or None."""
        if self.step_fn is not None:
            named = [c for c in [*self.cands.values(), *self.late.values()] if names_function(self.step_fn, c.function)]
            return max(named, key=lambda c: self.run_calls.get(c.function, 0)) if named else None
        return choose(list(self.cands.values()), self.steps[0], self.cost_of)

    def _since_arm(self, t: float | None) -> float | None:
        return None if t is None or self.armed_at is None else round(t - self.armed_at, 3)

    def shortfall(self, ended_s: float | None = None) -> str:
        """One sentence when the run ended before the window did ("" when it was all traced).
        ``ended_s``: when the run ended, in seconds after JAX came up (for a time window)."""
        if self.whole:
            return ""
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
            if self.annotated:
                return (f"the run ended after {self.annotated} annotated steps, before step {a} of the window {a}:{b}: "
                        "no trace was taken")
            seen = ", ".join(f"{n} ×{k}" for n, k in sorted(self.by_name.items(), key=lambda kv: -kv[1])[:8])
            seen = f"the jitted functions its own code called: {seen}" if seen else \
                "its own code called no jitted function"
            best = self._would_take()
            if self.step_fn is not None and best is None:
                return f"{self.unknown_step_fn()}: no trace was taken"
            if best is None:
                return (f"the run ended after no call of a jitted function of its own, before step {a} of the window "
                        f"{a}:{b}: no trace was taken")
            n = self.by_name.get(best.function, 0) if self.step_fn is not None else best.calls
            why = "named by --step-fn" if self.step_fn is not None else \
                "the step function it would take (the shallowest loop's, with the most work per call)"
            return (f"the run ended after {n} calls of {best.function} from {where(best.site)}, {why}, before step {a} "
                    f"of the window {a}:{b}: no trace was taken ({seen}; --step-fn NAME takes another)")
        if self.done < b - a:
            return f"the run ended after {self.done} of the window's {b - a} steps ({a}:{b}); the trace holds those"
        return ""


def hook_pjit(pjit, window: Window | None, made: set[str] | None = None) -> None:
    """Every ``jax.jit`` made from now on whose code is not JAX's own is wrapped by :class:`Counted`
    (the step program's candidates, and JAX's eager primitives, counted apart); JAX's own jitted
    functions (``jnp``'s, made at import) are left alone. Without a window nothing is wrapped: the
    names of the script's jitted functions are only added to ``made``."""
    original = pjit._cpp_pjit
    made = window.made if window is not None else made if made is not None else set()
    if window is not None:
        try:
            from jax._src import core

            window.clean = core.trace_state_clean
        except (ImportError, AttributeError):  # another jax: every call counts as a dispatch
            pass

    def _cpp_pjit(fun, *args, **kwargs):
        alias = user_name(fun)
        if alias:  # jax.pmap's own _fun: its program named after the user's function (jit_train_step, not jit__fun)
            _rename(fun, alias)
        fn = original(fun, *args, **kwargs)
        kind = kind_of(fun)
        if kind == "jax":
            return fn
        if kind == "function":
            made.add(getattr(fn, "__name__", ""))
        return Counted(fn, window, kind) if window is not None else fn

    _cpp_pjit.__wrapped__ = original
    pjit._cpp_pjit = _cpp_pjit


def _rename(fun, name: str) -> None:
    """Name a function of JAX's own that runs the user's ``name`` after it, before ``jax.jit`` reads its name: JAX
    names a jitted function's program and dispatch events after ``__name__``, so every ``jax.pmap`` (since jax 0.8 a
    jit of a shard_map of jax's ``_fun``) would otherwise be ``jit__fun``, one name for a train and an eval step.
    The function's behaviour is untouched (JAX's caches key on the function, not its name)."""
    for attr in ("__name__", "__qualname__"):
        try:
            setattr(fun, attr, name)
        except (AttributeError, TypeError):  # not a plain function: its name stays
            return


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
