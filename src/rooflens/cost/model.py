"""Per-op cost (chip-independent) and roofline time on a chip: OpCost → OpPrediction → Prediction.

``costs(module)`` walks the ops that run (ENTRY, loop bodies × trip count, called computations),
and gives each an :class:`OpCost`: FLOPs, transcendentals, HBM bytes, and for collectives the
group and buffer sizes. ``price(costs, chip)`` turns them into times:

* ``T_math = flops / peak`` at the op's dtype (a matmul's operand dtype; f32 matmuls at the
  precision they run with: one bf16 pass on TPU by default, TF32 on NVIDIA GPUs by default);
* ``T_mem = bytes / HBM bandwidth``;
* ``T_comm`` from :mod:`rooflens.cost.comm`: a bandwidth term and a latency term (hops × the
  chip's per-hop latency; on GPUs NCCL/RCCL's base + per-step latency), combined as the scaling
  book does on TPU rings (``max``) and as NCCL does on GPUs (``sum``);
* ``t_pred = max(T_math, T_mem, T_comm)`` (a kernel overlaps its loads with its math and a
  collective overlaps its sends with its reads), plus the chip's measured per-op overhead when
  it has one; a non-collective op takes at least the chip's published kernel-launch time
  (``overheads.kernel_launch_s``; none is published for TPUs); ``bound`` names the largest term
  (``latency`` when a collective's hops cost more than its bytes).

``model_flops`` is the dot/convolution part of ``flops`` (inside fusions too): what MFU counts.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field

from rooflens.cost.comm import Span, Topology, collective_cost, group_span, parse_topology, place_group
from rooflens.cost.counts import Counts, contracted_size, instruction_counts, model_flops
from rooflens.cost.fuse import NO_VALUE, Group, plan_groups
from rooflens.cost.kernels import kernel_cost
from rooflens.cost.traffic import SLICING as SLICING_OPS
from rooflens.cost.traffic import Traffic, hbm_bytes, instruction_traffic, result_shape
from rooflens.errors import RooflensError
from rooflens.hardware import Chip
from rooflens.hlo import Instruction, Module, Shape
from rooflens.hlo.opcodes import MODEL_FLOP_OPCODES
from rooflens.hlo.shape import HOST_MEMORY_SPACE
from rooflens.units import fmt_bytes, fmt_g, plural

MATMUL_OPCODES = MODEL_FLOP_OPCODES  # dots and convolutions: the one table in rooflens.hlo.opcodes
DTYPE_PEAK_KEY = {
    "bf16": "bf16", "f16": "fp16", "f32": "fp32", "f64": "fp64", "s8": "int8", "u8": "int8", "s4": "int8",
    "u4": "int8", "tf32": "tf32", "f4e2m1fn": "fp4", "f6e2m3fn": "fp6", "f6e3m2fn": "fp6",
}
PRECISION_PASSES = {"default": 1, "high": 3, "highest": 6}  # bf16 passes of an f32 matmul on TPU


@dataclass(frozen=True)
class OpCost:
    """What one op (or one emulated fusion) does, independent of any chip."""

    name: str
    opcode: str
    category: str
    computation: str
    count: float  # executions per run of the program (trip counts of enclosing loops)
    flops: float
    transcendentals: float
    read_bytes: float
    written_bytes: float
    dtype: str  # the dtype its math runs in (a matmul's operand dtype)
    precision: str  # operand precision of a matmul ("default" unless the HLO says otherwise)
    is_matmul: bool
    named_scope: str
    flops_formula: str
    bytes_formula: str
    collective: str = ""  # collective kind ("" when not a collective)
    group_size: int = 0
    comm_in_bytes: float = 0.0
    comm_out_bytes: float = 0.0
    members: tuple[str, ...] = ()  # ops grouped into this one (emulated fusion), else (name,)
    contracted: int = 0  # a matmul's contracted size K
    host_bytes: float = 0.0  # bytes moved between device and host memory (offload, S(5))
    device_group: tuple[int, ...] = ()  # a collective's first replica group (device ids)
    model_flops: float = 0.0  # FLOPs of its dots and convolutions (inside a fusion too)
    xla_strategy: str = ""  # the collective algorithm XLA chose, when the compiled HLO records it (TPU)

    @property
    def bytes(self) -> float:
        return self.read_bytes + self.written_bytes


@dataclass(frozen=True)
class OpPrediction:
    """One op's roofline on one chip. Times are per execution; ``count`` executions per run."""

    name: str
    opcode: str
    category: str
    named_scope: str
    count: float
    flops: float
    bytes: float
    comm_bytes: float
    t_math_s: float
    t_mem_s: float
    t_comm_s: float
    t_pred_s: float
    bound: str  # compute | memory | communication | latency | host-transfer | overhead | none
    peak_key: str  # which peak priced the math (bf16, fp32, …)
    explanation: tuple[str, ...] = ()  # the arithmetic, one line per term
    members: tuple[str, ...] = ()
    model_flops: float = 0.0  # the dot/convolution part of flops (what MFU counts)
    hops: int = 0  # a collective's sequential link steps
    t_latency_s: float = 0.0  # a collective's latency term (already inside t_comm_s)

    # The names of DESIGN.md's public API (the fields above carry units).
    @property
    def t_math(self) -> float:
        return self.t_math_s

    @property
    def t_mem(self) -> float:
        return self.t_mem_s

    @property
    def t_comm(self) -> float:
        return self.t_comm_s

    @property
    def t_pred(self) -> float:
        return self.t_pred_s

    @property
    def total_s(self) -> float:
        return self.t_pred_s * self.count

    def to_dict(self) -> dict:
        d = asdict(self)
        d["explanation"] = list(self.explanation)
        d["members"] = list(self.members)
        d["total_s"] = self.total_s
        return d


@dataclass(frozen=True)
class Prediction:
    """The roofline of a whole program on one chip (per device)."""

    chip: str
    device_unit: str
    module: str
    source: str  # which HLO was priced and why
    ops: tuple[OpPrediction, ...]
    num_devices: int = 1
    assumptions: tuple[str, ...] = ()
    time_by_category_s: dict = field(default_factory=dict)
    time_by_scope_s: dict = field(default_factory=dict)
    time_by_bound_s: dict = field(default_factory=dict)

    @property
    def time_s(self) -> float:
        return sum(o.total_s for o in self.ops)

    @property
    def flops(self) -> float:
        return sum(o.flops * o.count for o in self.ops)

    @property
    def bytes(self) -> float:
        return sum(o.bytes * o.count for o in self.ops)

    @property
    def comm_bytes(self) -> float:
        return sum(o.comm_bytes * o.count for o in self.ops)

    @property
    def model_flops(self) -> float:
        """FLOPs of the program's dots and convolutions (per device): the numerator of MFU."""
        return sum(o.model_flops * o.count for o in self.ops)

    def op(self, name: str) -> OpPrediction:
        for o in self.ops:
            if o.name == name or name in o.members:
                return o
        raise KeyError(name)

    def top(self, n: int = 10) -> list[OpPrediction]:
        return sorted(self.ops, key=lambda o: -o.total_s)[:n]

    def to_dict(self) -> dict:
        return {
            "chip": self.chip, "device_unit": self.device_unit, "module": self.module, "source": self.source,
            "num_devices": self.num_devices, "time_s": self.time_s, "flops": self.flops,
            "model_flops": self.model_flops, "bytes": self.bytes,
            "comm_bytes": self.comm_bytes, "assumptions": list(self.assumptions),
            "time_by_category_s": self.time_by_category_s, "time_by_scope_s": self.time_by_scope_s,
            "time_by_bound_s": self.time_by_bound_s, "ops": [o.to_dict() for o in self.ops],
        }


# -- walking the program ---------------------------------------------------------------------

_TRIP_RE = re.compile(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)')


def trip_count(module: Module, ins: Instruction) -> int | None:
    """A while loop's trip count: XLA's ``known_trip_count``, else ``i < N`` in the condition."""
    m = _TRIP_RE.search(ins.backend_config or "")
    if m:
        return int(m.group(1))
    cond = next((c for c in module.called(ins) if c.kind == "while condition"), None)
    if cond is None or cond.root is None or cond.root.opcode != "compare":
        return None
    direction = str(cond.root.attrs.get("direction", ""))
    for op in cond.root.operands:
        src = module.find(op.name)
        if src is not None and src.opcode == "constant" and src.literal and src.literal.strip().lstrip("-").isdigit():
            n = int(src.literal.strip())
            return n + 1 if direction == "LE" else n
    return None


def _executed(module: Module) -> list[tuple[object, float]]:
    """(computation, executions per run) for every computation whose ops run as ops."""
    out: list[tuple[object, float]] = []
    if module.entry is None:
        return out
    stack = [(module.entry, 1.0)]
    seen: set[tuple[str, float]] = set()
    while stack:
        comp, count = stack.pop()
        if (comp.name, count) in seen:
            continue
        seen.add((comp.name, count))
        out.append((comp, count))
        for ins in comp.instructions:
            if ins.opcode == "while":
                n = trip_count(module, ins) or 1
                for c in module.called(ins):
                    stack.append((c, count * n))
            elif ins.opcode == "conditional":
                branches = module.called(ins)
                for c in branches:
                    stack.append((c, count / max(len(branches), 1)))
            elif ins.opcode == "call":
                stack.extend((c, count) for c in module.called(ins))
    return out


def _matmul_of(module: Module, ins: Instruction) -> Instruction | None:
    if ins.opcode in MATMUL_OPCODES:
        return ins
    if ins.opcode == "fusion":
        for inner in module.fusion_body(ins):
            if inner.opcode in MATMUL_OPCODES:
                return inner
    if ins.opcode == "custom-call" and (ins.category in ("matmul", "convolution") or model_flops(module, ins)):
        return ins
    return None


def _math_dtype(module: Module, ins: Instruction, mm: Instruction | None) -> str:
    if mm is not None and mm.opcode == "custom-call" and (kc := kernel_cost(module, mm)) is not None and kc.dtype:
        return kc.dtype  # a kernel that says which operand its math runs in (a matmul's activation)
    if mm is not None and mm.operands:
        s = module.operand_shape(mm.operands[0])
        if s is not None and s.is_array and s.dtype[0] in "fbc":  # (a kernel's int metadata is not its math)
            return s.dtype
    s = ins.shape
    while s is not None and s.is_tuple and s.tuple_shapes:
        s = s.tuple_shapes[0]
    return s.dtype if s is not None and s.is_array else "f32"


def _precision(mm: Instruction | None) -> str:
    if mm is None:
        return "default"
    raw = str(mm.raw_attrs.get("operand_precision", mm.raw_attrs.get("precision_config", ""))).lower()
    for p in ("highest", "high"):
        if p in raw:
            return p
    return "default"


def _logical_bytes(shape: Shape | None) -> float:
    return 0.0 if shape is None else float(shape.bytes)


def _becomes_reduce_scatter(module: Module, ins: Instruction, n: int) -> bool:
    """An all-reduce whose every user keeps 1/N of it: XLA turns it into a reduce-scatter later."""
    if ins.opcode != "all-reduce" or n <= 1:
        return False
    users = module.users(ins)
    total = _logical_bytes(ins.shape)
    return bool(users) and all(
        u.opcode == "dynamic-slice" and abs(_logical_bytes(u.shape) * n - total) < 1 for u in users)


def _first_group(module: Module, ins: Instruction) -> tuple[int, ...]:
    info = module.collective(ins)
    if info is None or ins.opcode.endswith("-done"):
        return ()
    if info.groups:
        return tuple(info.groups[0])
    if info.pairs:
        return tuple(info.pairs[0])
    return tuple(range(info.num_devices or module.num_devices))


def _collective_fields(module: Module, ins: Instruction) -> tuple[str, int, float, float]:
    info = module.collective(ins)
    if info is None or ins.opcode.endswith("-done"):
        return "", 0, 0.0, 0.0
    c = module.collective_of(ins) or ins
    n = info.group_size or (module.num_devices if info.form in ("all", "") else 0) or 1
    in_bytes = sum(_logical_bytes(module.operand_shape(o)) for o in c.operands)
    out_bytes = _logical_bytes(result_shape(c))
    kind = info.kind
    if kind == "all-reduce" and _becomes_reduce_scatter(module, c, n):
        kind = "reduce-scatter"
    return kind, n, in_bytes, out_bytes


def _op_cost(module: Module, ins: Instruction, count: float, counts: Counts, traffic: Traffic,
             members: tuple[str, ...], category: str) -> OpCost:
    mm = None
    for name in members:
        mm = _matmul_of(module, module[name])
        if mm is not None:
            break
    kind, n, cin, cout = _collective_fields(module, ins)
    return OpCost(
        name=ins.name, opcode=ins.opcode, category=category,
        computation=ins.computation.name if ins.computation else "",
        count=count, flops=counts.flops, transcendentals=counts.transcendentals, read_bytes=traffic.read_bytes,
        written_bytes=traffic.written_bytes, dtype=_math_dtype(module, ins, mm), precision=_precision(mm),
        is_matmul=mm is not None, named_scope=ins.named_scope, flops_formula=counts.formula,
        bytes_formula=traffic.formula, collective=kind, group_size=n, comm_in_bytes=cin, comm_out_bytes=cout,
        members=members, contracted=_contracted(module, mm), host_bytes=_host_bytes(module, ins),
        device_group=_first_group(module, ins) if kind else (),
        model_flops=sum(model_flops(module, module[m]) for m in members),
        xla_strategy=_xla_strategy(module, ins) if kind else "",
    )


def _xla_strategy(module: Module, ins: Instruction) -> str:
    """The ring strategy XLA:TPU recorded for a collective (``collective_algorithm_config.strategy``)."""
    c = module.collective_of(ins) or ins
    cfg = c.backend_config_json() if "collective_algorithm_config" in (c.backend_config or "") else None
    algo = (cfg or {}).get("collective_algorithm_config") or {}
    return str(algo.get("strategy", "")) if isinstance(algo, dict) else ""


def _host_bytes(module: Module, ins: Instruction) -> float:
    """Bytes a copy moves between device memory and host memory (S(5)), else 0."""
    if ins.opcode not in ("copy-start", "copy") or not ins.operands:
        return 0.0
    src = module.operand_shape(ins.operands[0])
    dst = result_shape(ins)
    if src is None or not src.is_array or not dst.is_array:
        return 0.0
    if (src.memory_space == HOST_MEMORY_SPACE) != (dst.memory_space == HOST_MEMORY_SPACE):
        return float(src.bytes)
    return 0.0


def _contracted(module: Module, mm: Instruction | None) -> int:
    return contracted_size(module, mm) if mm is not None and mm.opcode == "dot" else 0


def _group_traffic(module: Module, g: Group) -> Traffic:
    inside = {m.name for m in g.members}
    reads: dict[str, float] = {}
    for m in g.members:
        for k, op in enumerate(m.operands):
            if op.name in inside:
                continue
            src = module.find(op.name)
            shape = module.operand_shape(op)
            full = hbm_bytes(shape)
            if src is not None and src.opcode in ("constant", "iota"):
                full = 0.0 if src.opcode == "iota" else full
            if src is not None and src.opcode == "broadcast" and src.operands:
                full = hbm_bytes(module.operand_shape(src.operands[0]))  # recomputed: reads its scalar
            if k == 0 and m.opcode in SLICING_OPS:
                full = min(full, hbm_bytes(m.shape))
            if k == 0 and m.opcode == "dynamic-update-slice":
                full = 0.0  # updated in place
            reads[op.name] = max(reads.get(op.name, 0.0), full)
    written = 0.0
    for m in g.members:
        users = module.users(m)
        if m.is_root or any(u.name not in inside for u in users):
            if m.opcode == "dynamic-update-slice" and len(m.operands) > 1:
                written += hbm_bytes(module.operand_shape(m.operands[1]))
            else:
                written += hbm_bytes(m.shape)
    r = sum(reads.values())
    n = len(g.members)
    what = f"{n} ops grouped as one kernel: " if n > 1 else ""
    return Traffic(r, written, f"{what}{fmt_bytes(r)} read ({len(reads)} inputs) + {fmt_bytes(written)} written")


def costs(module: Module, *, emulate_fusion: bool | None = None) -> list[OpCost]:
    """Every op that runs, once per (op, enclosing loop), with its chip-independent cost.

    ``emulate_fusion`` groups unfused computations as a TPU/GPU compiler would (see
    :mod:`rooflens.cost.fuse`); by default it is on exactly when the module has no fusions yet.
    """
    if emulate_fusion is None:
        emulate_fusion = not any(i.opcode == "fusion" for i in module.instructions())
    out: list[OpCost] = []
    for comp, count in _executed(module):
        if emulate_fusion:
            rs = {i.name for i in comp.instructions
                  if i.opcode == "all-reduce" and _collective_fields(module, i)[0] == "reduce-scatter"}
            shards = frozenset(u.name for name in rs for u in module.users(name))
            for g in plan_groups(module, comp, passthrough=shards):
                root = g.root
                if root.opcode in ("while", "conditional", "call") or root.opcode in NO_VALUE:
                    continue
                total = Counts()
                for m in g.members:
                    total = total + instruction_counts(module, m)
                if root.name in rs:  # reads the partial sums, writes its 1/N shard
                    kind, n, cin, _ = _collective_fields(module, root)
                    traffic = Traffic(cin, cin / n, f"{fmt_bytes(cin)} read + {fmt_bytes(cin / n)} shard written")
                elif root.opcode.endswith("-start") or root.collective_kind or root.opcode.endswith("-done"):
                    traffic = instruction_traffic(module, root)
                else:
                    traffic = _group_traffic(module, g)
                category = _group_category(module, g)
                out.append(_op_cost(module, root, count, total, traffic, tuple(m.name for m in g.members), category))
        else:
            for ins in comp.instructions:
                if ins.opcode in ("while", "conditional", "call") or ins.opcode in NO_VALUE or ins.opcode == "bitcast":
                    continue
                out.append(_op_cost(module, ins, count, instruction_counts(module, ins),
                                    instruction_traffic(module, ins), (ins.name,), ins.category))
    return out


def _group_category(module: Module, g: Group) -> str:
    if len(g.members) == 1:
        return g.root.category
    for m in g.members:
        if m.category in ("matmul", "convolution"):
            return m.category
    return "fusion"


# -- pricing on a chip ---------------------------------------------------------------------------

def peak_for(chip: Chip, dtype: str, is_matmul: bool, precision: str) -> tuple[float, str, str]:
    """(FLOP/s, the peak's key, a note on the choice) for math in ``dtype`` on ``chip``."""
    peaks = chip.peak_flops_per_s
    key = "fp8" if dtype.startswith("f8") else DTYPE_PEAK_KEY.get(dtype, "fp32")
    note = ""
    if key == "fp32" and is_matmul:
        if chip.kind == "tpu":
            passes = PRECISION_PASSES.get(precision, 1)
            base = peaks.get("bf16", max(peaks.values()))
            return base / passes, "bf16", f"f32 matmul on TPU at precision {precision}: {passes} bf16 pass(es)"
        if chip.kind == "gpu" and chip.vendor == "nvidia" and precision == "default" and "tf32" in peaks:
            return peaks["tf32"], "tf32", "f32 matmul on an NVIDIA GPU at default precision runs in TF32"
    if key not in peaks:
        fallback = next((k for k in ("bf16", "fp16", "fp32") if k in peaks), max(peaks, key=peaks.get))
        note = f"no published {key} peak; priced at {fallback}"
        key = fallback
    return peaks[key], key, note


def price(op: OpCost, chip: Chip, topology: Topology | None = None, *, num_devices: int = 0) -> OpPrediction:
    """One op's roofline on one chip.

    ``topology`` is the TPU slice shape when known: a collective's group is then placed by its device
    ids. Without it, a TPU group is placed by its size on the chip's published slice for
    ``num_devices`` devices (the program's), or on one torus axis when there is none.
    """
    lines: list[str] = []
    peak, key, note = peak_for(chip, op.dtype, op.is_matmul, op.precision)
    measured = chip.matmul_rate(key, op.flops, op.contracted) if op.is_matmul and op.flops else None
    what = f"{key} peak"
    if measured:
        what = f"measured {key} matmul rate at this shape; best measured {fmt_g(peak)}"
        peak = measured
    t_math = op.flops / peak if op.flops and peak else 0.0
    if op.flops:
        lines.append(f"FLOPs: {op.flops_formula}")
        if op.model_flops and op.model_flops != op.flops:
            lines.append(f"model FLOPs (its dots and convolutions only, what MFU counts): {fmt_g(op.model_flops)}")
        lines.append(f"T_math = {fmt_g(op.flops)} FLOP / {fmt_g(peak)} FLOP/s ({what})"
                     f"{' [' + note + ']' if note else ''}"
                     f" = {fmt_g(t_math * 1e3)} ms")
    if op.transcendentals:
        lines.append(f"transcendentals: {fmt_g(op.transcendentals)} (not in FLOPs)")
    bw = chip.hbm_bytes_per_s or 0.0
    t_mem = op.bytes / bw if bw and op.bytes else 0.0
    if op.bytes:
        lines.append(f"bytes: {op.bytes_formula}")
        lines.append(f"T_mem = {fmt_g(op.bytes)} B / {fmt_g(bw)} B/s (HBM) = {fmt_g(t_mem * 1e3)} ms")
    t_comm, comm_bytes, cc = 0.0, 0.0, None
    if op.collective:
        span = None
        if chip.kind == "tpu" and op.xla_strategy.startswith("UniDirection1DRing"):
            span = Span(((op.group_size, op.group_size),), (), f"XLA's own choice, {op.xla_strategy} (backend_config): "
                        "one ring through the whole group, one direction", one_way=True)
        elif chip.kind == "tpu":
            if topology is not None and op.device_group:
                span = group_span(topology, op.device_group)
            else:
                span = place_group(chip, op.group_size, chip.default_slice(num_devices) if num_devices else None)
        cc = collective_cost(chip, op.collective, op.group_size, op.comm_in_bytes, op.comm_out_bytes, span)
        t_comm, comm_bytes = cc.t_comm_s, cc.comm_bytes
        lines.append(f"T_comm: {cc.formula} [{cc.algorithm}]")
    t_host = 0.0
    if op.host_bytes:
        pcie = chip.value("interconnect.pcie_bytes_per_s") or 0.0
        t_host = op.host_bytes / pcie if pcie else 0.0
        lines.append(f"T_host = {fmt_g(op.host_bytes)} B / {fmt_g(pcie)} B/s (PCIe, host ↔ device) = "
                     f"{fmt_g(t_host * 1e3)} ms"
                     if pcie else "host transfer: the chip has no published PCIe bandwidth, so it is not priced")
    overhead = chip.op_overhead_s
    terms = {"compute": t_math, "memory": t_mem, "communication": t_comm, "host-transfer": t_host}
    bound = max(terms, key=terms.get)
    t = terms[bound]
    if bound == "communication" and cc is not None and cc.latency_bound:
        bound = "latency"
    launch = chip.kernel_launch_s
    floor = ""
    if launch and not op.collective and 0 < t < launch:
        t, bound = launch, "overhead"
        floor = f"; below the kernel-launch floor: {fmt_g(launch * 1e6, 3)} µs"
    if overhead and overhead > t:
        bound = "overhead"
    if t == 0 and not overhead:
        bound = "none"
    t_pred = t + overhead
    extra = f" + per-op overhead {fmt_g(overhead * 1e6, 3)} µs" if overhead else ""
    times = f", × {op.count:g} executions" if op.count != 1 else ""
    host = ", T_host" if op.host_bytes else ""
    lines.append(f"t_pred = max(T_math, T_mem, T_comm{host}){extra}{floor} = {fmt_g(t_pred * 1e3)} ms → {bound}-bound"
                 f"{times}")
    return OpPrediction(
        name=op.name, opcode=op.opcode, category=op.category, named_scope=op.named_scope, count=op.count,
        flops=op.flops, bytes=op.bytes, comm_bytes=comm_bytes or op.host_bytes, t_math_s=t_math, t_mem_s=t_mem,
        t_comm_s=max(t_comm, t_host),
        t_pred_s=t_pred, bound=bound, peak_key=key, explanation=tuple(lines), members=op.members,
        model_flops=op.model_flops, hops=cc.hops if cc else 0, t_latency_s=cc.t_latency_s if cc else 0.0,
    )


def latency_assumptions(chip: Chip, num_devices: int = 0, topology: Topology | None = None) -> tuple[str, ...]:
    """The latency and placement rules a prediction on ``chip`` used, in words (for --explain)."""
    out = []
    if chip.kind == "tpu":
        hop = chip.ici_hop_latency_s
        out.append(f"collective latency: every ICI hop costs T_min = {fmt_g(hop * 1e6, 3)} µs (scaling book); a ring "
                   "collective takes max(hops × T_min, bytes / bandwidth), hops summed over the torus axes its group "
                   "spans; a point-to-point transfer takes hops × T_min + bytes / bandwidth" if hop else
                   "collective latency: the chip publishes no per-hop ICI latency, so collectives are bandwidth only")
        sl = chip.default_slice(num_devices) if num_devices else None
        if topology is None and sl:
            out.append(f"slice: the published {'x'.join(map(str, sl))} slice of {plural(num_devices, 'device')}; "
                       "each group is placed by its size on whole axes (give --topology to place groups by their "
                       "device ids)")
        out.append("kernel launch: no per-op launch cost is published for TPUs, so none is added")
    elif chip.kind == "gpu":
        lat = chip.collective_latency("ll")
        if lat:
            out.append(f"collective latency (NCCL/RCCL's model): base {fmt_g(lat[0] * 1e6, 3)} µs + "
                       f"{fmt_g(lat[1] * 1e6, 3)} µs "
                       "per "
                       f"{chip.scaleup_link} ring step (LL protocol; Simple has more latency and the whole bandwidth; "
                       "the cheaper is taken), added to bytes / bandwidth")
        else:
            out.append("collective latency: the chip publishes no collective latency, so collectives are bandwidth "
                       "only")
        if chip.kernel_launch_s:
            out.append(f"kernel launch: a non-collective op takes at least {fmt_g(chip.kernel_launch_s * 1e6, 3)} µs "
                       f"({chip.source('overheads.kernel_launch_s')})")
        else:
            out.append("kernel launch: the chip publishes no launch cost, so none is added")
    return tuple(out)


def _totals(ops: list[OpPrediction], key) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for o in ops:
        out[key(o) or "(none)"] += o.total_s
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def predict_module(module: Module, chip: Chip, *, source: str = "", emulate_fusion: bool | None = None,
                   assumptions: tuple[str, ...] = (), topology: Topology | str | None = None) -> Prediction:
    """Price every op of ``module`` on ``chip``.

    ``topology`` is the TPU slice shape (``"4x4"``): collectives are then priced on the physical
    axes their device groups span, with wraparound only where the whole axis is in the group.
    Without it a TPU program runs on the chip's published slice for its device count, when there is
    one (a v5e program of 8 devices on the 2x4 slice), its groups placed by size on whole axes.
    """
    topo = parse_topology(topology)
    if topo is not None and topo.num_devices < module.num_devices:
        raise RooflensError(f"the topology {topo} has {topo.num_devices} devices but the program runs on "
                            f"{module.num_devices}.")
    ops = [price(c, chip, topo, num_devices=module.num_devices) for c in costs(module, emulate_fusion=emulate_fusion)]
    ops = [o for o in ops if o.bound != "none" or o.flops or o.bytes]
    extra = tuple(a for a in latency_assumptions(chip, module.num_devices, topo) if a not in assumptions)
    return Prediction(
        chip=chip.name, device_unit=chip.device_unit, module=module.name, source=source, ops=tuple(ops),
        num_devices=module.num_devices, assumptions=tuple(assumptions) + extra,
        time_by_category_s=_totals(ops, lambda o: o.category),
        time_by_scope_s=_totals(ops, lambda o: o.named_scope),
        time_by_bound_s=_totals(ops, lambda o: o.bound),
    )
