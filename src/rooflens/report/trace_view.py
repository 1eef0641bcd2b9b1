"""Terminal views of a Report: the measured op stats, expected vs observed, the step, memory, findings."""

from __future__ import annotations

from rich.console import Console

from rooflens.report.tables import Col, print_fitted
from rooflens.report.text import e, memory_line, mfu_text, saving_line
from rooflens.units import fmt_name, fmt_ratio, plural
from rooflens.units import fmt_percent as pct
from rooflens.units import fmt_seconds as ms


def render_op_stats(console: Console, report, source: str, top: int = 20) -> None:
    """What ran: top ops, time by category/program/scope, steps, devices, what happened in the window."""
    stats = report.stats
    made = f"{e(report.framework)} trace, " if report.framework and report.framework != "JAX" else ""
    console.print(f"[bold]{e(source)}[/bold]: {made}{stats.platform} ({e(stats.device_kind)}), "
                  f"{plural(len(stats.devices), 'device')}, {plural(sum(d.events for d in stats.devices), 'op event')}")
    if report.chip_mismatch:
        console.print(f"[bold yellow]what-if:[/bold yellow] {e(report.chip_mismatch)}")
    what = "kernels" if made else "HLO ops"  # another framework's trace: its kernels, by name
    one_program = len({s.program for s in stats.op_stats[:top]}) <= 1
    cols = [Col("op", "left", name=True), Col("program", "left", 8 if one_program else 4),
            Col("category", "left", 3), Col("scope", "left", 4), Col("occurrences", drop=7),
            Col("executions", drop=6), Col("total", drop=2), Col("self"), Col("median per execution", drop=1),
            Col("% device")]
    rows = [(e(fmt_name(s.name)), e(s.program), s.category, e(s.named_scope), f"{s.occurrences:,}", f"{s.executions:,}",
             ms(s.total_time_s), ms(s.self_time_s), ms(s.median_execution_s) if s.executions else "—",
             pct(s.pct_device_time / 100)) for s in stats.op_stats[:top]]
    print_fitted(console, cols, rows, f"Top {min(top, len(stats.op_stats))} of {len(stats.op_stats)} {what} by "
                                      "self time (summed over devices)")
    for title, totals in (("by category", stats.by_category_s), ("by program", stats.by_program_s),
                          ("by named scope", stats.by_scope_prefix_s)):
        items = list(totals.items())[:10]
        if items:
            console.print(f"{title} (summed over devices): "
                          + ", ".join(f"{e(k) or '(no XLA program)'} {ms(v)}" for k, v in items))
    if stats.steps:
        s = stats.steps
        console.print(f"steps: {s.count}, mean {ms(s.mean_s)} ± {ms(s.std_s)} (standard deviation; min {ms(s.min_s)}, "
                      f"max {ms(s.max_s)})")
    several_hosts = len({d.host for d in stats.devices}) > 1
    dcols = [Col("device"), Col("host", "left", 3 if several_hosts else 6), Col("events", drop=4), Col("busy"),
             Col("idle"),
             Col("window", drop=2), Col("largest gap", drop=1), Col("between", "left", 5, name=True)]
    drows = []
    for d in stats.devices:
        g = d.largest_gaps[0] if d.largest_gaps else None
        drows.append((str(d.device), e(d.host), f"{d.events:,}", ms(d.busy_s), ms(d.idle_s), ms(d.window_s),
                      ms(g.duration_s) if g else "",
                      e(f"{fmt_name(g.before)} → {fmt_name(g.after)} at {ms(g.start_s)}") if g else ""))
    print_fitted(console, dcols, drows, "Devices")
    w = report.in_window
    if w.compilations:
        wheres = sorted({c.where for c in w.compilations if c.where})
        what = plural(len(w.compilations), "recompilation" if w.whole_run else "compilation")
        console.print(f"[bold]{what} inside the traced window[/bold] ({ms(w.compile_s)}), from "
                      f"{e(', '.join(wheres[:3]) or 'an unknown place')}")
        for m in w.cache_misses[:3]:
            console.print(f"  {e(m.splitlines()[-1].strip())}")
    if w.transfers:
        kinds = sorted({t.split(":")[0] for t in w.transfers})
        console.print(f"[bold]{plural(len(w.transfers), 'implicit ' + '/'.join(kinds) + ' transfer')} inside the "
                      f"traced window[/bold], e.g. {e(w.transfers[0])}")
    for n in report.notes:
        if not n.startswith("no expected-vs-observed comparison"):  # said where the comparison would be
            console.print(f"[dim]note: {e(n)}[/dim]")


def _ratio_style(ratio: float | None) -> str:
    if ratio is None:
        return "dim"
    return "green" if ratio <= 1.25 else "yellow" if ratio <= 2 else "red"


def render_report(console: Console, report, source: str, top: int = 20) -> None:
    """Expected vs observed, the step breakdown and the findings (after the op stats view)."""
    if report.roofs is None:
        console.print(f"[dim]no expected-vs-observed comparison: {e(report.chip_reason)}[/dim]")
    else:
        _render_comparison(console, report, top)
    _render_step_memory_findings(console, report)


def _render_comparison(console: Console, report, top: int) -> None:
    console.print(f"\n[bold]Expected vs observed[/bold] on {e(report.chip)} ({e(report.chip_reason)}); times per "
                  "execution on one device" + (", a what-if (the trace ran on another chip)" if report.chip_mismatch
                                               else ""))
    shown = sorted(report.comparison, key=lambda c: -c.total_time_s)[:top]
    one_program = len({c.program for c in shown}) <= 1
    cols = [Col("op", "left", name=True), Col("program", "left", 8 if one_program else 4),
            Col("category", "left", 3), Col("scope", "left", 4), Col("events", drop=7), Col("executions", drop=6),
            Col("measured (median)"), Col("roofline"), Col("ratio"), Col("bound", "left", 2), Col("achieved", drop=5)]
    rows = []
    for c in shown:
        ratio = (fmt_ratio(c.ratio) if c.ratio is not None else "unreliable" if not c.roofline_reliable
                 else "unpriced")
        ratio = ("≥ " if c.roofline_bound == "lower" and c.ratio is not None else
                 "~" if c.roofline_bound == "inferred" and c.ratio is not None else "") + ratio
        achieved = ""
        if c.flops_fraction_of_peak is not None and c.bound == "compute":
            achieved = f"{pct(c.flops_fraction_of_peak)} of peak FLOP/s"
        elif c.bytes_fraction_of_peak is not None:
            achieved = f"{pct(c.bytes_fraction_of_peak)} of HBM B/s"
        rows.append((e(fmt_name(c.name)), e(c.program), c.category, e(c.named_scope), f"{c.occurrences:,}",
                     f"{c.executions:,}", ms(c.measured_s) + (f" (mean {ms(c.mean_s)})" if c.mean_apart else ""),
                     ms(c.predicted_s), f"[{_ratio_style(c.ratio)}]{ratio}[/]", c.bound, achieved))
    print_fitted(console, cols, rows)
    unpriced = [c for c in report.comparison if not c.priced]
    if unpriced:
        console.print(f"unpriced ({plural(len(unpriced), 'op')}, {ms(sum(c.self_time_s for c in unpriced))} of self "
                      "time): "
                      + ", ".join(f"{e(fmt_name(f'{c.program}/{c.name}' if c.program else c.name))} "
                                  f"({e(c.unpriced_reason)})" for c in unpriced[:5])
                      + _share_of_device(report, unpriced))
    kernels = [c for c in report.comparison if c.priced and c.opcode == "custom-call"]
    if kernels:
        own = sum(c.self_time_s for c in kernels)
        console.print(f"custom kernels priced ({plural(len(kernels), 'op')}, {ms(own)} of self time"
                      f"{_share_of_device(report, kernels)}); lower bounds: "
                      f"{sum(1 for c in kernels if c.roofline_bound == 'lower')}, inferred from shapes (~): "
                      f"{sum(1 for c in kernels if c.roofline_bound == 'inferred')}")


def _share_of_device(report, ops) -> str:
    """Their self time over every op's (a loop's time counts once, in the ops of its body; ops that overlap on
    several streams count each, as in the whole)."""
    whole = sum(s.self_time_s for s in report.stats.op_stats)
    return f", {pct(sum(c.self_time_s for c in ops) / whole)} of the ops' self time" if whole else ""


def _render_step_memory_findings(console: Console, report) -> None:
    s = report.steps
    if s:
        mfu = ", " + e(mfu_text(s, report.roofs))
        roof = (f", roofline sum {ms(s.predicted_s)}" if report.roofs is not None and s.predicted_s
                else ", roofline sum unknown" + ("" if report.roofs is None else " (no op of the step is priced)"))
        unit = {"executions": "per execution" if s.program else "the capture", "window": "the capture window"}.get(
            s.basis, "per device")
        of = f"{e(s.program)}, " if s.program else ""  # "": kernels of no XLA program (an Nsight trace of PyTorch)
        console.print(f"\n[bold]Step[/bold] ({of}{unit}): measured {ms(s.step_time_s)}{roof}{mfu}")
        console.print(f"  compute {ms(s.compute_s)} · communication {ms(s.communication_s)} · copies/layout "
                      f"{ms(s.layout_s)} · host transfers {ms(s.host_s)} · other {ms(s.other_s)} · idle {ms(s.idle_s)}"
                      + (f" · unpriced {ms(s.unpriced_s)}" if s.unpriced_s and report.roofs is not None else ""))
        if s.other_programs:  # other programs' device time inside the step: theirs, not idle
            console.print(f"  other programs in the step: {ms(s.other_programs_s)} (" + " · ".join(
                f"{e(p or 'kernels of no XLA program')} {ms(t)}" for p, t in s.other_programs[:5])
                + (f" · and {len(s.other_programs) - 5} more" if len(s.other_programs) > 5 else "") + ")")
        if s.concurrent_s:
            console.print(f"  at once: {ms(s.concurrent_s)} of the op time above ran alongside other ops (threads, "
                          "streams, collectives beside compute), so the parts exceed the step by it")
        if s.trip_count:
            console.print(f"  its loop runs {s.trip_count} iterations per execution")
    mem = report.memory
    if mem and mem.programs:
        console.print(f"\n[bold]Memory[/bold]: {e(memory_line(mem))} — `rooflens memory` for the buffers")
    console.print(f"\n[bold]Findings[/bold] ({len(report.findings)}, the most time a fix would save first)")
    if not report.findings:
        console.print("  none: every rule passed.")
    colors = {"high": "red", "medium": "yellow", "low": "cyan"}
    for f in report.findings:
        console.print(f"[{colors.get(f.severity, 'white')}]{f.severity.upper()}[/] [bold]{e(f.title)}[/bold] "
                      f"[dim]({f.rule})[/dim]")
        console.print(f"    {e(saving_line(f))}")
        for line in f.evidence:
            console.print(f"    evidence: {e(line)}")
        if f.ops:
            console.print(f"    ops: {e(', '.join(str(o) for o in f.ops))}")
        console.print(f"    cause: {e(f.cause)}")
        console.print(f"    fix: {e(f.fix)}")
