"""Terminal tables that give up other columns before names.

A reader scans a table for an op's name; at 100 columns rich would otherwise shrink every column
alike and cut each name to ``input_…`` or ``all-reduc…``. :func:`fitted_table` keeps the name columns
whole: it leaves out the least important columns first (each column says how willing it is to go)
until the table fits the console, names the ones left out under the table, and only then lets a name
wrap onto a second line (folded, never cut with an ellipsis).
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table


@dataclass(frozen=True)
class Col:
    """One column. ``drop``: 0 for a column that always stays (the name, the figure the table is about);
    higher numbers go first when the console is too narrow. ``name``: a name column (kept whole, folded
    rather than cut when nothing else can go)."""

    header: str
    justify: str = "right"
    drop: int = 0
    name: bool = False


def _build(cols: list[Col], rows: list[tuple], keep: list[int], title: str | None, fold: bool) -> Table:
    table = Table(title=title, title_justify="left")
    for i in keep:
        c = cols[i]
        if c.name:
            table.add_column(c.header, justify=c.justify, overflow="fold" if fold else "ellipsis",
                             no_wrap=not fold, min_width=min(len(c.header), 8))
        else:
            table.add_column(c.header, justify=c.justify, no_wrap=True)
    for r in rows:
        table.add_row(*(r[i] for i in keep))
    return table


def _width(console: Console, table: Table) -> int:
    # measured unclamped: Measurement.get clamps to the options' width, which would hide the overflow
    return Measurement.get(console, console.options.update(max_width=1 << 20), table).maximum


def fitted_table(console: Console, cols: list[Col], rows: list[tuple],
                 title: str | None = None) -> tuple[Table, list[str]]:
    """The table for ``rows`` (one cell per column of ``cols``) at this console's width, and the
    headers of the columns left out to fit it (say them: the reader should know what is missing)."""
    keep = list(range(len(cols)))
    width = console.width
    table = _build(cols, rows, keep, title, fold=False)
    order = sorted((i for i, c in enumerate(cols) if c.drop > 0), key=lambda i: (-cols[i].drop, -i))
    dropped: list[str] = []
    for i in order:
        if _width(console, table) <= width:
            break
        keep.remove(i)
        dropped.append(cols[i].header)
        table = _build(cols, rows, keep, title, fold=False)
    if _width(console, table) > width:  # still too wide: names fold onto a second line, whole
        table = _build(cols, rows, keep, title, fold=True)
    return table, dropped


def print_fitted(console: Console, cols: list[Col], rows: list[tuple], title: str | None = None) -> None:
    """Print :func:`fitted_table` and, under it, which columns this width left out."""
    table, dropped = fitted_table(console, cols, rows, title)
    console.print(table)
    if dropped:
        console.print(f"[dim]left out at {console.width} columns: {', '.join(dropped)} (a wider terminal, or "
                      "--json, shows them)[/dim]")
