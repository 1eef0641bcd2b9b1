"""The typed Report: everything a view of one analysed run shows, and its one JSON document.

Renderers (terminal, HTML, JSON, Perfetto) read these dataclasses and nothing else: the chip's
roofs as used, each op's comparison with its explained HLO, the step breakdowns, the findings,
the memory summary and the representative step's timeline are all computed by ``analyze``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Literal

from rooflens.analysis.findings import Finding
from rooflens.hlo.graph import OpGraph
from rooflens.memory.summary import MemorySummary
from rooflens.trace.idle import SteadyState
from rooflens.trace.manifest import Compilation, RunManifest
from rooflens.trace.stats import OpStat, OpStats

SCHEMA_VERSION = 2  # of Report.to_json(); see docs/report-schema.md (2: findings' ops are {program, name})

#: what limits an op on the roofline (the cost model's ``bound``), or why it has none
Bound = Literal["compute", "memory", "communication", "latency", "host-transfer", "overhead", "none", "unpriced"]
#: op categories (rooflens.hlo.opcodes.CATEGORIES)
Category = Literal["matmul", "attention", "convolution", "fft", "linear algebra", "fusion", "collective",
                   "copy/transpose", "elementwise", "reduction", "data movement", "custom-call", "host transfer",
                   "control", "other", "unknown"]
#: the step's groups of categories (StepBreakdown's ``*_s`` fields)
Group = Literal["compute", "communication", "layout", "host", "other"]

COMPUTE: tuple[Category, ...] = ("matmul", "attention", "convolution", "fft", "linear algebra", "fusion", "elementwise",
                                  "reduction")
#: the categories whose math runs on the matrix units (what MFU counts)
MATRIX_CATEGORIES: tuple[Category, ...] = ("matmul", "attention", "convolution")
LAYOUT: tuple[Category, ...] = ("copy/transpose", "data movement")


_FIELDS: dict[type, tuple[str, ...] | None] = {}  # a dataclass's field names; None: not a dataclass
_LEAVES = frozenset((str, int, float, bool, type(None)))


def as_dict(obj):
    """``dataclasses.asdict`` without its deep copy of every leaf: the same dicts, lists and tuples, the leaves
    (numbers, strings, None) as they are. A report's thousands of ops made JSON spent most of ``to_json`` in that
    copy."""
    kind = type(obj)
    if kind in _LEAVES:
        return obj
    if kind not in _FIELDS:
        _FIELDS[kind] = tuple(f.name for f in fields(obj)) if is_dataclass(obj) and not isinstance(obj, type) \
            else None
    names = _FIELDS[kind]
    if names is not None:
        return {n: as_dict(getattr(obj, n)) for n in names}
    if kind is list:
        return [as_dict(v) for v in obj]
    if kind is dict:
        return {as_dict(k): as_dict(v) for k, v in obj.items()}
    return asdict_leaf(obj)


def asdict_leaf(obj):
    """What ``dataclasses.asdict`` makes of anything else (tuples, named tuples, other containers, objects)."""
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*[as_dict(v) for v in obj])
    if isinstance(obj, list | tuple):
        return type(obj)(as_dict(v) for v in obj)
    if isinstance(obj, dict):
        return type(obj)((as_dict(k), as_dict(v)) for k, v in obj.items())
    return copy.deepcopy(obj)


def group_of(category: str) -> Group:
    """The step breakdown's group of an op category."""
    return ("communication" if category == "collective" else "compute" if category in COMPUTE
            else "layout" if category in LAYOUT else "host" if category == "host transfer" else "other")


@dataclass(frozen=True)
class Roofs:
    """The chip's roofs as the comparison used them (after sharing, for forced CPU devices)."""

    chip: str
    peak_flops_per_s: dict[str, float]  # by dtype key ("bf16", "fp32", …)
    hbm_bytes_per_s: float

    @property
    def peak_max_flops_per_s(self) -> float:
        return max(self.peak_flops_per_s.values(), default=0.0)

    @property
    def mfu_peak_flops_per_s(self) -> float:
        """The peak MFU divides by: the higher of bf16's and fp32's where either is known (bf16 on accelerators;
        fp32 on a CPU, whose bf16 matmuls are slower: an f32 ODE's MFU against its bf16 rate came out above
        100 %), else the highest."""
        return max(self.peak_flops_per_s.get("bf16", 0.0), self.peak_flops_per_s.get("fp32", 0.0)) \
            or self.peak_max_flops_per_s

    @property
    def ridge_flops_per_byte(self) -> float | None:
        """Where the roofline chart's roof bends: the dense peak MFU divides by over HBM bandwidth (not an fp8 or
        int8 peak, which a bf16 or f32 program's ops never reach)."""
        return self.mfu_peak_flops_per_s / self.hbm_bytes_per_s if self.hbm_bytes_per_s else None


#: the statistic of every per-op time in a report (per execution: comparison, findings, diff, budgets)
MEASURED_STATISTIC = "median per execution"
MEAN_MEDIAN_APART = 2.0  # mean / median beyond this: the mean is shown beside the median


@dataclass(frozen=True)
class OpComparison:
    """One measured op next to its roofline, per execution of its program on one device.

    ``measured_s`` is the op's time in one program execution: the sum of its events there, all its kernels (a
    custom call, a split-K GEMM, a collective may launch several) and every iteration of the loops around it
    (:attr:`OpStat.median_execution_s`, the **median** over executions: the report's one statistic for an op's time
    per execution, in the comparison, the findings' evidence and a diff's ratios, so that one slow execution (a
    warm-up, a stall, a noisy host) does not make an op "slow"; ``mean_s`` is the mean beside it, shown where the
    two are more than 2× apart. Totals and per-step times are sums (``total_time_s`` over the steps), not a
    statistic). ``predicted_s``, ``flops``, ``bytes``,
    ``comm_bytes`` and ``model_flops`` are its roofline's for the same: one run of the op (the cost model's
    unit) × ``runs_per_execution`` (1, or the trip counts of its loops). ``occurrences`` are its events,
    ``executions`` the program executions it ran in (over devices)."""

    name: str
    program: str
    category: Category
    named_scope: str
    opcode: str
    occurrences: int  # op events (kernels on GPU, loop iterations), over devices
    total_time_s: float  # measured, summed over devices and executions
    measured_s: float  # per execution of its program (median): the sum of its events in one
    predicted_s: float | None  # None: the cost model could not price it
    ratio: float | None  # measured / predicted
    bound: Bound
    flops: float
    bytes: float
    comm_bytes: float
    achieved_flops_per_s: float
    achieved_bytes_per_s: float
    flops_fraction_of_peak: float | None
    bytes_fraction_of_peak: float | None
    unpriced_reason: str = ""
    explanation: tuple[str, ...] = ()
    model_flops: float = 0.0  # its dots' and convolutions' FLOPs (what MFU counts)
    hlo: tuple[str, ...] = ()  # the instruction explained (shape, layout, operands, body), for the ops that matter
    shape: str = ""  # its result shape as printed (matching ops across reports)
    roofline_reliable: bool = True  # False: measured above 100 % of a roof, so the model or the chip is wrong
    roofline_bound: str = "exact"  # "lower": lengths are runtime data, the roofline is the least time; "estimate"
    roofline_note: str = ""  # why unreliable, or which bound
    executions: int = 0  # program executions (one program run on one device) it ran in, over devices
    runs_per_execution: float = 1.0  # its runs in one, the roofline's multiple (HLO trip counts; else events per one)
    self_time_s: float = 0.0  # total_time_s less the ops it holds (a loop's body, a call's callee)
    mean_s: float = 0.0  # per execution of its program, the mean over the same executions (measured_s: the median)
    in_steps_s: float | None = None  # of total_time_s, what lies inside the steps (None: the trace has no steps)
    in_steps_occurrences: int | None = None  # of its occurrences, those inside the steps
    # beats its calibrated roof (a CPU's ``local``) by no more than the calibration's own spread: withheld as any
    # figure above a roof, but no evidence that the calibration is wrong
    within_calibration_spread: bool = False
    host_callback: bool = False  # a custom call into Python on the host (jax.debug.print, io_callback): no kernel

    @property
    def mean_apart(self) -> bool:
        """The mean and the median more than MEAN_MEDIAN_APART× apart: a few executions far off the others
        (warm-up, a stall), so the mean is worth showing beside the median."""
        lo, hi = sorted((self.measured_s, self.mean_s))
        return lo > 0 and hi / lo > MEAN_MEDIAN_APART

    @property
    def priced(self) -> bool:
        return self.predicted_s is not None

    @property
    def runs(self) -> float:
        """How many times its ``measured_s`` and ``predicted_s`` happened, over devices: its program executions
        (its events when none is known)."""
        return float(self.executions or self.occurrences)

    @property
    def time_in_steps_s(self) -> float:
        """Its time inside the steps, summed over devices (all of it where the trace has no steps)."""
        return self.total_time_s if self.in_steps_s is None else min(self.in_steps_s, self.total_time_s)

    @property
    def runs_in_steps(self) -> float:
        """Its runs inside the steps, over devices (all of them where the trace has no steps): its runs in the
        share of its events that lie inside the steps."""
        if self.in_steps_occurrences is None or not self.occurrences:
            return self.runs
        return self.runs * min(self.in_steps_occurrences / self.occurrences, 1.0)


@dataclass(frozen=True)
class StepBreakdown:
    """One program's step on one device, measured and predicted (seconds)."""

    program: str
    steps: int
    step_time_s: float  # measured mean step time (annotations), or busy+idle per step
    predicted_s: float  # roofline sum of the ops it ran per step
    model_flops: float  # per device per step: FLOPs of the dots and convolutions only (elementwise work excluded)
    mfu: float | None  # model FLOPs / (step time × peak); None when the model FLOPs are unknown
    compute_s: float
    communication_s: float
    layout_s: float  # copies, transposes, data movement
    host_s: float  # transfers between device and host memory (offload, infeed/outfeed)
    other_s: float
    idle_s: float  # the device runs no op: the step less the union of its op events in it (measured per step)
    unpriced_s: float
    basis: str = "steps"  # "steps" (markers or inferred), "executions" (no steps: one program execution), "window"
    bound_excess_s: float = 0.0  # time in kernels priced by a lower bound beyond that bound (inside kernels)
    periods: float = 1.0  # per device, what its measured totals are divided by: the steps, or (basis executions)
    # the program's executions; an op's runs per step are its runs / (devices × periods)
    mfu_note: str = ""  # why MFU is withheld (None) though its FLOPs and peak are known, or why it is overstated
    # the step program's: the other programs' device time inside the steps, per step and device (evaluation,
    # metrics, callbacks), most first; counted apart from idle
    other_programs: tuple[tuple[str, float], ...] = ()
    programs: tuple[str, ...] = ()  # the programs its figures hold (a step function compiled several times: all)
    trip_count: int | None = None  # one execution as the unit: its outermost loop's iterations, where the HLO says
    # op time of the parts above that ran at the same time as other ops of the step (XLA:CPU's threads, several
    # GPU streams, collectives beside compute): counted in each op's part, once more than the step holds it, so
    # parts + other programs + idle − concurrent = the step
    concurrent_s: float = 0.0

    @property
    def other_programs_s(self) -> float:
        return sum(s for _, s in self.other_programs)

    @property
    def parts_s(self) -> float:
        """The step program's op time in the step, its parts summed (ops that ran side by side counted each)."""
        return self.compute_s + self.communication_s + self.layout_s + self.host_s + self.other_s


@dataclass(frozen=True)
class InWindow:
    """What the capture recorded besides the trace: compilations, cache misses, implicit transfers.
    Its compilations are the manifest's :class:`Compilation` records with every field the report
    shows filled in (duration, where, module, reason)."""

    compilations: tuple[Compilation, ...] = ()  # whole_run: recompilations only; else every compilation in the window
    whole_run: bool = False  # a `rooflens run` profile (first compilations are warm-up, not listed above)
    cache_misses: tuple[str, ...] = ()
    transfers: tuple[str, ...] = ()
    transfer_times_unix_s: tuple[float, ...] | None = None  # one per transfer, where recorded

    @property
    def compile_s(self) -> float:
        return sum(c.duration_s for c in self.compilations)

    @classmethod
    def from_manifest(cls, manifest: RunManifest) -> InWindow:
        w = manifest.window
        comps = tuple(Compilation(float(c.duration_s or 0.0), c.where or "", c.module or "", reason=c.reason or "")
                      for c in w.compilations or [])
        times = w.transfer_times_unix_s
        whole_run = w.first_compilations is not None or "first_compilations" in w.order
        return cls(comps, whole_run, tuple(str(m) for m in (w.cache_misses or [])),
                   tuple(str(x) for x in (w.transfers or [])),
                   tuple(float(t) for t in times) if times is not None else None)

    def to_json(self) -> dict:
        return {"compilations": [{"duration_s": c.duration_s, "where": c.where, "module": c.module, "reason": c.reason}
                                 for c in self.compilations],
                "whole_run": self.whole_run, "cache_misses": list(self.cache_misses), "transfers": list(self.transfers),
                "transfer_times_unix_s": list(self.transfer_times_unix_s) if self.transfer_times_unix_s is not None
                else None}


@dataclass(frozen=True)
class TimelineOp:
    lane: int  # index into Timeline.lanes
    start_s: float  # from the start of the window shown
    duration_s: float
    name: str
    category: str


@dataclass(frozen=True)
class Timeline:
    """The representative step (the median one), or the whole capture when there are no steps."""

    lanes: tuple[str, ...]  # device names ("3", or "host:3" with several hosts)
    ops: tuple[TimelineOp, ...]
    duration_s: float
    categories: tuple[str, ...]
    note: str  # which window this is


@dataclass
class Report:
    chip: str
    chip_reason: str
    platform: str
    device_kind: str
    num_devices: int
    op_stats: list[OpStat]
    comparison: list[OpComparison]
    steps: StepBreakdown | None
    stats: OpStats
    findings: list[Finding] = field(default_factory=list)
    memory: MemorySummary | None = None
    notes: list[str] = field(default_factory=list)
    programs: list[StepBreakdown] = field(default_factory=list)  # every program, most time first
    roofs: Roofs | None = None  # None: no roofline to compare with (the comparison is all unpriced)
    timeline: Timeline | None = None
    graphs: dict[str, OpGraph] = field(default_factory=dict)  # "program/op" → its HLO graph, for the costly ops
    in_window: InWindow = field(default_factory=InWindow)
    path: str = ""
    sources: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    metadata: dict = field(default_factory=dict)
    modules: dict = field(default_factory=dict, repr=False)  # program → hlo.Module (for the rules and diff)
    command_buffer_ops: frozenset = field(default=frozenset(), repr=False)  # Profile.command_buffer_ops
    steady: SteadyState = field(default_factory=SteadyState, repr=False)  # idle time over the steady state (rules)
    trace_rates: tuple = field(default=(), repr=False)  # per-op rates from the trace's own counts (roofline-trust)
    events: object = field(default=None, repr=False)  # its EventTable: the op events the Perfetto view writes
    plan: object = None  # a rooflens.plan.PlanCheck: the model's plan against this run (rl.analyze(plan=…))
    calibration: dict | None = None  # a calibrated chip's (CPU 'local'): when made, its spread, recorded or not
    #: one sentence when the chip given is not the one the trace ran on (the comparison is then a what-if), else ""
    chip_mismatch: str = ""
    framework: str = ""  # what made the trace: "JAX", "TensorFlow", "PyTorch", or "" (not known)

    @property
    def chip_peaks(self) -> dict[str, float]:
        return dict(self.roofs.peak_flops_per_s) if self.roofs else {}

    # -- the figures per device and per step (what the cards and the step say), for the views --------

    @property
    def per_step_divisor(self) -> float:
        """What a total summed over devices and the whole window is divided by to read per device and per
        step: devices × the step's periods (its steps, or its program's executions); devices alone with no
        step."""
        periods = self.steps.periods if self.steps is not None and self.steps.periods > 0 else 1.0
        return max(self.num_devices, 1) * periods

    @property
    def per_step_label(self) -> str:
        """How :attr:`by_category_per_step_s` and :attr:`by_scope_per_step_s` read: ``per device per step``."""
        st = self.steps
        if st is None:
            return "per device, over the whole trace"
        if st.basis == "executions":
            return f"per device per execution of {st.program}" if st.program else "per device, over the capture"
        if st.basis == "window":
            return "per device, over the capture window"
        return "per device per step"

    @property
    def by_category_per_step_s(self) -> dict[str, float]:
        """Device time by category, :attr:`per_step_label` (every program's ops in the window, on average)."""
        d = self.per_step_divisor
        return {k: v / d for k, v in self.stats.by_category_s.items()}

    @property
    def by_scope_per_step_s(self) -> dict[str, float]:
        """Device time by named-scope prefix, :attr:`per_step_label` (empty when no op has a scope)."""
        d = self.per_step_divisor
        return {k: v / d for k, v in self.stats.by_scope_prefix_s.items()}

    def _breakdown_json(self, b: StepBreakdown) -> dict:
        """A step breakdown; with no roofline its roofline figures are unknown (null), not zero."""
        d = as_dict(b)
        if self.roofs is None:
            d.update(predicted_s=None, unpriced_s=None, bound_excess_s=None)
        return d

    def to_json(self) -> dict:
        """The one JSON document (``--json`` and ``--out``; docs/report-schema.md)."""
        return {
            "schema_version": SCHEMA_VERSION, "measured_statistic": MEASURED_STATISTIC, "path": self.path,
            "sources": list(self.sources),
            "hosts": list(self.hosts), "metadata": self.metadata,
            "chip": self.chip, "chip_reason": self.chip_reason, "chip_mismatch": self.chip_mismatch or None,
            "platform": self.platform, "framework": self.framework or None,
            "device_kind": self.device_kind, "num_devices": self.num_devices,
            "roofs": as_dict(self.roofs) if self.roofs else None, "calibration": self.calibration,
            "op_stats": [as_dict(s) for s in self.op_stats],
            "comparison": [as_dict(c) for c in self.comparison],
            "findings": [f.to_dict() for f in self.findings],
            "programs": [self._breakdown_json(p) for p in self.programs],
            "steps": {**(as_dict(self.stats.steps) if self.stats.steps else {"count": 0}),
                      "breakdown": self._breakdown_json(self.steps) if self.steps else None},
            "devices": [as_dict(d) for d in self.stats.devices],
            "host_steps": as_dict(self.stats.host_steps) if self.stats.host_steps else None,
            "by_category_s": dict(self.stats.by_category_s), "by_program_s": dict(self.stats.by_program_s),
            "per_step": {"label": self.per_step_label, "by_category_s": self.by_category_per_step_s,
                         "by_scope_s": self.by_scope_per_step_s},
            "in_window": self.in_window.to_json(), "unran": [as_dict(u) for u in self.stats.unran],
            "memory": self.memory.to_dict() if self.memory else {}, "notes": list(self.notes),
            "graphs": {k: g.to_dict() for k, g in self.graphs.items()},
            **({"plan": self.plan.to_dict()} if self.plan is not None else {}),
        }
