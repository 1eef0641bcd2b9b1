"""A whole-run trace that cannot take the machine down: the process's memory watched while the trace is open.

JAX's profiler keeps every event in memory until the trace stops (a 28.8 s PureJaxRL run traced whole held
5.3 M CPU op events: 180 s and 15 GB), and writing them out takes two to five times as much again: measured on
a CPU loop of small jitted calls (tests/run_scripts/runaway_trace.py), 536 MB of growth while tracing peaked at
1.53 GB during ``stop_trace`` (2.85×), 30-52 MB at 2.1-4.2× their growth, and (a fifth of a 300 MB limit) 309 MB
in all, past the limit. So ``rooflens run`` without a window watches the process's resident memory
(``/proc/self/statm``; no psutil) from the moment the trace starts, and once it has grown by a sixth of
``--max-trace-memory`` (the rest is for the write: the whole capture stays within the limit) stops the
trace: what was captured is written, the script runs on untraced, and the run's output, its ``rooflens.json``
(``trace_stopped``) and the report say so, with the way out (a window: ``--steps`` or ``--duration``).

The default limit is half of the machine's memory (or of the cgroup's limit, where that is smaller). Standard
library only: the launcher (:mod:`rooflens.capture.launch`) loads it by path before the script runs.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time

if __package__:
    from rooflens import units
else:  # loaded by path, after the launcher loaded rooflens/units.py the same way (its ``_sibling``)
    units = sys.modules["_rooflens_units"]

#: the trace's own growth may use this share of the limit; writing it needs 2-5 times that again (see above)
TRACE_SHARE = 1 / 6
INTERVAL_S = 0.05  # how often the memory is read (~10 µs a read): 50 ms of a fast-growing trace is a few MB
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12,
          "tb": 10**12, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def rss_bytes() -> int:
    """This process's resident memory, bytes (0 where ``/proc`` cannot say)."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def machine_memory_bytes() -> int:
    """The memory this process may use: the machine's physical memory, or its cgroup's limit where smaller."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as fh:
                limit = int(fh.read().strip())
        except (OSError, ValueError):  # "max", or no such file: no cgroup limit
            continue
        if 0 < limit < total:
            total = limit
    return total


def default_limit_bytes() -> int:
    return machine_memory_bytes() // 2


def parse_size(text: str) -> int:
    """``4GB``, ``300MB``, ``1.5G``, ``512MiB``, ``1000000`` → bytes (decimal units, or binary with ``i``);
    ValueError with a sentence for anything else."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _UNITS:
        raise ValueError(f"{text!r} is not a size: give a number with a unit, e.g. 4GB, 300MB or 512MiB.")
    size = int(float(m.group(1)) * _UNITS[unit])
    if size <= 0:
        raise ValueError(f"{text!r}: the trace's memory limit must be more than 0 bytes.")
    return size


class Watch:
    """Reads the process's memory every :data:`INTERVAL_S` on a daemon thread from its creation (the trace's
    start); once it has grown by ``limit_bytes × TRACE_SHARE``, records why (:attr:`stopped`) and calls
    ``on_limit()`` once, on that thread."""

    def __init__(self, limit_bytes: int, on_limit, interval_s: float = INTERVAL_S) -> None:
        self.limit_bytes = int(limit_bytes)
        self.budget_bytes = int(limit_bytes * TRACE_SHARE)
        self.start_rss_bytes = rss_bytes()
        self.started = time.monotonic()
        self.stopped: dict | None = None
        self._on_limit = on_limit
        self._interval_s = interval_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rooflens-memwatch", daemon=True)
        if self.start_rss_bytes:  # no /proc: nothing to watch
            self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(self._interval_s):
            now = rss_bytes()
            if now - self.start_rss_bytes >= self.budget_bytes:
                self.stopped = {"reason": "memory", "limit_bytes": self.limit_bytes,
                                "trace_budget_bytes": self.budget_bytes, "rss_at_start_bytes": self.start_rss_bytes,
                                "rss_at_stop_bytes": now, "after_s": round(time.monotonic() - self.started, 3),
                                "at_unix_s": time.time()}
                self.stopped["said"] = sentence(self.stopped)
                self._done.set()
                self._on_limit()
                return

    def close(self) -> None:
        """Stop watching (the trace has stopped): the thread ends within one interval."""
        self._done.set()


def sentence(stopped: dict) -> str:
    """Why the trace stopped early, and what to do instead: for the run's output, rooflens.json and the report."""
    grew = stopped["rss_at_stop_bytes"] - stopped["rss_at_start_bytes"]
    return (f"the trace was stopped early, {stopped['after_s']:.3g} s after it started: the process's memory grew by "
            f"{units.fmt_bytes(grew)} while tracing, past a sixth of --max-trace-memory "
            f"{units.fmt_bytes(stopped['limit_bytes'])} "
            "(writing a trace takes up to five times its events' memory again); the profile holds what ran until "
            "then, the rest of the run was not traced. To profile the steady state, trace a window: rooflens run "
            "--steps START:STOP, or --delay SECONDS --duration SECONDS")
