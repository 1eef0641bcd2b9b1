"""Attribute values of HLO instructions: brackets, lists, replica groups, shardings, metadata.

Every parser here takes the printed value (the text after ``key=``) and returns plain
Python data. Anything that does not fit raises :class:`AttributeSyntaxError`; the module
parser then keeps the raw text and records a warning.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

# A token scanner that jumps over quoted strings in one step (escapes included) so that
# brackets and commas inside op names, JSON or mesh axis names never confuse the depth count.
_SCAN = re.compile(
    r'"[^"\\]*(?:\\.[^"\\]*)*"?'
    r"|'[^'\\]*(?:\\.[^'\\]*)*'?"
    r"|[{}()\[\],]"
)
# The same without commas, for finding a closing bracket (JSON values have many commas).
_BRACKETS = re.compile(
    r'"[^"\\]*(?:\\.[^"\\]*)*"?'
    r"|'[^'\\]*(?:\\.[^'\\]*)*'?"
    r"|[{}()\[\]]"
)
_OPEN = "({["
_CLOSE = ")}]"
_PAIR = {"(": ")", "[": "]", "{": "}"}


class AttributeSyntaxError(ValueError):
    """An attribute value does not have the syntax its key calls for."""


def find_close(text: str, start: int) -> int:
    """Index of the bracket closing the one at ``text[start]``, or -1 if it never closes."""
    closer = _PAIR.get(text[start]) if start < len(text) else None
    if closer is not None:  # fast path: nothing nested and no quotes before the first closer
        j = text.find(closer, start + 1)
        if j > 0:
            seg = text[start + 1:j]
            if not ("(" in seg or "[" in seg or "{" in seg or '"' in seg or "'" in seg):
                return j
    depth = 0
    for m in _BRACKETS.finditer(text, start):
        c = text[m.start()]
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
            if depth == 0:
                return m.start()
    return -1


def split_top(text: str, start: int = 0, end: int | None = None) -> list[str]:
    """Split ``text[start:end]`` at commas that are not inside brackets or quotes."""
    if end is None:
        end = len(text)
    parts: list[str] = []
    depth = 0
    last = start
    for m in _SCAN.finditer(text, start, end):
        c = text[m.start()]
        if c == ",":
            if depth == 0:
                parts.append(text[last:m.start()].strip())
                last = m.end()
        elif c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
    tail = text[last:end].strip()
    if tail or parts:
        parts.append(tail)
    return parts


_ESCAPE_RE = re.compile(r"\\(.)")


def _unescape(m: re.Match) -> str:
    return m.group(1)


def unquote(text: str) -> str:
    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "\"'":
        body = t[1:-1]
        if "\\" in body:
            body = _ESCAPE_RE.sub(_unescape, body)
        return body
    return t


_INT_LIST_RE = re.compile(r"\{\s*(-?\d+(?:\s*,\s*-?\d+)*)?\s*\}")


def parse_int_list(value: str) -> tuple[int, ...]:
    """``{1,0}`` → ``(1, 0)``; ``{}`` → ``()``."""
    m = _INT_LIST_RE.fullmatch(value.strip())
    if not m:
        raise AttributeSyntaxError(f"expected a list of integers like {{1,0}}, got {value[:40]!r}")
    body = m.group(1)
    return tuple(int(x) for x in body.split(",")) if body else ()


def parse_computation_list(value: str) -> tuple[str, ...]:
    """``{%a, %b}`` or ``%a`` → names without ``%``."""
    v = value.strip()
    if v.startswith("{"):
        if not v.endswith("}"):
            raise AttributeSyntaxError(f"unterminated computation list {value[:40]!r}")
        return tuple(x.strip().lstrip("%") for x in v[1:-1].split(",") if x.strip())
    if not v or any(c in v for c in " ,{}()"):
        raise AttributeSyntaxError(f"expected a computation name, got {value[:40]!r}")
    return (v.lstrip("%"),)


# --- replica groups -----------------------------------------------------------------------

_GROUP_RE = re.compile(r"\{([^{}]*)\}")
_IOTA_TAIL = r"<=\[(\d+(?:,\d+)*)\](?:T\((\d+(?:,\d+)*)\))?"  # <=[reshape dims]T(perm)
_IOTA_TAIL_RE = re.compile(_IOTA_TAIL)
_IOTA_RE = re.compile(r"\[(\d+(?:,\d+)*)\]" + _IOTA_TAIL)
_MESH_AXIS_RE = re.compile(r"'((?:[^'\\]|\\.)*)'\s*=\s*(\d+)|([A-Za-z_][\w.]*)\s*=\s*(\d+)")
_AXIS_REF_RE = re.compile(r"'((?:[^'\\]|\\.)*)'|([A-Za-z_][\w.]*)")
_SUBAXIS_RE = re.compile(r":\((\d+)\)(\d+)")


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def iota_tile_assignment(reshape_dims: list[int], perm: list[int] | None) -> np.ndarray:
    """The flat device order of ``<=[reshape_dims]T(perm)``: iota, reshaped, transposed."""
    arr = np.arange(math.prod(reshape_dims), dtype=np.int64).reshape(reshape_dims)
    if perm:
        if sorted(perm) != list(range(len(reshape_dims))):
            raise AttributeSyntaxError(f"T({perm}) is not a permutation of {len(reshape_dims)} dims")
        arr = arr.transpose(perm)
    return arr.reshape(-1)


@dataclass(frozen=True, slots=True)
class ReplicaGroups:
    """Replica groups as printed, in one of three forms, resolved to explicit groups.

    ``form`` is ``"explicit"`` (``{{0,1},{2,3}}``), ``"iota"`` (``[2,2]<=[4]``), ``"mesh"``
    (``mesh['x'=2,'y'=2] {'y'}``) or ``"all"`` (``{}``: one group of every device, which
    needs the device count to resolve).
    """

    form: str
    groups: tuple[tuple[int, ...], ...]  # empty for "all" until resolved
    text: str
    mesh_axes: tuple[tuple[str, int], ...] = ()
    group_axes: tuple[str, ...] = ()

    def resolved(self, num_devices: int | None) -> tuple[tuple[int, ...], ...] | None:
        if self.form == "all":
            return (tuple(range(num_devices)),) if num_devices else None
        return self.groups

    @property
    def max_device(self) -> int:
        return max((max(g) for g in self.groups if g), default=-1)


def parse_replica_groups(value: str) -> ReplicaGroups:
    v = value.strip()
    if v.startswith("{"):
        if v == "{}" or re.fullmatch(r"\{\s*\}", v):
            return ReplicaGroups("all", (), v)
        if not (v.startswith("{{") and v.endswith("}}")):
            raise AttributeSyntaxError(f"replica groups {v[:40]!r} are not a list of lists")
        inner = v[1:-1]
        groups = []
        for g in _GROUP_RE.findall(inner):
            try:
                groups.append(tuple(_ints(g)))
            except ValueError:
                raise AttributeSyntaxError(f"non-integer device in replica group {{{g}}}") from None
        if _GROUP_RE.sub("", inner).replace(",", "").strip():
            raise AttributeSyntaxError(f"unexpected text in replica groups {v[:40]!r}")
        return ReplicaGroups("explicit", tuple(groups), v)
    m = _IOTA_RE.fullmatch(v)
    if m:
        shape = _ints(m.group(1))
        reshape = _ints(m.group(2))
        perm = _ints(m.group(3)) if m.group(3) else None
        if math.prod(shape) != math.prod(reshape) or len(shape) != 2:
            raise AttributeSyntaxError(f"iota replica groups {v!r} do not describe a [groups,size] grid")
        flat = iota_tile_assignment(reshape, perm)
        groups = tuple(tuple(int(x) for x in row) for row in flat.reshape(shape))
        return ReplicaGroups("iota", groups, v)
    if v.startswith("mesh"):
        return _parse_mesh_groups(v)
    raise AttributeSyntaxError(f"unknown replica group form {v[:60]!r}")


def _parse_mesh_groups(v: str) -> ReplicaGroups:
    """``mesh['a'=4,'b'=2] {'b'}`` (optionally ``, device_ids=(…)`` and sub-axes ``'a':(1)2``)."""
    close = find_close(v, v.find("["))
    if close < 0:
        raise AttributeSyntaxError(f"unterminated mesh in {v[:60]!r}")
    axes_text = v[v.find("[") + 1:close]
    names, sizes = [], []
    for part in split_top(axes_text):
        m = _MESH_AXIS_RE.fullmatch(part.strip())
        if not m:
            raise AttributeSyntaxError(f"bad mesh axis {part!r}")
        names.append(m.group(1) if m.group(1) is not None else m.group(3))
        sizes.append(int(m.group(2) or m.group(4)))
    rest = v[close + 1:]
    brace = rest.rfind("{")
    if brace < 0 or not rest.rstrip().endswith("}"):
        raise AttributeSyntaxError(f"mesh replica groups {v[:60]!r} name no axes in {{…}}")
    device_text = rest[:brace]
    n = math.prod(sizes)
    ids = None
    if "device_ids" in device_text:
        dm = re.search(r"device_ids\s*=\s*(.*)$", device_text.strip().rstrip(","))
        dtext = dm.group(1) if dm else ""
        im = _IOTA_TAIL_RE.search(dtext.replace(" ", ""))
        if im:
            ids = iota_tile_assignment(_ints(im.group(1)), _ints(im.group(2)) if im.group(2) else None)
        else:
            ids = np.array([int(x) for x in re.findall(r"\d+", dtext)], dtype=np.int64)
        if ids.size != n:
            raise AttributeSyntaxError(f"mesh device_ids has {ids.size} devices, axes need {n}")
    elif device_text.strip(" ,"):
        raise AttributeSyntaxError(f"unexpected text {device_text.strip()[:40]!r} in mesh replica groups")
    if ids is None:
        ids = np.arange(n, dtype=np.int64)

    # The axes being grouped, each a full mesh axis or a sub-axis 'a':(pre)size.
    refs: list[tuple[int, int | None, int | None]] = []  # (mesh axis, pre_size, size)
    group_axis_names = []
    for part in split_top(rest[brace + 1:rest.rstrip().rfind("}")]):
        part = part.strip()
        if not part:
            continue
        am = _AXIS_REF_RE.match(part)
        if not am:
            raise AttributeSyntaxError(f"bad axis reference {part!r}")
        name = am.group(1) if am.group(1) is not None else am.group(2)
        if name not in names:
            raise AttributeSyntaxError(f"axis {name!r} is not in mesh {names}")
        sub = _SUBAXIS_RE.fullmatch(part[am.end():].strip()) if part[am.end():].strip() else None
        if part[am.end():].strip() and not sub:
            raise AttributeSyntaxError(f"bad sub-axis {part!r}")
        refs.append((names.index(name), int(sub.group(1)) if sub else None, int(sub.group(2)) if sub else None))
        group_axis_names.append(part)

    # Split each mesh axis into the pieces its sub-axes need, then move grouped pieces last.
    pieces: list[list[tuple[int, int | None]]] = []  # per mesh axis: (size, ref index)
    for ax, full in enumerate(sizes):
        subs = sorted((pre, size, i) for i, (a, pre, size) in enumerate(refs) if a == ax)
        if not subs:
            pieces.append([(full, None)])
            continue
        if any(pre is None for pre, _, _ in subs):
            if len(subs) > 1:
                raise AttributeSyntaxError(f"axis {names[ax]!r} is used whole and in parts")
            pieces.append([(full, subs[0][2])])
            continue
        row: list[tuple[int, int | None]] = []
        prefix = 1
        for pre, size, i in subs:
            if pre % prefix:
                raise AttributeSyntaxError(f"sub-axes of {names[ax]!r} overlap")
            if pre != prefix:
                row.append((pre // prefix, None))
            row.append((size, i))
            prefix = pre * size
        if full % prefix:
            raise AttributeSyntaxError(f"sub-axes of {names[ax]!r} do not divide its size {full}")
        if full != prefix:
            row.append((full // prefix, None))
        pieces.append(row)
    flat_sizes = [s for row in pieces for s, _ in row]
    owner = [i for row in pieces for _, i in row]
    grouped = [owner.index(i) for i in range(len(refs))]
    others = [k for k in range(len(flat_sizes)) if k not in grouped]
    arr = ids.reshape(flat_sizes).transpose(others + grouped)
    gsize = math.prod(flat_sizes[k] for k in grouped) if grouped else 1
    groups = tuple(tuple(int(x) for x in row) for row in arr.reshape(-1, gsize))
    return ReplicaGroups("mesh", groups, v, tuple(zip(names, sizes)), tuple(group_axis_names))


def parse_pairs(value: str) -> tuple[tuple[int, int], ...]:
    """``{{0,1},{1,2}}`` → ``((0, 1), (1, 2))`` (collective-permute source→target pairs)."""
    v = value.strip()
    if v in ("{}",):
        return ()
    if not (v.startswith("{") and v.endswith("}")):
        raise AttributeSyntaxError(f"bad source_target_pairs {v[:40]!r}")
    pairs = []
    for g in _GROUP_RE.findall(v[1:-1]):
        xs = _ints(g)
        if len(xs) != 2:
            raise AttributeSyntaxError(f"source_target pair {{{g}}} does not have two devices")
        pairs.append((xs[0], xs[1]))
    return tuple(pairs)


# --- shardings ----------------------------------------------------------------------------

_TILE_RE = re.compile(r"devices=\[(\d+(?:,\d+)*)\]")


@dataclass(frozen=True, slots=True)
class Sharding:
    """An HLO sharding annotation.

    ``kind`` is one of ``replicated``, ``maximal``, ``tiled``, ``manual``, ``unknown``,
    ``tuple``. For ``tiled``, ``tile_dims`` has one entry per array dimension followed by
    the replication / subgroup dimensions (``last_tile_dim_replicate`` or
    ``last_tile_dims={…}``).
    """

    kind: str
    text: str
    tile_dims: tuple[int, ...] = ()
    devices: tuple[int, ...] = ()  # flat device order of the tile assignment
    replicate_last: bool = False
    subgroup_types: tuple[str, ...] = ()
    device: int | None = None  # maximal
    elements: tuple[Sharding, ...] = ()  # tuple shardings
    extra: tuple[str, ...] = field(default=())

    @property
    def trailing_dims(self) -> int:
        return (1 if self.replicate_last else 0) + len(self.subgroup_types)

    def data_tile_dims(self) -> tuple[int, ...]:
        """How many pieces each array dimension is cut into (the tile grid, no replication)."""
        if self.kind != "tiled":
            return ()
        n = len(self.tile_dims) - self.trailing_dims
        return self.tile_dims[:n]

    @property
    def num_devices(self) -> int:
        if self.kind == "tiled":
            return math.prod(self.tile_dims)
        if self.kind == "tuple":
            return max((e.num_devices for e in self.elements), default=0)
        if self.kind == "maximal" and self.device is not None:
            return self.device + 1
        return 0

    @property
    def max_device(self) -> int:
        if self.kind == "tuple":
            return max((e.max_device for e in self.elements), default=-1)
        if self.kind == "maximal" and self.device is not None:
            return self.device
        return max(self.devices, default=-1)

    def true_dims(self, shard_dims: tuple[int, ...]) -> tuple[int, ...] | None:
        """The unsharded dimensions of an array whose per-device piece is ``shard_dims``."""
        if self.kind in ("replicated", "maximal", "manual"):
            return tuple(shard_dims)
        tiles = self.data_tile_dims()
        if self.kind != "tiled" or len(tiles) != len(shard_dims):
            return None
        return tuple(d * t for d, t in zip(shard_dims, tiles))


def parse_sharding(value: str) -> Sharding:
    v = value.strip()
    if not (v.startswith("{") and v.endswith("}")):
        raise AttributeSyntaxError(f"a sharding is written in braces, got {v[:40]!r}")
    inner = v[1:-1].strip()
    if inner.startswith("{") or inner == "":
        elems = tuple(parse_sharding(p) for p in split_top(inner)) if inner else ()
        return Sharding("tuple", v, elements=elems)
    if inner.startswith("mesh["):
        return _mesh_sharding(v, inner)
    words = split_top(inner.replace(" ", ","))  # fields are space separated
    head = words[0] if words else ""
    extra = []
    if head in ("replicated", "manual", "unknown"):
        extra = [w for w in words[1:] if w]
        _check_sharding_extra(extra, v)
        return Sharding(head, v, extra=tuple(extra))
    if head == "maximal":
        dev = None
        for w in words[1:]:
            if w.startswith("device="):
                try:
                    dev = int(w.split("=", 1)[1])
                except ValueError:
                    raise AttributeSyntaxError(f"bad maximal device in {v!r}") from None
            elif w:
                extra.append(w)
        _check_sharding_extra(extra, v)
        return Sharding("maximal", v, device=dev, extra=tuple(extra))
    m = _TILE_RE.match(inner)
    if not m:
        raise AttributeSyntaxError(f"unknown sharding form {v[:60]!r}")
    tile_dims = tuple(_ints(m.group(1)))
    pos = m.end()
    n = math.prod(tile_dims)
    rest = inner[pos:]
    im = _IOTA_TAIL_RE.match(rest)
    if im:
        devices = iota_tile_assignment(_ints(im.group(1)), _ints(im.group(2)) if im.group(2) else None)
        rest = rest[im.end():]
    else:
        dm = re.match(r"(\d+(?:,\d+)*)", rest)
        if not dm:
            raise AttributeSyntaxError(f"sharding {v[:60]!r} lists no devices")
        devices = np.array(_ints(dm.group(1)), dtype=np.int64)
        rest = rest[dm.end():]
    if devices.size != n:
        raise AttributeSyntaxError(f"sharding {v[:60]!r} lists {devices.size} devices for {n} tiles")
    replicate_last = False
    subgroups: tuple[str, ...] = ()
    for w in split_top(rest.strip().replace(" ", ",")):
        if not w:
            continue
        if w == "last_tile_dim_replicate":
            replicate_last = True
        elif w.startswith("last_tile_dims="):
            subgroups = tuple(x.strip() for x in w.split("=", 1)[1].strip("{}").split(",") if x.strip())
        else:
            extra.append(w)
    _check_sharding_extra(extra, v)
    if len(tile_dims) < (1 if replicate_last else 0) + len(subgroups):
        raise AttributeSyntaxError(f"sharding {v[:60]!r} has fewer tile dims than replication dims")
    return Sharding(
        "tiled", v, tile_dims, tuple(int(x) for x in devices), replicate_last, subgroups, extra=tuple(extra)
    )


_MESH_AXIS_RE = re.compile(r"'([^']+)'=(\d+)")
_DIM_AXES_RE = re.compile(r"\{([^{}]*)\}")


def _mesh_sharding(v: str, inner: str) -> Sharding:
    """A sharding over a named mesh (XLA from jaxlib 0.11): ``{mesh['data'=4,'model'=2], [{'data'}, {}]}`` (each
    dimension's axes), ``{mesh[...], replicated}`` or ``{mesh[], replicated}``: as the tiled sharding it means,
    the devices in the mesh's order, the axes no dimension uses replicating each tile."""
    close = find_close(inner, inner.index("["))
    if close < 0:
        raise AttributeSyntaxError(f"unclosed mesh in sharding {v[:60]!r}")
    axes = [(a, int(n)) for a, n in _MESH_AXIS_RE.findall(inner[: close + 1])]
    rest = inner[close + 1:].strip().lstrip(",").strip()
    if rest.startswith(("replicated", "maximal", "manual", "unknown")):
        return parse_sharding("{" + rest + "}")
    if not (rest.startswith("[") and rest.endswith("]")):
        raise AttributeSyntaxError(f"unknown sharding form {v[:60]!r}")
    index = {a: k for k, (a, _) in enumerate(axes)}
    dims = []
    for group in _DIM_AXES_RE.findall(rest[1:-1]):
        names = [w.strip().strip("'") for w in group.split(",") if w.strip()]
        if any(n not in index for n in names):  # sub-axes ('a':(1)2) and the like: not read
            raise AttributeSyntaxError(f"unknown sharding form {v[:60]!r}")
        dims.append([index[n] for n in names])
    used = [k for d in dims for k in d]
    unused = [k for k in range(len(axes)) if k not in used]
    sizes = [n for _, n in axes]
    tile = [math.prod(sizes[k] for k in d) for d in dims]
    replicate = math.prod(sizes[k] for k in unused)
    devices = iota_tile_assignment(sizes, used + unused) if axes else np.zeros(1, np.int64)
    if math.prod(tile) == 1 and replicate >= 1:
        return Sharding("replicated", v)
    return Sharding("tiled", v, tuple(tile) + ((replicate,) if replicate > 1 else ()), tuple(int(x) for x in devices),
                    replicate > 1)


_SHARDING_EXTRA_OK = ("metadata=", "shard_as", "shard_like", "last_tile_dims")


def _check_sharding_extra(extra: list[str], v: str) -> None:
    for w in extra:
        if not w.startswith(_SHARDING_EXTRA_OK) and not w.startswith("op_name=") and "=" not in w:
            raise AttributeSyntaxError(f"unknown sharding field {w[:30]!r} in {v[:60]!r}")


# --- metadata, windows, slices ------------------------------------------------------------

_KV_VALUE = r'(?:"[^"\\]*(?:\\.[^"\\]*)*"|\{[^{}]*\}|[^\s,"{}]+)'
_KV_RE = re.compile(r"([A-Za-z_][\w.-]*)=(" + _KV_VALUE + ")")
_KV_PAIR = r"[A-Za-z_][\w.-]*=" + _KV_VALUE
_KV_ALL_RE = re.compile(r"[\s,]*(?:" + _KV_PAIR + r"[\s,]+)*(?:" + _KV_PAIR + r")?[\s,]*")


def parse_key_values(value: str) -> dict[str, str | int]:
    """``{op_name="a/b" source_line=38}`` → ``{"op_name": "a/b", "source_line": 38}``."""
    v = value.strip()
    if not (v.startswith("{") and v.endswith("}")):
        raise AttributeSyntaxError(f"expected {{key=value …}}, got {v[:40]!r}")
    body = v[1:-1]
    if not _KV_ALL_RE.fullmatch(body):
        raise AttributeSyntaxError(f"expected key=value pairs in {v[:60]!r}")
    out: dict[str, str | int] = {}
    for key, raw in _KV_RE.findall(body):
        if raw.startswith('"'):
            out[key] = unquote(raw)
        elif raw.isdigit() or (raw.startswith("-") and raw[1:].isdigit()):
            out[key] = int(raw)
        else:
            out[key] = raw
    return out


def parse_window(value: str) -> dict[str, tuple]:
    """``{size=3x3 stride=2x2 pad=1_1x0_1}`` → sizes per dimension; ``pad`` as (low, high)."""
    v = value.strip()
    if not (v.startswith("{") and v.endswith("}")):
        raise AttributeSyntaxError(f"bad window {v[:40]!r}")
    out: dict[str, tuple] = {}
    for item in v[1:-1].split():
        key, eq, val = item.partition("=")
        if not eq:
            raise AttributeSyntaxError(f"bad window field {item!r}")
        try:
            if key == "pad":
                out[key] = tuple(tuple(int(x) for x in d.split("_")) for d in val.split("x"))
            else:
                out[key] = tuple(int(x) for x in val.split("x"))
        except ValueError:
            raise AttributeSyntaxError(f"bad window field {item!r}") from None
    return out


def parse_padding(value: str) -> tuple[tuple[int, ...], ...]:
    """``0_0x1_1_0`` → per-dimension (low, high[, interior])."""
    try:
        return tuple(tuple(int(x) for x in d.split("_")) for d in value.strip().split("x"))
    except ValueError:
        raise AttributeSyntaxError(f"bad padding {value[:40]!r}") from None


_SLICE_RE = re.compile(r"\[\s*(-?\d+)\s*:\s*(-?\d+)\s*(?::\s*(-?\d+)\s*)?\]")


def parse_slice(value: str) -> tuple[tuple[int, int, int], ...]:
    """``{[0:4], [0:32:2]}`` → ((start, limit, stride), …)."""
    v = value.strip()
    if not (v.startswith("{") and v.endswith("}")):
        raise AttributeSyntaxError(f"bad slice {v[:40]!r}")
    out = []
    pos = 0
    body = v[1:-1]
    for m in _SLICE_RE.finditer(body):
        if body[pos:m.start()].strip(" ,"):
            raise AttributeSyntaxError(f"bad slice {v[:40]!r}")
        out.append((int(m.group(1)), int(m.group(2)), int(m.group(3) or 1)))
        pos = m.end()
    if body[pos:].strip(" ,"):
        raise AttributeSyntaxError(f"bad slice {v[:40]!r}")
    return tuple(out)


def parse_dim_labels(value: str) -> tuple[str, str, str]:
    """``b01f_01io->b01f`` → (input, kernel, output) labels."""
    v = value.strip()
    lhs, arrow, out = v.partition("->")
    inp, us, ker = lhs.partition("_")
    if not (arrow and us and inp and ker and out):
        raise AttributeSyntaxError(f"bad dim_labels {v[:40]!r}")
    return inp, ker, out


def parse_generic(value: str):
    """A value of a key the reader has no special rule for: int, bool, int list or text."""
    v = value.strip()
    if v.lstrip("-").isdigit():
        return int(v)
    if v in ("true", "false"):
        return v == "true"
    if v.startswith('"'):
        return unquote(v)
    if v.startswith("{") and _INT_LIST_RE.fullmatch(v):
        return parse_int_list(v)
    return v
