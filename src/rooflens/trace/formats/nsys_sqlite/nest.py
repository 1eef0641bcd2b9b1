"""Ranges pushed and popped on threads (NVTX push/pop), and which one is open where: vectorised.

Push/pop ranges on one thread nest. Sorted by (thread, start, longest first), a range's depth is
the number of ranges of its thread started before it and still open at its start (those that
started earlier, less those that ended by then: one ``searchsorted`` over the thread's sorted ends),
and its parent is the latest earlier range of its thread one level up. The innermost range open at
time ``t`` on a thread is the last range of that thread started by ``t``, or the nearest of its
ancestors still open then: a walk up the parents, one vectorised step per level, for every query at
once (a few steps: XLA nests module → op → NCCL call; PyTorch's aten ranges a dozen deep).
"""

from __future__ import annotations

import numpy as np

from rooflens.trace.events import unique_rows

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
        self.threads = np.unique(th[np.concatenate([[0], changes])] if n else th)
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
        first = np.searchsorted(self.t, np.arange(len(self.threads)))
        end_key = np.sort(self.t * self.span + (self.end - self.base), kind="stable")
        closed = np.searchsorted(end_key, self.key, side="right") - first[self.t]
        self.depth = np.maximum((np.arange(n) - first[self.t]) - closed, 0)  # ≥ 0 even where ranges overlap
        self.parent = self._parents(n)

    def _parents(self, n: int) -> np.ndarray:
        """The latest earlier range of the same thread one level up (-1 at the top)."""
        if not n:
            return np.zeros(0, np.int64)
        if int(self.depth.max()) <= LEVEL_BY_LEVEL:
            return self._parents_by_level(n)
        levels = int(self.depth.max()) + 2
        group = self.t * levels + (self.depth + 1)  # (thread, depth), depth -1 never occurs
        key = group * n + np.arange(n)
        ranked = np.sort(key)
        want = (group - 1) * n + np.arange(n)  # the same thread, one level up, before this range
        at = np.searchsorted(ranked, want, side="left") - 1
        ok = (self.depth > 0) & (at >= 0)
        cand = ranked[np.clip(at, 0, None)]
        ok &= (cand // n) == (group - 1)
        return np.where(ok, cand % n, -1)

    def _parents_by_level(self, n: int) -> np.ndarray:
        """:meth:`_parents` one depth at a time, without a sort: the latest earlier range one level up is a
        running maximum of those ranges' indices (the same thread's, being sorted together, come last)."""
        parent = np.full(n, -1, np.int64)
        index = np.arange(n)
        for d in range(1, int(self.depth.max()) + 1):
            latest = np.maximum.accumulate(np.where(self.depth == d - 1, index, -1))
            at = np.flatnonzero(self.depth == d)  # never the first range: a range one level up came before
            up = latest[at - 1]
            parent[at] = np.where((up >= 0) & (self.t[np.clip(up, 0, None)] == self.t[at]), up, -1)
        return parent

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
