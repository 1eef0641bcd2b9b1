"""A progress bar on stderr for ingests longer than about a second (stdout stays pure for --json)."""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

SHOW_AFTER_S = 1.0


class IngestProgress:
    """Bytes read over all files; the bar appears only once the read has taken ``SHOW_AFTER_S``."""

    def __init__(self, files: list[Path], enabled: bool) -> None:
        sizes = []
        for f in files:
            try:
                sizes.append(f.stat().st_size)
            except OSError:
                sizes.append(0)
        self.sizes = sizes
        self.total = max(sum(sizes), 1)
        self.base = 0
        self.enabled = enabled
        self.t0 = time.monotonic()
        self.bar = None
        self.task = None

    def for_file(self, index: int):
        """A ``progress(done, total)`` callback for the ``index``-th file."""
        self.base = sum(self.sizes[:index])
        size = self.sizes[index] if index < len(self.sizes) else 0

        def update(done: int, total: int) -> None:
            self.update(self.base + (done * size // total if total else 0))

        return update

    def update(self, done_bytes: int) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            if time.monotonic() - self.t0 < SHOW_AFTER_S:
                return
            from rich.console import Console
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

            console = Console(stderr=True)
            # a terminal's bar disappears when done; elsewhere (a log) its final line stays
            self.bar = Progress(TextColumn("reading the trace"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                                console=console, transient=console.is_terminal)
            self.bar.start()
            self.task = self.bar.add_task("read", total=self.total)
        self.bar.update(self.task, completed=min(done_bytes, self.total))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=self.total)
            self.bar.stop()


@contextmanager
def ingest_progress(files: list[Path], enabled: bool | None = None):
    """``enabled`` None: on when stderr is a terminal, or when ``ROOFLENS_PROGRESS=1``."""
    if enabled is None:
        enabled = os.environ.get("ROOFLENS_PROGRESS") == "1" or sys.stderr.isatty()
    p = IngestProgress(files, enabled)
    try:
        yield p
    finally:
        p.close()
