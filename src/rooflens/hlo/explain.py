"""Plain-word readings of a module and of single ops: the data behind ``rooflens hlo``.

Everything here returns plain dataclasses of strings and numbers; renderers (terminal,
JSON) only lay them out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from rooflens.hlo.module import Instruction, Module
from rooflens.hlo.opcodes import CATEGORIES, MATMUL, describe_opcode
from rooflens.hlo.shape import MEMORY_SPACE_NAMES, Shape
from rooflens.units import fmt_bytes

_MAX_GROUPS_SHOWN = 8


@dataclass
class CollectiveRow:
    name: str
    opcode: str
    kind: str
    computation: str
    bytes: int
    group_size: int
    num_groups: int
    stride: int | None
    description: str
    groups_preview: str


@dataclass
class BufferRow:
    name: str
    opcode: str
    shape: str
    bytes: int
    padded_bytes: int
    memory_space: int


@dataclass
class HloSummary:
    module: str
    entry: str
    is_scheduled: bool
    num_devices: int
    num_partitions: int
    replica_count: int
    num_computations: int
    num_instructions: int
    num_top_level_ops: int
    ops_by_category: dict[str, int]
    opcodes: dict[str, int]
    collectives: list[CollectiveRow]
    largest_buffers: list[BufferRow]
    padding_waste_bytes: int
    warnings: list[str]

    def to_dict(self) -> dict:
        return asdict(self)


def _groups_preview(groups, limit: int = 2) -> str:
    """``{0,1} {2,3} …`` — the first groups, enough to see the pattern."""
    if not groups:
        return ""
    shown = " ".join("{" + ",".join(map(str, g)) + "}" for g in groups[:limit])
    return shown + (" …" if len(groups) > limit else "")


def summarize(module: Module, top_buffers: int = 10) -> HloSummary:
    """Op counts by category, the collectives, the largest buffers and the warnings."""
    ops = module.top_level_instructions()
    by_cat = dict.fromkeys(CATEGORIES, 0)
    opcodes: dict[str, int] = {}
    for ins in ops:
        by_cat[ins.category or "unknown"] = by_cat.get(ins.category or "unknown", 0) + 1
        opcodes[ins.opcode] = opcodes.get(ins.opcode, 0) + 1
    collectives = []
    for ins in ops:
        if ins.category != "collective" or ins.opcode.endswith("-done"):
            continue
        info = module.collective(ins)
        if info is None:
            continue
        collectives.append(CollectiveRow(
            ins.name, ins.opcode, info.kind, ins.computation.name if ins.computation else "",
            _payload_bytes(module, ins), info.group_size, info.num_groups, info.stride, info.describe(),
            _groups_preview(info.groups) or _pairs_preview(info.pairs),
        ))
    buffers = [
        BufferRow(ins.name, ins.opcode, _short_shape(ins.shape), ins.shape.bytes, ins.shape.padded_bytes,
                  ins.shape.memory_space)
        for ins in ops
        if ins.opcode not in ("tuple", "get-tuple-element", "bitcast") and ins.shape.bytes > 0
    ]
    waste = sum(b.padded_bytes - b.bytes for b in buffers if b.padded_bytes > b.bytes)
    buffers.sort(key=lambda b: (-b.padded_bytes, b.name))
    return HloSummary(
        module=module.name, entry=module.entry.name if module.entry else "",
        is_scheduled=module.is_scheduled, num_devices=module.num_devices,
        num_partitions=module.num_partitions, replica_count=module.replica_count,
        num_computations=len(module.computations), num_instructions=len(module.instructions()),
        num_top_level_ops=len(ops), ops_by_category={k: v for k, v in by_cat.items() if v},
        opcodes=dict(sorted(opcodes.items(), key=lambda kv: (-kv[1], kv[0]))),
        collectives=collectives, largest_buffers=buffers[:top_buffers], padding_waste_bytes=waste,
        warnings=[str(w) for w in module.warnings],
    )


def _short_shape(shape: Shape) -> str:
    if not shape.is_tuple:
        return str(shape)
    leaves = shape.leaves()
    if len(leaves) <= 2:
        return str(shape)
    return f"({leaves[0]}, … {len(leaves)} elements)"


def _pairs_preview(pairs, limit: int = 4) -> str:
    if not pairs:
        return ""
    shown = ", ".join(f"{s}→{t}" for s, t in pairs[:limit])
    return shown + (f", … ({len(pairs)} pairs)" if len(pairs) > limit else "")


def _payload_bytes(module: Module, ins: Instruction) -> int:
    """Bytes a collective moves per device: its array operands (the data it starts with)."""
    return sum(s.bytes for s in map(module.operand_shape, ins.operands) if s is not None)


# --- one op ------------------------------------------------------------------------------


@dataclass
class OperandRow:
    name: str
    shape: str
    bytes: int
    producer: str  # opcode of the producing instruction ("" when not in the module)


@dataclass
class OpExplanation:
    name: str
    opcode: str
    category: str
    computation: str
    what: str  # what the op computes, in words
    shape: str
    dtype: str
    dims: list[int]
    bytes: int
    padded_bytes: int
    layout: list[str]  # the layout read right to left, tiling and padding, in sentences
    memory_space: str
    operands: list[OperandRow]
    users: list[str]
    details: list[str]  # opcode-specific facts (contracting dims, window, slice, …)
    called: dict[str, list[str]] = field(default_factory=dict)  # computation → its lines
    collective: list[str] = field(default_factory=list)  # who talks to whom
    sharding: list[str] = field(default_factory=list)
    source: list[str] = field(default_factory=list)  # op_name, named scope, Python stack
    text: str = ""
    unparsed: dict[str, str] = field(default_factory=dict)
    flops: float = 0.0  # all its FLOPs (a fusion: its whole body), filled in by the cost model's counts
    model_flops: float = 0.0  # the dots' and convolutions' part of them (what MFU counts)

    def to_dict(self) -> dict:
        return asdict(self)




def describe_layout(shape: Shape) -> list[str]:
    """The layout, read right to left, with the tiles and the padding they cause."""
    if not shape.is_array:
        return []
    out = []
    lay = shape.layout
    if shape.rank == 0:
        out.append("a scalar")
    elif lay is None or not lay.minor_to_major:
        out.append("no layout printed (the default: row-major, last dimension fastest)")
    else:
        m2m = lay.minor_to_major
        major, minor = m2m[-1], m2m[0]
        order = " > ".join(f"dim {d} ({shape.dims[d]})" for d in lay.major_to_minor)
        kind = "row-major" if list(m2m) == list(range(shape.rank - 1, -1, -1)) else "not row-major"
        out.append(
            f"{{{','.join(map(str, m2m))}}} read right to left: dim {major} is most major, "
            f"dim {minor} most minor ({kind}); memory order {order}"
        )
    if lay is not None and lay.tiles:
        phys = shape.physical_dims
        for i, tile in enumerate(lay.tiles):
            dims = ["*" if x < 0 else str(x) for x in tile]
            if i == 0:
                covered = phys[-len(tile):] if len(tile) <= len(phys) else (1,) * (len(tile) - len(phys)) + phys
                out.append(
                    f"T({','.join(dims)}): the {len(tile)} minor-most dims "
                    f"({'×'.join(map(str, covered))}) are stored in {'×'.join(dims)} tiles"
                )
            elif tile == (2, 1) and shape.bits_per_element == 16:
                out.append("(2,1): inside each tile, pairs of 16-bit values are packed into 32-bit words")
            elif tile == (4, 1) and shape.bits_per_element == 8:
                out.append("(4,1): inside each tile, four 8-bit values are packed into 32-bit words")
            else:
                out.append(f"({','.join(dims)}): a second level of tiling inside each tile")
        padded = shape.padded_physical_dims()
        if shape.padded_bytes > shape.bytes:
            ratio = shape.padded_bytes / max(shape.bytes, 1)
            out.append(
                f"padding: {'×'.join(map(str, phys)) or 'scalar'} is padded to {'×'.join(map(str, padded))}; "
                f"{fmt_bytes(shape.padded_bytes)} in memory for {fmt_bytes(shape.bytes)} of data "
                f"({ratio:.2f}×, {100 * (1 - shape.bytes / shape.padded_bytes):.1f}% waste)"
            )
        else:
            out.append("padding: none, the dims are already multiples of the tile")
    if lay is not None and lay.element_size_bits:
        out.append(f"E({lay.element_size_bits}): elements are packed at {lay.element_size_bits} bits each")
    if lay is not None and lay.extra:
        out.append("other layout fields kept verbatim: " + " ".join(lay.extra))
    return out


def _layout_lines(shape: Shape) -> list[str]:
    if not shape.is_tuple:
        return describe_layout(shape)
    out, seen = [], set()
    for i, leaf in enumerate(shape.leaves()):
        if str(leaf) in seen:
            continue
        seen.add(str(leaf))
        if len(seen) > 6:
            out.append("… (more tuple elements)")
            break
        out.extend(f"element {i} {leaf.dims_str()}: {line}" for line in describe_layout(leaf))
    return out


def _memory_space(shape: Shape) -> str:
    leaves = [s for s in shape.leaves() if s.is_array]
    spaces = sorted({s.memory_space for s in leaves})
    if not spaces:
        return ""
    return "; ".join(f"S({m}) = {MEMORY_SPACE_NAMES.get(m, f'memory space {m}')}" for m in spaces)


def _dot_details(module: Module, ins: Instruction) -> list[str]:
    """Contracting and batch dims of a dot, and the contracted size K."""
    a = ins.attrs
    lc, rc = a.get("lhs_contracting_dims") or (), a.get("rhs_contracting_dims") or ()
    lb, rb = a.get("lhs_batch_dims") or (), a.get("rhs_batch_dims") or ()
    out = [f"contracts lhs dims {list(lc)} with rhs dims {list(rc)}; batch dims lhs {list(lb)}, rhs {list(rb)}"]
    shapes = [op.shape for op in ins.operands]
    if len(shapes) >= 2 and not all(shapes[:2]):
        shapes = [o.shape for o in module.operands_of(ins)]
    if len(shapes) >= 2 and all(s is not None and s.is_array for s in shapes[:2]):
        k = 1
        for d in lc:
            if d < shapes[0].rank:
                k *= shapes[0].dims[d]
        out.append(f"contracted size K = {k:,}; output {ins.shape.dims_str()} "
                   f"({ins.shape.num_elements:,} elements, each a K-long dot product)")
        out.append(f"FLOPs = 2 × {ins.shape.num_elements:,} × {k:,} = {_dot_flops(ins, k):,.0f}")
    return out


def _dot_flops(ins: Instruction, k: int) -> float:
    s = ins.shape
    while s is not None and s.is_tuple and s.tuple_shapes:
        s = s.tuple_shapes[0]
    return 2.0 * (s.num_elements if s is not None else 0) * k


def _details(module: Module, ins: Instruction) -> list[str]:
    a = ins.attrs
    out = []
    if ins.opcode in MATMUL:
        out.extend(_dot_details(module, ins))
    if ins.opcode == "fusion":
        for inner in module.fusion_body(ins):
            if inner.opcode in MATMUL:
                out.extend(f"{inner.name} inside: {line}" for line in _dot_details(module, inner))
    if ins.opcode == "convolution" or "dim_labels" in a:
        if "window" in a:
            out.append(f"window {ins.raw_attrs.get('window')}")
        if "dim_labels" in a:
            out.append(f"dim_labels {ins.raw_attrs.get('dim_labels')} (input_kernel->output: b=batch, f=feature, "
                       "o/i=kernel out/in features, digits=spatial)")
    for key in ("dimensions", "slice", "dynamic_slice_sizes", "padding", "window", "index", "iota_dimension",
                "direction", "custom_call_target", "kind", "channel_id", "use_global_device_ids"):
        if key in ins.raw_attrs and not (key == "window" and ins.opcode == "convolution"):
            out.append(f"{key}={ins.raw_attrs[key]}")
    if ins.opcode == "while":
        cfg = ins.backend_config_json() or {}
        n = (cfg.get("known_trip_count") or {}).get("n")
        if n is not None:
            out.append(f"known trip count: {n}")
    if ins.opcode == "constant" and ins.literal is not None:
        lit = ins.literal
        out.append(f"value: {lit[:80]}{'…' if len(lit) > 80 else ''}")
    if ins.opcode == "parameter":
        out.append(f"parameter number {ins.parameter_number}")
    return out


def _collective_lines(module: Module, ins: Instruction) -> list[str]:
    info = module.collective(ins)
    if info is None:
        return []
    out = [info.describe()]
    if info.pairs:
        out.append("sends: " + _pairs_preview(info.pairs, _MAX_GROUPS_SHOWN))
    elif info.groups:
        for g in info.groups[:_MAX_GROUPS_SHOWN]:
            out.append("devices " + " ↔ ".join(map(str, g)) + " exchange data")
        if len(info.groups) > _MAX_GROUPS_SHOWN:
            out.append(f"… and {len(info.groups) - _MAX_GROUPS_SHOWN} more groups")
    c = module.collective_of(ins)
    if c is not None and c.replica_groups_spec is not None and c.replica_groups_spec.form in ("iota", "mesh"):
        out.append(f"printed as {c.replica_groups_spec.form} form: {c.replica_groups_spec.text}")
    payload = _payload_bytes(module, ins)
    if payload:
        out.append(f"starts with {fmt_bytes(payload)} per device")
    return out


def _sharding_lines(module: Module, ins: Instruction) -> list[str]:
    out = []
    s = ins.sharding
    if s is not None:
        out.append(f"sharding {s.text}")
    ts = module.true_shape(ins)
    if ts is not None and ts.degree > 1:
        out.append(
            f"per-device shape {ts.shard_shape.dims_str()}; true (unsharded) shape "
            f"{ins.shape.dtype}[{','.join(map(str, ts.true_dims))}], split {ts.degree} ways "
            f"on dim(s) {list(ts.sharded_dims)} ({ts.evidence})"
        )
    for t in module.implied_true_shapes(ins):
        out.append(
            f"operand {t.name}: per-device {t.shard_shape.dims_str()} → true "
            f"{t.shard_shape.dtype}[{','.join(map(str, t.true_dims))}] ({t.evidence})"
        )
    return out


#: Packages whose frames are the tool that ran the program, not the program: the command line (click), the
#: interpreter's launchers (runpy), test runners and notebooks' kernels. Their frames are left out of an op's
#: source stack wherever they were installed (site-packages or dist-packages, on any machine).
_TOOL_PACKAGES = frozenset({"click", "runpy", "_pytest", "pytest", "pluggy", "IPython", "ipykernel"})
#: rooflens's own modules that are a user's program: the demo's built-in workload.
_ROOFLENS_WORKLOADS = ("rooflens/workloads.py",)


def is_user_frame(path: str) -> bool:
    """A source frame of the user's code, not of the tool that ran it: not in rooflens (its capture, CLI and
    launcher; the demo's workload excepted), click, runpy, pytest or a notebook kernel, wherever installed."""
    p = path.replace("\\", "/")
    if "/src/rooflens/" in p or "-packages/rooflens/" in p:  # a checkout's src layout, or an installed wheel
        return p.endswith(_ROOFLENS_WORKLOADS)
    parts = p.split("/")
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            i = parts.index(marker)
            top = parts[i + 1] if i + 1 < len(parts) else ""
            if top.removesuffix(".py") in _TOOL_PACKAGES:
                return False
    return not (p.endswith("/runpy.py") or p.startswith("<frozen "))


def _source_lines(module: Module, ins: Instruction) -> list[str]:
    out = []
    if ins.op_name:
        out.append(f"op_name {ins.op_name}")
    if ins.named_scope:
        out.append(f"named scope {ins.named_scope}")
    user, left_out = user_frames(module, ins)
    for f in user[:6]:
        fn = f" in {f.function}" if f.function else ""
        out.append(f"{f.file}:{f.line}{fn}")
    if left_out:
        out.append(f"({left_out} frames of rooflens, click, runpy or a test runner left out)")
    return out


def user_frames(module: Module, ins: Instruction) -> tuple[list, int]:
    """The Python frames of the user's code that made ``ins``, innermost first, and how many others (rooflens's,
    click's, runpy's, a test runner's) were left out."""
    frames = module.source_stack(ins)
    user = [f for f in frames if is_user_frame(f.file)]
    return user, len(frames) - len(user)


def explain(module: Module, name: str) -> OpExplanation:
    """Everything the HLO says about one instruction, in words. Raises KeyError if absent."""
    ins = module[name]
    operands = []
    for op in ins.operands:
        producer = module.find(op.name)
        shape = module.operand_shape(op)
        operands.append(OperandRow(op.name, str(shape) if shape else "?", shape.bytes if shape else 0,
                                   producer.opcode if producer else ""))
    called = {}
    for comp in module.called(ins):
        called[comp.name] = [i.text.strip() for i in comp.instructions]
    what = describe_opcode(ins.opcode)
    if ins.opcode == "fusion":
        inner = [i.opcode for i in module.fusion_body(ins) if i.opcode not in ("parameter", "constant", "bitcast")]
        if inner:
            what += f" ({ins.category}; inside: {', '.join(dict.fromkeys(inner))})"
    return OpExplanation(
        name=ins.name, opcode=ins.opcode, category=ins.category,
        computation=ins.computation.name if ins.computation else "", what=what,
        shape=str(ins.shape), dtype=ins.shape.dtype, dims=list(ins.shape.dims),
        bytes=ins.shape.bytes, padded_bytes=ins.shape.padded_bytes,
        layout=_layout_lines(ins.shape),
        memory_space=_memory_space(ins.shape), operands=operands,
        users=[u.name for u in module.users(ins)], details=_details(module, ins), called=called,
        collective=_collective_lines(module, ins), sharding=_sharding_lines(module, ins),
        source=_source_lines(module, ins), text=ins.text.strip(), unparsed=dict(ins.unparsed),
    )


def suggest_names(module: Module, name: str, limit: int = 5) -> list[str]:
    """Instruction names close to ``name`` (for 'did you mean')."""
    import difflib

    return difflib.get_close_matches(name.lstrip("%"), [i.name for i in module.instructions()], n=limit)
