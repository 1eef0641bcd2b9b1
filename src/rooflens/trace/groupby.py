"""Group-bys over integer codes without a sort: the analysis of a 20 M-event trace groups events by
(program, op), (host, device), (device, program, execution)… many times, and ``np.unique(…,
return_inverse=True)`` sorts every time (O(n log n), the largest part of a big report's analysis).

Codes are small, dense integers (indices into vocabularies), so a table as long as the codes' range
finds the distinct values in O(n + range): the same sorted values and inverse as ``np.unique``. Keys
of a wide range (program ids, the "absent" marker) go through a compiled hash table instead, when
there are enough of them to pay for it; only the distinct values are sorted.
"""

from __future__ import annotations

import numpy as np

#: a key range up to this many times the number of events (plus a floor) is grouped through a table
RANGE_PER_EVENT = 4
RANGE_FLOOR = 1 << 22
#: wide keys: at least this many go through the compiled hash table (fewer: np.unique's sort)
HASH_MIN_KEYS = 1 << 20


def unique_inverse(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(key, return_inverse=True)`` for integer keys (sorted distinct values, and each
    key's index among them, as int64), in O(n) when the keys' range is small."""
    key = np.asarray(key)
    n = len(key)
    if not n:
        return key[:0].copy(), np.zeros(0, np.int64)
    lo, hi = int(key.min()), int(key.max())
    span = hi - lo + 1
    if key.dtype.kind not in "iu" or span > RANGE_PER_EVENT * n + RANGE_FLOOR:
        if key.dtype.kind == "i" and n >= HASH_MIN_KEYS:
            return _hashed(key.astype(np.int64, copy=False))
        u, inv = np.unique(key, return_inverse=True)
        return u, inv.ravel().astype(np.int64, copy=False)
    shifted = key - lo if lo else key
    present = np.zeros(span, np.bool_)
    present[shifted] = True
    values = np.flatnonzero(present)
    rank = np.cumsum(present, dtype=np.int64) - 1
    inv = rank[shifted]
    return (values + lo).astype(key.dtype, copy=False), inv


def any_index(inv: np.ndarray, m: int) -> np.ndarray:
    """For each of ``m`` groups, the index of one of its members (``inv``: each row's group)."""
    out = np.empty(m, np.int64)
    out[inv] = np.arange(len(inv))
    return out


def _hashed(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`unique_inverse` of wide int64 keys: distinct values in first-seen order by a hash table, then
    sorted (there are few), and each key's rank among them."""
    from rooflens.trace.formats.compiled import factorize, numba_ready  # numba: only for large inputs

    numba_ready()
    codes = np.empty(len(key), np.int64)
    first = np.empty(1024, np.int64)
    size = 1 << 10
    while True:
        m = factorize(key, codes, first, size)
        if m >= 0:
            break
        size *= 4  # too many distinct values for the table: a larger one
        first = np.empty(size, np.int64)
    values = first[:m]
    order = np.argsort(values, kind="stable")
    rank = np.empty(m, np.int64)
    rank[order] = np.arange(m)
    return values[order].astype(key.dtype, copy=False), rank[codes]
