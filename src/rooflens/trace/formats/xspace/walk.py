"""The event walk of an XSpace on every core: the kept lines split into contiguous parts of about equal
bytes, each part decoded on its own thread (the compiled walk :func:`wire.decode_events` releases the
GIL), then the parts' columns joined in file order.

The result is the same, bit for bit, as one walk over all lines: a part's rows come in its lines'
order and the parts are joined in line order; line indices are shifted by the part's first line; each
part interns its strings (``hlo_op``, ``hlo_module``) in its own table, and the join renumbers them in
order of first appearance over the parts, which is the order one walk would have given them.
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

#: bytes decoded between two progress updates (and page releases), per thread
CHUNK_BYTES = 64 << 20
#: kept events decoded between two moves into the columns (~120 MB of rows, shared by the threads)
BLOCK_ROWS = 1 << 20
#: below this many bytes of events a file is walked on one thread (a thread costs more than it saves)
PARALLEL_MIN_BYTES = 16 << 20


@dataclass
class Part:
    """One part's walk: its columns (as lists of blocks), its interned strings' (start, end) in the file,
    and, when it failed, what and where."""

    first_line: int  # index in the kept lines of the part's first line
    parts: list[list[np.ndarray]]
    strs: np.ndarray
    err: np.ndarray | None = None  # when the walk broke: the error code and the byte offset


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
    bounds = np.unique(np.concatenate([[0], np.clip(cuts, 0, len(lines)), [len(lines)]]))
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def line_headers(buf, spans: np.ndarray, n_threads: int) -> np.ndarray | tuple[None, np.ndarray]:
    """:func:`wire.line_headers` of every line, the lines shared out among ``n_threads`` threads (a line's
    header holds its event count, and counting reads every event's tag: the whole file). On a damaged
    line: ``(None, err)`` of the first one that broke."""
    heads = np.empty((len(spans), 8), np.int64)
    ranges = split_lines(spans, n_threads)
    errs = [np.zeros(2, np.int64) for _ in ranges]
    status = [0] * len(ranges)

    def run(i: int, lo: int, hi: int) -> None:
        status[i] = W.line_headers(buf, spans[lo:hi], heads[lo:hi], errs[i])

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


def walk_part(buf, lines: np.ndarray, first: int, tables: tuple, block_rows: int,
              on_chunk: Callable[[int, int], None]) -> Part:
    """Decode the events of ``lines`` (rows: start, end, plane, flags, base_ps) into column blocks.
    ``on_chunk(bytes done in this part, file offset reached)`` is called between chunks."""
    sm_ids, sm_col, sm_name, plane_sm = tables
    cap = max(1024, block_rows)
    rows = np.empty((cap, W.N_COLS), np.int64)
    out = Part(first, [[] for _ in range(W.N_COLS)], np.zeros((0, 2), np.int64))
    tkeys, tcodes = np.zeros(1 << 12, np.int64), np.zeros(1 << 12, np.int32)
    strs = np.empty((1 << 11, 2), np.int64)
    nstr = np.zeros(1, np.int64)
    state = np.zeros(4, np.int64)
    err = np.zeros(2, np.int64)

    def flush() -> None:
        m = int(state[2])
        for k in range(W.N_COLS):
            out.parts[k].append(rows[:m, k].copy())
        state[2] = 0

    while True:
        status = W.decode_events(buf, lines, state, CHUNK_BYTES, HOST_EVENT_MIN_PS, sm_ids, sm_col, sm_name,
                                 plane_sm, rows, tkeys, tcodes, strs, nstr, err)
        if status == W.FAILED:
            out.err = err
            break
        if status == W.OUT_FULL:
            flush()
        elif status == W.TABLE_FULL:
            if 2 * (nstr[0] + 1) > len(tkeys):
                tkeys, tcodes = rehash(tkeys, tcodes, len(tkeys) * 2)
            if nstr[0] >= len(strs):
                strs = np.concatenate([strs, np.empty_like(strs)])
        elif status in (W.BUDGET, W.DONE):
            on_chunk(*position(lines, state))
            if status == W.DONE:
                break
    flush()
    if len(out.parts[W.COL_LINE]) and first:
        out.parts[W.COL_LINE] = [p + first for p in out.parts[W.COL_LINE]]
    out.strs = strs[:int(nstr[0])].copy()
    return out


def walk(buf, lines: np.ndarray, tables: tuple, ranges: list[tuple[int, int]],
         on_chunk: Callable[[int, int, int], None]) -> list[Part]:
    """Every part of ``lines`` (``ranges``, from :func:`split_lines`) walked, each on its own thread;
    ``on_chunk(part, bytes done in it, file offset reached)`` is called from the walking threads, one at a
    time."""
    lock = threading.Lock()
    results: list[Part | None] = [None] * len(ranges)
    errors: list[BaseException] = []
    block = max(1 << 14, BLOCK_ROWS // len(ranges))

    def run(i: int, lo: int, hi: int) -> None:
        def report(done: int, reached: int) -> None:
            with lock:
                on_chunk(i, done, reached)

        try:
            results[i] = walk_part(buf, np.ascontiguousarray(lines[lo:hi]), lo, tables, block, report)
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread below
            errors.append(e)

    if len(ranges) == 1:
        run(0, *ranges[0])
    else:
        threads = [threading.Thread(target=run, args=(i, lo, hi), daemon=True) for i, (lo, hi) in enumerate(ranges)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if errors:
        raise errors[0]
    return [r for r in results if r is not None]


def join(buf, parts: list[Part]) -> tuple[list[np.ndarray], list[str]]:
    """The parts' columns joined in order, string codes renumbered over all parts (first appearance)."""
    code_of: dict[bytes, int] = {}
    luts = []
    for p in parts:
        lut = np.empty(len(p.strs), np.int64)
        for k, (s, e) in enumerate(p.strs.tolist()):
            lut[k] = code_of.setdefault(bytes(buf[s:e]), len(code_of))
        luts.append(lut)
    for p, lut in zip(parts, luts):
        if len(lut) and not np.array_equal(lut, np.arange(len(lut))):
            for c in W.STRING_STATS:
                k = W.STAT_BASE + c
                p.parts[k] = [np.where(b != W.NONE, lut[np.where(b != W.NONE, b, 0)], W.NONE) for b in p.parts[k]]
    n = sum(len(b) for p in parts for b in p.parts[0])
    cols = []
    for k in range(W.N_COLS):  # one column at a time: its blocks go as it is made
        blocks = [b for p in parts for b in p.parts[k]]
        for p in parts:
            p.parts[k] = []
        if k >= W.STAT_BASE and all((b == W.NONE).all() for b in blocks):
            cols.append(np.broadcast_to(np.int64(W.NONE), (n,)))  # a stat no kept event has: no memory
        else:
            cols.append(np.concatenate(blocks) if blocks else np.zeros(0, np.int64))
    strings = [s.decode("utf-8", "replace") for s in code_of]
    return cols, strings


def position(lines: np.ndarray, state: np.ndarray) -> tuple[int, int]:
    """(bytes of line data decoded so far, file offset reached) after a decode call."""
    li = int(state[0])
    done = int((lines[:li, 1] - lines[:li, 0]).sum())
    if li < len(lines):
        at = int(state[1]) if state[1] > 0 else int(lines[li, 0])
        return done + at - int(lines[li, 0]), at
    return done, int(lines[-1, 1]) if len(lines) else 0
