"""Our own XSpace decoder: a ``*.xplane.pb`` file → numpy columns, with no Python object per event.

The file is mapped, not read: a compiled walk (:mod:`rooflens.trace.formats.xspace.wire`) indexes planes, lines
and metadata, then decodes events line by line into columns (int64 times, int32 indices and codes), keeping
only the events an analysis uses (see :func:`line_flags`). Pages already decoded are handed back to the kernel
as it goes, so memory is bounded by the kept columns, not by the file.

Times are picoseconds from the trace's origin (the earliest line ``timestamp_ns``): a line's event
starts at ``(timestamp_ns - origin_ns) * 1000 + offset_ps``. The ``device_offset_ps`` and
``device_duration_ps`` stats are kept beside (XProf times TPU ops by them: see
:func:`rooflens.trace.formats.xspace.reader.read_xspace`).
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from rooflens.errors import RooflensError
from rooflens.trace.formats import protowire
from rooflens.trace.formats.compiled import compile_kernels
from rooflens.trace.formats.raw import is_python_line
from rooflens.trace.formats.xspace import walk
from rooflens.trace.formats.xspace import wire as W
from rooflens.trace.groupby import unique_values


@dataclass
class Plane:
    index: int  # position in the file (a name may appear more than once: concatenated XSpaces)
    id: int
    name: str
    meta_ids: np.ndarray  # event metadata ids, sorted
    meta_rows: np.ndarray  # rows of wire.metadata_entries, in meta_ids order
    stat_names: dict[int, str]  # stat metadata id → name
    stat_rows: np.ndarray = field(repr=False, default=None)  # rows of wire.metadata_entries of the stat metadata
    stat_spans: np.ndarray = field(repr=False, default=None)  # (start, end) in the file of each of its own stats
    buf: np.ndarray = field(repr=False, default=None)  # the file's bytes, for the stats when they are read
    path: str = ""

    @cached_property
    def stats(self) -> dict:
        """The plane's own stats, name → number or string, read when first asked for. A plane can hold 400,000 of
        them (XLA GPU's ``/host:__ScopeRangeCallStack__``, one per scope range: 2.6 s to read in Python, nearly half
        of a 190 MB trace's report), and a report reads only the device planes' and the ``Task Environment``'s."""
        out = {}
        for s, e in (self.stat_spans if self.stat_spans is not None else ()):
            try:
                k, v = _stat_value(bytes(self.buf[s:e]), self.stat_names)
            except (ValueError, IndexError):
                raise RooflensError(f"{self.path} is a damaged XSpace profile: a stat of plane {self.name!r} is "
                                    "malformed.") from None
            out[k] = v
        return out


@dataclass
class XSpaceColumns:
    """The kept events of one XSpace file, as columns, and the small tables they point into."""

    path: str
    planes: list[Plane]
    line_plane: np.ndarray  # line index → plane index
    line_names: list[str]
    # wire.N_COLS columns: line, metadata id, start_ps, dur_ps, stats; int32 for wire.NARROW's, else int64 (a stat
    # absent: wire.absent_in of its column)
    cols: list[np.ndarray]
    strings: list[str]  # interned string stats (hlo_op, hlo_module values), by code
    origin_ns: int  # absolute time of start_ps == 0 (ns since the epoch where the trace's clock says so)
    events_total: int  # all events of the file, kept or not
    _buf: np.ndarray = field(repr=False, default=None)

    def __len__(self) -> int:
        return len(self.cols[0])

    def col(self, name: str) -> np.ndarray:
        return self.cols[W.STAT_BASE + W.STAT_NAMES.index(name)]

    def absent(self, name: str) -> int:
        """The value that marks stat ``name`` absent in its column (:func:`wire.absent_in`)."""
        return W.absent_in(self.col(name))

    def has(self, name: str) -> np.ndarray:
        """Which kept events carry stat ``name``."""
        return self.col(name) != self.absent(name)

    @property
    def line(self) -> np.ndarray:
        return self.cols[W.COL_LINE]

    @property
    def start_ps(self) -> np.ndarray:
        return self.cols[W.COL_START_PS]

    @property
    def dur_ps(self) -> np.ndarray:
        return self.cols[W.COL_DUR_PS]

    def text(self, span) -> str:
        s, e = int(span[0]), int(span[1])
        return bytes(self._buf[s:e]).decode("utf-8", "replace") if s >= 0 else ""

    def event_metadata(self, plane: Plane, meta_id: int) -> tuple[str, str, dict]:
        """(name, display name, metadata stats) of one event metadata of ``plane``."""
        k = int(np.searchsorted(plane.meta_ids, meta_id))
        if k >= len(plane.meta_ids) or plane.meta_ids[k] != meta_id:
            return "", "", {}
        row = plane.meta_rows[k]
        stats = {}
        if row[6] >= 0:
            stats = _metadata_stats(self._buf, int(row[6]), int(row[7]), plane.stat_names)
        return self.text(row[2:4]), self.text(row[4:6]), stats

    def keep(self, *cols: int) -> None:
        """Let go of every event column but ``cols`` (indices into :attr:`cols`; the others become None)."""
        self.cols = [c if k in cols else None for k, c in enumerate(self.cols)]

    def let_go(self, *names: str) -> None:
        """Let go of the stat columns ``names`` (they become None): what no later step reads need not wait for the
        event table to be made."""
        for name in names:
            self.cols[W.STAT_BASE + W.STAT_NAMES.index(name)] = None

    def close(self) -> None:
        """Let go of the mapped file and the event columns (the small tables stay)."""
        self._buf = None
        self.cols = []


def _check(status: int, err: np.ndarray, path, where: str) -> None:
    if status < 0:
        what = W.ERROR_TEXT.get(int(err[0]), "it is malformed")
        raise RooflensError(f"{path} is a damaged or truncated XSpace profile: {what} at byte {int(err[1]):,} "
                            f"({where}).")


def _fields(buf, start: int, end: int, path, where: str) -> np.ndarray:
    err = np.zeros(2, np.int64)
    n = W.fields(buf, start, end, np.empty((0, 4), np.int64), err)
    _check(n, err, path, where)
    out = np.empty((n, 4), np.int64)
    W.fields(buf, start, end, out, err)
    return out


def _stat_value(data: bytes, stat_names: dict[int, str]) -> tuple[str, object]:
    """One XStat message → (name, value): numbers as int/float, strings as str, bytes as bytes."""
    name, value = "", None
    for num, wt, v in protowire.fields(data):
        if num == 1:
            name = stat_names.get(v, str(v))
        elif num == 2 and wt == 1:
            value = float(np.frombuffer(v, "<f8")[0])
        elif num in (3, 4) and wt == 0:
            value = v if num == 3 else (v - (1 << 64) if v >= 1 << 63 else v)
        elif num == 5:
            value = v.decode("utf-8", "replace")
        elif num == 6:
            value = bytes(v)
        elif num == 7:
            value = stat_names.get(v, "")
    return name, value


def _metadata_stats(buf, start: int, end: int, stat_names: dict[int, str]) -> dict:
    """The stats of one XEventMetadata (field 5), e.g. a TPU op's ``flops`` and ``hlo_category``."""
    out = {}
    with contextlib.suppress(ValueError, IndexError):  # a damaged metadata message: its stats are just missing
        for num, wt, v in protowire.fields(bytes(buf[start:end])):
            if num == 5 and wt == 2:
                k, val = _stat_value(v, stat_names)
                out[k] = val
    return out


def is_kernel_line(line_name: str) -> bool:
    """A GPU line of kernels: ``Stream #16(Kernel)``, ``Stream #2``, ``Stream #7(Compute)`` (TensorFlow), a stream
    of kernels and copies (jaxlib 0.11: ``Stream #14(MemcpyOther,MemcpyH2D,Memset,Compute,MemcpyD2D,MemcpyD2H)``),
    not the copy engines' ``Stream #8(MemcpyH2D)``/``(MemcpyOther)`` lines (every kind a copy)."""
    if not line_name.startswith("Stream"):
        return False
    kinds = line_name.partition("(")[2].rstrip(")")
    return not kinds or not all(k.strip().startswith("Memcpy") for k in kinds.split(","))


def line_flags(plane_name: str, line_name: str) -> int:
    """Which events of a line an analysis uses (0: none, skip the line)."""
    if plane_name.startswith(("/device:TPU", "/device:GPU")):
        if line_name in ("XLA Ops", "XLA Modules", "Steps"):
            return W.KEEP_ALL
        if line_name in ("XLA TraceMe", "Async XLA Ops", "Overlay", "TC Overlay", "_counters_"):
            return 0
        if is_kernel_line(line_name):
            return W.KEEP_ALL  # GPU kernel streams: every kernel, with its HLO op or not (a runtime copy kernel)
        return W.KEEP_KEYED
    if plane_name.startswith("/host:"):
        if plane_name == "/host:metadata":
            return 0
        return W.KEEP_KEYED | W.KEEP_META | (W.KEEP_LONG if is_python_line(line_name) else 0)
    return 0


def decode(path: str | Path, progress: Callable[[int, int], None] | None = None) -> XSpaceColumns:
    """Decode an ``.xplane.pb``. ``progress(bytes_done, bytes_total)`` is called between chunks. The events
    are walked on every core (:mod:`rooflens.trace.formats.xspace.walk`), with the same result as one walk."""
    path = Path(path)
    mm, buf = map_file(path)
    planes, spans, line_plane = planes_of(buf, path)
    heads, line_names, lines, line_index, origin_ns = lines_of(buf, planes, spans, line_plane, path,
                                                               lambda s, e: _release(mm, s, e))
    _release(mm, 0, len(buf))  # what the plane and line headers touched: the walk maps its own pages
    cols, strings = _events(buf, mm, lines, planes, line_index, line_names, heads[line_index, 7], path, progress)
    _release(mm, 0, len(buf))  # the ends of walked pieces still mapped
    return XSpaceColumns(str(path), planes, line_plane, line_names, cols, strings, origin_ns,
                         int(heads[:, 7].sum()), buf)


def map_file(path: Path) -> tuple[mmap.mmap, np.ndarray]:
    """The file, mapped, as bytes; a clear error when it is missing, empty or not an XSpace."""
    try:
        fh = path.open("rb")
    except OSError as e:
        raise RooflensError(f"cannot read {path}: {e.strerror or e}.") from None
    with fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            raise RooflensError(f"{path} is empty.")
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    buf = np.frombuffer(mm, np.uint8)
    if buf[0] != 0x0A:
        raise RooflensError(f"{path} is not an XSpace profile (.xplane.pb); it does not start like one.")
    return mm, buf


def planes_of(buf: np.ndarray, path: Path) -> tuple[list[Plane], np.ndarray, np.ndarray]:
    """Every plane (name, stats, metadata tables), and every line's (start, end) and plane index."""
    space = _fields(buf, 0, len(buf), path, "the list of planes")
    planes: list[Plane] = []
    line_spans, line_plane = [], []
    view = memoryview(buf)
    for pi, (_, _, ps, pe) in enumerate(space[(space[:, 0] == 1) & (space[:, 1] == 2)]):
        rows = _fields(buf, int(ps), int(pe), path, f"plane {pi}")
        name_rows = rows[(rows[:, 0] == 2) & (rows[:, 1] == 2)]
        name = bytes(buf[name_rows[0, 2]:name_rows[0, 3]]).decode("utf-8", "replace") if len(name_rows) else ""
        pid_rows = rows[(rows[:, 0] == 1) & (rows[:, 1] == 0)]
        where = f"plane {name!r}"
        sm_rows = _entries(buf, rows[(rows[:, 0] == 5) & (rows[:, 1] == 2)][:, 2:4], path, where)
        stat_names = {i: str(view[s:e], "utf-8", "replace") if s >= 0 else ""  # one str per name, no copy
                      for i, s, e in sm_rows[:, 1:4].tolist()}
        em_rows = _entries(buf, rows[(rows[:, 0] == 4) & (rows[:, 1] == 2)][:, 2:4], path, where)
        order = np.argsort(em_rows[:, 1], kind="stable")
        planes.append(Plane(pi, int(pid_rows[0, 2]) if len(pid_rows) else 0, name, em_rows[order, 1].copy(),
                            em_rows[order], stat_names, sm_rows,
                            rows[(rows[:, 0] == 6) & (rows[:, 1] == 2)][:, 2:4].copy(), buf, str(path)))
        for r in rows[(rows[:, 0] == 3) & (rows[:, 1] == 2)]:
            line_spans.append((r[2], r[3]))
            line_plane.append(pi)
    return planes, np.asarray(line_spans, np.int64).reshape(-1, 2), np.asarray(line_plane, np.int64)


def lines_of(buf, planes: list[Plane], spans: np.ndarray, line_plane: np.ndarray, path: Path,
             release: Callable[[int, int], None] | None = None):
    """Line headers and names, and the lines to walk: rows (start, end, plane, flags, base_ps) of the
    lines an analysis uses, their indices among all lines, and the trace's origin (ns). ``release(start,
    end)`` is called with the bytes the header pass has read (see :func:`walk.line_headers`)."""
    heads = walk.line_headers(buf, spans, walk.threads_for(int((spans[:, 1] - spans[:, 0]).sum())), release)
    if isinstance(heads, tuple):
        _check(-1, heads[1], path, "the line headers")
    text = lambda s, e: bytes(buf[s:e]).decode("utf-8", "replace") if s >= 0 else ""  # noqa: E731
    line_names = [text(h[1], h[2]) or text(h[3], h[4]) for h in heads]
    flags = np.asarray([line_flags(planes[p].name, n) for p, n in zip(line_plane.tolist(), line_names)], np.int64)
    # origin: the earliest line timestamp; lines stamped 0 (TPU device lines) count their offsets from it
    ts = heads[:, 5]
    used = (heads[:, 7] > 0) & (flags > 0)
    nonzero = ts[used & (ts > 0)]
    origin_ns = int(nonzero.min()) if len(nonzero) else 0
    base_ps = np.where(ts > 0, (ts - origin_ns) * 1000, 0)
    keep = np.flatnonzero(flags > 0)
    lines = np.stack([spans[:, 0], spans[:, 1], line_plane, flags, base_ps], axis=1)[keep] if len(spans) else \
        np.zeros((0, 5), np.int64)
    return heads, line_names, np.ascontiguousarray(lines), keep, origin_ns


def _events(buf, mm: mmap.mmap, lines: np.ndarray, planes: list[Plane], line_index: np.ndarray,
            line_names: list[str], events: np.ndarray, path: Path, progress) -> tuple[list[np.ndarray], list[str]]:
    """The kept events as columns, walked on as many threads as the file is worth; file pages already
    decoded go back to the kernel as each thread goes."""
    total = max(int((lines[:, 1] - lines[:, 0]).sum()) if len(lines) else 0, 1)

    def on_chunk(done: int, start: int, reached: int) -> None:
        _release(mm, start, reached)
        if progress is not None:
            progress(min(done, total), total)

    tables = (*_stat_tables(planes), dispatch_metadata(buf, planes))
    got = walk.walk(buf, lines, tables, line_index, events, walk.threads_for(total), on_chunk)
    if got.err is not None:  # the line that holds the byte where the walk broke
        li = int(np.searchsorted(lines[:, 0], got.err[1], side="right")) - 1 if len(lines) else 0
        where = (f"line {line_names[line_index[li]]!r} of plane {planes[int(lines[li, 2])].name!r}"
                 if li < len(lines) else "an event")
        _check(-1, got.err, path, where)
    return got.cols, [s.decode("utf-8", "replace") for s in got.strings]


def warm_up() -> None:
    """Load the compiled walks once in this process (a forked worker then starts with them loaded,
    instead of each paying numba's start-up)."""
    compile_kernels()
    err = np.zeros(2, np.int64)
    buf = np.zeros(2, np.uint8)
    W.fields(buf, 0, 0, np.empty((0, 4), np.int64), err)
    W.metadata_entries(buf, np.zeros((0, 2), np.int64), np.zeros((0, 8), np.int64), err)
    W.line_headers(buf, np.zeros((0, 2), np.int64), np.zeros((0, 8), np.int64), err)
    rows = np.empty((1, W.N_COLS), np.int64)
    W.decode_events(buf, np.zeros((0, 5), np.int64), np.zeros(4, np.int64), 1, 0, np.zeros(0, np.int64),
                    np.zeros(0, np.int64), np.zeros((0, 2), np.int64), np.zeros((0, 2), np.int64),
                    np.zeros(0, np.int64), rows, np.zeros(4, np.int64), np.zeros(4, np.int32),
                    np.empty((1, 2), np.int64), np.zeros(1, np.int64), np.zeros(0, np.int64), err)
    _, wide, narrow, slot = walk.final_columns(0)
    W.place(rows, 0, wide, narrow, slot, 0, np.zeros(0, np.int64), np.zeros(0, np.int64), 0,
            np.zeros(W.N_COLS, np.int64))


def _entries(buf, spans: np.ndarray, path, where: str) -> np.ndarray:
    err = np.zeros(2, np.int64)
    out = np.empty((len(spans), 8), np.int64)
    _check(W.metadata_entries(buf, np.ascontiguousarray(spans, np.int64).reshape(-1, 2), out, err), err, path,
           f"the metadata of {where}")
    return out


def _stat_tables(planes: list[Plane]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per plane: its stat metadata ids sorted, each one's column (-1: not decoded) and name span
    (the value of a ``ref`` stat), and the plane's [lo, hi) in those arrays."""
    col_of = {name: k for k, name in enumerate(W.STAT_NAMES)}
    ids, cols, names, bounds = [], [], [], []
    lo = 0
    for p in planes:
        rows = p.stat_rows[np.argsort(p.stat_rows[:, 1], kind="stable")]
        ids.append(rows[:, 1])
        cols.append(_columns_of(rows[:, 1], p.stat_names, col_of))
        names.append(rows[:, 2:4])
        bounds.append((lo, lo + len(rows)))
        lo += len(rows)
    return (np.concatenate(ids) if ids else np.zeros(0, np.int64), np.concatenate(cols) if cols else
            np.zeros(0, np.int64), np.ascontiguousarray(np.concatenate(names)) if names else
            np.zeros((0, 2), np.int64), np.asarray(bounds, np.int64).reshape(-1, 2))


def dispatch_metadata(buf: np.ndarray, planes: list[Plane]) -> np.ndarray:
    """The host planes' event metadata that name a dispatch (``PjitFunction(…)``, ``PmapFunction(…)``) or the
    runtime's execution of a program (:data:`~rooflens.trace.formats.raw.EXECUTE_PREFIXES`: which dispatches
    launched one), as sorted keys ``plane << 40 | metadata id`` (what :func:`wire.decode_events` keeps on
    KEEP_META lines). Names are compared as bytes, all of a plane's metadata at once per prefix."""
    from rooflens.trace.formats.raw import DISPATCH_PREFIXES, EXECUTE_PREFIXES

    wanted = [(w, 1) for w in DISPATCH_PREFIXES] + [(w, 0) for w in EXECUTE_PREFIXES]  # (prefix, bytes after it)
    keys = []
    for p in planes:
        if not p.name.startswith("/host:") or not len(p.meta_rows):
            continue
        rows = p.meta_rows
        for word, more in wanted:
            prefix = np.frombuffer(word.encode(), np.uint8)
            ok = (rows[:, 2] >= 0) & (rows[:, 3] - rows[:, 2] >= len(prefix) + more)
            at = rows[ok, 2][:, None] + np.arange(len(prefix))
            hit = (buf[at] == prefix).all(axis=1) if len(at) else np.zeros(0, bool)
            keys += [(p.index << 40) | int(m) for m in rows[ok, 1][hit].tolist()]
    return unique_values(np.asarray(keys, np.int64))


def _columns_of(ids: np.ndarray, stat_names: dict[int, str], col_of: dict[str, int]) -> np.ndarray:
    """Each stat metadata id's column (-1: not decoded), looking at the names once each."""
    hits = sorted((i, col_of[n]) for i, n in stat_names.items() if n in col_of)
    out = np.full(len(ids), -1, np.int64)
    if hits and len(ids):
        hit = np.asarray(hits, np.int64)
        k = np.clip(np.searchsorted(hit[:, 0], ids), 0, len(hit) - 1)
        out = np.where(hit[k, 0] == ids, hit[k, 1], out)
    return out


def _release(mm: mmap.mmap, start: int, end: int) -> None:
    """Give the file pages of ``[start, end)`` (lines already decoded) back to the kernel: mapped pages
    count in the process's RSS, and a 1 GB trace need not be resident all at once."""
    if not hasattr(mmap, "MADV_DONTNEED"):
        return
    page = mmap.PAGESIZE
    lo, hi = (start // page) * page, (end // page) * page
    if hi > lo:
        with contextlib.suppress(OSError, ValueError):
            mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
