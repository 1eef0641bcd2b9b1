"""The walks of :mod:`rooflens.trace.formats.xspace.wire` written for CPython, for small files.

numba costs most of a second to import and load before its first compiled call; a trace of up to a
couple of megabytes is walked here in less (see PLAIN_MAX_BYTES). Each function takes the arguments of
its compiled twin and gives the same results, row for row and code for code (the interning table is
filled as :func:`rooflens.trace.formats.compiled.intern` fills it), so the decoder may switch between
the two at any call. ``tests/test_fixed_cost.py`` compares both on every fixture.
"""

from __future__ import annotations

import struct
import weakref

import numpy as np

from rooflens.trace.formats import compiled
from rooflens.trace.formats.xspace import wire as W

#: files up to this size are walked here while numba is not loaded. Measured on a 2-core machine (CPU
#: seconds of a fresh process, decode alone, numba's cache warm): copies of the 0.86 MB TPU fixture
#: took 0.60-0.66 plain vs 0.67-0.85 compiled at 1.7 MB, 0.93 vs 0.84 at 2.6 MB, 1.39 vs 1.03 at 3.4 MB:
#: the plain walk (~0.1 M events/s) pays off below ~2 MB. With numba's cache cold, compiling costs ~40 s.
PLAIN_MAX_BYTES = 2 << 20

_NONE = int(W.NONE)
_NONE32 = int(W.NONE32)
_TRUNCATED, _BAD_LENGTH, _BAD_WIRE_TYPE = W.TRUNCATED, W.BAD_LENGTH, W.BAD_WIRE_TYPE
_last: tuple = (None, None)  # (weak reference to the last buffer, its tables): made once per file, not per call

class _Wire:
    """A buffer's bytes, and the varint starting at each position, precomputed with numpy: ``value[i]``
    (the signed 64-bit value, as the compiled walk reads it) and ``after[i]`` (the position after it;
    ``len + 1`` when the buffer ends first). A varint then costs two lookups instead of a Python loop."""

    def __init__(self, buf):
        self.b = buf.tobytes()
        n = len(buf)
        data = np.frombuffer(self.b, np.uint8)
        cont = data >= 128
        index = np.int32 if n < (1 << 31) - 2 else np.int64
        # after[i]: one past the first byte at or after i that ends a varint; one more slot, past the end
        after = np.full(n + 1, n + 2, index)
        after[:n] = np.where(cont, n + 1, np.arange(1, n + 1, dtype=index))
        after[:n] = np.minimum.accumulate(after[n - 1::-1])[::-1] if n else after[:n]
        value = np.zeros(n + 1, np.int64)
        low = value[:n]
        np.bitwise_and(data, 0x7F, out=low, casting="unsafe")
        low = low.copy()
        idx = np.flatnonzero(cont)
        for k in range(1, 10):  # bits of the k-th byte (shifts of 64 and more are dropped, as there)
            idx = idx[idx + k < n]
            if not len(idx):
                break
            value[idx] |= low[idx + k] << (7 * k)
            idx = idx[cont[idx + k]]
        self.value, self.after = memoryview(value), memoryview(after)


def _wire(buf) -> _Wire:
    global _last
    ref, w = _last  # one read: another thread may replace it meanwhile, with another file's tables
    if ref is None or ref() is not buf:
        w = _Wire(buf)
        _last = (weakref.ref(buf), w)
    return w


def _varint(w: _Wire, pos: int, end: int) -> tuple[int, int]:
    """(value as a signed 64-bit int, new position), or (0, -1) when it runs past ``end``."""
    p2 = w.after[pos]
    if p2 > end:
        return 0, -1
    return w.value[pos], p2


def _skip(w: _Wire, pos: int, end: int, wt: int) -> int:
    if wt == 0:
        return _varint(w, pos, end)[1]
    if wt == 1:
        return pos + 8 if pos + 8 <= end else -1
    if wt == 2:
        n, pos = _varint(w, pos, end)
        if pos < 0 or n < 0 or n > end - pos:
            return -1
        return pos + n
    if wt == 5:
        return pos + 4 if pos + 4 <= end else -1
    return -2


@compiled.plain_twin(W.fields, PLAIN_MAX_BYTES)
def fields(buf, start, end, out, err):
    w = _wire(buf)
    pos, end = int(start), int(end)
    n = 0
    cap = out.shape[0]
    while pos < end:
        at = pos
        key, pos = _varint(w, pos, end)
        if pos < 0:
            err[0], err[1] = W.TRUNCATED, at
            return -1
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, p2 = _varint(w, pos, end)
            a = e = v
        elif wt == 2:
            ln, p2 = _varint(w, pos, end)
            if p2 >= 0 and (ln < 0 or ln > end - p2):
                err[0], err[1] = W.BAD_LENGTH, at
                return -1
            a, e = p2, p2 + ln
            if p2 >= 0:
                p2 += ln
        else:
            p2 = _skip(w, pos, end, wt)
            a, e = pos, p2
        if p2 == -2:
            err[0], err[1] = W.BAD_WIRE_TYPE, at
            return -1
        if p2 < 0:
            err[0], err[1] = W.TRUNCATED, at
            return -1
        if n < cap:
            out[n] = (num, wt, a, e)
        n += 1
        pos = p2
    return n


def _message(w: _Wire, pos: int, end: int, out_row: list, on_varint: dict, on_bytes: dict) -> tuple[int, int]:
    """Walk one message: varint fields in ``on_varint`` (number → column) and length-delimited ones in
    ``on_bytes`` (number → first of two columns) go to ``out_row``, the rest are skipped. A bad length
    is BAD_LENGTH for the fields read, TRUNCATED for those skipped, as the compiled walks say it.
    Returns (0, 0), or (error code, offset)."""
    while pos < end:
        at = pos
        tag, pos = _varint(w, pos, end)
        if pos < 0:
            return _TRUNCATED, at
        wt, num = tag & 7, tag >> 3
        if wt == 0:
            v, pos = _varint(w, pos, end)
            col = on_varint.get(num)
            if col is not None and pos >= 0:
                out_row[col] = v
        elif wt == 2 and num in on_bytes:
            ln, pos = _varint(w, pos, end)
            if pos < 0 or ln < 0 or ln > end - pos:
                return _BAD_LENGTH, at
            col = on_bytes[num]
            out_row[col], out_row[col + 1] = pos, pos + ln
            pos += ln
        else:
            pos = _skip(w, pos, end, wt)
        if pos < 0:
            return (_TRUNCATED if pos == -1 else _BAD_WIRE_TYPE), at
    return 0, 0


@compiled.plain_twin(W.metadata_entries, PLAIN_MAX_BYTES)
def metadata_entries(buf, spans, out, err):
    w = _wire(buf)
    for k, (start, end) in enumerate(spans.tolist()):
        entry = [0, -1, -1]  # key, value start, value end
        code, at = _entry(w, start, end, entry)
        if code:
            err[0], err[1] = code, at
            return -1
        key, vs, ve = entry
        row = [key, key, -1, -1, -1, -1, vs, ve]
        if vs >= 0:
            code, at = _message(w, vs, ve, row, {1: 1}, {2: 2, 4: 4})
            if code:
                err[0], err[1] = code, at
                return -1
        out[k] = row
    return len(spans)


def _entry(w: _Wire, pos: int, end: int, entry: list) -> tuple[int, int]:
    """A map entry's key (field 1, varint) and value span (field 2), the last of each kept."""
    while pos < end:
        at = pos
        tag, pos = _varint(w, pos, end)
        if pos < 0:
            return W.TRUNCATED, at
        if tag == 8:
            entry[0], pos = _varint(w, pos, end)
        elif tag == 18:
            ln, pos = _varint(w, pos, end)
            if pos < 0 or ln < 0 or ln > end - pos:
                return W.BAD_LENGTH, at
            entry[1], entry[2] = pos, pos + ln
            pos += ln
        else:
            pos = _skip(w, pos, end, tag & 7)
        if pos < 0:
            return (W.TRUNCATED if pos == -1 else W.BAD_WIRE_TYPE), at
    return 0, 0


@compiled.plain_twin(W.line_headers, PLAIN_MAX_BYTES)
def line_headers(buf, spans, out, err):
    w = _wire(buf)
    val, aft = w.value, w.after
    for k, (start, end) in enumerate(spans.tolist()):
        row = [0, -1, -1, -1, -1, 0, 0, 0]
        pos = start
        while pos < end:
            at = pos
            p2 = aft[pos]
            if p2 > end:
                err[0], err[1] = _TRUNCATED, at
                return -1
            tag, pos = val[pos], p2
            wt, num = tag & 7, tag >> 3
            if wt == 2:
                p2, ln = aft[pos], val[pos]
                if p2 > end or ln < 0 or ln > end - p2:
                    err[0], err[1] = _BAD_LENGTH, at
                    return -1
                if num == 4:  # an event: counted, skipped by its length
                    row[7] += 1
                elif num == 2 or num == 11:
                    c = 1 if num == 2 else 3
                    row[c], row[c + 1] = p2, p2 + ln
                pos = p2 + ln
            elif wt == 0:
                p2 = aft[pos]
                if p2 > end:
                    err[0], err[1] = _TRUNCATED, at
                    return -1
                if num == 1 or num == 3 or num == 9:
                    row[0 if num == 1 else 5 if num == 3 else 6] = val[pos]
                pos = p2
            else:
                pos = _skip(w, pos, end, wt)
                if pos < 0:
                    err[0], err[1] = (_TRUNCATED if pos == -1 else _BAD_WIRE_TYPE), at
                    return -1
        out[k] = row
    return len(spans)


def _plane_stats(sm_ids, sm_col, sm_name, lo: int, hi: int) -> tuple[dict, dict]:
    """A plane's stat metadata: id → kept column, and id → name span (for ``ref`` stats)."""
    ids = sm_ids[lo:hi].tolist()
    cols = {i: c for i, c in zip(ids, sm_col[lo:hi].tolist()) if c >= 0}
    names = dict(zip(ids, map(tuple, sm_name[lo:hi].tolist())))
    return cols, names


def _double_as_int(bits: int) -> int:
    """``np.int64(x)`` of the double whose bits are ``bits``, as numba's conversion gives it."""
    x = struct.unpack("<d", struct.pack("<q", bits))[0]
    if x != x or not -9.223372036854775808e18 <= x < 9.223372036854775808e18:
        return _NONE  # out of range: x86's conversion gives the "integer indefinite" value, INT64_MIN
    return int(x)


_STRING_COLS = frozenset((W.S_HLO_OP, W.S_HLO_MODULE))
_N_STATS = len(W.STAT_NAMES)


def _event(w: _Wire, pos: int, ev_end: int, cols: dict, names: dict, interner) -> tuple:
    """One XEvent → (error code, offset, metadata id, offset_ps, duration_ps, stat values or None when
    the interning table is full). A stat whose metadata id comes first and names no kept column is
    skipped unread, as the compiled walk does."""
    val, aft, b = w.value, w.after, w.b
    meta = off = dur = 0
    vals = [_NONE] * _N_STATS
    full = False
    while pos < ev_end:
        at = pos
        p2 = aft[pos]
        if p2 > ev_end:
            return _TRUNCATED, at, 0, 0, 0, None
        t, pos = val[pos], p2
        if t == 8 or t == 16 or t == 24:
            p2 = aft[pos]
            if p2 > ev_end:
                return _TRUNCATED, at, 0, 0, 0, None
            if t == 8:
                meta = val[pos]
            elif t == 16:
                off = val[pos]
            else:
                dur = val[pos]
            pos = p2
            continue
        if t != 34:
            pos = _skip(w, pos, ev_end, t & 7)
            if pos < 0:
                return (_TRUNCATED if pos == -1 else _BAD_WIRE_TYPE), at, 0, 0, 0, None
            continue
        p2 = aft[pos]
        sl = val[pos]
        if p2 > ev_end or sl < 0 or sl > ev_end - p2:
            return _BAD_LENGTH, at, 0, 0, 0, None
        pos, st_end = p2, p2 + sl
        if pos < st_end and b[pos] == 8 and aft[pos + 1] <= st_end and val[pos + 1] not in cols:
            pos = st_end  # a stat no column wants
            continue
        sid, vt, vs, ve = -1, 0, 0, 0
        while pos < st_end:
            a2 = pos
            p2 = aft[pos]
            if p2 > st_end:
                return _TRUNCATED, a2, 0, 0, 0, None
            t2, pos = val[pos], p2
            f2, w2 = t2 >> 3, t2 & 7
            if w2 == 0:
                p2 = aft[pos]
                if p2 > st_end:
                    return _TRUNCATED, a2, 0, 0, 0, None
                if f2 == 1:
                    sid = val[pos]
                else:
                    vs, vt = val[pos], f2
                pos = p2
            elif w2 == 1:
                if pos + 8 > st_end:
                    return _TRUNCATED, a2, 0, 0, 0, None
                vs, vt = int.from_bytes(b[pos:pos + 8], "little", signed=True), f2
                pos += 8
            elif w2 == 2:
                l2, pos = _varint(w, pos, st_end)
                if pos < 0 or l2 < 0 or l2 > st_end - pos:
                    return _BAD_LENGTH, a2, 0, 0, 0, None
                vs, ve, vt = pos, pos + l2, f2
                pos += l2
            else:
                pos = _skip(w, pos, st_end, w2)
                if pos < 0:
                    return (_TRUNCATED if pos == -1 else _BAD_WIRE_TYPE), a2, 0, 0, 0, None
        col = cols.get(sid, -1)
        if col < 0:
            continue
        if col in _STRING_COLS:
            if vt == 5:
                c = interner.code(vs, ve)
            elif vt == 7 and vs in names:
                c = interner.code(*names[vs])
            else:
                continue
            full = full or c < 0
            vals[col] = c
        elif vt == 3 or vt == 4:
            vals[col] = vs
        elif vt == 2:
            vals[col] = _double_as_int(vs)
    return 0, 0, meta, off, dur, (None if full else vals)


@compiled.plain_twin(W.decode_events, PLAIN_MAX_BYTES)
def decode_events(buf, lines, state, budget_bytes, long_ps, sm_ids, sm_col, sm_name, plane_sm, want,
                  rows, tkeys, tcodes, strs, nstr, ref_code, err):  # ref_code: the interner's dict does its work
    w = _wire(buf)
    interner = compiled.PlainInterner(w.b, tkeys, tcodes, strs, nstr)
    li, n, seen = int(state[0]), int(state[2]), int(state[3])
    cap = rows.shape[0]
    kept: list[list[int]] = []
    first = n
    spent = 0
    planes: dict[int, tuple[dict, dict]] = {}
    line_rows = lines.tolist()
    status = W.DONE

    def stop(code: int, pos: int) -> int:
        if code == W.FAILED:  # the compiled walk leaves the state as the call found it
            return code
        if kept:
            rows[first:first + len(kept)] = kept
        state[0], state[1], state[2], state[3] = li, pos, first + len(kept), seen
        return code

    val, aft = w.value, w.after
    k_op, k_step, k_step_id, k_dev = W.S_HLO_OP, W.S_STEP_NUM, W.S_STEP_ID, W.S_GLOBAL_DEVICE_ID
    while li < len(line_rows):
        start, end, plane, flags, base_ps = line_rows[li]
        if plane not in planes:
            planes[plane] = _plane_stats(sm_ids, sm_col, sm_name, *plane_sm[plane].tolist())
        cols, names = planes[plane]
        keep_all, keep_keyed, keep_long = flags & W.KEEP_ALL, flags & W.KEEP_KEYED, flags & W.KEEP_LONG
        wanted = {k & ((1 << 40) - 1) for k in want.tolist() if k >> 40 == plane} if flags & W.KEEP_META else ()
        pos = int(state[1]) if state[1] > 0 and li == int(state[0]) else start
        seg = pos
        budget_at = seg + budget_bytes - spent  # the position where this call's byte budget runs out
        while pos < end:
            if pos >= budget_at:
                return stop(W.BUDGET, pos)
            if first + len(kept) >= cap:
                return stop(W.OUT_FULL, pos)
            resume = pos
            p2 = aft[pos]
            if p2 > end:
                err[0], err[1] = _TRUNCATED, resume
                return stop(W.FAILED, resume)
            tag, pos = val[pos], p2
            if tag != 34:
                pos = _skip(w, pos, end, tag & 7)
                if pos < 0:
                    err[0], err[1] = (_TRUNCATED if pos == -1 else _BAD_WIRE_TYPE), resume
                    return stop(W.FAILED, resume)
                continue
            p2 = aft[pos]
            ln = val[pos]
            if p2 > end or ln < 0 or ln > end - p2:
                err[0], err[1] = _BAD_LENGTH, resume
                return stop(W.FAILED, resume)
            code, at, meta, off, dur, vals = _event(w, p2, p2 + ln, cols, names, interner)
            pos = p2 + ln
            if code:
                err[0], err[1] = code, at
                return stop(W.FAILED, resume)
            if vals is None:
                return stop(W.TABLE_FULL, resume)
            seen += 1
            if (keep_all or (keep_keyed and (vals[k_op] != _NONE or vals[k_step] != _NONE
                                             or vals[k_step_id] != _NONE or vals[k_dev] != _NONE))
                    or (keep_long and dur >= long_ps) or meta in wanted):
                kept.append([li, meta, base_ps + off, dur, *vals])
        spent += end - seg
        state[1] = 0
        li += 1
    return stop(status, 0)


@compiled.plain_twin(W.place, 1 << 62)  # numpy's own loops: as fast for any piece a plain walk makes
def place(rows, n, wide, narrow, slot, at, lut, line_index, first_line, real):
    block = rows[:n]
    end = at + n

    def column(k: int) -> tuple[np.ndarray, int]:
        return (wide[slot[k]], _NONE) if slot[k] >= 0 else (narrow[-1 - slot[k]], _NONE32)

    for k in range(W.N_COLS):
        v = block[:, k]
        col, none = column(k)
        if k == W.COL_LINE:
            v = line_index[first_line + v]
        elif k >= W.STAT_BASE:
            present = v != _NONE
            if not real[k]:
                if not present.any():
                    continue
                col[:at] = none
                real[k] = 1
            if k - W.STAT_BASE in _STRING_COLS and present.any():
                v = np.where(present, lut[np.where(present, v, 0)], _NONE)
        if none == _NONE32:
            absent = v == _NONE
            if ((v[~absent] <= _NONE32) | (v[~absent] > W.INT32_MAX)).any():
                return 1
            v = np.where(absent, _NONE32, v)
        col[at:end] = v
    return 0
