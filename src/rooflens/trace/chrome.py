"""Chrome trace JSON (``*.trace.json.gz``, as ``jax.profiler`` and rooflens's Perfetto export write it).

Streamed, not loaded whole: the (gzipped) file is inflated in chunks, a compiled scan splits the
``traceEvents`` array into its elements as they arrive, and each batch of elements is parsed by
orjson. Only the fields the analysis reads are kept, as columns; event names are interned, so
memory holds one batch of parsed events at a time, never the document.

Layout read: ``ph: "M"`` events name processes (``/device:TPU:0``, ``/host:CPU``) and threads
(``XLA Ops``, ``python``, ``tf_XLAEigen/…``); ``ph: "X"`` events are spans with ``ts``/``dur``
in microseconds and an ``args`` object (``hlo_op``, ``hlo_module``, ``program_id``,
``device_ordinal``, ``step_num``, ``long_name``, ``hlo_category``, ``tf_op``, ``model_flops``,
``bytes_accessed``).
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import orjson
from numba import njit

from rooflens.errors import RooflensError

READ_BYTES = 8 << 20  # compressed bytes per read
BATCH_BYTES = 32 << 20  # JSON text per orjson call


@njit(cache=True)
def split_elements(buf, start, state, out):
    """Scan ``buf[start:]`` and record the (start, end) of every complete element of the events
    array: the array at depth 0 (a bare list) or the first array valued at depth 1 (the object's
    ``traceEvents``). ``state`` = [depth, in string, escaped, element depth (-1: not found yet,
    -2: the array has ended), current element's start (-1: none)] carries over between calls.
    Returns the number of elements written to ``out`` (at most its length; the caller then
    continues from the end of the last one) and the position the scan reached."""
    depth, in_str, esc, ev_depth, elem = state[0], state[1], state[2], state[3], state[4]
    n = 0
    i = start
    end = buf.shape[0]
    while i < end:
        c = buf[i]
        if in_str:
            if esc:
                esc = 0
            elif c == 92:  # backslash
                esc = 1
            elif c == 34:
                in_str = 0
        elif c == 34:
            in_str = 1
        elif c == 123 or c == 91:  # { [
            if c == 91 and ev_depth == -1 and depth <= 1:
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
    return n, i


class _Columns:
    """The kept fields of X events, as lists of numbers and interned-string codes."""

    CODES = ("pid", "tid", "name", "hlo_op", "hlo_module", "long_name", "program_id")  # interned strings
    NUMBERS = ("ts", "dur", "device_ordinal", "step_num", "device_offset_ps", "device_duration_ps")

    def __init__(self) -> None:
        self.words: dict = {}
        self.cols: dict[str, list] = {k: [] for k in (*self.CODES, *self.NUMBERS)}
        self.op_meta: dict[tuple[int, int], dict] = {}  # (pid code, name code) → the trace's own stats
        self.processes: dict = {}
        self.threads: dict = {}
        self.count = 0

    def code(self, w) -> int:
        if w is None:
            return -1
        return self.words.setdefault(w if isinstance(w, str) else str(w), len(self.words))

    def add(self, events: list, path: Path, first: int) -> None:
        c = self.cols
        code = self.code
        for e in events:
            if type(e) is not dict:
                continue
            ph = e.get("ph")
            if ph == "M":
                args = e.get("args")
                name = args.get("name") if type(args) is dict else None
                if e.get("name") == "process_name":
                    self.processes[code(e.get("pid"))] = str(name)
                elif e.get("name") == "thread_name":
                    self.threads[(code(e.get("pid")), code(e.get("tid")))] = str(name)
                continue
            if ph != "X":
                continue
            args = e.get("args")
            if type(args) is not dict:
                args = {}
            pid = code(e.get("pid"))
            name = code(e.get("name", ""))
            c["pid"].append(pid)
            c["tid"].append(code(e.get("tid")))
            c["name"].append(name)
            c["ts"].append(e.get("ts", 0))
            c["dur"].append(e.get("dur", 0))
            c["hlo_op"].append(code(args.get("hlo_op")))
            c["hlo_module"].append(code(args.get("hlo_module")))
            c["long_name"].append(code(args.get("long_name")))
            c["program_id"].append(code(args.get("program_id")))
            c["device_ordinal"].append(args.get("device_ordinal", -1))
            c["step_num"].append(args.get("step_num", -1))
            c["device_offset_ps"].append(args.get("device_offset_ps", -1))
            c["device_duration_ps"].append(args.get("device_duration_ps", -1))
            if ("hlo_category" in args or "tf_op" in args) and (pid, name) not in self.op_meta:
                self.op_meta[(pid, name)] = args
        self.count += len(events)

    def arrays(self, path: Path) -> dict[str, np.ndarray]:
        out = {}
        for k, v in self.cols.items():
            dtype = np.float64 if k in ("ts", "dur") else np.int64  # numbers may come as strings: "12"
            try:
                out[k] = np.asarray(v, dtype=dtype) if v else np.zeros(0, dtype)
            except (TypeError, ValueError, OverflowError):
                bad = next(i for i, x in enumerate(v) if not _is_number(x, dtype))
                raise RooflensError(f"{path}: a trace event has {k!r} = {_short(v[bad])}, which is not a number; "
                                    "it is not a Chrome trace rooflens can read.") from None
        if np.isnan(out["ts"]).any() or np.isinf(out["ts"]).any():
            raise RooflensError(f"{path}: a trace event's 'ts' is not a finite number.")
        return out


def _is_number(x, dtype) -> bool:
    try:
        np.asarray([x], dtype=dtype)
        return not isinstance(x, str | bytes)
    except (TypeError, ValueError, OverflowError):
        return False


def _short(v) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "…"


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
    """Stream the trace's events into columns. ``progress(bytes_done, bytes_total)`` (compressed)."""
    cols = _Columns()
    state = np.array([0, 0, 0, -1, -1], np.int64)
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
            first = data.lstrip()[:1]
            if first not in (b"{", b"["):
                raise RooflensError(f"{path} is not a Chrome trace (it is not JSON, or it is cut short).")
        pos = len(pending) if pending and state[4] >= 0 else 0
        buf = np.frombuffer(data, np.uint8)
        keep_from = len(data)
        batch_start = -1
        batch_end = 0
        while True:
            n, pos = split_elements(buf, pos, state, out)
            if n:
                if batch_start < 0:
                    batch_start = int(out[0, 0])
                batch_end = int(out[n - 1, 1])
                if batch_end - batch_start >= BATCH_BYTES:
                    _parse(cols, data[batch_start:batch_end], path)
                    batch_start = -1
            if pos >= len(data):
                break
        if batch_start >= 0:
            _parse(cols, data[batch_start:batch_end], path)
        if state[4] >= 0:  # an element continues into the next chunk
            keep_from = int(state[4])
            state[4] = 0
        pending = data[keep_from:]
        if progress is not None:
            progress(min(done, total), total)
    if not seen_any:
        raise RooflensError(f"{path} is empty.")
    if state[0] != 0 or state[1] != 0 or state[3] == -1:
        if state[3] == -1 and state[0] == 0 and state[1] == 0:
            raise RooflensError(f"{path} is JSON but not a Chrome trace (no traceEvents).")
        raise RooflensError(f"{path} is not a Chrome trace (it is not JSON, or it is cut short).")
    return cols


def _parse(cols: _Columns, text: bytes, path: Path) -> None:
    try:
        events = orjson.loads(b"[" + text + b"]")
    except orjson.JSONDecodeError as e:
        raise RooflensError(f"{path} is not a Chrome trace: its events are not valid JSON ({str(e)[:80]}).") from None
    cols.add(events, path, cols.count)
