"""Expected vs observed: every measured op joined with its roofline, per op, step and program.

``analyze(profile, chip=None)`` prices the HLO that actually ran (the programs' optimized
modules, as the trace or the capture recorded them) on the chip the trace ran on, and joins it
with the measured op stats by program and instruction name. Times are per device: a measured
op's time per execution is its total over devices and executions divided by their number.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from rooflens.cost.model import OpCost, OpPrediction, costs, price
from rooflens.errors import RooflensError
from rooflens.hardware import Chip, ChipError, shared_by
from rooflens.hardware import chip as get_chip
from rooflens.hardware import infer_chip as infer_from_trace
from rooflens.trace.profile import Profile
from rooflens.trace.stats import OpStat, OpStats, op_stats

SCHEMA_VERSION = 1  # of Report.to_json(); see docs/report-schema.md
COMPUTE = ("matmul", "convolution", "fusion", "elementwise", "reduction")
LAYOUT = ("copy/transpose", "data movement")


@dataclass(frozen=True)
class OpComparison:
    """One measured op next to its roofline (times per execution on one device)."""

    name: str
    program: str
    category: str
    named_scope: str
    opcode: str
    occurrences: int
    total_time_s: float  # measured, summed over devices and executions
    measured_s: float  # per execution (median)
    predicted_s: float | None  # None: the cost model could not price it
    ratio: float | None  # measured / predicted
    bound: str
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

    @property
    def priced(self) -> bool:
        return self.predicted_s is not None


@dataclass(frozen=True)
class StepBreakdown:
    """One program's step on one device, measured and predicted (seconds)."""

    program: str
    steps: int
    step_time_s: float  # measured mean step time (annotations), or busy+idle per step
    predicted_s: float  # roofline sum of the ops it ran per step
    model_flops: float  # per device per step: FLOPs of the dots and convolutions only (elementwise work excluded)
    mfu: float | None  # model FLOPs / (step time × peak)
    compute_s: float
    communication_s: float
    layout_s: float  # copies, transposes, data movement
    host_s: float  # transfers between device and host memory (offload, infeed/outfeed)
    other_s: float
    idle_s: float  # device idle inside the step window
    unpriced_s: float


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
    findings: list = field(default_factory=list)
    memory: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    programs: list[StepBreakdown] = field(default_factory=list)  # every program, most time first
    modules: dict = field(default_factory=dict, repr=False)  # program → hlo.Module (for the rules)
    chip_peaks: dict = field(default_factory=dict)
    profile: Profile | None = field(default=None, repr=False)  # what was analysed (for the timeline views)

    def to_html(self, path, prediction=None, title: str = "") -> str:
        """Write the single-file HTML report to ``path`` (returns the path)."""
        from rooflens.report.html import build_view, render_html

        with open(path, "w", encoding="utf-8") as fh:
            fh.write(render_html(build_view(self, self.profile, prediction=prediction, title=title)))
        return str(path)

    def to_json(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "chip": self.chip, "chip_reason": self.chip_reason, "platform": self.platform,
            "device_kind": self.device_kind, "num_devices": self.num_devices,
            "op_stats": [asdict(s) for s in self.op_stats],
            "comparison": [asdict(c) for c in self.comparison],
            "findings": [f.to_dict() for f in self.findings],
            "programs": [asdict(p) for p in self.programs],
            "steps": {**(asdict(self.stats.steps) if self.stats.steps else {"count": 0}),
                      "breakdown": asdict(self.steps) if self.steps else None},
            "devices": [asdict(d) for d in self.stats.devices],
            "in_window": self.stats.in_window, "memory": self.memory, "notes": self.notes,
        }


def infer_chip(profile: Profile) -> tuple[Chip, str]:
    """The catalogue chip of the trace's devices (CPU: the calibrated ``local``)."""
    kind = profile.device_kind
    if profile.platform == "cpu":
        try:
            return get_chip("local"), "CPU trace: the calibrated chip 'local'"
        except ChipError:
            raise RooflensError("this is a CPU trace and there is no calibrated chip 'local' yet; run "
                                "`rooflens calibrate` first (or give --chip).") from None
    try:  # by name (device_type_string, the CUDA/ROCm device name), else vendor + cores + memory + clock
        return infer_from_trace(kind, profile.plane_stats)
    except ChipError as e:
        raise RooflensError(str(e)) from None


def _cost_from_trace(profile: Profile, program: str, name: str, meta: dict) -> OpCost:
    """An op priced from XLA's own counts in the trace (TPU ``model_flops`` / ``bytes_accessed``)."""
    info = profile.op_info.get((program, name))
    category = info.category if info else "unknown"
    flops, nbytes = float(meta.get("flops") or 0.0), float(meta.get("bytes") or 0.0)
    return OpCost(
        name=name, opcode=info.opcode if info else "", category=category, computation="", count=1.0, flops=flops,
        transcendentals=0.0, read_bytes=nbytes, written_bytes=0.0, dtype="bf16", precision="default",
        is_matmul=category in ("matmul", "convolution"), named_scope=info.named_scope if info else "",
        model_flops=flops if category in ("matmul", "convolution") else 0.0,
        flops_formula=f"{flops:.4g} (XLA's model_flops, from the trace)",
        bytes_formula=f"{nbytes:.4g} B (XLA's bytes_accessed, from the trace)")


def _unpriced_reason(pred: OpPrediction | None, opcode: str, category: str) -> str:
    if pred is None:
        return "no HLO for this op"
    if category in ("custom-call", "unknown", "other") and not pred.flops:
        return f"{opcode}: the cost model has no formula for it"
    return ""


def compute_concurrency(profile: Profile, n_dev: int) -> float:
    """How many devices compute at the same time on average: their summed busy time over the union's.

    Collectives are left out: on forced CPU devices a device "in" an all-reduce mostly waits for
    the others, which would count as running at once.
    """
    import numpy as np

    from rooflens.trace.stats import _busy

    t = profile.table
    info = profile.op_info
    prog_code = {p: i for i, p in enumerate(t.programs)}
    name_code = {n: i for i, n in enumerate(t.names)}
    comm = np.zeros(len(t.programs) * (len(t.names) + 1), dtype=bool)
    for (program, name), oi in info.items():
        if oi.category == "collective":
            comm[prog_code[program] * (len(t.names) + 1) + name_code[name]] = True
    keep = ~comm[t.program.astype(np.int64) * (len(t.names) + 1) + t.name]
    start, end = t.start_ns[keep], t.end_ns[keep]
    dev = t.device[keep]
    per_device = sum(_busy(start[dev == d], end[dev == d])[0] for d in np.unique(dev))
    union = _busy(start, end)[0]
    return max(1.0, min(float(n_dev), per_device / union)) if union else 1.0


def analyze(profile: Profile, chip: str | Chip | None = None) -> Report:
    from rooflens.analysis.rules import run_rules

    if chip is None:
        c, reason = infer_chip(profile)
    else:
        c, reason = get_chip(chip), "given"
    stats = op_stats(profile)
    n_dev = max(len(stats.devices), 1)
    serial = 1.0  # how many devices' steps the hardware runs one after another (CPU: n / concurrency)
    if c.kind == "cpu" and n_dev > 1:
        # forced CPU devices share the cores calibration measured for one device alone; they share them
        # among as many devices as compute at once on average
        concurrency = compute_concurrency(profile, n_dev)
        c = shared_by(c, concurrency)
        serial = n_dev / concurrency
        reason += f", shared by the {concurrency:.1f} of its {n_dev} devices that run at once on average"
    preds: dict[tuple[str, str], OpPrediction] = {}
    async_start: dict[tuple[str, str], str] = {}  # start → its done: the trace shows the wait on the done
    modules = {}
    for program in stats.by_program_s:
        module = profile.module_for(program)
        if module is None:
            continue
        modules[program] = module
        for oc in costs(module, emulate_fusion=False):
            preds[(program, oc.name)] = price(oc, c, num_devices=module.num_devices)
        for ins in module.instructions():
            if ins.opcode.endswith("-done") and ins.operands and (program, ins.operands[0].name) in preds:
                preds[(program, ins.name)] = preds[(program, ins.operands[0].name)]  # the pair's cost, on the done
                async_start[(program, ins.operands[0].name)] = ins.name
    for (program, name), meta in profile.table.op_meta.items():
        if (program, name) not in preds and (meta.get("flops") or meta.get("bytes")):
            preds[(program, name)] = price(_cost_from_trace(profile, program, name, meta), c)
    steps = stats.steps.count if stats.steps else 0
    comparison = []
    peaks = c.peak_flops_per_s
    for s in stats.op_stats:
        p = preds.get((s.program, s.name))
        info = profile.op_info.get((s.program, s.name))
        opcode = info.opcode if info else ""
        per = s.median_time_s  # per execution; the median, so one noisy run does not make an op "slow"
        why = _unpriced_reason(p, opcode, s.category)
        if (s.program, s.name) in async_start:
            done = async_start[(s.program, s.name)]
            why = f"an async start: its pair is priced on {done}, where the trace shows the wait"
        predicted = None if why or p is None else p.t_pred_s
        flops = p.flops if p else 0.0
        mflops = p.model_flops if p else 0.0
        nbytes = p.bytes if p else 0.0
        peak = peaks.get(p.peak_key) if p else None
        comparison.append(OpComparison(
            name=s.name, program=s.program, category=s.category, named_scope=s.named_scope, opcode=opcode,
            occurrences=s.occurrences, total_time_s=s.total_time_s, measured_s=per, predicted_s=predicted,
            ratio=(per / predicted) if predicted else None, bound=p.bound if p else "unpriced",
            flops=flops, bytes=nbytes, comm_bytes=p.comm_bytes if p else 0.0,
            achieved_flops_per_s=flops / per if per else 0.0, achieved_bytes_per_s=nbytes / per if per else 0.0,
            flops_fraction_of_peak=((mflops or flops) / per / peak) if per and peak and flops else None,
            bytes_fraction_of_peak=(nbytes / per / c.hbm_bytes_per_s) if per and nbytes and c.hbm_bytes_per_s else None,
            unpriced_reason=why, explanation=p.explanation if p else (), model_flops=mflops,
        ))
    report = Report(
        chip=c.name, chip_reason=reason, platform=profile.platform, device_kind=profile.device_kind,
        num_devices=n_dev, op_stats=stats.op_stats, comparison=comparison,
        steps=None, stats=stats, notes=list(stats.notes), modules=modules, chip_peaks=dict(peaks), profile=profile,
        programs=[b for p in stats.by_program_s if (b := _step_breakdown(stats, comparison, c, n_dev, steps, serial,
                                                                         program=p)) is not None],
    )
    report.steps = report.programs[0] if report.programs else None  # by_program_s is ordered, most time first
    if profile.metadata.get("memory"):
        from pathlib import Path

        from rooflens.memory.report import memory_of_run

        report.memory = memory_of_run(Path(profile.sources[0]).parent, profile.metadata, profile.module_for)
    report.findings = run_rules(report)
    return report


def _step_breakdown(stats: OpStats, comparison: list[OpComparison], chip: Chip, n_dev: int,
                    steps: int, serial: float = 1.0, program: str | None = None) -> StepBreakdown | None:
    """One program's step per device (default: the program with the most time). ``serial`` > 1 when
    devices share one processor (forced CPU devices): the roofline step is then their work run
    ``n / serial`` at a time."""
    if not comparison:
        return None
    biggest = max(stats.by_program_s, key=stats.by_program_s.get)
    main = program or biggest
    ops = [c for c in comparison if c.program == main]
    per_step = max(steps, 1) * n_dev  # executions of a once-per-step op
    split = {"compute": 0.0, "communication": 0.0, "layout": 0.0, "host": 0.0, "other": 0.0}
    predicted = flops = unpriced = 0.0
    for c in ops:
        t = c.total_time_s / per_step
        group = ("communication" if c.category == "collective" else "compute" if c.category in COMPUTE
                 else "layout" if c.category in LAYOUT else "host" if c.category == "host transfer" else "other")
        split[group] += t
        runs = c.occurrences / per_step
        if c.priced:
            predicted += c.predicted_s * runs
        else:
            unpriced += t
        flops += c.model_flops * runs  # MFU counts the matmul work only
    if main != biggest:  # a side program: its own time per step, not the step's
        step_time = sum(c.total_time_s for c in ops) / per_step
    elif stats.steps:
        step_time = stats.steps.mean_s
    else:
        step_time = sum(d.window_s for d in stats.devices) / n_dev / max(steps, 1)
    busy = sum(split.values())
    peak = chip.peak_flops_per_s.get("bf16") or max(chip.peak_flops_per_s.values())
    return StepBreakdown(
        program=main, steps=steps, step_time_s=step_time, predicted_s=predicted * serial, model_flops=flops,
        mfu=flops / (step_time * peak) if step_time and peak else None, compute_s=split["compute"],
        communication_s=split["communication"], layout_s=split["layout"], host_s=split["host"],
        other_s=split["other"],
        idle_s=max(step_time - busy, 0.0), unpriced_s=unpriced,
    )
