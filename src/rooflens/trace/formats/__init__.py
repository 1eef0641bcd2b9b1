"""Trace formats: each a sub-package that turns one host's file into a :class:`~.raw.RawTrace`.

``FORMATS`` is the registry (:mod:`.registry`): discovery asks it which files are traces and whose
host they are, the cache asks it which reader decodes a file. :mod:`.raw` holds what every JAX
trace reader shares (the RawTrace, program names, XProf's device timing, steps); :mod:`.compiled`
the numba helpers (start-up, string interning); :mod:`.protowire` the plain-Python protobuf reader.
"""

from __future__ import annotations

from rooflens.trace.formats import chrome, nsys, nsys_sqlite, xspace
from rooflens.trace.formats.registry import TraceFormat

#: every format rooflens reads, XSpace first (it is what ``jax.profiler`` writes)
FORMATS: tuple[TraceFormat, ...] = (xspace.FORMAT, chrome.FORMAT, nsys.FORMAT, nsys_sqlite.FORMAT,
                                    nsys_sqlite.REPORT)


def format_of(path: str, is_dir: bool = False, named: bool = False) -> TraceFormat | None:
    """The format of the trace at ``path`` (a file, or a directory that is an extracted archive);
    ``named``: the user gave this file itself, so looser names are accepted (see TraceFormat)."""
    return next((f for f in FORMATS if f.matches(str(path), is_dir, named)), None)


def reader_for(path: str, is_dir: bool = False) -> TraceFormat:
    """The format that reads a trace the user gave (by its name alone: a damaged archive is then
    told apart by its own reader, in one sentence); an unknown name is read as Chrome JSON."""
    if is_dir:
        return next((f for f in FORMATS if f.directory), FORMATS[0])
    name = str(path).rstrip("/").rsplit("/", 1)[-1]
    return next((f for f in FORMATS if f.owns_name(name, named=True)), by_name("chrome"))


def by_name(name: str) -> TraceFormat:
    return next(f for f in FORMATS if f.name == name)


def is_trace_name(name: str, named: bool = False) -> bool:
    """Whether a file name is one a format owns (without looking inside)."""
    return any(f.owns_name(name, named) for f in FORMATS)


def host_of(name: str) -> str:
    """A trace file's host: its name without the owning format's suffix."""
    for f in FORMATS:
        if f.owns_name(name, named=True):
            return f.host_of(name)
    return name


__all__ = ["FORMATS", "TraceFormat", "by_name", "format_of", "host_of", "is_trace_name", "reader_for"]
