"""An Nsight export's large tables read straight from the SQLite file's pages: compiled, columnar, no SQL.

SQLite's own engine spends most of a large export's read decoding each row through its virtual machine (the
2.4 M-row ×80 export: ~0.7 s just for ``max()`` over four NVTX columns); the file format is simple and
documented (https://www.sqlite.org/fileformat2.html), so the rows the reader needs are read here directly, in
numba, from a read-only memory map of the file:

* a table is a B-tree of pages (``sqlite_master.rootpage``); its interior pages (type 5) hold child page numbers
  and a right-most pointer, its leaves (type 13) the rows in rowid order (the order a ``SELECT`` without
  ``ORDER BY`` returns them): collected in order by :func:`leaf_pages`;
* a row is a record: a header of varint serial types (0 NULL, 1-6 big-endian integers of 1, 2, 3, 4, 6 and 8
  bytes, 7 a float, 8 and 9 the constants 0 and 1, odd N ≥ 13 text of (N-13)/2 bytes, even N ≥ 12 a blob), then
  the values; an INTEGER PRIMARY KEY column is stored as NULL and is the row's rowid; columns added later by
  ``ALTER TABLE`` may be absent from older rows (NULL);
* integers become int64 columns with a NULL mask; a text column (NVTX's inline names) is cut at the first of
  PyTorch's per-call arguments (:data:`rooflens.trace.formats.nsys_sqlite.tables.TORCH_ARGS`) and interned
  in place, as each row is read (no Python string per row; codes in order of first appearance, as Arrow's
  dictionary encoding gives);
* a large table's leaves are read in two halves at once, on two threads (the walk lets go of the GIL), each
  half's names interned on their own and the later half's codes mapped onto the first's after.

Anything this reader does not take (a row spilling onto overflow pages, a float or text where integers are read,
text not in UTF-8, a WITHOUT ROWID table, an unexpected page) makes it decline: the caller then reads the same
columns through SQL (:meth:`rooflens.trace.formats.nsys_sqlite.db.Export.scan`), which also words any error.
"""

from __future__ import annotations

import numpy as np

from rooflens.trace.formats.compiled import intern, njit, rehash

OK, DECLINE, FULL = 0, 1, 2
#: the text interning table's first size (slots; it doubles when full, the read resuming at the leaf it was on)
INTERN_SLOTS = 1 << 12
#: a table of at least this many rows is read in two halves, side by side (the compiled walk lets go of the GIL)
SPLIT_MIN_ROWS = 200_000
_INTERIOR, _LEAF = 5, 13


@njit(cache=True)
def _varint(buf, p):
    """SQLite's varint at ``p``: (value, position after it). Up to 9 bytes, 7 bits each, the 9th 8 bits."""
    v = np.int64(0)
    for k in range(8):
        c = np.int64(buf[p + k])
        v = (v << 7) | (c & 0x7F)
        if c < 0x80:
            return v, p + k + 1
    return (v << 8) | np.int64(buf[p + 8]), p + 9


@njit(cache=True)
def _u16(buf, p):
    return (np.int64(buf[p]) << 8) | np.int64(buf[p + 1])


@njit(cache=True)
def _u32(buf, p):
    return (np.int64(buf[p]) << 24) | (np.int64(buf[p + 1]) << 16) | (np.int64(buf[p + 2]) << 8) | np.int64(buf[p + 3])


@njit(cache=True, nogil=True)
def leaf_pages(buf, page_size, root, out):
    """The table's leaf pages in key order into ``out``: (how many, rows in them, status)."""
    n_pages = buf.shape[0] // page_size
    stack = np.empty(64, np.int64)  # page numbers
    at = np.empty(64, np.int64)  # next child to visit of each page on the stack
    stack[0], at[0] = root, 0
    depth, n, rows = 1, 0, np.int64(0)
    while depth > 0:
        page = stack[depth - 1]
        if page < 1 or page > n_pages:
            return n, rows, DECLINE
        base = (page - 1) * page_size
        hdr = base + (100 if page == 1 else 0)
        kind = buf[hdr]
        ncell = _u16(buf, hdr + 3)
        if hdr + 12 + 2 * ncell > base + page_size:  # a cell pointer array past its page: damaged
            return n, rows, DECLINE
        if kind == _LEAF:
            if n >= out.shape[0]:
                return n, rows, DECLINE
            out[n] = page
            n += 1
            rows += ncell
            depth -= 1
            continue
        if kind != _INTERIOR:
            return n, rows, DECLINE
        i = at[depth - 1]
        if i > ncell:
            depth -= 1
            continue
        at[depth - 1] = i + 1
        cell = base + _u16(buf, hdr + 12 + 2 * i) if i < ncell else hdr + 8
        if cell + 4 > base + page_size:
            return n, rows, DECLINE
        child = _u32(buf, cell)
        if depth >= stack.shape[0]:
            return n, rows, DECLINE
        stack[depth], at[depth] = child, 0
        depth += 1
    return n, rows, OK


@njit(cache=True)
def _cut(buf, s, e, pats, bounds):
    """Where ``buf[s:e]`` is cut: at the first of the patterns it holds (each starts with a comma), else ``e``."""
    for i in range(s, e):
        if buf[i] != 44:
            continue
        for k in range(bounds.shape[0]):
            a, b = bounds[k, 0], bounds[k, 1]
            if i + (b - a) > e:
                continue
            same = True
            for q in range(b - a):
                if buf[i + q] != pats[a + q]:
                    same = False
                    break
            if same:
                return i
    return e


@njit(cache=True, nogil=True)
def read_rows(buf, page_size, usable, leaves, first_leaf, n_leaves, n, slot, pk_col, text_col, ints, nulls, codes,
              pats, bounds, tkeys, tcodes, strs, nstr):
    """The rows of the leaves ``leaves[first_leaf:n_leaves]``, the first of them row ``n``: column ``j`` of the table
    to ``ints[slot[j]]`` (``nulls`` 1 where NULL), the text column cut and interned (:func:`.compiled.intern`, while
    its bytes are at hand) to ``codes`` (-1: NULL). Returns (rows read, status, leaf); status FULL: the interning
    table is full, grow it and call again from that leaf, whose first row is the rows read."""
    max_local = usable - 35
    for li in range(first_leaf, n_leaves):
        page = leaves[li]
        base = (page - 1) * page_size
        hdr = base + (100 if page == 1 else 0)
        ncell = _u16(buf, hdr + 3)
        end = base + page_size
        n_leaf = n
        for c in range(ncell):
            p = base + _u16(buf, hdr + 8 + 2 * c)
            if p < hdr + 8 or p >= end or p + 18 > buf.shape[0] or n >= nulls.shape[1]:
                return n, DECLINE, li  # a cell outside its page: damaged
            size, p = _varint(buf, p)
            rowid, p = _varint(buf, p)
            if size > max_local or p + size > end or size < 1:
                return n, DECLINE, li  # the row spills onto overflow pages (or is damaged)
            head, q = _varint(buf, p)
            head_end = p + head
            if head_end > p + size or head < q - p:
                return n, DECLINE, li
            body = head_end
            for k in range(ints.shape[0]):
                ints[k, n] = 0
                nulls[k, n] = 1
            if text_col >= 0:
                codes[n] = -1
            j = 0
            while j < slot.shape[0]:
                if q < head_end:
                    st, q = _varint(buf, q)
                else:
                    st = np.int64(0)  # a column this older row does not have: NULL
                width = 0
                if 1 <= st <= 4:
                    width = st
                elif st == 5:
                    width = 6
                elif st == 6 or st == 7:
                    width = 8
                elif st >= 12:
                    width = (st - 12) // 2
                if body + width > p + size:
                    return n, DECLINE, li  # a value past its record: damaged
                k = slot[j]
                if j == text_col:
                    if st >= 13 and st % 2 == 1:
                        code = intern(buf, body, _cut(buf, body, body + width, pats, bounds), tkeys, tcodes, strs,
                                      nstr)
                        if code < 0:
                            return n_leaf, FULL, li
                        codes[n] = code
                    elif st != 0:
                        return n, DECLINE, li  # not text where text is read
                elif k >= 0:
                    if st == 0:
                        if j == pk_col:
                            ints[k, n], nulls[k, n] = rowid, 0
                    elif st <= 6:
                        v = np.int64(buf[body])
                        if v >= 128:
                            v -= 256  # the first byte carries the sign
                        for b in range(1, width):
                            v = (v << 8) | np.int64(buf[body + b])
                        ints[k, n], nulls[k, n] = v, 0
                    elif st == 8 or st == 9:
                        ints[k, n], nulls[k, n] = st - 8, 0
                    else:
                        return n, DECLINE, li  # a float, text or blob where integers are read
                body += width
                j += 1
            n += 1
    return n, OK, n_leaves


def _patterns(words: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    raw = [w.encode() for w in words]
    bounds = np.zeros((len(raw), 2), np.int64)
    at = 0
    for k, b in enumerate(raw):
        bounds[k] = at, at + len(b)
        at += len(b)
    return np.frombuffer(b"".join(raw), np.uint8).copy(), bounds


class File:
    """The export's bytes, mapped read-only, and what its header says."""

    def __init__(self, path) -> None:
        self.buf = np.memmap(path, np.uint8, mode="r")
        head = bytes(self.buf[:100])
        size = int.from_bytes(head[16:18], "big")
        self.page_size = 65536 if size == 1 else size
        self.usable = self.page_size - head[20]
        self.utf8 = int.from_bytes(head[56:60], "big") in (0, 1)  # 1 UTF-8 (0: an empty database, UTF-8)

    def scan(self, root: int, ncols: int, wanted: list[int], pk_col: int, text_col: int, cut: tuple[str, ...]):
        """Columns ``wanted`` (table positions) of the table at ``root`` as (int64 (k, n), NULL mask (k, n)), and
        the text column's (codes, words) when ``text_col`` ≥ 0; None where this reader declines."""
        if not self.utf8 or self.page_size < 512:
            return None
        leaves = np.empty(len(self.buf) // self.page_size + 1, np.int64)
        n_leaves, rows, status = leaf_pages(self.buf, self.page_size, root, leaves)
        if status != OK:
            return None
        slot = np.full(max([*wanted, text_col]) + 1, -1, np.int64)  # the record is read up to the last wanted
        for k, j in enumerate(wanted):
            slot[j] = k
        ints = np.empty((len(wanted), rows), np.int64)
        nulls = np.empty((len(wanted), rows), np.uint8)
        codes = np.empty(rows if text_col >= 0 else 0, np.int64)
        args = (slot, pk_col, text_col, ints, nulls, codes, *_patterns(cut))
        if rows < SPLIT_MIN_ROWS:
            n, status, raw = self._read(leaves, 0, n_leaves, 0, *args)
            if status != OK or n != rows:
                return None
        else:  # two halves of the leaves, on this thread and another, each with its own names' table
            cells = np.cumsum(self._cells(leaves[:n_leaves]))
            mid = int(np.searchsorted(cells, rows // 2)) + 1
            half = int(cells[mid - 1])
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(1, thread_name_prefix="rooflens-pages") as other:
                first = other.submit(self._read, leaves, 0, mid, 0, *args)
                n, status, later = self._read(leaves, mid, n_leaves, half, *args)
                n0, status0, raw = first.result()
            if status0 != OK or n0 != half or status != OK or n != rows:
                return None
            if text_col >= 0 and later:  # the later half's names: the first half's codes, else new ones after them
                known = {b: c for c, b in enumerate(raw)}
                lut = np.asarray([known.setdefault(b, len(known)) for b in later], np.int64)
                raw = list(known)
                tail = codes[half:]
                codes[half:] = np.where(tail >= 0, lut[np.clip(tail, 0, None)], -1)
        if text_col < 0:
            return ints, nulls.astype(bool), None
        return ints, nulls.astype(bool), (codes, [b.decode("utf-8", "replace") for b in raw])

    def _cells(self, leaves: np.ndarray) -> np.ndarray:
        """The rows (cells) of each leaf page, from its header."""
        hdr = (leaves - 1) * self.page_size + np.where(leaves == 1, 100, 0)
        return (self.buf[hdr + 3].astype(np.int64) << 8) | self.buf[hdr + 4]

    def _read(self, leaves, lo: int, hi: int, n: int, slot, pk_col, text_col, ints, nulls, codes, pats, bounds):
        """The rows of leaves ``leaves[lo:hi]`` (the first of them row ``n``) by :func:`read_rows`, its names' table
        grown as it fills: (rows read, status, the names' bytes in code order)."""
        tkeys, tcodes = np.zeros(INTERN_SLOTS, np.int64), np.zeros(INTERN_SLOTS, np.int32)
        strs, nstr = np.empty((INTERN_SLOTS // 2, 2), np.int64), np.zeros(1, np.int64)
        while True:
            n, status, lo = read_rows(self.buf, self.page_size, self.usable, leaves, lo, hi, n, slot, pk_col, text_col,
                                      ints, nulls, codes, pats, bounds, tkeys, tcodes, strs, nstr)
            if status != FULL:
                break
            tkeys, tcodes = rehash(tkeys, tcodes, len(tkeys) * 2)
            strs = np.concatenate([strs, np.empty_like(strs)])
        return n, status, [bytes(self.buf[s:e]) for s, e in strs[:int(nstr[0])].tolist()]
