"""Many hosts' trace files read side by side: the map of a pod's trace set.

Each host file is read on its own, into its own columns (a :class:`RawTrace`), by a worker:

* ``engine="local"`` (default): a process pool of ``workers`` processes (default: this machine's
  cores); one host file per task, so a worker's memory is bounded by one host's trace;
* ``engine="ray"``: Ray tasks on an existing cluster (``ray_address``) or on a local one started
  for the call; each task returns its host's columns as Arrow IPC bytes
  (:func:`rooflens.trace.cache.to_ipc`), which travel through Ray's object store without pickling
  every array. Ray is an optional extra (``pip install 'rooflens[ray]'``).

The driver then merges the hosts (:func:`rooflens.trace.loading.load`). :func:`map_hosts` runs any
:class:`Task` over the files the same way: with ``merge="aggregates"`` each worker reduces its host
(:mod:`rooflens.trace.reduce`) and the driver folds the results in as they arrive.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from rooflens.errors import RooflensError
from rooflens.trace import fs
from rooflens.trace.discover import HostFile
from rooflens.trace.formats.raw import RawTrace

ENGINES = ("local", "ray")


def read_one(hf: HostFile, progress=None) -> RawTrace:
    """One host file → its RawTrace, named as the run names the host."""
    from rooflens.trace.cache import read_cached

    with fs.local_copy(hf.path) as local:
        raw = read_cached(local, progress, use_cache=not fs.is_url(hf.path))
    raw.host = hf.host
    raw.table.hosts = [hf.host]
    return raw


def _read_ipc(hf: HostFile) -> bytes:
    from rooflens.trace.cache import to_ipc

    return to_ipc(read_one(hf))


def read_hosts(files: list[HostFile], workers: int | None = None, engine: str = "local",
               ray_address: str | None = None, progress: Callable[[int], Callable] | None = None,
               meanwhile: Callable[[], None] | None = None) -> list[RawTrace]:
    """Every host file read, in the order given. ``progress(i)`` gives the i-th file's callback
    (``(done, total)``); files read in other processes report when they finish. ``meanwhile`` is
    started on a thread of the driver once the workers run (never before a fork), and joined before
    this returns: the driver's own start-up work overlaps the reading."""
    out: list[RawTrace | None] = [None] * len(files)
    for i, raw in map_hosts(files, Task(read_one, _read_batch, _read_ipc, from_ipc=True), workers, engine,
                            ray_address, progress, meanwhile):
        out[i] = raw
    return out


@dataclass(frozen=True)
class Task:
    """What a worker makes of host files: ``one(file, progress)`` in this process, ``batch(files, *args)`` on a
    process pool, ``remote(file, *args)`` as a Ray task (``from_ipc``: its result is Arrow IPC bytes of a RawTrace)."""

    one: Callable
    batch: Callable
    remote: Callable
    args: tuple = ()
    from_ipc: bool = False


def map_hosts(files: list[HostFile], task: Task, workers: int | None = None, engine: str = "local",
              ray_address: str | None = None, progress: Callable[[int], Callable] | None = None,
              meanwhile: Callable[[], None] | None = None) -> Iterator[tuple[int, object]]:
    """``(i, what the task made of files[i])`` as the workers finish them (see :func:`read_hosts`)."""
    thread = None

    def overlap() -> None:
        nonlocal thread
        if meanwhile is not None and thread is None:
            thread = threading.Thread(target=meanwhile, daemon=True)
            thread.start()

    try:
        yield from _map_hosts(files, task, workers, engine, ray_address, progress, overlap)
    finally:
        if thread is not None:
            thread.join()


def _map_hosts(files, task: Task, workers, engine, ray_address, progress, overlap):
    if engine not in ENGINES:
        raise RooflensError(f"unknown engine {engine!r}: use one of {', '.join(ENGINES)}.")
    if engine == "ray":
        overlap()
        yield from _map_ray(files, task, ray_address, progress)
        return
    n = min(workers or os.cpu_count() or 1, len(files))
    if n <= 1:
        overlap()  # the decoder releases the GIL
        for i, f in enumerate(files):
            yield i, task.one(f, *task.args, progress=progress(i) if progress else None)
        return
    import multiprocessing  # a process pool: only for several hosts (one host's report imports neither)
    from concurrent.futures import ProcessPoolExecutor, as_completed

    method = "fork" if "fork" in multiprocessing.get_all_start_methods() and not _jax_running() else "spawn"
    if method == "fork":
        from rooflens.trace.formats.xspace.decode import warm_up

        warm_up()  # loaded once here, inherited by every worker
    # a few hosts per task (about four tasks a worker): fewer round trips, and the hosts of one task
    # send each program's HLO once
    per = max(1, len(files) // (4 * n))
    batches = [list(range(k, min(k + per, len(files)))) for k in range(0, len(files), per)]
    share = str(max(1, (os.cpu_count() or 1) // n))  # each worker decodes on its share of the cores
    with ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context(method),
                             initializer=_decode_threads, initargs=(share,)) as pool:
        futures = {pool.submit(task.batch, [files[i] for i in b], *task.args): b for b in batches}
        overlap()  # every worker is forked by now
        for fut in as_completed(futures):
            for i, made in zip(futures[fut], fut.result()):  # a worker's RooflensError is raised here
                if progress:
                    progress(i)(1, 1)
                yield i, made


RAY_CONNECT_TIMEOUT_S = 10.0  # Ray itself retries an unreachable head for minutes before it gives up


def _check_reachable(address: str | None) -> None:
    """An explicit ``host:port`` (or ``ray://host:port``) that takes no TCP connection is refused here, in
    seconds, instead of by ray.init after minutes of retries."""
    import socket

    if not address or address == "auto":
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise RooflensError(f"the Ray address {address!r} is not host:port (or ray://host:port, or 'auto').")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=RAY_CONNECT_TIMEOUT_S):
            pass
    except OSError as e:
        why = e.strerror or f"no answer within {RAY_CONNECT_TIMEOUT_S:g} s"
        raise RooflensError(f"cannot reach the Ray cluster at {address}: {why[0].lower()}{why[1:]}.") from None


def _decode_threads(n: str) -> None:
    """A worker's decode threads (:func:`rooflens.trace.formats.xspace.walk.threads_for`), unless the user set them."""
    os.environ.setdefault("ROOFLENS_DECODE_THREADS", n)


def _jax_running() -> bool:
    """Whether this process has started a JAX backend (its threads make forking unsafe: spawn then)."""
    import sys

    bridge = sys.modules.get("jax._src.xla_bridge")
    return bool(getattr(bridge, "_backends", None))


def _read_batch(files: list[HostFile]) -> list[RawTrace]:
    """Several host files in one task; a program's HLO proto goes back with the first host that has it
    (the driver prints each program once, whichever host it came from)."""
    out, sent = [], set()
    for f in files:
        raw = read_one(f)
        raw.hlo_protos = {k: v for k, v in raw.hlo_protos.items() if (k, len(v)) not in sent}
        sent.update((k, len(v)) for k, v in raw.hlo_protos.items())
        out.append(raw)
    return out


def _map_ray(files: list[HostFile], task: Task, address: str | None, progress):
    try:
        import ray
    except ImportError:
        raise RooflensError("--engine ray needs Ray: pip install 'rooflens[ray]'.") from None
    from rooflens.trace.cache import from_ipc

    started = False
    if not ray.is_initialized():
        _check_reachable(address)
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise RooflensError(f"cannot reach the Ray cluster at {address or 'a new local one'}: "
                                f"{str(e).splitlines()[0] if str(e) else type(e).__name__}.") from None
        started = True
    try:
        remote = ray.remote(task.remote)
        refs = [remote.remote(f, *task.args) for f in files]
        index = {r: i for i, r in enumerate(refs)}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            i = index[done[0]]
            try:
                made = ray.get(done[0])
            except ray.exceptions.RayTaskError as e:
                cause = e.cause if isinstance(getattr(e, "cause", None), RooflensError) else None
                if cause is not None:
                    raise cause from None
                raise
            if progress:
                progress(i)(1, 1)
            yield i, from_ipc(made) if task.from_ipc else made
    finally:
        if started and address is None:
            ray.shutdown()
