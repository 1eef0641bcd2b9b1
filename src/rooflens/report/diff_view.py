"""Terminal views of a Diff (two runs side by side) and of a budget check."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from rooflens.report.tables import Col, print_fitted
from rooflens.report.text import e
from rooflens.units import fmt_percent, fmt_ratio
from rooflens.units import fmt_seconds as ms


def _roof(v: float | None, chip: str | None) -> str:
    """A roofline sum, or ``unknown`` where there is no roofline (never a ``0 s`` for what was not priced)."""
    return ms(v) if chip and v else "unknown"


def _mfu(v: float | None) -> str:
    return "unknown" if v is None else fmt_percent(v)


def _delta(a: float, b: float) -> str:
    if not a:
        return "new" if b else ""
    r = b / a
    style = "green" if r < 0.95 else "red" if r > 1.05 else "dim"
    return f"[{style}]{fmt_ratio(r)}[/]"


def _share_delta(a: float, b: float) -> str:
    d = (b - a) * 100
    style = "green" if d < -0.5 else "red" if d > 0.5 else "dim"
    return f"[{style}]{d:+.1f} pt[/]"


def render_diff(console: Console, d, top: int = 20) -> None:
    s = d.steps
    console.print(f"[bold]A[/bold] {e(d.label_a)} ({e(d.chip_a or 'no roofline')})")
    console.print(f"[bold]B[/bold] {e(d.label_b)} ({e(d.chip_b or 'no roofline')})")
    console.print(f"\n[bold]Step[/bold] (per device): {ms(s.step_time_a_s)} → {ms(s.step_time_b_s)} "
                  f"({_delta(s.step_time_a_s, s.step_time_b_s)}); MFU {_mfu(s.mfu_a)} → {_mfu(s.mfu_b)}; roofline sum "
                  f"{_roof(s.predicted_a_s, d.chip_a)} → {_roof(s.predicted_b_s, d.chip_b)}; program "
                  f"{e(s.program_a)} → {e(s.program_b)}")
    table = Table(title="Time per step and share of the step, by category", title_justify="left")
    for col in ("category", "A", "B", "B/A", "share A", "share B", "Δ share"):
        table.add_column(col, justify="left" if col == "category" else "right")
    for c in d.categories:
        table.add_row(e(c.category), ms(c.time_a_s), ms(c.time_b_s), _delta(c.time_a_s, c.time_b_s),
                      fmt_percent(c.share_a), fmt_percent(c.share_b), _share_delta(c.share_a, c.share_b))
    console.print(table)
    cols = [Col("op (A → B)", "left", name=True), Col("program", "left", 4), Col("category", "left", 3),
            Col("scope", "left", 4), Col("A"),
            Col("B"), Col("B/A"), Col("share A", drop=5), Col("share B", drop=5), Col("median ÷ roofline", drop=2),
            Col("matched by", "left", 6)]
    rows = []
    for o in d.ops[:top]:
        name = o.name_a if o.name_a == o.name_b else f"{o.name_a} → {o.name_b}"
        ratios = " → ".join(fmt_ratio(r) for r in (o.ratio_a, o.ratio_b))
        program = o.program_a if o.program_a == o.program_b else f"{o.program_a} → {o.program_b}"
        rows.append((e(name), e(program), o.category, e(o.named_scope), ms(o.time_a_s), ms(o.time_b_s),
                     _delta(o.time_a_s, o.time_b_s), fmt_percent(o.share_a), fmt_percent(o.share_b), ratios,
                     o.matched_by))
    print_fitted(console, cols, rows, f"Top {min(top, len(d.ops))} of {len(d.ops)} matched ops")
    for title, rows in (("Appeared in B", d.appeared), ("Disappeared from A", d.disappeared)):
        if rows:
            console.print(f"\n[bold]{title}[/bold] ({len(rows)})")
            for r in rows[:top]:
                scope = f", {e(r.named_scope)}" if r.named_scope else ""
                console.print(f"  {e(r.name)} ({e(r.kind)}, {r.category}{scope}): {ms(r.time_s)} per step, "
                              f"{fmt_percent(r.share)} of the step")
    if d.unmatched:
        console.print(f"\n[bold]Not matched[/bold] ({len(d.unmatched)}: the other side runs ops of the same kind, but "
                      "none of this program with this category, scope and shape pattern)")
        for side, r in d.unmatched[:top]:
            scope = f", {e(r.named_scope)}" if r.named_scope else ""
            console.print(f"  {side.upper()}: {e(r.program)}/{e(r.name)} ({e(r.kind)}, {r.category}{scope}, "
                          f"{e(r.shape)}): {ms(r.time_s)} per step")
    for n in d.notes:
        console.print(f"[dim]note: {e(n)}[/dim]")


def render_check(console: Console, result, source: str) -> None:
    console.print(f"[bold]Budgets[/bold] of {e(result.source)} on {e(source)}")
    for c in result.checks:
        line = e(c.line())
        console.print(f"  [green]{line}[/]" if c.ok else f"  [red]{line}[/]")
    if result.ok:
        console.print(f"[green]every budget met ({len(result.checks)} checked)[/]")
    else:
        console.print(f"[red]{e(result.message())}[/]")
