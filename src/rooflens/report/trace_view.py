"""Terminal view of a measured profile: top ops, time by scope and category, steps, devices."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape as e
from rich.table import Table

from rooflens.report.cost_view import ms


def render_op_stats(console: Console, stats, source: str, top: int = 20) -> None:
    console.print(f"[bold]{e(source)}[/bold]: {stats.platform} ({e(stats.device_kind)}), "
                  f"{len(stats.devices)} device(s), {sum(d.events for d in stats.devices):,} op events")
    table = Table(title=f"Top {min(top, len(stats.op_stats))} of {len(stats.op_stats)} HLO ops by self time "
                        "(summed over devices)", title_justify="left")
    for col in ("op", "program", "category", "scope", "occurrences", "total", "self", "average", "% device"):
        table.add_column(col, justify="left" if col in ("op", "program", "category", "scope") else "right")
    for s in stats.op_stats[:top]:
        table.add_row(e(s.name), e(s.program), s.category, e(s.named_scope), f"{s.occurrences:,}", ms(s.total_time_s),
                      ms(s.self_time_s), ms(s.avg_time_s), f"{s.pct_device_time:.1f}%")
    console.print(table)
    for title, totals in (("by category", stats.by_category_s), ("by program", stats.by_program_s),
                          ("by named scope", stats.by_scope_prefix_s)):
        items = list(totals.items())[:10]
        if items:
            console.print(f"{title}: " + ", ".join(f"{e(k)} {ms(v)}" for k, v in items))
    if stats.steps:
        s = stats.steps
        console.print(f"steps: {s.count}, mean {ms(s.mean_s)} ± {ms(s.std_s)} (min {ms(s.min_s)}, max {ms(s.max_s)})")
    dev = Table(title="Devices", title_justify="left")
    for col in ("device", "host", "events", "busy", "idle", "window", "largest gap", "between"):
        dev.add_column(col, justify="left" if col in ("host", "between") else "right")
    for d in stats.devices:
        g = d.largest_gaps[0] if d.largest_gaps else None
        dev.add_row(str(d.device), e(d.host), f"{d.events:,}", ms(d.busy_s), ms(d.idle_s), ms(d.window_s),
                    ms(g.duration_s) if g else "", e(f"{g.before} → {g.after} at {ms(g.start_s)}") if g else "")
    console.print(dev)
    comp = stats.in_window.get("compilations") or []
    if comp:
        total = sum(c["duration_s"] for c in comp)
        wheres = sorted({c["where"] for c in comp if c["where"]})
        console.print(f"[bold]{len(comp)} compilation(s) inside the traced window[/bold] ({ms(total)}), from "
                      f"{e(', '.join(wheres[:3]) or 'an unknown place')}")
        for m in (stats.in_window.get("cache_misses") or [])[:3]:
            console.print(f"  {e(m.splitlines()[-1].strip())}")
    transfers = stats.in_window.get("transfers") or []
    if transfers:
        kinds = sorted({t.split(":")[0] for t in transfers})
        console.print(f"[bold]{len(transfers)} implicit {'/'.join(kinds)} transfer(s) inside the traced window[/bold]"
                      f", e.g. {e(transfers[0])}")
    for n in stats.notes:
        console.print(f"[dim]note: {e(n)}[/dim]")
