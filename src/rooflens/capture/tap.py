"""stderr, tapped for ``rooflens run``: transfer-guard lines out, everything else through, as it comes.

Standard library only: :mod:`rooflens.capture.launch` loads this file by path in the launched
interpreter (see its ``_sibling``). JAX logs ``jax.transfer_guard("log")`` lines from C++ to file
descriptor 2; the tap puts a pipe there, hands each transfer line (with when it was written) to a
callback, and passes every other byte on to the real stderr.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import time
from collections.abc import Callable

if __package__:
    from rooflens.capture import common
else:  # loaded by path, after the launcher loaded common the same way (its ``_sibling``)
    common = sys.modules["_rooflens_common"]

LOG_PREFIX = re.compile(rb"^[IWEF]\d{4} ")
_LOG_TIME = re.compile(r"^[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6}) ")


def logged_at(line: str, read_s: float) -> float:
    """When a C++ log line was written (its own local-time stamp, to the µs), or when it was read.

    The pipe is read in bursts (and late on a loaded machine), so a burst of lines would share
    one reading time; the stamp is used when it is within a minute of that time."""
    m = _LOG_TIME.match(line)
    if not m:
        return read_s
    month, day, hour, minute, second, us = map(int, m.groups())
    try:
        at = time.mktime((time.localtime(read_s).tm_year, month, day, hour, minute, second, 0, 0, -1)) + us * 1e-6
    except (OverflowError, ValueError):
        return read_s
    return at if abs(at - read_s) < 60 else read_s


class StderrTap:
    """fd 2 through a pipe; ``on_transfer(line, unix_s)`` for each transfer-guard line."""

    def __init__(self, on_transfer: Callable[[str, float], None]) -> None:
        self.on_transfer = on_transfer
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        self.saved = os.dup(2)
        r, w = os.pipe()
        os.dup2(w, 2)
        os.close(w)
        self.r = r
        self.pending = b""
        self.thread = threading.Thread(target=self._pump, name="rooflens-stderr", daemon=True)
        self.thread.start()

    def _emit(self, data: bytes) -> None:
        while data:
            try:
                n = os.write(self.saved, data)
            except InterruptedError:
                continue
            except OSError:
                return
            data = data[n:]

    def _take(self, final: bool = False) -> None:
        lines = self.pending.split(b"\n")
        self.pending = lines.pop()
        out = []
        for raw in lines:
            text = raw.decode("utf-8", "replace")
            line = common.transfer_line(text)
            if line:
                self.on_transfer(line, logged_at(text, time.time()))
            else:
                out.append(raw + b"\n")
        # a partial line is passed on at once (progress bars redraw with \r), unless it may be a
        # C++ log line still being written
        if self.pending and (final or not LOG_PREFIX.match(self.pending)):
            out.append(self.pending)
            self.pending = b""
        if out:
            self._emit(b"".join(out))

    def _pump(self) -> None:
        while True:
            try:
                chunk = os.read(self.r, 65536)
            except InterruptedError:
                continue
            except OSError:
                break
            if not chunk:
                break
            self.pending += chunk
            self._take()
        self._take(final=True)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os.dup2(self.saved, 2)  # the pipe's last writer (in this process) goes: the pump sees EOF
        self.thread.join(timeout=2.0)
        if self.thread.is_alive():  # a child process still holds the pipe: leave the pump to it
            return
        os.close(self.r)
        os.close(self.saved)
