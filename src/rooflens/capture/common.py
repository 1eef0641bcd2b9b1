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
import threading
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
def real_path(filename: str) -> str:
    """``os.path.realpath``, remembered: a stack's files recur in every frame and sample."""
    return os.path.realpath(filename)


def under(path: str, dirs: tuple[str, ...] | list[str]) -> bool:
    """Whether the real path ``path`` is one of ``dirs`` or inside one of them."""
    return any(path == d or path.startswith(d + os.sep) for d in dirs)


@functools.lru_cache(maxsize=8192)  # a stack's files recur in every frame and every sample
def is_library(filename: str, installed: bool = True) -> bool:
    """Whether ``filename`` (a stack frame's) is library code: not written by the user.

    ``installed`` counts every site-packages package as library too (the user's own code is
    rarely installed there); without it only jax, jaxlib, rooflens and the standard library are.
    """
    if not filename or filename.startswith("<"):  # <frozen …>, <string>, <stdin>
        return True
    path = real_path(filename)
    if under(path, core_library_dirs()):
        return True
    if under(path, installed_dirs()):  # checked before the standard library, which may hold site-packages
        return installed
    return under(path, stdlib_dirs())


def user_frame(skip: tuple[str, ...] = (), stack: list | None = None) -> str:
    """``file:line (function)`` of the innermost frame the user wrote, or "" when there is none.

    Frames in third-party packages are passed over first; when every frame is installed code
    (the user's own package installed into site-packages), the innermost frame outside jax,
    jaxlib, rooflens and the standard library is taken instead. ``skip``: more files to pass over
    (the launcher's own file, loaded by path).
    """
    frames = traceback.extract_stack()[:-1] if stack is None else stack
    skipped = {real_path(s) for s in skip}
    for installed in (True, False):
        for fr in reversed(frames):
            if is_library(fr.filename, installed) or real_path(fr.filename) in skipped:
                continue
            return f"{fr.filename}:{fr.lineno} ({fr.name})"
    return ""


def program_name(function: str) -> str:
    """The module name JAX gives the program of a jitted function: ``jit(<name>)`` with every character
    other than a word character, ``.`` or ``-`` made ``_`` and trailing ``_`` dropped (jax
    ``interpreters/mlir.py``'s ``sanitize_name``): ``step`` → ``jit_step``, ``<lambda>`` → ``jit__lambda``."""
    return re.sub(r"[^\w.-]", "_", f"jit({function})").rstrip("_")


def transfer_line(line: str) -> str | None:
    """``"host-to-device: aval=…"`` for one transfer-guard log line, else None."""
    m = TRANSFER.search(line.rstrip("\n"))
    if not m:
        return None
    return f"{m.group(1)}: {m.group(2).strip() or '(a repeat; JAX gives no details)'}"


if __package__:
    from rooflens.trace.manifest import DRAIN_FUNCTION
else:  # loaded by path, after the launcher loaded the manifest the same way (its ``_sibling``)
    DRAIN_FUNCTION = sys.modules["_rooflens_trace_manifest"].DRAIN_FUNCTION


def _barrier(token):
    """The per-device barrier's program: its one input, donated, is its output (no op runs)."""
    return token


_barrier.__name__ = _barrier.__qualname__ = DRAIN_FUNCTION  # how traces name its dispatches (jit_<name>)


class _Drain:
    """Waits until every local device has finished everything the calling thread dispatched to it.

    ``jax.block_until_ready`` on the live arrays is not enough: a loop inside ``main()`` that
    returns (or drops its losses) leaves executions queued whose outputs no longer exist, and
    ``jax.effects_barrier()`` only waits for side effects. What does drain a device is an execution
    on it: JAX gives each dispatching thread its own execution stream, and a device runs the
    programs of one stream in the order they were dispatched (a GPU's compute stream; XLA:CPU
    orders them by ``ExecuteOptions.execution_stream_id``, checked with jax 0.10: a barrier from
    the thread that dispatched 30 queued steps waits for them all, one from another thread or one
    SPMD barrier over all devices does not). So a program dispatched now, from the calling thread,
    on each device finishes after all that thread dispatched before; arrays still alive (work of
    other threads among them) are waited for too. The barrier program donates its one byte and
    returns it, so it runs no op and adds nothing to the trace; it is compiled by :meth:`prepare`
    before a trace starts (one tiny compilation per device), and its byte stays on each device from
    one drain to the next (no transfer later). The wait polls (``is_ready``), so a signal handler
    (SIGTERM, Ctrl-C) runs while it waits."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.fn = None
        self.tokens: dict = {}  # device → its barrier byte (the last barrier's output)

    def prepare(self) -> None:
        import jax
        import numpy as np

        with self.lock:
            if self.fn is None:
                self.fn = jax.jit(_barrier, donate_argnums=0)
            fresh = [d for d in jax.local_devices() if d not in self.tokens]
            for d in fresh:
                self.tokens[d] = self.fn(jax.device_put(np.zeros((), np.int8), d))
            waiting = [self.tokens[d] for d in fresh]
        _wait(waiting)

    def __call__(self) -> None:
        import jax

        self.prepare()  # devices first seen now (a no-op otherwise)
        with self.lock:
            for d, token in list(self.tokens.items()):
                self.tokens[d] = self.fn(token)
            waiting = list(self.tokens.values())
        _wait(waiting + list(jax.live_arrays()))
        jax.effects_barrier()


def _ready(array) -> bool:
    try:
        return array.is_deleted() or array.is_ready()
    except Exception:  # deleted or donated meanwhile
        return True


def _wait(arrays: list, poll_s: float = 0.002) -> None:
    """Until every array is ready, polling (a blocking wait in C++ would hold off signal handlers)."""
    import time

    while arrays:
        arrays = [a for a in arrays if not _ready(a)]
        if arrays:
            time.sleep(poll_s)


#: ``drain_devices()`` waits until every local device has finished what the calling thread dispatched
#: to it (and every live array is ready); ``drain_devices.prepare()`` compiles its barrier (call it
#: before a trace starts).
drain_devices = _Drain()


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
