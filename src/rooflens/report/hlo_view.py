"""Terminal views of ``rooflens hlo``: a module summary and one op explained."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from rooflens.hlo.explain import HloSummary, OpExplanation
from rooflens.report.text import e as escape
from rooflens.units import fmt_bytes as _b
from rooflens.units import plural


def render_summary(console: Console, s: HloSummary, source: str = "") -> None:
    title = f"[bold]{escape(s.module)}[/bold]" + (f"  [dim]{escape(source)}[/dim]" if source else "")
    console.print(title)
    console.print(
        f"ENTRY {escape(s.entry)} · {s.num_computations} computations · {s.num_instructions} instructions · "
        f"{s.num_top_level_ops} ops outside fusions · {plural(s.num_devices, 'device')}"
        + (" · scheduled" if s.is_scheduled else "")
    )
    t = Table(title="Ops by category", title_justify="left", show_edge=False)
    t.add_column("category")
    t.add_column("ops", justify="right")
    for cat, n in s.ops_by_category.items():
        t.add_row(cat, str(n))
    console.print(t)
    if s.collectives:
        t = Table(title="Collectives", title_justify="left", show_edge=False)
        for col in ("op", "kind", "bytes/device", "groups×size", "stride", "who talks"):
            t.add_column(col, justify="right" if col in ("bytes/device", "stride") else "left", overflow="fold")
        for c in s.collectives:
            shape = f"{c.num_groups}×{c.group_size}" if c.group_size else "?"
            stride = "" if c.stride is None else str(c.stride)
            t.add_row(escape(c.name), c.kind, _b(c.bytes), shape, stride, escape(c.groups_preview))
        console.print(t)
    if s.largest_buffers:
        t = Table(title="Largest buffers", title_justify="left", show_edge=False)
        for col in ("op", "shape", "logical", "padded", "space"):
            t.add_column(col, justify="right" if col in ("logical", "padded", "space") else "left", overflow="fold")
        for b in s.largest_buffers:
            pad = _b(b.padded_bytes)
            if b.padded_bytes > b.bytes:
                pad = f"[yellow]{pad}[/yellow]"
            t.add_row(escape(b.name), escape(b.shape), _b(b.bytes), pad, f"S({b.memory_space})")
        console.print(t)
    if s.padding_waste_bytes:
        console.print(f"Tiling padding wastes {_b(s.padding_waste_bytes)} over the ops above and the rest.")
    if s.warnings:
        console.print(f"[yellow]{plural(len(s.warnings), 'warning')}:[/yellow]")
        for w in s.warnings:
            console.print(f"  [yellow]•[/yellow] {escape(w)}")
    else:
        console.print("[green]No warnings: every line was understood.[/green]")


def _section(console: Console, title: str, lines: list[str]) -> None:
    if not lines:
        return
    console.print(f"[bold]{title}[/bold]")
    for line in lines:
        console.print(f"  {escape(line)}")


def render_explanation(console: Console, e: OpExplanation) -> None:
    console.print(f"[bold cyan]{escape(e.name)}[/bold cyan] in {escape(e.computation)} · {e.category}")
    console.print(f"  {escape(e.text[:400])}{'…' if len(e.text) > 400 else ''}", style="dim")
    _section(console, "What it computes", [e.what])
    out = [f"{e.shape}", f"{_b(e.bytes)} logical, {_b(e.padded_bytes)} in memory"]
    _section(console, "Output", out)
    _section(console, "Layout", e.layout)
    _section(console, "Memory space", [e.memory_space] if e.memory_space else [])
    _section(console, "Details", e.details)
    _section(console, "Inputs", [
        f"{o.name}: {o.shape} ({_b(o.bytes)})" + (f" ← {o.producer}" if o.producer else "") for o in e.operands
    ])
    _section(console, "Used by", [", ".join(e.users[:12]) + (" …" if len(e.users) > 12 else "")] if e.users else [])
    _section(console, "Collective", e.collective)
    _section(console, "Sharding", e.sharding)
    _section(console, "Source", e.source)
    for comp, lines in e.called.items():
        shown = lines[:40] + ([f"… {len(lines) - 40} more lines"] if len(lines) > 40 else [])
        _section(console, f"Called computation {comp}", shown)
    if e.unparsed:
        _section(console, "Kept verbatim (not understood)", [f"{k}={v}" for k, v in e.unparsed.items()])
