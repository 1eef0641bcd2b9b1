"""The trace formats rooflens reads, as data: one row per format, asked by discovery and the cache.

A row names the format, the file-name suffixes it owns, an optional probe of the content (where a
suffix is not enough: a ``.zip`` is an nsys-jax archive only when it holds the projected trace),
its preference when one host wrote several files (an XSpace over its own Chrome export), and its
reader, ``path → RawTrace``, imported only when a file of that format is read. Adding a format is
one sub-package beside ``xspace``, ``chrome`` and ``nsys`` and one row in ``FORMATS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TraceFormat:
    name: str
    suffixes: tuple[str, ...]  # names of this format in a run directory; a file's host is its name without one
    read: Callable  # (Path, progress) -> RawTrace
    preference: int = 0  # lower wins when one host wrote files of several formats
    probe: Callable[[str], bool] | None = None  # a content check, when the suffix alone does not decide
    directory: bool = False  # an extracted archive: a directory is one host's trace
    named_suffixes: tuple[str, ...] = ()  # more names accepted when the user names the file itself

    def owns_name(self, name: str, named: bool = False) -> bool:
        return name.endswith(self.suffixes + (self.named_suffixes if named else ()))

    def host_of(self, name: str) -> str:
        for suffix in self.suffixes + self.named_suffixes:
            if name.endswith(suffix):
                return name[: -len(suffix)]
        return name

    def matches(self, path: str, is_dir: bool = False, named: bool = False) -> bool:
        """Whether ``path`` (a local path or a URL) is a trace of this format; ``named``: the user gave
        this very file (a ``*.json.gz`` of any name is then read as Chrome JSON)."""
        name = path.rstrip("/").rsplit("/", 1)[-1]
        if is_dir:
            return self.directory and self.probe is not None and self.probe(path)
        if not self.owns_name(name, named):
            return False
        return self.probe is None or self.probe(path)


def reader(module: str, function: str) -> Callable:
    """A reader imported on first use (numba, pyarrow and orjson load only for the files that need them)."""

    def read(path: Path, progress=None):
        import importlib

        return getattr(importlib.import_module(module), function)(path, progress)

    read.__qualname__ = f"{module}.{function}"
    return read
