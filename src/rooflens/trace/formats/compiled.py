"""Compiled helpers every format's decoder shares: numba's start-up, and interning of strings.

Decoders walk bytes in numba and turn each string they meet (an op name, a program) into a dense
code without making a Python object: a 64-bit hash of the bytes, an open-addressing table, and a
byte-for-byte check on every hit, so two strings never share a code.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

import numpy as np

#: kernels declared so far (compiled all together, on the first call that needs numba)
_KERNELS: list[Kernel] = []
_compiled = False
_compiling = threading.Lock()  # threads of one process (the TensorBoard plugin's) may all ask at once


class Kernel:
    """A function numba compiles the first time a call needs it: numba (about a second to import and
    load on a 2-core machine) is imported then, not when the module declaring the kernel is.

    A kernel may have a *plain* twin, the same function written for CPython: while numba is not
    loaded in this process, calls whose first argument holds at most ``plain_max`` items (a small
    file's bytes, a small trace's events) run the twin, which finishes before numba would have
    started. Once numba is loaded, every call is compiled."""

    def __init__(self, fn: Callable, options: dict):
        self.py_func = fn
        self.options = options
        self.dispatcher = None
        self.plain: Callable | None = None
        self.plain_max = 0
        self.__name__, self.__doc__, self.__wrapped__ = fn.__name__, fn.__doc__, fn

    def __call__(self, *args, **kwargs):
        if self.dispatcher is None:
            if self.plain is not None and args and len(args[0]) <= self.plain_max:
                return self.plain(*args, **kwargs)
            compile_kernels()
        return self.dispatcher(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<kernel {self.py_func.__module__}.{self.__name__}>"


def njit(fn: Callable | None = None, **options):
    """``numba.njit`` declared now, compiled (or loaded from numba's cache) on first use: see :class:`Kernel`."""
    def declare(f: Callable):
        k = Kernel(f, options)
        _KERNELS.append(k)
        if _compiled:  # numba is loaded: the module's name is bound to the dispatcher itself, so a kernel declared
            compile_kernels()  # earlier that calls this one (by that name) finds a dispatcher when numba compiles it
            return k.dispatcher
        return k

    return declare(fn) if fn is not None else declare


def loaded() -> bool:
    """Whether numba is loaded in this process (every kernel compiled from then on: plain twins are for before)."""
    return _compiled


def plain_twin(kernel: Kernel, max_items: int) -> Callable[[Callable], Callable]:
    """Declare the decorated function the plain-Python twin of ``kernel`` (same arguments, same results),
    run instead of it for first arguments of at most ``max_items`` items while numba is not loaded."""
    def register(fn: Callable) -> Callable:
        # a module imported once numba is loaded finds its kernel's name already bound to the dispatcher: the
        # twin still belongs to the kernel that dispatcher is
        k = kernel if isinstance(kernel, Kernel) else next((d for d in _KERNELS if d.dispatcher is kernel), None)
        if k is None:
            raise TypeError(f"{fn.__name__} is declared the twin of {kernel!r}, which is no kernel")
        k.plain, k.plain_max = fn, max_items
        return fn

    return register


def kernels() -> dict[str, Kernel]:
    """Every kernel declared so far by ``module.name`` (a test hook: each one's plain twin, ``.plain``, is
    checked against its compiled ``.dispatcher`` on real inputs in tests/test_twins.py)."""
    return {f"{k.py_func.__module__}.{k.__name__}": k for k in _KERNELS}


def compile_kernels() -> None:
    """Import numba and make every declared kernel a numba dispatcher (compiled or loaded from numba's
    cache on its first call, as ``numba.njit`` does). A kernel calls others by their module-level names,
    and numba resolves those when it compiles: each such name is rebound to its dispatcher. Idempotent."""
    global _compiled
    import numba

    with _compiling:
        if not _compiled:
            numba_ready()
        for k in _KERNELS:
            if k.dispatcher is None:
                k.dispatcher = numba.njit(**k.options)(k.py_func)
        for k in _KERNELS:
            names = k.py_func.__globals__
            for name, v in list(names.items()):
                if isinstance(v, Kernel) and v.dispatcher is not None:
                    names[name] = v.dispatcher
        _compiled = True


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


def _wrap64(x: int) -> int:
    x &= (1 << 64) - 1
    return x - (1 << 64) if x >> 63 else x


def plain_hash(b: bytes) -> int:
    """:func:`hash_bytes` of ``b``, computed by CPython (the same 64-bit value)."""
    h = _wrap64(len(b) * -7046029254386353131)
    for i in range(0, len(b), 8):
        chunk = b[i:i + 8]
        w = int.from_bytes(chunk, "little", signed=len(chunk) == 8)
        h = _wrap64((h ^ w) * -4658895280553007687)
        h ^= (h >> 29) & 0x7FFFFFFFF
    return h if h != 0 else 1


class PlainInterner:
    """:func:`intern` for CPython: the same codes, and the same table (``tkeys``, ``tcodes``, ``strs``,
    ``nstr``), so compiled and plain calls may take turns on one table. Known strings are found in a dict."""

    def __init__(self, b: bytes, tkeys, tcodes, strs, nstr):
        self.b, self.tkeys, self.tcodes, self.strs, self.nstr = b, tkeys, tcodes, strs, nstr
        self.codes = {b[s:e]: c for c, (s, e) in enumerate(strs[:int(nstr[0])].tolist())}

    def code(self, s: int, e: int) -> int:
        """The dense code of ``b[s:e]``; -1 when the table is full."""
        key = self.b[s:e]
        c = self.codes.get(key)
        if c is not None:
            return c
        h = plain_hash(key)
        mask = len(self.tkeys) - 1
        slot = h & mask
        while self.tkeys[slot] != 0:
            slot = (slot + 1) & mask
        c = int(self.nstr[0])
        if c >= len(self.strs) or 2 * (c + 1) > len(self.tkeys):
            return -1
        self.tkeys[slot], self.tcodes[slot] = h, c
        self.strs[c, 0], self.strs[c, 1] = s, e
        self.nstr[0] = c + 1
        self.codes[key] = c
        return c


@plain_twin(rehash, 1 << 22)
def plain_rehash(tkeys, tcodes, new_size):
    nk = np.zeros(new_size, np.int64)
    nc = np.zeros(new_size, np.int32)
    mask = new_size - 1
    for h, c in zip(tkeys.tolist(), tcodes.tolist()):
        if h == 0:
            continue
        slot = h & mask
        while nk[slot] != 0:
            slot = (slot + 1) & mask
        nk[slot], nc[slot] = h, c
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
