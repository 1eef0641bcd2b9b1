"""Idle time over the steady state: how long each device (or a CPU's forced devices together) waits
between program executions, with warm-up and set-up left out. Measured once per analysis into
``Report.steady``; the idle finding and the idle budget judge it.

Only the time between program executions is the host's to fill: inside one execution XLA runs the
ops by itself (a gap there is the runtime's own scheduling, e.g. a CPU matmul finishing on worker
threads the trace does not show). Idle time while the host compiles, or around a program's first
run, is warm-up, not a feeding problem; with steps, set-up before them and teardown after are not
idleness either.

Pure functions of a :class:`Profile` and its op stats: no files, no printing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from rooflens.trace import memo
from rooflens.trace.events import row_key, unique_rows
from rooflens.trace.groupby import dense, group_extent
from rooflens.trace.profile import Profile
from rooflens.trace.stats import DeviceTime, OpStats, shares_cores
from rooflens.trace.warmup import execution_index, host_compile_intervals_ns, idle_outside, merge_intervals


@dataclass(frozen=True)
class IdleGap:
    """A gap left once warm-up and set-up are taken out."""

    start_s: float  # from the start of the event table
    duration_s: float


@dataclass(frozen=True, eq=False)
class IdleGaps:
    """A unit's gaps left once warm-up and set-up are taken out, in time order, as columns (a trace of no programs
    has a gap per kernel: 10⁵ of them, which took 0.15 s to make one by one)."""

    start_s: np.ndarray  # from the start of the event table
    duration_s: np.ndarray

    def __len__(self) -> int:
        return len(self.start_s)

    def largest(self, n: int, at_least_s: float = 0.0) -> list[IdleGap]:
        """The ``n`` longest gaps of at least ``at_least_s``, longest first (of equal ones, the earlier first)."""
        order = np.argsort(-self.duration_s, kind="stable")[:n].tolist()
        return [IdleGap(float(self.start_s[k]), float(self.duration_s[k])) for k in order
                if self.duration_s[k] >= at_least_s]

    def starts_at(self, start_s: float) -> bool:
        """Whether a gap starts at ``start_s`` to the microsecond (both rounded to 6 digits of a second)."""
        at = round(start_s, 6)  # equal when rounded: less than a microsecond apart
        lo = int(np.searchsorted(self.start_s, start_s - 1e-6, side="left"))
        hi = int(np.searchsorted(self.start_s, start_s + 1e-6, side="right"))
        return any(round(s, 6) == at for s in self.start_s[lo:hi].tolist())


@dataclass(frozen=True)
class IdleUnit:
    """One unit judged for idleness: a device, or a host's CPU as a whole (``unit.device`` < 0)."""

    unit: DeviceTime  # its ``window_s`` is the window judged (first execution to last, less what is left out)
    idle_s: float  # idle time left
    warmup_s: float  # idle time left out (host compiling, around first runs)
    gaps: IdleGaps | None  # None: no events measured (the stats' own gaps stand)


@dataclass(frozen=True)
class SteadyState:
    """What the rules need from the run's steady state, measured from the profile."""

    idle: tuple[IdleUnit, ...] = ()
    warmup_judged: bool = False  # traced from its start (``rooflens run``): its warm-up was marked
    transfers_from_unix_s: float | None = None  # transfers before this are set-up (None: every one counts)
    transfer_steps: int | None = None  # the steps those transfers are spread over, when not the report's own


def steady_info(metadata: dict) -> dict:
    """The warm-up judgement ``rooflens.trace.warmup.judge`` stored in the metadata ({} when none)."""
    info = (metadata or {}).get("steady_state")
    return info if isinstance(info, dict) else {}


def measure_steady_state(profile: Profile, stats: OpStats) -> SteadyState:
    """Idle units and the steady state's transfer window of one analysed profile."""
    info = steady_info(profile.metadata)
    begin, steps = None, None
    if "offset_ns" in info and "steady_start_ns" in info:
        # steps inferred from device runs: the host's own boundary, over the runs dispatched after it
        host = "host_steady_start_ns" in info
        begin = (info["host_steady_start_ns" if host else "steady_start_ns"] - info["offset_ns"]) * 1e-9
        if host:
            steps = max(info["host_steady_runs"], 1)
    # a pod merged from its hosts' aggregates: each worker judged its own host's units
    units = profile.reduced.idle if profile.reduced is not None else idle_units(profile, stats.devices, stats.hosts)
    return SteadyState(tuple(units), bool(info), begin, steps)


@dataclass(frozen=True)
class UnitRuns:
    """One unit's program executions (start and end, ns of table time; None: it ran no op event) and the
    host's own compilations (merged rows), what its idle time is judged from."""

    unit: DeviceTime
    start_ns: np.ndarray | None
    end_ns: np.ndarray | None
    compiling_ns: np.ndarray | None


def idle_units(profile: Profile, devices: list[DeviceTime], hosts: list[DeviceTime]) -> list[IdleUnit]:
    """Each device's idle time (each host's CPU as a whole for forced CPU devices: they are threads
    time-sliced on shared cores, so one waits while another runs); ``devices`` and ``hosts``: the op
    stats' device and host times."""
    t = profile.table
    return judge_units(unit_runs(profile, devices, hosts), _left_out_ns(profile), t.extent_ns[0])


def unit_runs(profile: Profile, devices: list[DeviceTime], hosts: list[DeviceTime], pod_devices: int = 0
              ) -> list[UnitRuns]:
    """The units :func:`idle_units` judges, with their executions (``pod_devices``: the devices of the pod this
    host belongs to, when the profile is one host of it)."""
    shared = shares_cores(profile, max(len(devices), pod_devices, 1))
    units = hosts if shared else devices
    t = profile.table
    if not len(t):
        return [UnitRuns(d, None, None, None) for d in units]
    # a trace not judged for warm-up (nsys-jax, a trace of one's own) still shows its host compiling
    compiling = {h: host_compile_intervals_ns(evs) for h, evs in (profile.host_events_of or {}).items()}
    wanted = [(d.host, d.device) for d in units]

    def compute() -> list[tuple[np.ndarray, np.ndarray] | None]:
        runs = execution_index(t)
        spans = []
        for name, device in wanted:
            host = t.hosts.index(name) if name in t.hosts else -1
            mine = t.host == host if device < 0 else (t.host == host) & (t.device == device)
            n = int(np.count_nonzero(mine))
            # every event (a CPU's host as one unit): the columns themselves, not 50 MB copies of each at 6 M events
            sel = slice(None) if n == len(t) else np.flatnonzero(mine)
            spans.append(_executions(t, runs, sel, n) if n else None)
        return spans

    # remembered for the same table and units (a second report of a large trace reads them back)
    spans = memo.remembered("unit_executions", (memo.table_digest(t, steps=False), wanted), len(t), compute)
    return [UnitRuns(d, None, None, None) if se is None else UnitRuns(d, se[0], se[1], compiling.get(d.host))
            for d, se in zip(units, spans)]


def judge_units(units: list[UnitRuns], excluded: np.ndarray, t0: float) -> list[IdleUnit]:
    """Each unit's idle time outside ``excluded`` (merged-or-not [start, end) rows, ns) and its own host's
    compilations; gaps counted from ``t0`` (ns)."""
    out = []
    for u in units:
        if u.start_ns is None:
            out.append(IdleUnit(u.unit, u.unit.idle_s, 0.0, None))
            continue
        own = u.compiling_ns
        left_out = merge_intervals(np.concatenate([excluded, own]) if own is not None else excluded)
        out.append(_judge_unit(u.unit, u.start_ns, u.end_ns, left_out, t0))
    return out


def _left_out_ns(profile: Profile) -> np.ndarray:
    t = profile.table
    warmup = np.asarray(steady_info(profile.metadata).get("intervals_ns") or [], dtype=float).reshape(-1, 2)
    return left_out_ns(warmup, profile.steps, *t.extent_ns)


def left_out_ns(warmup_ns: np.ndarray, steps, t0: float, t1: float) -> np.ndarray:
    """Warm-up intervals, and with steps the set-up before the first and the teardown after the last (``t0``,
    ``t1``: the first op's start and the last op's end, ns)."""
    if not steps:
        return warmup_ns
    first, last = min(s for _, s, _ in steps), max(e for _, _, e in steps)
    return np.concatenate([warmup_ns, [[min(t0, first), first], [last, max(t1, last)]]])


def _executions(t, runs: np.ndarray, sel: np.ndarray | slice, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (ns) of every program execution among the ``n`` events ``sel`` (indices, or every event)."""
    cols = (t.device[sel], t.program[sel], runs[sel])  # one group per (device, program, run)
    key, n_keys = row_key(*cols)
    # the key itself groups them, in the groups' own order (16 B of extents per possible key: a small floor)
    if key is not None and dense(n_keys, n, floor=1024):
        s0, e0 = group_extent(key, n_keys, t.start_ns[sel], t.end_ns_at(sel))
        ran = np.isfinite(s0)
        return s0[ran], e0[ran]
    keys, inv = unique_rows(*cols)
    return group_extent(inv, len(keys), t.start_ns[sel], t.end_ns_at(sel))


def _judge_unit(d: DeviceTime, s0: np.ndarray, e0: np.ndarray, left_out: np.ndarray, t0: float) -> IdleUnit:
    idle, inside, gaps = idle_outside(s0, e0, left_out)
    # the window judged: from the first execution to the last, less what is left out (warm-up, set-up)
    w0, w1 = float(s0.min()), float(e0.max())
    cut = (float((np.minimum(left_out[:, 1], w1) - np.maximum(left_out[:, 0], w0)).clip(min=0).sum())
           if len(left_out) else 0.0)
    window_ns = max(w1 - w0 - cut, 0.0)
    unit = dataclasses.replace(d, window_s=window_ns * 1e-9) if window_ns > 0 else d
    g = np.asarray(gaps, dtype=float).reshape(-1, 2)  # a gap per kernel in a trace of no programs: 10⁵ of them
    rest = IdleGaps((g[:, 0] - t0) * 1e-9, (g[:, 1] - g[:, 0]) * 1e-9)
    return IdleUnit(unit, idle * 1e-9, inside * 1e-9, rest)
