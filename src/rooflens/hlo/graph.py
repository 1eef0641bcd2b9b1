"""An op's HLO dataflow graph as data: its fusion body and its neighbourhood, laid out.

``op_graph(module, name)`` returns an :class:`OpGraph`: the op's operands (the instructions that
produce them in the enclosing computation) and users, and, for a fusion, every instruction of its
body with opcode, shape and layout, its parameters joined to the fusion's operands, the dot (or
convolution) marked. Collectives carry their group size, instructions with a ``sharding`` carry it.
Each node has a position and each edge a path, so a renderer (``rooflens.report.graph_view`` for a
standalone SVG, the HTML report's script) only draws.

The layout is grandalf's Sugiyama layered layout (layers top to bottom along the dataflow, crossings
reduced, long edges routed through their layers), not one of ours. Large bodies stay readable: above
``COLLAPSE_ABOVE`` instructions, chains of elementwise instructions (each the only user of the one
before) become one node listing its members; above ``MAX_NODES`` nodes the body is cut, with a note.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from rooflens.hlo.module import Instruction, Module

COLLAPSE_ABOVE = 40  # body instructions: beyond this, elementwise chains become one node
MIN_CHAIN = 3  # instructions in a chain worth collapsing
MAX_NODES = 150  # nodes drawn; the rest are left out with a note
MAX_NEIGHBOURS = 12  # operands or users of the op drawn (the rest counted in a note)
MATMUL = ("dot", "convolution")
NODE_H = 34.0
CHAR_W = 6.6  # px per character of the node's longest line (11 px monospace-ish)


@dataclass(frozen=True)
class GraphNode:
    id: str  # unique in the graph: the instruction's name ("outer:NAME" for the op's operands and users)
    name: str  # the instruction (a collapsed chain: its first member)
    opcode: str  # "elementwise ×N" for a collapsed chain
    shape: str  # dims, e.g. f32[512,1024]
    layout: str  # e.g. {1,0:T(8,128)}; "" when the shape prints none
    role: str  # op | operand | user | body | parameter | root | dot | chain
    detail: str = ""  # parameter ← operand, collective group size, sharding, a chain's members
    target: str = ""  # the op a click opens (neighbouring ops: the instruction in the enclosing computation)
    members: tuple[str, ...] = ()  # a collapsed chain's instructions, in order
    x: float = 0.0  # centre
    y: float = 0.0
    w: float = 0.0
    h: float = 0.0


@dataclass(frozen=True)
class GraphEdge:
    source: str  # node ids
    target: str
    operand: int  # which operand of the target this edge feeds (-1: a fusion's result leaving its root)
    points: tuple[tuple[float, float], ...] = ()  # the routed path, source to target


@dataclass
class OpGraph:
    op: str
    opcode: str
    computation: str  # the enclosing computation
    body: str  # the fusion's computation ("" for an op that is not a fusion)
    nodes: list[GraphNode] = field(default_factory=list)
    edges: list[GraphEdge] = field(default_factory=list)
    width: float = 0.0
    height: float = 0.0
    cluster: tuple[float, float, float, float] | None = None  # the body's box: x, y, w, h
    notes: list[str] = field(default_factory=list)

    def node(self, node_id: str) -> GraphNode | None:
        return next((n for n in self.nodes if n.id == node_id), None)

    def to_dict(self) -> dict:
        return asdict(self)


def _dims(ins: Instruction) -> tuple[str, str]:
    s = ins.shape
    if s is None:
        return "", ""
    try:
        if s.is_array:
            return s.dims_str(), str(s.layout) if s.layout else ""
    except AttributeError:
        pass
    text = str(s)
    return (text if len(text) <= 60 else text[:59] + "…"), ""


def _detail(module: Module, ins: Instruction) -> str:
    parts = []
    if ins.collective_kind:
        info = module.collective(ins)
        if info is not None and info.group_size:
            parts.append(f"{info.kind} over groups of {info.group_size}"
                         + (f" ({info.num_groups} groups)" if info.num_groups > 1 else ""))
    sharding = ins.raw_attrs.get("sharding")
    if sharding:
        parts.append(f"sharding {sharding if len(sharding) <= 80 else sharding[:79] + '…'}")
    return "; ".join(parts)


def _node(module: Module, ins: Instruction, node_id: str, role: str, detail: str = "", target: str = "") -> GraphNode:
    shape, layout = _dims(ins)
    extra = _detail(module, ins)
    return GraphNode(node_id, ins.name, ins.opcode, shape, layout, role,
                     "; ".join(p for p in (detail, extra) if p), target)


def _chains(body: list[Instruction]) -> list[list[Instruction]]:
    """Maximal chains of elementwise instructions, each the only user of the one before."""
    by_name = {i.name: i for i in body}
    users: dict[str, list[Instruction]] = {}
    for i in body:
        for op in i.operands:
            if op.name in by_name:
                users.setdefault(op.name, []).append(i)

    def elementwise(i: Instruction) -> bool:
        return i.category == "elementwise" and not i.is_root

    def link(u: Instruction) -> Instruction | None:  # u's successor in a chain
        us = users.get(u.name, [])
        if len(us) != 1 or not elementwise(us[0]):
            return None
        v = us[0]
        fed = [op.name for op in v.operands if op.name in by_name
               and by_name[op.name].opcode not in ("constant", "broadcast", "parameter")]
        return v if fed == [u.name] else None

    has_pred = {v.name for u in body if elementwise(u) for v in [link(u)] if v is not None}
    out = []
    for i in body:
        if not elementwise(i) or i.name in has_pred:
            continue
        chain = [i]
        while (nxt := link(chain[-1])) is not None:
            chain.append(nxt)
        if len(chain) >= MIN_CHAIN:
            out.append(chain)
    return out


def op_graph(module: Module, name: str, layout: bool = True) -> OpGraph:
    """The graph of one op (KeyError when the module has no such instruction)."""
    ins = module[name]
    comp = ins.computation
    g = OpGraph(op=ins.name, opcode=ins.opcode, computation=comp.name if comp is not None else "", body="")
    called = module.called(ins) if ins.opcode == "fusion" else []
    body = list(called[0].instructions) if called else []
    g.body = called[0].name if called else ""
    nodes: dict[str, GraphNode] = {}
    edges: list[GraphEdge] = []

    # the neighbourhood: producers of the op's operands, and its users, in the enclosing computation
    operands = ins.operands
    shown_ops = operands[:MAX_NEIGHBOURS] if not body else operands
    for op in shown_ops:
        producer = module.find(op.name)
        nid = f"outer:{op.name}"
        if nid in nodes:
            continue
        if producer is None:
            nodes[nid] = GraphNode(nid, op.name, "?", str(op.shape or ""), "", "operand", "not in the module")
        else:
            nodes[nid] = _node(module, producer, nid, "operand", target=producer.name)
    users = module.users(ins)
    for u in users[:MAX_NEIGHBOURS]:
        nodes.setdefault(f"outer:{u.name}", _node(module, u, f"outer:{u.name}", "user", target=u.name))
    if len(users) > MAX_NEIGHBOURS:
        g.notes.append(f"{len(users) - MAX_NEIGHBOURS} more users not drawn")
    if not body and len(operands) > MAX_NEIGHBOURS:
        g.notes.append(f"{len(operands) - MAX_NEIGHBOURS} more operands not drawn")

    if not body:
        nodes[ins.name] = _node(module, ins, ins.name, "op")
        for k, op in enumerate(shown_ops):
            edges.append(GraphEdge(f"outer:{op.name}", ins.name, k))
        root_id = ins.name
    else:
        members: dict[str, str] = {}  # body instruction → its node id (a chain's id for collapsed ones)
        if len(body) > COLLAPSE_ABOVE:
            for chain in _chains(body):
                cid = f"chain:{chain[0].name}"
                last = chain[-1]
                shape, lay = _dims(last)
                nodes[cid] = GraphNode(cid, chain[0].name, f"elementwise ×{len(chain)}", shape, lay, "chain",
                                       " → ".join(c.opcode for c in chain), members=tuple(c.name for c in chain))
                for c in chain:
                    members[c.name] = cid
            if members:
                g.notes.append(f"{sum(1 for _ in members)} elementwise instructions drawn as "
                               f"{len(set(members.values()))} chains (each node lists its members)")
        room = MAX_NODES - len(nodes)
        kept = [b for b in body if b.name not in members]
        if len(kept) > room:
            dropped = kept[:len(kept) - room]  # keep the end: the root and what feeds it
            keep_names = {b.name for b in kept[len(kept) - room:]} | {b.name for b in body if b.is_root}
            kept = [b for b in kept if b.name in keep_names]
            g.notes.append(f"body cut to {len(kept)} of its {len(body)} instructions "
                           f"({len(dropped)} earliest left out)")
        for b in kept:
            if b.opcode == "parameter":
                k = b.parameter_number if b.parameter_number is not None else -1
                src = operands[k].name if 0 <= k < len(operands) else "?"
                nodes[b.name] = _node(module, b, b.name, "parameter", f"parameter {k} ← {src} (operand {k})")
            else:
                role = "dot" if b.opcode in MATMUL else "root" if b.is_root else "body"
                nodes[b.name] = _node(module, b, b.name, role, "the fusion's result" if b.is_root else "")
            members[b.name] = b.name
        for b in body:  # one edge per operand use, inside the body
            dst = members.get(b.name)
            if dst is None:
                continue
            for k, op in enumerate(b.operands):
                src = members.get(op.name)
                if src is not None and src != dst:
                    edges.append(GraphEdge(src, dst, k))
        for b in kept:  # the fusion's operands feed its parameters
            if b.opcode == "parameter" and b.parameter_number is not None and b.parameter_number < len(operands):
                edges.append(GraphEdge(f"outer:{operands[b.parameter_number].name}", b.name, b.parameter_number))
        root = next((b for b in body if b.is_root), body[-1])
        root_id = members.get(root.name, root.name)
    for u in users[:MAX_NEIGHBOURS]:
        for k, op in enumerate(u.operands):
            if op.name == ins.name:
                edges.append(GraphEdge(root_id, f"outer:{u.name}", k))
    g.nodes = list(nodes.values())
    g.edges = [e for e in edges if e.source in nodes and e.target in nodes]
    if layout:
        _layout(g)
    return g


def _size(n: GraphNode) -> tuple[float, float]:
    head = f"{n.opcode} {n.name}"
    return max(len(head), len(n.shape + n.layout), 8) * CHAR_W + 16, NODE_H


def _layout(g: OpGraph) -> None:
    """Positions by grandalf's Sugiyama layout, component by component, left to right."""
    from grandalf.graphs import Edge, Graph, Vertex
    from grandalf.layouts import SugiyamaLayout

    class View:
        def __init__(self, w: float, h: float):
            self.w, self.h, self.xy = w, h, (0.0, 0.0)

    class NumberedEdge(Edge):
        """An edge hashed by its number: grandalf gathers a component's edges in a set, whose order (by object
        address, for a plain edge) orders the layout; by number, the same graph is laid out the same every run."""

        def __init__(self, number: int, *args):
            super().__init__(*args)
            self.number = number

        def __hash__(self) -> int:
            return self.number

    class EdgeView:
        def __init__(self):
            self.path: list = []

        def setpath(self, pts):
            self.path = [tuple(p) for p in pts]

    verts = {}
    for n in g.nodes:
        v = Vertex(n.id)
        v.view = View(*_size(n))
        verts[n.id] = v
    pairs: dict[tuple[str, str], Edge] = {}
    for e in g.edges:
        if (e.source, e.target) not in pairs:
            ge = NumberedEdge(len(pairs), verts[e.source], verts[e.target])
            ge.view = EdgeView()
            pairs[(e.source, e.target)] = ge
    graph = Graph(list(verts.values()), list(pairs.values()))
    pos: dict[str, tuple[float, float]] = {}
    paths: dict[tuple[str, str], list] = {}
    x_off, gap = 0.0, 40.0
    for comp in graph.C:
        sug = SugiyamaLayout(comp)
        sug.xspace, sug.yspace = 24, 46
        roots = [v for v in comp.sV if not v.e_in()]
        sug.init_all(roots=roots or None)
        sug.draw(3)
        xs = [v.view.xy[0] - v.view.w / 2 for v in comp.sV]
        x_min = min(xs)
        x_max = max(v.view.xy[0] + v.view.w / 2 for v in comp.sV)
        for v in comp.sV:
            pos[v.data] = (v.view.xy[0] - x_min + x_off, v.view.xy[1])
        for key, ge in pairs.items():
            if ge in comp.sE:
                paths[key] = [(p[0] - x_min + x_off, p[1]) for p in ge.view.path]
        x_off += x_max - x_min + gap
    ys = [p[1] for p in pos.values()] or [0.0]
    y0 = min(ys) - NODE_H / 2 - 30  # room above for the body's box and its title
    margin = 16.0
    nodes = []
    for n in g.nodes:
        w, h = _size(n)
        x, y = pos.get(n.id, (0.0, 0.0))
        nodes.append(GraphNode(**{**asdict(n), "members": n.members, "x": round(x + margin, 1),
                                  "y": round(y - y0, 1), "w": round(w, 1), "h": h}))
    g.nodes = nodes
    by_id = {n.id: n for n in nodes}

    def route(e: GraphEdge) -> tuple[tuple[float, float], ...]:
        pts = [(round(px + margin, 1), round(py - y0, 1)) for px, py in paths.get((e.source, e.target), ())]
        if len(pts) >= 2:  # from the source box's edge to the target box's edge (the arrow stays visible)
            a, b = by_id[e.source], by_id[e.target]
            down = pts[-1][1] >= pts[0][1]
            pts[0] = (pts[0][0], round(a.y + (a.h / 2 if down else -a.h / 2), 1))
            pts[-1] = (pts[-1][0], round(b.y - (b.h / 2 if down else -b.h / 2), 1))
        return tuple(pts)

    g.edges = [GraphEdge(e.source, e.target, e.operand, route(e)) for e in g.edges]
    g.width = round(max((n.x + n.w / 2 for n in nodes), default=0.0) + margin, 1)
    g.height = round(max((n.y + n.h / 2 for n in nodes), default=0.0) + 16, 1)
    inner = [n for n in nodes if not n.id.startswith("outer:")] if g.body else []
    if inner:
        x0 = min(n.x - n.w / 2 for n in inner) - 10
        y0b = min(n.y - n.h / 2 for n in inner) - 18
        x1 = max(n.x + n.w / 2 for n in inner) + 10
        y1 = max(n.y + n.h / 2 for n in inner) + 10
        g.cluster = (round(x0, 1), round(y0b, 1), round(x1 - x0, 1), round(y1 - y0b, 1))
