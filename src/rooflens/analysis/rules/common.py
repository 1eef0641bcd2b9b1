"""What the rules share: severity from a share of time, per-step scaling, what a fix is worth, the
device time outside kernels, and the HLO walks."""

from __future__ import annotations

from dataclasses import dataclass, replace

from rooflens.analysis.findings import Finding, OpRef, Severity
from rooflens.analysis.report import OpComparison, Report, StepBreakdown
from rooflens.hlo import Instruction, Module
from rooflens.hlo.opcodes import MODEL_FLOP_OPCODES

TINY_OP_S = 20e-6  # below this an op costs about what launching it does (GPU/TPU launch ≈ 5–10 µs)
TINY_OPS_PER_STEP = 100


def severity_of(share: float) -> Severity:
    return "high" if share >= 0.2 else "medium" if share >= 0.05 else "low"


def per_device_step(report: Report, total_s: float) -> float:
    """A time summed over devices and steps, per device per step (per device where there are no steps)."""
    steps = report.steps.steps if report.steps and report.steps.steps else 1
    return total_s / max(report.num_devices, 1) / steps


def busy_total(report: Report) -> float:
    return sum(d.busy_s for d in report.stats.devices) or 1.0


def ref(c) -> OpRef:
    """An op of the comparison (or the op stats) as a finding names it: its program and its name."""
    return OpRef(c.program, c.name)


def step_of(report: Report, program: str | None = None) -> StepBreakdown | None:
    """The step a program's ops are judged in: the main step where the program runs inside it (an evaluation, a
    preprocessing program between the step's calls: its time is part of that step), else its own breakdown (an
    execution of it when the trace has no steps), else the main program's."""
    main = report.steps
    if program is not None and main is not None and any(p == program for p, _ in main.other_programs):
        return main  # (judged in its own 104 µs a preprocessing op's 46 µs read "44.6 % of the step", HIGH)
    if program is not None:
        for p in report.programs:
            if p.program == program:
                return p
    return report.steps


def periods_of(report: Report, program: str | None = None) -> float:
    """What a program's measured totals are divided by per device: its step's periods (steps, or executions),
    1 where none were measured."""
    st = step_of(report, program)
    return st.periods if st is not None and st.periods > 0 else 1.0


def per_what(st: StepBreakdown | None) -> str:
    """The period a finding's per-step numbers are per: "execution of <program>" or "step"."""
    if st is None or st.basis != "executions":
        return "step"
    return f"execution of {st.program}" if st.program else "capture"  # kernels of no XLA program: the capture


def is_jax(report: Report) -> bool:
    """Whether the trace is a JAX program's: it says so, or (not said) its ops belong to XLA programs. A trace of
    another framework (PyTorch, TensorFlow, an Nsight export without XLA ranges) gets advice in its own terms."""
    if report.framework:
        return report.framework == "JAX"
    return any(c.program for c in report.comparison)


def in_terms_of(report: Report, jax: str, pytorch: str, other: str) -> str:
    """A rule's advice in the trace's framework's terms: JAX's, PyTorch's, or any other's (no framework API)."""
    return jax if is_jax(report) else pytorch if report.framework == "PyTorch" else other


def step_loop_iterations(report: Report) -> float | None:
    """How many times the step program's ops run per execution of it when most of their runs are inside a loop of
    it (a ``lax.scan`` over a sequence inside a jitted step: an LSTM's 64 time steps; layers under ``nn.scan``): the
    runs-weighted median of the looped ops' runs per execution, by the HLO's trip counts. None when most of its op
    runs are once per execution, or the HLO does not say."""
    from rooflens.analysis.compare import runs_in_execution

    st = report.steps
    module = report.modules.get(st.program) if st is not None and st.program else None
    if module is None:
        return None
    # the loops' trip counts as the HLO gives them (not events per execution: a GPU op may launch several kernels)
    runs_in = runs_in_execution(module)
    ops = [(c, runs_in.get(c.name) or 1.0) for c in report.comparison if c.program == st.program and c.executions]
    total = sum(c.executions * k for c, k in ops)
    looped = sorted((k, c.executions * k) for c, k in ops if k >= 2)
    inside = sum(r for _, r in looped)
    if not total or inside < total / 2:
        return None
    acc = 0.0
    for per, r in looped:
        acc += r
        if acc >= inside / 2:
            return per
    return None


def looped_unit_advice(report: Report) -> str | None:
    """For a step that is already one program looping over its iterations (a training jitted whole, a ``lax.scan``
    of updates called once, a jitted step whose ops run mostly inside its own ``lax.scan``), the advice that fits
    it: "jit the whole step" or "turn Python loops into lax.scan" is already done there. None for any other step."""
    st = report.steps
    if st is None or not is_jax(report):
        return None
    if st.trip_count and st.trip_count >= 2:
        loop = f"the step is already one program whose loop runs {st.trip_count:,} iterations per execution"
    elif (n := step_loop_iterations(report)) is not None:
        loop = (f"the step is already one program, and most of its ops run inside a loop of it (~{n:,.0f} times per "
                "execution: a lax.scan, fori_loop or while_loop)")
    else:
        return None
    return (f"{loop}: give each iteration's ops more work (a larger batch, or independent runs vmapped together), or "
            "unroll the loop a few iterations (lax.scan(..., unroll=k)) so XLA fuses across them"
            + ("; or let XLA capture the step as command buffers / CUDA graphs" if report.platform == "gpu" else ""))


def per_execution(c: OpComparison) -> str:
    """An op's time per execution as every finding says it: the median (the report's statistic), with the mean
    beside it where the two are far apart: '3.02 ms median per execution (mean 12.5 ms)'."""
    from rooflens.units import fmt_seconds

    return (f"{fmt_seconds(c.measured_s)} median per execution"
            + (f" (mean {fmt_seconds(c.mean_s)})" if c.mean_apart else ""))


def runs_per_step(report: Report, c: OpComparison) -> float:
    """How many times one device runs the op per step of its program (per execution, without steps); with
    steps, its runs inside them (a set-up program run before the first step runs no time per step)."""
    return ((c.runs_in_steps if over_steps(report) else c.runs) / max(report.num_devices, 1)
            / periods_of(report, c.program))


def over_steps(report: Report) -> bool:
    """The report's step is the steps' (not one execution): an op's time and runs per step are those inside them."""
    return report.steps is not None and report.steps.basis == "steps"


def step_time_of(report: Report, c: OpComparison) -> float:
    """An op's time summed over devices, counted as the steps': with steps, what lies inside them."""
    return c.time_in_steps_s if over_steps(report) else c.total_time_s


def excess_per_step(report: Report, c: OpComparison) -> float:
    """What the op spends beyond its roofline per step on one device: (measured − roofline) × runs per step."""
    if not c.priced or c.ratio is None:
        return 0.0
    return max(c.measured_s - c.predicted_s, 0.0) * runs_per_step(report, c)


def per_step_of(report: Report, total_s: float, program: str | None = None) -> float:
    """A time summed over devices and runs, per device per step of ``program`` (per execution of it when
    there are no steps)."""
    return total_s / max(report.num_devices, 1) / periods_of(report, program)


def with_saving(report: Report, f: Finding, recoverable_s: float, program: str | None = None, *,
                severity: bool = True, headroom_bytes: float | None = None) -> Finding:
    """``f`` with what fixing it gives back per step (capped at the step) and, unless ``severity`` is
    False, its severity from that share of the step."""
    st = step_of(report, program)
    step_s = st.step_time_s if st is not None and st.step_time_s > 0 else 0.0
    rec = max(float(recoverable_s), 0.0)
    if step_s:
        rec = min(rec, step_s)
    per = per_what(st)
    sev = severity_of(rec / step_s) if severity and step_s else f.severity
    return replace(f, severity=sev, recoverable_s=rec, step_s=step_s, per=per, headroom_bytes=headroom_bytes,
                   program=st.program if st is not None else "")


@dataclass(frozen=True)
class OutsideKernels:
    """Device time outside kernels over the steady state, measured from the gaps between op events
    (summed over the units the idle rule judges: each device, or a CPU's devices together)."""

    within_s: float  # gaps inside program executions: launch and dispatch latency between ops, in-program waits
    between_s: float  # gaps between program executions (the host dispatching, feeding or synchronising) …
    counted_s: float  # … of which not left out (not the idle finding's)
    window_s: float  # the steady window measured (first execution to last, warm-up and set-up left out)
    units: int
    gaps: tuple = ()  # the largest gaps inside executions (rooflens.trace.stats.Gap), largest first

    @property
    def executing_s(self) -> float:
        """The time inside program executions."""
        return max(self.window_s - self.between_s, 0.0)


def outside_kernels(report: Report, leave_out: frozenset[int] = frozenset()) -> OutsideKernels:
    """The device's gaps, from the op events' busy union (``DeviceTime``) and the steady state's gaps between
    executions (``IdleUnit``): a unit's gaps inside executions are all its gaps less those between
    executions (warm-up ones included, as measured over the same events). ``leave_out``: indices of
    ``report.steady.idle`` whose gaps between executions are counted elsewhere (the idle finding's)."""
    within = between = counted = window = 0.0
    n, inside = 0, []
    for k, u in enumerate(report.steady.idle):
        d = u.unit
        if d.window_s <= 0:
            continue
        n += 1
        window += d.window_s
        between += u.idle_s
        if k not in leave_out:
            counted += u.idle_s
        if u.gaps is None:  # no events measured: its gaps cannot be told apart
            continue
        within += max(d.idle_s - u.idle_s - u.warmup_s, 0.0)
        # the stats' largest gaps that are not a gap between executions (those start where one ends)
        inside += [g for g in d.largest_gaps if not u.gaps.starts_at(g.start_s) and g.duration_s > 0]
    inside.sort(key=lambda g: -g.duration_s)
    return OutsideKernels(within, between, counted, window, n, tuple(inside[:3]))


def producer_chain(module: Module, ins: Instruction, depth: int = 3) -> list[Instruction]:
    """The operands of ``ins``, and theirs through bitcasts, reshapes and converts, ``depth`` levels up."""
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


def dot_of(module: Module, ins: Instruction) -> Instruction | None:
    """The dot or convolution ``ins`` is, or the first one its fusion body holds."""
    if ins.opcode in MODEL_FLOP_OPCODES:
        return ins
    return next((i for i in module.fusion_body(ins) if i.opcode in MODEL_FLOP_OPCODES), None)
