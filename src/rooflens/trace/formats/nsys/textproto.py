"""Protocol-buffer text format (``*.pbtxt``, ``*.txtpb``), read into plain dicts.

Enough of the format (protobuf's "Text Format Language Specification") for the small files XLA
dumps beside its HLO, such as ``module_N.<name>.gpu_target_config.pbtxt``: ``#`` comments, fields
``name: value`` and ``name { … }`` (also ``name: { … }`` and ``< … >``), short repeated lists
``name: [a, b]``, ``,``/``;`` separators; values are numbers, quoted strings (adjacent ones joined,
C escapes), and identifiers (enum values, ``true``/``false``). No schema: every field comes back as
a list of its values (a message is a dict), so a repeated field and a map read the same way.
"""

from __future__ import annotations

import re

Message = dict[str, list]

_TOKEN = re.compile(r"""
    (?P<space>\s+|\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<number>[-+]?(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)[fFuU]?(?![\w.]))
  | (?P<ident>[-+]?[A-Za-z_][\w.]*|\[[\w./]+\])
  | (?P<punct>[{}<>\[\]:,;])
""", re.X)
_ESCAPE = re.compile(rb"\\(x[0-9a-fA-F]{1,2}|[0-7]{1,3}|.)", re.S)
_SIMPLE = {b"n": b"\n", b"t": b"\t", b"r": b"\r", b"a": b"\a", b"b": b"\b", b"f": b"\f", b"v": b"\v"}


def _unescape(body: str) -> str:
    def one(m: re.Match) -> bytes:
        e = m.group(1)
        if e[:1] in (b"x", b"X"):
            return bytes([int(e[1:], 16)])
        if e[:1].isdigit():
            return bytes([int(e, 8) & 0xFF])
        return _SIMPLE.get(e, e)

    return _ESCAPE.sub(one, body.encode("utf-8")).decode("utf-8", "replace")


def _tokens(text: str) -> list[tuple[str, str]]:
    out, at = [], 0
    while at < len(text):
        m = _TOKEN.match(text, at)
        if m is None:
            raise ValueError(f"unexpected {text[at:at + 20]!r} at offset {at}")
        at = m.end()
        if m.lastgroup != "space":
            out.append((m.lastgroup, m.group()))
    return out


def _scalar(kind: str, tok: str):
    if kind == "string":
        return _unescape(tok[1:-1])
    if kind == "number":
        t = tok.rstrip("fFuU") if not tok.lower().startswith(("0x", "-0x", "+0x")) else tok
        if re.fullmatch(r"[-+]?0[xX][0-9a-fA-F]+", t):
            return int(t, 16)
        return float(t) if any(c in t for c in ".eE") else int(t)
    low = tok.lower().lstrip("+")
    if low in ("true", "t"):
        return True
    if low in ("false", "f"):
        return False
    if low in ("inf", "infinity", "-inf", "-infinity", "nan"):
        return float(low)
    return tok  # an enum value


def parse(text: str) -> Message:
    """The message a text-format document holds; ValueError when it is not one."""
    toks = _tokens(text)
    pos = 0

    def peek(k: int = 0) -> tuple[str, str]:
        return toks[pos + k] if pos + k < len(toks) else ("end", "")

    def take(*want: str) -> tuple[str, str]:
        nonlocal pos
        kind, tok = peek()
        if want and tok not in want:
            raise ValueError(f"expected {' or '.join(want)}, found {tok or 'the end'!r}")
        pos += 1
        return kind, tok

    def value():
        kind, tok = peek()
        if tok in ("{", "<"):
            take()
            return message("}" if tok == "{" else ">")
        if kind == "string":
            parts = []
            while peek()[0] == "string":
                parts.append(_scalar("string", take()[1]))
            return "".join(parts)
        if kind in ("number", "ident"):
            take()
            return _scalar(kind, tok)
        raise ValueError(f"expected a value, found {tok or 'the end'!r}")

    def message(close: str | None) -> Message:
        msg: Message = {}
        while True:
            kind, tok = peek()
            if kind == "end":
                if close is not None:
                    raise ValueError(f"missing {close!r} at the end")
                return msg
            if tok == close:
                take()
                return msg
            if tok in (",", ";"):
                take()
                continue
            if kind != "ident":
                raise ValueError(f"expected a field name, found {tok!r}")
            take()
            name = tok
            if peek()[1] == ":":
                take()
            values = msg.setdefault(name, [])
            if peek()[1] == "[":
                take()
                while peek()[1] != "]":
                    values.append(value())
                    if peek()[1] == ",":
                        take()
                take("]")
            else:
                values.append(value())

    return message(None)


def first(msg: Message, *path: str, default=None):
    """The first value at ``path`` (field names, each a message but the last), else ``default``."""
    cur = msg
    for k, key in enumerate(path):
        vals = cur.get(key) if isinstance(cur, dict) else None
        if not vals:
            return default
        cur = vals[0]
        if k < len(path) - 1 and not isinstance(cur, dict):
            return default
    return cur
