"""Expected vs observed: every measured op joined with its roofline, per op, step and program.

``analyze(profile, chip=None, memory=None)`` prices the HLO that actually ran (the programs'
optimized modules, as the trace or the capture recorded them) on the chip the trace ran on, and
joins it with the measured op stats by program and instruction name. Times are per device and per
execution of the op's program: its events there summed (all its kernels, every loop iteration), against
its roofline times its runs in one execution (:func:`runs_in_execution`).

It is pure and made of small stages: the chip (``resolve_chip``, ``share_cpu``), the pricing
(``price_programs``), the join (``join``), the steps (``step_breakdowns``), the views' data
(``representative_timeline``, ``explain_ops``) and the rules. Files are read before it: the
memory summary is an argument (``rooflens.memory.read_run_memory``).
"""

from __future__ import annotations

import statistics
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np

from rooflens.analysis.chip_rates import op_rates
from rooflens.analysis.report import (
    MATRIX_CATEGORIES,
    InWindow,
    OpComparison,
    Report,
    Roofs,
    StepBreakdown,
    Timeline,
    TimelineOp,
    group_of,
)
from rooflens.analysis.trust import (
    check_roofline,
    module_kernels,
    price_from_text,
    trace_hbm_bytes,
)
from rooflens.cost.cache import from_l2, l2_capacity_bytes, l2_resident_reads
from rooflens.cost.kernels import is_host_callback
from rooflens.cost.model import OpCost, OpPrediction, costs, price, trip_count
from rooflens.errors import RooflensError
from rooflens.hardware import LOCAL_CHIP, Chip, ChipError, read_catalog_text, shared_by
from rooflens.hardware import chip as get_chip
from rooflens.hardware import infer_chip as infer_from_trace
from rooflens.hardware.calibrate import made_and_spread
from rooflens.hardware.infer import chip_mismatch
from rooflens.hlo import Module
from rooflens.hlo.graph import OpGraph, op_graph
from rooflens.memory.summary import MemorySummary
from rooflens.trace import memo
from rooflens.trace.assemble import NO_STEPS
from rooflens.trace.events import unique_rows
from rooflens.trace.groupby import is_sorted, unique_values
from rooflens.trace.idle import measure_steady_state
from rooflens.trace.profile import Profile
from rooflens.trace.stats import OpStats, busy_together_ps, category_table, op_stats
from rooflens.trace.warmup import execution_index, program_executions

MAX_HLO_EXPLAINED = 150  # ops (by total time) whose instruction is explained in the report
MAX_GRAPHS = 30  # ops (by total time) whose HLO graph the report holds (each ~40 nodes laid out)
MAX_TIMELINE_OPS = 20000
#: op time at once below this share of the step is the rounding of float sums of many op times (a step's parts
#: are sums of picosecond counts in seconds: 1e-16 of them), not ops that ran together
ROUNDING_REL = 1e-9


# -- the chip -------------------------------------------------------------------------------------

#: the origin of a calibration read back from a run's manifest (:func:`recorded_calibration`)
RECORDED = "recorded with the run"


def recorded_calibration(profile: Profile) -> Chip | None:
    """The chip ``local`` as the run recorded it when it ran (``rooflens run``, ``rl.capture``), or None."""
    rec = profile.manifest.calibration or {}
    if not isinstance(rec.get("toml"), str):
        return None
    try:
        return read_catalog_text(rec["toml"], f"{RECORDED} ({rec.get('path') or 'its calibration file'})")[LOCAL_CHIP]
    except (ChipError, KeyError):
        return None


def calibration_summary(c: Chip | None) -> dict | None:
    """The calibration a report was priced against (the report JSON's ``calibration``): when it was made, its
    spread (IQR / median), busy or not, recorded with the run or not; None for a catalogue chip."""
    if c is None or not (c.calibration or c.calibrated_at):
        return None
    from rooflens.hardware.calibrate import BUSY_SPREAD

    return {"chip": c.name, "made": c.calibrated_at or c.calibration.split(": ", 1)[0],  # older files: the summary's
            "spread_iqr_over_median": c.calibration_spread,
            "busy": c.calibration_spread is not None and c.calibration_spread > BUSY_SPREAD,
            "recorded_with_run": c.origin.startswith(RECORDED), "origin": c.origin, "summary": c.calibration}


def calibration_words(c: Chip) -> str:
    """``calibration made 2026-11-26 06:45 UTC, IQR up to 22% of the median (a busy machine)``: a calibrated
    chip's when and spread, as a report's header names them."""
    return f"calibration {made_and_spread(calibration_summary(c) or {})}"


def infer_chip(profile: Profile) -> tuple[Chip, str]:
    """The catalogue chip of the trace's devices (CPU: the calibration the run recorded, else this machine's
    calibrated ``local``)."""
    kind = profile.device_kind
    if profile.platform == "cpu":
        recorded = recorded_calibration(profile)
        if recorded is not None:
            return recorded, f"CPU trace: the {calibration_words(recorded)}, {RECORDED}"
        try:
            c = get_chip(LOCAL_CHIP)
        except ChipError:
            raise RooflensError("this is a CPU trace and there is no calibrated chip 'local' yet; run "
                                "`rooflens calibrate` first (or give --chip).") from None
        return c, f"CPU trace: this machine's {calibration_words(c)} (the run recorded none)"
    try:  # by name (device_type_string, the CUDA/ROCm device name), else vendor + cores + memory + clock
        return infer_from_trace(kind, profile.plane_stats)
    except ChipError as e:
        if profile.platform == "tpu":  # no generation named: what its ops achieved bounds the chip from below
            from rooflens.analysis.chip_rates import infer_tpu_from_rates

            return infer_tpu_from_rates(profile, str(e))
        raise RooflensError(str(e)) from None


def resolve_chip(profile: Profile, chip: str | Chip | None) -> tuple[Chip, str]:
    """The chip to compare with: the one given (a name or a user's own Chip), else the trace's."""
    if chip is None:
        return infer_chip(profile)
    c = get_chip(chip)
    return c, "given" + (f" ({calibration_words(c)})" if c.calibration or c.calibrated_at else "")


def compute_concurrency(profile: Profile) -> float:
    """How many devices compute at the same time on average: their summed busy time over the union's
    (1.0 when nothing ran).

    Collectives are left out: on forced CPU devices a device "in" an all-reduce mostly waits for
    the others, which would count as running at once.
    """
    t = profile.table
    per_device, union = busy_together_ps(t, category_table(t, profile.op_info, "collective"))
    return per_device / union if union else 1.0


def share_cpu(profile: Profile, chip: Chip, n_dev: int, concurrency: float | None = None
              ) -> tuple[Chip, float, str]:
    """(chip as each device sees it, how many devices' work runs one after another, reason suffix).

    Forced CPU devices share the cores calibration measured for one device alone; they share them
    among as many devices as compute at once on average (``concurrency``: :func:`compute_concurrency`'s,
    when measured already)."""
    if chip.kind != "cpu" or n_dev <= 1:
        return chip, 1.0, ""
    raw = compute_concurrency(profile) if concurrency is None else concurrency
    concurrency = max(1.0, min(float(n_dev), raw))
    return (shared_by(chip, concurrency), n_dev / concurrency,
            f", shared by the {concurrency:.1f} of its {n_dev} devices that run at once on average")


def roofs_of(chip: Chip) -> Roofs:
    return Roofs(chip.name, dict(chip.peak_flops_per_s), float(chip.hbm_bytes_per_s or 0.0))


# -- pricing --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TraceCounts:
    """XLA's own per-op counts carried by a trace (TPU ``model_flops``/``flops`` and ``bytes_accessed``)."""

    flops: float
    bytes: float


def trace_counts(profile: Profile) -> dict[tuple[str, str], TraceCounts]:
    out = {}
    for key, meta in profile.table.op_meta.items():
        flops, nbytes = float(meta.get("flops") or 0.0), float(meta.get("bytes") or 0.0)
        if flops or nbytes:
            out[key] = TraceCounts(flops, nbytes)
    return out


@dataclass(frozen=True)
class Pricing:
    preds: dict[tuple[str, str], OpPrediction]
    async_done: dict[tuple[str, str], str]  # an async start → its done (the trace shows the wait on the done)
    modules: dict[str, Module]
    kernels: dict = field(default_factory=dict)  # (program, op) → KernelCost of the custom kernels priced
    cached: dict = field(default_factory=dict)  # (program, op) → OpPrediction with the reads its L2 holds off HBM


def program_modules(profile: Profile, programs) -> dict[str, Module]:
    return {p: m for p in programs if (m := profile.module_for(p)) is not None}


def _cost_from_trace(profile: Profile, program: str, name: str, counts: TraceCounts) -> OpCost:
    """An op priced from XLA's own counts in the trace (TPU ``model_flops`` / ``bytes_accessed``)."""
    info = profile.op_info.get((program, name))
    category = info.category if info else "unknown"
    flops, nbytes = counts.flops, counts.bytes
    # XLA counts on-chip (VMEM) bytes too: keep the HBM side
    nbytes, where = trace_hbm_bytes(profile.table.hlo_text.get((program, name)), nbytes)
    return OpCost(
        name=name, opcode=info.opcode if info else "", category=category, computation="", count=1.0, flops=flops,
        transcendentals=0.0, read_bytes=nbytes, written_bytes=0.0, dtype="bf16", precision="default",
        is_matmul=category in MATRIX_CATEGORIES, named_scope=info.named_scope if info else "",
        model_flops=flops if category in MATRIX_CATEGORIES else 0.0,
        flops_formula=f"{flops:.4g} (XLA's model_flops, from the trace)",
        bytes_formula=f"{nbytes:.4g} B ({where})")


#: a program of at least this many instructions has its priced ops kept on disk (:mod:`rooflens.trace.memo`): the
#: 17 programs of the Pax FSDP pod's process (2,682 ops priced) took 3.8 s of its 7.3 s report
PRICED_ON_DISK_MIN_INSTRUCTIONS = 1000


def _priced_module(module: Module, text: str | None, chip: Chip, l2: float | None) -> tuple[dict, dict]:
    """Every op of ``module`` priced on ``chip`` (by op name), and where part of its reads stay in the L2 of ``l2``
    bytes, the same priced from there; remembered by the program's text, the chip and the code that prices."""
    def compute() -> tuple[dict, dict]:
        resident = l2_resident_reads(module, l2)
        preds, cached = {}, {}
        for oc in costs(module, emulate_fusion=False):
            preds[oc.name] = price(oc, chip, num_devices=module.num_devices)
            if resident.get(oc.name):
                cached[oc.name] = price(from_l2(oc, resident[oc.name], l2), chip, num_devices=module.num_devices)
        return preds, cached

    if text is None:
        return compute()
    key = (memo.digest_of(text), repr(chip), l2, module.num_devices,
           memo.sources_digest("cost", "hlo", "hardware"))
    return memo.remembered("priced_module", key, len(module.instructions()), compute,
                           disk_min=PRICED_ON_DISK_MIN_INSTRUCTIONS)


def price_programs(profile: Profile, modules: dict[str, Module], chip: Chip) -> Pricing:
    preds: dict[tuple[str, str], OpPrediction] = {}
    async_done: dict[tuple[str, str], str] = {}
    cached: dict[tuple[str, str], OpPrediction] = {}
    l2 = l2_capacity_bytes(chip)
    for program, module in modules.items():
        own, own_cached = _priced_module(module, profile.hlo_text_for(program), chip, l2)
        preds.update(((program, name), p) for name, p in own.items())
        cached.update(((program, name), p) for name, p in own_cached.items())
        for ins in module.instructions():
            if ins.opcode.endswith("-done") and ins.operands and (program, ins.operands[0].name) in preds:
                preds[(program, ins.name)] = preds[(program, ins.operands[0].name)]  # the pair's cost, on the done
                async_done[(program, ins.operands[0].name)] = ins.name
    for (program, name), counts in trace_counts(profile).items():
        if (program, name) not in preds:
            preds[(program, name)] = price(_cost_from_trace(profile, program, name, counts), chip)
    # a custom call the trace counts bytes for but no FLOPs (XLA cannot see inside it) is priced from its own
    # line when that says more (a matmul's signature, a known kernel)
    text_preds, kernels = price_from_text(
        profile.table, {k for k, p in preds.items() if p.flops or p.category != "custom-call"}, chip, modules)
    preds.update(text_preds)
    return Pricing(preds, async_done, modules, {**module_kernels(modules), **kernels}, cached)


# -- the join -------------------------------------------------------------------------------------

def runs_in_execution(module: Module) -> dict[str, float | None]:
    """How many times each op that runs as an op (entry, loop bodies and conditions, branches, calls) runs in
    one execution of its program in which it runs: 1 in the entry and what a call runs, × the trip count of
    each loop around it (a condition: one more); None where the HLO does not say (a loop without a known trip
    count, a branch inside a loop: it runs some of the iterations)."""
    out: dict[str, float | None] = {}
    if module.entry is None:
        return out
    stack: list[tuple[object, float | None]] = [(module.entry, 1.0)]
    while stack:  # every call path (a computation called from two places runs for both)
        comp, n = stack.pop()
        for ins in comp.instructions:
            had = out.get(ins.name, 0.0)
            out[ins.name] = None if n is None or had is None else had + n
            if ins.opcode == "while":
                k = trip_count(module, ins)
                for c in module.called(ins):
                    stack.append((c, None if n is None or k is None else n * (k + 1 if c.kind == "while condition"
                                                                              else k)))
            elif ins.opcode == "conditional":
                stack.extend((c, n if n == 1 else None) for c in module.called(ins))
            elif ins.opcode == "call" or (ins.opcode.endswith("-start") and ins.opcode != "copy-start"):
                stack.extend((c, n) for c in module.called(ins) if c.kind not in ("fusion", "applied"))
    return out


#: why a host callback has no roofline
HOST_CALLBACK = ("a host callback (jax.debug.print, io_callback, pure_callback): the device hands values to Python on "
                 "the host and waits for it, no kernel to price")


def _unpriced_reason(pred: OpPrediction | None, opcode: str, category: str, callback: bool = False,
                     target: str = "") -> str:
    if callback:
        return HOST_CALLBACK
    if pred is None:
        return "no HLO for this op"
    if category in ("custom-call", "linear algebra", "unknown", "other") and not pred.flops:
        return f"{opcode}{' ' + target if target else ''}: the cost model has no formula for it"
    return ""


def _shape_of(module: Module | None, name: str) -> str:
    ins = module.find(name) if module is not None else None
    return ins.shape.text if ins is not None else ""


def join(profile: Profile, stats: OpStats, pricing: Pricing, roofs: Roofs | None,
         no_roofline: str = "", calibration_spread: float = 0.0) -> list[OpComparison]:
    """Each measured op next to its prediction (``no_roofline``: why there is none at all; ``calibration_spread``:
    a calibrated chip's IQR / median, the wobble of its measured roofs)."""
    out = []
    peaks = roofs.peak_flops_per_s if roofs else {}
    hbm = roofs.hbm_bytes_per_s if roofs else 0.0
    measured = {(s.program, s.name) for s in stats.op_stats}
    runs_in = {program: runs_in_execution(m) for program, m in pricing.modules.items()}
    for s in stats.op_stats:
        key = (s.program, s.name)
        info = profile.op_info.get(key)
        opcode = info.opcode if info else ""
        # per execution of its program on one device: all its kernels there, every iteration of its loops; the
        # median over executions, the report's one statistic (one noisy run does not make an op "slow"), the mean
        # beside it. Its roofline × its runs in one
        k = runs_in.get(s.program, {}).get(s.name)
        if k is None or k <= 0:  # runs unknown to the HLO: one event per run (TPU, CPU)
            k = s.occurrences / s.executions if s.executions else 1.0
        per = s.median_execution_s if s.executions else s.median_time_s
        mean = s.mean_execution_s if s.executions else s.avg_time_s
        p = per_execution(pricing.preds.get(key), k, s.program)
        module = pricing.modules.get(s.program)
        ins = module.find(s.name) if module is not None and opcode == "custom-call" else None
        callback = ins is not None and is_host_callback(ins)
        why = no_roofline or _unpriced_reason(p, opcode, s.category, callback, ins.custom_call_target or ""
                                              if ins is not None else "")
        if key in pricing.async_done and (s.program, pricing.async_done[key]) in measured:
            # (a GPU trace whose start carries the NCCL kernel and has no done op: compared on the start)
            why = f"an async start: its pair is priced on {pricing.async_done[key]}, where the trace shows the wait"
        predicted = None if why or p is None else p.t_pred_s
        flops = p.flops if p else 0.0
        mflops = p.model_flops if p else 0.0
        nbytes = p.bytes if p else 0.0
        peak = peaks.get(p.peak_key) if p else None
        out.append(OpComparison(
            name=s.name, program=s.program, category=s.category, named_scope=s.named_scope, opcode=opcode,
            occurrences=s.occurrences, total_time_s=s.total_time_s, measured_s=per, predicted_s=predicted,
            ratio=(per / predicted) if predicted else None,
            bound=p.bound if p is not None and not callback else "unpriced",
            flops=flops, bytes=nbytes, comm_bytes=p.comm_bytes if p else 0.0,
            achieved_flops_per_s=flops / per if per else 0.0, achieved_bytes_per_s=nbytes / per if per else 0.0,
            # no fraction of a roof for a host callback (its 4 bytes read "memory-bound, <0.01 % of HBM B/s")
            flops_fraction_of_peak=((mflops or flops) / per / peak) if per and peak and flops and not callback
            else None,
            bytes_fraction_of_peak=(nbytes / per / hbm) if per and nbytes and hbm and not callback else None,
            unpriced_reason=why, explanation=p.explanation if p else (), model_flops=mflops,
            shape=_shape_of(pricing.modules.get(s.program), s.name), executions=s.executions,
            runs_per_execution=float(k), self_time_s=s.self_time_s, mean_s=mean, in_steps_s=s.in_steps_s,
            in_steps_occurrences=s.in_steps_occurrences, host_callback=callback,
        ))
        out[-1] = check_roofline(out[-1], pricing.kernels.get(key),
                                 cached=None if why else per_execution(pricing.cached.get(key), k, s.program),
                                 hbm_bytes_per_s=hbm, calibrated=roofs is not None and roofs.chip == LOCAL_CHIP,
                                 spread=calibration_spread)
    return out


def per_execution(p: OpPrediction | None, runs: float, program: str) -> OpPrediction | None:
    """An op's roofline for one execution of its program: ``runs`` of it (the trip counts of the loops around
    it), its counts and times that many times over, and the arithmetic says so."""
    if p is None or runs == 1:
        return p
    return replace(p, flops=p.flops * runs, bytes=p.bytes * runs, comm_bytes=p.comm_bytes * runs,
                   model_flops=p.model_flops * runs, t_math_s=p.t_math_s * runs, t_mem_s=p.t_mem_s * runs,
                   t_comm_s=p.t_comm_s * runs, t_pred_s=p.t_pred_s * runs, t_latency_s=p.t_latency_s * runs,
                   explanation=(*p.explanation, f"× {runs:g} runs in one execution of {program} (the trip counts of "
                                f"the loops around it): {p.t_pred_s * runs:.4g} s per execution"))


# -- steps ----------------------------------------------------------------------------------------

def step_breakdowns(stats: OpStats, comparison: list[OpComparison], roofs: Roofs | None, n_dev: int,
                    serial: float = 1.0, executions: dict | None = None,
                    modules: dict | None = None) -> list[StepBreakdown]:
    """Every program's step per device, the step program's first (:attr:`OpStats.step_choice`; else the program
    with the most time), then most time first. With no steps, ``executions``
    (:func:`rooflens.trace.warmup.program_executions`) makes each program judged per execution of its own, not
    over the capture window. ``modules``: the programs' HLO (the unit's loop trip count)."""
    steps = stats.steps.count if stats.steps else 0
    main = step_program(stats)
    order = sorted(stats.by_program_s, key=lambda p: p != main)  # stable: the rest keep most time first
    return [b for p in order
            if (b := step_breakdown(stats, comparison, roofs, n_dev, steps, serial, program=p,
                                    executions=executions, modules=modules)) is not None]


def step_program(stats: OpStats) -> str | None:
    """The step program the report is of: the step model's choice where it has one with time, else None (the
    program with the most time)."""
    choice = stats.step_choice
    if choice is None:
        return None
    if choice.program in stats.by_program_s:
        return choice.program
    return max((p for p in choice.programs if p in stats.by_program_s), key=stats.by_program_s.get, default=None)


def unit_trip_count(module) -> int | None:
    """The trip count of the outermost loop of a program's entry (the one with the most iterations), where the
    HLO gives one: a whole training in one ``jit`` is a ``lax.scan`` over its updates."""
    if module is None or module.entry is None:
        return None
    trips = [k for ins in module.entry.instructions if ins.opcode == "while"
             if (k := trip_count(module, ins)) is not None]
    return max(trips) if trips else None


def step_breakdown(stats: OpStats, comparison: list[OpComparison], roofs: Roofs | None, n_dev: int,
                   steps: int, serial: float = 1.0, program: str | None = None,
                   executions: dict | None = None, modules: dict | None = None) -> StepBreakdown | None:
    """One program's step per device (default: the step program). ``serial`` > 1 when devices share one
    processor (forced CPU devices): the roofline step is then their work run ``n / serial`` at a time.

    The step program's breakdown holds every program of its function (a step function compiled again for new
    shapes keeps its steps), and the other programs that ran inside the steps (evaluation, metrics, callbacks)
    by program, apart from idle."""
    if not comparison:
        return None
    biggest = max(stats.by_program_s, key=stats.by_program_s.get)
    chosen = step_program(stats) or biggest
    main = program or chosen
    choice = stats.step_choice
    family = ({p for p in choice.programs} | {main}) if (main == chosen and choice is not None and stats.steps) \
        else {main}
    ops = [c for c in comparison if c.program in family]
    runs = (executions or {}).get(main) if not stats.steps else None
    per_step = (runs.runs_per_device if runs else max(steps, 1)) * n_dev  # executions of a once-per-step op
    split = {"compute": 0.0, "communication": 0.0, "layout": 0.0, "host": 0.0, "other": 0.0}
    predicted = flops = unpriced = bound_excess = 0.0
    # a control op (a loop, a branch) holds its body's ops, counted as theirs: its own time is its self time
    control_s = {(s.program, s.name): s.self_time_s for s in stats.op_stats if s.category == "control"}
    # the step program's with steps: its ops' time and runs inside the steps only (not an execution in a step left
    # out for a compilation, nor one before the first step); the idle time measured, not what the parts leave
    stepped = bool(stats.steps) and main == chosen and not runs
    for c in ops:
        share = c.time_in_steps_s / c.total_time_s if stepped and c.total_time_s > 0 else 1.0
        t = control_s.get((c.program, c.name), c.total_time_s) * share / per_step
        split[group_of(c.category)] += t
        n = (c.runs_in_steps if stepped else c.runs) / per_step
        if not c.priced:
            unpriced += t
        elif not c.roofline_reliable:  # faster than its roofline: it took what it took
            predicted += min(c.predicted_s, c.measured_s) * n
        else:
            predicted += c.predicted_s * n
            if c.roofline_bound == "lower":
                bound_excess += max(t - c.predicted_s * n, 0.0)
        flops += c.model_flops * n  # MFU counts the matmul work only
    unit = choice is not None and choice.basis == "execution" and main == chosen
    basis = "executions" if runs or unit else "steps" if stats.steps else "window"
    if runs:
        step_time = runs.mean_span_s  # a decomposition sums means: the parts are each op's mean per execution
    elif main != chosen:  # a side program: its own time per step, not the step's
        step_time = sum(c.total_time_s for c in ops) / per_step
    elif stats.steps:
        step_time = stats.steps.mean_s
    else:
        step_time = sum(d.window_s for d in stats.devices) / n_dev / max(steps, 1)
    busy = sum(split.values())
    others: tuple[tuple[str, float], ...] = ()
    if stats.steps and main == chosen:  # the other programs' device time inside the steps: not idle
        others = tuple((p, s / per_step) for p, s in stats.in_steps_by_program_s.items()
                       if p not in family and s > 0)
    others_s = sum(s for _, s in others)
    concurrent = 0.0
    if stepped and stats.in_steps_busy_s is not None:  # no op runs: the step less the device's busy union in it
        idle = max(step_time - stats.in_steps_busy_s / per_step, 0.0)
        concurrent = max(busy + others_s + idle - step_time, 0.0)  # measured: the op time beyond the union
        if concurrent <= ROUNDING_REL * step_time:  # the rounding of sums of many op times, not ops at once
            concurrent = 0.0
    else:
        idle = max(step_time - busy - others_s, 0.0)
    peak = roofs.mfu_peak_flops_per_s if roofs else 0.0
    mfu = flops / (step_time * peak) if step_time and peak and flops else None
    mfu, mfu_note = mfu_or_why(mfu, ops, flops, peak, step_time, roofs)
    return StepBreakdown(
        program=main, steps=steps, step_time_s=step_time, predicted_s=predicted * serial, model_flops=flops,
        mfu=mfu, mfu_note=mfu_note, compute_s=split["compute"],
        communication_s=split["communication"], layout_s=split["layout"], host_s=split["host"],
        other_s=split["other"], idle_s=idle, unpriced_s=unpriced, basis=basis, concurrent_s=concurrent,
        bound_excess_s=bound_excess, periods=per_step / n_dev, other_programs=others,
        programs=tuple(sorted(family)),
        trip_count=unit_trip_count((modules or {}).get(main)) if unit or (runs and runs.runs_per_device <= 1)
        else None,
    )


def mfu_or_why(mfu: float | None, ops: list[OpComparison], flops: float, peak: float, step_s: float,
               roofs: Roofs | None) -> tuple[float | None, str]:
    """MFU and what to know about it: withheld (None) where it would be above 100 %, because the step's matmuls
    run faster than the peak it divides by (the chip or its calibration is wrong) or its model FLOPs at peak take
    longer than the step (the step is not the device's work); kept with a warning where its matmuls beat the
    peak but the share stays possible (then it is overstated)."""
    if mfu is None:
        return None, ""
    # (a matmul faster than the rate the calibration measured at its shape, below the peak, overstates nothing)
    beaten = [c for c in ops if c.model_flops and not c.roofline_reliable and c.measured_s
              and c.model_flops / c.measured_s > peak]
    chip = roofs.chip if roofs else "the chip"
    if mfu > 1.0:
        if beaten:
            return None, (f"{len(beaten)} of its matmul ops run faster than {chip}'s peak, so a share of that peak "
                          "means nothing (see roofline-trust)")
        return None, (f"its model FLOPs at peak take {flops / peak:.4g} s, longer than the step measured "
                      f"({step_s:.4g} s): the step is shorter than the device's work in it")
    if beaten:
        return mfu, (f"overstated: {len(beaten)} of its matmul ops run faster than {chip}'s peak (see "
                     "roofline-trust)")
    return mfu, ""


# -- what the views show --------------------------------------------------------------------------

def representative_timeline(profile: Profile, limit: int = MAX_TIMELINE_OPS) -> Timeline:
    """The ops of the median step on every device lane (the whole capture when there are no steps)."""
    t = profile.table
    if not len(t):
        return Timeline((), (), 0.0, (), "")
    sampled = profile.reduced.sampled_step if profile.reduced is not None else None
    if profile.steps and sampled is not None:  # a pod merged from aggregates kept this step's events alone
        num, s0, s1 = next(((n, float(s), float(e)) for n, s, e in profile.steps if n == sampled), profile.steps[0])
        note = (f"step {num} (the middle step by number: a pod merged from its {len(profile.hosts)} hosts' aggregates "
                "keeps one step's events per host)")
    elif profile.steps:
        spans_ns = [(num, float(s), float(e)) for num, s, e in profile.steps]
        durations = [e - s for _, s, e in spans_ns]
        num, s0, s1 = spans_ns[durations.index(statistics.median_low(durations))]
        note = f"step {num} (the median step)"
    else:
        s0, s1 = t.extent_ns
        note = "the whole capture (no step annotations)"
    start = t.start_ns
    if is_sorted(start):  # the table's own order: the step's events are one slice of it
        lo, hi = int(np.searchsorted(start, s0, side="left")), int(np.searchsorted(start, s1, side="right"))
        sel = np.arange(lo, min(hi, lo + limit))
    else:
        sel = np.flatnonzero((start >= s0) & (start <= s1))[:limit]
    lane_keys, lane_of = unique_rows(t.host[sel], t.device[sel])  # lanes sorted by (host, device)
    op_pairs, op_of = unique_rows(t.program[sel], t.name[sel])
    info = profile.op_info
    op_cat = []
    for p, n in op_pairs.tolist():  # each distinct op once: its name and category
        program, name = t.programs[p], t.names[n]
        oi = info.get((program, name))
        op_cat.append((name, oi.category if oi else "unknown"))
    cats = {op_cat[k][1] for k in set(op_of.tolist())}
    ops = [TimelineOp(ln, s, du, *op_cat[k]) for ln, s, du, k in zip(
        lane_of.tolist(), ((start[sel] - s0) * 1e-9).tolist(), (t.dur_ps[sel] * 1e-3 * 1e-9).tolist(), op_of.tolist())]
    keys = [tuple(k) for k in lane_keys.tolist()]
    if len(sel) == limit:
        note += f"; first {limit:,} events"
    one_host = len({h for h, _ in keys}) == 1
    lanes = tuple(str(d) if one_host else f"{h}:{d}" for h, d in keys)
    return Timeline(lanes, tuple(ops), (s1 - s0) * 1e-9, tuple(sorted(cats)), note)


def hlo_lines(module: Module, name: str) -> tuple[str, ...]:
    """One instruction explained in a few lines (what it computes, shape, layout, operands, body)."""
    from rooflens.hlo.explain import explain

    try:
        x = explain(module, name)
    except KeyError:
        return ()
    lines = [x.what, f"shape {x.shape} ({x.bytes:,} B, padded {x.padded_bytes:,} B), memory space {x.memory_space}"]
    lines += x.layout + x.details + x.collective + x.sharding + x.source
    lines += [f"operand {o.name}: {o.shape}" for o in x.operands][:8]
    for comp, body in list(x.called.items())[:2]:
        lines.append(f"body {comp}:")
        lines += ["  " + b for b in body[:20]]
    return tuple(str(line) for line in lines if line)


def explain_ops(comparison: list[OpComparison], modules: dict[str, Module],
                limit: int = MAX_HLO_EXPLAINED) -> list[OpComparison]:
    """The comparison with the HLO of its ``limit`` most costly ops explained."""
    top = sorted(range(len(comparison)), key=lambda k: -comparison[k].total_time_s)[:limit]
    out = list(comparison)
    for k in top:
        c = out[k]
        module = modules.get(c.program)
        if module is not None:
            out[k] = replace(c, hlo=hlo_lines(module, c.name))
    return out


def op_graphs(comparison: list[OpComparison], modules: dict[str, Module],
              limit: int = MAX_GRAPHS) -> dict[str, OpGraph]:
    """The HLO graphs (fusion body and neighbourhood, laid out) of the ``limit`` most costly ops."""
    out: dict[str, OpGraph] = {}
    for c in sorted(comparison, key=lambda c: -c.total_time_s):
        if len(out) >= limit:
            break
        module = modules.get(c.program)
        if module is not None and module.find(c.name) is not None:
            out[f"{c.program}/{c.name}"] = op_graph(module, c.name)
    return out


def executions_of(profile: Profile) -> dict:
    """Every program's executions per device (:func:`rooflens.trace.warmup.program_executions`); a pod merged
    from aggregates has its workers' counts."""
    runs = profile.reduced.executions if profile.reduced is not None else program_executions(profile.table)
    return {p: r for p, r in runs.items() if p}  # "": kernels of no XLA program (Nsight, not JAX): no executions


# -- the whole analysis ---------------------------------------------------------------------------

def analyze(profile: Profile, chip: str | Chip | None = None, memory: MemorySummary | Future | None = None, *,
            require_roofline: bool = True) -> Report:
    """Prediction × measurement for one profile → a :class:`Report` (pure: it reads no file).

    ``memory``: what ``rooflens.memory.read_run_memory(profile)`` read (None: no memory section), or a Future of
    it (read beside the analysis: waited for where the report takes it).
    ``require_roofline=False``: when no chip can be had (a CPU with no calibration), the report
    still has its op stats, steps and every finding that needs no roofline; its ops are unpriced.
    """
    from rooflens.analysis.rules import run_rules

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rooflens-analyze") as beside:
        # one thread beside this one, in this order: the HLO parsed (Python) and the executions found
        # while the op stats group events (compiled loops and numpy, which let go of the GIL), then the
        # idle units while the programs are priced; the devices' concurrency for a CPU trace
        beside.submit(lambda: profile.op_info)
        beside.submit(execution_index, profile.table)  # remembered: the idle units use it
        t = profile.table
        several = profile.platform == "cpu" and len(t) and int(t.device.min()) != int(t.device.max())
        concurrency = beside.submit(compute_concurrency, profile) if several else None  # share_cpu's input
        stats = op_stats(profile)
        steady = beside.submit(measure_steady_state, profile, stats)
        report = _analyze(profile, stats, chip, memory, require_roofline, steady, concurrency)
    report.findings = run_rules(report)
    return report


def _analyze(profile: Profile, stats: OpStats, chip: str | Chip | None, memory: MemorySummary | Future | None,
             require_roofline: bool, steady: Future, concurrency: Future | None) -> Report:
    n_dev = max(len(stats.devices), 1)
    t = profile.table
    foreign = profile.framework not in ("JAX", "") and not any(t.programs[i] for i in unique_values(t.program).tolist())
    try:
        c, reason = resolve_chip(profile, chip)
    except RooflensError as e:
        if (require_roofline and not foreign) or chip is not None:  # no HLO: no chip could give it a roofline
            raise
        c, reason = None, str(e)
    if foreign and c is None:  # no chip gives its kernels a roofline (a chip still prices its host link)
        reason = f"a {profile.framework} trace has no HLO, so its kernels have no roofline; {reason}"
    serial = 1.0
    mismatch = chip_mismatch(c, profile.platform, profile.device_kind, profile.plane_stats) if (
        chip is not None and c is not None) else ""
    if c is not None:
        c, serial, shared = share_cpu(profile, c, n_dev, concurrency.result() if concurrency else None)
        reason += shared
    modules = program_modules(profile, stats.by_program_s)
    roofs = roofs_of(c) if c is not None else None
    pricing = price_programs(profile, modules, c) if c is not None else Pricing({}, {}, modules)
    comparison = join(profile, stats, pricing, roofs, no_roofline="" if c is not None else f"no roofline: {reason}",
                      calibration_spread=(c.calibration_spread or 0.0) if c is not None else 0.0)
    comparison = explain_ops(comparison, modules)
    programs = step_breakdowns(stats, comparison, roofs, n_dev, serial,
                               executions=None if stats.steps else executions_of(profile), modules=modules)
    notes = list(stats.notes)
    if profile.framework not in ("JAX", ""):  # JAX's step annotations are no advice for another framework's trace
        notes = [n if n != NO_STEPS else "the trace marks no steps, so there are no per-step times" for n in notes]
    if c is None:
        notes.append(f"no expected-vs-observed comparison: {reason}")
    memory_summary = memory.result() if isinstance(memory, Future) else memory
    report = Report(
        chip=c.name if c is not None else "", chip_reason=reason, platform=profile.platform,
        device_kind=profile.device_kind, num_devices=n_dev, op_stats=stats.op_stats, comparison=comparison,
        steps=programs[0] if programs else None, stats=stats, memory=memory_summary or None, notes=notes,
        programs=programs, roofs=roofs, timeline=representative_timeline(profile),
        graphs=op_graphs(comparison, modules),
        in_window=InWindow.from_manifest(profile.manifest), path=profile.path, sources=list(profile.sources),
        hosts=list(profile.hosts), metadata=dict(profile.metadata), modules=modules,
        command_buffer_ops=profile.command_buffer_ops,
        calibration=calibration_summary(c),
        steady=steady.result(),
        # the trace's own per-op rates (an HLO parse per op) serve the roofline-trust finding alone
        trace_rates=tuple(op_rates(profile)) if any(not c.roofline_reliable for c in comparison) else (),
        events=profile.table, chip_mismatch=mismatch, framework=profile.framework,
    )
    return report
