"""HLO op stats (TensorBoard's "HLO Op Stats", for every device kind), steps and device idle time.

All pure functions of a :class:`Profile`; times in seconds. Grouping is vectorised: events are
grouped by integer codes with ``np.unique``/``np.bincount``, never one Python call per event.
"""

from __future__ import annotations

import functools
import zlib
from dataclasses import asdict, dataclass, field

import numpy as np

from rooflens.trace.dispatch import Unran
from rooflens.trace.events import row_key, unique_rows
from rooflens.trace.formats.compiled import njit, plain_twin
from rooflens.trace.groupby import (
    NUMPY_TWIN,
    dense,
    group_medians,
    grouped_order,
    grouped_sorted,
    is_sorted,
    timeline_order,
    unique_inverse,
    unique_values,
    weighted_sums,
)
from rooflens.trace.profile import Profile
from rooflens.trace.steps import (
    HostSteps,
    StepChoice,
    StepSummary,
    groups_of,
    host_steps,
)
from rooflens.trace.steps import step_summary as summary_of_steps


@dataclass(frozen=True)
class OpStat:
    """One HLO op of one program, summed over devices (and steps).

    Events and executions are apart: an *occurrence* is one op event (a kernel on GPU: a custom call, a
    cuBLAS split-K GEMM or an NCCL collective may launch several per run; a loop body's op has one per
    iteration); an *execution* is one execution of its program on one device (host, device, program
    execution: :func:`rooflens.trace.warmup.execution_index`) in which it ran. The op's time per execution
    is the sum of its events in that execution: all its kernels, and every iteration of the loops around
    it (what its roofline times its runs per program execution compares to). Executions the trace's end
    cut short (:func:`rooflens.trace.warmup.cut_executions`) hold partial sums and are left out of them."""

    name: str
    program: str
    category: str
    named_scope: str
    occurrences: int  # op events (kernels on GPU, iterations in a loop) over all devices
    devices: int
    total_time_s: float
    self_time_s: float  # total minus time inside other op events nested in it (same line); control ops: their body's
    avg_time_s: float  # per event
    median_time_s: float  # per event; robust to a few slow outliers (a noisy host, a first execution)
    min_time_s: float  # per event
    max_time_s: float  # per event
    pct_device_time: float  # of all devices' busy time
    executions: int = 0  # program executions it ran in, over all devices (cut ones left out)
    median_execution_s: float = 0.0  # per execution: the sum of its events in one program execution on one device
    mean_execution_s: float = 0.0  # the mean of the same sums (over the same, uncut executions)
    min_execution_s: float = 0.0
    max_execution_s: float = 0.0
    in_steps_s: float | None = None  # its events' time inside the steps, over devices (None: the trace has no steps)
    in_steps_occurrences: int | None = None  # its events inside the steps


@dataclass(frozen=True)
class Gap:
    device: int
    start_s: float  # from the start of the capture
    duration_s: float
    before: str  # op that ended just before
    after: str  # op that started just after
    host: str = ""  # what the host's Python was doing meanwhile (innermost frame covering the gap)


@dataclass(frozen=True)
class TransferTime:
    """One program's host↔device transfers on one device: its op events of category ``host transfer`` (memcpy and
    memset through the host, XLA's host-offload copies to and from ``S(5)``, infeed/outfeed), those inside a step
    where the trace has steps."""

    program: str
    time_s: float  # the union of its transfer events
    exposed_s: float  # of which no other op event of the device ran alongside (not hidden under kernels)
    events: int
    #: (op name, bytes its events moved) per transfer op, where the trace records every one's bytes
    #: (EventTable.copy_bytes: Nsight's memcpy rows); () where it does not (an XSpace's, priced from the HLO)
    copy_bytes: tuple[tuple[str, float], ...] = ()
    pinned_events: int = 0  # of its events, those from page-locked host memory (EventTable.host_pinned)
    pageable_events: int = 0  # and those from pageable host memory (the rest: not said)


@dataclass(frozen=True)
class DeviceTime:
    device: int
    host: str
    busy_s: float  # union of its op intervals
    window_s: float  # first op start to last op end
    idle_s: float
    op_time_s: float  # plain sum of op durations (≥ busy when ops overlap)
    events: int
    largest_gaps: tuple[Gap, ...]
    transfers: tuple[TransferTime, ...] = ()  # per program with any (a device's; not a host's devices together)
    #: what the host's Python was doing while the device ran no op (:func:`host_in_gaps`): (frame, seconds of the
    #: device's gaps it covers, the script's frame it was called from or ""), most first, "" for gaps no frame
    #: covers; () where the trace has no Python frames
    host_in_gaps: tuple[tuple[str, float, str], ...] = ()


@dataclass
class OpStats:
    op_stats: list[OpStat]
    by_program_s: dict[str, float]
    by_scope_s: dict[str, float]  # full named scope → time
    by_scope_prefix_s: dict[str, float]  # every prefix ("layer_0", "layer_0/ffn") → time
    by_category_s: dict[str, float]
    devices: list[DeviceTime]
    steps: StepSummary | None
    platform: str
    device_kind: str
    notes: list[str] = field(default_factory=list)
    in_window: dict = field(default_factory=dict)  # compilations and cache misses during the capture window
    hosts: list[DeviceTime] = field(default_factory=list)  # all devices of a host together (device = -1)
    host_steps: HostSteps | None = None  # several hosts: the host × step table
    unran: tuple[Unran, ...] = ()  # programs the host dispatched more often than the devices ran them in the trace
    step_choice: StepChoice | None = None  # the step program and why (rooflens.trace.steps)
    # per program: its ops' self time inside the steps (s, summed over devices): the step's time by program
    in_steps_by_program_s: dict[str, float] = field(default_factory=dict)
    # the devices' busy time inside the steps: per device and step the union of its op events there, summed (s);
    # the step less it is the time the device runs no op. None: no steps, or not measured (a pod's aggregates)
    in_steps_busy_s: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def line_groups(t) -> np.ndarray:
    """One integer per timeline (host, device, line): events nest only within one."""
    key = row_key(t.host, t.device, t.line)[0]  # dense: grouped by a table, not a hash
    return key if key is not None else (t.host.astype(np.int64) << 40) + (t.device.astype(np.int64) + 1 << 20) + t.line


def self_times_ps(t, group: np.ndarray | None = None) -> np.ndarray:
    """Each event's duration minus its direct children's (XProf's self time), in ps: children are the
    events nested in it on the same timeline (``group``; default :func:`line_groups`), wholly inside its
    span as XProf's ``Timespan::Includes`` asks: an event that starts before another ends and ends after it
    (a Chrome trace's µs rounding makes such 1-µs overlaps) is its neighbour, not its child."""
    start, dur = t.start_ps, t.dur_ps
    codes, inv = unique_inverse(line_groups(t) if group is None else group)
    del group  # the walk below compares timelines by their dense numbers: one event-sized key less at the peak
    if is_sorted(start):  # the table's own order (by start): grouped in O(n)
        order = timeline_order(inv, len(codes), start, dur)
    else:
        order = np.lexsort((-dur, start, inv))
    return _self_times_sorted(start, dur, inv, order)


@njit(cache=True, nogil=True)
def _self_times_sorted(start, dur, group, order):
    # one event-sized array made here, the result (an 18 M-event trace's peak is in these stats): the stack of
    # open events grows as deep as they nest (here, between walks: an array bound anew inside the walk's loop made
    # numba count references on every event), ends are summed as they are needed, the clamp is in place
    self_t = dur.copy()
    stack = np.empty(max(1, min(len(order), 1024)), np.int64)
    k, depth = 0, 0
    while True:
        k, depth = _nest_until_full(start, dur, group, order, self_t, stack, k, depth)
        if k >= len(order):
            break
        deeper = np.empty(2 * len(stack), np.int64)
        deeper[:depth] = stack[:depth]
        stack = deeper
    for k in range(len(self_t)):
        if self_t[k] < 0:
            self_t[k] = 0
    return self_t


@njit(cache=True, nogil=True)
def _nest_until_full(start, dur, group, order, self_t, stack, k, depth):
    """:func:`_self_times_sorted`'s walk from ``order[k]`` (``depth`` events open on ``stack``) until the events end
    or the stack is full; returns where it stopped and the depth."""
    while k < len(order):
        if depth == len(stack):
            return k, depth
        i = order[k]
        end_i = start[i] + dur[i]
        while depth:
            top = stack[depth - 1]
            end_top = start[top] + dur[top]
            if group[top] == group[i] and end_top > start[i] and end_top >= end_i:
                break
            depth -= 1
        if depth:
            self_t[stack[depth - 1]] -= dur[i]
        stack[depth] = i
        depth += 1
        k += 1
    return k, depth


@plain_twin(_self_times_sorted, 200_000)  # a small trace's events: walked before numba would have started
def _self_times_plain(start, dur, group, order):
    s, d, g = start.tolist(), dur.tolist(), group.tolist()
    e = [a + b for a, b in zip(s, d)]
    self_t = list(d)
    stack: list[int] = []
    for i in order.tolist():
        while stack and (g[stack[-1]] != g[i] or e[stack[-1]] <= s[i] or e[stack[-1]] < e[i]):
            stack.pop()
        if stack:
            self_t[stack[-1]] -= e[i] - s[i]
        stack.append(i)
    return np.maximum(np.asarray(self_t, np.int64), 0)


#: ops that do no work of their own: a loop, a branch, a call run the ops of the computations they call
CONTROL_OPCODES = frozenset({"while", "conditional", "call"})


def control_rows(t, info: dict) -> np.ndarray:
    """The events of control ops (``info``: (program, op) → OpInfo, whose opcode the HLO gives, or the op's name
    when the trace has no HLO: ``while.5``)."""
    width = len(t.names) + 1
    hits = [p * width + n for p, n in t.pairs().tolist()
            if (oi := info.get((t.programs[p], t.names[n]))) is not None and oi.opcode in CONTROL_OPCODES]
    if not hits:
        return np.zeros(0, np.int64)
    lut = np.zeros(len(t.programs) * width, bool)
    lut[hits] = True
    return np.flatnonzero(lut[t.program.astype(np.int64) * width + t.name])


def control_self_ps(t, rows: np.ndarray) -> np.ndarray:
    """The self time (ps) of control-op events ``rows``: its span less the part of it covered by the other op
    events of its program on its device that start inside it. A loop's body runs inside its span, on its line
    (TPU, CPU: nested, XProf's rule already subtracts them) or on other lines and streams (GPU kernels, CPU
    worker threads, a collective's stream), where nesting cannot be seen: so the body is found by time, on the
    device, not by line. A control op has no work of its own: what is left is the loop's own overhead."""
    if not len(rows):
        return np.zeros(0, np.int64)
    group = row_key(t.host, t.device, t.program)[0]
    if group is None:
        group = unique_rows(t.host, t.device, t.program)[1]
    mine = np.isin(group, unique_values(group[rows]))  # the (host, device, program)s that run a control op
    sel = np.flatnonzero(mine)
    codes, inv = unique_inverse(group[sel])
    start, dur = t.start_ps[sel], t.dur_ps[sel]
    order = timeline_order(inv, len(codes), start, dur) if is_sorted(start) else np.lexsort((-dur, start, inv))
    place = np.empty(len(sel), np.int64)
    place[order] = np.arange(len(sel))
    targets = place[np.searchsorted(sel, rows)]
    covered = _covered_after(order, inv, start, start + dur, targets)
    return np.maximum(t.dur_ps[rows] - covered, 0)


@njit(cache=True, nogil=True)
def _covered_after(order, group, start, end, targets):
    """For each target (a position in ``order``: events grouped, in time order, the longest first of those
    starting together), the length of its span covered by the events after it that start inside it."""
    out = np.zeros(len(targets), np.int64)
    for k in range(len(targets)):
        p = targets[k]
        i = order[p]
        sc, ec, g = start[i], end[i], group[i]
        covered = 0
        cs = sc
        ce = sc
        q = p + 1
        while q < len(order):
            j = order[q]
            if group[j] != g or start[j] >= ec:
                break
            s, e = start[j], min(end[j], ec)
            if s > ce:
                covered += ce - cs
                cs, ce = s, e
            elif e > ce:
                ce = e
            q += 1
        out[k] = covered + ce - cs
    return out


@plain_twin(_covered_after, 200_000)
def _covered_after_plain(order, group, start, end, targets):
    order_l, g_l, s_l, e_l = order.tolist(), group.tolist(), start.tolist(), end.tolist()
    out = []
    for p in targets.tolist():
        i = order_l[p]
        sc, ec, g = s_l[i], e_l[i], g_l[i]
        covered, cs, ce = 0, sc, sc
        for j in order_l[p + 1:]:
            if g_l[j] != g or s_l[j] >= ec:
                break
            s, e = s_l[j], min(e_l[j], ec)
            if s > ce:
                covered += ce - cs
                cs, ce = s, e
            elif e > ce:
                ce = e
        out.append(covered + ce - cs)
    return np.asarray(out, np.int64)


def op_self_ps(profile: Profile) -> np.ndarray:
    """Every event's self time (ps): XProf's rule (:func:`self_times_ps`, nesting on its line), and for control
    ops their span less their body's time on the device (:func:`control_self_ps`)."""
    t = profile.table
    out = self_times_ps(t)
    rows = control_rows(t, profile.op_info)
    if len(rows):
        out = out.copy()
        out[rows] = control_self_ps(t, rows)
    return out


def execution_sums(t, inv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per (op, host, device, program execution) in which the op ran: its op (``inv``: each event's op group)
    and the sum of its events' durations there (ps, float), by op; executions the trace's end cut short left
    out (their sums are partial)."""
    from rooflens.trace.warmup import cut_executions, execution_index

    idx, ran = execution_index(t), ~cut_executions(t)
    if len(t):  # few enough possible keys: a table of sums by key, made in one pass (no key, no inverse)
        spans = [(int(c.min()), int(c.max()) - int(c.min()) + 1) for c in (inv, t.host, t.device, idx)]
        n_keys = int(np.prod([span for _, span in spans], dtype=object))
        if dense(n_keys, len(t)):
            at, sums = _sums_by_key(inv, t.host, t.device, idx, ran, t.dur_ps,
                                    np.asarray([lo for lo, _ in spans], np.int64),
                                    np.asarray([span for _, span in spans], np.int64), n_keys)
            return spans[0][0] + at // (n_keys // spans[0][1]), sums
    # too many possible keys for a table: the keys of the executions that ran, grouped
    every = bool(ran.all())
    cols = (inv, t.host, t.device, idx) if every else (inv[ran], t.host[ran], t.device[ran], idx[ran])
    dur = t.dur_ps if every else t.dur_ps[ran]
    key, n_keys = row_key(*cols)
    if key is None:
        rows, kinv = unique_rows(*cols)
        return rows[:, 0], weighted_sums(kinv, dur, len(rows), 1.0)
    lo, width = int(cols[0].min()), int(cols[0].max()) - int(cols[0].min()) + 1
    below = n_keys // width  # the op is the key's leading digit: key // below, less its minimum
    keys, kinv = unique_inverse(key)  # this key, not unique_rows' own of the same columns (an event-sized array)
    del key
    return lo + keys // below, weighted_sums(kinv, dur, len(keys), 1.0)


@njit(cache=True, nogil=True)
def _sums_by_key(op, host, device, run, ran, dur_ps, lo, span, n_keys):
    """:func:`execution_sums` by a table: each event that ``ran`` adds its duration (made float64, in event order,
    as the sums by inverse add them) to its (op, host, device, run) key's slot; the keys that have an event, in
    order, and their sums. 9 bytes a possible key, where the key and its inverse were 16 bytes an event and the
    grouping's table 8 a key (a 1 GB CPU trace's peak)."""
    sums = np.zeros(n_keys)
    seen = np.zeros(n_keys, np.bool_)
    for i in range(len(op)):
        if ran[i]:
            k = (((np.int64(op[i]) - lo[0]) * span[1] + (np.int64(host[i]) - lo[1])) * span[2]
                 + (np.int64(device[i]) - lo[2])) * span[3] + (np.int64(run[i]) - lo[3])
            sums[k] += np.float64(dur_ps[i])
            seen[k] = True
    at = np.flatnonzero(seen)
    return at, sums[at]


@plain_twin(_sums_by_key, NUMPY_TWIN)
def _sums_by_key_np(op, host, device, run, ran, dur_ps, lo, span, n_keys):
    key = (((op[ran].astype(np.int64) - lo[0]) * span[1] + (host[ran] - lo[1])) * span[2]
           + (device[ran] - lo[2])) * span[3] + (run[ran] - lo[3])
    at = np.flatnonzero(np.bincount(key, minlength=n_keys))
    return at, np.bincount(key, weights=dur_ps[ran], minlength=n_keys)[at]


def execution_extremes(op: np.ndarray, sums: np.ndarray, m: int) -> tuple[np.ndarray, ...]:
    """Per op of ``m``: its executions, and the median, smallest and largest of its sums (:func:`execution_sums`;
    zeros for an op with none)."""
    cnt = np.bincount(op, minlength=m)
    ranked = grouped_sorted(op, m, sums)
    first = np.concatenate([[0], np.cumsum(cnt)[:-1]]).astype(np.int64)
    has = cnt > 0
    lo, hi = np.where(has, first, 0), np.where(has, first + cnt - 1, 0)
    take = (lambda k: np.where(has, ranked[k], 0.0)) if len(ranked) else (lambda k: np.zeros(m))
    median = (take(np.where(has, first + (cnt - 1) // 2, 0)) + take(np.where(has, first + cnt // 2, 0))) / 2
    return cnt, median, take(lo), take(hi)


def busy_union(start: np.ndarray, end: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Union length of intervals, and the merged intervals (starts, ends), for sorted starts."""
    if not len(start):
        return 0.0, start, end
    _, m_start, m_end = _merged(start, end)
    return float((m_end - m_start).sum()), m_start, m_end


def _merged(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Intervals (sorted starts, at least one) merged where they overlap: each merged interval's first position, its
    start and its end (the largest end so far)."""
    run_end = np.maximum.accumulate(end)
    new = np.empty(len(start), dtype=bool)
    new[0] = True
    new[1:] = start[1:] > run_end[:-1]
    at = np.flatnonzero(new)
    return at, start[at], np.append(run_end[at[1:] - 1], run_end[-1])


def busy_together_ps(t, skip: np.ndarray | None) -> tuple[int, int]:
    """(each device's busy time, summed; the busy time of all devices as one), ps: the union of the op events of
    each device, and of all, leaving out the events whose (program, op) ``skip[program, name]`` marks (None: none;
    :func:`category_table`). One walk in start order, nothing the size of the table made (an 18 M-event trace's
    copies were its report's peak). Remembered for the same table and ``skip`` (:mod:`rooflens.trace.memo`)."""
    if not len(t):
        return 0, 0
    from rooflens.trace import memo

    if skip is None:
        skip = np.zeros((max(len(t.programs), 1), len(t.names) + 1), bool)
    skip = np.ascontiguousarray(skip, dtype=bool)

    def compute() -> tuple[int, int]:
        order = np.zeros(0, np.int64) if is_sorted(t.start_ps) else np.argsort(t.start_ps, kind="stable")
        per, both = _busy_sums(t.start_ps, t.dur_ps, t.device, t.program, t.name, skip, order)
        return int(per), int(both)

    key = (memo.table_digest(t, steps=False), skip.shape, zlib.crc32(skip.view(np.uint8)))
    return memo.remembered("busy_together", key, len(t), compute)


@njit(cache=True, nogil=True)
def _busy_sums(start, dur, device, program, name, skip, order):
    lo, hi = device.min(), device.max()
    s0 = np.zeros(hi - lo + 2, np.int64)  # per device (the last: all of them), the merged interval now open
    e0 = np.zeros(hi - lo + 2, np.int64)
    open_ = np.zeros(hi - lo + 2, np.bool_)
    total = np.zeros(hi - lo + 2, np.int64)
    every = hi - lo + 1
    for k in range(len(start)):
        i = order[k] if len(order) else k
        if skip[program[i], name[i]]:
            continue
        s, e = start[i], start[i] + dur[i]
        for d in (device[i] - lo, every):
            if not open_[d]:
                open_[d], s0[d], e0[d] = True, s, e
            elif s > e0[d]:  # a gap: the interval open so far is closed
                total[d] += e0[d] - s0[d]
                s0[d], e0[d] = s, e
            elif e > e0[d]:
                e0[d] = e
    for d in range(len(total)):
        if open_[d]:
            total[d] += e0[d] - s0[d]
    return total[:every].sum(), total[every]


@plain_twin(_busy_sums, NUMPY_TWIN)
def _busy_sums_np(start, dur, device, program, name, skip, order):
    if len(order):
        start, dur, device, program, name = start[order], dur[order], device[order], program[order], name[order]
    keep = ~skip[program, name]
    start, end, dev = start[keep], (start + dur)[keep], device[keep]
    per = sum(int(busy_union(start[dev == d], end[dev == d])[0]) for d in unique_values(dev))
    return per, int(busy_union(start, end)[0])


def host_spans(host_events: list[tuple[str, float, float]]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """A host's Python frames (name, start, end, in their order) as names and two arrays, for :func:`_host_during`."""
    return ([n for n, _, _ in host_events], np.asarray([s for _, s, _ in host_events], np.float64),
            np.asarray([e for _, _, e in host_events], np.float64))


#: rooflens's own modules that run inside a profiled program: the capture package (``rooflens run``'s launcher and
#: what it loads beside it, ``rl.capture`` and ``Session``) and the launcher's other siblings (launch.py's
#: ``_sibling`` loads: trace/manifest.py, units.py)
IN_PROGRAM = ("capture/*.py", "trace/manifest.py", "units.py")


@functools.cache
def own_frames() -> frozenset[tuple[str, str]]:
    """(file name, function) of every function of :data:`IN_PROGRAM`, as JAX's Python tracer names a frame
    (``$stepwindow.py:211 call``: the file's base name, the line it is defined at, the function): a frame of the
    capture's own, not the program's. Read from rooflens's own sources, once, when a gap asks."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out: set[tuple[str, str]] = set()
    for pattern in IN_PROGRAM:
        for path in sorted(root.glob(pattern)):
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"))
            except (OSError, SyntaxError, ValueError):
                continue
            out |= {(path.name, n.name) for n in ast.walk(tree)
                    if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    return frozenset(out)


def _own(frame: str) -> bool:
    """Whether a Python tracer frame (``stepwindow.py:211 call``) is rooflens's own (:func:`own_frames`)."""
    where, _, function = frame.partition(" ")
    return ".py:" in where and (where.split(":", 1)[0], function) in own_frames()


def _host_during(spans: tuple[list[str], np.ndarray, np.ndarray], g0: float, g1: float) -> str:
    """The innermost Python frame that covers most of [g0, g1] (e.g. ``$time sleep``): of the frames before the
    first that starts after g1, the shortest (the first of equals) overlapping at least half of it, the capture's
    own frames passed over (``rooflens run`` counts each jitted call in a frame of its own: the program's frame
    is the one around it)."""
    names, s, e = spans
    if not len(s):
        return ""
    late = s > g1
    stop = int(np.argmax(late)) if late.any() else len(s)
    s, e = s[:stop], e[:stop]
    fits = np.flatnonzero((np.minimum(e, g1) - np.maximum(s, g0)) >= 0.5 * (g1 - g0))
    for k in fits[np.argsort((e - s)[fits], kind="stable")].tolist():
        frame = names[k].lstrip("$")
        if not _own(frame):
            return frame
    return ""


@njit(cache=True, nogil=True)
def merged_of(start, dur, sel):
    """The events ``sel`` (sorted by start) merged into busy intervals: each interval's first position in ``sel``,
    its start and its end (the largest ``start + dur`` so far), in one pass (no event-sized array of their starts,
    ends or running ends: an 18 M-event trace's were a tenth of its report)."""
    n = len(sel)
    at = np.empty(n, np.int64)
    ms = np.empty(n, start.dtype)
    me = np.empty(n, start.dtype)
    k = -1
    run_end = start[0]
    for i in range(n):
        j = sel[i]
        s = start[j]
        e = s + dur[j]
        if k < 0 or s > run_end:
            k += 1
            at[k], ms[k] = i, s
            run_end = e
        elif e > run_end:
            run_end = e
        me[k] = run_end
    return at[:k + 1].copy(), ms[:k + 1].copy(), me[:k + 1].copy()


@plain_twin(merged_of, NUMPY_TWIN)
def _merged_of_np(start, dur, sel):
    s = start[sel]
    return _merged(s, s + dur[sel])


HOST_GAP_MIN_NS = 20_000  # a gap shorter than this is a launch's, not the host's work (the tracer's frames are coarser)
HOST_GAPS_MOST = 2000  # the longest gaps credited to a host frame (each looks through the host's frames once)


@dataclass(frozen=True)
class FrameCodes:
    """A host's Python frames coded once for :func:`host_in_gaps` (a host's devices each ask): the frames in the
    sweep's order (by start, a frame before those it holds), each one's code into ``words`` (its name, ``$``
    stripped), and whether it is the capture's own or of the run's script."""

    start: np.ndarray
    end: np.ndarray
    codes: np.ndarray
    words: list[str]
    own: np.ndarray
    mine: np.ndarray

    @staticmethod
    def of(frames: tuple, script: str = "") -> FrameCodes:
        """``frames`` (:func:`host_spans`); ``script``: the run's script's base name (``train.py``), or ""."""
        names, fs, fe = frames
        code_of: dict[str, int] = {}
        codes = np.fromiter((code_of.setdefault(n, len(code_of)) for n in names), np.int64, len(names))
        words = [n.lstrip("$") for n in code_of]
        order = np.lexsort((fs - fe, fs))
        codes = codes[order]
        own = np.asarray([_own(w) for w in words], bool)[codes]
        mine = np.asarray([bool(script) and w.startswith(script + ":") for w in words], bool)[codes]
        return FrameCodes(fs[order], fe[order], codes, words, own, mine)


def host_in_gaps(frames: FrameCodes, gap_start: np.ndarray, gap_end: np.ndarray) -> tuple[tuple[str, float, str], ...]:
    """The device's gaps (ns) by what the host's Python was doing meanwhile: the gaps of at least HOST_GAP_MIN_NS,
    the HOST_GAPS_MOST longest of them, each credited to the program's innermost frame covering half of it
    (:func:`_frame_in_gaps`; "" where none does, or where the host was inside the capture's code: a frame of its own,
    or one called from it, its poll's ``time.sleep`` or the jitted call it wraps, no work of the program's), and to
    the innermost frame of the run's script covering it, where that is another (a library's frame called from the
    script's ``save_checkpoint``): (frame, seconds, script's frame or ""), summed per pair, most first."""
    if not len(frames.codes) or not len(gap_start):
        return ()
    length = gap_end - gap_start
    keep = np.flatnonzero(length >= HOST_GAP_MIN_NS)
    if len(keep) > HOST_GAPS_MOST:
        keep = np.sort(keep[np.argsort(-length[keep], kind="stable")[:HOST_GAPS_MOST]])
    if not len(keep):
        return ()
    at, at_mine = _frame_in_gaps(frames.start, frames.end, frames.own, frames.mine,
                                 gap_start[keep].astype(np.float64), gap_end[keep].astype(np.float64))
    none = len(frames.words)
    credited = np.where(at >= 0, frames.codes[np.maximum(at, 0)], none)
    caller = np.where((at_mine >= 0) & (at >= 0), frames.codes[np.maximum(at_mine, 0)], none)
    caller[caller == credited] = none  # the frame is the script's own: no caller to name
    sums = np.bincount(credited * (none + 1) + caller, weights=length[keep].astype(np.float64),
                       minlength=(none + 1) ** 2) * 1e-9
    word = [*frames.words, ""]
    by = [(word[k // (none + 1)], float(sums[k]), word[k % (none + 1)]) for k in np.flatnonzero(sums).tolist()]
    return tuple(sorted(by, key=lambda e: (-e[1], e[0], e[2])))


@njit(cache=True, nogil=True)
def _frame_in_gaps(f_start, f_end, own, mine, g0, g1):
    """For each gap [g0, g1] (disjoint, in order), the frame (an index into the frames, sorted by start, a frame
    before those it holds) it is credited to, or -1, and the innermost frame covering half of it among ``mine``, or
    -1, in one sweep: a frame that overlaps half of a gap holds its midpoint, so the candidates are the call stack at
    the midpoint, innermost first. The innermost one covering half of the gap is credited unless it or the next one
    out is the capture's own (``own``)."""
    n, nf = len(g0), len(f_start)
    out = np.full(n, -1, np.int64)
    out_mine = np.full(n, -1, np.int64)
    stack = np.empty(nf + 1, np.int64)
    depth = 0
    j = 0
    for i in range(n):
        mid = 0.5 * (g0[i] + g1[i])
        half = 0.5 * (g1[i] - g0[i])
        while j < nf and f_start[j] <= mid:
            while depth > 0 and f_end[stack[depth - 1]] < f_start[j]:
                depth -= 1
            stack[depth] = j
            depth += 1
            j += 1
        while depth > 0 and f_end[stack[depth - 1]] < mid:
            depth -= 1
        first = -1
        seen = 0  # covering frames met so far, innermost first
        for k in range(depth - 1, -1, -1):
            q = stack[k]
            if f_end[q] < mid or min(f_end[q], g1[i]) - max(f_start[q], g0[i]) < half:
                continue
            if mine[q] and out_mine[i] < 0:
                out_mine[i] = q
            if seen == 0:
                if not own[q]:
                    first = q
            elif seen == 1 and first >= 0 and own[q]:
                first = -1
            seen += 1
        out[i] = first
    return out, out_mine


@plain_twin(_frame_in_gaps, 200_000)  # a window's frames: swept before numba would have started
def _frame_in_gaps_plain(f_start, f_end, own, mine, g0, g1):
    fs, fe, ow, mi = f_start.tolist(), f_end.tolist(), own.tolist(), mine.tolist()
    out, out_mine, stack, j = [], [], [], 0
    for a, b in zip(g0.tolist(), g1.tolist()):
        mid, half = 0.5 * (a + b), 0.5 * (b - a)
        while j < len(fs) and fs[j] <= mid:
            while stack and fe[stack[-1]] < fs[j]:
                stack.pop()
            stack.append(j)
            j += 1
        while stack and fe[stack[-1]] < mid:
            stack.pop()
        covering = [q for q in reversed(stack) if fe[q] >= mid and min(fe[q], b) - max(fs[q], a) >= half]
        first = covering[0] if covering and not ow[covering[0]] else -1
        if first >= 0 and len(covering) > 1 and ow[covering[1]]:
            first = -1
        out.append(first)
        out_mine.append(next((q for q in covering if mi[q]), -1))
    return np.asarray(out, np.int64), np.asarray(out_mine, np.int64)


def _device_time(t, start, dur, sel: np.ndarray, dev: int, t0: float, n_gaps: int,
                 host_events: tuple | None = None, transfers: tuple[TransferTime, ...] = (),
                 in_steps: np.ndarray | None = None, coded: FrameCodes | None = None) -> DeviceTime:
    """Busy (union of op intervals), idle and the largest gaps of the events ``sel`` (sorted by start); the host's
    frames in its gaps, those between two events inside the steps where ``in_steps`` (per event) is given."""
    at, ms, me = merged_of(start, dur, sel) if len(sel) else (sel, start[:0], start[:0])
    busy = float((me - ms).sum()) if len(ms) else 0.0
    window = float(me[-1] - ms[0]) if len(ms) else 0.0  # the last running end is the largest end
    gaps = []
    frames = host_events or host_spans([])
    if len(ms) > 1:
        g = ms[1:] - me[:-1]
        for k in np.argsort(-g)[:n_gaps]:
            if g[k] <= 0:
                break
            # the op that ended the busy interval: the first of it whose end is its end (none before it can be)
            lo, nxt = int(at[k]), int(at[k + 1])
            rows = sel[lo:nxt]
            before = rows[int(np.argmax(start[rows] + dur[rows] == me[k]))]
            after = sel[nxt] if nxt < len(sel) else before
            gaps.append(Gap(dev, float(me[k] - t0) * 1e-9, float(g[k]) * 1e-9, t.names[t.name[before]],
                            t.names[t.name[after]], _host_during(frames, float(me[k]), float(ms[k + 1]))))
    in_host: tuple[tuple[str, float, str], ...] = ()
    if coded is not None and len(coded.codes) and len(ms) > 1:
        inside = np.ones(len(ms) - 1, bool)
        if in_steps is not None:  # both ends in a step: the step's own idle, not the set-up's or the warm-up's
            first = in_steps[sel[at]]
            last = np.zeros(len(ms), bool)  # the interval's events: is its last (by start) in a step
            last[:-1] = in_steps[sel[at[1:] - 1]]
            last[-1] = in_steps[sel[-1]]
            inside = last[:-1] & first[1:]
        in_host = host_in_gaps(coded, me[:-1][inside], ms[1:][inside])
    host = t.hosts[int(t.host[sel[0]])] if len(sel) else ""
    every = len(sel) == len(dur)  # all events (one host's, of a one-host trace): no copy
    return DeviceTime(dev, host, busy * 1e-9, window * 1e-9, (window - busy) * 1e-9,
                      float((dur if every else dur[sel]).sum()) * 1e-9,
                      len(sel), tuple(gaps), transfers, in_host)


def category_table(t, info: dict, category: str) -> np.ndarray | None:
    """A table by (program code, name code) of the ops of ``category`` (``info``: (program, op) → OpInfo; a pod's may
    name ops this table lacks), to be looked up per event; None when the table holds none."""
    wanted = {key for key, oi in info.items() if oi.category == category}
    in_programs, in_names = {p for p, _ in wanted}, {n for _, n in wanted}
    programs = [i for i, w in enumerate(t.programs) if w in in_programs]
    names = [i for i, w in enumerate(t.names) if w in in_names]
    lut = np.zeros((max(len(t.programs), 1), len(t.names) + 1), bool)
    for p in programs:
        for n in names:
            lut[p, n] = (t.programs[p], t.names[n]) in wanted
    return lut if lut.any() else None


def transfer_mask(t, info: dict) -> np.ndarray:
    """Which events are host↔device transfers (category ``host transfer``): no event-sized work when there is none."""
    lut = category_table(t, info, "host transfer")
    return np.zeros(len(t), bool) if lut is None else lut[t.program, t.name]


def covered_ns(a_start: np.ndarray, a_end: np.ndarray, b_start: np.ndarray, b_end: np.ndarray) -> float:
    """The length of the intersection of two sets of disjoint intervals, each sorted (``busy_union``'s merged
    intervals): for each interval of ``a``, how much of ``b`` lies before its end less before its start."""
    if not len(a_start) or not len(b_start):
        return 0.0
    from rooflens.trace.warmup import covered_below

    b = np.stack([b_start, b_end], axis=1)
    return float((covered_below(a_end, b) - covered_below(a_start, b)).sum())


def _transfer_times(t, start, dur, sel: np.ndarray, transfer: np.ndarray, counted: np.ndarray
                    ) -> tuple[TransferTime, ...]:
    """Per program, the transfers ``counted`` among one device's events ``sel`` (sorted by start): the union of
    their spans, and the part of it no other (non-transfer) event of the device covers."""
    mine = counted[sel]
    if not mine.any():
        return ()
    s = start[sel]
    e = s + dur[sel]
    other = ~transfer[sel]
    _, os_, oe = busy_union(s[other], e[other])
    program = t.program[sel]
    out = []
    for p in unique_values(program[mine]).tolist():
        these = mine & (program == p)
        time_ns, ms, me = busy_union(s[these], e[these])
        exposed = max(time_ns - covered_ns(ms, me, os_, oe), 0.0)
        rows = sel[these]
        moved: tuple[tuple[str, float], ...] = ()
        if t.copy_bytes is not None and (t.copy_bytes[rows] >= 0).all():
            names, inv = np.unique(t.name[rows], return_inverse=True)
            per = np.bincount(inv.reshape(-1), weights=t.copy_bytes[rows].astype(np.float64), minlength=len(names))
            moved = tuple((t.names[n], float(b)) for n, b in zip(names.tolist(), per.tolist()))
        pinned = t.host_pinned[rows] if t.host_pinned is not None else np.zeros(0, np.int8)
        out.append(TransferTime(t.programs[p], time_ns * 1e-9, exposed * 1e-9, int(these.sum()), moved,
                                int((pinned == 1).sum()), int((pinned == 0).sum())))
    return tuple(out)


def op_stats(profile: Profile, gaps_per_device: int = 5) -> OpStats:
    """Per-op stats, device times and gaps, steps, the host × step table of a profile; remembered for the
    same table and inputs (:mod:`rooflens.trace.memo`), so a second report of a large trace skips them."""
    from rooflens.trace import memo

    if profile.reduced is not None:  # a pod merged from its hosts' aggregates: computed by the merge
        return profile.reduced.stats
    t = profile.table
    key = (memo.table_digest(t), gaps_per_device, memo.digest_of(
        profile.steps, profile.platform, profile.device_kind, profile.notes, profile.unran,
        profile.metadata.get("in_window"),
        sorted(profile.hlo_texts.items()), sorted(t.hlo_text.items()), sorted(t.op_meta.items(), key=repr),
        profile.host_events, sorted(profile.host_events_of.items()), profile.step_choice, profile.marked_steps,
        script_name(profile)))
    return memo.remembered("op_stats", key, len(t), lambda: _op_stats(profile, gaps_per_device))


def script_name(profile: Profile) -> str:
    """The base name of the script a ``rooflens run`` ran (``train.py``), as JAX's Python tracer names its frames'
    files; "" when the profile does not say (a trace of the script's own, a module run)."""
    import os

    return os.path.basename(profile.manifest.script or "")


def device_times(profile: Profile, gaps_per_device: int) -> tuple[list[DeviceTime], list[DeviceTime]]:
    """Per device: busy (union), idle, gaps, host↔device transfers (inside the steps where there are steps: the
    set-up's uploads are not the step's); and per host with all its devices together (device -1)."""
    t = profile.table
    # ends are summed per device as each is walked (start + dur in ns, not the table's end_ns: the gaps' ties are
    # ranked by these sums), and the devices' groups are one order: at an 18 M-event trace's peak, no event-sized
    # column of ends or keys is held
    start, dur = t.start_ns, t.dur_ns
    t0 = float(start.min()) if len(t) else 0.0
    by_dev = groups_of(row_key(t.host, t.device)[0], dense=True)  # in (host, device) order: each group's own

    spans: dict[int, tuple] = {}

    def frames(h: int) -> tuple:  # the host's own Python frames (a profile built by hand may lack the split)
        if h not in spans:
            spans[h] = host_spans(profile.host_events_of.get(t.hosts[h], profile.host_events if len(t.hosts) == 1
                                                            else []))
        return spans[h]

    transfer = transfer_mask(t, profile.op_info) if len(t) else np.zeros(0, bool)
    counted = transfer & (t.step >= 0) if profile.steps else transfer
    script = script_name(profile)
    coded = {h: FrameCodes.of(frames(h), script) for h in range(len(t.hosts)) if len(frames(h)[0])}
    in_steps = (t.step >= 0) if profile.steps and coded else None
    devices = [_device_time(t, start, dur, sel, int(d), t0, gaps_per_device, frames(int(h)),
                            _transfer_times(t, start, dur, sel, transfer, counted) if counted.any() else (), in_steps,
                            coded.get(int(h)))
               for h, d, sel in ((t.host[g[0]], t.device[g[0]], g) for g in by_dev)]
    del by_dev
    hosts = [_device_time(t, start, dur, sel, -1, t0, gaps_per_device, frames(int(t.host[sel[0]])), (), in_steps,
                          coded.get(int(t.host[sel[0]])))
             for sel in groups_of(t.host)]
    return devices, hosts


def _op_stats(profile: Profile, gaps_per_device: int) -> OpStats:
    t = profile.table
    dur = t.dur_ns
    self_ps = self_times_ps(t)

    # per (program, op)
    # (each event-sized array let go once used: an 18 M-event trace's are 50-150 MB each, and the peak is their sum)
    uniq, inv = unique_inverse(t.program.astype(np.int64) * (len(t.names) + 1) + t.name)
    tot = weighted_sums(inv, dur, len(uniq), 1.0)
    selft = weighted_sums(inv, self_ps, len(uniq), 1e-3)
    cnt = np.bincount(inv)
    medians, mins, maxs = group_medians(inv, len(uniq), dur)
    ndev = _devices_per_group(inv, len(uniq), t.device)
    run_op, run_sums = execution_sums(t, inv)
    runs, run_med, run_min, run_max = execution_extremes(run_op, run_sums, len(uniq))
    run_tot = np.bincount(run_op, weights=run_sums, minlength=len(uniq))  # ps: the mean's numerator
    del run_op, run_sums
    info = profile.op_info  # after the grouping: a caller may be parsing the HLO on another thread
    ctrl = control_rows(t, info)
    if len(ctrl):  # a control op's self time: its span less its body's, wherever the body ran
        selft += np.bincount(inv[ctrl], weights=(control_self_ps(t, ctrl) - self_ps[ctrl]) * 1e-3,
                             minlength=len(uniq))
    del self_ps
    devices, hosts = device_times(profile, gaps_per_device)  # its transfers: by the ops' categories
    total_busy_s = sum(d.busy_s for d in devices) or 1.0
    inside, inside_n = in_steps_sums(t, inv, len(uniq)) if profile.steps and len(t) else (None, None)
    stats = []
    for k, u in enumerate(uniq):
        program, name = t.programs[int(u // (len(t.names) + 1))], t.names[int(u % (len(t.names) + 1))]
        stats.append(op_stat(info.get((program, name)), program, name, int(cnt[k]), int(ndev[k]), float(tot[k]),
                             float(selft[k]), float(medians[k]), float(mins[k]), float(maxs[k]), total_busy_s,
                             (int(runs[k]), float(run_med[k]) * 1e-3, float(run_min[k]) * 1e-3,
                              float(run_max[k]) * 1e-3), float(run_tot[k]) * 1e-3,
                             None if inside is None else (float(inside[k]) * 1e-3, int(inside_n[k]))))
    cat_of_op = np.asarray([s.category for s in stats] or ["unknown"], dtype=object)  # in the order of uniq
    return stats_of(profile, stats, devices, hosts,
                    host_steps(profile, cat_of_op[inv]) if len(t.hosts) > 1 else None, in_steps_by_program(stats),
                    steps_busy_ns(t) * 1e-9 if inside is not None and not shares_cores(profile, len(devices)) else None)


def shares_cores(profile: Profile, devices: int) -> bool:
    """Several devices of a CPU (forced host devices): they run on the same cores, so one device's idle time is
    not the machine's; its idle is judged for the CPU as a whole (rooflens.trace.idle), not measured per device."""
    return profile.platform == "cpu" and devices > 1


def in_steps_sums(t, inv: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Per op (``inv``: each event's op among ``m``): its events' time (ps) and number inside the steps."""
    return _in_steps_sums(t.step, inv, t.dur_ps, m)


@njit(cache=True, nogil=True)
def _in_steps_sums(step, inv, dur_ps, m):
    # one pass, no event-sized copy (the selections of ops and times inside the steps were a 1 GB CPU trace's peak);
    # the times summed in float64 in event order, as bincount's weights are
    total = np.zeros(m)
    count = np.zeros(m, np.int64)
    for i in range(len(step)):
        if step[i] >= 0:
            total[inv[i]] += np.float64(dur_ps[i])
            count[inv[i]] += 1
    return total, count


@plain_twin(_in_steps_sums, NUMPY_TWIN)
def _in_steps_sums_np(step, inv, dur_ps, m):
    inside = step >= 0
    return (np.bincount(inv[inside], weights=dur_ps[inside], minlength=m),
            np.bincount(inv[inside], minlength=m).astype(np.int64))


def in_steps_by_program(stats: list[OpStat]) -> dict[str, float]:
    """Per program, its ops' self time inside the steps: each op's self time in the share of its time that lies
    inside them (empty without steps)."""
    out: dict[str, float] = {}
    for st in stats:
        if st.in_steps_s and st.total_time_s > 0:
            out[st.program] = out.get(st.program, 0.0) + st.self_time_s * min(st.in_steps_s / st.total_time_s, 1.0)
    return out


def steps_busy_ns(t) -> float:
    """The devices' busy time inside the steps (ns): for each device and step, the union of its op events in
    that step, summed. Ops that ran at once (XLA:CPU's threads, several GPU streams, a loop and its body)
    count once. One union over all of them: each (device, step) group is moved to its own stretch of the
    time axis, so no two groups' intervals can touch."""
    sel = np.flatnonzero(t.step >= 0)
    if not len(sel):
        return 0.0
    keys, group = unique_rows(t.host[sel], t.device[sel], t.step[sel])
    start = t.start_ns[sel].astype(np.float64)
    # by group, then start: the table's own order is by start, so grouping it in O(n) keeps that order within each
    # group (a lexsort of a 6 M-event table's took 1.2 s)
    order = grouped_order(group, len(keys)) if is_sorted(t.start_ps) else np.lexsort((start, group))
    group, start = group[order], start[order]
    end = start + t.dur_ns[sel][order]
    first = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    # each group from 0, after the ones before it: offsets stay as small as the steps' total, so ns stay exact
    lo = np.minimum.reduceat(start, first)
    span = np.maximum.reduceat(end, first) - lo + 1.0
    at = np.r_[0.0, np.cumsum(span)[:-1]] - lo
    shift = np.repeat(at, np.diff(np.r_[first, len(group)]))
    return busy_union(start + shift, end + shift)[0]


def op_stat(info, program: str, name: str, count: int, devices: int, total_ns: float, self_ns: float,
            median_ns: float, min_ns: float, max_ns: float, total_busy_s: float,
            executions: tuple[int, float, float, float] = (0, 0.0, 0.0, 0.0),
            run_total_ns: float | None = None, in_steps: tuple[float, int] | None = None) -> OpStat:
    """One op's stat from its measured sums and extremes in ns (``info``: its OpInfo, None when unknown);
    ``executions``: its executions and the median, smallest and largest of its time in one (ns);
    ``run_total_ns``: its time summed over those executions (None: its total, no execution cut); ``in_steps``:
    its events' time (ns) and number inside the steps (None: no steps)."""
    runs, run_median_ns, run_min_ns, run_max_ns = executions
    run_total = total_ns if run_total_ns is None else run_total_ns
    return OpStat(name=name, program=program, category=info.category if info else "unknown",
                  named_scope=info.named_scope if info else "", occurrences=count, devices=devices,
                  total_time_s=total_ns * 1e-9, self_time_s=self_ns * 1e-9, avg_time_s=(total_ns / count) * 1e-9,
                  median_time_s=median_ns * 1e-9, min_time_s=min_ns * 1e-9, max_time_s=max_ns * 1e-9,
                  pct_device_time=100.0 * self_ns * 1e-9 / total_busy_s, executions=runs,
                  median_execution_s=run_median_ns * 1e-9, min_execution_s=run_min_ns * 1e-9,
                  mean_execution_s=run_total / runs * 1e-9 if runs else 0.0,
                  max_execution_s=run_max_ns * 1e-9,
                  in_steps_s=None if in_steps is None else in_steps[0] * 1e-9,
                  in_steps_occurrences=None if in_steps is None else in_steps[1])


def stats_of(profile: Profile, stats: list[OpStat], devices: list[DeviceTime], hosts: list[DeviceTime],
             host_table: HostSteps | None, in_steps: dict[str, float] | None = None,
             busy_in_steps_s: float | None = None) -> OpStats:
    """The op stats of a profile from its ops' stats (in any order), device and host times and host × step table:
    the ops by self time, and their totals by program, scope, scope prefix and category."""
    stats = sorted(stats, key=lambda s: -s.self_time_s)

    def totals(keyf) -> dict[str, float]:
        out: dict[str, float] = {}
        for s in stats:
            k = keyf(s)
            out[k] = out.get(k, 0.0) + s.self_time_s
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    prefix: dict[str, float] = {}
    for s in stats:
        parts = [p for p in s.named_scope.split("/") if p]
        for d in range(1, len(parts) + 1):
            p = "/".join(parts[:d])
            prefix[p] = prefix.get(p, 0.0) + s.self_time_s
    return OpStats(
        host_steps=host_table, op_stats=stats, by_program_s=totals(lambda s: s.program),
        by_scope_s=totals(lambda s: s.named_scope or "(none)"),
        by_scope_prefix_s=dict(sorted(prefix.items(), key=lambda kv: -kv[1])),
        by_category_s=totals(lambda s: s.category), devices=devices, steps=step_summary(profile),
        platform=profile.platform, device_kind=profile.device_kind, notes=list(profile.notes),
        in_window=profile.manifest.window.to_dict(), hosts=hosts, unran=tuple(profile.unran),
        step_choice=profile.step_choice, in_steps_by_program_s=dict(sorted((in_steps or {}).items(),
                                                                           key=lambda kv: -kv[1])),
        in_steps_busy_s=busy_in_steps_s,
    )


def _devices_per_group(inv: np.ndarray, m: int, device: np.ndarray) -> np.ndarray:
    """How many distinct devices the rows of each of ``m`` groups ran on."""
    lo = int(device.min()) if len(device) else 0
    span = (int(device.max()) - lo + 1) if len(device) else 1
    if not dense(m * span, len(inv)):  # too many (group, device) pairs for a table
        return np.bincount(unique_rows(inv, device)[0][:, 0], minlength=m)
    return _devices_seen(inv, device, lo, span, m).reshape(m, span).sum(axis=1)


@njit(cache=True, nogil=True)
def _devices_seen(inv, device, lo, span, m):
    """Which (group, device) pairs have a row, as a table of ``m * span`` flags: one pass, no event-sized key."""
    seen = np.zeros(m * span, np.bool_)
    for i in range(len(inv)):
        seen[inv[i] * span + (device[i] - lo)] = True
    return seen


@plain_twin(_devices_seen, NUMPY_TWIN)
def _devices_seen_np(inv, device, lo, span, m):
    seen = np.zeros(m * span, np.bool_)
    seen[inv * span + (device - lo)] = True
    return seen


def step_summary(profile: Profile) -> StepSummary | None:
    """The profile's steps summarised (:func:`rooflens.trace.steps.step_summary`)."""
    return summary_of_steps(profile.steps, profile.step_choice, profile.marked_steps)
