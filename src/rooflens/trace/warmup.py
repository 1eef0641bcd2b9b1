"""Steady state of a run that was traced from its start (``rooflens run``): warm-up and steps.

A script profiled with ``rooflens run`` is traced from the moment its JAX backend comes up, so
the trace holds every program's compilation and first execution. Those are warm-up, not the
steady state: ``judge`` (called by ``rl.load``) marks them, keeps them apart (a summary per
program: "jit_step compiled in 0.8 s, first run 40 ms") and leaves them out of the event table,
so op stats and findings describe the steady state. ``with_warmup(profile)`` gives the run back
with them. Where the script has no step annotations, the steps are the executions of the main
program (the one with the most steady-state time among those run more than once).

Executions are found from the ops themselves: within one program on one device, an op outside
any loop runs once per execution, so the program's first op and its last op (by time) run as
many times as the program did; the i-th occurrence of every op with that count belongs to
execution i, and the other ops (loop bodies, branches) to the execution running at their start.

Pure functions of the event table and the run's metadata: no files, no printing.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from rooflens.trace.dispatch import letters
from rooflens.trace.events import EventTable, unique_rows
from rooflens.trace.formats.compiled import njit, plain_twin
from rooflens.trace.groupby import NUMPY_TWIN, group_extent, grouped_order, is_sorted
from rooflens.trace.manifest import RunManifest
from rooflens.trace.stats import CONTROL_OPCODES
from rooflens.trace.steps import (
    base_name,
    codes_of,
    cut_note,
    infer_steps,
    judge_window,
    named,
    window_fn,
    with_choice_note,
    without_compilations,
)

_FULL = "_rooflens_full"  # where the run as traced (warm-up included) is kept on a judged Profile


def execution_index(t: EventTable) -> np.ndarray:
    """For every event, which execution (0, 1, …) of its program on its device it belongs to (remembered
    for the same table: :mod:`rooflens.trace.memo`; its :func:`execution_spans` are made beside it)."""
    from rooflens.trace import memo

    key = (memo.table_digest(t, steps=False),)

    def compute() -> np.ndarray:
        out, spans = _execution_index(t)
        out.setflags(write=False)  # one array for every caller: none may change it
        memo.remembered("execution_spans", key, len(t), lambda: _frozen(spans), in_memory=True)
        return out

    return memo.remembered("execution_index", key, len(t), compute, in_memory=True)


def _execution_index(t: EventTable) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    n = len(t)
    if not n:
        return np.zeros(n, dtype=np.int32), _spans_of(np.zeros((0, 4), np.int64), np.zeros(0, np.int64),
                                                      np.zeros(0), np.zeros(0))
    keys, inv = unique_rows(t.host, t.device, t.program)  # one group per (host, device, program)
    start = t.start_ns
    if is_sorted(start):  # the table's own order (by start): grouped in O(n)
        order = grouped_order(inv, len(keys))
    else:
        order = np.lexsort((start, inv))
    bounds = np.concatenate([[0], np.cumsum(np.bincount(inv, minlength=len(keys)))])
    idx = executions_of(order, bounds, t.name.astype(np.int64), max(len(t.names), 1), start, control_names(t.names))
    group, execution, count, first, last = execution_rows(order, bounds, idx, start, t.end_ns)
    return idx, _spans_of(np.column_stack([keys[group], execution]), count, first, last, t, idx)


@njit(cache=True, nogil=True)
def execution_rows(order, bounds, idx, start, end):
    """Every execution of the groups (``order[bounds[g]:bounds[g + 1]]``: group g's events in time order, whose
    executions ``idx`` therefore never decrease): its group, execution, events, first start and last end."""
    m = 0
    for g in range(len(bounds) - 1):
        prev = -1
        for k in range(bounds[g], bounds[g + 1]):
            if idx[order[k]] != prev:
                m += 1
                prev = idx[order[k]]
    group = np.empty(m, np.int64)
    execution = np.empty(m, np.int64)
    count = np.zeros(m, np.int64)
    first = np.full(m, np.inf)
    last = np.full(m, -np.inf)
    r = -1
    for g in range(len(bounds) - 1):
        prev = -1
        for k in range(bounds[g], bounds[g + 1]):
            i = order[k]
            if idx[i] != prev:
                r += 1
                prev = idx[i]
                group[r], execution[r] = g, prev
            count[r] += 1
            first[r] = min(first[r], start[i])
            last[r] = max(last[r], end[i])
    return group, execution, count, first, last


@plain_twin(execution_rows, NUMPY_TWIN)
def _execution_rows_np(order, bounds, idx, start, end):
    g = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))
    e = idx[order].astype(np.int64)
    new = np.ones(len(order), bool)
    new[1:] = (g[1:] != g[:-1]) | (e[1:] != e[:-1])
    at = np.flatnonzero(new)
    if not len(at):
        return (np.zeros(0, np.int64),) * 3 + (np.zeros(0), np.zeros(0))
    return (g[at], e[at], np.diff(np.append(at, len(order))), np.minimum.reduceat(start[order], at),
            np.maximum.reduceat(end[order], at))


#: control ops, by their name's base (``while.24``, ``conditional.3``, ``call``, and ``cond.5.clone``: jax names
#: lax.cond's ``cond``): a top-level one runs once per execution of its program
CONTROL_NAMES = CONTROL_OPCODES | {"cond"}


def control_names(names: list[str]) -> np.ndarray:
    """Per name code, whether the op is a control op (:data:`CONTROL_NAMES`)."""
    return np.asarray([n.split(".", 1)[0] in CONTROL_NAMES for n in names] or [False], np.bool_)


@njit(cache=True, nogil=True)
def executions_of(order, bounds, name, n_names, start, control):
    """:func:`execution_index` over groups: ``order[bounds[g]:bounds[g + 1]]`` are group g's events in
    time order. An op with as many events as the group's first and last op (the fewer of the two: a last op in a
    loop's body runs many times an execution) runs once per execution; where the two differ and a control op
    (``control``: per name) has the events of one of them, the earliest such, the outermost (a last op in a
    conditional's branch runs in some executions only: a step whose lax.cond took its heavy branch every fifth
    execution was merged into the one before). The i-th execution starts at the earliest i-th event of those
    ops."""
    out = np.zeros(len(order), np.int32)
    count = np.zeros(n_names, np.int64)
    seen = np.zeros(n_names, np.int64)
    for g in range(len(bounds) - 1):
        _group_executions(order[bounds[g]:bounds[g + 1]], name, start, count, seen, out, control)
    return out


@njit(cache=True, nogil=True)
def _group_executions(idx, name, start, count, seen, out, control):
    """:func:`executions_of` for one group's events ``idx`` (in time order): each one's execution into ``out``
    (``count``/``seen``: zeros of every name, left as zeros). The events are met in time order, so each one's
    execution is found by walking on from the last one's, not by a search."""
    for i in idx:
        count[name[i]] += 1
    first, last = count[name[idx[0]]], count[name[idx[-1]]]
    runs = min(first, last)
    if first != last:  # the earliest control op with one of the two counts: the outermost (a loop holds others)
        for i in idx:
            c = count[name[i]]
            if control[name[i]] and (c - first) * (c - last) == 0:
                runs = c
                break
    if runs > 1:
        starts = np.full(runs, np.inf)
        for i in idx:
            k = seen[name[i]]
            seen[name[i]] += 1
            if count[name[i]] == runs and start[i] < starts[k]:
                starts[k] = start[i]
        starts.sort()
        j = 0  # the last execution whose start is at or before this event's (the first one's, for earlier events)
        for i in idx:
            while j + 1 < runs and starts[j + 1] <= start[i]:
                j += 1
            out[i] = j
    for i in idx:
        count[name[i]] = 0
        seen[name[i]] = 0


@plain_twin(executions_of, NUMPY_TWIN)
def _executions_of_np(order, bounds, name, n_names, start, control):
    out = np.zeros(len(order), dtype=np.int32)
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        idx = order[lo:hi]
        uniq, ninv, counts = np.unique(name[idx], return_inverse=True, return_counts=True)
        first, last = int(counts[ninv[0]]), int(counts[ninv[-1]])
        runs = min(first, last)
        if first != last:
            held = np.flatnonzero(control[name[idx]] & np.isin(counts[ninv], (first, last)))
            runs = int(counts[ninv[held[0]]]) if len(held) else runs
        if runs <= 1:
            continue  # one execution: every event is execution 0
        once = counts[ninv] == runs
        # occurrence number of each event among the events of its op (in time order)
        by_op = np.argsort(ninv, kind="stable")
        first_of_op = np.concatenate([[0], np.cumsum(counts)[:-1]])
        occ = np.empty(len(idx), dtype=np.int64)
        occ[by_op] = np.arange(len(idx)) - np.repeat(first_of_op, counts)
        starts = np.full(runs, np.inf)
        np.minimum.at(starts, occ[once], start[idx][once])
        starts = np.sort(starts[np.isfinite(starts)])
        out[idx] = np.clip(np.searchsorted(starts, start[idx], side="right") - 1, 0, None)
    return out


def execution_spans(t: EventTable, exec_idx: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """Every execution of every program on every device: rows (host, device, program, execution) in that
    order, each with its events, its first op's start and its last op's end (ns), and whether the trace's end
    cut it short (:func:`cut_executions`); remembered for the same table (made with :func:`execution_index`).
    ``exec_idx``: the table's execution index (when given, the spans are made from it and not remembered)."""
    from rooflens.trace import memo

    if exec_idx is not None:
        return _frozen(_execution_spans(t, exec_idx))

    key = (memo.table_digest(t, steps=False),)

    def compute() -> tuple[np.ndarray, ...]:  # neither in memory nor on the disk: from the index
        idx = execution_index(t)  # computed now, it made them beside it; read from the disk, it did not
        return memo.held("execution_spans", key) or _frozen(_execution_spans(t, idx))

    return memo.remembered("execution_spans", key, len(t), compute, in_memory=True)


def _frozen(arrays: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    for a in arrays:
        a.setflags(write=False)
    return arrays


def _execution_spans(t: EventTable, exec_idx: np.ndarray) -> tuple[np.ndarray, ...]:
    if not len(t):
        return _spans_of(np.zeros((0, 4), np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0))
    keys, inv = unique_rows(t.host, t.device, t.program, exec_idx)  # by (host, device, program), then execution
    start, end = group_extent(inv, len(keys), t.start_ns, t.end_ns)
    return _spans_of(keys, np.bincount(inv, minlength=len(keys)), start, end, t, exec_idx)


def _spans_of(keys: np.ndarray, count: np.ndarray, start: np.ndarray, end: np.ndarray, t: EventTable | None = None,
              idx: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """The spans of executions (rows of host, device, program, execution, in that order) with the ones the trace's
    end cut short marked: a program's last execution on a device, after which nothing starts on that device, that
    never ran its program's final op (the op that ends its execution before it: the trace stopped while it ran).
    Never decided from how many ops it ran: a ``while_loop`` runs a data-dependent number of them."""
    cut = np.zeros(len(keys), bool)
    if not len(keys) or t is None or idx is None:
        return keys, count, start, end, cut
    group = keys[:, :3]
    first = np.flatnonzero(np.concatenate([[True], (group[1:] != group[:-1]).any(axis=1)]))
    last = np.append(first[1:], len(keys)) - 1
    dev_keys, dev_inv = unique_rows(keys[:, 0], keys[:, 1])
    _, dev_last_start = group_extent(dev_inv, len(dev_keys), start, start)
    # nothing starts on the device after it ends: the trace's end, not the program's next run, follows it
    candidates = last[(last > first) & (dev_last_start[dev_inv[last]] <= end[last])]
    for r in candidates.tolist():
        h, d, p, k = keys[r].tolist()
        mine = (t.host == h) & (t.device == d) & (t.program == p)
        before = mine & (idx == k - 1)
        if not before.any():
            continue
        ends = t.end_ns_at(before)
        final = t.name[before][int(np.argmax(ends))]  # the op that ended the execution before it
        if not ((idx == k) & mine & (t.name == final)).any():
            cut[r] = True
    return keys, count, start, end, cut


def cut_executions(t: EventTable, exec_idx: np.ndarray | None = None) -> np.ndarray:
    """For every event, whether it belongs to an execution the trace's end cut short. A program's last
    execution on a device is cut when it never ran the op that ended its execution before it and nothing
    starts on that device after it ends: the trace stopped while it ran (its first ops finished inside the
    trace, the rest never did; how many ops it ran decides nothing). It is not a step, and its ops' sums are
    partial. ``exec_idx``: the table's :func:`execution_index` (computed when not given)."""
    keys, _, _, _, cut = execution_spans(t, exec_idx)
    if not cut.any():
        return np.zeros(len(t), bool)
    idx = execution_index(t) if exec_idx is None else exec_idx
    rows = keys[cut]
    both = unique_rows(np.concatenate([rows[:, 0], t.host]), np.concatenate([rows[:, 1], t.device]),
                       np.concatenate([rows[:, 2], t.program]), np.concatenate([rows[:, 3], idx]))[1]
    return np.isin(both[len(rows):], both[:len(rows)])


@dataclasses.dataclass(frozen=True)
class Executions:
    program: str
    runs_per_device: float
    median_span_s: float  # first op start to last op end, per execution on one device
    mean_span_s: float = 0.0  # the mean of the same spans: what the breakdown's parts, means themselves, sum to


def program_executions(table: EventTable) -> dict[str, Executions]:
    """Every program's executions per device and their median and mean span (device time, gaps inside included)."""
    if not len(table):
        return {}
    keys, _, starts, ends, cut = execution_spans(table)
    ran = ~cut  # an execution cut by the trace's end is not one
    program = keys[ran, 2]
    if not len(program):
        return {}
    span_s = (ends[ran] - starts[ran]).astype(np.float64) * 1e-9
    order = np.lexsort((span_s, program))  # by program, each one's spans sorted: medians by position
    program, span_s = program[order], span_s[order]
    first = np.flatnonzero(np.r_[True, program[1:] != program[:-1]])
    n = np.diff(np.r_[first, len(program)])
    median = (span_s[first + (n - 1) // 2] + span_s[first + n // 2]) / 2
    mean = np.add.reduceat(span_s, first) / n
    ran_on = unique_rows(keys[ran, 2], keys[ran, 0], keys[ran, 1])[0][:, 0]  # (program, host, device) pairs
    devices = np.bincount(ran_on, minlength=int(program.max()) + 1)
    out: dict[str, Executions] = {}
    for k, p in enumerate(program[first].tolist()):
        name = table.programs[p]
        out[name] = Executions(name, int(n[k]) / max(int(devices[p]), 1), float(median[k]), float(mean[k]))
    return out


def _take(t: EventTable, keep: np.ndarray) -> EventTable:
    cols = {f.name: getattr(t, f.name) for f in dataclasses.fields(t)}
    for k, v in cols.items():
        if isinstance(v, np.ndarray) and len(v) == len(t):
            cols[k] = v[keep]
    return EventTable(**cols)


def _compile_rows(manifest: RunManifest) -> list[tuple[float, float, str, str]]:
    """(start, end, function, jax's event name or "") of every host-side compilation step the run recorded (wall
    clock, in time order): jax's monitoring spans and the run's own record of each XLA compilation."""
    w = manifest.window
    rows = [(s["start_unix_s"], s["end_unix_s"], s.get("fun_name", ""), s.get("event", ""))
            for s in w.compile_spans or []]
    rows += [(c.start_unix_s, c.end_unix_s, c.module or "", "") for c in w.every_compilation
             if c.start_unix_s is not None]
    return sorted(rows)


def compile_spans_unix_s(manifest: RunManifest) -> list[tuple[float, float, str]]:
    """(start, end, function) of every host-side compilation step the run recorded (wall clock)."""
    return [(a, b, name) for a, b, name, _ in _compile_rows(manifest)]


#: jax's compile events in the order one compilation runs them (monitoring's event names); a new compilation
#: of a function starts where a stage does not come after its last one.
COMPILE_STAGES = ("jaxpr_trace_duration", "jaxpr_to_mlir_module_duration", "backend_compile_duration")


def compilations_unix_s(manifest: RunManifest) -> list[tuple[float, float, str]]:
    """(start, end, function) of each compilation the run recorded (wall clock): a function's tracing, lowering
    and XLA compilation as one, ending when the program is ready to run. Its stages' own ends are not when the
    host is done (an evaluation's tracing ended at the start of the step before it, whose device start came late
    under load, and that step was judged to hold the compilation)."""
    out: list[list] = []
    last: dict[str, tuple[int, int]] = {}  # function → (its open compilation's index in out, its stage)
    for start, end, name, event in _compile_rows(manifest):
        key = letters(name)
        stage = COMPILE_STAGES.index(event) if event in COMPILE_STAGES else len(COMPILE_STAGES) - 1
        open_ = last.get(key)
        # a stage after the open one's, or the run's record of the XLA compilation it already holds (no stage)
        if open_ is not None and (stage > open_[1] or (not event and start <= out[open_[0]][1])):
            row = out[open_[0]]
            row[1] = max(row[1], end)
            last[key] = (open_[0], max(stage, open_[1]))
            continue
        last[key] = (len(out), stage)
        out.append([start, end, name])
    return [tuple(r) for r in out]


def table_offset_ns(t: EventTable, manifest: RunManifest, exec_idx: np.ndarray | None = None) -> float:
    """``table time = unix time (ns) + offset``: each program's first op runs just after its
    compilation ends, so the smallest (first op − compilation end) over programs is the offset
    (to within a dispatch); without compilations, the trace start recorded by the run."""
    # only compilations that end inside the trace: a program compiled before a window opened first runs in the table
    # long after its compilation (an evaluation compiled at step 4, first seen in a window of steps 10-19)
    opened = (manifest.trace_start_unix_ns or 0) * 1e-9
    comps = [c for c in manifest.window.first_compilations or [] if c.end_unix_s is not None and c.end_unix_s >= opened]
    first_end: dict[str, float] = {}
    for c in comps:
        first_end.setdefault(c.module, c.end_unix_s * 1e9)
    best = np.inf
    for code, program in enumerate(t.programs):
        end = first_end.get(base_name(program))
        sel = t.program == code
        if end is None or not sel.any():
            continue
        best = min(best, float(t.start_ns[sel].min()) - end)
    if np.isfinite(best):
        return best
    start = manifest.trace_start_unix_ns
    return -float(start) if start else 0.0


#: Host events that are an XLA compilation: the nsys reader's ``XlaCompile <module>`` ranges, and
#: the Python tracer's frames of jax's compile entry points (``$compiler.py:292 backend_compile_and_load``, its ``$``
#: kept or stripped).
COMPILE_FRAME = re.compile(r"^(?:XlaCompile\b|\$?\S*compiler\.py:\d+ (?:backend_compile|compile_or_get_cached))")


def host_compile_intervals_ns(host_events: list[tuple[str, float, float]]) -> np.ndarray:
    """The host's compilations among its events (name, start ns, end ns) as merged [start, end) rows."""
    rows = [(s, e) for name, s, e in host_events if COMPILE_FRAME.match(name)]
    return merge_intervals(np.asarray(rows, dtype=float).reshape(-1, 2))


def compile_intervals_ns(t: EventTable, manifest: RunManifest) -> np.ndarray:
    """Host compilation (tracing, lowering, XLA) as merged ``[start, end)`` rows in table time."""
    spans = compile_spans_unix_s(manifest)
    if not spans or not len(t):
        return np.zeros((0, 2))
    off = table_offset_ns(t, manifest)
    return merge_intervals(np.asarray([(s * 1e9 + off, e * 1e9 + off) for s, e, _ in spans]))


def merge_intervals(iv: np.ndarray) -> np.ndarray:
    """Rows of [start, end) merged into disjoint sorted rows."""
    if not len(iv):
        return np.zeros((0, 2))
    iv = iv[np.argsort(iv[:, 0], kind="stable")]
    run_end = np.maximum.accumulate(iv[:, 1])
    new = np.ones(len(iv), dtype=bool)
    new[1:] = iv[1:, 0] > run_end[:-1]
    idx = np.flatnonzero(new)
    return np.stack([iv[idx, 0], np.append(run_end[idx[1:] - 1], run_end[-1])], axis=1)


def idle_outside(start: np.ndarray, end: np.ndarray, excluded: np.ndarray) -> tuple[float, float, np.ndarray]:
    """Idle time between the events [start, end) (any order) that does not fall in ``excluded``
    intervals: (idle ns left, idle ns excluded, the remaining gaps as rows of [start, end))."""
    if len(start) < 2:
        return 0.0, 0.0, np.zeros((0, 2))
    busy = merge_intervals(np.stack([start, end], axis=1))
    gaps = np.stack([busy[:-1, 1], busy[1:, 0]], axis=1)
    total = float((gaps[:, 1] - gaps[:, 0]).sum())
    excluded = merge_intervals(np.asarray(excluded, dtype=float).reshape(-1, 2))
    if not len(excluded):
        return total, 0.0, gaps
    inside = covered_below(gaps[:, 1], excluded) - covered_below(gaps[:, 0], excluded)  # per gap
    left = (gaps[:, 1] - gaps[:, 0]) - inside
    return total - float(inside.sum()), float(inside.sum()), np.stack([gaps[:, 0], gaps[:, 0] + left], axis=1)


def covered_below(x: np.ndarray, iv: np.ndarray) -> np.ndarray:
    """Total length of the disjoint sorted intervals ``iv`` that lies below each ``x``."""
    starts, ends = iv[:, 0], iv[:, 1]
    cum = np.concatenate([[0.0], np.cumsum(ends - starts)])
    k = np.searchsorted(starts, x, side="right")
    beyond = np.where(k > 0, np.maximum(ends[np.maximum(k - 1, 0)] - x, 0.0), 0.0)
    return cum[k] - beyond


def _warmup_programs(t: EventTable, exec_idx: np.ndarray, manifest: RunManifest,
                     warm: np.ndarray | None = None) -> list[dict]:
    """Per program name: its compilations and its first execution, for the warm-up summary (``warm``: the
    warm-up events; a program with none is not listed)."""
    compiles: dict[str, list[float]] = {}
    for c in manifest.window.every_compilation:
        compiles.setdefault(c.module or "", []).append(float(c.duration_s or 0.0))
    out = []
    for code, program in enumerate(t.programs):
        sel = (t.program == code) & (exec_idx == 0 if warm is None else warm)
        if not program or not sel.any():  # "": kernels of no program (a runtime's memsets), not a program to list
            continue
        first_run_s = float((t.end_ns_at(sel).max() - t.start_ns[sel].min()) * 1e-9)
        runs = int(exec_idx[t.program == code].max()) + 1
        out.append({"program": program, "first_run_s": first_run_s, "executions": runs, "events": int(sel.sum())})
    by_name: dict[str, list[dict]] = {}
    for p in out:
        by_name.setdefault(base_name(p["program"]), []).append(p)
    for name, progs in by_name.items():
        times = compiles.get(name, [])
        for i, p in enumerate(sorted(progs, key=lambda p: p["program"])):
            p["compile_s"] = times[i] if i < len(times) else None
    return sorted(out, key=lambda p: -((p.get("compile_s") or 0.0) + p["first_run_s"]))


def own_warmup_starts_ns(t: EventTable, warm: np.ndarray, manifest: RunManifest, function: str,
                         offset_ns: float) -> np.ndarray:
    """Where a step function's own warm-up begins (table ns): its compilations and its programs' first runs. A
    step before one ends there: the host compiling the function's next program is warm-up, not that step's."""
    want = letters(function)
    comp = [s * 1e9 + offset_ns for s, _, name in compile_spans_unix_s(manifest) if name and letters(name) == want]
    codes = codes_of(t.programs, function)
    first = t.start_ns[warm & np.isin(t.program, codes)]
    return np.sort(np.concatenate([np.asarray(comp, float), first.astype(float)]))


def _host_steady_start(t: EventTable, exec_idx: np.ndarray, code: int, meta: RunManifest, offset_ns: float,
                       steady_start_ns: float) -> dict:
    """Where the host's steady state begins when the steps are the main program's executions.

    The device-side start (the end of the main program's first run) is late for host events: with
    asynchronous dispatch the host has already queued the next steps (and made their transfers)
    while the device still runs the warm-up. The host's boundary is the end of the last
    compilation before the device's steady start; every run of the main program that starts after
    it was dispatched after it (the run it compiled and the steady steps)."""
    ends = [e * 1e9 + offset_ns for _, e, _ in compile_spans_unix_s(meta) if e * 1e9 + offset_ns <= steady_start_ns]
    if not ends:
        return {}
    host_ns = max(ends)
    sel = t.program == code
    starts = np.full(int(exec_idx[sel].max()) + 1, np.inf)
    np.minimum.at(starts, exec_idx[sel], t.start_ns[sel])
    runs = int((starts[np.isfinite(starts)] >= host_ns).sum())
    return {"host_steady_start_ns": host_ns, "host_steady_runs": runs} if runs else {}


def _fmt_s(s: float | None) -> str:
    if s is None:
        return "?"
    return f"{s:.2g} s" if s >= 1 else f"{s * 1e3:.3g} ms" if s >= 1e-3 else f"{s * 1e6:.3g} µs"


def warmup_summary(programs: list[dict], limit: int = 4) -> str:
    """``jit_step compiled in 0.8 s, first run 40 ms; …``"""
    parts = []
    for p in programs[:limit]:
        compiled = f"compiled in {_fmt_s(p['compile_s'])}, " if p.get("compile_s") is not None else ""
        parts.append(f"{p['program']} {compiled}first run {_fmt_s(p['first_run_s'])}")
    more = len(programs) - limit
    return "; ".join(parts) + (f"; and {more} more program(s)" if more > 0 else "")


def held_by(steps: list[tuple[int, float, float]], start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per step (number, start, end), whether it overlaps any of the intervals [``start``, ``end``]: one sort and
    a search, not a pass over the intervals per step (a long run has thousands of steps)."""
    if not len(start):
        return np.zeros(len(steps), np.bool_)
    order = np.argsort(start, kind="stable")
    s_sorted, reach = start[order], np.maximum.accumulate(end[order])  # the latest end of those started so far
    step_end = np.asarray([e for _, _, e in steps], float)
    step_start = np.asarray([b for _, b, _ in steps], float)
    k = np.searchsorted(s_sorted, step_end, side="left")  # the intervals starting before each step's end
    return (k > 0) & (reach[np.maximum(k - 1, 0)] > step_start)


def judge(profile, step_fn: str | None = None):
    """Mark the warm-up of a run traced from its start and leave it out (see the module doc), and name the step
    program (:mod:`rooflens.trace.steps`). ``step_fn``: the step program asked for (``--step-fn``).

    Profiles not captured that way (``rl.capture``, a trace of your own) keep every event.
    """
    from rooflens.trace.formats.raw import assign_steps
    from rooflens.trace.steps import warmup_executions

    manifest = profile.manifest
    window = manifest.extra.get("window")
    taken = manifest.step_program
    # a window of --steps opened on the calls of the function --step-fn named: its steps are those calls, and the
    # script's own annotations are cut at both edges (the one entered before the trace opened, and the one it
    # closed inside, are not recorded): 5 of a 7-step window's
    by_calls = bool(window) and "steps" in window and taken is not None and taken.chosen_by == "--step-fn"
    if window and not manifest.warmup_in_window and (not profile.steps or by_calls):
        return judge_window(dataclasses.replace(profile, steps=[]) if profile.steps else profile, step_fn,
                            markers_cut=bool(profile.steps))
    if not manifest.warmup_in_window or getattr(profile, _FULL, None) is not None:
        judged = named(profile, step_fn)
        choice = judged.step_choice
        if not (manifest.extra.get("window") and judged.steps and choice is not None):
            return judged
        # a window's marked steps: those holding another function's compilation are warm-up, as its unmarked
        # steps (judge_window) and a whole run's are
        steps, said = without_compilations(judged, list(judged.steps), choice.function)
        if not said:
            return judged
        t = judged.table
        kept = {n for n, _, _ in steps}
        t.step[np.isin(t.step, [n for n, _, _ in judged.steps if n not in kept])] = -1
        return dataclasses.replace(judged, steps=steps,
                                   notes=with_choice_note(list(judged.notes), choice, len(steps)) + [said])
    meta = profile.metadata or {}
    t = profile.table
    exec_idx = execution_index(t)
    warm = warmup_executions(t, exec_idx)
    programs = _warmup_programs(t, exec_idx, manifest, warm)
    notes = list(profile.notes)
    info = {"programs": programs, "events": int(warm.sum()), "excluded": True,
            "compile_s": sum(p.get("compile_s") or 0.0 for p in programs),
            "offset_ns": table_offset_ns(t, manifest),
            "compile_intervals_ns": compile_intervals_ns(t, manifest).tolist(),
            # host compilation and first runs, in table time: device idle inside them is warm-up
            "intervals_ns": merge_intervals(np.concatenate([
                compile_intervals_ns(t, manifest),
                np.stack([t.start_ns[warm], t.end_ns_at(warm)], axis=1) if warm.any() else np.zeros((0, 2))])).tolist()}
    steps = list(profile.steps)
    choice = profile.step_choice
    kept = ~warm
    if not warm.any():
        info["excluded"] = False
    steady = _take(t, kept)
    if steps:  # marked steps holding a warm-up execution are warm-up steps
        held = held_by(steps, t.start_ns[warm], t.end_ns_at(warm)).tolist()
        if not all(held) and info["excluded"]:
            info["warmup_steps"] = [s[0] for s, h in zip(steps, held) if h]
            steps = [s for s, h in zip(steps, held) if not h]
        info["steady_start_ns"] = float(steps[0][1])
        assign_steps(steady, steps)
        if choice is not None and len(steady):  # its program with the most time, once warm-up is out
            from rooflens.trace.steps import make_choice

            choice = make_choice(steady, execution_spans(steady), choice.function, choice.reason, choice.basis)
    else:
        steps, choice, cut = infer_steps(steady, step_fn, window_fn(manifest),
                                         lambda fn: own_warmup_starts_ns(t, warm, manifest, fn, info["offset_ns"]),
                                         profile.dispatches_of)
        main = choice.program if choice is not None else ""
        if cut:
            notes.append(cut_note(main))
        codes = [t.programs.index(p) for p in choice.programs if p in t.programs] if choice is not None else []
        if choice is not None:  # the steady state begins when the step function's first run ends
            first = warm & np.isin(t.program, codes)
            if first.any():
                info["steady_start_ns"] = float(t.end_ns_at(first).max())
                info.update(_host_steady_start(t, exec_idx, codes[0], manifest, info["offset_ns"],
                                               info["steady_start_ns"]))
        if steps and choice is not None and info["excluded"]:
            # as marked steps: a step holding another function's warm-up (its compilation and first run, a
            # one-off: an optimizer update first called after the first micro-batches, an evaluation first run
            # at step 100) is warm-up; the step function's own end the steps before them (own_warmup_starts_ns)
            other = warm & ~np.isin(t.program, codes)
            held = held_by(steps, t.start_ns[other], t.end_ns_at(other)).tolist()
            if any(held) and not all(held):
                info["warmup_steps"] = [s[0] for s, h in zip(steps, held) if h]
                steps = [s for s, h in zip(steps, held) if not h]
        if steps:
            assign_steps(steady, steps)
            info["inferred_steps_from"] = main
            notes = [n for n in notes if "no step annotations" not in n]
    if info["excluded"] and programs:
        notes.append(f"warm-up, left out of the stats (--include-warmup keeps it): {warmup_summary(programs)}")
    if choice is not None:
        notes = with_choice_note(notes, choice, len(steps))
    judged = dataclasses.replace(profile, table=steady, steps=steps, notes=notes, step_choice=choice,
                                 metadata={**meta, "steady_state": info})
    object.__setattr__(judged, _FULL, profile)
    return judged


def with_warmup(profile):
    """The run as traced, warm-up included (the profile itself when nothing was left out)."""
    full = getattr(profile, _FULL, None)
    if full is None:
        return profile
    from rooflens.trace.formats.raw import assign_steps

    info = {**profile.metadata.get("steady_state", {}), "excluded": False}
    info["intervals_ns"] = info.get("compile_intervals_ns", [])  # compiling is still not "idle"
    notes = [*full.notes, "warm-up included (--include-warmup): first runs and the device time spent waiting "
                          "for compilations count in the stats"]
    steps = list(full.steps)
    choice = profile.step_choice
    if not steps:
        step_fn = choice.function if choice is not None else None
        steps, choice, cut = infer_steps(full.table, step_fn, dispatches_of=full.dispatches_of)
        if cut:
            notes.append(cut_note(choice.program))
        if steps:
            assign_steps(full.table, steps)
            notes = [n for n in notes if "no step annotations" not in n]
    if choice is not None:
        notes = with_choice_note(notes, choice, len(steps))
    return dataclasses.replace(full, metadata={**full.metadata, "steady_state": info}, notes=notes, steps=steps,
                               step_choice=choice)
