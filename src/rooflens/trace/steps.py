"""The step model: what a step is, which program is the step's, and what holds for every step.

Everything a report says per step (MFU, idle, overheads, what a fix gives back) rests on the step, so the
step is measured, never guessed from the host's side alone:

* **A step is the device's work.** A step marker (``jax.profiler.StepTraceAnnotation``'s ``step_num``, a named
  step range) marks the *host*: in the usual loop, with no ``block_until_ready`` inside it, the annotation spans
  the dispatch (~20 µs) while the device runs the step's programs later, one or more steps behind. Step k is
  therefore the device executions of the programs *dispatched inside host step k* (jaxlib's ``PjitFunction(f)``
  events, matched first in, first out with the executions: :func:`dispatch_times`), and its time runs from its
  first execution's start on the device to the next step's first execution start (the last step: until its last
  execution and its marked span have both ended) — :func:`device_steps`. The figures are then the same whether
  or not the loop blocks per step. The host's spans stay the host's view (:attr:`StepSummary.host_mean_s`). A
  trace with markers but no dispatch events (TPU and GPU captures of other tools, Chrome exports) is grouped by
  time, as XProf does without ``group_id``: the step program's executions in order, one per marked step, when
  the marked spans do not hold the device's work (:func:`steps_by_time`); otherwise the markers already time
  the device.
* **Every program that ran counts.** Warm-up is a program's compilation and first execution, and only when the
  function runs again later (:func:`warmup_executions`): a program run once is analysed, not dropped. When one
  execution holds most of the device time (a whole training in one ``jit``, a kernel script), that execution is
  the unit (basis ``execution``): there are no steps to compare, and no step variance.
* **Steps of a function, not of a program.** A step function that recompiles (new shapes, weak types:
  ``jit_make_step(12)`` then ``jit_make_step(57)``) keeps its steps across its programs: programs are grouped by
  their base name (:func:`base_name`).
* **The step program** (:class:`StepChoice`) is the function the steps are of: ``--step-fn NAME`` where given,
  else the window's function (``rooflens run --steps``), else the one with the most device time among those
  dispatched inside marked steps, else the one with the most device time among those run more than once. The
  note, the Step line and the JSON name the same one, with the other candidates and their executions.

Invariants (:func:`check_steps`): steps are in time order, each ends no earlier than it starts, and no two
overlap. Pure functions of the event table and what the formats read: no files, no printing.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import numpy as np

from rooflens.errors import RooflensError
from rooflens.trace.dispatch import letters, unwrapped  # one rule for function ↔ program names
from rooflens.trace.events import EventTable, unique_rows
from rooflens.trace.groupby import grouped_order, median, unique_inverse, unique_values
from rooflens.trace.manifest import DRAIN_FUNCTION, RunManifest

_ID = re.compile(r"\(\d+\)$")

#: a step that holds this share of the device's busy time in one execution is the unit, not a step of a loop
UNIT_SHARE = 0.5
#: a function run more than once whose executions each take at least this share of the one big execution is a
#: loop of steps beside a set-up (Flax linen's init under nn.scan), not a helper of a whole training in one jit
UNIT_RIVAL = 0.01
#: marked spans holding less than this share of most of the step program's executions do not time the device
HOST_HOLDS = 0.5

#: what a step's time is measured from (StepSummary.basis)
BASES = {
    "dispatch": "each marked step is the device executions dispatched inside it (jaxlib's PjitFunction events "
                "matched with the executions), from its first execution's start to the next step's",
    "time": "the trace has step markers but no dispatch events: each marked step is one execution of the step "
            "program, in order (XProf's grouping by time), from its start to the next one's",
    "markers": "the step markers' own spans, which hold the device's work",
    "executions": "the steps are the executions of the step program (no step markers, or none that hold the steps), "
                  "each from its start to the next one's",
    "execution": "one execution holds most of the device time: it is the unit, reported per execution",
    "per execution": "no step markers: the step program is judged per execution of its own",
}


def base_name(program: str) -> str:
    """``jit_step(12)`` → ``jit_step``: the programs of one function share it."""
    return _ID.sub("", program)


@dataclass(frozen=True)
class StepChoice:
    """The step program: the function the steps are of, why it was taken, and the others that could have been."""

    function: str  # base name of the step function's programs (``jit_train_step``)
    program: str  # its program with the most device time (``jit_train_step(12)``)
    programs: tuple[str, ...]  # every program of the function in the trace
    reason: str  # why this one
    basis: str  # a key of BASES
    candidates: tuple[tuple[str, int], ...] = ()  # the other functions with their executions (per device)

    def note(self, steps: int) -> str:
        """One sentence: what the steps are, of which program, why, and how to choose another."""
        progs = f" ({', '.join(self.programs)})" if len(self.programs) > 1 else ""
        if self.basis == "execution":
            what = (f"the unit is the one execution of {self.program} ({self.reason}): it is reported per execution"
                    if self.program else "the unit is the whole capture (its kernels belong to no XLA program)")
        elif self.basis == "per execution":
            what = (f"there are none; the step program is {self.function}{progs} ({self.reason}), judged per "
                    "execution of its own")
        else:
            of = (f"the executions of {self.function}" if self.basis == "executions"
                  else f"of {self.function}")
            what = f"the {steps} step(s) are {of}{progs or f' ({self.program})'} ({self.reason}); {BASES[self.basis]}"
        others = ", ".join(f"{f} ({n} execution{'s' if n != 1 else ''})" for f, n in self.candidates[:5])
        more = f"; other candidates: {others}" if others else ""
        return f"steps: {what}{more}; --step-fn NAME chooses another step program"

    def to_dict(self) -> dict:
        return {"function": self.function, "program": self.program, "programs": list(self.programs),
                "reason": self.reason, "basis": self.basis,
                "candidates": [{"function": f, "executions": n} for f, n in self.candidates]}


@dataclass(frozen=True)
class StepSummary:
    """The steps' times (s) and what they are of: the step program (``program``) and their ``basis``."""

    count: int
    mean_s: float
    std_s: float
    min_s: float
    max_s: float
    times_s: tuple[float, ...]
    steps: tuple[int, ...]
    program: str = ""  # the step program (StepChoice.program), "" when unknown
    basis: str = ""  # StepChoice.basis
    host_mean_s: float | None = None  # the host's marked spans' mean: the host's view, not the step


def step_summary(steps: list[tuple[int, float, float]], choice: StepChoice | None = None,
                 host_steps: list[tuple[int, float, float]] | None = None) -> StepSummary | None:
    """The steps (number, start ns, end ns) summarised, with the step program and the host's marked spans."""
    if not steps:
        return None
    nums = [n for n, _, _ in steps]
    times = np.asarray([(e - s) * 1e-9 for _, s, e in steps])
    seen = set(nums)
    host = [(e - s) * 1e-9 for n, s, e in host_steps or [] if n in seen]
    return StepSummary(len(times), float(times.mean()), float(times.std()), float(times.min()), float(times.max()),
                       tuple(float(x) for x in times), tuple(nums), choice.program if choice else "",
                       choice.basis if choice else "", float(np.mean(host)) if host else None)


def check_steps(steps: list[tuple[int, float, float]]) -> None:
    """The steps' invariants: in time order, each no shorter than nothing, none overlapping the next."""
    for k, (n, s, e) in enumerate(steps):
        if not e >= s:
            raise AssertionError(f"step {n} ends ({e} ns) before it starts ({s} ns)")
        if k + 1 < len(steps) and steps[k + 1][1] < e:
            raise AssertionError(f"step {n} ({s}–{e} ns) overlaps step {steps[k + 1][0]} from {steps[k + 1][1]} ns")


# -- executions, by function --------------------------------------------------------------------------------------

def function_executions(keys: np.ndarray, start: np.ndarray, end: np.ndarray,
                        codes: list[int]) -> np.ndarray:
    """The executions of the programs ``codes`` (one function's) as rows of (start ns, end ns) by start: an
    execution on several devices is one, from its first device's start to its last device's end."""
    rows = []
    for c in codes:
        mine = keys[:, 2] == c
        if not mine.any():
            continue
        k = keys[mine, 3]
        s = np.full(int(k.max()) + 1, np.inf)
        e = np.full(int(k.max()) + 1, -np.inf)
        np.minimum.at(s, k, start[mine])
        np.maximum.at(e, k, end[mine])
        ok = np.isfinite(s)
        rows.append(np.stack([s[ok], e[ok]], axis=1))
    if not rows:
        return np.zeros((0, 2))
    out = np.concatenate(rows)
    return out[np.argsort(out[:, 0], kind="stable")]


def functions_of(programs: list[str], present: np.ndarray) -> dict[str, list[int]]:
    """Base name → the codes of its programs among ``present`` (program codes with events)."""
    out: dict[str, list[int]] = {}
    for c in sorted(set(present.tolist())):
        if programs[c]:
            out.setdefault(base_name(programs[c]), []).append(c)
    return out


def warmup_executions(t: EventTable, exec_idx: np.ndarray) -> np.ndarray:
    """For every event, whether it is warm-up: its program's first execution, when its function runs again
    later on its host (another execution of the program, or a later program of the same function). A program
    run once whose function never runs again (a whole training in one ``jit``, a kernel run once) is not
    warm-up. Judged host by host: a pod's hosts start their steps at different times."""
    out = np.zeros(len(t), bool)
    if not len(t):
        return out
    by_fn: dict[str, list[int]] = {}
    for c, p in enumerate(t.programs):
        by_fn.setdefault(base_name(p), []).append(c)
    n_prog = len(t.programs)
    for h in unique_values(t.host).tolist():
        mine = t.host == h
        prog, start = t.program[mine], t.start_ns[mine]
        runs = np.zeros(n_prog, np.int64)
        np.maximum.at(runs, prog, exec_idx[mine].astype(np.int64) + 1)
        first_start = np.full(n_prog, np.inf)
        last_start = np.full(n_prog, -np.inf)
        np.minimum.at(first_start, prog, start)
        np.maximum.at(last_start, prog, start)
        again = runs > 1
        for codes in by_fn.values():
            for c in codes:
                if not again[c] and np.isfinite(first_start[c]):
                    again[c] = any(first_start[o] > last_start[c] for o in codes if o != c)
        out[mine] = (exec_idx[mine] == 0) & again[prog]
    return out


# -- the step program ---------------------------------------------------------------------------------------------

def match_step_fn(name: str, functions: list[str]) -> str:
    """The function (base name) that ``--step-fn NAME`` names: a program's full name, its base name, or the
    Python function's name (``train_step`` → ``jit_train_step``). Raises one sentence listing the candidates."""
    for f in functions:
        if name == f or base_name(name) == f:
            return f
    hits = [f for f in functions if letters(f) == letters(name)] if letters(name) else []
    if len(hits) == 1:
        return hits[0]
    listed = ", ".join(functions[:12]) + (f" and {len(functions) - 12} more" if len(functions) > 12 else "")
    why = "names several programs" if hits else "names no program of this trace"
    raise RooflensError(f"--step-fn {name} {why}; the candidates are: {listed or 'none'}.")


def choose(t: EventTable, keys: np.ndarray, start: np.ndarray, end: np.ndarray, step_fn: str | None,
           preferred: dict[str, float] | None = None, window_fn: str | None = None,
           multi_op_only: bool = True) -> tuple[str, str] | None:
    """The step function (base name) and why: ``step_fn`` where given, else the window's (``window_fn``), else
    the one with the most device time among those ``preferred`` (dispatched in marked steps: how many), else the
    one with the most device time among those run more than once (with more than one op: an eager op is no step
    function)."""
    present = unique_values(keys[:, 2]) if len(keys) else np.zeros(0, np.int64)
    fns = functions_of(t.programs, present)
    if not fns:
        return None
    busy = function_busy_ns(t)
    order = sorted(fns, key=lambda f: -busy.get(f, 0.0))
    if step_fn:
        return match_step_fn(step_fn, order), f"chosen by --step-fn {step_fn}"
    if window_fn:
        hit = [f for f in order if letters(f) == letters(window_fn) or f == base_name(window_fn)]
        if hit:
            return hit[0], f"the function the run's window was opened on ({window_fn})"
    if preferred:
        # the loop's own function: dispatched in at least half as many marked steps as the most dispatched one (an
        # evaluation first run in one step of a window is not, however heavy its run), and of those the most device
        # time
        top = max(preferred.values())
        often = [f for f in preferred if preferred[f] >= top / 2]
        best = max(often, key=lambda f: (busy.get(f, 0.0), preferred[f]))
        return best, f"dispatched in {preferred[best]:g} of the marked steps, the most device time of those there"
    runs = {f: len(function_executions(keys, start, end, fns[f])) for f in fns}
    ops = ops_per_function(t)
    ops = {f: ops.get(f, 0) for f in fns}
    again = [f for f in order if runs[f] > 1 and (not multi_op_only or ops[f] > 1)]
    if again:
        return again[0], "the function with the most device time among those run more than once"
    if any(runs[f] > 1 for f in fns):
        return None  # only eager ops ran again (one op each): no step function
    once = [f for f in order if ops[f] > 1] or order  # every function ran once (kernels run once): the heaviest
    return once[0], "no function ran more than once: the one with the most device time, judged per execution"


def codes_of(programs: list[str], function: str) -> list[int]:
    """The codes of a function's programs (its base name's: every compilation of it)."""
    return [c for c, p in enumerate(programs) if p and base_name(p) == function]


def ops_per_function(t: EventTable) -> dict[str, int]:
    """Each function's (base name's) distinct ops, over its programs: one table pass."""
    if not len(t):
        return {}
    fns = sorted({base_name(p) for p in t.programs})
    place = {f: k for k, f in enumerate(fns)}
    fn_of = np.asarray([place[base_name(p)] for p in t.programs], np.int64)
    pairs = unique_rows(fn_of[t.program], t.name)[0]
    counts = np.bincount(pairs[:, 0], minlength=len(fns))
    return {f: int(counts[k]) for k, f in enumerate(fns) if f}


def function_busy_ns(t: EventTable) -> dict[str, float]:
    """Each function's (base name's) summed op time (ns), every device."""
    busy = t.program_busy_ns
    out: dict[str, float] = {}
    for c, p in enumerate(t.programs):
        if busy[c] > 0 and p:
            out[base_name(p)] = out.get(base_name(p), 0.0) + float(busy[c])
    return out


def candidates_of(t: EventTable, keys: np.ndarray, start: np.ndarray, end: np.ndarray, taken: str
                  ) -> tuple[tuple[str, int], ...]:
    """The functions not taken, with their executions (one per run on every device), most device time first."""
    present = unique_values(keys[:, 2]) if len(keys) else np.zeros(0, np.int64)
    fns = functions_of(t.programs, present)
    busy = function_busy_ns(t)
    return tuple((f, len(function_executions(keys, start, end, fns[f])))
                 for f in sorted(fns, key=lambda f: -busy.get(f, 0.0)) if f != taken)


def make_choice(t: EventTable, spans: tuple[np.ndarray, ...], function: str, reason: str, basis: str
                ) -> StepChoice:
    keys, _, start, end, _ = spans
    codes = codes_of(t.programs, function)
    busy = t.program_busy_ns
    codes = [c for c in codes if busy[c] > 0] or codes
    main = max(codes, key=lambda c: busy[c]) if codes else -1
    return StepChoice(function, t.programs[main] if codes else function,
                      tuple(t.programs[c] for c in codes), reason, basis,
                      candidates_of(t, keys, start, end, function))


# -- steps without markers ----------------------------------------------------------------------------------------

def unit_execution(t: EventTable, spans: tuple[np.ndarray, ...], dispatches_of: dict | None = None
                   ) -> tuple[str, tuple[float, float], float] | None:
    """The one execution that holds most (UNIT_SHARE) of the device time, when there is one and no function run
    more than once takes UNIT_RIVAL of it per execution: (its function, its (start, end) ns, its share of the op
    time). A training in one ``jit`` called once, a kernel script."""
    keys, _, start, end, _ = spans
    if not len(keys) or not len(t):
        return None
    total = float(t.dur_ns.sum())
    from rooflens.trace.warmup import execution_index

    idx = execution_index(t)
    rows, inv = unique_rows(t.program, idx)
    per = np.bincount(inv, weights=t.dur_ns, minlength=len(rows))
    k = int(np.argmax(per))
    if total <= 0 or per[k] < UNIT_SHARE * total:
        return None
    code, ex = int(rows[k, 0]), int(rows[k, 1])
    mine = (keys[:, 2] == code) & (keys[:, 3] == ex)
    fn, span = base_name(t.programs[code]), (float(start[mine].min()), float(end[mine].max()))
    if dispatched(t, dispatches_of or {}).get(fn, 0) > 1:
        return None  # the host called it several times: executions the trace could not tell apart, not one
    present = unique_values(keys[:, 2])
    ops = ops_per_function(t)
    for other, codes in functions_of(t.programs, present).items():  # a loop of real steps beside it wins
        if other == fn or ops.get(other, 0) < 2:
            continue
        ex_other = function_executions(keys, start, end, codes)
        if len(ex_other) > 1 and median(ex_other[:, 1] - ex_other[:, 0]) >= UNIT_RIVAL * (span[1] - span[0]):
            return None
    return fn, span, float(per[k] / total)


def dispatched(t: EventTable, dispatches_of: dict[str, dict[str, np.ndarray]]) -> dict[str, int]:
    """Per function (base name): the host's dispatches of it (its most on any one host)."""
    from rooflens.trace.dispatch import program_of

    out: dict[str, int] = {}
    for dispatches in dispatches_of.values():
        for fn, starts in dispatches.items():
            for f in {base_name(t.programs[c]) for c in program_of(fn, t.programs)}:
                out[f] = max(out.get(f, 0), len(starts))
    return out


def unit_reason(share: float) -> str:
    return f"one execution holds {share:.0%} of the device's op time"


def inferred_steps(t: EventTable, spans: tuple[np.ndarray, ...], function: str,
                   barriers_ns: np.ndarray | None = None) -> tuple[list[tuple[int, float, float]], int]:
    """The step function's executions as steps (numbered from 0), each from its start to the next one's (the
    last: to its end), across all its programs; executions the trace's end cut short are left out and counted.
    ``barriers_ns``: starts of warm-up (a compilation, a first run) left out of the steady state: a step whose
    gap to the next holds one ends there, at the earliest after its own execution (the host compiling the next
    program is warm-up, not the step's)."""
    keys, _, start, end, cut = spans
    codes = codes_of(t.programs, function)
    whole = function_executions(keys[~cut], start[~cut], end[~cut], codes)
    n_cut = len(function_executions(keys[cut], start[cut], end[cut], codes)) if cut.any() else 0
    bars = np.sort(np.asarray(barriers_ns if barriers_ns is not None else [], float))
    steps = []
    for i, (s, e) in enumerate(whole.tolist()):
        nxt = float(whole[i + 1, 0]) if i + 1 < len(whole) else max(e, s)
        k = np.searchsorted(bars, e, side="left")
        if k < len(bars) and bars[k] < nxt:
            nxt = max(float(bars[k]), e)
        steps.append((i, float(s), float(max(nxt, s))))
    return steps, n_cut


# -- steps with markers -------------------------------------------------------------------------------------------

def dispatch_times(t: EventTable, spans: tuple[np.ndarray, ...], host: int, dispatches: dict[str, np.ndarray]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """For the executions (rows of ``spans``) of host code ``host``: which were matched with a dispatch, and that
    dispatch's time (ns; nan where none). A function's dispatches and its programs' executions on each device are
    matched first in, first out, from its first dispatch in the trace (executions before it were dispatched
    before the trace began; so were the first ones after it when more ran than were dispatched: a window opened
    while the device still ran work queued before it)."""
    from rooflens.trace.dispatch import program_of

    keys, _, start, _, _ = spans
    at = np.full(len(keys), np.nan)
    for fn, starts in dispatches.items():
        if fn == DRAIN_FUNCTION or not len(starts):
            continue
        codes = program_of(fn, t.programs)
        if not codes:
            continue
        starts = np.sort(np.asarray(starts, float))
        mine = (keys[:, 0] == host) & np.isin(keys[:, 2], codes) & (start >= starts[0])
        for d in unique_values(keys[mine, 1]).tolist():
            rows = np.flatnonzero(mine & (keys[:, 1] == d))
            rows = rows[np.argsort(start[rows], kind="stable")]
            if len(rows) > len(starts):  # more ran than the trace saw dispatched: the first were queued before it
                rows = rows[len(rows) - len(starts):]
            n = min(len(rows), len(starts))
            at[rows[:n]] = starts[:n]
    return ~np.isnan(at), at


def device_steps(t: EventTable, spans: tuple[np.ndarray, ...], host: int, marked: list[tuple[int, float, float]],
                 dispatches: dict[str, np.ndarray]) -> list[tuple[int, float, float, frozenset, float]]:
    """One host's marked steps (number, start ns, end ns) as the device's work: step k is the executions
    dispatched inside marked step k, as rows of (number, its first execution's start, its last execution's end,
    the functions (base names) it ran, the marked step's own end), in time order; :func:`tiled` makes them steps.
    Empty when no dispatch falls inside a marked step with an execution (then the caller falls back)."""
    keys, _, start, end, _ = spans
    matched, at = dispatch_times(t, spans, host, dispatches)
    if not matched.any() or not marked:
        return []
    marked = sorted(marked, key=lambda s: s[1])
    m_start = np.asarray([s for _, s, _ in marked])
    m_end = np.asarray([e for _, _, e in marked])
    rows = np.flatnonzero(matched)
    k = np.searchsorted(m_start, at[rows], side="right") - 1
    inside = (k >= 0) & (at[rows] <= m_end[np.clip(k, 0, None)])
    rows, k = rows[inside], k[inside]
    if not len(rows):
        return []
    first = np.full(len(marked), np.inf)
    last = np.full(len(marked), -np.inf)
    np.minimum.at(first, k, start[rows])
    np.maximum.at(last, k, end[rows])
    fns: dict[int, set] = {}
    for kk, program in unique_rows(k, keys[rows, 2])[0].tolist():  # each (step, program) once
        fns.setdefault(kk, set()).add(base_name(t.programs[program]))
    ran = np.flatnonzero(np.isfinite(first))
    ran = ran[np.argsort(first[ran], kind="stable")]
    return [(int(marked[i][0]), float(first[i]), float(last[i]), frozenset(fns[i]), float(m_end[i]))
            for i in ran.tolist()]


def tiled(rows: list[tuple[int, float, float, frozenset, float]], function: str | None = None
          ) -> list[tuple[int, float, float]]:
    """Device steps (:func:`device_steps`' rows) as steps: each from its first execution's start to the next
    step's. The last, with no next one, ends when both its executions and the host's marked step have: the
    host's work inside it (a loop that waits, or works, after dispatching) holds it up as it holds up every other
    step, whose next one cannot start sooner. ``function``: only the steps that ran it (a marked step whose step
    function never ran inside the trace, only a small op dispatched beside it, is no step)."""
    rows = [r for r in rows if function is None or function in r[3]]
    out = []
    for j, (n, s, e, _, held) in enumerate(rows):
        end = rows[j + 1][1] if j + 1 < len(rows) else max(e, held)
        out.append((n, s, max(end, s)))
    return out


def steps_by_time(t: EventTable, spans: tuple[np.ndarray, ...], host: int, marked: list[tuple[int, float, float]],
                  function: str) -> list[tuple[int, float, float]] | None:
    """A host's marked steps as the device's work when the trace has no dispatch events: the step function's
    executions from the first marked step's start, one per marked step in order (XProf's grouping by time), when
    the marked spans hold under HOST_HOLDS of most of those executions (otherwise None: the markers already time
    the device)."""
    keys, _, start, end, cut = spans
    if not marked:
        return None
    marked = sorted(marked, key=lambda s: s[1])
    codes = codes_of(t.programs, function)
    mine = (keys[:, 0] == host) & ~cut
    ex = function_executions(keys[mine], start[mine], end[mine], codes)
    ex = ex[ex[:, 0] >= marked[0][1]]
    if not len(ex):
        return None
    from rooflens.trace.warmup import covered_below, merge_intervals

    m = merge_intervals(np.asarray([[s, e] for _, s, e in marked], float))
    held = (covered_below(ex[:, 1], m) - covered_below(ex[:, 0], m)) / np.maximum(ex[:, 1] - ex[:, 0], 1e-9)
    if median(held) >= HOST_HOLDS:  # most executions lie inside the marks (by count: a slow first run is one)
        return None
    n = min(len(ex), len(marked))
    steps = []
    for i in range(n):
        e = float(ex[i + 1, 0]) if i + 1 < n else float(ex[i, 1])
        steps.append((int(marked[i][0]), float(ex[i, 0]), max(e, float(ex[i, 0]))))
    return steps


# -- the steps of a profile ---------------------------------------------------------------------------------------

def infer_steps(t: EventTable, step_fn: str | None = None, window_fn: str | None = None,
                barriers_ns=None, dispatches_of: dict | None = None
                ) -> tuple[list[tuple[int, float, float]], object, int]:
    """Steps where the trace has no markers (:mod:`rooflens.trace.steps`): (steps, the StepChoice, executions the
    trace's end cut short). One execution holding most of the device time is the unit (one step, basis
    ``execution``); else the step function's executions, across its programs, are the steps; a function that
    ran once (no function ran more than once) is judged per execution, with no steps. ``barriers_ns``: where
    left-out warm-up begins (:func:`rooflens.trace.steps.inferred_steps`), or a function of the step function
    giving them (its own compilations and first runs)."""
    from rooflens.trace.warmup import execution_spans

    if not len(t):
        return [], None, 0
    spans = execution_spans(t)
    keys, _, start, end, _ = spans
    unit = None if step_fn or window_fn else unit_execution(t, spans, dispatches_of)
    if unit is not None:
        fn, (s, e), share = unit
        return [(0, s, e)], make_choice(t, spans, fn, unit_reason(share), "execution"), 0
    picked = choose(t, keys, start, end, step_fn, window_fn=window_fn)
    if picked is None:
        return [], None, 0
    steps, cut = inferred_steps(t, spans, picked[0], barriers_ns(picked[0]) if callable(barriers_ns) else barriers_ns)
    if len(steps) == 1 and not cut:
        return [], make_choice(t, spans, picked[0], picked[1], "per execution"), 0
    return steps, make_choice(t, spans, picked[0], picked[1], "executions"), cut


def with_choice_note(notes: list[str], choice: StepChoice, steps: int) -> list[str]:
    """The notes with the step choice's sentence, which says what the steps are: a reader's own sentence on its
    steps (a Nsight export's "the executions of X, the main program") and an earlier choice's give way to it."""
    said = [n for n in notes if "no step annotations" not in n and not n.startswith("steps: ")]
    return [*said, choice.note(steps)]


def cut_note(program: str) -> str:
    return (f"the last execution of {program} was cut short by the trace's end (its first ops ran inside the "
            "trace, the rest never did): it is not a step")


def window_fn(manifest: RunManifest) -> str | None:
    """The function (or program) the run's window was opened on, as the run recorded it; None for none."""
    taken = manifest.step_program
    return (taken.program or taken.function) if taken is not None else None


def named(profile, step_fn: str | None = None):
    """A profile whose warm-up is not judged (a trace of your own, ``rl.capture``) with its step program named:
    the marked steps' (already chosen), else the one execution holding most of the device time (the unit), else
    the function with the most device time among those run more than once, judged per execution."""
    from rooflens.trace.warmup import execution_spans

    t = profile.table
    choice = profile.step_choice
    notes = list(profile.notes)
    if choice is None and len(t):
        spans = execution_spans(t)
        keys, _, start, end, _ = spans
        unit = None if step_fn else unit_execution(t, spans, profile.dispatches_of)
        picked = ((unit[0], unit_reason(unit[2])) if unit is not None else
                  choose(t, keys, start, end, step_fn, window_fn=window_fn(profile.manifest),
                           multi_op_only=False))
        if picked is not None:
            runs = len(function_executions(keys, start, end, [c for c, p in enumerate(t.programs)
                                                                   if p and base_name(p) == picked[0]]))
            basis = "markers" if profile.steps else "execution" if unit is not None or runs == 1 else "per execution"
            choice = make_choice(t, spans, picked[0], picked[1], basis)
    if choice is None:
        return profile
    return dataclasses.replace(profile, notes=with_choice_note(notes, choice, len(profile.steps)), step_choice=choice)


def judge_window(profile, step_fn: str | None = None, markers_cut: bool = False):
    """A window of a run (``rooflens run --steps/--delay``, ``rooflens capture``): no warm-up inside,
    and, without step annotations, the steps are the step function's executions in the window.

    A window of steps holds exactly those executions (numbered from the window's first step); a
    window of time cuts the executions at its two edges, so the first and the last are left out.
    ``markers_cut``: the script annotates its steps, but the window was opened on the calls of the function
    --step-fn named, which cut the annotations at its edges: they are not the steps."""
    from rooflens.trace.formats.raw import assign_steps

    window = profile.metadata["window"]
    steps, choice, cut = infer_steps(profile.table, step_fn, window_fn(profile.manifest),
                                     dispatches_of=profile.dispatches_of)
    if not steps or choice is None:
        return named(profile, step_fn)
    main = choice.program
    first = 0
    if "steps" in window:
        first = int(window["steps"][0])
    elif len(steps) >= 4:
        steps = steps[1:-1]
    steps = [(first + k, s, e) for k, (_, s, e) in enumerate(steps)]
    steps, compiling = without_compilations(profile, steps, choice.function)
    assign_steps(profile.table, steps)
    notes = [n for n in profile.notes if "no step annotations" not in n]
    edges = "" if "steps" in window or len(steps) < 2 else ", the executions cut by the window's edges left out"
    notes.append(f"the window was opened on the calls of {choice.function} (--step-fn): the {len(steps)} steps are "
                 "its executions in it, not the script's step annotations, which the window's edges cut" if markers_cut
                 else f"no step annotations: the {len(steps)} steps are the executions of {choice.function} in the "
                 f"window{edges}")
    if cut:
        notes.append(cut_note(main))
    taken = profile.manifest.step_program  # rooflens run --steps: which function opened the window, and why
    if taken is not None and taken.reason:
        notes.append(f"the window's step program: {taken.reason}")
    notes = with_choice_note(notes, choice, len(steps)) + ([compiling] if compiling else [])
    return dataclasses.replace(profile, steps=steps, notes=notes, step_choice=choice)


#: a step whose device idles, while another function compiles, for at least this share of the step's span holds that
#: compilation (its tracing, started while the device had not begun the step already dispatched, idled step 3 of a
#: loaded machine's window for 3.7 of its 4.6 ms)
COMPILE_IDLE_SHARE = 0.25


def without_compilations(profile, steps: list, function: str) -> tuple[list, str]:
    """A window's steps less those that hold the host's compilation of another function (an evaluation first
    called inside the window: its compilation and first run are warm-up, as a whole run's are), and what was left
    out in a few words ("" when nothing; every step left in when all would go).

    A step holds a compilation when the compilation ends in it (the device waits there for the program), or when
    the device idles inside the step while the host compiles for :data:`COMPILE_IDLE_SHARE` of its span or more
    (the host compiled where it would have dispatched, or the device had not begun the step queued before). A
    compilation the device runs through (the host compiles the next program while the device runs a long step) is
    not held by that step."""
    from rooflens.trace.warmup import compilations_unix_s, covered_below, held_by, merge_intervals, table_offset_ns

    want = letters(function)
    offset_ns = table_offset_ns(profile.table, profile.manifest)
    # not the capture's own barrier, compiled as the window closes while the device still runs the steps queued
    # (on a GPU its compilation ended inside the last two of six steps, and took them out)
    own = {want, letters(DRAIN_FUNCTION)}
    spans = [(a * 1e9 + offset_ns, b * 1e9 + offset_ns, name) for a, b, name in
             compilations_unix_s(profile.manifest) if name and letters(name) not in own]
    # one name per function (its compilations are recorded as f, jit(f), jit_f)
    step_start = np.asarray([s for _, s, _ in steps], float)
    step_end = np.asarray([e for _, _, e in steps], float)
    by_step: list[dict[str, str]] = [{} for _ in steps]
    if spans and len(steps):
        order = np.argsort(step_start, kind="stable")
        ends = np.asarray([b for _, b, _ in spans], float)
        last = np.searchsorted(step_start[order], ends, side="right") - 1  # the last step starting by each end
        for (_, b, name), i in zip(spans, last.tolist()):
            if i >= 0 and b < step_end[order[i]]:
                by_step[order[i]].setdefault(letters(name), unwrapped(name))
        t = profile.table
        starts, durs = t.start_ns, t.dur_ns
        longest = float(durs.max()) if len(durs) else 0.0
        touched = held_by(steps, np.asarray([a for a, _, _ in spans], float), np.asarray([b for _, b, _ in spans],
                                                                                          float))
        for i in np.flatnonzero(touched).tolist():  # the few steps a compilation overlaps (a long run has thousands)
            a, b = step_start[i], step_end[i]
            near = [(c0, c1, name) for c0, c1, name in spans if c0 < b and c1 > a]
            if b <= a or not near:
                continue
            lo, hi = np.searchsorted(starts, [a - longest, b])
            busy = merge_intervals(np.stack([starts[lo:hi], starts[lo:hi] + durs[lo:hi]], axis=1))
            for c0, c1, name in near:  # the part of the step the compilation spans that no op covers
                x = np.asarray([max(c0, a), min(c1, b)], float)
                waited = (x[1] - x[0]) - float(np.diff(covered_below(x, busy))[0]) if len(busy) else x[1] - x[0]
                if waited >= COMPILE_IDLE_SHARE * (b - a):
                    by_step[i].setdefault(letters(name), unwrapped(name))
    held = {n: sorted(by_step[i].values()) for i, (n, _, _) in enumerate(steps)}
    clean = [st for st in steps if not held[st[0]]]
    if not clean or len(clean) == len(steps):
        return steps, ""
    out = [f"step {n} ({', '.join(held[n])})" for n, _, _ in steps if held[n]]
    return clean, (f"warm-up inside the window, left out of its steps: {', '.join(out)} "
                   f"{'holds' if len(out) == 1 else 'hold'} another function's compilation and first run")


# -- several hosts: the host × step table -------------------------------------------------------------------------

def groups_of(key: np.ndarray, dense: bool = False) -> list[np.ndarray]:
    """Event indices per distinct key, in key order, each in time order (the table is sorted by start).
    ``dense``: the caller's own key (a :func:`~rooflens.trace.events.row_key`, whose range is the product of its
    columns' ranges), grouped in place by its offset from its minimum, with no inverse made."""
    if not len(key):
        return []
    lo, hi = int(key.min()), int(key.max())
    if lo == hi:  # one group (a one-host trace's hosts): every event, no grouping made
        return [np.arange(len(key))]
    if dense and key.dtype == np.int64 and hi - lo < len(key):
        key -= lo
        counts = np.bincount(key, minlength=hi - lo + 1)
        order = grouped_order(key, hi - lo + 1)
        return [g for g in np.split(order, np.cumsum(counts)[:-1]) if len(g)]
    codes, inv = unique_inverse(key)
    order = grouped_order(inv, len(codes))
    return np.split(order, np.cumsum(np.bincount(inv, minlength=len(codes)))[:-1])


@dataclass(frozen=True)
class HostSteps:
    """Several hosts side by side: each host's step times, and where their time goes."""

    hosts: tuple[str, ...]
    steps: tuple[int, ...]
    times_s: tuple[tuple[float | None, ...], ...]  # host × step: that host's step time (None: not seen)
    skew_s: tuple[float, ...]  # per step: slowest host's time minus the fastest's
    collective_s: tuple[float, ...]  # per host: time in collectives per step and device (waiting included)
    other_s: tuple[float, ...]  # per host: time in every other op per step and device
    devices: tuple[int, ...]  # per host
    # ops far slower on one host than on the others:
    # (program, op, host, its mean s there, the hosts' median of means s, its runs there)
    op_outliers: tuple[tuple[str, str, str, float, float, int], ...] = ()


def host_steps(profile, categories: np.ndarray) -> HostSteps | None:
    """The host × step table, for a run of several hosts (None for one). ``categories``: each event's
    op category. A host's step runs from its first op of the step to its first op of the next (its
    last step: to its last op), so host-side delays count in the step they hold up."""
    t = profile.table
    if len(t.hosts) < 2 or not len(t):
        return None
    steps, first_ps, last_ps = step_spans_ps(t)
    nh = len(t.hosts)
    inside = t.step >= 0 if profile.steps else np.ones(len(t), bool)  # the op time inside the steps
    collective = categories == "collective"
    comm, rest = collective & inside, ~collective & inside
    devs = np.bincount(unique_rows(t.host, t.device)[0][:, 0], minlength=nh)
    coll = np.bincount(t.host[comm], weights=t.dur_ps[comm] * 1e-12, minlength=nh)
    other = np.bincount(t.host[rest], weights=t.dur_ps[rest] * 1e-12, minlength=nh)
    return host_steps_from(tuple(t.hosts), steps, first_ps * 1e-12, last_ps * 1e-12, coll, other, devs,
                           _op_means(t, ~collective))


def step_spans_ps(t) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The steps the events are in, and per host (row) and step (column) its first op's start and its last op's
    end (ps, float; inf and -inf where the host has no event in the step)."""
    in_step = t.step >= 0
    steps = unique_values(t.step[in_step]) if in_step.any() else np.zeros(0, np.int32)
    first = np.full((len(t.hosts), max(len(steps), 1)), np.inf)
    last = np.full((len(t.hosts), max(len(steps), 1)), -np.inf)
    if len(steps):
        k = np.searchsorted(steps, t.step[in_step])
        np.minimum.at(first, (t.host[in_step], k), t.start_ps[in_step].astype(np.float64))
        np.maximum.at(last, (t.host[in_step], k), (t.start_ps[in_step] + t.dur_ps[in_step]).astype(np.float64))
    return steps, first, last


def host_steps_from(hosts: tuple[str, ...], steps: np.ndarray, first_s: np.ndarray, last_s: np.ndarray,
                    collective_s: np.ndarray, other_s: np.ndarray, devices: np.ndarray, op_means: tuple) -> HostSteps:
    """The host × step table from what each host measured: per step its first op's start and its last op's end
    (host × step arrays, s; inf / -inf where it has none), its time in collectives and in every other op (s,
    inside the steps), its devices, and each op's mean and runs on it (:func:`op_outliers`' input)."""
    nh, ns = len(hosts), len(steps)
    times = []
    for h in range(nh):
        row: list[float | None] = []
        for j in range(ns):
            if not np.isfinite(first_s[h, j]):
                row.append(None)
                continue
            nxt = first_s[h, j + 1] if j + 1 < ns and np.isfinite(first_s[h, j + 1]) else last_s[h, j]
            row.append(float(nxt - first_s[h, j]))
        times.append(tuple(row))
    skew = tuple(float(max(c) - min(c)) if (c := [r[j] for r in times if r[j] is not None]) else 0.0
                 for j in range(ns))
    per = np.maximum(devices, 1) * max(ns, 1)
    return HostSteps(hosts, tuple(int(s) for s in steps), tuple(times), skew,
                     tuple(float(x) for x in collective_s / per), tuple(float(x) for x in other_s / per),
                     tuple(int(d) for d in devices), op_outliers(*op_means))


OUTLIER_RATIO = 1.5  # an op's mean on one host over its median across hosts


def _op_means(t, sel: np.ndarray) -> tuple:
    """Each (program, op, host) of the events ``sel``: its mean time (s) and runs, with names (op_outliers' input)."""
    if not sel.any():
        return (), np.zeros(0), np.zeros(0, np.int64)
    rows, inv = unique_rows(t.program[sel], t.name[sel], t.host[sel])
    runs = np.bincount(inv)
    mean = np.bincount(inv, weights=t.dur_ps[sel] * 1e-12) / runs
    named = [(t.programs[p], t.names[n], t.hosts[h]) for p, n, h in rows.tolist()]
    return named, mean, runs


def op_outliers(rows: list[tuple[str, str, str]], mean: np.ndarray, runs: np.ndarray) -> tuple:
    """Ops (collectives left out: their time is mostly waiting) whose mean time on one host is over
    OUTLIER_RATIO × their median over the hosts that ran them. ``rows``: (program, op, host), grouped by
    (program, op); ``mean`` (s) and ``runs`` of each."""
    if not len(rows):
        return ()
    op_key = {}
    op_inv = np.asarray([op_key.setdefault(r[:2], len(op_key)) for r in rows], np.int64)
    out = []
    for mine in groups_of(op_inv):
        if len(mine) < 2:
            continue
        med = float(median(mean[mine]))
        worst = mine[np.argmax(mean[mine])]
        if med > 0 and mean[worst] > OUTLIER_RATIO * med:
            p, n, h = rows[worst]
            out.append((p, n, h, float(mean[worst]), med, int(runs[worst])))
    return tuple(sorted(out, key=lambda o: -(o[3] - o[4]) * o[5]))
