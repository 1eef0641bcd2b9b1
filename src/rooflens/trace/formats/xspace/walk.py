"""The event walk of an XSpace on every core: the kept lines cut into pieces of a few megabytes (a line
is never cut), the pieces walked in turn by as many threads as there are cores (the compiled walk
:func:`wire.decode_events` releases the GIL), each piece's rows placed into the final columns as soon
as the pieces before it are placed.

Memory: the final columns are one array per column, sized by the events of the kept lines (the line
headers count them: an upper bound of the kept ones), whose pages are touched only where a kept value
lands; a stat column that no kept event has is never touched and ends as a zero-memory broadcast.
A piece is walked into a scratch array of rows that is used again for a later piece, so each kept
value lands in fresh memory once (rows are the walk's one write stream; the placement writes each
column's stream).

The result is the same, bit for bit, as one walk over all lines: pieces are placed in line order;
each piece interns its strings (``hlo_op``, ``hlo_module``) in its own table, and the placement
renumbers them in order of first appearance over the pieces, which is the order one walk gives them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rooflens.trace.formats.compiled import rehash
from rooflens.trace.formats.raw import HOST_EVENT_MIN_PS
from rooflens.trace.formats.xspace import wire as W
from rooflens.trace.groupby import unique_values

#: bytes decoded between two progress updates (and page releases), per thread: a long line's pages go back every
#: 16 MB (at 64 MB, a long GPU run's two host-thread lines of 47 and 75 MB held 120 MB of the file resident)
CHUNK_BYTES = 16 << 20
#: a piece (the unit a thread walks, then places) holds about this many bytes of lines: small enough that
#: the scratch rows of the pieces in flight stay small, large enough that a thread seldom waits
PIECE_BYTES = 16 << 20
#: a line longer than this is read by the header pass in parts of PIECE_BYTES, each part's pages handed back to the
#: kernel before the next (a long run's host thread can be one line of hundreds of megabytes)
LONG_LINE_BYTES = 2 * PIECE_BYTES
#: below this many bytes of events a file is walked on one thread (a thread costs more than it saves)
PARALLEL_MIN_BYTES = 16 << 20


def threads_for(total_bytes: int) -> int:
    """Threads for a walk of ``total_bytes``: every core this process may use (``ROOFLENS_DECODE_THREADS``
    overrides), one for a small file."""
    env = os.environ.get("ROOFLENS_DECODE_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    if total_bytes < PARALLEL_MIN_BYTES:
        return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def split_lines(lines: np.ndarray, n: int) -> list[tuple[int, int]]:
    """``n`` contiguous [lo, hi) ranges of ``lines`` (rows: start, end, …) of about equal bytes (a line is
    never split: an event's start cannot be found from the middle of a line)."""
    if n <= 1 or len(lines) <= 1:
        return [(0, len(lines))]
    size = np.cumsum(lines[:, 1] - lines[:, 0])  # size[k]: bytes of lines 0..k
    target = size[-1] * np.arange(1, n) / n
    k = np.searchsorted(size, target, side="left")  # the first line that reaches the target
    below = np.where(k > 0, size[np.clip(k - 1, 0, None)], 0)  # bytes when that line goes to the next part
    cuts = np.where(target - below < size[k] - target, k, k + 1)  # the boundary nearest the target
    bounds = unique_values(np.concatenate([[0], np.clip(cuts, 0, len(lines)), [len(lines)]]))
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def pieces_of(lines: np.ndarray, piece_bytes: int | None = None) -> list[tuple[int, int]]:
    """The walk's pieces: contiguous [lo, hi) ranges of ``lines`` of about ``piece_bytes`` (default
    PIECE_BYTES) each."""
    total = int((lines[:, 1] - lines[:, 0]).sum()) if len(lines) else 0
    return split_lines(lines, max(1, -(-total // max(1, piece_bytes or PIECE_BYTES))))


def line_headers(buf, spans: np.ndarray, n_threads: int,
                 release: Callable[[int, int], None] | None = None) -> np.ndarray | tuple[None, np.ndarray]:
    """:func:`wire.line_headers` of every line, the lines shared out among ``n_threads`` threads (a line's
    header holds its event count, and counting reads every event's tag: the whole file). Each thread
    reads its lines a piece at a time and calls ``release(start, end)`` with the bytes it has read, so
    the file need not be resident all at once. On a damaged line: ``(None, err)`` of the first one that
    broke."""
    heads = np.empty((len(spans), 8), np.int64)
    ranges = split_lines(spans, n_threads)
    errs = [np.zeros(2, np.int64) for _ in ranges]
    status = [0] * len(ranges)

    def run(i: int, lo: int, hi: int) -> None:
        for a, b in pieces_of(spans[lo:hi], 2 * PIECE_BYTES):
            a, b = lo + a, lo + b
            if int((spans[a:b, 1] - spans[a:b, 0]).max()) <= LONG_LINE_BYTES:
                status[i] = W.line_headers(buf, spans[a:b], heads[a:b], errs[i])
            else:  # a line too long to be resident whole: this piece's lines one by one, a long one in parts
                status[i] = _long_headers(buf, spans, heads, a, b, errs[i], release)
            if status[i] < 0:
                return
            if release is not None:
                release(int(spans[a, 0]), int(spans[b - 1, 1]))

    threads = [threading.Thread(target=run, args=(i, lo, hi), daemon=True) for i, (lo, hi) in enumerate(ranges[1:], 1)]
    for t in threads:
        t.start()
    if ranges:
        run(0, *ranges[0])
    for t in threads:
        t.join()
    for st, err in zip(status, errs):
        if st < 0:
            return None, err
    return heads


def _long_headers(buf, spans: np.ndarray, heads: np.ndarray, a: int, b: int, err: np.ndarray,
                  release: Callable[[int, int], None] | None) -> int:
    """:func:`wire.line_headers` of lines ``a:b``, each line longer than LONG_LINE_BYTES read PIECE_BYTES at a time,
    the bytes read handed to ``release`` after each part; -1 when a line is damaged."""
    for k in range(a, b):
        start, end = int(spans[k, 0]), int(spans[k, 1])
        if end - start <= LONG_LINE_BYTES:
            if W.line_headers(buf, spans[k:k + 1], heads[k:k + 1], err) < 0:
                return -1
            continue
        W.start_header(heads[k])
        pos = start
        while pos < end:
            pos = W.line_header_until(buf, pos, end, pos + PIECE_BYTES, heads[k], err)
            if pos < 0:
                return -1
            if release is not None:
                release(start, pos)
    return b - a


@dataclass
class Walked:
    """The walk's result: the kept events' columns (wire.N_COLS, line indices among all lines), the
    interned strings by code (bytes), and, when a line is damaged, the first error (code, byte offset)."""

    cols: list[np.ndarray]
    strings: list[bytes]
    err: np.ndarray | None = None


@dataclass
class _Piece:
    """One walked piece, waiting for its turn to be placed."""

    index: int
    first_line: int  # its first line among the kept lines
    rows: np.ndarray  # scratch rows [capacity, N_COLS]: the first ``n`` hold its kept events
    n: int
    strs: np.ndarray  # its interned strings' (start, end) in the file, by its own code
    err: np.ndarray | None


def walk(buf, lines: np.ndarray, tables: tuple, line_index: np.ndarray, events: np.ndarray, n_threads: int,
         on_chunk: Callable[[int, int], None]) -> Walked:
    """Every kept event of ``lines`` (rows: start, end, plane, flags, base_ps; ``line_index``: each one's
    index among all lines; ``events``: each one's event count) walked on ``n_threads`` threads.
    ``on_chunk(bytes decoded so far, over all threads; a [start, end) of the file now decoded)`` is
    called between chunks, one thread at a time."""
    pieces = pieces_of(lines) if len(lines) else []
    capacity = int(events.sum())
    try:
        return _Walk(buf, lines, tables, line_index, events, pieces, capacity, on_chunk, W.NARROW).run(n_threads)
    except _DoesNotFit:  # a value too large for its int32 column (a metadata id past 2**31): the walk again, in int64
        return _Walk(buf, lines, tables, line_index, events, pieces, capacity, on_chunk, ()).run(n_threads)


class _DoesNotFit(Exception):
    """A kept value does not fit its narrow (int32) column."""


def final_columns(capacity: int, narrow: tuple = W.NARROW) -> tuple[tuple, tuple, tuple, np.ndarray]:
    """The walk's final columns of ``capacity`` rows, untouched until placed (int32 for the columns ``narrow``
    names, int64 for the others), as :func:`wire.place` takes them: (every column, the int64 ones, the int32
    ones, each column's slot among those)."""
    cols = tuple(np.empty(capacity, np.int32 if k in narrow else np.int64) for k in range(W.N_COLS))
    wide = tuple(c for c in cols if c.dtype == np.int64)
    thin = tuple(c for c in cols if c.dtype == np.int32)
    slot = np.empty(W.N_COLS, np.int64)
    for k, c in enumerate(cols):
        before = sum(d.dtype == c.dtype for d in cols[:k])
        slot[k] = before if c.dtype == np.int64 else -1 - before
    return cols, wide, thin or (np.empty(0, np.int32),), slot


class _Walk:
    """The shared state of one walk: the pieces handed out in order, those walked and not yet placed, the
    final columns and how many rows they hold."""

    def __init__(self, buf, lines, tables, line_index, events, pieces, capacity, on_chunk, narrow: tuple):
        self.buf, self.lines, self.tables, self.pieces, self.on_chunk = buf, lines, tables, pieces, on_chunk
        self.line_index = np.ascontiguousarray(line_index, np.int64)
        self.piece_events = [int(events[lo:hi].sum()) for lo, hi in pieces]
        self.cols, self.wide, self.narrow, self.slot = final_columns(capacity, narrow)
        self.real = np.zeros(W.N_COLS, np.int64)  # the columns a kept event has a value in
        self.real[:W.STAT_BASE] = 1
        self.placed = 0  # rows in the columns
        self.code_of: dict[bytes, int] = {}
        self.cond = threading.Condition()
        self.next_piece = 0  # the next piece to walk
        self.next_place = 0  # the next piece to place
        self.waiting: dict[int, _Piece] = {}
        self.placing = False
        self.failed: int | None = None  # the first piece that broke
        self.err: np.ndarray | None = None
        self.spare: list[np.ndarray] = []  # scratch rows no piece holds
        self.done_bytes = 0
        self.errors: list[BaseException] = []

    def run(self, n_threads: int) -> Walked:
        n = max(1, min(n_threads, len(self.pieces)))
        if n == 1:
            self.worker()
        else:
            threads = [threading.Thread(target=self.worker, daemon=True) for _ in range(n)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        if self.errors:
            raise self.errors[0]
        m = self.placed
        cols = [c[:m] if self.real[k] else np.broadcast_to(c.dtype.type(W.absent_in(c)), (m,))  # no memory
                for k, c in enumerate(self.cols)]
        return Walked(cols, list(self.code_of), self.err)

    def worker(self) -> None:
        try:
            while (i := self.take()) is not None:
                piece = self.walk_piece(i)
                with self.cond:
                    if piece.err is not None and (self.failed is None or i < self.failed):
                        self.failed = i
                    self.waiting[i] = piece
                    if self.placing:
                        continue
                    self.placing = True
                self.place_ready()
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread in run()
            with self.cond:
                self.errors.append(e)
                self.failed = -1
                self.cond.notify_all()

    def take(self) -> int | None:
        """The next piece to walk; None when there is none left (or a piece before it broke). Waits
        while too many walked pieces wait for their turn (their scratch rows are memory)."""
        with self.cond:
            while len(self.waiting) > 2 and self.failed is None:
                self.cond.wait()
            i = self.next_piece
            if i >= len(self.pieces) or (self.failed is not None and i > self.failed):
                return None
            self.next_piece += 1
            return i

    def place_ready(self) -> None:
        """Place every walked piece whose turn it is (one thread at a time does this)."""
        while True:
            with self.cond:
                piece = self.waiting.pop(self.next_place, None)
                if piece is None or self.failed == -1:
                    self.placing = False
                    self.cond.notify_all()
                    return
            if piece.err is not None:
                self.err = piece.err  # pieces after it are not placed; the walk ends with this error
            elif self.err is None:
                self.place(piece)
            with self.cond:
                self.spare.append(piece.rows)
                self.next_place += 1
                self.cond.notify_all()

    def place(self, piece: _Piece) -> None:
        lut = np.empty(len(piece.strs), np.int64)
        for k, (s, e) in enumerate(piece.strs.tolist()):
            lut[k] = self.code_of.setdefault(bytes(self.buf[s:e]), len(self.code_of))
        if W.place(piece.rows, piece.n, self.wide, self.narrow, self.slot, self.placed, lut, self.line_index,
                   piece.first_line, self.real):
            raise _DoesNotFit
        self.placed += piece.n

    def scratch(self, rows: int) -> np.ndarray:
        with self.cond:
            while self.spare:
                r = self.spare.pop()
                if len(r) >= rows:
                    return r
        return np.empty((max(1024, rows), W.N_COLS), np.int64)

    def walk_piece(self, i: int) -> _Piece:
        """Decode the events of piece ``i`` into scratch rows (as many as its lines have events: never
        full)."""
        lo, hi = self.pieces[i]
        lines = np.ascontiguousarray(self.lines[lo:hi])
        sm_ids, sm_col, sm_name, plane_sm, want = self.tables
        rows = self.scratch(self.piece_events[i])
        tkeys, tcodes = np.zeros(1 << 12, np.int64), np.zeros(1 << 12, np.int32)
        strs = np.empty((1 << 11, 2), np.int64)
        nstr = np.zeros(1, np.int64)
        ref_code = np.full(len(sm_ids), -1, np.int64)  # this piece's code of each ref stat's string
        state = np.zeros(4, np.int64)
        err = np.zeros(2, np.int64)
        done = 0
        while True:
            status = W.decode_events(self.buf, lines, state, CHUNK_BYTES, HOST_EVENT_MIN_PS, sm_ids, sm_col, sm_name,
                                     plane_sm, want, rows, tkeys, tcodes, strs, nstr, ref_code, err)
            if status == W.FAILED:
                return _Piece(i, lo, rows, int(state[2]), strs[:0], err)
            if status == W.OUT_FULL:  # more kept events than the headers counted: cannot be, but stay safe
                rows = np.concatenate([rows, np.empty_like(rows)])
            elif status == W.TABLE_FULL:
                if 2 * (nstr[0] + 1) > len(tkeys):
                    tkeys, tcodes = rehash(tkeys, tcodes, len(tkeys) * 2)
                if nstr[0] >= len(strs):
                    strs = np.concatenate([strs, np.empty_like(strs)])
            elif status in (W.BUDGET, W.DONE):
                now, reached = position(lines, state)
                with self.cond:
                    self.done_bytes += now - done
                    self.on_chunk(self.done_bytes, int(lines[0, 0]), reached)
                done = now
                if status == W.DONE:
                    return _Piece(i, lo, rows, int(state[2]), strs[:int(nstr[0])].copy(), None)


def position(lines: np.ndarray, state: np.ndarray) -> tuple[int, int]:
    """(bytes of line data decoded so far, file offset reached) after a decode call."""
    li = int(state[0])
    done = int((lines[:li, 1] - lines[:li, 0]).sum())
    if li < len(lines):
        at = int(state[1]) if state[1] > 0 else int(lines[li, 0])
        return done + at - int(lines[li, 0]), at
    return done, int(lines[-1, 1]) if len(lines) else 0
