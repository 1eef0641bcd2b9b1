"""Group an unfused computation into the kernels a TPU/GPU compiler would make of it.

A prediction for a chip you do not have starts from the module right after SPMD partitioning:
it has the program's own dtypes and its collectives, but no fusion yet (XLA:CPU's fused module
would misstate both). Pricing each elementwise op there as its own HBM round trip would make
every activation chain look memory-bound many times over, so ops are grouped the way XLA's
producer–consumer fusion does, before bytes are counted:

* a cheap op (elementwise, broadcast, convert, reshape, transpose, slice, pad, concatenate,
  reduce, copy, …) joins the group of its users when all of its users are in one group
  (it is fused into its consumer: a transpose or convert into the matmul that reads it, an
  activation chain into the reduction or op that ends it);
* a broadcast of a scalar, an iota or a constant is recomputed inside every group that uses it
  (XLA duplicates them), so it never costs a read of its full size;
* matmuls, convolutions, collectives, custom calls, sorts and control flow each start their own
  group; they absorb their cheap producers but are never absorbed.

A group is then priced like a fusion: its FLOPs are the sum of its members', its bytes are the
values it reads from outside (once each) and the values it leaves for later users.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rooflens.hlo import Computation, Instruction, Module

FUSIBLE = frozenset("""
abs add and atan2 cbrt ceil clamp compare complex convert cosine count-leading-zeros divide erf exponential
exponential-minus-one floor imag is-finite log log-plus-one logistic maximum minimum multiply negate not or
popcnt power real reduce-precision remainder round-nearest-afz round-nearest-even rsqrt select shift-left
shift-right-arithmetic shift-right-logical sign sine sqrt subtract tan tanh xor bitcast-convert
broadcast reshape bitcast transpose copy slice dynamic-slice concatenate pad reverse iota reduce
reduce-window gather dynamic-update-slice map
""".split())
ABSORBERS = FUSIBLE | {"dot", "convolution"}
DUPLICATED = frozenset(["constant", "iota"])
NO_VALUE = frozenset(["parameter", "get-tuple-element", "tuple", "constant", "after-all", "partition-id",
                      "replica-id"])


@dataclass
class Group:
    """One kernel-to-be: the op that produces its result (``root``) and the ops fused into it."""

    root: Instruction
    members: list[Instruction] = field(default_factory=list)  # in program order, root last

    @property
    def name(self) -> str:
        return self.root.name


def _is_duplicated(module: Module, ins: Instruction) -> bool:
    if ins.opcode in DUPLICATED:
        return True
    if ins.opcode == "broadcast" and ins.operands:
        src = module.find(ins.operands[0].name)
        shape = module.operand_shape(ins.operands[0])
        return (shape is not None and shape.is_array and shape.num_elements <= 1) or (
            src is not None and src.opcode in DUPLICATED)
    return False


def plan_groups(module: Module, comp: Computation, passthrough: frozenset[str] = frozenset()) -> list[Group]:
    """The groups of one unfused computation, in program order of their roots.

    ``passthrough`` names ops that will not exist as kernels (a ``copy`` before layout
    assignment is elided; the shard a reduce-scatter keeps is part of it): they join no group.
    """
    group_of: dict[str, Group] = {}
    groups: list[Group] = []
    for ins in reversed(comp.instructions):
        if ins.opcode in NO_VALUE or ins.opcode == "copy" or ins.name in passthrough:
            continue
        users = [u for u in module.users(ins) if u.computation is comp]
        if ins.opcode in FUSIBLE and users and not ins.is_root:
            if _is_duplicated(module, ins):
                continue  # recomputed inside each user's group: priced as part of it
            targets = {id(group_of.get(u.name)) for u in users}
            g = group_of.get(users[0].name)
            if (g is not None and len(targets) == 1 and all(u.name in group_of for u in users)
                    and g.root.opcode in ABSORBERS):
                g.members.append(ins)
                group_of[ins.name] = g
                continue
        g = Group(ins, [ins])
        group_of[ins.name] = g
        groups.append(g)
    for g in groups:
        g.members.reverse()
    groups.reverse()
    return groups
