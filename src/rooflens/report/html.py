"""The single-file HTML report: one page, no network, all data embedded as JSON and drawn by inline JS.

``page_data`` lays out a :class:`Report`'s numbers for the page (it computes nothing: the roofs,
the timeline and each op's explained HLO are in the Report); ``render_html`` fills the template.
Strings from the user's program (op and scope names, paths) only ever reach the page through
``textContent`` in the script, and the embedded JSON has ``<``, ``>`` and ``&`` escaped, so a
named scope ``<script>…`` renders as text.
"""

from __future__ import annotations

import json
from importlib import resources

from rooflens.report.text import memory_line, mfu_text, ranked_programs, saving_line
from rooflens.units import fmt_number, fmt_seconds, fmt_si, plural

MAX_OPS = 2000


def _embed(data: dict) -> str:
    return json.dumps(data, default=float).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def fill_template(template: str, data: dict) -> str:
    """A template of report/templates filled with ``data``, embedded as JSON the page's script reads."""
    import jinja2

    folder = resources.files("rooflens.report") / "templates"
    text = (folder / template).read_text()
    units_js = (folder / "units.js").read_text()  # the one place the pages format quantities
    return jinja2.Template(text, autoescape=True).render(data_json=jinja2.utils.markupsafe.Markup(_embed(data)),
                                                         units_js=jinja2.utils.markupsafe.Markup(units_js))


def page_data(report, prediction=None, title: str = "") -> dict:
    """The page's data: header, ops, roofline points, timeline, scopes, findings, memory, prediction."""
    stats = report.stats
    steps = stats.steps
    st = report.steps
    roofs = report.roofs
    cards = [["chip", f"{report.chip or 'unknown'} ({report.num_devices} device"
                      f"{'s' if report.num_devices != 1 else ''})"],
             ["platform", f"{report.platform} · {report.device_kind}"
                          + (f" · a {report.framework} trace" if report.framework else "")]]
    if report.chip_mismatch:
        cards.append(["what-if", report.chip_mismatch])
    if roofs is None:
        cards.append(["roofline", f"unknown: {report.chip_reason}"])
    elif report.calibration is not None:  # a CPU's calibration: when it was made, its spread, recorded or not
        cards.append(["calibration", report.chip_reason])
    if steps:
        cards.append(["step time", f"{fmt_seconds(steps.mean_s)} ± {fmt_seconds(steps.std_s, digits=2)} "
                                   f"({plural(steps.count, 'step')}; mean ± standard deviation)"])
    if st:
        if roofs is not None:
            cards.append(["roofline step", fmt_seconds(st.predicted_s) if st.predicted_s else
                          "unknown (no op of the step is priced)"])
        mfu = mfu_text(st, roofs)
        cards.append(["MFU", mfu.removeprefix("MFU ")])
        cards.append(["communication", f"{fmt_seconds(st.communication_s)} of the step"])
    cards.append(["findings", str(len(report.findings))])
    ordered = sorted(report.comparison, key=lambda c: -c.total_time_s)[:MAX_OPS]
    ops = [{"key": f"{c.program}/{c.name}", "name": c.name, "program": c.program, "category": c.category,
            "scope": c.named_scope, "runs": c.runs, "events": c.occurrences,
            "executions": c.executions, "total": c.total_time_s, "measured": c.measured_s, "mean": c.mean_s,
            "mean_apart": c.mean_apart,
            "predicted": c.predicted_s, "ratio": c.ratio, "bound": c.bound, "unpriced": c.unpriced_reason,
            "reliable": c.roofline_reliable, "roofline_bound": c.roofline_bound, "roofline_note": c.roofline_note,
            "explanation": list(c.explanation), "hlo": list(c.hlo)} for c in ordered]
    peak = roofs.mfu_peak_flops_per_s if roofs else 0.0
    bw = roofs.hbm_bytes_per_s if roofs else 0.0
    ridge = roofs.ridge_flops_per_byte if roofs else None
    points = [{"key": f"{c.program}/{c.name}", "name": f"{c.program}/{c.name}", "category": c.category,
               "x": c.flops / c.bytes, "note": c.roofline_note if not c.roofline_reliable else "",
               "y": c.achieved_flops_per_s, "time": c.total_time_s}
              for c in ordered if c.priced and c.flops > 0 and c.bytes > 0 and c.achieved_flops_per_s > 0]
    label = (f"{roofs.chip}: peak {fmt_si(peak, 'FLOP/s')}, memory {fmt_si(bw, 'B/s')}, ridge at "
             f"{fmt_number(ridge)} FLOP/B" if peak and ridge else "")
    several = len({c.program for c in ordered[:15]}) > 1  # the same name may be an op of two programs
    expected = [{"name": f"{c.program}/{c.name}" if several else c.name, "key": f"{c.program}/{c.name}",
                 "program": c.program, "measured": c.measured_s, "predicted": c.predicted_s, "ratio": c.ratio,
                 "reliable": c.roofline_reliable}
                for c in ordered[:15]]
    findings = [{**f.to_dict(), "saving": saving_line(f)} for f in report.findings]
    memory = None
    mem = report.memory
    if mem and mem.programs:
        memory = {"summary": memory_line(mem),
                  "buffers": [{"name": b.name, "shape": b.shape, "bytes": b.bytes, "scope": b.named_scope}
                              for b in mem.main.peak_buffers],
                  **_memory_timelines(mem)}
    pred = None
    if prediction is not None:
        pred = {"summary": f"predicted on {prediction.chip}: {fmt_seconds(prediction.time_s)} per step per device "
                           f"({prediction.source})",
                "ops": [{"name": o.name, "category": o.category, "t": o.total_s, "bound": o.bound}
                        for o in prediction.top(15)]}
    # the step program, else what the trace is (another framework's kernels belong to no program)
    subject = st.program if st and st.program else f"{report.framework} trace" if report.framework else "profile"
    tl = report.timeline
    timeline = {"devices": list(tl.lanes) if tl else [], "duration": tl.duration_s if tl else 0.0,
                "events": [[o.lane, o.start_s, o.duration_s, o.name, o.category] for o in tl.ops] if tl else [],
                "categories": list(tl.categories) if tl else [], "note": tl.note if tl else ""}
    return {
        "header": {"title": title or f"rooflens: {subject}",
                   "subtitle": ", ".join(report.sources), "cards": cards},
        # per device and per step, as the cards and the step say (the Report's figures; the sums over
        # devices and steps are in the op table's "total")
        "per_step_label": report.per_step_label,
        "ops_label": "HLO ops" if any(c.program for c in report.comparison) else "Kernels",
        "categories": [[k, v] for k, v in list(report.by_category_per_step_s.items())[:12]],
        "scopes": [[k, v] for k, v in list(report.by_scope_per_step_s.items())[:14]],
        "ops": ops, "roofline": {"points": points, "peak": peak, "bandwidth": bw, "ridge": ridge or 1.0,
                                 "label": label},
        "expected": expected, "timeline": timeline, "findings": findings, "memory": memory, "prediction": pred,
        "plan": report.plan.to_dict() if getattr(report, "plan", None) is not None else None,
        "graphs": {k: _graph(g) for k, g in report.graphs.items()},
        "hosts": _hosts(stats.host_steps),
        "footer": (f"Made by rooflens. Time by category and by named scope: {report.per_step_label}. Expected vs "
                   "observed, measured and roofline: per execution on one device. The op table's total: summed over "
                   "devices and executions. Ratios are measured ÷ roofline. Bytes in decimal units (1 kB = 1000 B)."),
    }


def _hosts(hs) -> dict | None:
    """Several hosts: the host × step table as the heatmap draws it (rooflens.trace.stats.HostSteps)."""
    if hs is None:
        return None
    return {"hosts": list(hs.hosts), "steps": list(hs.steps), "times": [list(r) for r in hs.times_s],
            "skew": list(hs.skew_s), "collective": list(hs.collective_s), "other": list(hs.other_s)}


def _graph(g) -> dict:
    """An op's laid-out HLO graph as the page draws it (rooflens.hlo.graph.OpGraph)."""
    return {"op": g.op, "opcode": g.opcode, "computation": g.computation, "body": g.body, "width": g.width,
            "height": g.height, "cluster": list(g.cluster) if g.cluster else None, "notes": list(g.notes),
            "nodes": [{"id": n.id, "name": n.name, "opcode": n.opcode, "shape": n.shape + n.layout, "role": n.role,
                       "detail": n.detail, "target": n.target, "members": list(n.members), "x": n.x, "y": n.y,
                       "w": n.w, "h": n.h} for n in g.nodes],
            "edges": [{"source": e.source, "target": e.target, "operand": e.operand,
                       "points": [list(p) for p in e.points]} for e in g.edges]}


def _memory_timelines(mem) -> dict:
    """The programs' memory charts: the step program and the largest drawn, the small ones in one line."""
    shown, _, small = ranked_programs([p for p in mem.programs if p.timeline is not None], mem.main_program)
    return {"timelines": [_memory_timeline(p.timeline) for p in shown], "small_programs": small}


def _memory_timeline(tl) -> dict:
    """One program's live bytes over its schedule, as the chart draws it (stacked by kind)."""
    return {"program": tl.program, "positions": tl.positions, "peak_position": tl.peak_position,
            "peak_bytes": tl.peak_bytes, "peak_instruction": tl.peak_instruction, "state_bytes": tl.state_bytes,
            "note": tl.note, "kinds": ["parameters", "outputs", "activations", "temporaries"],
            "points": [[p.position, p.parameters_bytes, p.outputs_bytes, p.activations_bytes, p.temporaries_bytes,
                        p.live_bytes, p.instruction] for p in tl.points],
            "peak_buffers": [{"name": b.name, "bytes": b.bytes, "kind": b.kind, "scope": b.named_scope,
                              "live": f"{b.start}–{b.end}"} for b in tl.peak_buffers],
            "measured": [{"label": m.label, "position": m.position, "bytes": m.live_bytes} for m in tl.measured]}


def render_html(report, prediction=None, title: str = "") -> str:
    """The whole page for ``report`` (and, optionally, a prediction of the same step on another chip)."""
    return fill_template("report.html.j2", page_data(report, prediction=prediction, title=title))


def write_html(report, path, prediction=None, title: str = "") -> str:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(render_html(report, prediction=prediction, title=title))
    return str(path)


def render_diff_html(diff, title: str = "") -> str:
    """The page of a :class:`rooflens.analysis.diff.Diff`: steps, categories, ops, appeared/disappeared."""
    return fill_template("diff.html.j2", {"title": title or f"rooflens diff: {diff.label_a} → {diff.label_b}",
                                  **diff.to_json()})
