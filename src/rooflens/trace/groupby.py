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

from rooflens.trace.formats.compiled import njit, plain_twin

#: a kernel whose twin is numpy's own formulation runs the twin whenever numba is not loaded yet
NUMPY_TWIN = 1 << 62

#: a key range up to this many times the number of events (plus a floor) is grouped through a table
RANGE_PER_EVENT = 4
RANGE_FLOOR = 1 << 22


def dense(n_keys: int, n: int, floor: int = RANGE_FLOOR) -> bool:
    """Whether ``n_keys`` possible keys of ``n`` rows are few enough to group by a table as long as their
    range (``floor``: keys always allowed, however few the rows; less where each key costs more than a bool)."""
    return n_keys <= RANGE_PER_EVENT * n + floor


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
    if key.dtype.kind not in "iu" or not dense(span, n):
        if key.dtype.kind == "i" and n >= HASH_MIN_KEYS:
            return _hashed(key.astype(np.int64, copy=False))
        u, inv = np.unique(key, return_inverse=True)
        return u, inv.ravel().astype(np.int64, copy=False)
    if key.dtype.kind == "u":  # (a compiled walk would mix unsigned and signed arithmetic)
        values, inv = _dense_inverse_np(key, lo, span)
    else:
        values, inv = dense_inverse(key, lo, span)
    return values.astype(key.dtype, copy=False), inv


@njit(cache=True, nogil=True)
def radix_step(key, col, span, lo):
    """``key = key * span + (col - lo)`` in place, in one pass (a row key's next digit:
    :func:`rooflens.trace.events.row_key`)."""
    for i in range(len(key)):
        key[i] = key[i] * span + (col[i] - lo)


@plain_twin(radix_step, NUMPY_TWIN)
def _radix_step_np(key, col, span, lo):
    key *= span
    key += col
    if lo:
        key -= lo


@njit(cache=True, nogil=True)
def dense_inverse(key, lo, span):
    """:func:`unique_inverse` of signed keys in ``[lo, lo + span)``: their distinct values (int64, sorted) and each
    key's rank among them, in two passes over the keys and a table as long as their range (int32: the ranks)."""
    present = np.zeros(span, np.bool_)
    for i in range(len(key)):
        present[key[i] - lo] = True
    rank = np.empty(span, np.int32)
    m = 0
    for v in range(span):
        rank[v] = m
        if present[v]:
            m += 1
    values = np.empty(m, np.int64)
    for v in range(span):
        if present[v]:
            values[rank[v]] = v + lo
    inv = np.empty(len(key), np.int64)
    for i in range(len(key)):
        inv[i] = rank[key[i] - lo]
    return values, inv


@plain_twin(dense_inverse, NUMPY_TWIN)
def _dense_inverse_np(key, lo, span):
    shifted = key - lo if lo else key
    present = np.zeros(span, np.bool_)
    present[shifted] = True
    values = np.flatnonzero(present) + lo
    rank = np.cumsum(present, dtype=np.int64) - 1
    return values, rank[shifted]


def unique_values(key: np.ndarray) -> np.ndarray:
    """``np.unique(key)`` of a 1-D array: the sorted distinct values, in O(n) for integer keys of a small range (no
    inverse made: a table's few programs among its millions of events). Every plain ``np.unique`` of rooflens is this
    one."""
    key = np.asarray(key).ravel()
    if not len(key):
        return key[:0].copy()
    lo, hi = (int(key.min()), int(key.max())) if key.dtype.kind in "iu" else (0, -1)
    if hi < lo or not dense(hi - lo + 1, len(key)):
        # np.unique's own sort, without its check for a masked array: that check imports numpy.ma (50 ms of a
        # report's start) the first time a plain np.unique runs; NaNs are not merged
        ordered = np.sort(key, kind="stable")
        return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]
    present = np.zeros(hi - lo + 1, np.bool_)
    present[key - lo if lo else key] = True
    return (np.flatnonzero(present) + lo).astype(key.dtype, copy=False)


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


# -- grouped orders and per-group order statistics ------------------------------------------------
# Each kernel's twin is the numpy formulation of the same result: it runs while numba is not loaded
# in this process (a small trace, or a large one read from the cache, which needs no decoder), so
# only a report that loads numba anyway (a fresh decode) pays for the compiled loops.

@njit(cache=True, nogil=True)
def grouped_order(inv, m):
    """Event indices grouped by ``inv`` (each row's group in ``[0, m)``), in index order within a group:
    ``np.argsort(inv, kind="stable")`` by a counting sort, O(n + m)."""
    nxt = np.zeros(m + 1, np.int64)
    for i in range(len(inv)):
        nxt[inv[i] + 1] += 1
    for g in range(m):
        nxt[g + 1] += nxt[g]
    order = np.empty(len(inv), np.int64)
    for i in range(len(inv)):
        g = inv[i]
        order[nxt[g]] = i
        nxt[g] += 1
    return order


@plain_twin(grouped_order, NUMPY_TWIN)
def _grouped_order_np(inv, m):
    return np.argsort(inv, kind="stable")


def median(values) -> float:
    """``np.median`` of values (a 1-D array or list; NaN when one is NaN or there are none), without its check for a
    masked array, which imports numpy.ma (50 ms of a report's start) the first time a median is taken."""
    a = np.asarray(values, dtype=np.float64).ravel()
    n = len(a)
    if not n or np.isnan(a).any():
        return float("nan")
    k = n // 2
    if n % 2:
        return float(np.partition(a, k)[k])
    part = np.partition(a, [k - 1, k])
    return float((part[k - 1] + part[k]) / 2)


@njit(cache=True, nogil=True)
def group_bounds(inv, m):
    """Where each of ``m`` groups begins once the rows are grouped by ``inv`` (and, last, the rows' number): the
    running sum of the groups' sizes."""
    bounds = np.zeros(m + 1, np.int64)
    for i in range(len(inv)):
        bounds[inv[i] + 1] += 1
    for g in range(m):
        bounds[g + 1] += bounds[g]
    return bounds


@njit(cache=True, nogil=True)
def group_medians(inv, m, values):
    """Each of ``m`` groups' median (the mean of its two middle values), smallest and largest value (zeros for a
    group with no member): its values gathered by a counting sort, and only its middle ones found (a selection, not
    a sort: a 6 M-event table's op durations were sorted group by group for three numbers each)."""
    bounds = group_bounds(inv, m)
    nxt = bounds[:m].copy()
    grouped = np.empty(len(values), values.dtype)
    lo = np.zeros(m, values.dtype)
    hi = np.zeros(m, values.dtype)
    for i in range(len(inv)):
        g = inv[i]
        v = values[i]
        if nxt[g] == bounds[g] or v < lo[g]:
            lo[g] = v
        if nxt[g] == bounds[g] or v > hi[g]:
            hi[g] = v
        grouped[nxt[g]] = v
        nxt[g] += 1
    medians = np.zeros(m)
    for g in range(m):
        a, n = bounds[g], bounds[g + 1] - bounds[g]
        if n == 0:
            continue
        k = (n - 1) // 2
        part = np.partition(grouped[a:a + n], k)
        v1 = part[k]
        v2 = v1 if n % 2 else part[k + 1:].min()
        medians[g] = (v1 + v2) / 2
    return medians, lo, hi


@plain_twin(group_medians, NUMPY_TWIN)
def _group_medians_np(inv, m, values):
    ranked = values[np.lexsort((values, inv))]
    cnt = np.bincount(inv, minlength=m)
    first = np.concatenate([[0], np.cumsum(cnt)[:-1]])
    has = cnt > 0

    def at(k: np.ndarray) -> np.ndarray:
        return np.where(has, ranked[np.where(has, k, 0)] if len(ranked) else 0, 0)

    return (np.where(has, (at(first + (cnt - 1) // 2) + at(first + cnt // 2)) / 2, 0.0), at(first),
            at(first + cnt - 1))


@njit(cache=True, nogil=True)
def grouped_sorted(inv, m, values):
    """``values`` sorted by (group, value): ``values[np.lexsort((values, inv))]``, by a counting sort on
    the group (each value placed at once: no order of the rows is made) and an in-place sort of each group's
    values alone."""
    bounds = group_bounds(inv, m)
    nxt = bounds[:m].copy()
    out = np.empty(len(values), values.dtype)
    for i in range(len(inv)):
        g = inv[i]
        out[nxt[g]] = values[i]
        nxt[g] += 1
    for g in range(m):
        if bounds[g + 1] - bounds[g] > 1:
            out[bounds[g]:bounds[g + 1]].sort()
    return out


@plain_twin(grouped_sorted, NUMPY_TWIN)
def _grouped_sorted_np(inv, m, values):
    return values[np.lexsort((values, inv))]


@njit(cache=True, nogil=True)
def weighted_sums(index, weights, m, scale):
    """``np.bincount(index, weights=weights * scale, minlength=m)`` (``index`` below ``m``) without its
    event-sized copies (the products, and integer weights made float): each weight made float64 and scaled,
    then summed in the events' order, as bincount sums them, so the sums are the same to the last bit."""
    out = np.zeros(m)
    for i in range(len(index)):
        out[index[i]] += np.float64(weights[i]) * scale
    return out


@plain_twin(weighted_sums, NUMPY_TWIN)
def _weighted_sums_np(index, weights, m, scale):
    return np.bincount(index, weights=weights * scale if scale != 1.0 else weights, minlength=m)


@njit(cache=True, nogil=True)
def group_extent(inv, m, start, end):
    """Per group, the smallest ``start`` and the largest ``end`` of its rows (+inf / -inf when empty)."""
    lo = np.full(m, np.inf)
    hi = np.full(m, -np.inf)
    for i in range(len(inv)):
        g = inv[i]
        if start[i] < lo[g]:
            lo[g] = start[i]
        if end[i] > hi[g]:
            hi[g] = end[i]
    return lo, hi


@plain_twin(group_extent, NUMPY_TWIN)
def _group_extent_np(inv, m, start, end):
    lo = np.full(m, np.inf)
    hi = np.full(m, -np.inf)
    np.minimum.at(lo, inv, start)
    np.maximum.at(hi, inv, end)
    return lo, hi


@njit(cache=True, nogil=True)
def timeline_order(inv, m, start, dur):
    """``np.lexsort((-dur, start, inv))`` for rows already sorted by ``start``: grouped by ``inv``, in time
    order, and of rows that start together the longest first (a parent before the events nested in it)."""
    order = grouped_order(inv, m)
    n = len(order)
    a = 0
    while a < n:
        b = a + 1
        while b < n and inv[order[b]] == inv[order[a]] and start[order[b]] == start[order[a]]:
            b += 1
        for k in range(a + 1, b):  # insertion sort of the tie, longest first, stable
            i = order[k]
            j = k - 1
            while j >= a and dur[order[j]] < dur[i]:
                order[j + 1] = order[j]
                j -= 1
            order[j + 1] = i
        a = b
    return order


@plain_twin(timeline_order, NUMPY_TWIN)
def _timeline_order_np(inv, m, start, dur):
    return np.lexsort((-dur, start, inv))


def is_sorted(a: np.ndarray) -> bool:
    return bool(len(a) < 2 or (a[1:] >= a[:-1]).all())
