"""``rl.load``: a logdir, a run directory or trace files → a :class:`~rooflens.trace.profile.Profile`.

A run directory is what ``jax.profiler`` writes (``<logdir>/plugins/profile/<run>/``): one
``<host>.xplane.pb`` per host (and usually a ``<host>.trace.json.gz``). ``rl.capture`` adds
``rooflens.json`` (what was captured) and ``hlo/<program>.txt`` (the compiled HLO of every
program that ran), which give each op its category and named scope. Other formats (nsys-jax archives,
Nsight Systems exports) are found by the formats' registry (:mod:`rooflens.trace.formats`).

The top of the trace package: it reads the hosts (:mod:`.hosts`) and merges them, from their events
(:mod:`.assemble`) or their aggregates (:mod:`.reduce`); nothing below imports it.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from rooflens.errors import RooflensError
from rooflens.trace import cache, discover, fs
from rooflens.trace.assemble import assemble, has_saved_hlo
from rooflens.trace.profile import Profile
from rooflens.trace.progress import ingest_progress

MERGES = ("auto", "events", "aggregates")
#: a pod whose host files hold more than this reads as per-host aggregates under ``merge="auto"``: holding
#: every op event costs the driver about 1.2 bytes of memory per byte of trace (docs/pod-scale.md)
AGGREGATE_ABOVE_BYTES = 1 << 30


def load(path: str | Path | list[str | Path], hlo_dir: str | Path | None = None, progress: bool | None = None,
         workers: int | None = 1, engine: str = "local", ray_address: str | None = None, merge: str = "auto",
         include_warmup: bool = False, step_fn: str | None = None) -> Profile:
    """Read a profile: one or several logdirs, run directories or trace files (``*.xplane.pb``,
    ``*.trace.json.gz``), local or fsspec URLs (``gs://…``); every host of the run.

    Each host file is read on its own (``workers`` processes, or Ray tasks with ``engine="ray"``;
    see :mod:`rooflens.trace.hosts`), then the hosts are merged on one time axis. ``hlo_dir`` adds
    the HLO of the programs (an XLA dump directory) when the run has none. ``progress``: a bar on
    stderr for reads longer than about a second (default: when stderr is a terminal).

    ``merge``: ``"events"`` keeps every host's op events in this process (exact, memory grows with the
    pod); ``"aggregates"`` has each worker reduce its host to op sums, counts, extremes, a quantile
    sketch, device times, steps and one sampled step's events (:mod:`rooflens.trace.reduce`: memory flat
    in the number of hosts, medians to within 1%); ``"auto"``: aggregates for several hosts whose files
    hold over 1 GiB. ``include_warmup``: keep a ``rooflens run`` profile's warm-up (first runs) in.
    ``step_fn``: the step program, a function or program name (``train_step``, ``jit_train_step``,
    ``jit_train_step(12)``); default: chosen (:mod:`rooflens.trace.steps`). A name that matches none raises
    :class:`~rooflens.errors.RooflensError` listing the candidates.
    """
    if merge not in MERGES:
        raise RooflensError(f"unknown merge {merge!r}: use one of {', '.join(MERGES)}.")
    paths = [str(p) for p in path] if isinstance(path, list | tuple) else [str(path)]
    if not paths:
        raise RooflensError("no profile given.")
    runs, host_files, older = discover.find_runs(paths)
    if merge == "auto":
        merge = "aggregates" if len(host_files) > 1 and _bytes_of(host_files) > AGGREGATE_ABOVE_BYTES else "events"
    if merge == "aggregates":
        from rooflens.trace.reduce import load_aggregated

        return load_aggregated(paths, runs, host_files, hlo_dir, progress, workers, engine, ray_address,
                               include_warmup, step_fn)
    from rooflens.trace.hosts import read_hosts

    files = [f.path for f in host_files]
    with ingest_progress([Path(f) for f in files], progress) as bar:
        raws = read_hosts(host_files, workers=workers, engine=engine, ray_address=ray_address,
                          progress=bar.for_file,
                          meanwhile=None if any(has_saved_hlo(r) for r in runs) or all(
                              not fs.is_url(f) and cache.has_entry(Path(f)) for f in files) else _import_hlo_printer)
    profile = assemble(paths, runs, raws, files, hlo_dir, step_fn=step_fn)
    if older:
        profile.notes.append(older_runs_note(runs, older))
    if include_warmup:
        from rooflens.trace.warmup import with_warmup

        profile = with_warmup(profile)
    return profile


def older_runs_note(read: list[str], older: list[str]) -> str:
    """What was read of a logdir that holds several runs, and how to read another."""
    def name(d: str) -> str:
        return d.rstrip("/").rsplit("/", 1)[-1]

    others = ", ".join(name(d) for d in reversed(older[-3:]))
    if len(older) > 3:
        others += f" and {len(older) - 3} more"
    return (f"the logdir holds {len(older) + len(read)} runs: this is the newest, {', '.join(name(d) for d in read)}; "
            f"give a run directory to read another ({others})")


def _bytes_of(files) -> int:
    """The host files' size in bytes (those in a bucket, or an extracted archive, count for nothing)."""
    total = 0
    for f in files:
        with contextlib.suppress(OSError):
            if not fs.is_url(f.path) and Path(f.path).is_file():
                total += Path(f.path).stat().st_size
    return total


def _import_hlo_printer() -> None:
    """jaxlib's HLO printer (half a second or so), loaded while the traces are decoded (not when every one is read
    from the cache: the HLO printed from it is remembered too)."""
    from rooflens.trace.formats.xspace.hlo_protos import hlo_printer

    with contextlib.suppress(Exception):  # printing will say what went wrong, on the main thread
        hlo_printer()
