"""The single-file HTML report: one page, no network, all data embedded as JSON and drawn by inline JS.

``build_view`` selects and shapes the Report's numbers for the page (no new analysis happens
here); ``render_html`` fills the template. Strings from the user's program (op and scope names,
paths) only ever reach the page through ``textContent`` in the script, and the embedded JSON has
``<``, ``>`` and ``&`` escaped, so a named scope ``<script>…`` renders as text.
"""

from __future__ import annotations

import json
import statistics
from importlib import resources

import numpy as np

MAX_OPS = 2000
MAX_HLO_EXPLAINED = 150
MAX_TIMELINE_EVENTS = 20000


def _hlo_lines(module, name: str) -> list[str]:
    from rooflens.hlo.explain import explain

    try:
        x = explain(module, name)
    except KeyError:
        return []
    lines = [x.what, f"shape {x.shape} ({x.bytes:,} B, padded {x.padded_bytes:,} B), memory space {x.memory_space}"]
    lines += x.layout + x.details + x.collective + x.sharding + x.source
    lines += [f"operand {o.name}: {o.shape}" for o in x.operands][:8]
    for comp, body in list(x.called.items())[:2]:
        lines.append(f"body {comp}:")
        lines += ["  " + b for b in body[:20]]
    return [str(line) for line in lines if line]


def _timeline(profile, info) -> dict:
    t = profile.table
    if not len(t):
        return {"devices": [], "events": [], "duration": 0, "categories": [], "note": ""}
    note = ""
    if profile.steps:
        durations = [e - s for _, s, e in profile.steps]
        k = durations.index(statistics.median_low(durations))
        num, s0, s1 = profile.steps[k]
        note = f"step {num} (the median step)"
    else:
        s0 = float(t.start_ns.min())
        s1 = float(t.end_ns.max())
        note = "the whole capture (no step annotations)"
    sel = np.flatnonzero((t.start_ns >= s0) & (t.start_ns <= s1))[:MAX_TIMELINE_EVENTS]
    keys = sorted({(int(t.host[i]), int(t.device[i])) for i in sel})
    lane = {k: n for n, k in enumerate(keys)}
    events, cats = [], set()
    for i in sel:
        program, name = t.programs[t.program[i]], t.names[t.name[i]]
        oi = info.get((program, name))
        cat = oi.category if oi else "unknown"
        cats.add(cat)
        lane_i = lane[(int(t.host[i]), int(t.device[i]))]
        events.append([lane_i, float(t.start_ns[i] - s0), float(t.dur_ns[i]), name, cat])
    if len(sel) == MAX_TIMELINE_EVENTS:
        note += f"; first {MAX_TIMELINE_EVENTS:,} events"
    return {"devices": [d if len({h for h, _ in keys}) == 1 else f"{h}:{d}" for h, d in keys], "events": events,
            "duration": float(s1 - s0), "categories": sorted(cats), "note": note}


def build_view(report, profile, prediction=None, title: str = "") -> dict:
    """The page's data: header, ops, roofline points, timeline, scopes, findings, memory, prediction."""
    from rooflens.hardware import chip as get_chip

    stats = report.stats
    steps = stats.steps
    st = report.steps
    cards = [["chip", f"{report.chip} ({report.num_devices} device{'s' if report.num_devices != 1 else ''})"],
             ["platform", f"{report.platform} · {report.device_kind}"]]
    if steps:
        cards.append(["step time", f"{steps.mean_s * 1e3:.3g} ± {steps.std_s * 1e3:.2g} ms ({steps.count} steps)"])
    if st:
        cards.append(["roofline step", f"{st.predicted_s * 1e3:.3g} ms"])
        if st.mfu is not None:
            cards.append(["MFU", f"{st.mfu:.1%}"])
        cards.append(["communication", f"{st.communication_s * 1e3:.3g} ms of the step"])
    cards.append(["findings", str(len(report.findings))])
    ordered = sorted(report.comparison, key=lambda c: -c.total_time_s)[:MAX_OPS]
    ops = []
    for n, c in enumerate(ordered):
        module = report.modules.get(c.program)
        ops.append({
            "key": f"{c.program}/{c.name}", "name": c.name, "program": c.program, "category": c.category,
            "scope": c.named_scope, "runs": c.occurrences, "total": c.total_time_s, "measured": c.measured_s,
            "predicted": c.predicted_s, "ratio": c.ratio, "bound": c.bound, "unpriced": c.unpriced_reason,
            "explanation": list(c.explanation),
            "hlo": _hlo_lines(module, c.name) if module is not None and n < MAX_HLO_EXPLAINED else [],
        })
    chip = get_chip(report.chip)
    peaks = report.chip_peaks or chip.peak_flops_per_s
    peak = max(peaks.values()) if peaks else 0.0
    bw = chip.hbm_bytes_per_s or 0.0
    points = [{"key": f"{c.program}/{c.name}", "name": c.name, "category": c.category, "x": c.flops / c.bytes,
               "y": c.achieved_flops_per_s, "time": c.total_time_s}
              for c in ordered if c.priced and c.flops > 0 and c.bytes > 0 and c.achieved_flops_per_s > 0]
    label = (f"{report.chip}: peak {peak:.3g} FLOP/s, memory {bw:.3g} B/s, ridge at {peak / bw:.3g} FLOP/B"
             if peak and bw else "")
    expected = [{"name": c.name, "measured": c.measured_s, "predicted": c.predicted_s, "ratio": c.ratio}
                for c in ordered[:15]]
    findings = []
    programs = {c.name: c.program for c in report.comparison}
    for f in report.findings:
        findings.append({**f.to_dict(), "program": programs.get(f.ops[0], "") if f.ops else ""})
    memory = None
    mem = report.memory or {}
    if mem.get("programs"):
        main = max(mem["programs"], key=lambda p: p["peak_bytes"])
        ratio = mem.get("peak_over_state")
        memory = {
            "summary": (f"{main['program']}: compiled peak {main['peak_bytes'] / 1e6:.4g} MB per device, "
                        f"holding {main['state_bytes'] / 1e6:.4g} MB of inputs and outputs"
                        + (f" ({ratio:.2f}×)" if ratio else "")
                        + (f"; live device memory up to {mem['live_peak_bytes'] / 1e6:.4g} MB"
                           if mem.get("live_peak_bytes") else "")),
            "buffers": [{"name": b["name"], "shape": b["shape"], "bytes": b["bytes"], "scope": b["named_scope"]}
                        for b in main["peak_buffers"]],
        }
    pred = None
    if prediction is not None:
        pred = {"summary": f"predicted on {prediction.chip}: {prediction.time_s * 1e3:.4g} ms per step per device "
                           f"({prediction.source})",
                "ops": [{"name": o.name, "category": o.category, "t": o.total_s, "bound": o.bound}
                        for o in prediction.top(15)]}
    return {
        "header": {"title": title or f"rooflens: {st.program if st else 'profile'}",
                   "subtitle": ", ".join(profile.sources), "cards": cards},
        "categories": [[k, v] for k, v in list(stats.by_category_s.items())[:12]],
        "scopes": [[k, v] for k, v in list(stats.by_scope_prefix_s.items())[:14]],
        "ops": ops, "roofline": {"points": points, "peak": peak, "bandwidth": bw,
                                 "ridge": (peak / bw) if peak and bw else 1.0, "label": label},
        "expected": expected, "timeline": _timeline(profile, profile.op_info), "findings": findings,
        "memory": memory, "prediction": pred,
        "footer": "Made by rooflens. Times are per device; ratios are measured ÷ roofline.",
    }


def render_html(view: dict) -> str:
    import jinja2

    text = (resources.files("rooflens.report") / "templates" / "report.html.j2").read_text()
    data = json.dumps(view, default=float).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return jinja2.Template(text, autoescape=True).render(data_json=jinja2.utils.markupsafe.Markup(data))
