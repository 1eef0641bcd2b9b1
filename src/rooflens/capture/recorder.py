"""What the seeds call performance killers, recorded while a trace window is open.

* compilations inside the window (shape or dtype churn): every backend compile JAX reports
  through ``jax.monitoring``, with its duration and the user's line that triggered it;
* the reason JAX gives for each cache miss (``jax_explain_cache_misses``, switched on only for
  the window and restored after);
* implicit host↔device transfers (``jax.transfer_guard("log")`` for the window: a NumPy array
  passed to a jitted function, ``float(x)`` on a device array, …). JAX logs them from C++ to
  the process's stderr, so stderr is diverted to a file for the window, the transfer lines are
  counted, and everything else is passed back to stderr unchanged.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import threading
from dataclasses import dataclass, field

from rooflens.capture.common import transfer_line, user_frame
from rooflens.trace.manifest import Compilation, InWindowRecord

_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_lock = threading.Lock()
_active: list[Recorder] = []
_installed = False


@dataclass
class Recorder:
    compilations: list[Compilation] = field(default_factory=list)
    cache_misses: list[str] = field(default_factory=list)
    transfers: list[str] = field(default_factory=list)  # "host-to-device transfer: aval=…" lines

    def record(self) -> InWindowRecord:
        """The manifest's in-window record of what was seen (compilations: duration and where)."""
        return InWindowRecord(compilations=list(self.compilations), cache_misses=list(self.cache_misses),
                              transfers=list(self.transfers))


def _on_duration(name: str, duration: float, **_) -> None:
    if name != _COMPILE_EVENT or not _active:
        return
    where = user_frame()
    for r in list(_active):
        r.compilations.append(Compilation(float(duration), where))


class _MissHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if "CACHE MISS" in msg:
            for r in list(_active):
                r.cache_misses.append(msg.strip())


_handler = _MissHandler(level=logging.WARNING)


def _install() -> None:
    global _installed
    if _installed:
        return
    import jax.monitoring

    jax.monitoring.register_event_duration_secs_listener(_on_duration)
    _installed = True


class recording:
    """``with recording() as rec:`` — compilations and cache-miss reasons while the block runs."""

    def __enter__(self) -> Recorder:
        import jax

        with _lock:
            _install()
            self.rec = Recorder()
            _active.append(self.rec)
            self.old = jax.config.jax_explain_cache_misses
            jax.config.update("jax_explain_cache_misses", True)
            logging.getLogger("jax").addHandler(_handler)
        self._divert = _StderrDiversion()
        self._guard = jax.transfer_guard("log")
        self._guard.__enter__()
        return self.rec

    def __exit__(self, *exc) -> None:
        import jax

        try:
            self._guard.__exit__(*exc)
        finally:
            self.rec.transfers.extend(self._divert.close())
        with _lock:
            _active.remove(self.rec)
            if not _active:
                logging.getLogger("jax").removeHandler(_handler)
            jax.config.update("jax_explain_cache_misses", self.old)


class _StderrDiversion:
    """Send fd 2 to a temporary file until close(); then replay it, minus transfer-guard lines."""

    def __init__(self) -> None:
        sys.stderr.flush()
        self.tmp = tempfile.TemporaryFile(mode="w+b")  # noqa: SIM115 (kept open until close())
        self.saved = os.dup(2)
        os.dup2(self.tmp.fileno(), 2)

    def close(self) -> list[str]:
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.tmp.seek(0)
        transfers, passthrough = [], []
        for raw in self.tmp.read().decode("utf-8", "replace").splitlines(keepends=True):
            line = transfer_line(raw)
            if line:
                transfers.append(line)
            else:
                passthrough.append(raw)
        self.tmp.close()
        if passthrough:
            sys.stderr.write("".join(passthrough))
            sys.stderr.flush()
        return transfers
