"""Ctrl-C for the ``rooflens`` command: remembered as well as raised.

Python raises ``KeyboardInterrupt`` wherever the main thread happens to be, and one raised inside a
garbage-collection callback (JAX registers one) is printed as "Exception ignored" and lost, so the
command would run on to the end and exit 0. The handler here also records the signal, and the
command ends with exit status 130 once it returns, interrupted either way.
"""

from __future__ import annotations

import signal
import threading


class Interrupts:
    """``with Interrupts() as seen:`` … ``seen.any``: whether SIGINT arrived while inside."""

    def __init__(self) -> None:
        self.count = 0
        self._old = None

    @property
    def any(self) -> bool:
        return self.count > 0

    def _on_sigint(self, signum, frame) -> None:
        self.count += 1
        raise KeyboardInterrupt

    def __enter__(self) -> Interrupts:
        # only where Python's own handler is in place (not when the shell made us ignore SIGINT)
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._old = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, *exc) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
            self._old = None
