"""The parsed HLO: Module → Computation → Instruction, and queries over the graph."""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from rooflens.hlo.attrs import ReplicaGroups, Sharding, unquote
from rooflens.hlo.errors import HloWarning
from rooflens.hlo.opcodes import COLLECTIVE_KINDS, opcode_category
from rooflens.hlo.shape import Shape

# Keys whose value names other computations, and the kind of computation each one calls
# ("calls" of a non-fusion op is an async wrapper or a call; the parser refines it).
CALLED_KEY_KINDS = {
    "calls": "fusion", "to_apply": "applied", "body": "while body", "condition": "while condition",
    "branch_computations": "branch", "true_computation": "branch", "false_computation": "branch",
    "called_computations": "called", "select": "applied", "scatter": "applied",
}
CALLED_KEYS = tuple(CALLED_KEY_KINDS)


@dataclass(frozen=True, slots=True)
class Operand:
    name: str  # instruction name without "%"
    shape: Shape | None = None  # printed before the name in full dumps; None otherwise
    index: int | None = None  # ``%fusion.2#1`` (XLA from jaxlib 0.11): element 1 of the producer's tuple result


@dataclass(frozen=True, slots=True)
class SourceFrame:
    file: str
    line: int
    function: str = ""
    column: int = 0


_JIT_RE = re.compile(r"^(?:jit|pjit|xla_pmap|pmap|shard_map)\(.*\)$|^(?:jit|pjit|main|shard_map)$")
_WRAP_RE = re.compile(r"^(?:transpose|jvp|vmap|remat|checkpoint|custom_jvp_call|custom_vjp_call)\((.*)\)$")


def named_scope_of(op_name: str) -> str:
    """The user's named scopes in an HLO ``op_name``.

    ``jit(train)/jit(main)/layer_0/attention/dot_general`` → ``layer_0/attention``;
    ``jit(f)/transpose(jvp(ffn))/dot_general`` → ``ffn`` (autodiff wrappers unwrapped).
    The last component is the JAX primitive and is dropped. A combined op (XLA joins the
    ``op_name`` of ops it merges, e.g. several all-reduces, with ``:``) gets the scope its parts
    share: ``layer_0/ffn/dot:layer_0/attention/dot`` → ``layer_0``.
    """
    if ":" in op_name:
        scopes = [_one_scope(p) for p in op_name.split(":") if p]
        common = scopes[0].split("/") if scopes else []
        for sc in scopes[1:]:
            other = sc.split("/")
            n = 0
            while n < min(len(common), len(other)) and common[n] == other[n]:
                n += 1
            common = common[:n]
        return "/".join(common)
    return _one_scope(op_name)


def _one_scope(op_name: str) -> str:
    parts = [p for p in op_name.split("/") if p]
    if len(parts) <= 1:
        return ""
    return "/".join(s for s in map(_scope_part, parts[:-1]) if s)


@functools.lru_cache(maxsize=4096)
def _scope_part(part: str) -> str:
    """One component of an ``op_name`` as a scope: unwrapped of autodiff wrappers; "" for a jit wrapper (a
    program's thousands of ops share a few dozen components: each is looked at once)."""
    if _JIT_RE.match(part):
        return ""
    while m := _WRAP_RE.match(part):
        part = m.group(1)
    return "" if _JIT_RE.match(part) else part


@dataclass(slots=True, eq=False)
class Instruction:
    """One HLO instruction: ``name = shape opcode(operands), key=value, …``."""

    name: str
    opcode: str
    shape: Shape
    operands: tuple[Operand, ...]
    attrs: dict[str, Any]  # parsed attribute values (unknown keys: their raw text)
    raw_attrs: dict[str, str]  # every attribute exactly as printed
    is_root: bool = False
    line: int = 0  # 1-based line in the module text
    literal: str | None = None  # constant(...) contents, kept verbatim
    parameter_number: int | None = None
    unparsed: dict[str, str] = field(default_factory=dict)  # attributes not understood, verbatim
    computation: Computation | None = field(default=None, repr=False)
    category: str = ""
    replica_groups: tuple[tuple[int, ...], ...] | None = None  # resolved device groups
    text: str = field(default="", repr=False)  # the instruction's line as printed

    # -- common attributes ---------------------------------------------------------------
    @property
    def metadata(self) -> dict[str, Any]:
        md = self.attrs.get("metadata")
        return md if isinstance(md, dict) else {}

    @property
    def op_name(self) -> str:
        return str(self.metadata.get("op_name", ""))

    @property
    def named_scope(self) -> str:
        return named_scope_of(self.op_name)

    @property
    def sharding(self) -> Sharding | None:
        s = self.attrs.get("sharding")
        return s if isinstance(s, Sharding) else None

    @property
    def replica_groups_spec(self) -> ReplicaGroups | None:
        rg = self.attrs.get("replica_groups")
        return rg if isinstance(rg, ReplicaGroups) else None

    @property
    def called_computations(self) -> tuple[str, ...]:
        out: list[str] = []
        for k in CALLED_KEYS:
            v = self.attrs.get(k)
            if isinstance(v, tuple) and all(isinstance(x, str) for x in v):
                out.extend(v)
        return tuple(out)

    @property
    def backend_config(self) -> str | None:
        return self.raw_attrs.get("backend_config")

    def backend_config_json(self) -> dict | None:
        """The backend config as a dict when it is JSON (TPU/GPU), else None."""
        raw = self.backend_config
        if not raw:
            return None
        if raw.startswith('"'):  # older XLA printed it as a quoted string
            raw = unquote(raw)
        try:
            out = json.loads(raw)
        except ValueError:
            return None
        return out if isinstance(out, dict) else None

    @property
    def custom_call_target(self) -> str | None:
        t = self.attrs.get("custom_call_target")
        return t if isinstance(t, str) else None

    @property
    def collective_kind(self) -> str | None:
        """all-gather / all-reduce / reduce-scatter / all-to-all / collective-permute / …"""
        return COLLECTIVE_KINDS.get(self.opcode)

    def __repr__(self) -> str:
        return f"<Instruction {self.name} = {self.shape} {self.opcode}({len(self.operands)} operands)>"


@dataclass(slots=True, eq=False)
class Computation:
    name: str
    instructions: list[Instruction]
    is_entry: bool = False
    params: tuple[tuple[str, Shape | None], ...] = ()
    result_shape: Shape | None = None
    execution_thread: str | None = None
    line: int = 0
    kind: str = ""  # entry, fusion, while body, while condition, branch, call, async, applied, …
    callers: list[str] = field(default_factory=list)

    @property
    def root(self) -> Instruction | None:
        for ins in self.instructions:
            if ins.is_root:
                return ins
        return self.instructions[-1] if self.instructions else None

    def __repr__(self) -> str:
        return f"<Computation {self.name} ({self.kind}, {len(self.instructions)} instructions)>"


@dataclass(frozen=True, slots=True)
class CollectiveInfo:
    """Who talks to whom in one collective."""

    name: str
    kind: str  # all-gather, all-reduce, reduce-scatter, all-to-all, collective-permute, …
    groups: tuple[tuple[int, ...], ...] | None
    pairs: tuple[tuple[int, int], ...] = ()
    group_size: int = 0
    num_groups: int = 0
    stride: int | None = None  # device-id step inside each group, when regular
    form: str = ""  # explicit / iota / mesh / all / pairs
    num_devices: int = 0

    @property
    def parallelism(self) -> int:
        """The degree of parallelism this collective implies (devices that share one tensor)."""
        return self.group_size

    def describe(self) -> str:
        """One sentence: how many groups, their size and stride, the parallelism implied."""
        if self.kind == "collective-permute":
            return _describe_pairs(self.pairs)
        if not self.groups:
            return "groups unknown (the module does not say how many devices there are)"
        txt = (f"{self.num_groups} group{'s' if self.num_groups != 1 else ''} of {self.group_size} "
               f"device{'s' if self.group_size != 1 else ''}")
        if self.group_size < 2:
            return txt + ": nothing is exchanged"
        if self.group_size == self.num_devices:
            return txt + f": all {self.num_devices} devices take part"
        if self.stride == 1:
            axis = "the minor (fastest-varying) mesh axis"
        elif self.stride:
            axis = f"a mesh axis of stride {self.stride}"
        else:
            axis = "an irregular set of devices"
        return txt + f": {self.group_size}-way parallelism along {axis}, out of {self.num_devices} devices"


@dataclass(frozen=True, slots=True)
class TrueShape:
    """An instruction's per-device shape and the unsharded shape it implies."""

    name: str
    shard_shape: Shape
    true_dims: tuple[int, ...]
    sharded_dims: tuple[int, ...]  # dimensions that are split across devices
    degree: int
    evidence: str  # why: a sharding annotation, or the collective that implies it


def _describe_pairs(pairs: tuple[tuple[int, int], ...]) -> str:
    """Source→target pairs as rings (0→2→4→6→0) or chains (0→1→2)."""
    if not pairs:
        return "no source→target pairs"
    nxt = dict(pairs)
    starts = sorted(set(nxt) - set(nxt.values()))  # chain heads; rings have none
    seen: set[int] = set()
    walks = []
    for head in starts + sorted(nxt):
        if head in seen:
            continue
        walk = [head]
        seen.add(head)
        while walk[-1] in nxt and nxt[walk[-1]] not in seen:
            walk.append(nxt[walk[-1]])
            seen.add(walk[-1])
        ring = walk[-1] in nxt and nxt[walk[-1]] == head
        walks.append("→".join(map(str, walk + ([head] if ring else []))))
    rings = all(w.split("→")[0] == w.split("→")[-1] for w in walks)
    sizes = {len(w.split("→")) - (1 if rings else 0) for w in walks}
    kind = "ring" if rings else "chain"
    size = f" of {sizes.pop()} devices" if len(sizes) == 1 else ""
    shown = ", ".join(walks[:4]) + (", …" if len(walks) > 4 else "")
    return f"{len(pairs)} source→target pairs: {len(walks)} {kind}(s){size}, each device sends to the next: {shown}"


def _stride(groups) -> int | None:
    steps = set()
    for g in groups:
        if len(g) < 2:
            continue
        for a, b in zip(g, g[1:]):
            steps.add(b - a)
    return steps.pop() if len(steps) == 1 else None


@dataclass(slots=True, eq=False)
class Module:
    name: str
    attrs: dict[str, Any]  # header attributes (is_scheduled, num_partitions, …)
    raw_attrs: dict[str, str]
    computations: dict[str, Computation]
    entry: Computation | None
    warnings: list[HloWarning] = field(default_factory=list)
    stack_frames: dict[int, tuple[int, int]] = field(default_factory=dict)  # id → (location, parent)
    file_locations: dict[int, SourceFrame] = field(default_factory=dict)
    _by_name: dict[str, Instruction] = field(default_factory=dict, repr=False)
    _users: dict[str, list[Instruction]] | None = field(default=None, repr=False)
    _num_devices: int = field(default=0, repr=False)

    # -- lookup --------------------------------------------------------------------------
    def instructions(self) -> list[Instruction]:
        """Every instruction of every computation, in text order."""
        return [ins for comp in self.computations.values() for ins in comp.instructions]

    def find(self, name: str) -> Instruction | None:
        return self._by_name.get(name.lstrip("%"))

    def __getitem__(self, name: str) -> Instruction:
        ins = self.find(name)
        if ins is None:
            raise KeyError(name)
        return ins

    def computation(self, name: str) -> Computation | None:
        return self.computations.get(name.lstrip("%"))

    def _resolve(self, ins: Instruction | str) -> Instruction | None:
        return self.find(ins) if isinstance(ins, str) else ins

    def operand_shape(self, op: Operand) -> Shape | None:
        """An operand's shape: as printed beside it, else its producer's."""
        if op.shape is not None:
            return op.shape
        producer = self._by_name.get(op.name)
        if producer is None:
            return None
        shape = producer.shape
        if op.index is not None and shape is not None and shape.is_tuple and op.index < len(shape.tuple_shapes):
            return shape.tuple_shapes[op.index]
        return shape

    @property
    def is_scheduled(self) -> bool:
        return bool(self.attrs.get("is_scheduled"))

    @property
    def num_partitions(self) -> int:
        v = self.attrs.get("num_partitions")
        return v if isinstance(v, int) and v > 0 else 1

    @property
    def replica_count(self) -> int:
        v = self.attrs.get("replica_count")
        return v if isinstance(v, int) and v > 0 else 1

    @property
    def num_devices(self) -> int:
        """Devices the program runs on: from the header, shardings and replica groups."""
        if self._num_devices:
            return self._num_devices
        n = self.replica_count * self.num_partitions
        for ins in self.instructions():
            s = ins.sharding
            if s is not None:
                n = max(n, s.num_devices, s.max_device + 1)
            rg = ins.replica_groups_spec
            if rg is not None:
                n = max(n, rg.max_device + 1)
            pairs = ins.attrs.get("source_target_pairs")
            if isinstance(pairs, tuple) and pairs:
                n = max(n, 1 + max(max(p) for p in pairs))
        self._num_devices = n
        return n

    # -- graph ---------------------------------------------------------------------------
    def operands_of(self, ins: Instruction) -> list[Instruction]:
        """The instructions that produce ``ins``'s operands (unknown names are skipped)."""
        out = []
        for op in ins.operands:
            p = self._by_name.get(op.name)
            if p is not None:
                out.append(p)
        return out

    def users(self, ins: Instruction | str) -> list[Instruction]:
        """Instructions that take ``ins`` as an operand."""
        if self._users is None:
            users: dict[str, list[Instruction]] = {}
            for i in self.instructions():
                for op in i.operands:
                    users.setdefault(op.name, []).append(i)
            self._users = users
        name = ins if isinstance(ins, str) else ins.name
        return list(self._users.get(name.lstrip("%"), []))

    def called(self, ins: Instruction) -> list[Computation]:
        """Computations an instruction calls (fusion body, loop body/condition, branches, …)."""
        return [c for c in (self.computations.get(n) for n in ins.called_computations) if c]

    def fusion_body(self, ins: Instruction) -> list[Instruction]:
        """The instructions inside a fusion (nested fusions flattened), else [].

        Each called computation is visited once, so a malformed module whose fusions call each
        other in a cycle ends instead of recursing forever.
        """
        if ins.opcode != "fusion":
            return []
        out: list[Instruction] = []
        seen: set[str] = set()
        stack = list(self.called(ins))
        while stack:
            comp = stack.pop(0)
            if comp.name in seen:
                continue
            seen.add(comp.name)
            for inner in comp.instructions:
                out.append(inner)
                if inner.opcode == "fusion":
                    stack.extend(self.called(inner))
        return out

    def schedule(self) -> list[Instruction]:
        """ENTRY's instructions in execution order (text order: the schedule when scheduled)."""
        return list(self.entry.instructions) if self.entry else []

    def top_level_instructions(self) -> list[Instruction]:
        """Instructions that run as ops: those outside fusion bodies and reducers."""
        return [
            ins for comp in self.computations.values() if comp.kind not in ("fusion", "applied")
            for ins in comp.instructions
        ]

    def source_stack(self, ins: Instruction) -> list[SourceFrame]:
        """The Python call stack of an instruction, innermost first (from stack_frame_id)."""
        md = ins.metadata
        frames: list[SourceFrame] = []
        fid = md.get("stack_frame_id")
        seen = set()
        while isinstance(fid, int) and fid in self.stack_frames and fid not in seen:
            seen.add(fid)
            loc, parent = self.stack_frames[fid]
            if loc in self.file_locations:
                frames.append(self.file_locations[loc])
            fid = parent
        if not frames and md.get("source_file"):
            frames.append(SourceFrame(str(md["source_file"]), int(md.get("source_line", 0) or 0)))
        return frames

    # -- collectives and sharding -------------------------------------------------------
    def collective_of(self, ins: Instruction, _depth: int = 0) -> Instruction | None:
        """The instruction that holds the collective's groups: itself, its -start, or the
        collective inside an async wrapper / collective fusion."""
        if ins.collective_kind:
            return ins
        if ins.opcode.endswith("-done") and ins.operands and _depth < 8:  # malformed -done chains: stop
            start = self._by_name.get(ins.operands[0].name)
            if start is not None and start is not ins:
                return self.collective_of(start, _depth + 1)
        if ins.opcode in ("async-start", "fusion", "call"):
            for comp in self.called(ins):
                for inner in comp.instructions:
                    if inner.collective_kind:
                        return inner
        return None

    def collective(self, ins: Instruction | str) -> CollectiveInfo | None:
        """Group size, number of groups and the parallelism a collective implies."""
        ins = self._resolve(ins)
        if ins is None:
            return None
        c = self.collective_of(ins)
        if c is None:
            return None
        kind = c.collective_kind or c.opcode
        n = self.num_devices
        pairs = c.attrs.get("source_target_pairs")
        if isinstance(pairs, tuple):
            return CollectiveInfo(ins.name, kind, None, pairs, 2 if pairs else 0, len(pairs), None, "pairs", n)
        groups = c.replica_groups
        rg = c.replica_groups_spec
        if not groups:
            return CollectiveInfo(ins.name, kind, None, (), 0, 0, None, rg.form if rg else "", n)
        return CollectiveInfo(
            ins.name, kind, groups, (), len(groups[0]), len(groups), _stride(groups),
            rg.form if rg else "all", n,
        )

    def true_shape(self, ins: Instruction | str) -> TrueShape | None:
        """The unsharded shape behind a per-device shape.

        Exact when the instruction carries a ``sharding`` annotation. Otherwise inferred
        from the collective that consumes it: an all-gather along dimension d means the
        input is a 1/n shard of d; a reduce-scatter or all-reduce of partial sums means the
        contracted dimension of the producing dot was split n ways (Megatron-style model
        parallelism), so the dot's operands are n× larger on that dimension.
        """
        ins = self._resolve(ins)
        if ins is None:
            return None
        if not ins.shape.is_array:
            return None
        s = ins.sharding
        if s is not None and s.kind == "tiled":
            dims = s.true_dims(ins.shape.dims)
            if dims is not None:
                tiles = s.data_tile_dims()
                split = tuple(i for i, t in enumerate(tiles) if t > 1)
                return TrueShape(
                    ins.name, ins.shape, dims, split, math.prod(tiles) if tiles else 1,
                    f"sharding={s.text}",
                )
        for user, target, dim in self._collective_users(ins):
            info = self.collective(user)
            if info is None or info.group_size < 2:
                continue
            n = info.group_size
            if target.collective_kind == "all-gather" and dim is not None:
                dims = list(ins.shape.dims)
                dims[dim] *= n
                return TrueShape(
                    ins.name, ins.shape, tuple(dims), (dim,), n,
                    f"{user.name} all-gathers it over groups of {n} along dimension {dim}",
                )
        return None

    def implied_true_shapes(self, ins: Instruction | str) -> list[TrueShape]:
        """True shapes of a dot/fusion's operands when its result is reduced across devices.

        The seed's worked problem: a fusion computing ``bf16[8192] · bf16[4096,8192] →
        bf16[4096]`` whose result is all-reduced over groups of 8 was computed on 1/8 of
        the contracted dimension on each device, so the operands are 8× larger there.
        """
        ins = self._resolve(ins)
        if ins is None:
            return []
        out: list[TrueShape] = []
        for user, target, _dim in self._collective_users(ins):
            kind = target.collective_kind
            if kind not in ("all-reduce", "reduce-scatter"):
                continue
            info = self.collective(user)
            if info is None or info.group_size < 2:
                continue
            n = info.group_size
            for op_index, dim in self._contracted_operand_dims(ins):
                op = ins.operands[op_index]
                shape = self.operand_shape(op)
                if shape is None or not shape.is_array or dim >= shape.rank:
                    continue
                dims = list(shape.dims)
                dims[dim] *= n
                out.append(TrueShape(
                    op.name, shape, tuple(dims), (dim,), n,
                    f"{user.name} ({kind}) sums {ins.name}'s partial results over groups of {n}, "
                    f"so contracted dimension {dim} of {op.name} is split {n} ways",
                ))
            if out:
                return out
        return out

    def _collective_users(self, ins: Instruction, depth: int = 4):
        """(user, collective, gathered/scattered dim) for the collectives fed by ``ins``,
        directly or through layout-only and elementwise ops."""
        frontier = [ins]
        seen = {ins.name}
        for _ in range(depth):
            nxt = []
            for cur in frontier:
                for u in self.users(cur):
                    if u.name in seen:
                        continue
                    seen.add(u.name)
                    target = self.collective_of(u)
                    if target is not None:
                        dims = target.attrs.get("dimensions")
                        dim = dims[0] if isinstance(dims, tuple) and dims else None
                        yield u, target, dim
                    elif u.opcode in ("bitcast", "reshape", "convert", "copy", "get-tuple-element",
                                      "tuple", "reduce") or opcode_category(u.opcode) == "elementwise":
                        nxt.append(u)
            frontier = nxt

    def _contracted_operand_dims(self, ins: Instruction) -> list[tuple[int, int]]:
        """(operand index, dimension) pairs contracted by the dot(s) in ``ins``."""
        if ins.opcode == "dot":
            lc = ins.attrs.get("lhs_contracting_dims") or ()
            rc = ins.attrs.get("rhs_contracting_dims") or ()
            return [(0, d) for d in lc] + [(1, d) for d in rc]
        if ins.opcode != "fusion":
            return []
        out = []
        for comp in self.called(ins):
            params = {i.name: i.parameter_number for i in comp.instructions if i.opcode == "parameter"}
            for inner in comp.instructions:
                if inner.opcode != "dot":
                    continue
                for side, key in ((0, "lhs_contracting_dims"), (1, "rhs_contracting_dims")):
                    if side >= len(inner.operands):
                        continue
                    src = self._through_layout_ops(inner.operands[side].name)
                    pnum = params.get(src)
                    if pnum is not None and pnum < len(ins.operands):
                        for d in inner.attrs.get(key) or ():
                            out.append((pnum, d))
        return out

    def _through_layout_ops(self, name: str) -> str:
        """Follow converts and copies back to the value they started from."""
        for _ in range(8):
            ins = self._by_name.get(name)
            if ins is None or ins.opcode not in ("convert", "copy") or not ins.operands:
                return name
            name = ins.operands[0].name
        return name
