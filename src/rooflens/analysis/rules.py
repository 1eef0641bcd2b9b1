"""Findings: small rules over a Report, each naming the ops, the evidence, the cause and the fix.

Every rule is a plain function ``rule(report) -> list[Finding]``; ``RULES`` lists them and
``run_rules`` runs them all, most costly finding first. Thresholds are module constants so a
finding can quote the line it crossed.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import asdict, dataclass
from typing import Literal

from rooflens.hlo import Instruction, Module
from rooflens.hlo.opcodes import MODEL_FLOP_OPCODES
from rooflens.units import fmt_seconds as _ms

Severity = Literal["high", "medium", "low"]

SLOW_RATIO = 2.0  # an op this many times slower than its roofline is worth a look (seed 000's red flag)
SLOW_COLLECTIVE_RATIO = 3.0
MIN_SHARE = 0.02  # ignore ops under 2 % of device time
COMM_SHARE = 0.25  # collectives above a quarter of the step
COPY_SHARE = 0.10  # copies/transposes above a tenth of device time
TINY_OP_S = 20e-6  # below this an op costs about what launching it does (GPU/TPU launch ≈ 5–10 µs)
TINY_OPS_PER_STEP = 100
IDLE_SHARE = 0.40
MIN_GAP_S = 1e-3
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


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    title: str
    ops: tuple[str, ...]
    time_s: float  # device time involved, per device per step where steps are known, else in total
    evidence: tuple[str, ...]
    cause: str
    fix: str

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ops"], d["evidence"] = list(self.ops), list(self.evidence)
        return d


def _severity(share: float) -> Severity:
    return "high" if share >= 0.2 else "medium" if share >= 0.05 else "low"


def _per_step(report, total_s: float) -> float:
    steps = report.steps.steps if report.steps and report.steps.steps else 1
    return total_s / max(report.num_devices, 1) / steps


def _busy_total(report) -> float:
    return sum(d.busy_s for d in report.stats.devices) or 1.0


def _producer_chain(module: Module, ins: Instruction, depth: int = 3) -> list[Instruction]:
    out, frontier = [], [ins]
    for _ in range(depth):
        nxt = []
        for i in frontier:
            for op in module.operands_of(i):
                out.append(op)
                if op.opcode in ("bitcast", "reshape", "get-tuple-element", "convert"):
                    nxt.append(op)
        frontier = nxt
    return out


def _dot_of(module: Module, ins: Instruction) -> Instruction | None:
    if ins.opcode in MODEL_FLOP_OPCODES:
        return ins
    return next((i for i in module.fusion_body(ins) if i.opcode in MODEL_FLOP_OPCODES), None)


def rule_slow_ops(report) -> list[Finding]:
    """A dot/convolution/fusion more than 2× slower than its roofline, with the next check done."""
    out = []
    busy = _busy_total(report)
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
            layout = [p for p in _producer_chain(module, ins) if p.opcode in ("copy", "transpose")
                      or (p.opcode == "fusion" and p.category == "copy/transpose")]
            if layout:
                causes.append(f"a layout change feeds it ({', '.join(p.name for p in layout[:3])}): its operands are "
                              "retiled before it can start")
                fixes.append("let XLA choose the layout (AUTO input layouts) or restructure so the transpose "
                             "folds into the dot's dimension numbers")
            dot = _dot_of(module, ins) if report.platform in ("tpu", "gpu") else None  # tiles: TPU/GPU units
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
            "slow-op", _severity(share), f"{c.name} is {c.ratio:.1f}× slower than its roofline", (c.name,),
            _per_step(report, c.total_time_s), tuple(evidence), "; ".join(causes), "; ".join(fixes)))
    return out


def rule_slow_collectives(report) -> list[Finding]:
    """Collectives much slower than their bandwidth prediction (one finding for all of them)."""
    busy = _busy_total(report)
    slow = [c for c in report.comparison if c.category == "collective" and c.priced and c.ratio is not None
            and c.ratio > SLOW_COLLECTIVE_RATIO and c.total_time_s / busy >= MIN_SHARE]
    if not slow:
        return []
    slow.sort(key=lambda c: -c.total_time_s)
    total = sum(c.total_time_s for c in slow)
    cause = ("the devices wait for each other (a straggler or an earlier op delays a participant), or the group "
             "does not map onto the interconnect as assumed")
    if report.platform == "cpu":
        cause = ("on a CPU with forced devices every device is a thread pool sharing the same cores, so a collective "
                 "mostly waits for the other devices' threads to reach it")
    return [Finding(
        "slow-collective", _severity(total / busy),
        f"{len(slow)} collective(s) take {min(c.ratio for c in slow):.0f}–{max(c.ratio for c in slow):.0f}× their "
        "bandwidth prediction", tuple(c.name for c in slow[:8]), _per_step(report, total),
        tuple(f"{c.name}: {_ms(c.measured_s)} vs {_ms(c.predicted_s)} for {c.comm_bytes / 1e6:.3g} MB sent per "
              "device" for c in slow[:4]),
        cause, "look at what runs just before it on the slowest device; check the mesh axes against the topology")]


def _gathers_weights(module: Module, ins: Instruction) -> bool:
    """An all-gather whose input comes straight from a program parameter (a sharded weight)."""
    target = ins
    if ins.opcode.endswith("-done"):
        target = module.collective_of(ins) or ins
    for op in _producer_chain(module, target, depth=4):
        if op.opcode == "parameter" and op.computation is module.entry:
            return True
    return False


def rule_communication_share(report) -> list[Finding]:
    if not report.steps or report.steps.step_time_s <= 0:
        return []
    st = report.steps
    share = st.communication_s / st.step_time_s
    if share < COMM_SHARE:
        return []
    colls = sorted((c for c in report.comparison if c.category == "collective"), key=lambda c: -c.total_time_s)
    module = report.modules.get(st.program)
    weights = [c for c in colls if module is not None and "all-gather" in c.opcode
               and module.find(c.name) is not None and _gathers_weights(module, module.find(c.name))]
    ops = tuple(c.name for c in colls[:6])
    evidence = [f"collectives take {_ms(st.communication_s)} of a {_ms(st.step_time_s)} step ({share:.0%})"]
    evidence += [f"{c.name}: {_ms(c.total_time_s / max(c.occurrences, 1))} per run, "
                 f"{c.comm_bytes / 1e6:.3g} MB per device" for c in colls[:3]]
    if weights:
        evidence.append(f"{len(weights)} all-gather(s) read program parameters: the weights are gathered every step")
        return [Finding(
            "weights-all-gathered", _severity(share), "Weights are all-gathered every step (FSDP-style sharding)",
            tuple(c.name for c in weights), st.communication_s, tuple(evidence),
            "parameters are sharded over a mesh axis, so every step gathers them back before the matmuls; "
            "on a model this small the gathers cost more than the memory they save",
            "replicate the weights and shard only the batch (data parallelism), or pin the intended layout with "
            "jax.lax.with_sharding_constraint / shard_map, or use a mesh whose axis matches the sharding")]
    return [Finding(
        "communication-share", _severity(share), f"Collectives take {share:.0%} of the step", ops,
        st.communication_s, tuple(evidence),
        "the sharding makes devices exchange activations or gradients more than they compute",
        "check which tensors the collectives move (`rooflens hlo --op`); add with_sharding_constraint on the "
        "intermediate that XLA gathers, or change the mesh so the heavy matmuls need no communication")]


def rule_copies(report) -> list[Finding]:
    copies = [c for c in report.comparison if c.category == "copy/transpose"]
    busy = _busy_total(report)
    total = sum(c.total_time_s for c in copies)
    share = total / busy
    if share < COPY_SHARE:
        return []
    copies.sort(key=lambda c: -c.total_time_s)
    return [Finding(
        "copies", _severity(share), f"Copies and transposes take {share:.0%} of device time",
        tuple(c.name for c in copies[:6]), _per_step(report, total),
        tuple(f"{c.name}: {_ms(c.total_time_s)} in all" for c in copies[:4]),
        "arrays are retiled between ops whose preferred layouts differ (a transpose or layout change that XLA "
        "could not fold into its neighbours)",
        "use AUTO layouts for jitted inputs, avoid explicit transposes of large arrays between matmuls, or "
        "change the einsum so the contraction order matches the stored layout")]


def rule_tiny_ops(report) -> list[Finding]:
    """Ops launched one by one (GPU kernels, CPU thunks) too short to pay for their launch. Inside a
    TPU program the ops are not launched one by one (the program is), so a TPU trace is judged by
    its program executions instead."""
    st = report.stats
    if not st.op_stats:
        return []
    if report.platform == "tpu":
        from rooflens.analysis.kernel_rules import tiny_programs

        return tiny_programs(report)
    n_dev = max(report.num_devices, 1)
    ops = [s for s in st.op_stats if not s.name.split(".")[0].endswith("-start")]  # async starts only enqueue
    if report.steps and report.steps.steps:
        per_step = sum(s.occurrences for s in ops) / n_dev / report.steps.steps
    elif _warmup_info(report):  # a whole run with no step function (ops dispatched one by one): the run
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
    total = sum(s.total_time_s for s in st.op_stats if s.avg_time_s < TINY_OP_S)
    programs = len(st.by_program_s)
    return [Finding(
        "tiny-ops", "high" if per_step >= 10 * TINY_OPS_PER_STEP else "medium",
        f"Many tiny ops: {per_step:.0f} per step per device, median {_ms(median)}",
        tuple(s.name for s in sorted((s for s in st.op_stats if s.avg_time_s < TINY_OP_S),
                                     key=lambda s: -s.occurrences)[:6]), _per_step(report, total),
        (f"median op time {_ms(median)} < {_ms(TINY_OP_S)} (about the cost of launching one)",
         f"{per_step:.0f} op executions per step per device across {programs} program(s)"),
        "the work is split into kernels too small to amortise their launch and synchronisation (a Python loop "
        "of small jitted calls, or ops XLA could not fuse)",
        "jit the whole step (one program), turn Python loops into lax.scan / vmap, or give each op more work "
        "(larger batch)")]


def _warmup_info(report) -> dict:
    prof = report.profile
    info = (prof.metadata or {}).get("steady_state") if prof is not None else None
    return info if isinstance(info, dict) else {}


def _idle_units(report):
    """(DeviceTime, idle s, idle s inside warm-up, remaining gaps [start, end) ns) per unit judged:
    each device, or each host's CPU as a whole for forced CPU devices.

    Only the time between program executions is the host's to fill: inside one execution XLA runs
    the ops by itself (a gap there is the runtime's own scheduling, e.g. a CPU matmul finishing on
    worker threads the trace does not show). Idle time while the host compiles, or around a
    program's first run, is warm-up, not a feeding problem."""
    import numpy as np

    from rooflens.trace.events import unique_rows
    from rooflens.trace.warmup import execution_index, host_compile_intervals_ns, idle_outside, merge_intervals

    shared = report.platform == "cpu" and report.num_devices > 1
    units = report.stats.hosts if shared else report.stats.devices
    prof = report.profile
    if prof is None or not len(prof.table):
        for d in units:
            yield d, d.idle_s, 0.0, None
        return
    excluded = np.asarray(_warmup_info(report).get("intervals_ns") or [], dtype=float).reshape(-1, 2)
    # a trace not judged for warm-up (nsys-jax, a trace of one's own) still shows its host compiling
    compiling = {h: host_compile_intervals_ns(evs) for h, evs in (prof.host_events_of or {}).items()}
    if prof.steps:  # with steps, idleness is the steps' own: set-up before them and teardown after are not
        first, last = min(s for _, s, _ in prof.steps), max(e for _, _, e in prof.steps)
        t0, t1 = float(prof.table.start_ns.min()), float(prof.table.end_ns.max())
        excluded = np.concatenate([excluded, [[min(t0, first), first], [last, max(t1, last)]]])
    t = prof.table
    runs = execution_index(t)
    start, end = t.start_ns, t.end_ns
    for d in units:
        host = t.hosts.index(d.host) if d.host in t.hosts else -1
        sel = np.flatnonzero(t.host == host if d.device < 0 else (t.host == host) & (t.device == d.device))
        if not len(sel):
            yield d, d.idle_s, 0.0, None
            continue
        _, inv = unique_rows(t.device[sel], t.program[sel], runs[sel])  # one group per (device, program, run)
        s0 = np.full(inv.max() + 1, np.inf)
        e0 = np.full(inv.max() + 1, -np.inf)
        np.minimum.at(s0, inv, start[sel])
        np.maximum.at(e0, inv, end[sel])
        own = compiling.get(d.host)
        out = merge_intervals(np.concatenate([excluded, own]) if own is not None else excluded)
        idle, inside, gaps = idle_outside(s0, e0, out)
        # the window judged: from the first execution to the last, less what is left out (warm-up, set-up)
        w0, w1 = float(s0.min()), float(e0.max())
        cut = float((np.minimum(out[:, 1], w1) - np.maximum(out[:, 0], w0)).clip(min=0).sum()) if len(out) else 0.0
        window_ns = max(w1 - w0 - cut, 0.0)
        yield (dataclasses.replace(d, window_s=window_ns * 1e-9) if window_ns > 0 else d), idle * 1e-9, \
            inside * 1e-9, gaps


def rule_idle(report) -> list[Finding]:
    out = []
    # forced CPU devices are threads time-sliced on shared cores: one waits while another runs, so
    # idleness is judged for the CPU as a whole (all devices of the host together)
    for d, idle_s, warm_s, rest in _idle_units(report):
        if d.window_s <= 0:
            continue
        share = idle_s / d.window_s
        if rest is None:
            gaps = [g for g in d.largest_gaps if g.duration_s >= MIN_GAP_S]
            where = [f"gap of {_ms(g.duration_s)} at {_ms(g.start_s)} between {g.before} and {g.after}"
                     + (f"; the host was in {g.host}" if g.host else "") for g in gaps[:3]]
        else:  # gaps left once warm-up is taken out; the stats' own gap names where one matches
            lengths = (rest[:, 1] - rest[:, 0]) * 1e-9
            big = [k for k in sorted(range(len(rest)), key=lambda k: -lengths[k]) if lengths[k] >= MIN_GAP_S][:3]
            gaps = big
            t0 = float(report.profile.table.start_ns.min()) if len(report.profile.table) else 0.0
            named = {round(g.start_s, 6): g for g in d.largest_gaps}
            where = []
            for k in big:
                g = named.get(round((rest[k, 0] - t0) * 1e-9, 6))
                where.append(f"gap of {_ms(lengths[k])} at {_ms((rest[k, 0] - t0) * 1e-9)}"
                             + (f" between {g.before} and {g.after}" + (f"; the host was in {g.host}" if g.host else "")
                                if g else ""))
        if share < IDLE_SHARE or not gaps:
            continue
        who = f"The CPU ({report.num_devices} devices together)" if d.device < 0 else f"Device {d.device}"
        evidence = [f"idle {_ms(idle_s)} of {_ms(d.window_s)}"] + where
        if warm_s > 0:
            evidence.append(f"not counted: {_ms(warm_s)} of idle time while the host compiled or around first runs "
                            "(warm-up)")
        out.append(Finding(
            "idle", _severity(share), f"{who} is idle {share:.0%} of the time", (),
            _per_step(report, idle_s) * max(report.num_devices, 1), tuple(evidence),
            "the host does not feed the device fast enough: Python or data loading between steps, a "
            "synchronisation (print, device_get, block_until_ready) or a host-side stall",
            "prefetch the next batch while the device runs (async data loading), move host work off the critical "
            "path, and drop per-step synchronisations"))
    if len(out) > 1:  # one finding for all devices, with the worst one's numbers
        worst = max(out, key=lambda f: f.time_s)
        return [Finding(worst.rule, worst.severity, worst.title.replace("Device", f"{len(out)} devices idle; device"),
                        worst.ops, worst.time_s, worst.evidence, worst.cause, worst.fix)]
    return out


RECOMPILE_MANY = 3  # this many recompilations in a run traced from its start: high
TRANSFERS_PER_STEP = 0.75  # implicit transfers in (nearly) every step: medium


def rule_in_window(report) -> list[Finding]:
    out = []
    w = report.in_window
    comps = w.compilations
    if comps:
        where = sorted({c.where for c in comps if c.where})
        total = w.compile_s
        if w.whole_run:  # rooflens run: `compilations` holds recompilations only
            reasons = list(dict.fromkeys(f"{c.module or '?'}: {c.reason}" for c in comps if c.reason))
            title = f"{len(comps)} recompilation(s) of already-compiled functions"
            # one recompilation (a second call whose input types differ once: weak types, a committed
            # array) is a second warm-up; churn is a function compiled again and again
            severity = "high" if len(comps) >= RECOMPILE_MANY else "medium" if len(comps) > 1 else "low"
        else:
            reasons = [m.splitlines()[-1].strip() for m in w.cache_misses]
            title = f"{len(comps)} compilation(s) inside the measured window"
            severity = "high"
        out.append(Finding(
            "recompilation", severity, title, (), total,
            tuple([f"{_ms(total)} compiling, from {', '.join(where[:3]) or 'an unknown place'}"] + reasons[:3]),
            "a jitted function sees new shapes or dtypes (or a new Python function object) during the steady "
            "state, so XLA compiles again",
            "keep shapes static (pad batches to fixed sizes, bucket sequence lengths), keep dtypes stable, and "
            "jit once outside the loop"))
    transfers = list(w.transfers)
    times = list(w.transfer_times_unix_s or ())
    steps = report.steps.steps if report.steps and report.steps.steps else 1
    # a Python scalar turned into a device constant (jnp.ones(n), x * 2.0) is not a data transfer
    # (JAX details only the first of repeated transfers: a repeat is like the detailed one before it)
    data, scalar = [], False
    for x in transfers:
        if "(a repeat" not in x:
            scalar = x.startswith("host-to-device") and "[]" in x.split("dst_sharding")[0]
        data.append(not scalar)
    info = _warmup_info(report)
    if transfers and len(times) == len(transfers) and "offset_ns" in info and report.profile is not None \
            and "steady_start_ns" in info:  # only the transfers of the steady state (set-up uploads are not per step)
        # steps inferred from device runs: the host's own boundary, over the runs dispatched after it
        host = "host_steady_start_ns" in info
        begin = (info["host_steady_start_ns" if host else "steady_start_ns"] - info["offset_ns"]) * 1e-9
        if host:
            steps = max(info["host_steady_runs"], 1)
        data = [d and at >= begin for d, at in zip(data, times)]
    transfers = [x for x, d in zip(transfers, data) if d]
    if transfers:
        out.append(Finding(
            "host-transfers", "medium" if len(transfers) >= TRANSFERS_PER_STEP * steps else "low",
            f"{len(transfers)} implicit host↔device transfer(s) inside the window", (), 0.0,
            tuple([f"{len(transfers) / steps:.1f} per step"] + transfers[:2]),
            "NumPy arrays or Python scalars cross to the device each step (or device values are read back), "
            "which serialises host and device",
            "device_put inputs ahead of time (prefetch), keep the loop state on the device, and read values back "
            "only when needed"))
    return out


def rule_variance(report) -> list[Finding]:
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
                "step-variance", _severity(spread / 2), f"Step times vary by {spread:.0%} (IQR/median)", (),
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
                "straggler", "medium", f"Device {slow.device} is busy {slow.busy_s / fast.busy_s:.1f}× longer than "
                f"device {fast.device}", (), _per_step(report, slow.busy_s - fast.busy_s),
                (f"busy {_ms(slow.busy_s)} vs {_ms(fast.busy_s)}",),
                "uneven work across devices (an imbalanced sharding) or a slow device; collectives make everyone "
                "wait for it", "balance the sharding (shapes divisible by the mesh), check the slow device's ops"))
    return out


def rule_overheads(report) -> list[Finding]:
    """The step far above its roofline sum once the slow ops' own excess is taken out.

    A slow op explains its excess over its roofline (the slow-op finding's business); what the
    step spends beyond the roofline sum and that excess is time between ops."""
    st = report.steps
    if not st or st.predicted_s <= 0 or st.step_time_s <= 0:
        return []
    ratio = st.step_time_s / st.predicted_s
    slow = [c for c in report.comparison if c.priced and c.ratio and c.ratio > SLOW_RATIO
            and c.roofline_bound == "exact" and c.total_time_s / _busy_total(report) >= MIN_SHARE]
    if st.basis == "executions":  # one execution of the program: its own ops, once each
        slow = [c for c in slow if c.program == st.program]
        slow_excess_s = sum(c.measured_s * (1 - 1 / c.ratio) for c in slow)
    else:
        slow_excess_s = sum(_per_step(report, c.total_time_s * (1 - 1 / c.ratio)) for c in slow)
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
    title = (f"The step is {ratio:.1f}× its roofline sum though no big op is slow" if not slow else
             f"The step is {ratio:.1f}× its roofline sum; slow ops explain only {_ms(slow_excess_s)} of it")
    return [Finding(
        "overheads", _severity(1 - st.predicted_s / between_s), title,
        (), between_s - st.predicted_s, tuple(evidence),
        "time goes between ops rather than in them: launch and dispatch overhead, synchronisation, small "
        "ops and idle gaps add up",
        "fuse more of the step into one program, remove host round-trips, and check the idle and tiny-op findings")]


def rule_memory_peak(report) -> list[Finding]:
    """The compiled peak far above the state the program holds (inputs and outputs)."""
    from rooflens.memory.summary import PEAK_OVER_STATE

    mem = report.memory
    ratio = mem.peak_over_state if mem else None
    if not ratio or ratio <= PEAK_OVER_STATE:
        return []
    main = mem.main
    bufs = main.peak_buffers[:4]
    gb = 1e9
    evidence = [f"{main.program}: peak {main.peak_bytes / gb:.3g} GB vs {main.state_bytes / gb:.3g} GB "
                f"of inputs and outputs ({ratio:.1f}×); temporaries {main.temp_bytes / gb:.3g} GB"]
    evidence += [f"at the peak: {b.name} {b.shape} {b.bytes / 1e6:.3g} MB"
                 + (f" from {b.named_scope}" if b.named_scope else "") for b in bufs]
    if main.padding_waste_bytes:
        evidence.append(f"tiling padding wastes {main.padding_waste_bytes / 1e6:.3g} MB")
    # a training step's gradients and optimizer temporaries alone put it near 1.3–2×: worth a look, no alarm
    return [Finding(
        "memory-peak", "high" if ratio > 3 else "medium" if ratio > 2 else "low",
        f"Peak memory is {ratio:.1f}× the state the program holds", tuple(b.name for b in bufs), 0.0,
        tuple(evidence),
        "retained activations (kept for the backward pass), XLA temporaries and tiling padding come on top of "
        "the weights, optimizer state and batch",
        "reduce the batch size; recompute activations (jax.checkpoint / remat on the big scopes above); shard "
        "the state further (FSDP/ZeRO, tensor parallelism) or lower its precision; check the peak buffers' "
        "scopes for activations kept longer than needed")]


STRAGGLER_WAIT = 0.10  # the others wait in collectives at least this share of the step for one host
OUTLIER_SHARE = 0.05  # a per-host op outlier costs at least this share of that host's busy time


def rule_hosts(report) -> list[Finding]:
    """Several hosts: the straggler (the host the others wait for) and ops slow on one host only.

    A host that reaches each collective late spends the least time inside it, while the others sit
    in the same collective until it arrives: the straggler is the host with the least collective
    time per step when the others' exceeds it by a share of the step."""
    hs = report.stats.host_steps
    if hs is None or len(hs.hosts) < 2:
        return []
    out = []
    step_s = statistics.median([x for row in hs.times_s for x in row if x is not None] or [0.0])
    coll = list(hs.collective_s)
    k = min(range(len(coll)), key=coll.__getitem__)
    others = [c for j, c in enumerate(coll) if j != k]
    wait = statistics.median(others) - coll[k]
    if step_s > 0 and wait > STRAGGLER_WAIT * step_s and coll[k] < 0.7 * statistics.median(others):
        host = hs.hosts[k]
        mine = [x for x in hs.times_s[k] if x is not None]
        out.append(Finding(
            "straggler", _severity(wait / step_s), f"Host {host} is the straggler: the other hosts wait for it "
            f"{_ms(wait)} per step inside collectives", (), wait * len(mine) * (len(hs.hosts) - 1),
            (f"time inside collectives per step: {host} {_ms(coll[k])}, the other {len(others)} hosts "
             f"{_ms(min(others))}–{_ms(max(others))} (step {_ms(step_s)})",
             f"its other ops: {_ms(hs.other_s[k])} per step, the others' median "
             f"{_ms(statistics.median([o for j, o in enumerate(hs.other_s) if j != k]))}",
             f"step-time skew across hosts: median {_ms(statistics.median(hs.skew_s or (0.0,)))}, "
             f"max {_ms(max(hs.skew_s or (0.0,)))}"),
            f"{host} reaches every collective late, so the others sit in it until it arrives: its host-side work "
            "before the step (input pipeline, Python, logging, checkpointing), a slower or busier machine, or more "
            "work on its shard",
            f"look at what {host}'s host does between steps (its idle gaps and Python frames), prefetch its input, "
            "and balance its shard"))
    busy = {d.host: d.busy_s for d in report.stats.hosts}
    for program, op, host, mean_s, median_s, runs in hs.op_outliers:
        excess_s = (mean_s - median_s) * runs
        if excess_s < OUTLIER_SHARE * busy.get(host, float("inf")):
            continue
        out.append(Finding(
            "host-outlier", "medium", f"{op} takes {mean_s / median_s:.1f}× longer on {host} than on the "
            "other hosts", (op,), excess_s,
            (f"{program}/{op}: {_ms(mean_s)} per run on {host} ({runs} runs), median over hosts "
             f"{_ms(median_s)}; {_ms(excess_s)} more in all, of {host}'s {_ms(busy[host])} busy",),
            "a slower or thermally throttled device, another job sharing the host, or a larger shard there",
            f"compare {host}'s devices and load with the others'; check the op's input shapes on that host"))
    return out


def rule_roofline_trust(report) -> list[Finding]:
    """Ops measured above 100 % of a roof: the cost model overcounts them, or the chip is wrong."""
    from rooflens.analysis.kernel_rules import roofline_trust

    return roofline_trust(report)


RULES = (rule_memory_peak, rule_roofline_trust, rule_slow_ops, rule_slow_collectives, rule_communication_share,
         rule_copies, rule_tiny_ops, rule_idle, rule_in_window, rule_variance, rule_overheads, rule_hosts)


def run_rules(report) -> list[Finding]:
    found = [f for rule in RULES for f in rule(report)]
    rank: dict[Severity, int] = {"high": 0, "medium": 1, "low": 2}
    return sorted(found, key=lambda f: (rank.get(f.severity, 3), -f.time_s))

