"""Cache writes off the report's path. A decoded 1 GB trace's cache entry takes about half a second to
checksum and write, and the analysis' memo entries a little more: both go to one writer thread while the
analysis goes on (checksums and file writes release the GIL, so on two cores they cost the report
almost nothing).

The thread is not a daemon: the interpreter finishes the queued writes before it exits (as it does for
any ``concurrent.futures`` worker), so a report never leaves a half-written entry behind on a normal
exit; every entry is written to a temporary file and renamed, so a kill leaves no damaged one either.
:func:`flush` waits for the writes queued so far (for a caller that reads the cache back at once).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pending: list[tuple[object, Future]] = []


def submit(fn: Callable[[], object], tag: object = None) -> None:
    """Run ``fn()`` on the writer thread (in submission order); its errors are its own to swallow.
    ``tag`` names what it writes, for :func:`flush`."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rooflens-cache")
        _pending[:] = [(t, f) for t, f in _pending if not f.done()]
        _pending.append((tag, _pool.submit(fn)))


def flush(tag: object = None) -> None:
    """Wait until every write submitted so far (of ``tag`` only, when given) is done."""
    with _lock:
        waiting = [f for t, f in _pending if tag is None or t == tag]
    for f in waiting:
        f.exception()  # waits; a failed write is simply not in the cache


def _forget() -> None:
    """In a child forked while writes were queued (a process pool's worker): the writer thread is not there, so
    neither are its writes (the parent finishes them); waiting for them would wait forever."""
    global _lock, _pool
    _lock = threading.Lock()  # another thread may have held it at the fork
    _pool = None
    _pending.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)
