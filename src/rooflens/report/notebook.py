"""Reports in Jupyter and Colab: each result type displays as rich HTML in a cell.

A cell shows a short plain-HTML summary (title, the key numbers, the findings) followed by the
interactive page of :mod:`rooflens.report.pages` inside an ``<iframe srcdoc>``: the page's styles,
element ids and script stay inside its own document, so several reports in one notebook neither
collide nor restyle the notebook, and nothing is fetched from the network. The summary carries
inline styles only. Everything shown is on the typed objects already.

:func:`register` installs the display on an IPython shell through its display formatters (the
analysis types never import this layer); ``import rooflens`` calls it when IPython is running,
and ``%load_ext rooflens`` does too.
"""

from __future__ import annotations

import html

from rooflens.analysis.budget import CheckResult
from rooflens.analysis.diff import Diff
from rooflens.analysis.report import Report
from rooflens.cost import Prediction
from rooflens.memory.summary import MemorySummary
from rooflens.report.pages import FONT, TYPES, check_fragment, memory_fragment, page_html, text
from rooflens.report.text import saving_line
from rooflens.units import fmt_ratio, fmt_seconds, plural

#: the interactive page's height in a cell (it scrolls inside); wide enough for two charts side by side
FRAME_HEIGHT_PX = 720
SEVERITY_COLOURS = {"high": "#d92d20", "medium": "#dc6803", "low": "#2e90fa"}


def frame(page: str, label: str) -> str:
    """``page`` in a sandboxed iframe (scripts run; no access to the notebook page)."""
    return (f'<iframe srcdoc="{html.escape(page, quote=True)}" sandbox="allow-scripts" title="{html.escape(label)}" '
            f'style="width:100%;height:{FRAME_HEIGHT_PX}px;border:1px solid #e4e7ec;border-radius:6px"></iframe>')


def _cards(cards: list[list[str]]) -> str:
    return '<div style="display:flex;flex-wrap:wrap;gap:6px;margin:6px 0">' + "".join(
        f'<div style="background:#f8f9fb;border:1px solid #e4e7ec;border-radius:6px;padding:4px 10px">'
        f'<div style="color:#667085;font-size:11px">{text(k)}</div><div style="font-weight:600">{text(v)}</div></div>'
        for k, v in cards) + "</div>"


def _finding(f) -> str:
    colour = SEVERITY_COLOURS.get(f.severity, "#667085")
    where = f" · {text(', '.join(str(o) for o in f.ops[:4]))}" if f.ops else ""
    evidence = "".join(f"<li>{text(e)}</li>" for e in f.evidence)
    return (f'<details class="rooflens-finding" style="border-left:4px solid {colour};padding:2px 10px;margin:4px 0">'
            f'<summary><b>{text(f.title)}</b> <span style="color:#667085;font-size:12px">{text(f.severity)} · '
            f"{text(f.rule)}{where}</span></summary><div>{text(saving_line(f))}</div>"
            f'<ul style="margin:2px 0 2px 18px;padding:0">{evidence}</ul>'
            f"<div><i>cause</i>: {text(f.cause)}</div><div><i>fix</i>: {text(f.fix)}</div></details>")


def report_cell(report: Report, prediction: Prediction | None = None) -> str:
    from rooflens.report.html import fill_template, page_data

    data = page_data(report, prediction=prediction)
    head = data["header"]
    findings = "".join(_finding(f) for f in report.findings) or '<div style="color:#667085">No findings.</div>'
    summary = (f'<div style="font-size:16px;font-weight:600">{text(head["title"])}</div>'
               f'<div style="color:#667085">{text(head["subtitle"])}</div>{_cards(head["cards"])}'
               f'<div style="font-weight:600;margin-top:6px">Findings</div>{findings}')
    return cell(summary, fill_template("report.html.j2", data), "rooflens report")


def diff_cell(diff: Diff) -> str:
    s = diff.steps
    ratio = f" ({fmt_ratio(s.ratio)})" if s.ratio else ""
    summary = (f'<div style="font-size:16px;font-weight:600">rooflens diff: {text(diff.label_a)} → '
               f"{text(diff.label_b)}</div>"
               + _cards([["step time", f"{fmt_seconds(s.step_time_a_s)} → {fmt_seconds(s.step_time_b_s)}{ratio}"],
                         ["ops", f"{len(diff.ops)} matched, {len(diff.appeared)} appeared, "
                                 f"{len(diff.disappeared)} disappeared"]]))
    return cell(summary, page_html(diff), "rooflens diff")


def prediction_cell(prediction: Prediction) -> str:
    from rooflens.report.html import fill_template
    from rooflens.report.prediction_html import prediction_data

    data = prediction_data(prediction)
    head = data["header"]
    summary = (f'<div style="font-size:16px;font-weight:600">{text(head["title"])}</div>'
               f'<div style="color:#667085">{text(head["subtitle"])}</div>{_cards(head["cards"])}')
    return cell(summary, fill_template("prediction.html.j2", data), "rooflens prediction")


def cell(summary: str, page: str, label: str) -> str:
    """The summary, then the interactive page in its frame."""
    return (f'<div class="rooflens-cell" style="{FONT}">{summary}'
            f'<details open><summary style="color:#667085">{text(label)}: charts, op table, detail</summary>'
            f"{frame(page, label)}</details></div>")


def cell_html(obj) -> str:
    """What a notebook cell shows for ``obj`` (one of :data:`rooflens.report.pages.TYPES`)."""
    if isinstance(obj, Report):
        return report_cell(obj)
    if isinstance(obj, Diff):
        return diff_cell(obj)
    if isinstance(obj, Prediction):
        return prediction_cell(obj)
    if isinstance(obj, CheckResult):
        return check_fragment(obj)
    if isinstance(obj, MemorySummary):
        return memory_fragment(obj)
    raise TypeError(f"no notebook display for a {type(obj).__name__}")


def short_text(obj) -> str:
    """A one-line plain-text stand-in for the dataclass repr (a Report's repr runs to megabytes)."""
    if isinstance(obj, Report):
        step = f", step {fmt_seconds(obj.stats.steps.mean_s)}" if obj.stats.steps else ""
        return (f"<rooflens Report: {', '.join(obj.sources) or 'profile'} on {obj.chip or 'no roofline'}"
                f"{step}, {plural(len(obj.findings), 'finding')}>")
    if isinstance(obj, Diff):
        return f"<rooflens Diff: {obj.label_a} → {obj.label_b}, {plural(len(obj.ops), 'matched op')}>"
    if isinstance(obj, Prediction):
        return f"<rooflens Prediction: {obj.module} on {obj.chip}, {fmt_seconds(obj.time_s)} per step per device>"
    if isinstance(obj, CheckResult):
        return f"<rooflens CheckResult: {obj.message()}>"
    return (f"<rooflens MemorySummary: {plural(len(obj.programs), 'program')}, "
            f"{plural(len(obj.snapshots), 'snapshot')}>")


def register(shell=None) -> bool:
    """Display the result types as HTML in ``shell`` (default: the running IPython); False when
    there is none. Idempotent."""
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        shell = get_ipython()
    formatters = getattr(getattr(shell, "display_formatter", None), "formatters", None)
    if not formatters:
        return False
    for cls in TYPES:
        formatters["text/html"].for_type(cls, cell_html)
        formatters["text/plain"].for_type(cls, lambda obj, p, cycle: p.text(short_text(obj)))
    return True
