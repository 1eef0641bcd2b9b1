"""Kernels: rooflines a measurement beats, and TPU programs (not their ops) as the unit of launch cost."""

from __future__ import annotations

import statistics

from rooflens.analysis.findings import Finding
from rooflens.analysis.report import Report
from rooflens.analysis.rules.common import (
    TINY_OP_S,
    TINY_OPS_PER_STEP,
    outside_kernels,
    per_device_step,
    ref,
    step_time_of,
    with_saving,
)
from rooflens.analysis.trust import is_async, rates_of_comparison
from rooflens.hardware.calibrate import made_and_spread
from rooflens.hardware.infer import chips_fitting, describe_rates
from rooflens.units import fmt_seconds as _ms
from rooflens.units import plural


def tiny_programs(report: Report) -> list[Finding]:
    """TPU: many short program executions per step (each one dispatch from the host)."""
    st = report.stats
    n_dev = max(report.num_devices, 1)
    steps = report.steps.steps if report.steps and report.steps.steps else 1
    execs = [p for p in report.programs if p.basis == "executions"]
    if not execs:
        return []
    per_step = sum(report.stats.by_program_s.get(p.program, 0.0) / max(p.step_time_s, 1e-12) for p in execs)
    per_step = per_step / n_dev / steps
    median = statistics.median([p.step_time_s for p in execs])
    if median >= TINY_OP_S or per_step < TINY_OPS_PER_STEP:
        return []
    # what dispatching them one by one costs the device: its gaps between executions, per step
    gaps = outside_kernels(report)
    main = report.steps.program if report.steps else None
    periods = report.steps.periods if report.steps and report.steps.periods > 0 else 1.0
    saved = gaps.between_s / max(gaps.units, 1) / periods
    f = Finding(
        "tiny-ops", "medium", f"Many tiny programs: {per_step:,.0f} executions per device, median {_ms(median)}",
        (), 0.0,
        (f"median program execution {_ms(median)} < {_ms(TINY_OP_S)}", f"{plural(len(st.by_program_s), 'program')}: "
         + ", ".join(p.program for p in execs[:6]),
         f"the device waits {_ms(saved)} per step between program executions"),
        "each program execution is dispatched by the host; programs this short cannot amortise it",
        "jit the loop into one program (lax.scan / fori_loop) or give each call more work")
    return [with_saving(report, f, saved, main)]


def roofline_trust(report: Report) -> list[Finding]:
    """Ops measured above 100 % of a roof: the cost model overcounts them, or the chip is wrong."""
    bad = [c for c in report.comparison if not c.roofline_reliable and not is_async(c)
           and not c.within_calibration_spread]
    if not bad:
        return []
    rates = list(report.trace_rates) or rates_of_comparison(report.comparison)
    fit = [c.name for c in chips_fitting(rates, report.roofs and _kind_of(report) or "")]
    evidence = [f"{plural(len(bad), 'op')} faster than {'its' if len(bad) == 1 else 'their'} roofline on "
                f"{report.chip}; e.g. {ref(c)}: {c.roofline_note}"
                for c in sorted(bad, key=lambda c: -c.total_time_s)[:1]]
    evidence.append(f"fastest rates reached: {describe_rates(rates, [])}")
    cal = report.calibration
    if cal is not None:  # a measured chip: the calibration is what the measurement questions
        return [with_saving(report, calibration_trust(report, bad, evidence, cal), 0.0, severity=False)]
    given = "given" in report.chip_reason
    if given:
        evidence.append("catalogue chips those rates fit: " + (", ".join(fit) if fit else "none"))
    return [with_saving(report, Finding(
        "roofline-trust", "medium" if given else "low",
        (f"The trace beats {report.chip}: {plural(len(bad), 'op')} {'runs' if len(bad) == 1 else 'run'} faster than "
         "its roofline" if given else
         f"{plural(len(bad), 'op')} {'runs' if len(bad) == 1 else 'run'} faster than the cost model allows: "
         f"{'its roofline is' if len(bad) == 1 else 'their rooflines are'} marked unreliable"),
        tuple(ref(c) for c in sorted(bad, key=lambda c: -c.total_time_s)[:6]),
        per_device_step(report, sum(step_time_of(report, c) for c in bad)),
        tuple(evidence),
        ("the chip given is not the one that ran the trace (a faster generation), or the model counts bytes the "
         "kernel never moves to HBM" if given else
         "the model counts bytes or FLOPs these kernels do not spend (on-chip memory, aliased or sliced buffers, "
         "async transfers timed at their issue), so their figures are not printed"),
        ("give the chip that ran the trace (--chip) — one the rates fit" if given else
         "read these ops' times as measured only; `rooflens hlo --op` shows what the model counted")),
        0.0, severity=False)]  # a wrong model or chip costs the device nothing: fixing it gives back no time


def calibration_trust(report: Report, bad: list, evidence: list[str], cal: dict) -> Finding:
    """Ops faster than a calibrated chip's roofs (a CPU's ``local``): the calibration is too low, so its ratios
    are withheld until it is measured again."""
    how = (f"the calibration {cal['origin']}" if cal.get("recorded_with_run")
           else f"this machine's calibration ({cal['origin']})")
    evidence = [*evidence, f"priced against {how}: {made_and_spread(cal)}"]
    redo = ("run `rooflens calibrate` on a quiet machine (it measures again while the machine is busy), then "
            "`rooflens report --chip local` to price this trace against the new calibration")
    return Finding(
        "roofline-trust", "medium",
        f"{plural(len(bad), 'op')} {'runs' if len(bad) == 1 else 'run'} faster than the calibration of {report.chip} "
        f"allows: it is too low, so {'its ratio is' if len(bad) == 1 else 'their ratios are'} withheld",
        tuple(ref(c) for c in sorted(bad, key=lambda c: -c.total_time_s)[:6]), per_device_step(report, sum(
            step_time_of(report, c) for c in bad)), tuple(evidence),
        "the calibration measured this CPU slower than it runs: while the machine was busy, on another machine or "
        "power setting, or over arrays larger than the ones these ops read (data in the CPU's caches streams faster "
        "than the memory bandwidth measured over a large array)",
        redo + ("; a `rooflens run` profile keeps the calibration it recorded unless --chip local is given"
                if cal.get("recorded_with_run") else ""))


def _kind_of(report: Report) -> str:
    from rooflens.hardware import chip as get_chip

    try:
        return get_chip(report.chip).kind
    except Exception:  # a custom or shared chip not in the catalogue
        return report.platform


#: XLA:GPU's CommandBufferScheduling pass moves runs of commands into computations named ``command_buffer``
#: (``command_buffer.1``, …) called by a ``call``: each is recorded once as a CUDA (HIP) graph and launched as
#: one (openxla/xla ``xla/service/gpu/transforms/command_buffer_scheduling.h``, its class comment).
COMMAND_BUFFER = "command_buffer"


def graph_launched(modules: dict) -> set[tuple[str, str]]:
    """(program, op) of every op inside an XLA:GPU command buffer (and the computations it calls: a while
    body inside one is in the graph too): launched with the graph, not one by one."""
    out: set[tuple[str, str]] = set()
    for program, m in modules.items():
        todo = [c for name, c in m.computations.items()
                if name == COMMAND_BUFFER or name.startswith(COMMAND_BUFFER + ".")]
        seen = {c.name for c in todo}
        while todo:
            comp = todo.pop()
            for ins in comp.instructions:
                out.add((program, ins.name))
                for sub in m.called(ins):
                    if sub.name not in seen:
                        seen.add(sub.name)
                        todo.append(sub)
    return out


def launched_one_by_one(report: Report) -> list:
    """The op stats of ops that pay a launch each: not async starts (they only enqueue) and not the ops of
    a command buffer (one graph launch for all of them)."""
    in_graph = graph_launched(report.modules or {}) | report.command_buffer_ops  # the HLO's buffers, or the trace's
    return [s for s in report.stats.op_stats if not s.name.split(".")[0].endswith("-start")
            and (s.program, s.name) not in in_graph]
