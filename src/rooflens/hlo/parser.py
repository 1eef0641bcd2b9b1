"""HLO text → Module.

Reads what XLA prints: ``compile().as_text()``, ``--xla_dump_to`` files (before and after
optimizations, after any pass), TPU and GPU modules, with or without the stack-frame index.
The reader is forgiving: a line, attribute or opcode it does not understand is kept
verbatim and listed in ``Module.warnings``. Only text that is not HLO at all raises
:class:`HloParseError`.
"""

from __future__ import annotations

import gc
import re
from typing import Any

from rooflens.hlo import attrs as A
from rooflens.hlo.errors import HloParseError, HloTooDeepError, HloWarning
from rooflens.hlo.keys import ATTR_PARSERS, GENERIC_KEYS, KNOWN_HEADER_KEYS
from rooflens.hlo.module import CALLED_KEY_KINDS, Computation, Instruction, Module, Operand, SourceFrame
from rooflens.hlo.opcodes import COLLECTIVE_KINDS, KNOWN_OPCODES, opcode_category
from rooflens.hlo.shape import ARRAY_SHAPE_PATTERN, COMMENT_RE, Shape, parse_shape

_INSTR_HEAD_RE = re.compile(r"\s*(ROOT\s+)?%?([^\s=%(){}\[\],]+)\s*=\s*")
_OPCODE_RE = re.compile(r"\s*([a-z][a-z0-9\-_]*)\(")
_SECTION_NAMES = frozenset(["FileNames", "FunctionNames", "FileLocations", "StackFrames"])
_SECTION_LINE_RE = re.compile(r"(\d+)\s+(.*)$")

_NO_OPERANDS = frozenset(["parameter", "constant"])


class _Ctx:
    """Collects warnings; a repeated (kind, key) is reported once, with a count."""

    def __init__(self) -> None:
        self._first: dict[tuple[str, str], HloWarning] = {}
        self._count: dict[tuple[str, str], int] = {}

    def warn(self, line: int, kind: str, key: str, message: str, text: str = "") -> None:
        k = (kind, key)
        if k in self._first:
            self._count[k] += 1
            return
        self._first[k] = HloWarning(line, kind, message, text[:500])
        self._count[k] = 1

    def finish(self) -> list[HloWarning]:
        out = []
        for k, w in self._first.items():
            n = self._count[k]
            out.append(w if n == 1 else HloWarning(w.line, w.kind, f"{w.message} ({n} times)", w.text))
        return out


_ATTR_KEY_RE = re.compile(r"\s*,?\s*([\w.\-]+)=")
_ATTR_PLAIN_RE = re.compile(r"[^,{}()\[\]\"']*")
_STRING_RE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')


def _scan_attributes(text: str, start: int) -> list[tuple[str, str]] | None:
    """Split ``, key=value, key=value`` quickly; None when the text needs the slow path."""
    out = []
    pos, n = start, len(text)
    while pos < n:
        m = _ATTR_KEY_RE.match(text, pos)
        if not m:
            return None if text[pos:].strip() else out
        key = m.group(1)
        vstart = pos = m.end()
        while True:
            pm = _ATTR_PLAIN_RE.match(text, pos)
            pos = pm.end()
            if pos >= n or text[pos] == ",":
                break
            c = text[pos]
            if c == '"':
                sm = _STRING_RE.match(text, pos)
                if not sm:
                    return None
                pos = sm.end()
            elif c in "{([":
                close = A.find_close(text, pos)
                if close < 0:
                    return None
                pos = close + 1
            else:
                return None
        out.append((key, text[vstart:pos].strip()))
    return out


def parse_attributes(text: str, start: int, ctx: _Ctx | None, lineno: int,
                     ) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    """Parse ``, key=value, key=value`` from ``text[start:]``."""
    values: dict[str, Any] = {}
    raw: dict[str, str] = {}
    unparsed: dict[str, str] = {}
    pairs = _scan_attributes(text, start)
    if pairs is None:  # unusual text: split at top-level commas and look at each part
        pairs = []
        for part in A.split_top(text, start):
            if not part:
                continue
            key, eq, value = part.partition("=")
            key = key.strip()
            if not eq or not key or " " in key:
                unparsed[f"#{len(unparsed)}"] = part
                if ctx:
                    ctx.warn(lineno, "unknown-syntax", part[:30],
                             f"kept an attribute without key=value syntax: '{part[:60]}'", part)
                continue
            pairs.append((key, value))
    for key, value in pairs:
        raw[key] = value
        parser = ATTR_PARSERS.get(key)
        if parser is None:
            values[key] = A.parse_generic(value)
            if key not in GENERIC_KEYS and ctx:
                ctx.warn(lineno, "unknown-attribute", key,
                         f"kept unknown attribute '{key}' verbatim", f"{key}={value}")
            continue
        try:
            values[key] = parser(value)
        except (A.AttributeSyntaxError, ValueError, IndexError) as e:
            values[key] = value
            unparsed[key] = value
            if ctx:
                ctx.warn(lineno, "bad-attribute", key,
                         f"kept attribute '{key}' verbatim: {e}", f"{key}={value}")
    return values, raw, unparsed


_OPERAND_RE = re.compile(r"\s*(?:(" + ARRAY_SHAPE_PATTERN + r")\s+)?%?([^\s=(){}\[\],%]+)\s*(,|$)")
_OPERAND_NAME_RE = re.compile(r"[^\s=(){}\[\],]+")
_ARRAY_SHAPE_RE = re.compile(ARRAY_SHAPE_PATTERN)


def _parse_operands(text: str) -> tuple[Operand, ...]:
    if not text.strip():
        return ()
    ops = []
    pos, n = 0, len(text)
    while pos < n:  # fast path: array shapes and names only
        m = _OPERAND_RE.match(text, pos)
        if not m:
            break
        shape = parse_shape(m.group(1)) if m.group(1) else None  # cached by text
        ops.append(_operand(m.group(2), shape))
        pos = m.end()
        if not m.group(3):
            return tuple(ops)
    else:
        return tuple(ops)
    ops = []
    for part in A.split_top(text):  # tuple-shaped operands, odd spacing
        if not part:
            raise HloParseError(f"empty operand in {text[:60]!r}")
        head, _, name = part.rpartition(" ")
        name = name.lstrip("%")
        if not _OPERAND_NAME_RE.fullmatch(name):
            raise HloParseError(f"bad operand {part[:60]!r}")
        head = head.strip()
        ops.append(_operand(name, parse_shape(head) if head else None))
    return tuple(ops)


_TUPLE_INDEX_RE = re.compile(r"^(.+)#(\d+)$")


def _operand(name: str, shape) -> Operand:
    """``add.3`` or, XLA's shorthand for an element of a tuple result (jaxlib 0.11), ``fusion.2#1``."""
    m = _TUPLE_INDEX_RE.match(name) if "#" in name else None
    return Operand(m.group(1), shape, int(m.group(2))) if m else Operand(name, shape)


def _read_result_shape(line: str, pos: int) -> tuple[Shape, int]:
    """The result shape starting at ``line[pos]`` (cached: modules repeat shapes a lot)."""
    if line.startswith("(", pos):
        close = A.find_close(line, pos)
        if close < 0:
            raise HloParseError("unterminated tuple shape")
        return parse_shape(line[pos:close + 1]), close + 1
    m = _ARRAY_SHAPE_RE.match(line, pos)
    if not m:
        raise HloParseError(f"expected a shape at {line[pos:pos + 40]!r}")
    return parse_shape(m.group()), m.end()


def parse_instruction(line: str, lineno: int = 0, ctx: _Ctx | None = None) -> Instruction:
    """Parse one instruction line: ``[ROOT] %name = shape opcode(operands), attrs``.

    Raises :class:`HloParseError` when the line is not an instruction. Also useful on its
    own for the HLO text that TPU traces carry per op (``long_name``).
    """
    if "/*" in line:
        line = COMMENT_RE.sub("", line)
    m = _INSTR_HEAD_RE.match(line)
    if not m:
        raise HloParseError("expected 'name = shape opcode(…)'", lineno, 1)
    is_root = bool(m.group(1))
    name = m.group(2)
    pos = m.end()
    try:
        shape, pos = _read_result_shape(line, pos)
    except HloParseError as e:
        raise type(e)(e.message, lineno, pos + 1) from None
    om = _OPCODE_RE.match(line, pos)
    if not om:
        raise HloParseError("expected an opcode followed by '('", lineno, pos + 1)
    opcode = om.group(1)
    open_paren = om.end() - 1
    close = A.find_close(line, open_paren)
    if close < 0:
        raise HloParseError(f"unbalanced parentheses after {opcode}", lineno, open_paren + 1)
    inner = line[open_paren + 1:close]
    literal = None
    pnum = None
    operands: tuple[Operand, ...] = ()
    if opcode in _NO_OPERANDS:
        literal = inner.strip()
        if opcode == "parameter":
            if not literal.isdigit():
                raise HloParseError(f"bad parameter number {literal[:20]!r}", lineno, open_paren + 2)
            pnum = int(literal)
    else:
        try:
            operands = _parse_operands(inner)
        except HloParseError as e:
            raise type(e)(e.message, lineno, open_paren + 2) from None
    rest = line[close + 1:]
    if rest.strip():
        if not rest.lstrip().startswith(","):
            raise HloParseError(f"unexpected text after operands: {rest.strip()[:40]!r}", lineno, close + 2)
        values, raw, unparsed = parse_attributes(line, close + 1 + rest.index(",") + 1, ctx, lineno)
    else:
        values, raw, unparsed = {}, {}, {}
    if opcode not in KNOWN_OPCODES and ctx:
        ctx.warn(lineno, "unknown-opcode", opcode, f"kept unknown opcode '{opcode}'", line.strip())
    category = "" if opcode == "fusion" else opcode_category(opcode, values.get("custom_call_target"))
    return Instruction(
        name=name, opcode=opcode, shape=shape, operands=operands, attrs=values, raw_attrs=raw,
        is_root=is_root, line=lineno, literal=literal, parameter_number=pnum, unparsed=unparsed,
        text=line, category=category,
    )


def _parse_header(line: str, lineno: int, ctx: _Ctx) -> tuple[str, dict, dict]:
    body = line.strip()[len("HloModule"):].strip()
    name, comma, rest = body.partition(",")
    name = name.strip()
    if not name:
        raise HloParseError("the HloModule line names no module", lineno, 10)
    values, raw, _ = parse_attributes(rest, 0, None, lineno) if comma else ({}, {}, {})
    for k in raw:
        if k not in KNOWN_HEADER_KEYS:
            ctx.warn(lineno, "unknown-header-attribute", k, f"kept unknown module attribute '{k}' verbatim")
    return name, values, raw


def _parse_computation_header(s: str, lineno: int) -> Computation | None:
    """``[ENTRY] %name [(params) -> shape] [, execution_thread="…"] {`` or None."""
    if not s.endswith("{"):
        return None
    body = s[:-1].rstrip()
    is_entry = body.startswith("ENTRY ")
    if is_entry:
        body = body[6:].lstrip()
    thread = None
    tm = re.search(r',\s*execution_thread="([^"]*)"\s*$', body)
    if tm:
        thread = tm.group(1)
        body = body[:tm.start()].rstrip()
    paren = body.find("(")
    name = (body if paren < 0 else body[:paren]).strip().lstrip("%")
    if not name or " " in name or "=" in name:
        return None
    params: list[tuple[str, Any]] = []
    result = None
    if paren >= 0:
        close = A.find_close(body, paren)
        if close < 0:
            return None
        for p in A.split_top(body, paren + 1, close):
            pname, colon, ptext = p.partition(":")
            if not colon:
                return None
            try:
                pshape = parse_shape(ptext)
            except HloTooDeepError as e:
                raise HloTooDeepError(e.message, lineno, 1) from None
            except HloParseError:
                pshape = None
            params.append((pname.strip().lstrip("%"), pshape))
        arrow = body[close + 1:].strip()
        if not arrow.startswith("->"):
            return None
        try:
            result = parse_shape(arrow[2:])
        except HloTooDeepError as e:
            raise HloTooDeepError(e.message, lineno, 1) from None
        except HloParseError:
            result = None
    return Computation(name, [], is_entry, tuple(params), result, thread, lineno)


def parse(text: str | bytes) -> Module:
    """Parse a whole HLO module as XLA prints it."""
    enabled = gc.isenabled()
    gc.disable()  # the reader allocates many small objects that all live on: skip the GC passes
    try:
        return _parse(text)
    finally:
        if enabled:
            gc.enable()


def _parse(text: str | bytes) -> Module:
    text = _as_text(text)
    ctx = _Ctx()
    lines = text.split("\n")
    st = _State()
    for i, line in enumerate(lines):
        _read_line(st, line, i + 1, ctx)
    return _assemble(st, len(lines), ctx)


def _as_text(text: str | bytes) -> str:
    """The module's text: decoded, checked for binary data, comments removed."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise HloParseError(f"not UTF-8 text (byte {e.start})", 1, 1) from None
    if not isinstance(text, str):
        raise HloParseError(f"HLO must be text, not {type(text).__name__}")
    if "\x00" in text:
        i = text.index("\x00")
        ln = text.count("\n", 0, i) + 1
        raise HloParseError("binary data (NUL byte) in HLO text", ln, i - text.rfind("\n", 0, i))
    if "/*" in text:
        text = COMMENT_RE.sub("", text)
    return text


class _State:
    """What the line reader has gathered so far."""

    def __init__(self) -> None:
        self.name: str | None = None
        self.header_vals: dict = {}
        self.header_raw: dict = {}
        self.comps: dict[str, Computation] = {}
        self.entry: Computation | None = None
        self.cur: Computation | None = None  # the computation being read
        self.section: str | None = None  # the trailing section being read (stack frames)
        self.sections: dict[str, dict[int, str]] = {k: {} for k in _SECTION_NAMES}
        self.seen_any = False
        self.by_name: dict[str, Instruction] = {}

    def close(self, ctx: _Ctx) -> None:
        _close_computation(self.cur, self.comps, ctx)
        if self.cur.is_entry:
            self.entry = self.cur
        self.cur = None


def _read_line(st: _State, line: str, lineno: int, ctx: _Ctx) -> None:
    """One line: an instruction of the open computation, the module header, a section line, or a
    computation header; anything else is kept with a warning (or, before any HLO, refused)."""
    s = line.strip()
    if not s:
        st.section = None
        return
    if s.startswith("//") or s.startswith("#"):
        return
    if st.cur is not None and _read_instruction(st, line, s, lineno, ctx):
        return
    if s.startswith("HloModule"):
        if st.name is not None:
            ctx.warn(lineno, "second-module", "HloModule", "a second HloModule header; read as one module", s)
            return
        st.name, st.header_vals, st.header_raw = _parse_header(s, lineno, ctx)
        st.seen_any = True
        return
    if s in _SECTION_NAMES:
        st.section = s
        st.seen_any = True
        return
    if st.section is not None:
        m = _SECTION_LINE_RE.match(s)
        if m:
            st.sections[st.section][int(m.group(1))] = m.group(2)
        else:
            ctx.warn(lineno, "unparsed-line", str(lineno), f"kept a line of {st.section} not understood: '{s[:80]}'",
                     s)
        return
    comp = _parse_computation_header(s, lineno)
    if comp is not None:
        st.seen_any = True
        st.cur = comp
        return
    if not st.seen_any:
        col = len(line) - len(line.lstrip()) + 1
        raise HloParseError(f"not HLO: expected 'HloModule' or a computation, found {s[:40]!r}", lineno, col)
    ctx.warn(lineno, "unparsed-line", str(lineno), f"kept a line outside any computation: '{s[:80]}'", s)


def _read_instruction(st: _State, line: str, s: str, lineno: int, ctx: _Ctx) -> bool:
    """A line inside the open computation. True: consumed (an instruction, the closing brace, a line
    kept with a warning); False: a computation header after an unclosed one, closed now, to be read
    as a header."""
    if s == "}":
        st.close(ctx)
        return True
    try:
        ins = parse_instruction(line, lineno, ctx)
    except HloTooDeepError:
        raise
    except HloParseError as e:
        if _parse_computation_header(s, lineno) is not None:
            ctx.warn(lineno, "unclosed-computation", st.cur.name,
                     f"computation '{st.cur.name}' has no closing brace", s)
            st.close(ctx)
            return False
        ctx.warn(lineno, "unparsed-line", str(lineno),
                 f"kept a line that is not an instruction: '{s[:80]}' ({e.message})", s)
        return True
    ins.computation = st.cur
    st.cur.instructions.append(ins)
    if ins.name in st.by_name:
        ctx.warn(lineno, "duplicate-name", ins.name, f"instruction name '{ins.name}' is used twice")
    else:
        st.by_name[ins.name] = ins
    return True


def _assemble(st: _State, n_lines: int, ctx: _Ctx) -> Module:
    """The module from what was read: the last computation closed, the entry found, frames attached."""
    if st.cur is not None:
        ctx.warn(n_lines, "unclosed-computation", st.cur.name,
                 f"computation '{st.cur.name}' has no closing brace (truncated text?)")
        st.close(ctx)
    if not st.comps:
        if not st.seen_any:
            raise HloParseError("not HLO: the text is empty", 1, 1)
        raise HloParseError("the module has no computations (truncated text?)", n_lines, 1)
    entry = st.entry
    if entry is None:
        entry = list(st.comps.values())[-1]
        ctx.warn(0, "no-entry", "ENTRY", f"no ENTRY computation; taking the last one, '{entry.name}'")
        entry.is_entry = True

    module = Module(
        name=st.name or entry.name, attrs=st.header_vals, raw_attrs=st.header_raw, computations=st.comps,
        entry=entry, _by_name=st.by_name,
    )
    if st.name is None:
        ctx.warn(0, "no-header", "HloModule", "no HloModule header line")
    _read_stack_frames(module, st.sections, ctx)
    _finalize(module, ctx)
    module.warnings = ctx.finish()
    return module


def _close_computation(cur: Computation, comps: dict[str, Computation], ctx: _Ctx) -> None:
    if cur.name in comps:
        ctx.warn(cur.line, "duplicate-name", cur.name, f"computation name '{cur.name}' is used twice")
        return
    comps[cur.name] = cur


def _key_value_rows(rows: dict[int, str], what: str, ctx: _Ctx):
    """The ``N {key=value …}`` rows of a stack-frame table; bad rows become warnings."""
    for k, v in rows.items():
        try:
            yield k, A.parse_key_values(v)
        except A.AttributeSyntaxError:
            ctx.warn(0, "unparsed-line", f"{what}{k}", f"kept {what} {k} verbatim: '{v[:60]}'")


def _read_stack_frames(module: Module, sections: dict[str, dict[int, str]], ctx: _Ctx) -> None:
    files = {k: A.unquote(v) for k, v in sections["FileNames"].items()}
    funcs = {k: A.unquote(v) for k, v in sections["FunctionNames"].items()}
    for k, kv in _key_value_rows(sections["FileLocations"], "file location", ctx):
        module.file_locations[k] = SourceFrame(
            files.get(_int(kv, "file_name_id"), ""), _int(kv, "line"),
            funcs.get(_int(kv, "function_name_id"), ""), _int(kv, "column"),
        )
    for k, kv in _key_value_rows(sections["StackFrames"], "stack frame", ctx):
        # The printed parent id is one more than the parent's frame id (1 means none).
        module.stack_frames[k] = (_int(kv, "file_location_id"), _int(kv, "parent_frame_id") - 1)


def _int(kv: dict, key: str) -> int:
    v = kv.get(key, 0)
    return v if isinstance(v, int) else 0


def _finalize(module: Module, ctx: _Ctx) -> None:
    """Resolve calls, computation kinds, categories and replica groups."""
    comps = module.computations
    module.entry.kind = "entry"
    fusions = []
    collectives = []
    for comp in comps.values():
        for ins in comp.instructions:
            if ins.opcode == "fusion":
                fusions.append(ins)
            elif ins.opcode in COLLECTIVE_KINDS:
                collectives.append(ins)
            for key in ins.attrs:
                if key not in CALLED_KEY_KINDS:
                    continue
                v = ins.attrs[key]
                if not isinstance(v, tuple):
                    continue
                for cname in v:
                    callee = comps.get(cname)
                    if callee is None:
                        ctx.warn(ins.line, "unknown-computation", cname,
                                 f"'{ins.name}' calls computation '{cname}', which is not in the module")
                        continue
                    callee.callers.append(ins.name)
                    if not callee.kind:
                        kind = CALLED_KEY_KINDS[key]
                        if key == "calls" and ins.opcode != "fusion":
                            kind = "async" if ins.opcode.startswith("async") else "call"
                        callee.kind = kind
    for comp in comps.values():
        if not comp.kind:
            comp.kind = "unreferenced"
    for ins in fusions:  # by what they contain (leaf categories are set at parse time)
        ins.category = _fusion_category(module, ins)
    # replica groups → explicit device groups (no attribute at all means one group of all)
    for ins in collectives:
        spec = ins.replica_groups_spec
        if spec is None and "replica_groups" not in ins.raw_attrs and \
                ins.collective_kind in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all"):
            spec = A.ReplicaGroups("all", (), "")
        if spec is not None:
            ins.replica_groups = spec.resolved(_devices_in_all_group(module, ins) if spec.form == "all" else None)


def _devices_in_all_group(module: Module, ins: Instruction) -> int:
    """How many devices ``replica_groups={}`` spans (XLA's CollectiveOpGroupMode)."""
    if "channel_id" not in ins.attrs:
        return module.replica_count if "replica_count" in module.attrs else module.num_devices
    if ins.attrs.get("use_global_device_ids"):
        return module.num_devices
    return module.num_partitions if "num_partitions" in module.attrs else module.num_devices


def _fusion_category(module: Module, ins: Instruction) -> str:
    body = [i for i in module.fusion_body(ins) if i.opcode not in ("parameter", "constant")]
    ops = {i.opcode for i in body}
    cats = {i.category for i in body}  # leaves were categorised at parse time
    if "matmul" in cats:
        return "matmul"
    if "convolution" in cats:
        return "convolution"
    if "collective" in cats:
        return "collective"
    meaningful = [i for i in body if i.opcode not in ("bitcast", "tuple", "get-tuple-element", "fusion")]
    if meaningful and all(i.opcode in ("copy", "transpose") for i in meaningful):
        return "copy/transpose"
    if len(meaningful) == 1 and meaningful[0].category in ("elementwise", "reduction", "data movement"):
        return meaningful[0].category
    if ops and ops <= {"bitcast", "tuple", "get-tuple-element"}:
        return "control"
    return "fusion"
