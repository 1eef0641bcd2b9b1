"""Device time: ops slower than their roofline, copies, tiny ops, uneven steps and devices, and
time between ops (overheads)."""

from __future__ import annotations

import statistics

from rooflens.analysis.findings import Finding
from rooflens.analysis.report import Report
from rooflens.analysis.rules.common import (
    TINY_OP_S,
    TINY_OPS_PER_STEP,
    busy_total,
    dot_of,
    per_device_step,
    producer_chain,
    severity_of,
)
from rooflens.analysis.rules.kernels import launched_one_by_one, tiny_programs
from rooflens.units import fmt_seconds as _ms

SLOW_RATIO = 2.0  # an op this many times slower than its roofline is worth a look (seed 000's red flag)
MIN_SHARE = 0.02  # ignore ops under 2 % of device time
COPY_SHARE = 0.10  # copies/transposes above a tenth of device time
STEP_CV = 0.20  # interquartile range / median of step times
STEP_CV_CPU = 0.50  # a shared CPU's own noise reaches ~40 % on steps of a few ms
# and, on CPU, an interquartile spread of at least this much: a runnable thread can wait a whole
# scheduling period for its core, and Linux CFS's default period is 6 ms × (1 + log2 cores), 12 ms
# on 2 cores (sysctl_sched_latency, kernel/sched/fair.c, kernels before the 6.6 EEVDF scheduler)
STEP_SPREAD_CPU_S = 0.012
STRAGGLER_RATIO = 1.3  # slowest device's busy time / fastest's
STRAGGLER_RATIO_CPU = 5.0  # forced CPU devices share cores; healthy data parallelism measured up to 3.5×
OVERHEAD_RATIO = 2.0
SMALL_DIM = 128  # MXU / tensor-core tile edge: smaller dims pad


def rule_slow_ops(report: Report) -> list[Finding]:
    """A dot/convolution/fusion more than 2× slower than its roofline, with the next check done."""
    out = []
    busy = busy_total(report)
    for c in report.comparison:
        if not c.priced or c.category not in ("matmul", "convolution", "fusion") or c.ratio is None:
            continue
        share = c.total_time_s / busy
        if c.ratio <= SLOW_RATIO or share < MIN_SHARE or c.measured_s < TINY_OP_S:
            continue  # an op shorter than a launch is the tiny-ops rule's business
        module = report.modules.get(c.program)
        ins = module.find(c.name) if module else None
        causes, fixes = [], []
        evidence = [f"measured {_ms(c.measured_s)} per run vs roofline {_ms(c.predicted_s)} "
                    f"({c.ratio:.1f}×, {c.bound}-bound), {share:.0%} of device time"]
        if ins is not None:
            layout = [p for p in producer_chain(module, ins) if p.opcode in ("copy", "transpose")
                      or (p.opcode == "fusion" and p.category == "copy/transpose")]
            if layout:
                causes.append(f"a layout change feeds it ({', '.join(p.name for p in layout[:3])}): its operands are "
                              "retiled before it can start")
                fixes.append("let XLA choose the layout (AUTO input layouts) or restructure so the transpose "
                             "folds into the dot's dimension numbers")
            dot = dot_of(module, ins) if report.platform in ("tpu", "gpu") else None  # tiles: TPU/GPU units
            if dot is not None:
                dims = [d for op in dot.operands for d in (module.operand_shape(op).dims
                                                           if module.operand_shape(op) else ())]
                small = [d for d in dims if d < SMALL_DIM]
                if small:
                    causes.append(f"small dimensions ({', '.join(map(str, sorted(set(small))))} < {SMALL_DIM}) "
                                  "pad to the matrix unit's tile")
                    fixes.append("batch more work into each matmul (larger batch, fuse heads) so every dim "
                                 f"is a multiple of {SMALL_DIM}")
                lhs = module.operand_shape(dot.operands[0]) if dot.operands else None
                peaks = report.chip_peaks
                if lhs is not None and lhs.dtype == "f32" and peaks.get("bf16", 0) > 1.5 * peaks.get("fp32", 0):
                    causes.append("it multiplies in f32 on a chip whose bf16 peak is far higher")
                    fixes.append("keep weights/activations in bf16 (or set precision) where f32 was not meant")
        if not causes:
            causes.append("the kernel runs below the roofline with no layout, padding or dtype cause visible "
                          "in the HLO")
            fixes.append("check its fusion in the HLO (`rooflens hlo --op`) and whether it overlaps other work")
        out.append(Finding(
            "slow-op", severity_of(share), f"{c.name} is {c.ratio:.1f}× slower than its roofline", (c.name,),
            per_device_step(report, c.total_time_s), tuple(evidence), "; ".join(causes), "; ".join(fixes)))
    return out


def rule_copies(report: Report) -> list[Finding]:
    copies = [c for c in report.comparison if c.category == "copy/transpose"]
    busy = busy_total(report)
    total = sum(c.total_time_s for c in copies)
    share = total / busy
    if share < COPY_SHARE:
        return []
    copies.sort(key=lambda c: -c.total_time_s)
    return [Finding(
        "copies", severity_of(share), f"Copies and transposes take {share:.0%} of device time",
        tuple(c.name for c in copies[:6]), per_device_step(report, total),
        tuple(f"{c.name}: {_ms(c.total_time_s)} in all" for c in copies[:4]),
        "arrays are retiled between ops whose preferred layouts differ (a transpose or layout change that XLA "
        "could not fold into its neighbours)",
        "use AUTO layouts for jitted inputs, avoid explicit transposes of large arrays between matmuls, or "
        "change the einsum so the contraction order matches the stored layout")]


def rule_tiny_ops(report: Report) -> list[Finding]:
    """Ops launched one by one (GPU kernels, CPU thunks) too short to pay for their launch. Inside a
    TPU program the ops are not launched one by one (the program is), so a TPU trace is judged by
    its program executions instead."""
    st = report.stats
    if not st.op_stats:
        return []
    if report.platform == "tpu":
        return tiny_programs(report)
    n_dev, ops = max(report.num_devices, 1), launched_one_by_one(report)  # not in a CUDA graph, not async starts
    if not ops:
        return []
    if report.steps and report.steps.steps:
        per_step = sum(s.occurrences for s in ops) / n_dev / report.steps.steps
    elif report.steady.warmup_judged or not max(st.by_program_s, key=st.by_program_s.get):
        # a whole run with no step function (ops dispatched one by one), or kernels of no XLA program (an
        # Nsight trace of PyTorch): the capture
        per_step = sum(s.occurrences for s in ops) / n_dev
    else:  # no step annotations: each op of the busiest program runs once per execution of it
        main = max(st.by_program_s, key=st.by_program_s.get)
        per_step = sum(1 for s in ops if s.program == main)
    # median duration over executions, weighting each op by its occurrences
    durations = sorted((s.avg_time_s, s.occurrences) for s in ops)
    half, acc, median = sum(n for _, n in durations) / 2, 0, 0.0
    for d, n in durations:
        acc += n
        if acc >= half:
            median = d
            break
    if median >= TINY_OP_S or per_step < TINY_OPS_PER_STEP:
        return []
    total = sum(s.total_time_s for s in ops if s.avg_time_s < TINY_OP_S)
    programs = len(st.by_program_s)
    return [Finding(
        "tiny-ops", "high" if per_step >= 10 * TINY_OPS_PER_STEP else "medium",
        f"Many tiny ops: {per_step:.0f} per step per device, median {_ms(median)}",
        tuple(s.name for s in sorted((s for s in ops if s.avg_time_s < TINY_OP_S),
                                     key=lambda s: -s.occurrences)[:6]), per_device_step(report, total),
        (f"median op time {_ms(median)} < {_ms(TINY_OP_S)} (about the cost of launching one)",
         f"{per_step:.0f} op executions per step per device across {programs} program(s)"),
        "the work is split into kernels too small to amortise their launch and synchronisation (a Python loop "
        "of small jitted calls, or ops XLA could not fuse)",
        "jit the whole step (one program), turn Python loops into lax.scan / vmap, or give each op more work "
        "(larger batch)")]


def rule_variance(report: Report) -> list[Finding]:
    out = []
    st = report.stats.steps
    if st is not None and st.count >= 4 and st.mean_s > 0:
        # the interquartile spread over the median: one slow outlier step (noise, a GC pause) does not
        # move it, steps that really differ (every other step waits for input) do
        q1, med, q3 = statistics.quantiles(st.times_s, n=4, method="inclusive")
        spread = (q3 - q1) / med if med else 0.0
        cpu = report.platform == "cpu"
        if spread > (STEP_CV_CPU if cpu else STEP_CV) and (not cpu or q3 - q1 > STEP_SPREAD_CPU_S):
            slow = max(range(st.count), key=lambda i: st.times_s[i])
            out.append(Finding(
                "step-variance", severity_of(spread / 2), f"Step times vary by {spread:.0%} (IQR/median)", (),
                max(st.times_s) - min(st.times_s),
                (f"steps: median {_ms(med)}, quartiles {_ms(q1)}–{_ms(q3)}, min {_ms(st.min_s)}, max {_ms(st.max_s)}",
                 f"slowest: step {st.steps[slow]}"),
                "some steps do extra work or wait (recompilation, input stalls, garbage collection, a slow batch)",
                "look at the slowest step in the trace; make per-step work uniform"))
    devs = [d for d in report.stats.devices if d.busy_s > 0]
    # forced CPU devices: thread scheduling alone skews busy times by ~3× between devices
    limit = STRAGGLER_RATIO_CPU if report.platform == "cpu" else STRAGGLER_RATIO
    if len(devs) > 1 and report.stats.host_steps is None:  # several hosts: see rule_hosts
        fast, slow = min(devs, key=lambda d: d.busy_s), max(devs, key=lambda d: d.busy_s)
        if slow.busy_s / fast.busy_s > limit:
            out.append(Finding(
                "device-straggler", "medium",
                f"Device {slow.device} is busy {slow.busy_s / fast.busy_s:.1f}× longer than device {fast.device}", (),
                per_device_step(report, slow.busy_s - fast.busy_s),
                (f"busy {_ms(slow.busy_s)} vs {_ms(fast.busy_s)}",),
                "uneven work across devices (an imbalanced sharding) or a slow device; collectives make everyone "
                "wait for it", "balance the sharding (shapes divisible by the mesh), check the slow device's ops"))
    return out


def rule_overheads(report: Report) -> list[Finding]:
    """The step far above its roofline sum once the slow ops' own excess is taken out.

    A slow op explains its excess over its roofline (the slow-op finding's business); what the
    step spends beyond the roofline sum and that excess is time between ops."""
    st = report.steps
    if not st or st.predicted_s <= 0 or st.step_time_s <= 0:
        return []
    ratio = st.step_time_s / st.predicted_s
    slow = [c for c in report.comparison if c.priced and c.ratio and c.ratio > SLOW_RATIO
            and c.roofline_bound == "exact" and c.total_time_s / busy_total(report) >= MIN_SHARE]
    if st.basis == "executions":  # one execution of the program: its own ops, once each
        slow = [c for c in slow if c.program == st.program]
        slow_excess_s = sum(c.measured_s * (1 - 1 / c.ratio) for c in slow)
    else:
        slow_excess_s = sum(per_device_step(report, c.total_time_s * (1 - 1 / c.ratio)) for c in slow)
    # time inside kernels the model cannot price (or prices only by a lower bound) is not between ops
    inside_s = st.unpriced_s + st.bound_excess_s
    between_s = st.step_time_s - slow_excess_s - inside_s
    if between_s / st.predicted_s <= OVERHEAD_RATIO:
        return []
    evidence = [f"step {_ms(st.step_time_s)} vs roofline sum {_ms(st.predicted_s)}",
                f"idle {_ms(st.idle_s)}, unpriced ops {_ms(st.unpriced_s)}, beyond lower-bound rooflines "
                f"{_ms(st.bound_excess_s)} (inside kernels, not counted as overhead)"]
    if slow:
        evidence.append(f"ops slower than their roofline explain {_ms(slow_excess_s)} of it: "
                        + ", ".join(c.name for c in slow[:3]))
    evidence += _profiler_cost(report, st.step_time_s)
    title = (f"The step is {ratio:.1f}× its roofline sum though no big op is slow" if not slow else
             f"The step is {ratio:.1f}× its roofline sum; slow ops explain only {_ms(slow_excess_s)} of it")
    return [Finding(
        "overheads", severity_of(1 - st.predicted_s / between_s), title,
        (), between_s - st.predicted_s, tuple(evidence),
        "time goes between ops rather than in them: launch and dispatch overhead, synchronisation, small "
        "ops and idle gaps add up",
        "fuse more of the step into one program, remove host round-trips, and check the idle and tiny-op findings")]


PROFILER_TINY_STEP_S = 1e-3  # a step this short is where the tracer's per-op recording shows


def _profiler_cost(report: Report, step_s: float) -> list[str]:
    """Evidence that part of a tiny step's gap is the profiler's own: it records every op it traces."""
    n_ops = sum(s.occurrences for s in report.stats.op_stats) / max(report.num_devices, 1)
    steps = report.steps.steps if report.steps and report.steps.steps else 1
    if step_s >= PROFILER_TINY_STEP_S or not n_ops:
        return []
    return [f"part of it is the profiler's own cost: the step lasts {_ms(step_s)} and the tracer records each of "
            f"its {n_ops / steps:.0f} ops per device; an untraced run (the script's own timing) shows how much"]
