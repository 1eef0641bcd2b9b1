"""Compiled helpers every format's decoder shares: numba's start-up, and interning of strings.

Decoders walk bytes in numba and turn each string they meet (an op name, a program) into a dense
code without making a Python object: a 64-bit hash of the bytes, an open-addressing table, and a
byte-for-byte check on every hit, so two strings never share a code.
"""

from __future__ import annotations

import sys

import numpy as np
from numba import njit


def numba_ready() -> None:
    """Load numba's CPU target before this process's first compiled call, without scipy.linalg.

    The first call of any ``njit`` function (compiled or loaded from the cache) loads numba's
    numpy support, whose ``arraymath`` module probes for BLAS once, at import, by importing
    ``scipy.linalg``: about 0.5 s of a 4 s report on a 2-core machine. No walk here calls BLAS, so
    the probe is answered "none" (numba then uses its own loop for ``np.dot`` of vectors; nothing
    else changes, and ``numba.np.linalg`` keeps its own check for the functions that need BLAS).
    Where scipy.linalg or that module is already imported, there is nothing to save. Idempotent."""
    from numba.core.registry import cpu_target

    if "numba.np.arraymath" in sys.modules or "scipy.linalg" in sys.modules:
        cpu_target.target_context.refresh()
        return
    import numba.np.linalg as linalg

    probe = linalg.ensure_blas

    def no_probe() -> None:
        raise ImportError("rooflens: BLAS not probed")

    linalg.ensure_blas = no_probe  # arraymath binds it by name and calls it once, at its import
    try:
        cpu_target.target_context.refresh()
    finally:
        linalg.ensure_blas = probe


@njit(cache=True)
def word(buf, i, e):
    """Up to 8 bytes of ``buf[i:e]`` as one little-endian int64."""
    w = np.int64(0)
    k = min(8, e - i)
    for q in range(k):
        w |= np.int64(buf[i + q]) << (8 * q)
    return w


@njit(cache=True)
def hash_bytes(buf, s, e):
    """A 64-bit hash of ``buf[s:e]``, eight bytes a step (never 0: 0 marks an empty slot)."""
    h = np.int64(e - s) * np.int64(-7046029254386353131)
    i = s
    while i < e:
        h = (h ^ word(buf, i, e)) * np.int64(-4658895280553007687)
        h ^= (h >> 29) & np.int64(0x7FFFFFFFF)
        i += 8
    return h if h != 0 else np.int64(1)


@njit(cache=True)
def same_bytes(buf, s1, e1, s2, e2):
    if e1 - s1 != e2 - s2:
        return False
    i = 0
    n = e1 - s1
    while i < n:
        if word(buf, s1 + i, e1) != word(buf, s2 + i, e2):
            return False
        i += 8
    return True


@njit(cache=True)
def intern(buf, s, e, tkeys, tcodes, strs, nstr):
    """The dense code of the bytes ``buf[s:e]`` (new strings get the next code; their position
    goes to ``strs``). Hits are checked byte for byte, so two strings never share a code. -1 when
    the table is full (the caller grows it and resumes)."""
    h = hash_bytes(buf, s, e)
    mask = tkeys.shape[0] - 1
    slot = h & mask
    while True:
        k = tkeys[slot]
        if k == 0:
            break
        if k == h:
            c = tcodes[slot]
            if same_bytes(buf, s, e, strs[c, 0], strs[c, 1]):
                return c
        slot = (slot + 1) & mask
    c = nstr[0]
    if c >= strs.shape[0] or 2 * (c + 1) > tkeys.shape[0]:
        return -1
    tkeys[slot] = h
    tcodes[slot] = c
    strs[c, 0], strs[c, 1] = s, e
    nstr[0] = c + 1
    return c


@njit(cache=True)
def rehash(tkeys, tcodes, new_size):
    """The interning table, grown to ``new_size`` slots (a power of two)."""
    nk = np.zeros(new_size, np.int64)
    nc = np.zeros(new_size, np.int32)
    mask = new_size - 1
    for i in range(tkeys.shape[0]):
        h = tkeys[i]
        if h == 0:
            continue
        slot = h & mask
        while nk[slot] != 0:
            slot = (slot + 1) & mask
        nk[slot] = h
        nc[slot] = tcodes[i]
    return nk, nc


@njit(cache=True, nogil=True)
def factorize(key, codes, first, size):
    """Each key's code (first-seen order) into ``codes``, distinct values into ``first``; -1 when more
    than ``size // 2`` distinct values (call again with a larger ``size``)."""
    table = np.full(size, -1, np.int64)
    mask = size - 1
    m = 0
    for i in range(len(key)):
        v = key[i]
        h = (v * np.int64(-7046029254386353131)) & mask  # Fibonacci hashing of the key's bits
        while True:
            c = table[h]
            if c < 0:
                if 2 * (m + 1) > size:
                    return -1
                table[h] = m
                first[m] = v
                codes[i] = m
                m += 1
                break
            if first[c] == v:
                codes[i] = c
                break
            h = (h + 1) & mask
    return m
