"""The analysis's expensive aggregates, remembered: per-op stats and the execution index of a large
event table are computed once per table and served again from memory (the same report asks for the
execution index three times) and from the user cache directory (a second report of the same trace); so
are a large program's priced ops on a chip (:func:`rooflens.analysis.compare.price_programs`).

An entry's key is a digest of everything the aggregate is computed from (the event table's columns,
its vocabularies and the other inputs the caller names) and of the code that computes it, never of a
file name: a changed trace, changed HLO beside it or newer rooflens code computes again. Files are
``<key>.memo`` under ``analysis/`` in the user cache directory (``rooflens.userdirs``): a CRC-32 of the
payload, then the payload (a pickle of the stats dataclasses and numpy arrays, read back by an unpickler that rebuilds
nothing else; written whole under a temporary name and renamed); one whose CRC does not match, or
that names anything else, is never used. Only tables of at least :data:`DISK_MIN_EVENTS` events go to disk (a
small one is computed faster than read); ``ROOFLENS_NO_CACHE=1`` keeps everything off the disk; past
:data:`DISK_MAX_FILES` entries the least recently used go.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import os
import pickle
import struct
import tempfile
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import numpy as np

from rooflens.trace import background
from rooflens.userdirs import cache_dir

#: from here on an aggregate goes to disk: computing the stats of 100 K events takes 0.1-0.3 s, and past the plain
#: twins' sizes numba's load (~0.7 s on a 2-core machine); reading them back takes milliseconds. At 500 K, the
#: 423 K GPU ops of a 2.4 M-row Nsight export were computed again by every report (its cached report 2.2 s)
DISK_MIN_EVENTS = 100_000
DISK_MAX_FILES = 64
MEMORY_ENTRIES = 8
#: the modules whose code computes what is remembered
_CODE = ("memo.py", "stats.py", "warmup.py", "groupby.py", "events.py", "profile.py", "dispatch.py", "idle.py")
_HEADER = struct.Struct("<I")
_memory: OrderedDict[str, object] = OrderedDict()
#: the columns of an event table its digest covers (with its vocabularies and, unless asked not to, its steps)
DIGESTED_COLUMNS = ("host", "device", "line", "name", "program", "start_ps", "dur_ps")
_CRCS = "_rooflens_column_crcs"


def code_digest() -> str:
    """A digest of the code that computes every entry (:data:`_CODE`)."""
    return sources_digest(*(f"trace/{name}" for name in _CODE))


@functools.cache
def sources_digest(*parts: str) -> str:
    """A digest of rooflens's sources at ``parts``, relative to the package: files, or packages (``"cost"``,
    ``"hlo"``: every module below them), for what their code computes."""
    h = hashlib.sha1()
    root = Path(__file__).resolve().parents[1]
    for part in parts:
        at = root / part
        for path in sorted(at.rglob("*.py")) if at.is_dir() else [at]:
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def table_digest(t, steps: bool = True) -> str:
    """A digest of an event table's content: its columns and vocabularies (a table changed in place,
    e.g. its steps assigned, digests differently; ``steps=False``: not its steps, for what does not depend on
    them, such as the executions). Only the steps of a table are ever changed in place: the digest of the
    rest is made once per table."""
    rest = t.__dict__.get("_rooflens_digest")
    if rest is None:
        h = hashlib.sha1(str(len(t)).encode())
        known = t.__dict__.get(_CRCS) or {}
        for name in DIGESTED_COLUMNS:
            col = getattr(t, name)
            crc = known.get(name)
            if crc is None:
                crc = zlib.crc32(np.ascontiguousarray(col).view(np.uint8))
            h.update(struct.pack("<Iq", crc, col.dtype.itemsize))
        h.update(repr((t.hosts, t.lines, t.names, t.programs, t.origin_ns)).encode())
        rest = t.__dict__["_rooflens_digest"] = h.hexdigest()
    if not steps:
        return rest
    step = np.ascontiguousarray(t.step)
    return hashlib.sha1((rest + str(zlib.crc32(step.view(np.uint8))) + str(step.dtype.itemsize)).encode()).hexdigest()


def known_crcs(t, crcs: dict[str, int]) -> None:
    """Tell :func:`table_digest` the CRC-32 of some of ``t``'s columns (by name), computed already over the very
    bytes the table holds (the trace cache checks its columns on reading): they are not computed again."""
    t.__dict__[_CRCS] = {c: int(v) for c, v in crcs.items() if c in DIGESTED_COLUMNS}


def digest_of(*parts) -> str:
    """A digest of plain Python values (strings, numbers, lists, dicts): their ``repr``."""
    return hashlib.sha1(repr(parts).encode()).hexdigest()


def remembered(kind: str, key_parts: tuple, n_events: int, compute: Callable[[], object], in_memory: bool = False,
               disk_min: int | None = None):
    """``compute()``, or what it gave before for the same ``kind`` and ``key_parts``. ``in_memory``: also kept
    in this process, the same object handed to every caller (so only for values no caller changes, such as
    read-only arrays). On disk from ``disk_min`` (default :data:`DISK_MIN_EVENTS`) events, or whatever ``n_events``
    counts, on."""
    key = _key(kind, key_parts)
    if in_memory and key in _memory:
        _memory.move_to_end(key)
        return _memory[key]
    least = DISK_MIN_EVENTS if disk_min is None else disk_min
    disk = n_events >= least and os.environ.get("ROOFLENS_NO_CACHE") != "1"
    if disk:
        background.flush(key)
    value = _load(key) if disk else None
    if value is None:
        value = compute()
        if disk:
            _save(key, value)
    if isinstance(value, np.ndarray):
        value.setflags(write=False)  # handed to several callers: none may change it
    if in_memory:
        _memory[key] = value
        while len(_memory) > MEMORY_ENTRIES:
            _memory.popitem(last=False)
    return value


def held(kind: str, key_parts: tuple):
    """What :func:`remembered` keeps in this process's memory for ``kind`` and ``key_parts`` (None: nothing)."""
    return _memory.get(_key(kind, key_parts))


def _key(kind: str, key_parts: tuple) -> str:
    return hashlib.sha1(repr((code_digest(), kind, key_parts)).encode()).hexdigest()[:32]


def memo_dir() -> Path:
    return cache_dir() / "analysis"


def _load(key: str):
    path = memo_dir() / f"{key}.memo"
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if len(data) < _HEADER.size or _HEADER.unpack_from(data)[0] != zlib.crc32(memoryview(data)[_HEADER.size:]):
        return None  # damaged: computed again
    try:
        value = _Unpickler(io.BytesIO(memoryview(data)[_HEADER.size:])).load()
    except Exception:  # noqa: BLE001 - an entry from other code or damaged past its CRC: compute again
        return None
    now = time.time_ns()
    with contextlib.suppress(OSError):
        os.utime(path, ns=(now, now))
    return value


class _Unpickler(pickle.Unpickler):
    """Only what an entry holds is rebuilt: the stats dataclasses and numpy arrays, never any other
    callable (a cache file is data, even if someone else wrote it)."""

    _NUMPY = {"_reconstruct", "ndarray", "dtype", "_frombuffer", "scalar"}

    def find_class(self, module: str, name: str):
        if module in ("rooflens.trace.stats", "rooflens.trace.steps", "rooflens.trace.dispatch",
                      "rooflens.cost.model") or (
                module.split(".")[0] == "numpy" and name in self._NUMPY):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a memo entry")


def _save(key: str, value) -> None:
    """Pickled now (the value is the caller's from here on), written on the writer thread."""
    try:
        payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        return
    background.submit(lambda: _write(key, payload), tag=key)


def _write(key: str, payload: bytes) -> None:
    try:
        d = memo_dir()
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=".memo")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(_HEADER.pack(zlib.crc32(payload)))
                fh.write(payload)
            os.replace(tmp, d / f"{key}.memo")
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        _evict(d)
    except OSError:
        return


def _evict(d: Path) -> None:
    """Keep the :data:`DISK_MAX_FILES` most recently used entries."""
    try:
        entries = sorted(d.glob("*.memo"), key=lambda p: p.stat().st_mtime_ns)
    except OSError:
        return
    for p in entries[:max(0, len(entries) - DISK_MAX_FILES)]:
        with contextlib.suppress(OSError):
            p.unlink()
