"""Bytes one op moves between its kernel and device memory (HBM).

The boundary is the op as it runs: a fusion reads its operands once and writes its output once;
what happens inside stays in registers/VMEM. Rules:

* sizes are *padded* sizes when the layout is tiled (``bf16[3,5]{1,0:T(8,128)(2,1)}`` moves 2048
  bytes, not 30); arrays placed in on-chip memory (TPU ``S(1)``, VMEM) or in host memory
  (``S(5)``, offloaded; priced over PCIe by the model) are not HBM traffic;
* ops that only rename buffers move nothing: parameter, constant, tuple, get-tuple-element,
  bitcast, the ``-done`` half of an async pair, control flow (its bodies are priced op by op);
* slicing reads only what it keeps: slice, dynamic-slice and gather read their output's size,
  and a fusion parameter that is only sliced inside the body is read only as much as the slices;
* in-place updates write only the update: dynamic-update-slice and scatter (alone or as a fusion
  root) read and write the update region, not the whole buffer (a scatter also reads the region it
  combines into).
"""

from __future__ import annotations

from dataclasses import dataclass

from rooflens.cost.kernels import kernel_cost
from rooflens.hlo import Instruction, Module, Shape
from rooflens.hlo.shape import HOST_MEMORY_SPACE, VMEM_MEMORY_SPACE
from rooflens.units import fmt_bytes

FREE = frozenset("""
parameter constant tuple get-tuple-element bitcast after-all add-dependency opt-barrier partition-id replica-id
domain while conditional call get-dimension-size set-dimension-size all-gather-done all-reduce-done
collective-permute-done copy-done async-done async-update send-done recv-done reshape
""".split())
SLICING = frozenset(["slice", "dynamic-slice", "gather"])
OFF_HBM = frozenset([VMEM_MEMORY_SPACE, HOST_MEMORY_SPACE])


@dataclass(frozen=True, slots=True)
class Traffic:
    read_bytes: float = 0.0
    written_bytes: float = 0.0
    formula: str = ""

    @property
    def bytes(self) -> float:
        return self.read_bytes + self.written_bytes


def hbm_bytes(shape: Shape | None) -> float:
    """Bytes a value occupies in device memory (padded when tiled; 0 when it lives on chip)."""
    if shape is None:
        return 0.0
    return float(sum(s.padded_bytes for s in shape.leaves() if s.is_array and s.memory_space not in OFF_HBM))


def _fusion_param_reads(module: Module, ins: Instruction) -> list[float]:
    """Bytes read of each fusion operand: all of it, or only what the body slices out of it."""
    comps = module.called(ins)
    body = comps[0] if comps else None
    reads: list[float] = []
    params = {}
    if body is not None:
        params = {i.parameter_number: i for i in body.instructions if i.opcode == "parameter"}
    root = body.root if body is not None else None
    for k, op in enumerate(ins.operands):
        full = hbm_bytes(module.operand_shape(op))
        p = params.get(k)
        if p is None:
            reads.append(full)
            continue
        users = module.users(p)
        if users and all(u.opcode in SLICING and u.operands and u.operands[0].name == p.name for u in users):
            reads.append(min(full, sum(hbm_bytes(u.shape) for u in users)))
        elif (root is not None and root.opcode in IN_PLACE and len(root.operands) > 1
              and root.operands[0].name == p.name and users == [root]):
            # the buffer updated in place is not read, bar the region a scatter combines its updates into
            reads.append(min(full, _update_bytes(module, root)) if root.opcode == "scatter" else 0.0)
        else:
            reads.append(full)
    return reads


#: ops that update their first operand's buffer in place, writing only their update
IN_PLACE = ("dynamic-update-slice", "scatter")


def _update_bytes(module: Module, ins: Instruction) -> float:
    """The bytes an in-place update writes: a dynamic-update-slice's update (its second operand), a scatter's
    updates (its last)."""
    return hbm_bytes(module.operand_shape(ins.operands[1 if ins.opcode == "dynamic-update-slice" else -1]))


def _fusion_write(module: Module, ins: Instruction) -> float:
    comps = module.called(ins)
    root = comps[0].root if comps else None
    if root is not None and root.opcode in IN_PLACE and len(root.operands) > (1 if root.opcode != "scatter" else 2):
        return min(hbm_bytes(ins.shape), _update_bytes(module, root))
    return hbm_bytes(ins.shape)


def instruction_traffic(module: Module, ins: Instruction) -> Traffic:
    """HBM bytes read and written by one top-level op."""
    op = ins.opcode
    if op in FREE:
        return Traffic()
    out = hbm_bytes(ins.shape)
    if op == "fusion":
        reads = _fusion_param_reads(module, ins)
        write = _fusion_write(module, ins)
        r = sum(reads)
        return Traffic(r, write, f"{fmt_bytes(r)} read ({len(reads)} operands) + {fmt_bytes(write)} written")
    if op in SLICING:
        idx = sum(hbm_bytes(module.operand_shape(o)) for o in ins.operands[1:])
        return Traffic(out + idx, out, f"{fmt_bytes(out)} sliced out + {fmt_bytes(out)} written")
    if op == "dynamic-update-slice" and len(ins.operands) > 1:
        upd = _update_bytes(module, ins)
        return Traffic(upd, upd, f"{fmt_bytes(upd)} update read + written in place")
    if op == "scatter" and len(ins.operands) >= 3:
        upd = _update_bytes(module, ins)
        idx = hbm_bytes(module.operand_shape(ins.operands[1]))
        return Traffic(2 * upd + idx, upd, f"{fmt_bytes(upd)} updates, read-modify-write in place")
    if op == "copy-start" and ins.operands and ins.shape.is_tuple and ins.shape.tuple_shapes:
        # (destination, source alias, context): reads the source, writes the destination; a side
        # in host memory (S(5)) or on chip costs no HBM traffic
        r = hbm_bytes(module.operand_shape(ins.operands[0]))
        w = hbm_bytes(result_shape(ins))
        return Traffic(r, w, f"{fmt_bytes(r)} read + {fmt_bytes(w)} written in device memory")
    if op.endswith("-start"):
        # an async collective's start reads its input and writes its output buffer
        operands = ins.operands
        r = sum(hbm_bytes(module.operand_shape(o)) for o in operands)
        w = hbm_bytes(result_shape(ins))
        return Traffic(r, w, f"{fmt_bytes(r)} read + {fmt_bytes(w)} written")
    if op == "custom-call" and (kc := kernel_cost(module, ins)) is not None:  # known kernels, no workspace
        return Traffic(kc.read_bytes, kc.written_bytes, kc.bytes_formula)
    reads = [hbm_bytes(module.operand_shape(o)) for o in ins.operands]
    r = sum(reads)
    return Traffic(r, out, f"{fmt_bytes(r)} read ({len(reads)} operands) + {fmt_bytes(out)} written")


def result_shape(ins: Instruction) -> Shape:
    """The result an op produces: an async start's ``(operands, results, …)`` tuple gives its results
    (an all-reduce-start returns its result directly; a copy-start's tuple starts with it)."""
    shape = ins.shape
    if ins.opcode == "copy-start" and shape.is_tuple and shape.tuple_shapes:
        return shape.tuple_shapes[0]  # (destination, source alias, context)
    if ins.opcode.endswith("-start") and ins.opcode != "all-reduce-start" and shape.is_tuple and len(
            shape.tuple_shapes) >= 2:
        return shape.tuple_shapes[1]
    return shape
