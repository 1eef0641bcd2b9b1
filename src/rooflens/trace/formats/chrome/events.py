"""Chrome trace JSON (``*.trace.json.gz``, as ``jax.profiler`` and rooflens's Perfetto export write it).

Streamed, not loaded whole: the (gzipped) file is inflated in chunks, a compiled scan splits the
``traceEvents`` array into its elements as they arrive, and a second compiled scan
(:mod:`rooflens.trace.formats.chrome.scan`) reads the fields the analysis uses straight into columns, with
strings interned. Only metadata events (process and thread names) and one event per op that
carries the trace's own stats are parsed as Python objects (orjson).

Layout read: ``ph: "M"`` events name processes (``/device:TPU:0``, ``/host:CPU``) and threads
(``XLA Ops``, ``python``, ``tf_XLAEigen/…``); ``ph: "X"`` events are spans with ``ts``/``dur``
in microseconds and an ``args`` object (``hlo_op``, ``hlo_module``, ``program_id``,
``device_ordinal``, ``step_num``, ``long_name``, ``hlo_category``, ``tf_op``, ``model_flops``,
``bytes_accessed``).
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import numpy as np
import orjson

from rooflens.errors import RooflensError
from rooflens.trace.formats.chrome import scan as J
from rooflens.trace.formats.compiled import njit

READ_BYTES = 1 << 20  # compressed bytes per read (~10-20 MB of text)
#: a trace whose text is at most this long is read by the plain twin (orjson, then a loop over the events) while
#: numba is not loaded: the 7.4 MB vllm TPU trace (10 k events) reads in well under numba's import and load
#: (~0.5 s of CPU on a 2-core machine), and the loop takes ~5 µs an event
PLAIN_MAX_BYTES = 24 << 20


_EVENTS_KEY = np.frombuffer(b"traceEvents", np.uint8).copy()  # the key of the events array in a trace object


@njit(cache=True)
def split_elements(buf, start, state, out):
    """Scan ``buf[start:]`` and record the (start, end) of every complete element of the events
    array: the array at depth 0 (a bare list) or the array valued by the object's ``traceEvents`` key
    (PyTorch's Kineto traces put ``deviceProperties`` and ``distributedInfo`` arrays before it). ``state`` =
    [depth, in string, escaped, element depth (-1: not found yet, -2: the array has ended), current element's
    start (-1: none), how much of a depth-1 string matches ``traceEvents`` so far (-1: not it), whether the last
    depth-1 string was that key] carries over between calls.
    Returns the number of elements written to ``out`` (at most its length; the caller then
    continues from the end of the last one) and the position the scan reached."""
    depth, in_str, esc, ev_depth, elem = state[0], state[1], state[2], state[3], state[4]
    match, is_key = state[5], state[6]
    nkey = _EVENTS_KEY.shape[0]
    n = 0
    i = start
    end = buf.shape[0]
    while i < end:
        c = buf[i]
        if in_str:
            if esc:
                esc = 0
                match = -1
            elif c == 92:  # backslash
                esc = 1
                match = -1
            elif c == 34:
                in_str = 0
                if depth == 1:
                    is_key = 1 if match == nkey else 0
            elif depth == 1 and match >= 0:
                match = match + 1 if match < nkey and c == _EVENTS_KEY[match] else -1
        elif c == 34:
            in_str = 1
            match = 0
        elif c == 123 or c == 91:  # { [
            if c == 91 and ev_depth == -1 and (depth == 0 or (depth == 1 and is_key)):
                ev_depth = depth + 1
            elif depth == ev_depth and elem < 0:
                elem = i
            depth += 1
        elif c == 125 or c == 93:  # } ]
            depth -= 1
            if depth == ev_depth and elem >= 0:
                out[n, 0], out[n, 1] = elem, i + 1
                n += 1
                elem = -1
                if n == out.shape[0]:
                    i += 1
                    break
            elif c == 93 and depth == ev_depth - 1 and ev_depth > 0:
                ev_depth = -2
        i += 1
    state[0], state[1], state[2], state[3], state[4] = depth, in_str, esc, ev_depth, elem
    state[5], state[6] = match, is_key
    return n, i


class _Columns:
    """The kept fields of X events, as numpy columns (see :mod:`rooflens.trace.formats.chrome.scan`), the
    processes' and threads' names, and the trace's own stats of one event per (process, name)."""

    def __init__(self) -> None:
        self.ints: list[np.ndarray] = []
        self.floats: list[np.ndarray] = []
        self.op_meta: dict[tuple[int, int], dict] = {}  # (pid code, name code) → the event's args
        self.processes: dict[int, str] = {}
        self.threads: dict[tuple[int, int], str] = {}
        self.labels: dict[int, str] = {}  # process → its labels (PyTorch's Kineto: "GPU 0", "CPU")
        self.count = 0
        self.tkeys, self.tcodes = np.zeros(1 << 14, np.int64), np.zeros(1 << 14, np.int32)
        self.strs = np.empty((1 << 13, 2), np.int64)
        self.nstr = np.zeros(1, np.int64)
        self.arena = np.empty(1 << 20, np.uint8)
        self.used = np.zeros(1, np.int64)
        self.keys, self.bounds = J.key_table()
        self._tokens: list[str] = []
        self._meta_words: dict[str, int] = {}  # words of metadata events (process/thread ids), by their own code
        self.extra: dict[str, int] = {}

    @property
    def words(self) -> list[str]:
        """Every word by code: the interned tokens decoded (strings unquoted, numbers as text), then
        the words met only in metadata events. Decoded incrementally, each token once."""
        n = int(self.nstr[0])
        while len(self._tokens) < n:
            s, e = self.strs[len(self._tokens)]
            raw = bytes(self.arena[s:e])
            try:
                v = orjson.loads(raw)
            except orjson.JSONDecodeError:
                v = raw.decode("utf-8", "replace")
            self._tokens.append(v if isinstance(v, str) else str(v))
        return self._tokens + list(self.extra)

    def code(self, w) -> int:
        """The code of a word met in a metadata event (a pid, a tid): metadata words get codes after
        every token, assigned when the columns are made (see :meth:`arrays`)."""
        w = w if isinstance(w, str) else str(w)
        return self._meta_words.setdefault(w, len(self._meta_words))

    def finish(self) -> None:
        """Give the metadata events' words their codes among the tokens (or after them)."""
        tokens = self.words
        index: dict[str, int] = {}
        for k, w in enumerate(tokens):
            index.setdefault(w, k)
        final = {}
        for w, c in self._meta_words.items():
            if w not in index:
                index[w] = len(tokens) + len(self.extra)
                self.extra[w] = index[w]
            final[c] = index[w]
        self.processes = {final[p]: v for p, v in self.processes.items()}
        self.threads = {(final[p], final[t]): v for (p, t), v in self.threads.items()}
        self.labels = {final[p]: v for p, v in self.labels.items()}

    def add(self, data: bytes, buf: np.ndarray, spans: np.ndarray, path: Path) -> None:
        """The events at ``spans`` of ``data``."""
        n = len(spans)
        self.count += n
        ints = np.empty((J.N_INT, n), np.int64)
        floats = np.empty((2, n), np.float64)
        err = np.zeros(2, np.int64)
        first, rows = 0, 0
        while True:
            status, first, rows = J.scan_events(buf, spans, first, self.keys, self.bounds, J.CODE_COL, J.INT_COL,
                                                ints, floats, rows, self.tkeys, self.tcodes, self.strs, self.nstr,
                                                self.arena, self.used, err)
            if status == J.DONE:
                break
            if status == J.ARENA_FULL:
                self._grow()
                continue
            token = data[int(err[0]):int(err[0]) + 40].split(b",")[0].decode("utf-8", "replace")
            if status == J.NOT_A_NUMBER:
                raise RooflensError(f"{path}: a trace event has {J.KEYS[int(err[1])]!r} = {token}, which is not a "
                                    "number; it is not a Chrome trace rooflens can read.")
            raise RooflensError(f"{path} is not a Chrome trace: its events are not valid JSON (near {token!r}).")
        ph = ints[J.I_PH]
        for k in np.flatnonzero(ph == ord("M")).tolist():
            self._metadata_event(data[int(ints[J.I_START, k]):int(ints[J.I_END, k])], path)
        meta = np.flatnonzero((ph == ord("X")) & (ints[J.I_META] == 1))
        if len(meta):
            pairs = ints[J.I_PID, meta] * (1 << 32) + ints[J.I_NAME, meta]
            _, first_rows = np.unique(pairs, return_index=True)
            for k in meta[first_rows].tolist():
                key = (int(ints[J.I_PID, k]), int(ints[J.I_NAME, k]))
                if key not in self.op_meta:
                    ev = _loads(data[int(ints[J.I_START, k]):int(ints[J.I_END, k])], path)
                    self.op_meta[key] = ev.get("args") if isinstance(ev, dict) and isinstance(ev.get("args"),
                                                                                              dict) else {}
        x = np.flatnonzero(ph == ord("X"))
        self.ints.append({name: ints[i, x].astype(dtype) for name, i, dtype in _INT_COLUMNS})
        self.floats.append(floats[:, x])

    def add_objects(self, events: list, path: Path) -> None:
        """The plain twin of :meth:`add`: the same columns from events already parsed (orjson's dicts, keys in
        the text's order), each field read and interned as :func:`rooflens.trace.formats.chrome.scan.scan_events`
        reads it (codes by the value's JSON text; numbers also when written as strings)."""
        n = len(events)
        self.count += n
        ints = np.full((J.N_INT, n), -1, np.int64)
        floats = np.zeros((2, n), np.float64)
        index: dict = {}
        tokens = self._tokens

        def intern(v) -> int:
            key = (v.__class__, v if isinstance(v, str | int | float) else orjson.dumps(v))
            c = index.get(key)
            if c is None:
                c = index[key] = len(tokens)
                tokens.append(v if isinstance(v, str) else str(v))  # as the scan's token decodes
            return c

        level1 = {k: i for i, k in enumerate(J.KEYS[:J.LEVEL1])}
        level2 = {k: i for i, k in enumerate(J.KEYS) if i >= J.LEVEL1}
        meta_rows = []
        for row, e in enumerate(events):
            if not isinstance(e, dict):
                raise RooflensError(f"{path} is not a Chrome trace: its events are not valid JSON (near "
                                    f"{str(e)[:40]!r}).")
            for key, v in e.items():
                k = level1.get(key, -1)
                if k == J.K_ARGS and isinstance(v, dict):
                    for key2, v2 in v.items():
                        k2 = level2.get(key2, -1)
                        if k2 >= 0:
                            self._field(ints, floats, row, k2, v2, intern, path)
                elif k >= 0:
                    self._field(ints, floats, row, k, v, intern, path)
            if ints[J.I_PH, row] == ord("M"):
                self._metadata_object(e)
            elif ints[J.I_PH, row] == ord("X") and ints[J.I_META, row] == 1:
                meta_rows.append(row)
        self.nstr[0] = len(tokens)  # every token is decoded already: the words property has nothing to add
        for row in meta_rows:
            key = (int(ints[J.I_PID, row]), int(ints[J.I_NAME, row]))
            if key not in self.op_meta:
                args = events[row].get("args")
                self.op_meta[key] = args if isinstance(args, dict) else {}
        x = np.flatnonzero(ints[J.I_PH] == ord("X"))
        self.ints.append({name: ints[i, x].astype(dtype) for name, i, dtype in _INT_COLUMNS})
        self.floats.append(floats[:, x])

    @staticmethod
    def _field(ints, floats, row, k, v, intern, path) -> None:
        """One field of an event, read as the compiled scan reads it."""
        if k == J.K_PH:
            ints[J.I_PH, row] = ord(v[0]) if isinstance(v, str) and v and ord(v[0]) < 128 else -2
        elif k in (J.K_TS, J.K_DUR):
            x = _plain_number(v)
            if x is None:
                raise RooflensError(f"{path}: a trace event has {J.KEYS[k]!r} = {_json_text(v)[:40]}, which is not a "
                                    "number; it is not a Chrome trace rooflens can read.")
            floats[J.F_TS if k == J.K_TS else J.F_DUR, row] = x
        elif k in (J.K_HLO_CATEGORY, J.K_TF_OP):
            ints[J.I_META, row] = 1
        elif J.CODE_COL[k] >= 0:
            if v is not None:
                ints[J.CODE_COL[k], row] = intern(v)
        elif J.INT_COL[k] >= 0:
            x = _plain_number(v)
            if x is None:
                raise RooflensError(f"{path}: a trace event has {J.KEYS[k]!r} = {_json_text(v)[:40]}, which is not a "
                                    "number; it is not a Chrome trace rooflens can read.")
            ints[J.INT_COL[k], row] = x if isinstance(x, int) else int(x)

    def _metadata_object(self, e: dict) -> None:
        """A metadata event (``ph: M``), read by either path: a process's or thread's name, a process's labels."""
        args = e.get("args")
        name = args.get("name") if isinstance(args, dict) else None
        if e.get("name") == "process_name":
            self.processes[self.code(e.get("pid"))] = str(name)
        elif e.get("name") == "thread_name":
            self.threads[(self.code(e.get("pid")), self.code(e.get("tid")))] = str(name)
        elif e.get("name") == "process_labels" and isinstance(args, dict):
            self.labels[self.code(e.get("pid"))] = str(args.get("labels"))

    def _metadata_event(self, text: bytes, path: Path) -> None:
        e = _loads(text, path)
        if isinstance(e, dict):
            self._metadata_object(e)

    def _grow(self) -> None:
        from rooflens.trace.formats.compiled import rehash

        if 2 * (self.nstr[0] + 1) > len(self.tkeys):
            self.tkeys, self.tcodes = rehash(self.tkeys, self.tcodes, len(self.tkeys) * 2)
        if self.nstr[0] >= len(self.strs):
            self.strs = np.concatenate([self.strs, np.empty_like(self.strs)])
        self.arena = np.concatenate([self.arena, np.empty_like(self.arena)])

    def arrays(self, path: Path) -> dict[str, np.ndarray]:
        floats = np.concatenate(self.floats, axis=1) if self.floats else np.zeros((2, 0))
        cols = {"ts": floats[J.F_TS], "dur": floats[J.F_DUR]}
        for name, _, dtype in _INT_COLUMNS:
            cols[name] = np.concatenate([c[name] for c in self.ints]) if self.ints else np.zeros(0, dtype)
            for c in self.ints:
                del c[name]  # one column at a time: the chunks' copies go as the whole one is made
        if not np.isfinite(cols["ts"]).all():
            raise RooflensError(f"{path}: a trace event's 'ts' is not a finite number.")
        return cols


#: the integer columns kept, with their compact types (codes fit in 32 bits; times and ids need 64)
_INT_COLUMNS = (("pid", J.I_PID, np.int32), ("tid", J.I_TID, np.int32), ("name", J.I_NAME, np.int32),
                ("hlo_op", J.I_HLO_OP, np.int32), ("hlo_module", J.I_HLO_MODULE, np.int32),
                ("long_name", J.I_LONG_NAME, np.int32), ("program_id", J.I_PROGRAM_ID, np.int32),
                ("device_ordinal", J.I_DEVICE_ORDINAL, np.int64), ("step_num", J.I_STEP_NUM, np.int64),
                ("device_offset_ps", J.I_DEVICE_OFFSET_PS, np.int64),
                ("device_duration_ps", J.I_DEVICE_DURATION_PS, np.int64))


def _json_text(v) -> str:
    """A value as the word the compiled scan's token decodes to (numbers as Python writes them)."""
    return v if isinstance(v, str) else str(v) if isinstance(v, int | float) else orjson.dumps(v).decode()


def _plain_number(v):
    """A number, or a string holding one (as jaxlib writes ``"device_offset_ps": "121687640000"``); None otherwise."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        return v
    if isinstance(v, str):
        t = v.strip()
        try:
            return int(t)
        except ValueError:
            pass
        try:
            x = float(t)
        except ValueError:
            return None
        return x if x == x and t.lower() not in ("inf", "+inf", "-inf", "infinity", "nan") else None
    return None


def _loads(text: bytes, path: Path):
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise RooflensError(f"{path} is not a Chrome trace: its events are not valid JSON ({str(e)[:80]}).") from None


def _small_text(path: Path) -> bytes | None:
    """The whole (inflated) text when it is at most :data:`PLAIN_MAX_BYTES`, else None."""
    parts, size = [], 0
    for chunk in _chunks(path):
        size += len(chunk)
        if size > PLAIN_MAX_BYTES:
            return None
        parts.append(chunk)
    return b"".join(parts)


def read_events_plain(text: bytes, path: Path) -> _Columns | None:
    """The plain twin of :func:`read_events` on the whole text: orjson, then :meth:`_Columns.add_objects` (the
    events array: a bare list, or the top object's ``traceEvents``, as the compiled split finds it: PyTorch's Kineto
    writes ``deviceProperties`` and other arrays before ``traceEvents``).
    None for text orjson cannot read: the compiled scan then says where it breaks."""
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict | list):
        return None
    events = doc if isinstance(doc, list) else doc.get("traceEvents")
    if not isinstance(events, list):
        raise RooflensError(f"{path} is JSON but not a Chrome trace (no traceEvents).")
    cols = _Columns()
    cols.add_objects([e for e in events if isinstance(e, dict | list)], path)
    cols.finish()
    return cols


def _chunks(path: Path):
    """The file's bytes, inflated when gzipped, in chunks."""
    try:
        fh = path.open("rb")
    except OSError as e:
        raise RooflensError(f"cannot read {path}: {e.strerror or e}.") from None
    with fh:
        head = fh.read(2)
        fh.seek(0)
        inflate = zlib.decompressobj(wbits=47) if head == b"\x1f\x8b" else None
        while True:
            try:
                raw = fh.read(READ_BYTES)
            except OSError as e:
                raise RooflensError(f"cannot read {path}: {e.strerror or e}.") from None
            if not raw:
                break
            if inflate is None:
                yield raw
                continue
            try:
                yield inflate.decompress(raw)
            except zlib.error:
                raise RooflensError(f"{path} is a damaged gzip file.") from None
        if inflate is not None and not inflate.eof:
            raise RooflensError(f"{path} is a damaged or truncated gzip file.")


def read_events(path: Path, progress=None) -> _Columns:
    """Stream the trace's events into columns. ``progress(bytes_done, bytes_total)`` (compressed). A small
    trace is read by the plain twin while numba is not loaded (:data:`PLAIN_MAX_BYTES`)."""
    from rooflens.trace.formats import compiled

    if not compiled.loaded() and os.environ.get("ROOFLENS_PLAIN", "") != "0":
        text = _small_text(path)
        cols = read_events_plain(text, path) if text is not None else None
        if cols is not None:
            if progress is not None:
                progress(1, 1)
            return cols
    compiled.compile_kernels()
    cols = _Columns()
    state = np.array([0, 0, 0, -1, -1, -1, 0], np.int64)
    out = np.empty((1 << 16, 2), np.int64)
    pending = b""
    seen_any = False
    total = max(path.stat().st_size, 1)
    done = 0
    for chunk in _chunks(path):
        done += len(chunk)
        data = pending + chunk if pending else chunk
        if not seen_any and data.strip():
            seen_any = True
            if data.lstrip()[:1] not in (b"{", b"["):
                raise RooflensError(f"{path} is not a Chrome trace (it is not JSON, or it is cut short).")
        pos = len(pending) if pending else 0
        buf = np.frombuffer(data, np.uint8)
        while pos < len(data):
            n, pos = split_elements(buf, pos, state, out)
            if n:
                cols.add(data, buf, out[:n], path)
        keep_from = len(data)
        if state[4] >= 0:  # an element continues into the next chunk
            keep_from = int(state[4])
            state[4] = 0
        pending = data[keep_from:]
        if progress is not None:
            progress(min(done, total), total)
    if not seen_any:
        raise RooflensError(f"{path} is empty.")
    cols.finish()
    if state[0] != 0 or state[1] != 0 or state[3] == -1:
        if state[3] == -1 and state[0] == 0 and state[1] == 0:
            raise RooflensError(f"{path} is JSON but not a Chrome trace (no traceEvents).")
        raise RooflensError(f"{path} is not a Chrome trace (it is not JSON, or it is cut short).")
    return cols
