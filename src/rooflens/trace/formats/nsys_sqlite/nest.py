"""Ranges pushed and popped on threads (NVTX push/pop), and which one is open where: vectorised.

Push/pop ranges on one thread nest. Sorted by (thread, start, longest first), a range's depth is
the number of ranges of its thread started before it and still open at its start (those that
started earlier, less those that ended by then: one ``searchsorted`` over the thread's sorted ends),
and its parent is the latest earlier range of its thread one level up. The innermost range open at
time ``t`` on a thread is the last range of that thread started by ``t``, or the nearest of its
ancestors still open then: a walk up the parents, one vectorised step per level, for every query at
once (a few steps: XLA nests module → op → NCCL call; PyTorch's aten ranges a dozen deep).

Depths and parents are one compiled pass (a heap of the open ranges' ends per thread) once numba is
loaded, as it is for any export read from its pages; before that, their numpy twin, by the same definitions.
"""

from __future__ import annotations

import numpy as np

from rooflens.trace.events import unique_rows
from rooflens.trace.formats.compiled import njit, plain_twin
from rooflens.trace.groupby import NUMPY_TWIN, unique_values

_MAX_KEY = 1 << 62
#: nestings up to this deep are linked level by level (a pass over the ranges each); deeper ones by one sort
LEVEL_BY_LEVEL = 24


class Nest:
    """Ranges of several threads (``thread``: any integer id; ``start``/``end``: one clock), sorted and
    linked to their parents. Ranges that end before they start, or never, are left out."""

    def __init__(self, thread: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        keep = np.flatnonzero(end > start)
        n = len(keep)
        th = thread[keep]
        # a few threads, each range's found by a search: the distinct values are among those where the column changes
        changes = np.flatnonzero(th[1:] != th[:-1]) + 1
        self.threads = unique_values(th[np.concatenate([[0], changes])] if n else th)
        t = np.searchsorted(self.threads, th).astype(np.int64)
        s, e = start[keep], end[keep]
        self.base = int(s.min()) if n else 0
        self.span = (int(e.max()) - self.base + 2) if n else 1
        if len(self.threads) * self.span >= _MAX_KEY:
            raise ValueError("ranges span too long a time on too many threads to be keyed")
        key = t * self.span + (s - self.base)
        # by (thread, start), then longest first, then as given: an export's rows come mostly in time order, which a
        # stable sort (timsort) takes in about one pass; ranges of one thread starting together need the end too
        by = np.argsort(key, kind="stable")
        if n > 1 and (key[by][1:] == key[by][:-1]).any():
            by = np.lexsort((-e, key))
        order = keep[by]
        self.rows = order  # the caller's row of each sorted range
        self.t, self.start, self.end, self.key = t[by], s[by], e[by], key[by]  # key sorted
        self.depth, self.parent = links(self.t, self.start, self.end)

    def __len__(self) -> int:
        return len(self.rows)

    def innermost(self, thread: np.ndarray, t: np.ndarray) -> np.ndarray:
        """For each (thread, time): the sorted index of the innermost range open then on that thread
        (start ≤ t ≤ end), or -1."""
        out = np.full(len(t), -1, np.int64)
        if not len(self) or not len(t):
            return out
        code = np.searchsorted(self.threads, thread)
        known = (code < len(self.threads)) & (self.threads[np.clip(code, 0, len(self.threads) - 1)] == thread)
        rel = np.clip(t - self.base, -1, self.span - 1)
        p = np.searchsorted(self.key, np.where(known, code, 0) * self.span + rel, side="right") - 1
        pc = np.clip(p, 0, None)
        x = np.where(known & (p >= 0) & (self.t[pc] == code), p, -1)
        while True:  # up the parents while the range found had closed by t
            live = x >= 0
            closed = live & (self.end[np.where(live, x, 0)] < t)
            if not closed.any():
                return x
            x = np.where(closed, self.parent[np.where(closed, x, 0)], x)

    def paths(self, name: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each sorted range's path from the top (its ancestors' names, then its own: ``name`` is a code per
        sorted range) as a code, level by level: (path code per range, each path's parent path, its last name)."""
        n = len(self)
        code = np.full(n, -1, np.int64)
        parents, lasts = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
        total = 0
        for d in range(int(self.depth.max()) + 1 if n else 0):
            at = np.flatnonzero(self.depth == d)
            up = np.where(self.parent[at] >= 0, code[np.clip(self.parent[at], 0, None)], -1)
            pairs, inv = unique_rows(up, name[at].astype(np.int64))
            code[at] = total + inv
            parents.append(pairs[:, 0])
            lasts.append(pairs[:, 1])
            total += len(pairs)
        return code, np.concatenate(parents), np.concatenate(lasts)


@njit(cache=True, nogil=True)
def links(t, start, end):
    """Of ranges sorted by (thread ``t``, start, longest first): each one's depth (the ranges of its thread
    that started before it and are still open at its start, ending after it starts) and parent (the latest
    earlier range of its thread one depth up, -1 where none). One pass: a min-heap of the earlier ranges' ends
    per thread, those ending by a range's start taken off before it is placed."""
    n = len(t)
    depth = np.zeros(n, np.int64)
    parent = np.full(n, -1, np.int64)
    heap = np.empty(n, end.dtype)
    latest = np.full(n + 1, -1, np.int64)  # per depth: the latest range of this thread at that depth
    size = 0
    deepest = -1
    for i in range(n):
        if i > 0 and t[i] != t[i - 1]:
            size = 0
            for d in range(deepest + 1):
                latest[d] = -1
            deepest = -1
        while size > 0 and heap[0] <= start[i]:  # pop the earliest end
            size -= 1
            last = heap[size]
            k = 0
            while True:
                c = 2 * k + 1
                if c >= size:
                    break
                if c + 1 < size and heap[c + 1] < heap[c]:
                    c += 1
                if heap[c] >= last:
                    break
                heap[k] = heap[c]
                k = c
            if size > 0:
                heap[k] = last
        d = size
        depth[i] = d
        if d > 0:
            parent[i] = latest[d - 1]
        latest[d] = i
        if d > deepest:
            deepest = d
        k = size  # push this range's end
        size += 1
        while k > 0:
            up = (k - 1) // 2
            if heap[up] <= end[i]:
                break
            heap[k] = heap[up]
            k = up
        heap[k] = end[i]
    return depth, parent


@plain_twin(links, NUMPY_TWIN)
def _links_np(t, start, end):
    n = len(t)
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    span = int(end.max()) - int(start.min()) + 2
    base = int(start.min())
    key = t * span + (start - base)
    first = np.searchsorted(t, t)  # each range's thread's first row
    end_key = np.sort(t * span + (end - base), kind="stable")
    closed = np.searchsorted(end_key, key, side="right") - first
    depth = np.maximum((np.arange(n) - first) - closed, 0)
    return depth, _parents_np(t, depth)


def _parents_np(t: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """The latest earlier range of the same thread one depth up (-1 at the top): one depth at a time (a running
    maximum of the indices one depth up; the same thread's, being sorted together, come last), or one sort."""
    n = len(t)
    if int(depth.max()) > LEVEL_BY_LEVEL:
        levels = int(depth.max()) + 2
        group = t * levels + (depth + 1)  # (thread, depth), depth -1 never occurs
        ranked = np.sort(group * n + np.arange(n))
        want = (group - 1) * n + np.arange(n)  # the same thread, one level up, before this range
        at = np.searchsorted(ranked, want, side="left") - 1
        cand = ranked[np.clip(at, 0, None)]
        return np.where((depth > 0) & (at >= 0) & ((cand // n) == (group - 1)), cand % n, -1)
    parent = np.full(n, -1, np.int64)
    index = np.arange(n)
    for d in range(1, int(depth.max()) + 1):
        latest = np.maximum.accumulate(np.where(depth == d - 1, index, -1))
        at = np.flatnonzero(depth == d)  # never the first range: a range one level up came before
        up = latest[at - 1]
        parent[at] = np.where((up >= 0) & (t[np.clip(up, 0, None)] == t[at]), up, -1)
    return parent
