"""What the in-window recorder and ``rooflens run``'s launcher both need: the standard library only.

The launcher loads this file by path (before the script runs, nothing of rooflens, numpy or JAX may
be imported), and :mod:`rooflens.capture.recorder` imports it as a module: one transfer-line pattern
and one finder of "the user's line" for both.

The user's line is the innermost stack frame that is not library code. Library code is told apart
by the installed packages' real directories (jax, jaxlib and rooflens where they are imported from,
the interpreter's standard library and its site-packages), never by a path substring: a user's
project may well sit in a folder named ``jax`` or ``rooflens`` (a clone of this repository).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import re
import site
import sys
import sysconfig
import traceback

#: a line of ``jax.transfer_guard("log")``'s C++ logging
TRANSFER = re.compile(r"(host-to-device|device-to-host|device-to-device) transfer: (.*)$")

ROOFLENS_DIR = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
_PACKAGES = ("jax", "jaxlib")  # the libraries that compile and transfer on the user's behalf


def _package_dirs(name: str) -> list[str]:
    """Where package ``name`` is (or would be) imported from, without importing it."""
    mod = sys.modules.get(name)
    locations = list(getattr(mod, "__path__", []) or [])
    if not locations:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return [os.path.realpath(p) for p in locations]


@functools.lru_cache(maxsize=1)
def core_library_dirs() -> tuple[str, ...]:
    """jax's, jaxlib's and rooflens's own directories."""
    return tuple(dict.fromkeys(d for d in (ROOFLENS_DIR, *(d for n in _PACKAGES for d in _package_dirs(n))) if d))


@functools.lru_cache(maxsize=1)
def stdlib_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(dict.fromkeys(os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib") if paths.get(k)))


@functools.lru_cache(maxsize=1)
def installed_dirs() -> tuple[str, ...]:
    """Every site-packages directory of this interpreter (third-party libraries: flax, optax, …)."""
    dirs = [sysconfig.get_paths().get(k) for k in ("purelib", "platlib")]
    with contextlib.suppress(AttributeError):  # a virtualenv's old site module has no getsitepackages
        dirs += site.getsitepackages()
    user = getattr(site, "getusersitepackages", lambda: None)()
    dirs.append(user)
    return tuple(dict.fromkeys(os.path.realpath(d) for d in dirs if d))


@functools.lru_cache(maxsize=4096)
def _real(filename: str) -> str:
    return os.path.realpath(filename)


def _under(path: str, dirs: tuple[str, ...]) -> bool:
    return any(path == d or path.startswith(d + os.sep) for d in dirs)


def is_library(filename: str, installed: bool = True) -> bool:
    """Whether ``filename`` (a stack frame's) is library code: not written by the user.

    ``installed`` counts every site-packages package as library too (the user's own code is
    rarely installed there); without it only jax, jaxlib, rooflens and the standard library are.
    """
    if not filename or filename.startswith("<"):  # <frozen …>, <string>, <stdin>
        return True
    path = _real(filename)
    if _under(path, core_library_dirs()):
        return True
    if _under(path, installed_dirs()):  # checked before the standard library, which may hold site-packages
        return installed
    return _under(path, stdlib_dirs())


def user_frame(skip: tuple[str, ...] = (), stack: list | None = None) -> str:
    """``file:line (function)`` of the innermost frame the user wrote, or "" when there is none.

    Frames in third-party packages are passed over first; when every frame is installed code
    (the user's own package installed into site-packages), the innermost frame outside jax,
    jaxlib, rooflens and the standard library is taken instead. ``skip``: more files to pass over
    (the launcher's own file, loaded by path).
    """
    frames = traceback.extract_stack()[:-1] if stack is None else stack
    skipped = {_real(s) for s in skip}
    for installed in (True, False):
        for fr in reversed(frames):
            if is_library(fr.filename, installed) or _real(fr.filename) in skipped:
                continue
            return f"{fr.filename}:{fr.lineno} ({fr.name})"
    return ""


def transfer_line(line: str) -> str | None:
    """``"host-to-device: aval=…"`` for one transfer-guard log line, else None."""
    m = TRANSFER.search(line.rstrip("\n"))
    if not m:
        return None
    return f"{m.group(1)}: {m.group(2).strip() or '(a repeat; JAX gives no details)'}"


def device_memory_bytes(device) -> int | None:
    """How much memory one JAX device has: its allocator's limit (``memory_stats()['bytes_limit']``
    on GPU and TPU), or for a CPU device the machine's physical memory (``sysconf`` page count ×
    page size, POSIX); None where neither is known."""
    try:
        stats = device.memory_stats() or {}
    except Exception:  # a backend without memory stats
        stats = {}
    if stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    if getattr(device, "platform", "") == "cpu":
        with contextlib.suppress(ValueError, OSError, AttributeError):
            return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    return None
