"""The single-file HTML page of a :class:`rooflens.cost.Prediction`: a program's roofline on one chip.

Like :mod:`rooflens.report.html` it lays out numbers the Prediction already holds (each op's times,
FLOPs, bytes and arithmetic) and draws them with inline JS: no network, user strings only through
``textContent``.
"""

from __future__ import annotations

from rooflens.report.html import fill_template
from rooflens.units import fmt_bytes, fmt_seconds, fmt_si

MAX_OPS = 2000


def prediction_data(prediction, title: str = "") -> dict:
    """The page's data: header cards, time by category / bound / scope, the ops and their points."""
    p = prediction
    cards = [["chip", f"{p.chip} ({p.num_devices} {p.device_unit}{'s' if p.num_devices != 1 else ''})"],
             ["roofline time", f"{fmt_seconds(p.time_s)} per step per device"],
             ["FLOPs", fmt_si(p.flops, "FLOP")], ["model FLOPs", fmt_si(p.model_flops, "FLOP")],
             ["HBM bytes", fmt_bytes(p.bytes)], ["sent over links", fmt_bytes(p.comm_bytes)],
             ["ops", str(len(p.ops))]]
    ordered = p.top(MAX_OPS)
    ops = [{"name": o.name, "opcode": o.opcode, "category": o.category, "scope": o.named_scope, "count": o.count,
            "flops": o.flops, "bytes": o.bytes, "comm": o.comm_bytes, "math": o.t_math_s, "mem": o.t_mem_s,
            "commt": o.t_comm_s, "pred": o.t_pred_s, "total": o.total_s, "bound": o.bound, "peak": o.peak_key,
            "explanation": list(o.explanation), "members": list(o.members)} for o in ordered]
    points = [{"name": o.name, "category": o.category, "x": o.flops / o.bytes, "y": o.flops / o.t_pred_s,
               "time": o.total_s} for o in ordered if o.flops > 0 and o.bytes > 0 and o.t_pred_s > 0]
    return {
        "header": {"title": title or f"rooflens prediction: {p.module} on {p.chip}", "subtitle": p.source,
                   "cards": cards},
        "categories": [[k, v] for k, v in list(p.time_by_category_s.items())[:12]],
        "bounds": [[k, v] for k, v in p.time_by_bound_s.items()],
        "scopes": [[k, v] for k, v in list(p.time_by_scope_s.items())[:14]],
        "ops": ops, "points": points, "assumptions": list(p.assumptions),
        "footer": "Made by rooflens. Times are per device; each op at the rate its roofline allows.",
    }


def render_prediction_html(prediction, title: str = "") -> str:
    """The whole page for ``prediction``."""
    return fill_template("prediction.html.j2", prediction_data(prediction, title=title))
