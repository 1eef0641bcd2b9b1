"""A compiled scan of Chrome trace events: the fields rooflens reads, straight from the JSON text.

Each event object (a span of the text, found by :func:`rooflens.trace.formats.chrome.events.split_elements`) is
walked once; the keys below are matched, everything else is skipped by its brackets. String and
id values are interned to dense codes (their raw bytes, quotes included, are copied once into an
arena for the caller to decode); numbers are parsed in place, also when written as strings
(``"device_offset_ps": "121687640000"``, as jaxlib's exporter writes them). No Python object is
made per event.
"""

from __future__ import annotations

import numpy as np

from rooflens.trace.formats.compiled import hash_bytes, njit

#: the keys read: level 1 of an event, then level 2 inside its "args"
KEYS = ("ph", "pid", "tid", "ts", "dur", "name", "args",
        "hlo_op", "hlo_module", "long_name", "program_id", "device_ordinal", "step_num", "device_offset_ps",
        "device_duration_ps", "hlo_category", "tf_op")
K_PH, K_PID, K_TID, K_TS, K_DUR, K_NAME, K_ARGS, K_HLO_OP, K_HLO_MODULE, K_LONG_NAME, K_PROGRAM_ID, \
    K_DEVICE_ORDINAL, K_STEP_NUM, K_DEVICE_OFFSET_PS, K_DEVICE_DURATION_PS, K_HLO_CATEGORY, K_TF_OP = range(len(KEYS))
LEVEL1 = K_ARGS + 1

# integer output columns; -1 when absent
I_PH, I_PID, I_TID, I_NAME, I_HLO_OP, I_HLO_MODULE, I_LONG_NAME, I_PROGRAM_ID, I_DEVICE_ORDINAL, I_STEP_NUM, \
    I_DEVICE_OFFSET_PS, I_DEVICE_DURATION_PS, I_META, I_START, I_END = range(15)
N_INT = 15
CODE_OF_KEY = {K_PID: I_PID, K_TID: I_TID, K_NAME: I_NAME, K_HLO_OP: I_HLO_OP, K_HLO_MODULE: I_HLO_MODULE,
               K_LONG_NAME: I_LONG_NAME, K_PROGRAM_ID: I_PROGRAM_ID}
INT_OF_KEY = {K_DEVICE_ORDINAL: I_DEVICE_ORDINAL, K_STEP_NUM: I_STEP_NUM, K_DEVICE_OFFSET_PS: I_DEVICE_OFFSET_PS,
              K_DEVICE_DURATION_PS: I_DEVICE_DURATION_PS}
F_TS, F_DUR = 0, 1

# status
DONE, ARENA_FULL, BAD_JSON, NOT_A_NUMBER = 0, 1, 2, 3


def key_table() -> tuple[np.ndarray, np.ndarray]:
    """The keys' bytes, concatenated, and each key's [start, end) in them."""
    raw = b"".join(k.encode() for k in KEYS)
    bounds, at = [], 0
    for k in KEYS:
        bounds.append((at, at + len(k)))
        at += len(k)
    return np.frombuffer(raw, np.uint8).copy(), np.asarray(bounds, np.int64)


CODE_COL = np.full(len(KEYS), -1, np.int64)
INT_COL = np.full(len(KEYS), -1, np.int64)
for _k, _c in CODE_OF_KEY.items():
    CODE_COL[_k] = _c
for _k, _c in INT_OF_KEY.items():
    INT_COL[_k] = _c


@njit(cache=True)
def _ws(buf, pos, end):
    while pos < end and (buf[pos] == 32 or buf[pos] == 10 or buf[pos] == 13 or buf[pos] == 9 or buf[pos] == 44):
        pos += 1
    return pos


@njit(cache=True)
def _string_end(buf, pos, end):
    """``pos`` at an opening quote → the position after its closing quote (-1: unterminated)."""
    pos += 1
    while pos < end:
        c = buf[pos]
        if c == 92:
            pos += 2
            continue
        if c == 34:
            return pos + 1
        pos += 1
    return -1


@njit(cache=True)
def _value_end(buf, pos, end):
    """The end of any JSON value starting at ``pos`` (objects and arrays by their brackets)."""
    c = buf[pos]
    if c == 34:
        return _string_end(buf, pos, end)
    if c == 123 or c == 91:
        depth = 0
        while pos < end:
            c = buf[pos]
            if c == 34:
                pos = _string_end(buf, pos, end)
                if pos < 0:
                    return -1
                continue
            if c == 123 or c == 91:
                depth += 1
            elif c == 125 or c == 93:
                depth -= 1
                if depth == 0:
                    return pos + 1
            pos += 1
        return -1
    while pos < end:
        c = buf[pos]
        if c == 44 or c == 125 or c == 93 or c == 32 or c == 10 or c == 13 or c == 9:
            break
        pos += 1
    return pos


@njit(cache=True)
def _key_id(buf, s, e, keys, bounds, lo, hi):
    n = e - s
    for k in range(lo, hi):
        a, b = bounds[k, 0], bounds[k, 1]
        if b - a != n or keys[a] != buf[s]:
            continue
        same = True
        for i in range(n):
            if keys[a + i] != buf[s + i]:
                same = False
                break
        if same:
            return k
    return -1


@njit(cache=True)
def _number(buf, s, e):
    """(value, ok) of the number in ``buf[s:e]`` (quotes around it allowed)."""
    if e - s >= 2 and buf[s] == 34 and buf[e - 1] == 34:
        s += 1
        e -= 1
    if s >= e:
        return 0.0, False
    neg = False
    if buf[s] == 45:
        neg = True
        s += 1
    mant = 0.0
    digits = 0
    scale = 0
    i = s
    while i < e and 48 <= buf[i] <= 57:
        mant = mant * 10.0 + (buf[i] - 48)
        digits += 1
        i += 1
    if i < e and buf[i] == 46:
        i += 1
        while i < e and 48 <= buf[i] <= 57:
            mant = mant * 10.0 + (buf[i] - 48)
            scale -= 1
            digits += 1
            i += 1
    if digits == 0:
        return 0.0, False
    if i < e and (buf[i] == 101 or buf[i] == 69):
        i += 1
        eneg = False
        if i < e and (buf[i] == 45 or buf[i] == 43):
            eneg = buf[i] == 45
            i += 1
        ex = 0
        ed = 0
        while i < e and 48 <= buf[i] <= 57:
            ex = ex * 10 + (buf[i] - 48)
            ed += 1
            i += 1
        if ed == 0:
            return 0.0, False
        scale += -ex if eneg else ex
    if i != e:
        return 0.0, False
    v = mant * 10.0 ** scale if scale >= 0 else mant / 10.0 ** (-scale)
    return (-v if neg else v), True


@njit(cache=True)
def _integer(buf, s, e):
    """(value, ok) of an integer in ``buf[s:e]`` (quotes allowed), exact to 64 bits."""
    if e - s >= 2 and buf[s] == 34 and buf[e - 1] == 34:
        s += 1
        e -= 1
    neg = False
    if s < e and buf[s] == 45:
        neg = True
        s += 1
    if s >= e:
        return np.int64(0), False
    v = np.int64(0)
    for i in range(s, e):
        c = buf[i]
        if c < 48 or c > 57:
            f, ok = _number(buf, s, e)  # 1.0e3 and the like
            return np.int64(f) * (-1 if neg else 1), ok
        v = v * 10 + (c - 48)
    return -v if neg else v, True


@njit(cache=True)
def _intern_copy(buf, s, e, tkeys, tcodes, strs, nstr, arena, used):
    """Like :func:`rooflens.trace.formats.compiled.intern`, but a new string's bytes are copied into ``arena``
    (the text is streamed; chunks do not stay). -1: table or arena full."""
    h = hash_bytes(buf, s, e)
    mask = tkeys.shape[0] - 1
    slot = h & mask
    n = e - s
    while True:
        k = tkeys[slot]
        if k == 0:
            break
        if k == h:
            c = tcodes[slot]
            a = strs[c, 0]
            if strs[c, 1] - a == n:
                same = True
                for i in range(n):
                    if arena[a + i] != buf[s + i]:
                        same = False
                        break
                if same:
                    return c
        slot = (slot + 1) & mask
    c = nstr[0]
    if c >= strs.shape[0] or 2 * (c + 1) > tkeys.shape[0] or used[0] + n > arena.shape[0]:
        return -1
    a = used[0]
    for i in range(n):
        arena[a + i] = buf[s + i]
    used[0] = a + n
    tkeys[slot] = h
    tcodes[slot] = c
    strs[c, 0], strs[c, 1] = a, a + n
    nstr[0] = c + 1
    return c


@njit(cache=True)
def scan_events(buf, spans, first, keys, bounds, code_col, int_col, ints, floats, n0,
                tkeys, tcodes, strs, nstr, arena, used, err):
    """Read the events ``spans[first:]`` (each a JSON object) into ``ints``/``floats`` from row
    ``n0``. Returns (status, next span index, rows). ``err`` = [position, key] on BAD_JSON /
    NOT_A_NUMBER."""
    n = n0
    for k in range(first, spans.shape[0]):
        s, end = spans[k, 0], spans[k, 1]
        for j in range(ints.shape[0]):
            ints[j, n] = -1
        floats[F_TS, n] = 0.0
        floats[F_DUR, n] = 0.0
        ints[I_START, n], ints[I_END, n] = s, end
        pos = _ws(buf, s + 1, end)
        level_end = end
        lo, hi = 0, LEVEL1
        in_args = False
        while True:
            pos = _ws(buf, pos, level_end)
            if pos >= level_end:
                err[0], err[1] = pos, -1
                return BAD_JSON, k, n
            c = buf[pos]
            if c == 125:  # }
                if in_args:
                    in_args = False
                    lo, hi = 0, LEVEL1
                    pos += 1
                    continue
                break
            if c != 34:
                err[0], err[1] = pos, -1
                return BAD_JSON, k, n
            ke = _string_end(buf, pos, level_end)
            if ke < 0:
                err[0], err[1] = pos, -1
                return BAD_JSON, k, n
            key = _key_id(buf, pos + 1, ke - 1, keys, bounds, lo, hi)
            pos = _ws(buf, ke, level_end)
            if pos >= level_end or buf[pos] != 58:  # :
                err[0], err[1] = pos, -1
                return BAD_JSON, k, n
            pos = _ws(buf, pos + 1, level_end)
            if pos >= level_end:
                err[0], err[1] = pos, -1
                return BAD_JSON, k, n
            if key == K_ARGS and buf[pos] == 123:
                in_args = True
                lo, hi = LEVEL1, len(KEYS)
                pos += 1
                continue
            ve = _value_end(buf, pos, level_end)
            if ve < 0:
                err[0], err[1] = pos, -1
                return BAD_JSON, k, n
            if key < 0:
                pos = ve
                continue
            if key == K_PH:
                ints[I_PH, n] = buf[pos + 1] if buf[pos] == 34 and ve - pos > 2 else -2
            elif key in (K_TS, K_DUR):
                v, ok = _number(buf, pos, ve)
                if not ok:
                    err[0], err[1] = pos, key
                    return NOT_A_NUMBER, k, n
                floats[F_TS if key == K_TS else F_DUR, n] = v
            elif key in (K_HLO_CATEGORY, K_TF_OP):
                ints[I_META, n] = 1
            elif code_col[key] >= 0:
                if buf[pos] == 110:  # null
                    pos = ve
                    continue
                code = _intern_copy(buf, pos, ve, tkeys, tcodes, strs, nstr, arena, used)
                if code < 0:
                    return ARENA_FULL, k, n
                ints[code_col[key], n] = code
            elif int_col[key] >= 0:
                v2, ok = _integer(buf, pos, ve)
                if not ok:
                    err[0], err[1] = pos, key
                    return NOT_A_NUMBER, k, n
                ints[int_col[key], n] = v2
            pos = ve
        n += 1
    return DONE, spans.shape[0], n
