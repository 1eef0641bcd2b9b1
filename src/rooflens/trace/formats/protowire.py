"""The protobuf wire format in plain Python, for the few small messages read outside the compiled
walks: plane and metadata stats, serialized HLO protos (their ids renumbered), pprof headers; and
written: a profiler request, renumbered HLO protos, a benchmark's stretched trace.
Field numbers and wire types follow protobuf's encoding guide (protobuf.dev, "Encoding").
"""

from __future__ import annotations


def fields(data: bytes):
    """(number, wire type, value) of a small message, in Python (plane and metadata stats only)."""
    pos, end = 0, len(data)
    while pos < end:
        key, pos = varint(data, pos)
        num, wt = key >> 3, key & 7
        if wt == 0:
            val, pos = varint(data, pos)
        elif wt == 1:
            val, pos = data[pos:pos + 8], pos + 8
        elif wt == 2:
            n, pos = varint(data, pos)
            val, pos = data[pos:pos + n], pos + n
        elif wt == 5:
            val, pos = data[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"wire type {wt}")
        if pos > end:
            raise ValueError("truncated")
        yield num, wt, val


def varint(data: bytes, pos: int) -> tuple[int, int]:
    """A protobuf varint at ``pos``, in Python (for the few small messages read outside the compiled
    walks): (value, position after it)."""
    result = shift = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 128:
            return result, pos
        shift += 7


def field_spans(buf: bytes, a: int = 0, b: int | None = None):
    """(field, wire type, field start, value or (payload start, payload end), field end)."""
    pos, end = a, len(buf) if b is None else b
    while pos < end:
        s = pos
        key, pos = varint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, pos = varint(buf, pos)
        elif wt == 1:
            v, pos = None, pos + 8
        elif wt == 5:
            v, pos = None, pos + 4
        elif wt == 2:
            n, pos = varint(buf, pos)
            v, pos = (pos, pos + n), pos + n
        else:
            raise ValueError(f"unsupported wire type {wt}")
        if pos > end:
            raise ValueError("a field runs past the end of its message")
        yield num, wt, s, v, pos


def int_values(buf: bytes, wt: int, v) -> list[int]:
    """A repeated int64's values: packed (wire type 2) or one value."""
    if wt == 0:
        return [v]
    out, pos = [], v[0]
    while pos < v[1]:
        x, pos = varint(buf, pos)
        out.append(x)
    return out


def encode_varint(n: int) -> bytes:
    """A varint's bytes (a negative int64 as its two's complement, ten bytes, as protobuf writes it)."""
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def varint_field(num: int, value: int) -> bytes:
    """Field ``num`` holding an integer (wire type 0)."""
    return encode_varint(num << 3) + encode_varint(value)


def bytes_field(num: int, body: bytes) -> bytes:
    """Field ``num`` holding bytes, a string or a message (wire type 2)."""
    return encode_varint(num << 3 | 2) + encode_varint(len(body)) + body
