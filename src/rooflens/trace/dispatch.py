"""The host's dispatches against the device's executions: work a trace ended with, dispatched and never run.

JAX dispatches asynchronously: a jitted call returns as soon as its program is queued on the devices, so a
loop can run far ahead of them, and a trace stopped without waiting (no ``block_until_ready`` before
``stop_trace``, or before leaving ``jax.profiler.trace``) ends while steps are still queued. The host side
records each call of a jitted function (jaxlib's ``PjitFunction(<fn>)`` event on the calling thread); the device
side, each program execution (:func:`execution_index`). A call is a dispatch when it launched an execution: the
runtime's execute event (``CommonPjRtLoadedExecutable::Execute…``, ``TfrtTpuLoadedExecutable::Execute``, …:
:data:`~rooflens.trace.formats.raw.EXECUTE_PREFIXES`) lies within its span on its thread. jaxlib records the event
for calls made on tracers too, while JAX traces something outside any jit (Flax linen's ``init`` under ``nn.scan``
calls ``jnp.add`` on tracers; ``jax.eval_shape``), and those run nothing. Where a trace records no execute event on
the threads that call jitted functions, every outermost call counts as a dispatch (the rule can tell no better).
The formats read them as :attr:`RawTrace.dispatches` (:func:`~rooflens.trace.formats.raw.top_level_dispatches`).

Dispatches and executions are matched first in, first out: the executions of a program that start after
its first dispatch in the trace are its dispatches' (earlier ones were dispatched before the trace began),
in order, on its most complete device. Dispatches left over never ran inside the trace. They were *queued*
at its end when nothing the host dispatched after them ran, and the time left after them (from the later
of the first one and the device's last event, to the trace's end) is shorter than the device's backlog (what
every program's leftover dispatches take: their number × the program's median execution span; unknown when
none ran); otherwise the device had the time and ran later work, and the trace holds no event of theirs, which a
report says too. (A device's events are recorded as its ops finish: the execution
it was running when the trace stopped shows none, or only its first ops — :func:`rooflens.trace.warmup.cut_executions`.)

A jitted function's program is ``jit_<fn>`` (``pjit_``/``pmap_`` in older jax), its name's other characters
replaced as JAX writes module names (``jax._src.interpreters.mlir.sanitize_name``; ``<lambda>`` →
``jit__lambda``): they are matched on letters and digits. The capture's own barrier (``rooflens_drain``,
:data:`~rooflens.trace.manifest.DRAIN_FUNCTION`) runs no op and is left out.

Pure functions of the event table and what the formats read: no files, no printing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from rooflens.trace.events import EventTable
from rooflens.trace.groupby import median, unique_values
from rooflens.trace.manifest import DRAIN_FUNCTION

_UNSAFE = re.compile(r"[^\w.-]")  # what JAX replaces by "_" in a module name
_OTHER = re.compile(r"[^0-9A-Za-z]")
PREFIXES = ("jit_", "pjit_", "pmap_")
_WRAPPED = re.compile(r"(?:jit|pjit|pmap)\((.*)\)")  # a compilation event's name: jit(step)
#: a dispatch that names the program it runs, ``<module>(<program id>)`` as the executions carry it (Nsight's
#: ``XlaModule`` ranges: :func:`rooflens.trace.formats.tsl.dispatches`), where jaxlib's events name a function (a
#: Python name: never followed by a parenthesised number)
PROGRAM_NAMED = re.compile(r"[\w.-]+\(\d+\)")


@dataclass(frozen=True)
class Unran:
    """A program's dispatches on one host that never ran on its devices inside the trace."""

    program: str  # the program's name as the trace has it (its base name when it never ran: ``jit_step``)
    function: str  # the jitted function the host dispatched (``PjitFunction(step)``)
    host: str
    dispatched: int  # its dispatches in the trace
    ran: int  # of them, the executions the devices show (its most complete device)
    queued: bool  # still queued when the trace ended (True), or not: the device ran work dispatched after them
    missing_s: float  # device time they would take (their number × the median execution span; 0: unknown)

    @property
    def unran(self) -> int:
        return self.dispatched - self.ran

    @property
    def shown(self) -> str:
        """The program and the function the host dispatched: ``jit_step (step)``; a dispatch that names its program,
        that name: ``pjit_step(40)``."""
        return self.function if PROGRAM_NAMED.fullmatch(self.function) else f"{self.program} ({self.function})"


def unwrapped(name: str) -> str:
    """A compilation event's function name without JAX's wrapper: ``jit(step)`` → ``step``."""
    wrapped = _WRAPPED.fullmatch(name)
    return wrapped.group(1) if wrapped else name


def letters(name: str) -> str:
    """A function's or a program's name with its prefix (``jit_``), program id and all but letters and digits
    taken out: JAX names the program of ``<lambda>`` ``jit__lambda``, of ``step`` ``jit_step``, and its
    compilation events ``jit(step)``."""
    name = unwrapped(re.sub(r"\(\d+\)$", "", name))
    for prefix in PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    return _OTHER.sub("", name)


def program_of(function: str, programs: list[str]) -> list[int]:
    """The codes of the programs a jitted function's dispatches run (compilations of it for other shapes
    included: ``jit_dot(5)``, ``jit_dot(21)``); a dispatch that names its program (:data:`PROGRAM_NAMED`), that
    program only (shown by its plain name where a host ran no other program of that name:
    :func:`rooflens.trace.events.build`)."""
    if PROGRAM_NAMED.fullmatch(function):
        return [k for k, p in enumerate(programs) if p in (function, function[:function.rindex("(")])]
    want = letters(function)
    return [k for k, p in enumerate(programs) if p.startswith(PREFIXES) and letters(p) == want] if want else []


def unran_dispatches(table: EventTable, spans: tuple[np.ndarray, ...], dispatches_of: dict[str, dict[str, np.ndarray]],
                     end_ns_of: dict[str, float]) -> tuple[Unran, ...]:
    """Every program whose host dispatched it more often than its devices ran it inside the trace (see the
    module doc). ``spans``: the table's executions (:func:`rooflens.trace.warmup.execution_spans`);
    ``dispatches_of``: per host, each function's dispatch starts (ns of table time); ``end_ns_of``: per
    host, where its trace ends (ns of table time)."""
    out = []
    t = table
    keys, _, starts_ns, ends_ns, _ = spans
    for host, dispatches in dispatches_of.items():
        dispatches = {fn: d for fn, d in dispatches.items() if fn != DRAIN_FUNCTION}  # the capture's, no work
        if not dispatches or host not in t.hosts:
            continue
        mine = keys[:, 0] == t.hosts.index(host)
        runs = _runs(keys[mine], starts_ns[mine], ends_ns[mine])  # per program: (device, start, end), by start
        matched = {fn: program_of(fn, t.programs) for fn in dispatches}
        # every program's matched executions with the dispatch time each ran for, to judge first in, first out
        ran_for: list[np.ndarray] = []  # the dispatch times of the executions matched to a dispatch
        counted = {}
        for fn, starts in dispatches.items():
            ex = _executions_after(runs, matched[fn], float(starts[0]))
            n = min(len(ex), len(starts))
            counted[fn] = (n, ex)
            if n:
                ran_for.append(np.asarray(starts[:n], float))
        dev_end = float(ends_ns[mine].max()) if mine.any() else -np.inf
        end = max(float(end_ns_of.get(host, 0.0)), dev_end)
        left: dict[str, tuple] = {}  # fn → (ran, its first unran dispatch, later work ran, their device time)
        for fn, starts in dispatches.items():
            n, ex = counted[fn]
            if len(starts) > n:
                span_ns = float(median(ex[:, 2] - ex[:, 1])) if len(ex) else 0.0
                left[fn] = (n, float(starts[n]), any((d > float(starts[n])).any() for d in ran_for),
                            span_ns * (len(starts) - n))
        # the device's backlog at the trace's end: what every program left unrun would take (the device works
        # through it in order; its events are recorded as they finish, so the one it was running shows none)
        backlog_ns = sum(m for _, _, later, m in left.values() if not later)
        for fn, (n, first_unran, later, missing_ns) in left.items():
            time_left_ns = end - max(first_unran, dev_end)
            queued = not later and (not missing_ns or backlog_ns > time_left_ns)
            if not n and not queued:
                continue  # never ran and not waiting: a function whose program has another name, or no device op
            codes = matched[fn]
            program = t.programs[codes[0]] if len(codes) == 1 else (
                re.sub(r"\(\d+\)$", "", t.programs[codes[0]]) if codes else
                fn if PROGRAM_NAMED.fullmatch(fn) else "jit_" + _UNSAFE.sub("_", fn))
            out.append(Unran(program, fn, host, len(dispatches[fn]), n, queued, missing_ns * 1e-9))
    return tuple(sorted(out, key=lambda u: (-u.unran, u.program, u.host)))


def _runs(keys: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray) -> dict[int, np.ndarray]:
    """Per program code: its executions (``keys``: rows of host, device, program, execution) as rows of (device,
    start ns, end ns), by start."""
    out: dict[int, np.ndarray] = {}
    for p in unique_values(keys[:, 2]).tolist():
        sel = keys[:, 2] == p
        ex = np.stack([keys[sel, 1].astype(float), start_ns[sel], end_ns[sel]], axis=1)
        out[p] = ex[np.argsort(ex[:, 1], kind="stable")]
    return out


def _executions_after(runs: dict[int, np.ndarray], codes: list[int], first_dispatch_ns: float) -> np.ndarray:
    """The executions of the programs ``codes`` that started after ``first_dispatch_ns`` on their most complete
    device (rows of device, start, end, by start)."""
    rows = [runs[c] for c in codes if c in runs]
    if not rows:
        return np.zeros((0, 3))
    ex = np.concatenate(rows)
    ex = ex[ex[:, 1] >= first_dispatch_ns]
    if not len(ex):
        return ex
    devices, counts = np.unique(ex[:, 0], return_counts=True)
    ex = ex[ex[:, 0] == devices[np.argmax(counts)]]
    return ex[np.argsort(ex[:, 1], kind="stable")]


def unran_note(u: Unran, stats: bool = True) -> str:
    """One sentence: how many of how many dispatches never ran, and why (the fix, when the trace stopped early);
    ``stats``: say that the stats hold the executions that ran."""
    where = f" on {u.host}" if u.host else ""
    if u.queued:
        return (f"{u.unran} of {u.dispatched} dispatches of {u.shown}{where} never ran on the device "
                "inside the trace: it stopped while they were still queued (JAX dispatches asynchronously); call "
                "jax.block_until_ready on the step's output before stop_trace (or before leaving "
                "jax.profiler.trace) so the device finishes them" + ("; the stats hold the executions that ran"
                                                                     if stats else ""))
    return (f"{u.unran} of {u.dispatched} dispatches of {u.shown}{where} have no execution on the "
            "device in the trace, though the device ran work dispatched after them"
            + ("; the stats hold the executions the trace has" if stats else ""))
