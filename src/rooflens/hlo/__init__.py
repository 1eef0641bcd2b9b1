"""Read HLO like an expert: modules, shapes, layouts, tiling, shardings and collectives.

>>> import rooflens as rl
>>> m = rl.hlo.parse(text)
>>> rl.hlo.parse_shape("bf16[3,5]{1,0:T(8,128)(2,1)}").padded_bytes
2048
"""

from rooflens.hlo.attrs import ReplicaGroups, Sharding
from rooflens.hlo.errors import HloParseError, HloWarning
from rooflens.hlo.module import (
    CollectiveInfo,
    Computation,
    Instruction,
    Module,
    Operand,
    SourceFrame,
    TrueShape,
    named_scope_of,
)
from rooflens.hlo.opcodes import CATEGORIES
from rooflens.hlo.parser import parse, parse_instruction
from rooflens.hlo.shape import ELEMENT_BITS, Layout, Shape, parse_shape

__all__ = [
    "CATEGORIES", "ELEMENT_BITS", "CollectiveInfo", "Computation", "HloParseError", "HloWarning",
    "Instruction", "Layout", "Module", "Operand", "ReplicaGroups", "Shape", "Sharding",
    "SourceFrame", "TrueShape", "named_scope_of", "parse", "parse_instruction", "parse_shape",
]
