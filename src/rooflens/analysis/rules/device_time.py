"""Device time: ops slower than their roofline, many ops each moderately off it, copies, tiny ops,
uneven steps and devices, and time outside kernels (overheads).

Time inside a kernel beyond its roofline is the op's (slow-op, kernel-inefficiency); time outside
kernels is the step's overhead, judged from the measured gaps between op events, never from the
step less the roofline sum.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter

from rooflens.analysis.findings import Finding
from rooflens.analysis.report import MATRIX_CATEGORIES, OpComparison, Report
from rooflens.analysis.rules.common import (
    TINY_OP_S,
    TINY_OPS_PER_STEP,
    busy_total,
    dot_of,
    excess_per_step,
    in_terms_of,
    is_jax,
    looped_unit_advice,
    outside_kernels,
    per_device_step,
    per_execution,
    per_step_of,
    per_what,
    producer_chain,
    ref,
    runs_per_step,
    step_of,
    step_time_of,
    with_saving,
)
from rooflens.analysis.rules.host import (
    frame_label,
    frames_hint,
    host_gap_cause,
    host_gap_evidence,
    host_in_gaps,
    idle_flagged,
)
from rooflens.analysis.rules.kernels import launched_one_by_one, tiny_programs
from rooflens.analysis.trust import is_async
from rooflens.cost.kernels import instruction_module
from rooflens.cost.traffic import IN_PLACE
from rooflens.units import fmt_bytes, fmt_name, fmt_number, fmt_percent, fmt_ratio, plural
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
OVERHEAD_SHARE = 0.10  # device time outside kernels above a tenth of the step
INEFFICIENCY_SHARE = 0.10  # ops' time beyond their rooflines above a tenth of the step …
INEFFICIENT_OPS = 3  # … spread over at least this many ops ("many ops, each moderately off")
PAD_USEFUL = 0.75  # a matmul whose tiles are less than this useful pads visibly
SUBLANES = 8  # a TPU vector register's rows: the minor-but-one tile edge every layout shows, T(8,128)
LAUNCH_GAP_S = 20e-6  # a gap this short between ops is a launch or dispatch, not a host round-trip


def _judged(c: OpComparison) -> bool:
    """An op whose roofline the comparison can hold it to: priced, reliable, not a lower bound."""
    return c.priced and c.ratio is not None and c.roofline_reliable and c.roofline_bound != "lower"


def _matrix_op(c: OpComparison) -> bool:
    return c.category in ("matmul", "convolution", "fusion") or (c.category == "custom-call" and c.model_flops > 0)


def is_slow_op(report: Report, c: OpComparison, busy: float | None = None) -> bool:
    """What the slow-op finding names: a matmul-like op or fusion more than SLOW_RATIO × its roofline,
    at least MIN_SHARE of device time and longer than a launch."""
    if not _judged(c) or not _matrix_op(c) or c.ratio <= SLOW_RATIO or c.measured_s < TINY_OP_S:
        return False
    return c.total_time_s / (busy or busy_total(report)) >= MIN_SHARE


def _in_step(report: Report, c: OpComparison) -> bool:
    """An op of the step: any program's with steps, the judged program's when each execution is a step."""
    st = report.steps
    return st is None or st.basis != "executions" or c.program == st.program


# -- causes the HLO shows -------------------------------------------------------------------------

def _mxu_edge(report: Report) -> int:
    """The matrix unit's tile edge on this chip (TPU MXU rows/columns, from the catalogue), 0 when unpublished."""
    from rooflens.hardware import chip as get_chip

    try:
        ch = get_chip(report.chip) if report.chip else None
    except Exception:  # a custom or shared chip not in the catalogue
        return 0
    if ch is None or ch.kind != "tpu":
        return 0
    return int(ch.value("compute.mxu_cols") or ch.value("compute.mxu_rows") or 0)


def tile_use(mm, edge: int) -> float:
    """The useful share of a matrix unit's work on a ``MatmulDims``: N and K padded to the unit's ``edge``,
    M to a vector register's SUBLANES rows; batch dims are separate products and pad nothing."""
    def up(x: int, t: int) -> int:
        return -(-x // t) * t

    return (mm.k / up(mm.k, edge)) * (mm.n / up(mm.n, edge)) * (mm.m / up(mm.m, SUBLANES)) if mm.m and mm.n and mm.k \
        else 1.0


def _padding_cause(report: Report, c: OpComparison, module, ins) -> tuple[str, str] | None:
    """The matrix unit's tiles padded by small M, N or K (batch dims are not tiled), when the HLO shows it
    and the padded work alone would take longer than the roofline."""
    from rooflens.cost.counts import matmul_dims

    edge = _mxu_edge(report)
    mm = matmul_dims(module, dot_of(module, ins) or ins) if edge else None
    if mm is None or not c.model_flops:
        return None
    useful = tile_use(mm, edge)
    peak = report.roofs.mfu_peak_flops_per_s if report.roofs else 0.0
    padded_s = c.model_flops / useful / peak if peak and useful else 0.0
    if useful >= PAD_USEFUL or padded_s <= 1.25 * c.predicted_s:
        return None
    small = [f"{what}={x}" for what, x, t in (("M", mm.m, SUBLANES), ("N", mm.n, edge), ("K", mm.k, edge))
             if x % t]
    batch = f" (× {mm.batch} batch, not tiled)" if mm.batch > 1 else ""
    return (f"its matmul dims ({', '.join(small)}){batch} pad the {edge}×{edge} matrix unit's tiles: "
            f"{fmt_percent(useful)} of "
            f"the work done is useful, so its matrix work alone takes ~{_ms(padded_s)} against a roofline of "
            f"{_ms(c.predicted_s)}",
            f"make N and K multiples of {edge} and M of {SUBLANES} (fuse heads or projections, batch more tokens), "
            "or keep this small product off the matrix unit")


def _slow_op_causes(report: Report, c: OpComparison) -> tuple[list[str], list[str], list[str]]:
    """(causes, fixes, notes) the HLO shows for a slow op."""
    module = report.modules.get(c.program)
    ins = module.find(c.name) if module else None
    causes, fixes, notes = [], [], []
    if ins is None:  # no program HLO: the op's own line, where the trace carries it (TPU long_name)
        text = (getattr(report.events, "hlo_text", None) or {}).get((c.program, c.name))
        module = instruction_module(text) if text else None
        ins = module.instructions()[0] if module is not None else None
        if ins is None:
            return causes, fixes, ["the trace carries no HLO for this op: no cause can be checked"]
    dot = dot_of(module, ins)
    if dot is not None and dot is not ins:  # a transpose inside the kernel feeding its matmul: shown, not proven slow
        inside = [p for p in producer_chain(module, dot) if p.opcode in ("transpose", "copy")]
        if inside:
            notes.append(f"its fusion transposes an operand of its matmul inside the kernel "
                         f"({', '.join(p.name for p in inside[:3])})")
    layout = [p for p in producer_chain(module, ins) if p.opcode in ("copy", "transpose")
              or (p.opcode == "fusion" and p.category == "copy/transpose")]
    if layout:
        notes.append(f"a layout change feeds it ({', '.join(p.name for p in layout[:3])}): its time is that op's, "
                     "not this one's")
    if report.platform == "tpu":
        pad = _padding_cause(report, c, module, ins)
        if pad is not None:
            causes.append(pad[0])
            fixes.append(pad[1])
    lhs = module.operand_shape(dot.operands[0]) if dot is not None and dot.operands else None
    peaks = report.chip_peaks
    if lhs is not None and lhs.dtype == "f32" and peaks.get("bf16", 0) > 1.5 * peaks.get("fp32", 0):
        notes.append("it multiplies in f32 (its roofline is priced so): in bf16 the chip's peak is far higher")
    return causes, fixes, notes


def rule_slow_ops(report: Report) -> list[Finding]:
    """A matmul-like op or fusion more than 2× slower than its roofline, with the causes its HLO shows."""
    out = []
    busy = busy_total(report)
    for c in report.comparison:
        if not is_slow_op(report, c, busy):
            continue
        share = c.total_time_s / busy
        causes, fixes, notes = _slow_op_causes(report, c)
        runs = runs_per_step(report, c)
        n_runs = runs * c.runs_per_execution
        saved = excess_per_step(report, c)
        st = step_of(report, c.program)
        evidence = [f"measured {per_execution(c)} vs roofline {_ms(c.predicted_s)} "
                    f"({fmt_ratio(c.ratio)}, {c.bound}-bound), {fmt_percent(share)} of device time",
                    # (its runs inside each execution too: a loop body's dot ran 12 times an execution, "once")
                    f"runs {'once' if n_runs == 1 else f'{fmt_number(n_runs)} times'} per {per_what(st)}: "
                    f"{_ms(saved)} beyond the roofline" if runs > 0 else
                    f"runs outside the steps ({plural(round(c.runs), 'run')} before, between or after them, set-up or "
                    "evaluation): it takes no time from the steps"] + notes
        if c.roofline_bound != "exact":
            evidence.append(f"its roofline: {c.roofline_note}")
        if not causes:
            causes.append("the kernel runs below its roofline and its HLO shows no cause (no matrix-unit padding, "
                          "dtype or layout change that explains the gap)")
            fixes.append("check its fusion in the HLO (`rooflens hlo --op`), whether it overlaps other work, and the "
                         "kernel the compiler chose (its tiling)")
        f = Finding("slow-op", "low", f"{ref(c)} is {fmt_ratio(c.ratio)} slower than its roofline", (ref(c),),
                    per_step_of(report, step_time_of(report, c), c.program), tuple(evidence), "; ".join(causes),
                    "; ".join(fixes))
        out.append(with_saving(report, f, saved, c.program))
    return out


#: the fix for FFTs and sorts beyond their rooflines (compute- or memory-bound): fewer, smaller, batched
STAGED_FIX = ("do fewer of them or smaller ones (an FFT over fewer points or modes, a power-of-two length, one batched "
              "transform instead of several; a top-k instead of a full sort), or move the work into matmuls where the "
              "algorithm allows; check the largest contributors with `rooflens hlo --op`")


def _staged(c: OpComparison) -> bool:
    """An op that passes over its data once per stage: an FFT or a sort (alone, or at a fusion's root)."""
    return c.category == "fft" or c.opcode == "sort" or c.name.startswith(("sort", "wrapped_sort"))


def rule_kernel_inefficiency(report: Report) -> list[Finding]:
    """Many ops each moderately off their roofline: together, time inside kernels beyond their rooflines."""
    st = report.steps
    if st is None or st.step_time_s <= 0:
        return []
    busy = busy_total(report)
    ops = [(c, x) for c in report.comparison
           if _in_step(report, c) and _judged(c) and c.category not in ("collective", "host transfer")
           and not is_async(c) and not is_slow_op(report, c, busy) and (x := excess_per_step(report, c)) > 0]
    # ops that ran alongside each other (XLA:CPU's threads) sum to more than the step's time they took: their excess
    # is counted in the step's time, scaled by the share of the step's op time that ran alone. On a GPU or TPU what
    # runs alongside is mostly collectives beside the compute stream, whose kernels' excess is on the step's path:
    # scaled only where the plain sum would be more than the step
    # (a thousandth of the op time or less is float sums' noise, not ops side by side: 5.76 µs of an 86.8 ms step read
    # "<0.01 % of its op time ran alongside other ops … taken at 100.0 %")
    alone = (st.parts_s - st.concurrent_s) / st.parts_s if st.concurrent_s > 1e-3 * st.parts_s > 0 else 1.0
    if report.platform != "cpu" and sum(x for _, x in ops) <= st.step_time_s:
        alone = 1.0
    # and never more than the step's device time its ops run in (their medians per execution, taken against the
    # steps' mean, came to 0.23 s of a 0.20 s step on a busy machine): scaled down to it
    busy_s = max(st.step_time_s - st.idle_s, 0.0)
    plain = sum(x for _, x in ops) * alone
    capped = plain > busy_s
    scale = alone * (busy_s / plain if capped else 1.0)
    ops = [(c, x * scale) for c, x in ops]
    total = sum(x for _, x in ops)
    if total < INEFFICIENCY_SHARE * st.step_time_s or len(ops) < INEFFICIENT_OPS:
        return []
    ops.sort(key=lambda cx: -cx[1])

    def part(pred) -> float:
        return sum(x for c, x in ops if pred(c))

    short = part(lambda c: c.measured_s < TINY_OP_S)
    memory = part(lambda c: c.bound == "memory" and c.measured_s >= TINY_OP_S)
    compute = part(lambda c: c.bound == "compute" and c.measured_s >= TINY_OP_S)
    measured = sum(c.measured_s * runs_per_step(report, c) for c, _ in ops) * scale
    several = len({c.program for c, _ in ops}) > 1  # then an op is named with its program

    def name(c: OpComparison) -> str:
        return str(ref(c)) if several else c.name

    unit = "execution" if st.basis == "executions" else "step"
    evidence = [f"{len(ops)} ops take {fmt_ratio(measured / (measured - total))} their rooflines together: "
                f"{_ms(total)} per {unit} beyond them, {fmt_percent(total / st.step_time_s)} of the "
                f"{_ms(st.step_time_s)} "
                f"{unit}",
                "the largest contributors: " + ", ".join(f"{name(c)} ({c.ratio:.2g}×, +{_ms(x)})" for c, x in ops[:5])]
    if alone < 1.0:
        evidence.append(f"counted in the {unit}'s time: {fmt_percent(1.0 - alone)} of its op time ran alongside other "
                        f"ops, so each op's time beyond its roofline is taken at {fmt_percent(alone)}")
    if capped:
        evidence.append(f"taken at most as the {_ms(busy_s)} the device runs ops in the {unit}: their medians per "
                        f"execution sum to {_ms(plain)} beyond their rooflines, more than that")
    split = [(memory, "in memory-bound ops"), (compute, "in compute-bound ops"),
             (short, f"in ops shorter than {_ms(TINY_OP_S)} (a fixed cost per op)"),
             (total - memory - compute - short, "in ops bound by launch or latency")]
    evidence.append("of it: " + ", ".join(f"{_ms(x)} {what}" for x, what in split if x > 0.01 * total))

    def achieved(bound: str, frac) -> str:
        sel = [(c, x) for c, x in ops if c.bound == bound and c.measured_s >= TINY_OP_S and frac(c)]
        t = sum(c.measured_s * runs_per_step(report, c) for c, _ in sel)
        return f"{fmt_percent(sum(frac(c) * c.measured_s * runs_per_step(report, c) for c, _ in sel) / t)}" if t else ""

    biggest = max(split[:3], key=lambda xw: xw[0])[1]
    if biggest == split[2][1]:
        cause = ("many short ops each pay a fixed cost their rooflines leave out (pipeline fill, DMA set-up, "
                 "synchronisation at the kernel's end), which dominates an op of a few microseconds")
        fix = "fuse the short ops into their neighbours (fewer, larger kernels: larger batches, jit more of the step)"
    elif biggest == split[0][1]:
        if rate := achieved("memory", lambda c: c.bytes_fraction_of_peak):
            evidence.append(f"the memory-bound ops reach {rate} of HBM bandwidth (time-weighted)")
        cause = ("memory-bound kernels read and write below HBM bandwidth: transfers too small to reach full "
                 "bandwidth, strided or transposed accesses, or operands padded by their layout")
        fix = ("fuse neighbouring elementwise and reduction ops into fewer, larger kernels (bigger batches or "
               "sequence chunks), and keep minor dimensions contiguous and multiples of the layout's tile")
        staged = [(c, x) for c, x in ops if c.bound == "memory" and c.measured_s >= TINY_OP_S and _staged(c)]
        if (in_stages := sum(x for _, x in staged)) > memory / 2:
            kinds = ", ".join(f"{op} ×{n}" for op, n in Counter(c.opcode for c, _ in staged).most_common(4))
            evidence.append(f"{_ms(in_stages)} of the memory-bound part is in FFTs and sorts ({kinds})")
            cause = ("an FFT or a sort passes over its data once per stage (about log2 of its length stages) where "
                     "its roofline counts one read and one write: data that leave the caches stream several times, "
                     "and many short transforms each pay a set-up")
            fix = STAGED_FIX
    else:
        if rate := achieved("compute", lambda c: c.flops_fraction_of_peak):
            evidence.append(f"the compute-bound ops reach {rate} of peak FLOP/s (time-weighted)")
        # whose the compute-bound excess mostly is: ops that are no matrix multiplication (FFTs, sorts, vector
        # math) or convolutions get their own advice, not the matmuls'
        bound = [(c, x) for c, x in ops if c.bound == "compute" and c.measured_s >= TINY_OP_S]
        solvers = sum(x for c, x in bound if c.category == "linear algebra")
        not_matrix = sum(x for c, x in bound if c.category not in MATRIX_CATEGORIES) - solvers
        convs = sum(x for c, x in bound if c.category == "convolution")
        if solvers > compute / 2:
            evidence.append(f"{_ms(solvers)} of the compute-bound part is in factorizations and triangular solves")
            cause = ("factorizations (Cholesky, LU, QR) and triangular solves run part of their work as panel "
                     "steps (matrix-vector products, below the matrix rate) whose dependencies serialise them: a "
                     "small or thin matrix stays far below the peak its FLOPs are priced at")
            fix = ("factor once and reuse it (keep the Cholesky and call cho_solve, not solve, for each right-hand "
                   "side), batch many small matrices into one call, and for large systems consider an iterative "
                   "solver (conjugate gradients) or a lower-rank approximation")
        elif not_matrix > compute / 2:
            others = Counter(c.opcode for c, _ in bound if c.category not in MATRIX_CATEGORIES)
            kinds = ", ".join(f"{op} ×{n}" for op, n in others.most_common(4))
            evidence.append(f"{_ms(not_matrix)} of the compute-bound part is in ops that are no matrix multiplication "
                            f"({kinds})")
            cause = ("compute-bound ops that are no matrix multiplication run their FLOPs on the vector units, well "
                     "below the peak they are priced at (the chip's published peak for their dtype, or on a CPU its "
                     "measured matmul rate), and an FFT or sort also passes over its data once per stage; their "
                     "rooflines are a floor they do not approach")
            fix = STAGED_FIX
        elif convs > compute / 2:
            evidence.append(f"{_ms(convs)} of the compute-bound part is in convolutions")
            cause = ("compute-bound convolutions keep the matrix units below peak: few channels or a small batch that "
                     "fill the units' tiles partly, a layout change around them, or the tile sizes the compiler chose")
            fix = ("give the convolutions more channels and a larger batch, in multiples of the matrix unit's tile, "
                   "keep operands in the chip's fast dtype (bf16), and check the largest contributors with "
                   "`rooflens hlo --op`")
        else:
            cause = ("compute-bound kernels keep the matrix units below peak: shapes that fill the units' tiles "
                     "partly, conversions or epilogues inside the fusions, or tile sizes the compiler chose for them")
            fix = ("give the matmuls larger dims that are multiples of the matrix unit's tile (batch, fuse "
                   "projections), keep operands in the chip's fast dtype, and check the largest contributors with "
                   "`rooflens hlo --op`")
    f = Finding("kernel-inefficiency", "low",
                f"The step's ops together spend {_ms(total)} beyond their rooflines", tuple(ref(c) for c, _ in ops[:8]),
                total, tuple(evidence), cause, fix)
    return [with_saving(report, f, total, st.program)]


def undonated_copy(report: Report, c: OpComparison) -> str:
    """What ``c`` is, in a phrase, when it is XLA's copy of a program argument that the program then updates in
    place (a scatter or dynamic-update-slice into it): made because the argument was not donated, so its buffer is
    the caller's. "" for any other op."""
    module = report.modules.get(c.program)
    ins = module.find(c.name) if module is not None else None
    if ins is None or ins.opcode != "copy" or module.entry is None:
        return ""
    src = module.operands_of(ins)
    if len(src) != 1 or src[0].opcode != "parameter" or src[0].computation is not module.entry \
            or src[0].shape.text != ins.shape.text:  # a copy to another layout is a relayout, not this
        return ""
    aliased = {int(n) for n in re.findall(r"\(\s*(\d+)\s*,", str(module.raw_attrs.get("input_output_alias", "")))}
    if src[0].parameter_number in aliased:
        return ""
    updates = [u for u in module.users(ins) if u.opcode in IN_PLACE or (
        u.opcode == "fusion" and any(b.opcode in IN_PLACE for b in module.fusion_body(u)))]
    if not updates:
        return ""
    arg = src[0].metadata.get("op_name") or src[0].name
    return (f"{ref(c)} copies the argument {arg} ({ins.shape.text.split('{')[0]}, "
            f"{fmt_bytes(ins.shape.bytes)}) every execution so "
            f"that {updates[0].name} can update it in place: the argument is not donated")


def rule_copies(report: Report) -> list[Finding]:
    copies = [c for c in report.comparison if c.category == "copy/transpose"]
    busy = busy_total(report)
    total = sum(c.total_time_s for c in copies)
    share = total / busy
    if share < COPY_SHARE:
        return []
    copies.sort(key=lambda c: -c.total_time_s)
    main = report.steps.program if report.steps else None
    saved = sum(c.measured_s * runs_per_step(report, c) for c in copies if _in_step(report, c))
    evidence = [f"{fmt_name(str(ref(c)))}: {_ms(c.total_time_s)} in all" for c in copies[:4]]
    cause = ("arrays are retiled between ops whose preferred layouts differ (a transpose or layout change that XLA "
             "could not fold into its neighbours)")
    fix = ("use AUTO layouts for jitted inputs, avoid explicit transposes of large arrays between matmuls, or "
           "change the einsum so the contraction order matches the stored layout")
    undonated = [(c, what) for c in copies if (what := undonated_copy(report, c))]
    if undonated:
        evidence += [what for _, what in undonated[:3]]
        if sum(c.total_time_s for c, _ in undonated) >= total / 2:  # then the copies are mostly these
            cause = ("the program updates an argument in place (a scatter or dynamic-update-slice into it) but the "
                     "argument's buffer is the caller's, as it was not donated: XLA copies the whole array first, "
                     "every execution")
            fix = ("donate the argument: jax.jit(step, donate_argnums=…) or donate_argnames=… (Equinox's "
                   "filter_jit(donate=\"all\"), Flax NNX's nnx.jit(donate_argnums=…)), and use only the returned "
                   "array after the call; the update then writes into the argument's own buffer, with no copy")
    f = Finding(
        "copies", "low", f"Copies and transposes take {fmt_percent(share)} of device time",
        tuple(ref(c) for c in copies[:6]), per_step_of(report, sum(step_time_of(report, c) for c in copies), main),
        tuple(evidence), cause, fix)
    return [with_saving(report, f, saved, main)]


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
        period = f"per {per_what(report.steps)}"  # a training jitted whole: per execution of it, its unit
    elif report.steady.warmup_judged or not max(st.by_program_s, key=st.by_program_s.get):
        # a whole run with no step function (ops dispatched one by one), or kernels of no XLA program (an
        # Nsight trace of PyTorch): the capture
        per_step = sum(s.occurrences for s in ops) / n_dev
        period = "in the capture"
    else:  # no step annotations: each op of the busiest program runs once per execution of it
        main = max(st.by_program_s, key=st.by_program_s.get)
        per_step = sum(1 for s in ops if s.program == main)
        period = f"per execution of {main}"
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
    tiny = [s for s in ops if s.avg_time_s < TINY_OP_S]
    total = sum(s.total_time_s for s in tiny)
    programs = len(st.by_program_s)
    # fusing them keeps their work (their roofline) and saves the rest: their launches and ramp-up
    compared = {(c.program, c.name): c for c in report.comparison}
    saved = 0.0
    for s in tiny:
        c = compared.get((s.program, s.name))
        if c is not None and _in_step(report, c):
            saved += (c.measured_s - min(c.predicted_s or 0.0, c.measured_s)) * runs_per_step(report, c)
    main = report.steps.program if report.steps else None
    # the step already one jitted program holding every tiny op: "jit the whole step" is done; XLA left them apart
    # (and run once per step: a step of 150 calls of one small jitted function is a Python loop, not this)
    mains = [c for c in report.comparison if c.program == main and c.executions]
    one_program = main is not None and is_jax(report) and {s.program for s in tiny} == {main} and bool(mains) \
        and max(runs_per_step(report, c) / max(c.runs_per_execution, 1.0) for c in mains) <= 1.5
    cause = "the work is split into kernels too small to amortise their launch and synchronisation " + (
        "(each iteration of the step's loop runs ops of little work)" if looped_unit_advice(report) else
        "(ops XLA left apart inside the step's one program: slices, small updates, the pieces around collectives)"
        if one_program else "(a Python loop of small jitted calls, or ops XLA could not fuse)")
    fix = looped_unit_advice(report) or (
        "the step is one program already: give each op more work (a larger batch per device, or fewer devices for "
        "a model this small), and see which ops they are with `rooflens hlo --op`" if one_program else
        in_terms_of(report, "jit the whole step (one program), turn Python loops into lax.scan / vmap, or give each "
                    "op more work (larger batch)",
                    "fuse the small kernels (torch.compile the step), capture the step as a CUDA graph, or give each "
                    "kernel more work (larger batch)",
                    "fuse the small kernels (compile the step), capture it as a CUDA graph, or give each kernel more "
                    "work (larger batch)"))
    f = Finding(
        "tiny-ops", "low", f"Many tiny ops: {per_step:,.0f} {period} per device, median {_ms(median)}",
        tuple(ref(s) for s in sorted(tiny, key=lambda s: -s.occurrences)[:6]), per_device_step(report, total),
        (f"median op time {_ms(median)} < {_ms(TINY_OP_S)} (about the cost of launching one)",
         f"{per_step:,.0f} op executions {period} per device across {plural(programs, 'program')}",
         *filter(None, [profiled_launches(report)])),
        cause, fix)
    return [with_saving(report, f, saved, main)]


def rule_variance(report: Report) -> list[Finding]:
    out = []
    st = report.stats.steps
    main = report.steps.program if report.steps else None
    if st is not None and st.count >= 4 and st.mean_s > 0:
        # the interquartile spread over the median: one slow outlier step (noise, a GC pause) does not
        # move it, steps that really differ (every other step waits for input) do
        q1, med, q3 = statistics.quantiles(st.times_s, n=4, method="inclusive")
        spread = (q3 - q1) / med if med else 0.0
        cpu = report.platform == "cpu"
        if spread > (STEP_CV_CPU if cpu else STEP_CV) and (not cpu or q3 - q1 > STEP_SPREAD_CPU_S):
            slow = max(range(st.count), key=lambda i: st.times_s[i])
            # the time it involves, per step: how much longer than the median the steps run, on average
            excess = sum(max(t - med, 0.0) for t in st.times_s) / st.count
            f = Finding(
                "step-variance", "low", f"Step times vary by {fmt_percent(spread)} (IQR/median)", (), excess,
                (f"steps: median {_ms(med)}, quartiles {_ms(q1)}–{_ms(q3)}, min {_ms(st.min_s)}, max {_ms(st.max_s)}",
                 f"slowest: step {st.steps[slow]}; steps as fast as the median would save {_ms(st.mean_s - med)} "
                 "per step on average"),
                "some steps do extra work or wait (recompilation, input stalls, garbage collection, a slow batch)",
                "look at the slowest step in the trace; make per-step work uniform")
            out.append(with_saving(report, f, st.mean_s - med, main))
    devs = [d for d in report.stats.devices if d.busy_s > 0]
    # forced CPU devices: thread scheduling alone skews busy times by ~3× between devices
    limit = STRAGGLER_RATIO_CPU if report.platform == "cpu" else STRAGGLER_RATIO
    if len(devs) > 1 and report.stats.host_steps is None:  # several hosts: see rule_hosts
        fast, slow = min(devs, key=lambda d: d.busy_s), max(devs, key=lambda d: d.busy_s)
        if slow.busy_s / fast.busy_s > limit:
            mean = statistics.mean(d.busy_s for d in devs)
            bd = step_of(report, main)
            periods = bd.periods if bd is not None and bd.periods > 0 else 1.0
            f = Finding(
                "device-straggler", "medium",
                f"Device {slow.device} is busy {slow.busy_s / fast.busy_s:.1f}× longer than device {fast.device}", (),
                per_device_step(report, slow.busy_s - fast.busy_s),
                (f"busy {_ms(slow.busy_s)} vs {_ms(fast.busy_s)}; balanced, each device would be busy the mean "
                 f"{_ms(mean)}",),
                "uneven work across devices (an imbalanced sharding) or a slow device; collectives make everyone "
                "wait for it", "balance the sharding (shapes divisible by the mesh), check the slow device's ops")
            out.append(with_saving(report, f, (slow.busy_s - mean) / periods, main))
    return out


def _largest_gaps(gaps, several: bool, most: int = 2) -> list[str]:
    """The ``most`` largest gaps inside executions, one line each: the same gap on several devices (a collective
    they all wait in) is one line naming them, not a line repeated per device."""
    lines: dict[str, list[int]] = {}
    for g in gaps:
        text = (f"{_ms(g.duration_s)} at {_ms(g.start_s)} between {fmt_name(g.before)} and {fmt_name(g.after)}"
                + (f"; the host was in {frame_label(g.host)}" if g.host else ""))
        if text not in lines and len(lines) == most:
            break
        lines.setdefault(text, []).append(g.device)
    out = []
    for text, devices in lines.items():
        on = "" if not several else (f" on device {devices[0]}" if len(devices) == 1 else
                                     f" on devices {', '.join(map(str, sorted(set(devices))))}")
        out.append(f"gap inside an execution{on}: {text}")
    return out


def rule_overheads(report: Report) -> list[Finding]:
    """Device time outside kernels within the step, from the measured gaps between op events: gaps inside
    program executions (launch and dispatch latency between ops, in-program waits) and, where a step
    spans several executions, the gaps between them (host round-trips). Gaps between executions that
    the idle finding reports are its own, not counted again; with no steps, the step is one execution
    and only the gaps inside executions are in it."""
    st = report.steps
    if not st or st.step_time_s <= 0:
        return []
    per_execution = st.basis == "executions"
    gaps = outside_kernels(report, frozenset(idle_flagged(report)))
    if gaps.window_s <= 0:
        return []
    between = 0.0 if per_execution else gaps.counted_s
    how = "measured from the gaps between its op events"
    if per_execution:  # never more than the execution's own idle time (its span less its ops)
        share = min(gaps.within_s / gaps.executing_s if gaps.executing_s else 0.0, st.idle_s / st.step_time_s)
    elif report.stats.in_steps_busy_s is not None and st.basis == "steps":
        # the steps' own idle time, measured in them, less the share of the gaps between executions that the idle
        # finding counts; and never more than the window's gaps outside the host's compilations (a step holding a
        # program's first run waits for its compilation: warm-up, not overhead)
        measured = gaps.within_s + gaps.between_s
        in_steps = st.idle_s / st.step_time_s * ((gaps.within_s + between) / measured if measured else 1.0)
        share = min(in_steps, (gaps.within_s + between) / gaps.window_s)
        # (the two within 0.5 %, what a figure printed to 3 digits shows: the steps' own, not "more" than itself)
        how = ("measured in the steps: each step less the union of the device's op events in it, as the step's idle"
               if share >= in_steps * (1 - 0.005) else "measured from the gaps between its op events, the host's "
               "compilations and warm-up left out (the steps' own idle time, which holds them, is more)")
    else:
        share = (gaps.within_s + between) / gaps.window_s
    if share < OVERHEAD_SHARE:
        return []
    overhead_s = share * st.step_time_s
    within_share = gaps.within_s / (gaps.within_s + between) if gaps.within_s + between else 0.0
    n_ops = per_step_of(report, sum(c.occurrences for c in report.comparison if _in_step(report, c)))
    per_gap = overhead_s * within_share / n_ops if n_ops else 0.0
    unit = per_what(st)
    evidence = [f"the device runs no op {fmt_percent(share)} of the {unit} ({_ms(overhead_s)} of "
                f"{_ms(st.step_time_s)}), {how}",
                f"inside program executions: {_ms(gaps.within_s)} of gaps in the {_ms(gaps.window_s)} measured (the "
                "steady window, warm-up left out, in all)"
                + (f", ≈ {_ms(per_gap)} per op boundary ({n_ops:.0f} ops per {unit})" if n_ops else "")]
    if between:
        evidence.append(f"between program executions: {_ms(between)} of that window, in all (host round-trips)")
    evidence += _largest_gaps(gaps.gaps, report.num_devices > 1)
    evidence += _profiler_cost(report, st.step_time_s)
    in_gaps = host_in_gaps(report)
    if in_gaps is not None:
        evidence.append(host_gap_evidence(report, in_gaps))
    if (host := host_gap_cause(report, in_gaps)) is not None:
        cause, fix = host
    elif within_share >= 0.5 and per_gap and per_gap < LAUNCH_GAP_S:
        cause = ("launch and dispatch latency between ops: each of the step's many short kernels waits a few "
                 "microseconds for the next to be launched")
        fix = in_terms_of(
            report, "fewer, larger kernels: fuse (jit the whole step), let XLA capture the step as command buffers / "
            "CUDA graphs, or give each op more work (larger batch)",
            "fewer, larger kernels: fuse them (torch.compile the step), capture the step as a CUDA graph "
            "(torch.cuda.graphs, or torch.compile(mode=\"reduce-overhead\")), or give each kernel more work (larger "
            "batch)",
            "fewer, larger kernels: fuse them (compile the step with the framework's compiler), capture the step as "
            "a CUDA graph, or give each kernel more work (larger batch)")
        if report.platform == "cpu":  # no command buffers or CUDA graphs: XLA:CPU runs each op as a thunk
            fix = "fewer, larger ops: jit the whole step so XLA fuses more, or give each op more work (larger batch)"
        fix = looped_unit_advice(report) or fix
        buffered = profiled_launches(report)
        if buffered:
            evidence.append(buffered)
            cause += ("; but under a profiler XLA runs its command buffers one launch at a time, so the gaps between "
                      "their kernels are the profiler's: an unprofiled run launches each buffer as one graph")
            fix = ("time the step unprofiled (the script's own timing) before acting on this: the gaps inside command "
                   "buffers are not there then; if it is still slow, give each kernel more work (larger batch) or let "
                   "XLA fuse more of the step")
    elif within_share >= 0.5:
        evidence.append(frames_hint(report))
        cause = ("the device waits inside its programs for the host: the runtime launching each op slower than the "
                 "device runs it (a library call's set-up, per-op host work), host callbacks, or transfers and "
                 "synchronisation the program waits for")
        fix = ("give each op more work so launches keep ahead of the device (larger batch, fewer and larger ops), "
               + in_terms_of(report, "remove host callbacks and in-program transfers from the step (jax.debug.print, "
                             "io_callback)", "remove host synchronisations from the step (tensor.item(), .cpu(), "
                             "printing tensors, torch.cuda.synchronize())", "remove host synchronisations and "
                             "transfers from the step (reading values back, printing them)")
               + ", and check the gaps above")
    else:
        evidence.append(frames_hint(report))
        cause = ("host round-trips inside the step: the step runs several programs and the device waits for the "
                 "host to dispatch each")
        fix = in_terms_of(report, "jit the whole step as one program, and drop per-step synchronisations "
                          "(device_get, printing values)",
                          "compile the step as one graph (torch.compile, CUDA graphs), and drop per-step "
                          "synchronisations (tensor.item(), printing values)",
                          "run the step as one compiled graph, and drop per-step synchronisations (reading values "
                          "back, printing them)")
    f = Finding("overheads", "low", f"The device runs no kernel {fmt_percent(share)} of the {unit}", (), overhead_s,
                tuple(e for e in evidence if e), cause, fix)
    return [with_saving(report, f, overhead_s, st.program)]


def profiled_launches(report: Report) -> str:
    """Evidence that the step's launches were the profiler's: its kernels ran in XLA command buffers, which XLA
    runs one launch at a time while a profiler is on (``--xla_enable_command_buffers_during_profiling`` is off by
    default); "" when none did."""
    if report.platform == "gpu" and report.metadata.get("xla_flags_added"):  # rooflens run's whole-run trace
        return ("this whole run was traced with XLA's command buffers off (as XLA runs them under a profiler anyway, "
                "one launch at a time): an unprofiled run launches each command buffer as one CUDA graph, so it "
                "pays fewer launches than this trace shows")
    ops = [c for c in report.comparison if _in_step(report, c)]
    inside = [c for c in ops if (c.program, c.name) in report.command_buffer_ops]
    if not inside:
        return ""
    share = sum(c.occurrences for c in inside) / max(sum(c.occurrences for c in ops), 1)
    return (f"{fmt_percent(share)} of the step's kernels ran inside XLA command buffers (CUDA graphs), which XLA "
            "runs one launch at a time under a profiler: this trace launched them one by one, an unprofiled run "
            "does not")


PROFILER_TINY_STEP_S = 1e-3  # a step this short is where the tracer's per-op recording shows


def _profiler_cost(report: Report, step_s: float) -> list[str]:
    """Evidence that part of a tiny step's gap is the profiler's own: it records every op it traces."""
    n_ops = sum(s.occurrences for s in report.stats.op_stats) / max(report.num_devices, 1)
    steps = report.steps.steps if report.steps and report.steps.steps else 1
    if step_s >= PROFILER_TINY_STEP_S or not n_ops:
        return []
    return [f"part of it is the profiler's own cost: the step lasts {_ms(step_s)} and the tracer records each of "
            f"its {n_ops / steps:.0f} ops per device; an untraced run (the script's own timing) shows how much"]


def rule_other_programs(report: Report) -> list[Finding]:
    """Other programs (evaluation, metrics, callbacks) that take more device time inside the steps than the step
    program itself: the step is theirs as much as the training's; named with their time per step."""
    st = report.steps
    if st is None or st.basis != "steps" or not st.other_programs:
        return []
    own_s = st.parts_s
    others_s = st.other_programs_s
    if others_s <= own_s or others_s <= 0:
        return []
    shown = [f"{p}: {_ms(s)} per step" for p, s in st.other_programs[:6]]
    f = Finding(
        "other-programs", "medium",
        f"Other programs take more device time in the step than {st.program} ({_ms(others_s)} against "
        f"{_ms(own_s)} per step)", (), others_s,
        (f"inside the {st.steps} step(s), on the device, per step: " + "; ".join(shown),
         f"{st.program}'s own ops: {_ms(own_s)} per step of {_ms(st.step_time_s)}"),
        "programs other than the step's run between or inside the steps: an evaluation, metrics or a callback "
        "the loop calls every step or every few steps",
        "run them less often, or make them cheaper (evaluate on fewer batches, fuse the metrics into the step "
        "program); --step-fn NAME judges one of them as the step program instead")
    return [with_saving(report, f, others_s, st.program)]
