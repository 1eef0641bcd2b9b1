"""One page per result type, and the one Python call that writes it: ``rl.to_html(obj, path)``.

A :class:`Report`, :class:`Diff` and :class:`Prediction` have their own interactive page
(:mod:`rooflens.report.html`, :mod:`rooflens.report.prediction_html`); a :class:`CheckResult` and a
:class:`MemorySummary` are small enough to be plain HTML with no script. Everything shown is
already on the objects: these functions lay it out and compute nothing.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

from rooflens.analysis.budget import CheckResult
from rooflens.analysis.diff import Diff
from rooflens.analysis.report import Report
from rooflens.cost import Prediction
from rooflens.errors import RooflensError, existing
from rooflens.memory.summary import MemorySummary
from rooflens.report.text import memory_line
from rooflens.units import fmt_bytes

#: the result types that have a page (and a notebook display)
TYPES = (Report, Diff, Prediction, CheckResult, MemorySummary)

FONT = "font:13px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#1d2330"
CELL = "border-collapse:collapse;font-size:12px;margin:4px 0"
TD = "text-align:left;padding:3px 8px;border-bottom:1px solid #e4e7ec;white-space:nowrap"
TDN = TD.replace("text-align:left", "text-align:right;font-variant-numeric:tabular-nums")


def text(s) -> str:
    """User text as an HTML text node (``&``, ``<``, ``>`` escaped; quotes may stay)."""
    return html.escape(str(s), quote=False)


def table(header: list[str], rows: list[list[str]], numeric: set[int] = frozenset()) -> str:
    """A plain table with inline styles only (nothing that could style the page around it)."""
    th = "".join(f'<th style="{TDN if i in numeric else TD};background:#f8f9fb">{text(h)}</th>'
                 for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(f'<td style="{TDN if i in numeric else TD}">{text(c)}</td>'
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f'<table style="{CELL}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def check_fragment(result: CheckResult) -> str:
    """A CheckResult: its verdict sentence and one row per budget."""
    colour = "#079455" if result.ok else "#d92d20"
    rows = [["ok" if c.ok else "VIOLATED", c.budget, "not measured" if c.measured is None else f"{c.measured:.4g}",
             f"{'>=' if c.budget.rsplit('.', 1)[-1].startswith('min_') else '<='} {c.limit:.4g}", c.detail]
            for c in result.checks]
    source = f' <span style="color:#667085">({text(result.source)})</span>' if result.source else ""
    return (f'<div class="rooflens-check" style="{FONT}"><div style="font-weight:600;color:{colour}">'
            f"{text(result.message())}</div>{source}"
            + table(["verdict", "budget", "measured", "limit", "detail"], rows, {2, 3}) + "</div>")


def _sparkline_svg(values: list[float], width: int = 480, height: int = 60) -> str:
    """Live bytes over the schedule as an inline SVG polyline (no script)."""
    if len(values) < 2:
        return ""
    top = max(values) or 1.0
    step = width / (len(values) - 1)
    pts = " ".join(f"{i * step:.1f},{height - v / top * (height - 2):.1f}" for i, v in enumerate(values))
    return (f'<svg width="{width}" height="{height}" role="img" aria-label="live bytes over the schedule">'
            f'<polyline points="{pts}" fill="none" stroke="#2e90fa" stroke-width="1.5"/></svg>')


def memory_fragment(mem: MemorySummary) -> str:
    """A MemorySummary: each program's compiled memory, the buffers live at its peak, live snapshots."""
    parts = [f'<div class="rooflens-memory" style="{FONT}">']
    if mem.main is not None:
        parts.append(f'<div style="font-weight:600">{text(memory_line(mem))}</div>')
    for p in mem.programs:
        parts.append(f"<div>{text(p.program)}: arguments {fmt_bytes(p.argument_bytes)}, outputs "
                     f"{fmt_bytes(p.output_bytes)}, aliased {fmt_bytes(p.alias_bytes)}, XLA's temp buffer "
                     f"{fmt_bytes(p.temp_bytes)} → peak {fmt_bytes(p.peak_bytes)}"
                     + (f"; tiling padding wastes {fmt_bytes(p.padding_waste_bytes)}" if p.padding_waste_bytes
                        else "") + "</div>")
        if p.timeline is not None:
            parts.append(_sparkline_svg([q.live_bytes for q in p.timeline.points]))
        if p.peak_buffers:
            parts.append(table(["value", "shape", "bytes", "scope"],
                               [[b.name, b.shape, fmt_bytes(b.bytes), b.named_scope] for b in p.peak_buffers], {2}))
    for s in mem.snapshots:
        parts.append(f"<div>live device memory at {text(s.label)}: {fmt_bytes(s.total_bytes)}</div>")
    if not mem:
        parts.append('<div style="color:#667085">No memory data.</div>')
    return "".join(parts) + "</div>"


def _document(title: str, body: str) -> str:
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{text(title)}</title></head>'
            f'<body style="margin:20px" data-rendered="yes">{body}</body></html>\n')


def page_html(obj, prediction: Prediction | None = None, title: str = "") -> str:
    """The whole single-file page of a Report (with, optionally, a prediction of the same step on
    another chip), a Diff, a Prediction, a CheckResult or a MemorySummary."""
    if isinstance(obj, Report):
        from rooflens.report.html import render_html

        return render_html(obj, prediction=prediction, title=title)
    if isinstance(obj, Diff):
        from rooflens.report.html import render_diff_html

        return render_diff_html(obj, title=title)
    if isinstance(obj, Prediction):
        from rooflens.report.prediction_html import render_prediction_html

        return render_prediction_html(obj, title=title)
    if isinstance(obj, CheckResult):
        return _document(title or "rooflens budgets", check_fragment(obj))
    if isinstance(obj, MemorySummary):
        return _document(title or "rooflens memory", memory_fragment(obj))
    raise RooflensError(f"rooflens has no HTML page for a {type(obj).__name__}; give a Report, Diff, Prediction, "
                        "CheckResult or MemorySummary.")


def to_html(obj, path: str | os.PathLike | None = None, overwrite: bool = False,
            prediction: Prediction | None = None, title: str = "") -> str:
    """The HTML page of ``obj`` (Report, Diff, Prediction, CheckResult, MemorySummary) as a string;
    with ``path``, also written there (an existing file only with ``overwrite=True``)."""
    page = page_html(obj, prediction=prediction, title=title)
    if path is not None:
        p = Path(path)
        if p.is_dir():
            raise RooflensError(f"{p} is a directory; give the HTML file's path.")
        if p.exists() and not overwrite:
            raise RooflensError(f"{p} exists; pass overwrite=True to replace it.")
        existing(p.parent if str(p.parent) else ".", "the directory of ")
        try:
            p.write_text(page, encoding="utf-8")
        except OSError as e:
            raise RooflensError(f"cannot write {p}: {e.strerror or e}.") from None
    return page
