"""Compiled walks over the protobuf wire format of an XSpace (``*.xplane.pb``).

The schema is openxla/xla ``third_party/tsl/tsl/profiler/protobuf/xplane.proto``:

* ``XSpace``: planes = 1 (repeated XPlane), errors = 2, warnings = 3, hostnames = 4;
* ``XPlane``: id = 1, name = 2, lines = 3, event_metadata = 4 (map<int64, XEventMetadata>),
  stat_metadata = 5 (map<int64, XStatMetadata>), stats = 6;
* ``XLine``: id = 1, name = 2, timestamp_ns = 3, events = 4, duration_ps = 9, display_id = 10,
  display_name = 11;
* ``XEvent``: metadata_id = 1, offset_ps = 2 (or num_occurrences = 5), duration_ps = 3, stats = 4;
* ``XStat``: metadata_id = 1, then one of double = 2, uint64 = 3, int64 = 4, str = 5, bytes = 6,
  ref = 7 (the name of a stat metadata), compressed str = 8;
* ``XEventMetadata``: id = 1, name = 2, metadata = 3, display_name = 4, stats = 5, child_id = 6;
  ``XStatMetadata``: id = 1, name = 2, description = 3. Map entries: key = 1, value = 2.

Everything here is numba-compiled (``cache=True``) and works on a ``uint8`` array over the file
(an mmap). No Python object is made per event: events go straight into int64 columns, and string
stats (``hlo_op``, ``hlo_module``) are interned to dense codes by a hash table in the loop, keeping
the position of one occurrence of each string for the caller to decode once.

Every read is bounds-checked: a truncated or corrupt file ends the walk with an error code and the
byte offset where it broke, never an out-of-bounds read.
"""

from __future__ import annotations

import numpy as np

from rooflens.trace.formats.compiled import intern, njit

# error codes (``err[0]``); ``err[1]`` is the byte offset where the walk broke
OK, TRUNCATED, BAD_WIRE_TYPE, BAD_LENGTH = 0, 1, 2, 3
ERROR_TEXT = {TRUNCATED: "a field runs past the end of its message (the file is cut short or damaged)",
              BAD_WIRE_TYPE: "a field has an invalid protobuf wire type",
              BAD_LENGTH: "a length prefix points past the end of its message"}

# event columns (rows of the int64 output array)
COL_LINE, COL_META, COL_START_PS, COL_DUR_PS = 0, 1, 2, 3
#: stat columns, in the order of STAT_NAMES; string stats hold an interned code, numbers their value
STAT_NAMES = ("hlo_op", "hlo_module", "program_id", "device_ordinal", "global_device_id", "step_num",
              "group_id", "correlation_id", "device_offset_ps", "device_duration_ps", "step_id")
STAT_BASE = 4
N_COLS = STAT_BASE + len(STAT_NAMES)
S_HLO_OP, S_HLO_MODULE, S_PROGRAM_ID, S_DEVICE_ORDINAL, S_GLOBAL_DEVICE_ID, S_STEP_NUM, S_GROUP_ID, \
    S_CORRELATION_ID, S_DEVICE_OFFSET_PS, S_DEVICE_DURATION_PS, S_STEP_ID = range(len(STAT_NAMES))
STRING_STATS = (S_HLO_OP, S_HLO_MODULE)
NONE = np.iinfo(np.int64).min  # "stat absent"
#: the final columns held as int32, what they hold being small (line and metadata indices, interned string codes,
#: device, step and group numbers): 4 bytes a kept event each, not 8 (a 1 GB CPU trace's 6 M kept events held
#: 500 MB of columns at its peak). Their "absent" is NONE32; a value that does not fit (NONE32 itself included)
#: sends the walk back over the file with every column int64 (:func:`rooflens.trace.formats.xspace.walk.walk`)
NARROW = (COL_LINE, COL_META, STAT_BASE + S_HLO_OP, STAT_BASE + S_HLO_MODULE, STAT_BASE + S_DEVICE_ORDINAL,
          STAT_BASE + S_GLOBAL_DEVICE_ID, STAT_BASE + S_STEP_NUM, STAT_BASE + S_GROUP_ID, STAT_BASE + S_STEP_ID)
NONE32 = np.iinfo(np.int32).min
INT32_MAX = np.iinfo(np.int32).max


def absent_in(col: np.ndarray) -> int:
    """The value that marks a stat absent in the final column ``col`` (NONE, or NONE32 in a narrow column)."""
    return NONE32 if col.dtype == np.int32 else NONE

# line flags: which events of a line are kept
KEEP_ALL = 1  # every event (TPU XLA Ops / XLA Modules, Steps lines)
KEEP_KEYED = 2  # events with an hlo_op, step_num/step_id or global_device_id stat
KEEP_LONG = 4  # events at least ``long_ps`` long (the Python tracer's frames)
KEEP_META = 8  # events whose (plane, metadata id) is among the wanted ones (the host's dispatch events)

#: the largest table of wanted metadata ids per plane (:func:`_wanted_of`): 4 MB of flags
WANTED_TABLE_MAX = 1 << 22

# decode status
DONE, BUDGET, OUT_FULL, TABLE_FULL, FAILED = 0, 1, 2, 3, 4


@njit(cache=True)
def _varint(buf, pos, end):
    """(value as int64, new position), or (0, -1) when the varint runs past ``end``."""
    if pos < end and buf[pos] < 128:  # one byte: most tags, lengths and ids
        return np.int64(buf[pos]), pos + 1
    result = np.int64(0)
    shift = 0
    while pos < end:
        b = np.int64(buf[pos])
        pos += 1
        if shift < 64:
            result |= (b & 0x7F) << shift
        if b < 128:
            return result, pos
        shift += 7
    return np.int64(0), -1


@njit(cache=True)
def _skip(buf, pos, end, wt):
    """Position after a field's value of wire type ``wt`` (-1 truncated, -2 bad wire type)."""
    if wt == 0:
        _, pos = _varint(buf, pos, end)
        return pos
    if wt == 1:
        return pos + 8 if pos + 8 <= end else -1
    if wt == 2:
        n, pos = _varint(buf, pos, end)
        if pos < 0 or n < 0 or n > end - pos:
            return -1
        return pos + n
    if wt == 5:
        return pos + 4 if pos + 4 <= end else -1
    return -2


@njit(cache=True)
def fields(buf, start, end, out, err):
    """Every field of the message ``buf[start:end]`` as rows (number, wire type, value start, value
    end or varint value). Returns the field count (rows beyond ``len(out)`` are counted, not
    written: call once with an empty ``out`` to size it) or -1 with ``err`` set."""
    pos = start
    n = 0
    while pos < end:
        at = pos
        key, pos = _varint(buf, pos, end)
        if pos < 0:
            err[0], err[1] = TRUNCATED, at
            return -1
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, p2 = _varint(buf, pos, end)
            a, b = v, v
        elif wt == 2:
            ln, p2 = _varint(buf, pos, end)
            if p2 >= 0 and (ln < 0 or ln > end - p2):
                err[0], err[1] = BAD_LENGTH, at
                return -1
            a, b = p2, p2 + ln
            if p2 >= 0:
                p2 = p2 + ln
        else:
            p2 = _skip(buf, pos, end, wt)
            a, b = pos, p2
        if p2 == -2:
            err[0], err[1] = BAD_WIRE_TYPE, at
            return -1
        if p2 < 0:
            err[0], err[1] = TRUNCATED, at
            return -1
        if n < out.shape[0]:
            out[n, 0], out[n, 1], out[n, 2], out[n, 3] = num, wt, a, b
        n += 1
        pos = p2
    return n


@njit(cache=True)
def metadata_entries(buf, spans, out, err):
    """Map entries ``map<int64, X*Metadata>`` (one per row of ``spans``: start, end) → rows of
    (key, id, name start, name end, display name start, display name end, value start, value end)."""
    for k in range(spans.shape[0]):
        pos, end = spans[k, 0], spans[k, 1]
        key = np.int64(0)
        vs, ve = np.int64(-1), np.int64(-1)
        while pos < end:
            at = pos
            tag, pos = _varint(buf, pos, end)
            if pos < 0:
                err[0], err[1] = TRUNCATED, at
                return -1
            if tag == 8:
                key, pos = _varint(buf, pos, end)
            elif tag == 18:
                ln, pos = _varint(buf, pos, end)
                if pos < 0 or ln < 0 or ln > end - pos:
                    err[0], err[1] = BAD_LENGTH, at
                    return -1
                vs, ve = pos, pos + ln
                pos += ln
            else:
                pos = _skip(buf, pos, end, tag & 7)
            if pos < 0:
                err[0], err[1] = TRUNCATED if pos == -1 else BAD_WIRE_TYPE, at
                return -1
        out[k, 0] = key
        out[k, 1] = key
        out[k, 2] = out[k, 3] = out[k, 4] = out[k, 5] = -1
        out[k, 6], out[k, 7] = vs, ve
        pos, end = vs, ve
        while vs >= 0 and pos < end:
            at = pos
            tag, pos = _varint(buf, pos, end)
            if pos < 0:
                err[0], err[1] = TRUNCATED, at
                return -1
            if tag == 8:
                v, pos = _varint(buf, pos, end)
                out[k, 1] = v
            elif tag == 18 or tag == 34:
                ln, pos = _varint(buf, pos, end)
                if pos < 0 or ln < 0 or ln > end - pos:
                    err[0], err[1] = BAD_LENGTH, at
                    return -1
                col = 2 if tag == 18 else 4
                out[k, col], out[k, col + 1] = pos, pos + ln
                pos += ln
            else:
                pos = _skip(buf, pos, end, tag & 7)
            if pos < 0:
                err[0], err[1] = TRUNCATED if pos == -1 else BAD_WIRE_TYPE, at
                return -1
    return spans.shape[0]


@njit(cache=True, nogil=True)  # threads read the headers of different lines side by side
def line_headers(buf, spans, out, err):
    """XLine messages (rows of ``spans``) → rows of (id, name start, name end, display name start,
    display name end, timestamp_ns, duration_ps, events): event bodies are skipped, not read."""
    for k in range(spans.shape[0]):
        start_header(out[k])
        if line_header_until(buf, spans[k, 0], spans[k, 1], spans[k, 1], out[k], err) < 0:
            return -1
    return spans.shape[0]


@njit(cache=True)
def start_header(row):
    """A line header's row before its fields are read: no id, names, time or events."""
    row[0] = 0
    row[1] = row[2] = row[3] = row[4] = -1
    row[5] = row[6] = row[7] = 0


@njit(cache=True, nogil=True)
def line_header_until(buf, pos, end, stop, row, err):
    """One XLine's fields (the message ends at ``end``) from ``pos``, a field's first byte, into ``row`` (a row of
    :func:`line_headers`, begun by :func:`start_header`), until the first field that starts at or after ``stop``:
    a line of hundreds of megabytes (a long run's host thread) is read a part at a time, and each part's pages
    handed back before the next. The position reached (``end`` when the line is done); -1 when it is damaged
    (``err`` says where)."""
    while pos < end and pos < stop:
        at = pos
        tag, pos = _varint(buf, pos, end)
        if pos < 0:
            err[0], err[1] = TRUNCATED, at
            return -1
        wt = tag & 7
        num = tag >> 3
        if wt == 0:
            v, pos = _varint(buf, pos, end)
            if num == 1:
                row[0] = v
            elif num == 3:
                row[5] = v
            elif num == 9:
                row[6] = v
        elif wt == 2:
            ln, pos = _varint(buf, pos, end)
            if pos < 0 or ln < 0 or ln > end - pos:
                err[0], err[1] = BAD_LENGTH, at
                return -1
            if num == 2:
                row[1], row[2] = pos, pos + ln
            elif num == 11:
                row[3], row[4] = pos, pos + ln
            elif num == 4:
                row[7] += 1
            pos += ln
        else:
            pos = _skip(buf, pos, end, wt)
        if pos < 0:
            err[0], err[1] = TRUNCATED if pos == -1 else BAD_WIRE_TYPE, at
            return -1
    return pos


@njit(cache=True)
def _stat_slot(sm_ids, lo, hi, sid):
    """Index of stat metadata ``sid`` in the plane's sorted ids ``sm_ids[lo:hi]``, or -1. Ids are
    usually consecutive, so the guess ``lo + sid - first id`` is checked first."""
    if lo >= hi:
        return -1
    g = lo + (sid - sm_ids[lo])
    if lo <= g < hi and sm_ids[g] == sid:
        return g
    while lo < hi:
        mid = (lo + hi) >> 1
        v = sm_ids[mid]
        if v < sid:
            lo = mid + 1
        elif v > sid:
            hi = mid
        else:
            return mid
    return -1


@njit(cache=True)
def _wanted_of(want, plane):
    """The metadata ids of ``plane`` among ``want`` (sorted keys ``plane << 40 | metadata id``) as a table of
    flags by id, looked up once per event instead of searched (none for plane -1); and whether the ids are too
    sparse for a table (then the table is empty and ``want`` is searched)."""
    lo = np.searchsorted(want, np.int64(plane) << 40) if plane >= 0 else len(want)
    hi = np.searchsorted(want, (np.int64(plane) + 1) << 40) if plane >= 0 else len(want)
    size = (want[hi - 1] - (np.int64(plane) << 40) + 1) if hi > lo else 0
    if size > WANTED_TABLE_MAX:  # ids too sparse for a table: the caller searches ``want`` instead
        return np.zeros(0, np.bool_), True
    out = np.zeros(size, np.bool_)
    for k in range(lo, hi):
        out[want[k] - (np.int64(plane) << 40)] = True
    return out, False


@njit(cache=True, nogil=True)  # pure array work: other threads run meanwhile
def decode_events(buf, lines, state, budget_bytes, long_ps, sm_ids, sm_col, sm_name, plane_sm, want,
                  rows, tkeys, tcodes, strs, nstr, ref_code, err):
    """Decode the events of ``lines`` into ``rows`` (int64 [capacity, N_COLS]), resumably.

    ``lines`` rows: (start, end, plane, flags, base_ps). ``state`` = [line index,
    position in it (0: from the start), rows written, events seen]. Returns DONE, BUDGET (after
    about ``budget_bytes``, for a progress update), OUT_FULL / TABLE_FULL (grow and call again) or
    FAILED (``err`` says where). Stats are mapped by the plane's stat metadata: ``sm_ids`` sorted
    per plane (``plane_sm[p]`` = its [lo, hi)), ``sm_col`` its column (-1: not kept), ``sm_name``
    its name's (start, end), which is the value of a ``ref`` stat. ``ref_code`` (one per stat metadata,
    -1 at first) keeps the code each ``ref`` string got, so a name every op event refers to is interned once.
    ``want``: sorted keys ``plane << 40 | metadata id`` of the events KEEP_META lines keep.
    """
    vals = np.empty(len(STAT_NAMES), np.int64)
    li = state[0]
    n = state[2]
    seen = state[3]
    cap = rows.shape[0]
    spent = 0
    while li < lines.shape[0]:
        start, end, plane, flags = lines[li, 0], lines[li, 1], lines[li, 2], lines[li, 3]
        base_ps = lines[li, 4]
        lo, hi = plane_sm[plane, 0], plane_sm[plane, 1]
        wanted, search = _wanted_of(want, plane if (flags & KEEP_META) != 0 else -1)
        pos = state[1] if state[1] > 0 else start
        seg = pos
        while pos < end:
            if spent + (pos - seg) >= budget_bytes:
                state[0], state[1], state[2], state[3] = li, pos, n, seen
                return BUDGET
            if n >= cap:
                state[0], state[1], state[2], state[3] = li, pos, n, seen
                return OUT_FULL
            resume = pos
            tag, pos = _varint(buf, pos, end)
            if pos < 0:
                err[0], err[1] = TRUNCATED, resume
                return FAILED
            if tag != 34:  # not an event (XLine.events = 4, length-delimited)
                pos = _skip(buf, pos, end, tag & 7)
                if pos < 0:
                    err[0], err[1] = TRUNCATED if pos == -1 else BAD_WIRE_TYPE, resume
                    return FAILED
                continue
            ln, pos = _varint(buf, pos, end)
            if pos < 0 or ln < 0 or ln > end - pos:
                err[0], err[1] = BAD_LENGTH, resume
                return FAILED
            ev_end = pos + ln
            meta = np.int64(0)
            off = np.int64(0)
            dur = np.int64(0)
            for j in range(len(STAT_NAMES)):
                vals[j] = NONE
            full = False
            while pos < ev_end:
                at = pos
                t, pos = _varint(buf, pos, ev_end)
                if pos < 0:
                    err[0], err[1] = TRUNCATED, at
                    return FAILED
                if t == 8:
                    meta, pos = _varint(buf, pos, ev_end)
                elif t == 16:
                    off, pos = _varint(buf, pos, ev_end)
                elif t == 24:
                    dur, pos = _varint(buf, pos, ev_end)
                elif t == 34:  # a stat
                    sl, pos = _varint(buf, pos, ev_end)
                    if pos < 0 or sl < 0 or sl > ev_end - pos:
                        err[0], err[1] = BAD_LENGTH, at
                        return FAILED
                    st_end = pos + sl
                    sid = np.int64(-1)
                    vt = 0
                    vs = np.int64(0)
                    ve = np.int64(0)
                    if pos < st_end and buf[pos] == 8:  # metadata_id first, as serializers write it:
                        sid, p3 = _varint(buf, pos + 1, st_end)  # a stat no column wants is skipped whole
                        if p3 > 0:
                            slot = _stat_slot(sm_ids, lo, hi, sid)
                            if slot < 0 or sm_col[slot] < 0:
                                pos = st_end
                                continue
                    while pos < st_end:
                        a2 = pos
                        t2, pos = _varint(buf, pos, st_end)
                        if pos < 0:
                            err[0], err[1] = TRUNCATED, a2
                            return FAILED
                        f2, w2 = t2 >> 3, t2 & 7
                        if f2 == 1 and w2 == 0:
                            sid, pos = _varint(buf, pos, st_end)
                        elif w2 == 0:
                            vs, pos = _varint(buf, pos, st_end)
                            vt = f2
                        elif w2 == 1:
                            if pos + 8 > st_end:
                                err[0], err[1] = TRUNCATED, a2
                                return FAILED
                            bits = np.int64(0)
                            for q in range(8):
                                bits |= np.int64(buf[pos + q]) << (8 * q)
                            vs = bits
                            vt = f2
                            pos += 8
                        elif w2 == 2:
                            l2, pos = _varint(buf, pos, st_end)
                            if pos < 0 or l2 < 0 or l2 > st_end - pos:
                                err[0], err[1] = BAD_LENGTH, a2
                                return FAILED
                            vs, ve = pos, pos + l2
                            vt = f2
                            pos += l2
                        else:
                            pos = _skip(buf, pos, st_end, w2)
                        if pos < 0:
                            err[0], err[1] = TRUNCATED if pos == -1 else BAD_WIRE_TYPE, a2
                            return FAILED
                    slot = _stat_slot(sm_ids, lo, hi, sid)
                    col = sm_col[slot] if slot >= 0 else -1
                    if col < 0:
                        continue
                    if col in (S_HLO_OP, S_HLO_MODULE):
                        if vt == 5:
                            code = intern(buf, vs, ve, tkeys, tcodes, strs, nstr)
                        elif vt == 7:
                            rs = _stat_slot(sm_ids, lo, hi, vs)
                            if rs < 0:
                                continue
                            code = ref_code[rs]
                            if code < 0:
                                code = intern(buf, sm_name[rs, 0], sm_name[rs, 1], tkeys, tcodes, strs, nstr)
                                ref_code[rs] = code  # -1 (table full) stays "not known"
                        else:
                            continue
                        if code < 0:
                            full = True
                        vals[col] = code
                    elif vt == 3 or vt == 4:
                        vals[col] = vs
                    elif vt == 2:
                        vals[col] = np.int64(np.array([vs]).view(np.float64)[0])
                else:
                    pos = _skip(buf, pos, ev_end, t & 7)
                    if pos < 0:
                        err[0], err[1] = TRUNCATED if pos == -1 else BAD_WIRE_TYPE, at
                        return FAILED
            if full:
                state[0], state[1], state[2], state[3] = li, resume, n, seen
                return TABLE_FULL
            seen += 1
            keep = (flags & KEEP_ALL) != 0
            if not keep and (flags & KEEP_KEYED) != 0:
                keep = (vals[S_HLO_OP] != NONE or vals[S_STEP_NUM] != NONE or vals[S_STEP_ID] != NONE
                        or vals[S_GLOBAL_DEVICE_ID] != NONE)
            if not keep and (flags & KEEP_LONG) != 0:
                keep = dur >= long_ps
            if not keep and 0 <= meta < len(wanted):
                keep = wanted[meta]
            elif not keep and search:
                wk = (plane << 40) | meta
                at_w = np.searchsorted(want, wk)
                keep = at_w < len(want) and want[at_w] == wk
            if not keep:
                continue
            row = rows[n]  # one event's values side by side: one write stream, not one per column
            row[COL_LINE] = li
            row[COL_META] = meta
            row[COL_START_PS] = base_ps + off
            row[COL_DUR_PS] = dur
            for j in range(len(STAT_NAMES)):
                row[STAT_BASE + j] = vals[j]
            n += 1
        spent += end - seg
        state[1] = 0
        li += 1
    state[0], state[1], state[2], state[3] = li, 0, n, seen
    return DONE


@njit(cache=True, nogil=True)  # the next piece is walked meanwhile
def place(rows, n, wide, narrow, slot, at, lut, line_index, first_line, real):
    """The first ``n`` rows of a walked piece (``rows``: [capacity, N_COLS], from :func:`decode_events`)
    into the final columns from row ``at``: column k is ``wide[slot[k]]`` (int64) or, for a negative slot,
    ``narrow[-1 - slot[k]]`` (int32, absent as NONE32). Line indices become ``line_index[first_line + line]``,
    string codes ``lut[code]``. ``real[k]`` says whether column k is written yet: a stat column is first
    written when a value comes (the rows before it then get its absent value), so a column no kept event
    has is never touched. Returns 0, or 1 when a value does not fit its narrow column (the columns are then
    not to be used)."""
    for r in range(n):
        d = at + r
        for k in range(N_COLS):
            v = rows[r, k]
            if k == COL_LINE:
                v = line_index[first_line + v]
            elif k >= STAT_BASE:
                if real[k] == 0:
                    if v == NONE:
                        continue
                    if slot[k] >= 0:
                        wide[slot[k]][:d] = NONE
                    else:
                        narrow[-1 - slot[k]][:d] = NONE32
                    real[k] = 1
                if v != NONE and (k - STAT_BASE in (S_HLO_OP, S_HLO_MODULE)):
                    v = lut[v]
            s = slot[k]
            if s >= 0:
                wide[s][d] = v
            elif v == NONE:
                narrow[-1 - s][d] = NONE32
            elif v <= NONE32 or v > INT32_MAX:
                return 1
            else:
                narrow[-1 - s][d] = v
    return 0


# the plain-Python twins of these walks, for small files (registered on the kernels above)
from rooflens.trace.formats.xspace import plain as _plain  # noqa: E402, F401
