"""Operand reads a GPU's L2 cache still holds when the op runs: bytes the HBM roofline overcounts.

The HBM roofline (:mod:`rooflens.cost.traffic`) takes every operand from device memory. On a GPU
the last-level cache is tens of MiB (A100: 40 MiB, H100: 50 MiB, MI300X: 32 MiB; the catalogue's
``memory.l2_bytes``), so an activation written by the op just before is often read back from L2:
a layer norm reading the 25 MB f32 output of the residual add that precedes it runs at 2 TB/s on an
A100 whose HBM gives 1.555 TB/s (the Pax FSDP nsys-jax archive, ``loop_convert_fusion.28``).

:func:`l2_resident_reads` replays a program's schedule through a least-recently-used cache of the
chip's L2 size: every op that moves data touches its operand buffers and then its result buffers;
an operand is resident when the bytes of the distinct buffers touched since it was last touched,
plus its own, fit in the cache (LRU stack distance: Mattson et al., "Evaluation techniques for
storage hierarchies", IBM Systems Journal 9(2), 1970, §2). The cache model is the one the stack
distance assumes: fully associative, line-granular misses ignored, writes allocated (both NVIDIA's
and AMD's L2 are write-back; the A100 whitepaper, "L2 cache" section; CDNA3 white paper, "Infinity
Cache and L2" section). A while body is replayed twice and its second pass kept: the steady state
of a loop, whose first iteration starts with what the previous one left.

What comes back is an upper bound on the L2 hits; the analysis uses it only where an op beats its
HBM roofline, to price it with those reads taken off HBM (a lower bound on its time).

Pure functions of a module and a cache size.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

from rooflens.cost.traffic import FREE, hbm_bytes
from rooflens.hlo import Instruction, Module
from rooflens.units import fmt_bytes

#: ops that name a buffer another op wrote: reading through them reads that buffer
_ALIAS = frozenset(["bitcast", "get-tuple-element", "reshape", "copy-done"])

Buffer = tuple[str, tuple[int, ...]]


def _buffer(module: Module, name: str, depth: int = 0) -> list[Buffer]:
    """The buffers an operand names: through bitcasts and tuple elements to the op that wrote them."""
    ins = module.find(name)
    if ins is None or depth > 32:
        return [(name, ())]
    if ins.opcode in ("bitcast", "reshape", "copy-done") and ins.operands:
        return _buffer(module, ins.operands[0].name, depth + 1)
    if ins.opcode == "get-tuple-element" and ins.operands:
        index = int(ins.attrs.get("index", 0) or 0)
        inner = _buffer(module, ins.operands[0].name, depth + 1)
        return [(b, path + (index,)) for b, path in inner]
    if ins.opcode == "tuple":
        return [b for o in ins.operands for b in _buffer(module, o.name, depth + 1)]
    return [(name, ())]


def _written(ins: Instruction) -> list[tuple[Buffer, float]]:
    """The result buffers an op writes, with their HBM sizes (each element of a tuple result its own)."""
    if ins.shape.is_tuple:
        return [((ins.name, (k,)), hbm_bytes(s)) for k, s in enumerate(ins.shape.tuple_shapes)]
    return [((ins.name, ()), hbm_bytes(ins.shape))]


def _size(module: Module, buf: Buffer) -> float:
    ins = module.find(buf[0])
    if ins is None:
        return 0.0
    shape = ins.shape
    for k in buf[1]:
        if not shape.is_tuple or k >= len(shape.tuple_shapes):
            return 0.0
        shape = shape.tuple_shapes[k]
    return hbm_bytes(shape)


class _Lru:
    """Buffers by last touch, oldest first, with their sizes."""

    def __init__(self, capacity_bytes: float) -> None:
        self.capacity_bytes = capacity_bytes
        self.order: OrderedDict[Buffer, float] = OrderedDict()
        self.total_bytes = 0.0

    def resident(self, buf: Buffer) -> bool:
        """Whether ``buf`` is still held: it and what was touched after it fit in the cache."""
        if buf not in self.order:
            return False
        since = 0.0
        for other in reversed(self.order):
            since += self.order[other]
            if since > self.capacity_bytes:
                return False
            if other == buf:
                return True
        return False

    def touch(self, buf: Buffer, size_bytes: float) -> None:
        self.total_bytes += size_bytes - self.order.pop(buf, 0.0)
        self.order[buf] = size_bytes
        while len(self.order) > 1 and self.total_bytes > 4 * self.capacity_bytes:
            _, size = self.order.popitem(last=False)  # far out of reach: forgotten, to keep the replay linear
            self.total_bytes -= size


def _replay(module: Module, instructions: list[Instruction], lru: _Lru, out: dict[str, float] | None) -> None:
    for ins in instructions:
        if ins.opcode in FREE or ins.opcode in _ALIAS:
            continue
        reads = [b for o in ins.operands for b in _buffer(module, o.name)]
        hit = sum(_size(module, b) for b in dict.fromkeys(reads) if lru.resident(b))
        if out is not None and hit:
            out[ins.name] = hit
        for b in reads:
            lru.touch(b, _size(module, b))
        for b, size in _written(ins):
            lru.touch(b, size)


def l2_resident_reads(module: Module, l2_bytes: float) -> dict[str, float]:
    """Bytes of each op's operand buffers that an LRU cache of ``l2_bytes`` still holds, by op name
    (ops with none are left out; whole buffers: :func:`from_l2` caps them at what the op reads). ENTRY is
    replayed in schedule order; each while body on its own."""
    if not l2_bytes or module.entry is None:
        return {}
    out: dict[str, float] = {}
    _replay(module, module.schedule(), _Lru(l2_bytes), out)
    for comp in module.computations.values():
        if comp.kind == "while body":
            lru = _Lru(l2_bytes)
            _replay(module, comp.instructions, lru, None)  # the first iteration warms the cache
            _replay(module, comp.instructions, lru, out)
    return out


def l2_capacity_bytes(chip) -> float:
    """The chip's last-level cache on a GPU (``memory.l2_bytes``, cited in its catalogue file); 0 elsewhere:
    a TPU's VMEM is managed by the compiler and already shows in the HLO's memory spaces."""
    return float(chip.value("memory.l2_bytes") or 0.0) if chip.kind == "gpu" else 0.0


def from_l2(op, resident_bytes: float, l2_bytes: float):
    """An :class:`~rooflens.cost.model.OpCost` with the reads its L2 holds taken off HBM (never more than
    it reads: a sliced operand is read only in part)."""
    taken = min(resident_bytes, op.read_bytes)
    return replace(op, read_bytes=op.read_bytes - taken, bytes_formula=(
        f"{op.bytes_formula}, less {fmt_bytes(taken)} of operands the ops just before wrote or read and the "
        f"{fmt_bytes(l2_bytes)} L2 still holds"))
