"""HLO shapes: element types, dimensions, layouts, tiling and the padding it causes.

A shape as XLA prints it::

    bf16[32,32,8192]{2,1,0:T(8,128)(2,1)S(1)}
    (f32[4,32]{1,0}, s32[], token[])
    s32[<=8,4]{1,0}

The layout in braces lists dimensions from minor to major (read it right to left: the
last number is the most major dimension). After the colon come the tiles ``T(…)(…)``,
the element size in bits ``E(n)``, the memory space ``S(n)`` and a few rarer fields.

``Shape.bytes`` is the logical size (elements × bits / 8); ``Shape.padded_bytes`` is what
the array occupies once its tiles are padded out, which is what HBM/VMEM really holds.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import lru_cache

from rooflens.hlo.errors import HloParseError, HloTooDeepError

VMEM_MEMORY_SPACE = 1  # TPU S(1): on-chip vector memory
HOST_MEMORY_SPACE = 5  # TPU S(5): pinned host memory (host offload)

# Bits per element of every XLA primitive type (xla/xla_data.proto, PrimitiveType).
ELEMENT_BITS: dict[str, int] = {
    "pred": 8,
    "s1": 1, "s2": 2, "s4": 4, "s8": 8, "s16": 16, "s32": 32, "s64": 64,
    "u1": 1, "u2": 2, "u4": 4, "u8": 8, "u16": 16, "u32": 32, "u64": 64,
    "f16": 16, "bf16": 16, "f32": 32, "f64": 64,
    "c64": 64, "c128": 128,
    "f8e5m2": 8, "f8e4m3": 8, "f8e4m3fn": 8, "f8e4m3b11fnuz": 8, "f8e3m4": 8,
    "f8e5m2fnuz": 8, "f8e4m3fnuz": 8, "f8e8m0fnu": 8,
    "f6e2m3fn": 6, "f6e3m2fn": 6,
    "f4e2m1fn": 4,
    "token": 0, "opaque": 0,
}

# The NumPy / ml_dtypes name of each HLO type that JAX arrays take (``jnp.dtype(NUMPY_NAMES["bf16"])``).
NUMPY_NAMES: dict[str, str] = {
    "bf16": "bfloat16", "f16": "float16", "f32": "float32", "f64": "float64", "s8": "int8", "s16": "int16",
    "s32": "int32", "s64": "int64", "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "pred": "bool", "f8e4m3fn": "float8_e4m3fn", "f8e5m2": "float8_e5m2", "c64": "complex64",
    "c128": "complex128",
}
# Other spellings people and chip sheets use → the HLO name (chip peaks say fp32/fp16/fp8/int8).
DTYPE_ALIASES: dict[str, str] = {
    **{v: k for k, v in NUMPY_NAMES.items()}, "fp64": "f64", "fp32": "f32", "tf32": "f32", "fp16": "f16",
    "f8": "f8e4m3fn", "fp8": "f8e4m3fn", "int8": "s8", "int32": "s32",
}


def element_bytes(dtype: str) -> float | None:
    """Bytes per element of an HLO type or one of its aliases (``bfloat16``, ``fp32``), None if unknown."""
    name = DTYPE_ALIASES.get(dtype, dtype)
    return ELEMENT_BITS[name] / 8 if name in ELEMENT_BITS else None


# Memory spaces as TPU HLO prints them in S(n) (scaling book, "How to profile TPU programs").
MEMORY_SPACE_NAMES = {
    0: "default device memory (HBM on TPU/GPU, RAM on CPU)",
    1: "VMEM (on-chip vector memory)",
    2: "SMEM/semaphore memory",
    3: "CMEM/other on-chip memory",
    5: "host memory (offloaded)",
}

COMBINE_DIM = -1  # a "*" in a tile: the tile spans the whole (combined) dimension


@dataclass(frozen=True, slots=True)
class Layout:
    """A printed layout such as ``{2,1,0:T(8,128)(2,1)S(1)}``."""

    minor_to_major: tuple[int, ...]
    tiles: tuple[tuple[int, ...], ...] = ()
    element_size_bits: int | None = None  # E(n): packed sub-byte storage
    memory_space: int = 0  # S(n)
    tail_padding_alignment: int | None = None  # L(n), in elements
    extra: tuple[str, ...] = ()  # fields kept verbatim (D(…), P(…), SC(…), M(…), #(…), *(…))
    text: str = ""

    @property
    def major_to_minor(self) -> tuple[int, ...]:
        return tuple(reversed(self.minor_to_major))

    def __str__(self) -> str:
        return self.text or "{" + ",".join(map(str, self.minor_to_major)) + "}"


@dataclass(frozen=True, slots=True)
class Shape:
    """An array shape, a tuple of shapes, or a token."""

    dtype: str  # "bf16", "f32", …, or "tuple" / "token"
    dims: tuple[int, ...] = ()  # bound of each dimension (-1 for an unbounded "?")
    layout: Layout | None = None
    dynamic: tuple[bool, ...] = ()  # True where the dimension is printed "<=n" or "?"
    tuple_shapes: tuple[Shape, ...] = ()
    text: str = field(default="", compare=False)

    # -- kinds -------------------------------------------------------------------------
    @property
    def is_tuple(self) -> bool:
        return self.dtype == "tuple"

    @property
    def is_array(self) -> bool:
        return self.dtype not in ("tuple", "token", "opaque")

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def bits_per_element(self) -> int:
        return ELEMENT_BITS.get(self.dtype, 0)

    @property
    def num_elements(self) -> int:
        if not self.is_array:
            return 0
        return math.prod(max(d, 0) for d in self.dims)

    @property
    def memory_space(self) -> int:
        return self.layout.memory_space if self.layout else 0

    def leaves(self) -> list[Shape]:
        """The array (and token) shapes of a tuple, depth-first; ``[self]`` for an array."""
        if not self.is_tuple:
            return [self]
        out: list[Shape] = []
        for s in self.tuple_shapes:
            out.extend(s.leaves())
        return out

    # -- sizes -------------------------------------------------------------------------
    @property
    def bytes(self) -> int:
        """Logical size: elements × bits per element, rounded up to whole bytes."""
        if self.is_tuple:
            return sum(s.bytes for s in self.tuple_shapes)
        return (self.num_elements * self.bits_per_element + 7) // 8

    @property
    def padded_bytes(self) -> int:
        """Physical size once the layout's tiles are padded out (equals ``bytes`` untiled)."""
        if self.is_tuple:
            return sum(s.padded_bytes for s in self.tuple_shapes)
        if not self.is_array:
            return 0
        return (self.padded_elements * self.storage_bits_per_element + 7) // 8

    @property
    def storage_bits_per_element(self) -> int:
        """Bits each element occupies in memory: E(n) when packed, else at least a byte."""
        if self.layout and self.layout.element_size_bits:
            return self.layout.element_size_bits
        bits = self.bits_per_element
        return max(bits, 8) if bits else 0  # unpacked sub-byte types take a byte (as XLA)

    @property
    def physical_dims(self) -> tuple[int, ...]:
        """Dimension sizes in memory order, major to minor."""
        if self.layout and len(self.layout.minor_to_major) == len(self.dims):
            return tuple(max(self.dims[i], 0) for i in self.layout.major_to_minor)
        return tuple(max(d, 0) for d in self.dims)

    @property
    def padded_elements(self) -> int:
        return tiled_element_count(self.physical_dims, self.layout.tiles if self.layout else ())

    def padded_physical_dims(self) -> tuple[int, ...]:
        """Major-to-minor dims after the first (outer) tile pads them; untiled: as is."""
        dims = list(self.physical_dims)
        if not (self.layout and self.layout.tiles):
            return tuple(dims)
        outer, counts, tile_dims = _tile_once(dims, self.layout.tiles[0])
        return tuple(outer + [c * t for c, t in zip(counts, tile_dims)])

    # -- printing ----------------------------------------------------------------------
    def dims_str(self) -> str:
        parts = []
        for i, d in enumerate(self.dims):
            dyn = self.dynamic[i] if i < len(self.dynamic) else False
            parts.append("?" if d < 0 else (f"<={d}" if dyn else str(d)))
        return f"{self.dtype}[{','.join(parts)}]"

    def __str__(self) -> str:
        if self.text:
            return self.text
        if self.is_tuple:
            return "(" + ", ".join(str(s) for s in self.tuple_shapes) + ")"
        return self.dims_str() + (str(self.layout) if self.layout else "")


def tiled_element_count(dims_major_to_minor: tuple[int, ...], tiles) -> int:
    """Number of element slots after applying XLA tiles in order.

    Each tile covers the minor-most dimensions of the current shape (the shape is padded
    with leading 1s when the tile has more dimensions). A dimension of size ``d`` tiled by
    ``t`` becomes ``ceil(d/t)`` tiles of ``t``; the next tile then applies to those tile
    dimensions. So ``bf16[3,5]`` under ``T(8,128)(2,1)`` becomes 1×1 tiles of 8×128, each
    made of 4×128 pairs: 1024 slots, 2048 bytes.
    """
    shape = list(dims_major_to_minor)
    for tile in tiles:
        if tile:
            outer, counts, tile_dims = _tile_once(shape, tile)
            shape = outer + counts + tile_dims
    return math.prod(shape) if shape else 1


def _tile_once(shape: list[int], tile: tuple[int, ...]) -> tuple[list[int], list[int], list[int]]:
    """One tiling step: (untouched major dims, tile counts, tile dims) of the minor dims."""
    k = len(tile)
    if k > len(shape):
        shape = [1] * (k - len(shape)) + shape
    outer, inner = shape[:-k], shape[-k:]
    counts, tile_dims = [], []
    for d, t in zip(inner, tile):
        if t == COMBINE_DIM or t <= 0:
            counts.append(1)
            tile_dims.append(d)
        else:
            counts.append(-(-d // t))
            tile_dims.append(t)
    return outer, counts, tile_dims


# --- parsing ------------------------------------------------------------------------------

_ARRAY_RE = re.compile(r"([a-z][a-z0-9]*)\[([^\]\[]*)\]")
# An array shape with its optional layout, as one regex fragment (the parser reuses it).
ARRAY_SHAPE_PATTERN = r"[a-z][a-z0-9]*\[[^\]\[]*\](?:\{[^{}]*\})?"
_LAYOUT_ITEM_RE = re.compile(r"([A-Z#*]*)\(")
COMMENT_RE = re.compile(r"/\*.*?\*/")  # XLA prints /*index=5*/ in long tuples and operand lists


def _parse_layout(text: str) -> Layout:
    """Parse the inside of a layout's braces (without the braces)."""
    head, colon, tail = text.partition(":")
    head = head.strip()
    try:
        m2m = tuple(int(x) for x in head.split(",")) if head else ()
    except ValueError:
        raise HloParseError(f"bad layout {{{text}}}: minor-to-major must be integers") from None
    tiles: list[tuple[int, ...]] = []
    esize = None
    mspace = 0
    tail_align = None
    extra: list[str] = []
    pos = 0
    last = ""
    while colon and pos < len(tail):
        m = _LAYOUT_ITEM_RE.match(tail, pos)
        if not m:
            raise HloParseError(f"bad layout {{{text}}} at {tail[pos:pos + 12]!r}")
        letters = m.group(1) or (last if last == "T" else "")
        depth, j = 1, m.end()
        while j < len(tail) and depth:
            c = tail[j]
            depth += c == "("
            depth -= c == ")"
            j += 1
        if depth:
            raise HloParseError(f"bad layout {{{text}}}: unbalanced parentheses")
        inner = tail[m.end():j - 1]
        if letters == "T":
            try:
                tiles.append(tuple(COMBINE_DIM if x.strip() == "*" else int(x) for x in inner.split(",")))
            except ValueError:
                raise HloParseError(f"bad tile T({inner}) in layout {{{text}}}") from None
        elif letters in ("E", "S", "L") and inner.strip().lstrip("-").isdigit():
            v = int(inner)
            if letters == "E":
                esize = v
            elif letters == "S":
                mspace = v
            else:
                tail_align = v
        else:
            if not letters:
                raise HloParseError(f"bad layout {{{text}}}: parenthesis without a field letter")
            extra.append(tail[pos:j])
        last = letters
        pos = j
    return Layout(m2m, tuple(tiles), esize, mspace, tail_align, tuple(extra), "{" + text + "}")


def _parse_dims(text: str, full: str) -> tuple[tuple[int, ...], tuple[bool, ...]]:
    if not text:
        return (), ()
    dims, dyn = [], []
    any_dyn = False
    for part in text.split(","):
        part = part.strip()
        if part.startswith("<="):
            part = part[2:]
            dyn.append(True)
            any_dyn = True
        elif part == "?":
            dims.append(-1)
            dyn.append(True)
            any_dyn = True
            continue
        else:
            dyn.append(False)
        if not part.isdigit():
            raise HloParseError(f"bad dimension {part!r} in shape {full!r}")
        dims.append(int(part))
    return tuple(dims), (tuple(dyn) if any_dyn else ())


MAX_TUPLE_DEPTH = 64  # XLA's own tuples nest a few levels; deeper is not a program's shape


def read_shape(text: str, pos: int = 0, depth: int = 0) -> tuple[Shape, int]:
    """Read one shape starting at ``text[pos]``; return it and the position after it.

    Tuples nested deeper than :data:`MAX_TUPLE_DEPTH` are refused, so the recursion here (and in
    every walk over a Shape) is bounded whatever the input.
    """
    n = len(text)
    while pos < n and text[pos] == " ":
        pos += 1
    if pos < n and text[pos] == "(":
        start = pos
        if depth >= MAX_TUPLE_DEPTH:
            raise HloTooDeepError(f"tuple shape nested more than {MAX_TUPLE_DEPTH} levels deep")
        pos += 1
        elems: list[Shape] = []
        while True:
            while pos < n and text[pos] in " ,":
                pos += 1
            if pos < n and text[pos] == ")":
                pos += 1
                break
            if pos >= n:
                raise HloParseError(f"unterminated tuple shape {text[start:start + 60]!r}")
            s, pos = read_shape(text, pos, depth + 1)
            elems.append(s)
        return Shape("tuple", tuple_shapes=tuple(elems), text=text[start:pos]), pos
    m = _ARRAY_RE.match(text, pos)
    if not m:
        raise HloParseError(f"expected a shape at {text[pos:pos + 40]!r}")
    dtype = m.group(1)
    if dtype not in ELEMENT_BITS:
        raise HloParseError(f"unknown element type {dtype!r}")
    dims, dyn = _parse_dims(m.group(2), text)
    end = m.end()
    layout = None
    if end < n and text[end] == "{":
        close = text.find("}", end)
        if close < 0:
            raise HloParseError(f"unterminated layout in {text[pos:pos + 60]!r}")
        layout = _parse_layout(text[end + 1:close])
        if layout.minor_to_major and len(layout.minor_to_major) != len(dims):
            raise HloParseError(f"layout {layout} does not match the rank of {text[pos:end]}")
        end = close + 1
    return Shape(dtype, dims, layout, dyn, text=text[pos:end]), end


@lru_cache(maxsize=1 << 16)
def parse_shape(text: str) -> Shape:
    """Parse a printed shape such as ``bf16[3,5]{1,0:T(8,128)(2,1)}``.

    Raises :class:`HloParseError` when the text is not one complete shape.
    """
    if not isinstance(text, str):
        raise HloParseError(f"a shape must be text, not {type(text).__name__}")
    s = text.strip()
    if "/*" in s:
        s = COMMENT_RE.sub("", s)
    shape, end = read_shape(s, 0)
    if end != len(s):
        raise HloParseError(f"unexpected text after shape: {s[end:end + 40]!r}")
    return shape
