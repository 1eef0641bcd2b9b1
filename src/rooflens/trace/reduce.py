"""A pod reduced where it is read: each worker turns its host's trace into aggregates, the driver merges them.

``rl.load(…, merge="aggregates")`` (and ``merge="auto"`` for a pod whose files hold over 1 GiB) reads each
host file in a worker (a process-pool worker or a Ray task, :mod:`rooflens.trace.hosts`), judges its warm-up
and measures it there, and sends back a :class:`HostPart`: per (program, op) the events, total and self
time, fastest and slowest event, devices and a quantile sketch of the durations, and the program executions it
ran in with its fastest, slowest and a sketch of its time per execution; per device and per host the
busy and idle time with the largest gaps; per step the host's first op start and last op end; the idle units;
each program's executions; and the events of one step (the middle one by number) as a sample. The driver folds
the parts in as they arrive (:class:`Merge`), so its memory holds one merged set of op aggregates, a few
numbers per host and step, and at most :data:`SAMPLE_EVENTS` sampled events, whatever the number of hosts.

What is exact and what is not (docs/pod-scale.md says the same for users):

* exact: occurrences, executions, devices, total and self time, min and max per op (per event and per
  execution), every device's and host's busy, idle and largest gaps, the steps and the host × step table (its
  op outliers included), the idle units, the dispatches that never ran;
* within 1 %: each op's medians, per event and per execution (a log-bucketed sketch: a bucket spans a ratio of
  :data:`GAMMA`, and its representative is within (GAMMA − 1) / (GAMMA + 1) of every duration in it);
* sampled: the timeline, the Perfetto and Parquet exports and the CPU devices' concurrency read one step
  per host (the events of :attr:`HostPart.sampled_step`); a program's execution span without steps is the
  median of the hosts' medians.

Pure functions and plain data, apart from :func:`reduce_host` (a worker: reads its file) and
:func:`load_aggregated` (the driver's read).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rooflens.trace.align import CollectiveEnds, align_clocks, collective_ends
from rooflens.trace.assemble import NO_STEPS, assemble, job_steps, no_hlo_note
from rooflens.trace.events import EventTable, concat, unique_rows
from rooflens.trace.groupby import grouped_order, grouped_sorted, median, unique_inverse, unique_values
from rooflens.trace.idle import IdleUnit, UnitRuns, judge_units, left_out_ns, steady_info, unit_runs
from rooflens.trace.profile import Profile
from rooflens.trace.stats import (
    DeviceTime,
    OpStats,
    device_times,
    execution_extremes,
    execution_sums,
    in_steps_by_program,
    in_steps_sums,
    op_self_ps,
    op_stat,
    shares_cores,
    stats_of,
    steps_busy_ns,
)
from rooflens.trace.steps import base_name, host_steps_from, step_spans_ps
from rooflens.trace.warmup import Executions, program_executions

#: a sketch bucket holds durations from GAMMA^(b-1) to GAMMA^b ps: its representative is within 0.99 % of each
GAMMA = 1.02
_LOG_GAMMA = math.log(GAMMA)
#: events the driver keeps from all hosts together (28 B each): the sampled step's, split between the hosts
SAMPLE_EVENTS = 1_000_000
#: a host's sampled step keeps at least this many events however many hosts share the budget
SAMPLE_FLOOR = 2_000
GAPS_PER_DEVICE = 5  # as op_stats's default


@dataclass
class Reduced:
    """What a profile merged from its hosts' aggregates carries in place of every event."""

    ops: list[tuple[str, str]]  # every (program, op) that ran on any host
    idle: list[IdleUnit] = field(default_factory=list)
    executions: dict[str, Executions] = field(default_factory=dict)  # per program, with no steps
    sampled_step: int | None = None  # the step whose events ``Profile.table`` holds (None: no steps)
    stats: OpStats | None = None


@dataclass
class HostPart:
    """One host, reduced by its worker. Times are ps (int) or ns (float) from the host's ``origin_ns``."""

    host: str
    origin_ns: int
    t0_ns: float  # its first op's start
    ops: list[tuple[str, str]]
    count: np.ndarray  # per op: executions
    total_ps: np.ndarray
    self_ps: np.ndarray
    min_ps: np.ndarray
    max_ps: np.ndarray
    op_devices: list[tuple[int, ...]]
    sketch: tuple[np.ndarray, np.ndarray, np.ndarray]  # (op, bucket, count) rows, grouped by op
    runs: np.ndarray  # per op: the program executions it ran in (trace-cut ones left out)
    run_min_ps: np.ndarray  # per op: its smallest and largest time in one execution (0 when none)
    run_total_ps: np.ndarray  # per op: its time summed over those executions (their mean's numerator)
    run_max_ps: np.ndarray
    run_sketch: tuple[np.ndarray, np.ndarray, np.ndarray]  # the sketch of its times per execution
    # per op: its events' time and number inside the host's steps; and its devices' busy time in them (ns), the
    # union per device and step (None: the host has no steps)
    in_steps_ps: np.ndarray
    in_steps_count: np.ndarray
    busy_in_steps_ns: float | None
    unran: tuple  # rooflens.trace.dispatch.Unran: its programs dispatched more often than run in the trace
    devices: list[DeviceTime]
    host_time: DeviceTime
    step_nums: np.ndarray  # the steps it has events in, with its first op start and last op end in each (ps, float)
    step_first_ps: np.ndarray
    step_last_ps: np.ndarray
    steps: np.ndarray  # its steps as judged on it: rows of (step number, start ns, end ns)
    units: list[UnitRuns]  # what its idle time is judged from, once the pod's steps are known
    warmup_ns: np.ndarray  # its warm-up intervals (merged rows)
    t1_ns: float  # its last op's end
    executions: dict[str, tuple[float, int, float, float]]  # program → (runs, devices, median and mean span s)
    sample: EventTable
    sampled_step: int | None
    notes: list[str]
    platform: str
    device_kind: str
    framework: str
    plane_stats: dict
    metadata: dict
    hlo_texts: dict[str, str]
    events_total: int
    # its collectives' ends, where its trace keeps a clock of its own (rooflens.trace.align): the driver aligns
    # the hosts' clocks on them, as the events' merge does
    collectives: CollectiveEnds | None = None
    step_choice: object = None  # the step program its host chose (rooflens.trace.steps.StepChoice)
    marked_steps: list = field(default_factory=list)  # the host's own marked spans (number, start ns, end ns)


def bucket_of(dur_ps: np.ndarray) -> np.ndarray:
    """Each duration's sketch bucket: 0 for durations under 1 ps, else b with GAMMA^(b-1) ≤ d < GAMMA^b."""
    d = np.asarray(dur_ps, dtype=np.float64)
    out = np.zeros(len(d), np.int64)
    pos = d >= 1.0
    out[pos] = np.floor(np.log(d[pos]) / _LOG_GAMMA).astype(np.int64) + 1
    return out


def bucket_value(bucket: np.ndarray) -> np.ndarray:
    """A bucket's representative duration (ps): the point whose relative error to either edge is the same."""
    b = np.asarray(bucket, dtype=np.float64)
    return np.where(b > 0, 2.0 * GAMMA ** b / (GAMMA + 1.0), 0.0)


def sketch_of(group: np.ndarray, ranked: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sketch of durations sorted by (group, duration): (group, bucket, count) rows, grouped by group."""
    bucket = bucket_of(ranked)
    new = np.ones(len(ranked), bool)
    new[1:] = (group[1:] != group[:-1]) | (bucket[1:] != bucket[:-1])
    at = np.flatnonzero(new)
    return group[at], bucket[at], np.diff(np.append(at, len(ranked)))


def sketch_quantile(buckets: np.ndarray, counts: np.ndarray, rank: int) -> float:
    """The ``rank``-th smallest duration (0-based) of a sketch (buckets ascending), to within 0.99 %."""
    k = min(int(np.searchsorted(np.cumsum(counts), rank, side="right")), len(buckets) - 1)
    return float(bucket_value(buckets[k]))


# -- the worker ------------------------------------------------------------------------------------

def reduce_host(hf, runs: list[str], hlo_dir, include_warmup: bool, sample_events: int, pod_hosts: int = 1,
                progress=None, step_fn: str | None = None) -> HostPart | None:
    """One host file read and reduced (in a worker): its profile judged alone, then measured (None: the host
    has no op event; the pod's other hosts still make a report, as when every event is merged). ``step_fn``:
    the step program asked for (``--step-fn``), which every host takes."""
    from rooflens.trace.hosts import read_one

    raw = read_one(hf, progress)
    if not len(raw.table):
        return None
    collectives = collective_ends(raw.table) if raw.session_clock else None  # as read: every execution
    profile = assemble([hf.path], runs, [raw], [hf.path], hlo_dir, step_fn=step_fn)
    if include_warmup:
        from rooflens.trace.warmup import with_warmup

        profile = with_warmup(profile)
    part = reduce_profile(profile, sample_events, pod_hosts)
    part.collectives = collectives
    return part


def reduce_profile(profile: Profile, sample_events: int, pod_hosts: int = 1) -> HostPart:
    """A one-host profile's aggregates (pure); ``pod_hosts``: how many hosts its pod has."""
    t = profile.table
    width = len(t.names) + 1
    uniq, inv = unique_inverse(t.program.astype(np.int64) * width + t.name)
    m = len(uniq)
    cnt = np.bincount(inv, minlength=m)
    first = np.concatenate([[0], np.cumsum(cnt)[:-1]]).astype(np.int64)
    order = grouped_order(inv, m)
    total = np.add.reduceat(t.dur_ps[order], first) if m else np.zeros(0, np.int64)  # integers: exact sums
    self_ps = op_self_ps(profile)
    selft = np.add.reduceat(self_ps[order], first) if m else np.zeros(0, np.int64)
    ranked = grouped_sorted(inv, m, t.dur_ps)  # each op's durations, sorted
    sketch = sketch_of(np.repeat(np.arange(m), cnt), ranked)
    run_op, run_sums = execution_sums(t, inv)  # sums of integers below 2**53 ps: exact
    runs, _, run_min, run_max = execution_extremes(run_op, run_sums, m)
    run_total = np.bincount(run_op, weights=run_sums, minlength=m)
    run_sketch = sketch_of(np.repeat(np.arange(m), runs), grouped_sorted(run_op, m, run_sums))
    ops = [(t.programs[int(u // width)], t.names[int(u % width)]) for u in uniq.tolist()]
    pairs = unique_rows(inv, t.device)[0]
    op_devices: list[list[int]] = [[] for _ in range(m)]
    for g, d in pairs.tolist():
        op_devices[g].append(d)
    devices, hosts = device_times(profile, GAPS_PER_DEVICE)
    nums, step_first, step_last = step_spans_ps(t)
    in_steps_ps, in_steps_count = in_steps_sums(t, inv, m)
    executions = {}
    if not profile.steps:
        ran_on = unique_rows(t.program, t.host, t.device)[0]
        per_program = np.bincount(ran_on[:, 0], minlength=len(t.programs))
        for name, ex in program_executions(t).items():
            n = int(per_program[t.programs.index(name)])
            executions[name] = (ex.runs_per_device * n, n, ex.median_span_s, ex.mean_span_s)
    nums_judged = sorted(n for n, _, _ in profile.steps)
    sampled = nums_judged[len(nums_judged) // 2] if nums_judged else None
    rows = np.flatnonzero(t.step == sampled) if sampled is not None else np.arange(len(t))
    return HostPart(
        host=profile.hosts[0], origin_ns=t.origin_ns, t0_ns=t.extent_ns[0], ops=ops,
        count=cnt.astype(np.int64), total_ps=total.astype(np.int64), self_ps=selft.astype(np.int64),
        min_ps=ranked[first] if m else ranked, max_ps=ranked[first + cnt - 1] if m else ranked,
        op_devices=[tuple(d) for d in op_devices], sketch=sketch, runs=runs.astype(np.int64),
        run_min_ps=np.rint(run_min).astype(np.int64), run_max_ps=np.rint(run_max).astype(np.int64),
        run_total_ps=np.rint(run_total).astype(np.int64),
        run_sketch=run_sketch, in_steps_ps=np.rint(in_steps_ps).astype(np.int64), in_steps_count=in_steps_count,
        busy_in_steps_ns=steps_busy_ns(t) if profile.steps and not shares_cores(profile, len(devices) * pod_hosts)
        else None, unran=tuple(profile.unran), devices=devices,
        host_time=hosts[0],
        step_nums=nums.astype(np.int64), step_first_ps=step_first[0, :len(nums)], step_last_ps=step_last[0, :len(nums)],
        steps=np.asarray(profile.steps, np.float64).reshape(-1, 3),
        # a CPU pod of several hosts is judged host by host, as when its events are merged (its devices share cores)
        units=unit_runs(profile, devices, hosts, pod_devices=len(devices) * pod_hosts),
        t1_ns=t.extent_ns[1], executions=executions,
        warmup_ns=np.asarray(steady_info(profile.metadata).get("intervals_ns") or [], float).reshape(-1, 2),
        sample=_used_words(t.select(rows[:sample_events])),
        sampled_step=sampled, notes=[n for n in profile.notes if not n.startswith("no HLO for ") and n != NO_STEPS],
        platform=profile.platform, device_kind=profile.device_kind, framework=profile.framework,
        plane_stats=profile.plane_stats, metadata=profile.metadata, hlo_texts=profile.hlo_texts,
        events_total=profile.events_total, step_choice=profile.step_choice, marked_steps=list(profile.marked_steps))


def _used_words(t: EventTable) -> EventTable:
    """A sample's table with only the words its events use (a host's whole vocabulary is not needed)."""
    cols = {}
    for col, words in (("host", "hosts"), ("line", "lines"), ("name", "names"), ("program", "programs")):
        used, codes = np.unique(getattr(t, col), return_inverse=True)
        cols[col] = codes.astype(np.int32)
        cols[words] = [getattr(t, words)[u] for u in used.tolist()] or list(getattr(t, words)[:1])
    return dataclasses.replace(t, **cols)


def _reduce_batch(files, runs, hlo_dir, include_warmup, sample_events, pod_hosts, step_fn=None
                  ) -> list[HostPart | None]:
    """Several host files of one process-pool task; a program's HLO text, and an op's instruction text and trace
    stats, go back with the first host that has them."""
    out, sent = [], set()
    for f in files:
        part = reduce_host(f, runs, hlo_dir, include_warmup, sample_events, pod_hosts, step_fn=step_fn)
        out.append(part)
        if part is None:
            continue
        part.hlo_texts = {p: v for p, v in part.hlo_texts.items() if (p, len(v)) not in sent}
        sent.update((p, len(v)) for p, v in part.hlo_texts.items())
        t = part.sample
        part.sample = dataclasses.replace(t, hlo_text={k: v for k, v in t.hlo_text.items() if ("text", k) not in sent},
                                          op_meta={k: v for k, v in t.op_meta.items() if ("meta", k) not in sent})
        sent.update(("text", k) for k in t.hlo_text)
        sent.update(("meta", k) for k in t.op_meta)
    return out


# -- the driver ------------------------------------------------------------------------------------

class MergedSketch:
    """The hosts' sketches of one quantity per op (event durations, or times per execution) folded together:
    (op << 32 | bucket) keys and their counts, compacted now and then."""

    def __init__(self) -> None:
        self.parts: list[np.ndarray] = []
        self.counts: list[np.ndarray] = []
        self.pending = 0

    def add(self, gi: np.ndarray, sketch: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        """A host's sketch (``gi``: its ops' places in the merge)."""
        op, bucket, n = sketch
        self.parts.append((gi[op] << 32) | bucket)
        self.counts.append(n)
        self.pending += len(n)
        if self.pending > 1 << 20:
            self.compact()

    def compact(self) -> None:
        if len(self.parts) <= 1:
            return
        keys, inv = np.unique(np.concatenate(self.parts), return_inverse=True)
        self.parts = [keys]
        self.counts = [np.bincount(inv, weights=np.concatenate(self.counts)).astype(np.int64)]
        self.pending = 0

    def medians_ps(self, count: np.ndarray, lo_ps: np.ndarray, hi_ps: np.ndarray) -> np.ndarray:
        """Every op's median from the merged sketch (``count`` values each), within its ``lo_ps`` and ``hi_ps``
        (0 for an op with none)."""
        self.compact()
        keys = self.parts[0] if self.parts else np.zeros(0, np.int64)
        counts = self.counts[0] if self.counts else np.zeros(0, np.int64)
        op = keys >> 32
        bucket = keys & 0xFFFFFFFF
        bounds = np.searchsorted(op, np.arange(len(count) + 1))
        out = np.zeros(len(count))
        for g in range(len(count)):
            b, n = bucket[bounds[g]:bounds[g + 1]], counts[bounds[g]:bounds[g + 1]]
            c = int(count[g])
            if not c:
                continue
            mid = (sketch_quantile(b, n, (c - 1) // 2) + sketch_quantile(b, n, c // 2)) / 2
            out[g] = min(max(mid, float(lo_ps[g])), float(hi_ps[g]))
        return out


class Merge:
    """The hosts' parts folded in as they arrive, in any order; :meth:`profile` makes the pod's profile.

    Sums are integers and the sketch counts, so the result does not depend on the order of arrival; what is
    kept per host (device times, steps, a sampled step) is small and put in host order at the end."""

    def __init__(self) -> None:
        self.index: dict[tuple[str, str], int] = {}
        self.count = np.zeros(0, np.int64)
        self.total_ps = np.zeros(0, np.int64)
        self.self_ps = np.zeros(0, np.int64)
        self.min_ps = np.zeros(0, np.int64)
        self.max_ps = np.zeros(0, np.int64)
        self.devices: list[set[int]] = []
        self.sketch = MergedSketch()  # of the events' durations
        self.runs = np.zeros(0, np.int64)  # per op: program executions it ran in, and its time in one
        self.run_min_ps = np.zeros(0, np.int64)
        self.run_total_ps = np.zeros(0, np.int64)
        self.run_max_ps = np.zeros(0, np.int64)
        self.run_sketch = MergedSketch()
        self.in_steps_ps = np.zeros(0, np.int64)  # per op: its time and events inside the hosts' steps
        self.in_steps_count = np.zeros(0, np.int64)
        self.busy_in_steps_ns: float | None = None  # the devices' busy union inside the steps, over hosts
        self.unran: list = []
        self.hosts: dict[int, HostPart] = {}  # per host: what is kept of its part (the merged rest let go of)
        self.op_codes: dict[int, np.ndarray] = {}  # per host: its ops' places in ``index``
        self.first: dict[str, tuple[int, dict]] = {}  # metadata and plane stats: the first host's with any
        self.hlo: dict[str, tuple[int, str]] = {}  # program → (first host with it, HLO text)
        self.hlo_text: dict[tuple[str, str], tuple[int, str]] = {}  # the same for each op's instruction text
        self.op_meta: dict[tuple[str, str], tuple[int, dict]] = {}  # and its trace stats
        self.executions: dict[str, list] = {}

    def _grow(self, n: int) -> None:
        have = len(self.count)
        if n <= have:
            return
        extra = n - have
        self.count = np.concatenate([self.count, np.zeros(extra, np.int64)])
        self.total_ps = np.concatenate([self.total_ps, np.zeros(extra, np.int64)])
        self.self_ps = np.concatenate([self.self_ps, np.zeros(extra, np.int64)])
        self.min_ps = np.concatenate([self.min_ps, np.full(extra, np.iinfo(np.int64).max, np.int64)])
        self.max_ps = np.concatenate([self.max_ps, np.full(extra, np.iinfo(np.int64).min, np.int64)])
        self.devices += [set() for _ in range(extra)]
        self.runs = np.concatenate([self.runs, np.zeros(extra, np.int64)])
        self.run_min_ps = np.concatenate([self.run_min_ps, np.full(extra, np.iinfo(np.int64).max, np.int64)])
        self.run_total_ps = np.concatenate([self.run_total_ps, np.zeros(extra, np.int64)])
        self.run_max_ps = np.concatenate([self.run_max_ps, np.zeros(extra, np.int64)])
        self.in_steps_ps = np.concatenate([self.in_steps_ps, np.zeros(extra, np.int64)])
        self.in_steps_count = np.concatenate([self.in_steps_count, np.zeros(extra, np.int64)])

    def add(self, index: int, part: HostPart) -> None:
        """Fold in host ``index`` (its place among the pod's files)."""
        gi = np.asarray([self.index.setdefault(k, len(self.index)) for k in part.ops], np.int64)
        self._grow(len(self.index))
        self.count[gi] += part.count  # an op appears once per part: no repeated index
        self.total_ps[gi] += part.total_ps
        self.self_ps[gi] += part.self_ps
        np.minimum.at(self.min_ps, gi, part.min_ps)
        np.maximum.at(self.max_ps, gi, part.max_ps)
        for g, devs in zip(gi.tolist(), part.op_devices):
            self.devices[g].update(devs)
        self.sketch.add(gi, part.sketch)
        self.runs[gi] += part.runs
        self.run_total_ps[gi] += part.run_total_ps
        self.in_steps_ps[gi] += part.in_steps_ps
        self.in_steps_count[gi] += part.in_steps_count
        if part.busy_in_steps_ns is not None:
            self.busy_in_steps_ns = (self.busy_in_steps_ns or 0.0) + part.busy_in_steps_ns
        ran = part.runs > 0
        np.minimum.at(self.run_min_ps, gi[ran], part.run_min_ps[ran])
        np.maximum.at(self.run_max_ps, gi[ran], part.run_max_ps[ran])
        self.run_sketch.add(gi, part.run_sketch)
        self.unran.extend(part.unran)
        sample = part.sample
        for mine, theirs in ((self.hlo_text, sample.hlo_text), (self.op_meta, sample.op_meta)):
            for k, v in theirs.items():
                if k not in mine or index < mine[k][0]:
                    mine[k] = (index, v)
        for what in ("metadata", "plane_stats"):
            if getattr(part, what) and (what not in self.first or index < self.first[what][0]):
                self.first[what] = (index, getattr(part, what))
        self.op_codes[index] = gi
        self.hosts[index] = dataclasses.replace(
            part, ops=[], op_devices=[], sketch=(), hlo_texts={}, metadata={}, plane_stats={}, executions={},
            run_sketch=(), sample=dataclasses.replace(sample, hlo_text={}, op_meta={}))
        for program, text in part.hlo_texts.items():
            if program not in self.hlo or index < self.hlo[program][0]:
                self.hlo[program] = (index, text)
        for program, (runs, ndev, span, mean) in part.executions.items():
            self.executions.setdefault(program, []).append((index, runs, ndev, span, mean))

    def medians_ps(self) -> np.ndarray:
        """Every op's median duration from the merged sketch, within its min and max."""
        return self.sketch.medians_ps(self.count, self.min_ps, self.max_ps)

    def run_extremes_ps(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every op's median, smallest and largest time in one execution (0 for an op with none)."""
        ran = self.runs > 0
        lo, hi = np.where(ran, self.run_min_ps, 0), np.where(ran, self.run_max_ps, 0)
        return self.run_sketch.medians_ps(self.runs, lo, hi), lo, hi

    def profile(self, paths: list[str], runs: list[str], files: list[str], hlo_dir, empty: tuple[str, ...] = ()
                ) -> Profile:
        """The pod's profile: the sampled steps' events, the job's steps, the op stats and idle units merged
        (``empty``: the hosts with no op event, named in a note)."""
        from rooflens.trace.assemble import run_manifest, saved_hlo

        parts = [self.hosts[i] for i in sorted(self.hosts)]
        offsets, clock_notes = align_clocks([p.collectives for p in parts], [p.host for p in parts])
        parts = [_moved(p, off) for p, off in zip(parts, offsets)]  # one time axis, as the events' merge has
        origin = min(p.origin_ns for p in parts)
        table = dataclasses.replace(concat([p.sample for p in parts]),
                                    hlo_text={k: v for k, (_, v) in self.hlo_text.items()},
                                    op_meta={k: v for k, (_, v) in self.op_meta.items()})
        table_origin = table.origin_ns
        shift_ns = [float(p.origin_ns - table_origin) for p in parts]
        t0 = min(p.t0_ns + s for p, s in zip(parts, shift_ns))
        steps = job_steps([[(int(n), a + s, b + s) for n, a, b in p.steps.tolist()] for p, s in zip(parts, shift_ns)])
        # each host's step choice says the same of its own candidates: the first host's speaks for the pod
        said = next(([n for n in p.notes if n.startswith("steps: ")] for p in parts
                     if any(n.startswith("steps: ") for n in p.notes)), [])
        notes = list(dict.fromkeys([*(n for p in parts for n in p.notes if not n.startswith("steps: ")), *said]))
        notes += clock_notes
        manifest = run_manifest(runs, [])  # its problems are in every host's notes already
        hlo_texts = {k: v for k, (_, v) in self.hlo.items()}
        hlo_texts.update(saved_hlo(runs, hlo_dir))
        ops = sorted(self.index, key=self.index.get)
        missing = sorted({p for p, _ in ops if p not in hlo_texts and base_name(p) not in hlo_texts})
        if empty:
            notes.append(f"{len(empty)} host(s) had no device op event and are left out: {', '.join(empty[:5])}"
                         + (" …" if len(empty) > 5 else ""))
        if not steps:
            notes.append(NO_STEPS)
        if missing:
            notes.append(no_hlo_note(missing))
        sampled = [p.sampled_step for p in parts if p.sampled_step is not None]
        step = max(set(sampled), key=sampled.count) if sampled else None
        notes.append(f"the {len(parts)} hosts were merged from aggregates each worker made of its host (--merge "
                     f"aggregates): op medians are within 1 %; the timeline and the exported events are "
                     + (f"step {step} of each host" if step is not None else "each host's first events") + " only")
        reduced = Reduced(ops=ops, sampled_step=step)
        unran = tuple(sorted(self.unran, key=lambda u: (-u.unran, u.program, u.host)))
        profile = Profile(
            path=", ".join(paths), table=table, steps=steps, platform=next(
                (p.platform for p in parts if p.platform != "unknown"), "unknown"),
            device_kind=next((p.device_kind for p in parts if p.device_kind != "unknown"), "unknown"),
            hosts=[p.host for p in parts], sources=files, notes=notes,
            metadata=self.first.get("metadata", (0, {}))[1], manifest=manifest, hlo_texts=hlo_texts,
            plane_stats=self.first.get("plane_stats", (0, {}))[1],
            events_total=sum(p.events_total for p in parts), reduced=reduced, unran=unran,
            framework=next((p.framework for p in parts if p.framework), ""),
            step_choice=next((p.step_choice for p in parts if p.step_choice is not None), None),
            marked_steps=job_steps([[(n, a + s, b + s) for n, a, b in p.marked_steps]
                                    for p, s in zip(parts, shift_ns) if p.marked_steps]) if any(
                p.marked_steps for p in parts) else [])
        shifts_s = [(s + p.t0_ns - t0) * 1e-9 for p, s in zip(parts, shift_ns)]
        devices = [_shifted(d, s) for p, s in zip(parts, shifts_s) for d in p.devices]
        hosts = [_shifted(p.host_time, s) for p, s in zip(parts, shifts_s)]
        t1 = max(p.t1_ns + s for p, s in zip(parts, shift_ns))
        warmup = np.concatenate([p.warmup_ns + s for p, s in zip(parts, shift_ns)])
        units = [_shifted_runs(u, s, g) for p, s, g in zip(parts, shift_ns, shifts_s) for u in p.units]
        reduced.idle = judge_units(units, left_out_ns(warmup, steps, t0, t1), t0)
        reduced.executions = self._executions()
        reduced.stats = self._stats(profile, parts, devices, hosts, origin)
        return profile

    def _executions(self) -> dict[str, Executions]:
        out = {}
        for program, rows in self.executions.items():
            runs = sum(r for _, r, _, _, _ in rows)
            ndev = sum(n for _, _, n, _, _ in rows)
            mean = sum(r * m for _, r, _, _, m in rows) / runs if runs else 0.0  # over every host's executions
            out[program] = Executions(program, runs / max(ndev, 1), float(median([s for _, _, _, s, _ in rows])),
                                      mean)
        return out

    def _stats(self, profile: Profile, parts: list[HostPart], devices: list[DeviceTime], hosts: list[DeviceTime],
               origin: int) -> OpStats:
        total_busy_s = sum(d.busy_s for d in devices) or 1.0
        medians = self.medians_ps()
        run_med, run_min, run_max = self.run_extremes_ps()
        info = profile.op_info
        stepped = self.busy_in_steps_ns
        stats = [op_stat(info.get(key), key[0], key[1], int(self.count[g]), len(self.devices[g]),
                         float(self.total_ps[g]) * 1e-3, float(self.self_ps[g]) * 1e-3, float(medians[g]) * 1e-3,
                         float(self.min_ps[g]) * 1e-3, float(self.max_ps[g]) * 1e-3, total_busy_s,
                         (int(self.runs[g]), float(run_med[g]) * 1e-3, float(run_min[g]) * 1e-3,
                          float(run_max[g]) * 1e-3), float(self.run_total_ps[g]) * 1e-3,
                         None if stepped is None else (float(self.in_steps_ps[g]) * 1e-3, int(self.in_steps_count[g])))
                 for key, g in self.index.items()]
        stats.sort(key=lambda s: (s.program, s.name))  # ties in self time: a fixed order
        table = (self._host_steps(parts, origin, {(s.program, s.name): s.category for s in stats}) if len(parts) > 1
                 else None)
        return stats_of(profile, stats, devices, hosts, table, in_steps_by_program(stats),
                        None if stepped is None else stepped * 1e-9)

    def _host_steps(self, parts: list[HostPart], origin: int, categories: dict[tuple[str, str], str]):
        """The host × step table from each host's step spans and per-op sums (``categories``: each op's)."""
        ops = sorted(self.index, key=self.index.get)
        collective = np.asarray([categories.get(k) == "collective" for k in ops] or [False])
        steps = unique_values(np.concatenate([p.step_nums for p in parts]))
        first = np.full((len(parts), max(len(steps), 1)), np.inf)
        last = np.full((len(parts), max(len(steps), 1)), -np.inf)
        coll, other, rows = np.zeros(len(parts)), np.zeros(len(parts)), []
        codes = [self.op_codes[i] for i in sorted(self.hosts)]  # in the order of ``parts``
        for h, (p, gi) in enumerate(zip(parts, codes)):
            k = np.searchsorted(steps, p.step_nums)
            shift_ps = (p.origin_ns - origin) * 1000
            first[h, k] = (p.step_first_ps + shift_ps) * 1e-12
            last[h, k] = (p.step_last_ps + shift_ps) * 1e-12
            total_ps, count = p.total_ps, p.count
            comm = collective[gi]
            # the host's op time inside its steps (all of it when it has none)
            inside = p.in_steps_ps if p.busy_in_steps_ns is not None else total_ps
            coll[h], other[h] = float(inside[comm].sum()) * 1e-12, float(inside[~comm].sum()) * 1e-12
            rows += [(ops[g], h, t * 1e-12 / n, n) for g, t, n in zip(gi[~comm].tolist(), total_ps[~comm].tolist(),
                                                                        count[~comm].tolist())]
        rows.sort(key=lambda r: (r[0], r[1]))  # by op, then host: op_outliers' grouping
        return host_steps_from(tuple(p.host for p in parts), steps, first, last, coll, other,
                               np.asarray([len(p.devices) for p in parts]),
                               ([(*op, parts[h].host) for op, h, _, _ in rows],
                                np.asarray([mu for _, _, mu, _ in rows]), np.asarray([n for *_, n in rows], np.int64)))


def _moved(p: HostPart, offset_ns: int) -> HostPart:
    """A host's part with its clock moved back by ``offset_ns``: its origin and its sample's (every time in it
    counts from them)."""
    if not offset_ns:
        return p
    return dataclasses.replace(p, origin_ns=p.origin_ns - offset_ns,
                               sample=dataclasses.replace(p.sample, origin_ns=p.sample.origin_ns - offset_ns))


def _shifted(d: DeviceTime, shift_s: float) -> DeviceTime:
    """A host's device time with its gaps' starts counted from the pod's first op."""
    gaps = tuple(dataclasses.replace(g, start_s=g.start_s + shift_s) for g in d.largest_gaps)
    return dataclasses.replace(d, largest_gaps=gaps)


def _shifted_runs(u: UnitRuns, shift_ns: float, gaps_shift_s: float) -> UnitRuns:
    """A host's unit with its executions and compilations in the pod's table time."""
    def move(a):
        return None if a is None else a + shift_ns

    return UnitRuns(_shifted(u.unit, gaps_shift_s), move(u.start_ns), move(u.end_ns), move(u.compiling_ns))


def load_aggregated(paths: list[str], runs: list[str], host_files, hlo_dir, progress, workers, engine, ray_address,
                    include_warmup: bool, step_fn: str | None = None) -> Profile:
    """:func:`rooflens.trace.loading.load` for ``merge="aggregates"``: every host reduced by a worker, merged here."""
    from rooflens.errors import RooflensError
    from rooflens.trace.hosts import Task, map_hosts
    from rooflens.trace.progress import ingest_progress

    files = [f.path for f in host_files]
    sample = max(SAMPLE_FLOOR, SAMPLE_EVENTS // max(len(files), 1))
    merge, empty = Merge(), []
    task = Task(_one, _reduce_batch, _remote, args=(list(runs), None if hlo_dir is None else str(hlo_dir),
                                                     include_warmup, sample, len(files), step_fn))
    with ingest_progress([Path(f) for f in files], progress) as bar:
        for i, part in map_hosts(host_files, task, workers, engine, ray_address, bar.for_file):
            if part is not None:
                merge.add(i, part)
            else:
                empty.append(host_files[i].host)
    if not merge.index:
        raise RooflensError(f"{', '.join(paths)} has no device op events (no XLA ops or GPU kernels on any device "
                            "or CPU thread): was anything running on the devices while it was traced?")
    return merge.profile(paths, runs, files, hlo_dir, tuple(empty))


def _one(hf, runs, hlo_dir, include_warmup, sample, pod_hosts, step_fn, progress=None) -> HostPart | None:
    return reduce_host(hf, runs, hlo_dir, include_warmup, sample, pod_hosts, progress, step_fn)


def _remote(hf, runs, hlo_dir, include_warmup, sample, pod_hosts, step_fn) -> HostPart | None:
    return reduce_host(hf, runs, hlo_dir, include_warmup, sample, pod_hosts, step_fn=step_fn)
