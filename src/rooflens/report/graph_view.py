"""An op's HLO graph (``rooflens.hlo.graph.OpGraph``, already laid out) as a standalone SVG.

It draws what the graph holds (boxes at their positions, edges along their routed paths) and
computes nothing. Every string from the module is escaped, so an op or scope named like markup
stays text.
"""

from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

STYLE = {  # role → (fill, stroke, stroke width, dash)
    "op": ("#eef4ff", "#1570ef", 2.0, ""),
    "dot": ("#d1e9ff", "#1570ef", 2.5, ""),
    "root": ("#ecfdf3", "#079455", 1.5, ""),
    "parameter": ("#f2f4f7", "#98a2b3", 1.0, ""),
    "body": ("#ffffff", "#667085", 1.0, ""),
    "chain": ("#f4f3ff", "#7a5af8", 1.0, ""),
    "operand": ("#ffffff", "#98a2b3", 1.0, "4 3"),
    "user": ("#ffffff", "#98a2b3", 1.0, "4 3"),
}


def render_graph_svg(g) -> str:
    """The whole SVG document for one OpGraph."""
    pad_top = 22 if g.notes else 0
    w, h = max(g.width, 320.0), g.height + pad_top + 8
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0f}" height="{h:.0f}" '
           f'viewBox="0 {-pad_top} {w:.0f} {h:.0f}" font-family="ui-monospace, Menlo, monospace" font-size="11">',
           "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"7\" "
           "markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M 0 0 L 10 5 L 0 10 z\" fill=\"#667085\"/>"
           "</marker></defs>",
           f"<title>{escape(f'{g.opcode} {g.op} in {g.computation}')}</title>"]
    if g.notes:
        out.append(f'<text x="8" y="-8" fill="#b54708">{escape("; ".join(g.notes))}</text>')
    if g.cluster:
        x, y, cw, ch = g.cluster
        out.append(f'<rect x="{x}" y="{y}" width="{cw}" height="{ch}" rx="8" fill="#f9fafb" stroke="#12b76a" '
                   f'stroke-dasharray="6 3"/>')
        out.append(f'<text x="{x + 8}" y="{y + 13}" fill="#079455">{escape(f"fusion {g.op}: body {g.body}")}</text>')
    for e in g.edges:
        if len(e.points) < 2:
            continue
        pts = " ".join(f"{px},{py}" for px, py in e.points)
        out.append(f'<polyline class="edge" points="{pts}" fill="none" stroke="#667085" stroke-width="1" '
                   f'marker-end="url(#arrow)"><title>{escape(f"{e.source} → {e.target} (operand {e.operand})")}'
                   "</title></polyline>")
    for n in g.nodes:
        fill, stroke, sw, dash = STYLE.get(n.role, STYLE["body"])
        x0, y0 = n.x - n.w / 2, n.y - n.h / 2
        tip = "\n".join(p for p in (f"{n.opcode} {n.name}", n.shape + n.layout, n.detail,
                                    ", ".join(n.members)) if p)
        out.append(f'<g class="node {n.role}" data-name={quoteattr(n.name)}><title>{escape(tip)}</title>'
                   f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{n.w:.1f}" height="{n.h:.1f}" rx="4" fill="{fill}" '
                   f'stroke="{stroke}" stroke-width="{sw}"' + (f' stroke-dasharray="{dash}"' if dash else "") + "/>"
                   f'<text x="{x0 + 6:.1f}" y="{y0 + 14:.1f}" fill="#1d2330"'
                   + (' font-weight="bold"' if n.role in ("dot", "op") else "") + f">{escape(n.opcode)} "
                   f'<tspan fill="#475467">{escape(n.name)}</tspan></text>'
                   f'<text x="{x0 + 6:.1f}" y="{y0 + 28:.1f}" fill="#667085">{escape(n.shape + n.layout)}</text></g>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
