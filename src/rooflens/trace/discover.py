"""Which trace files make one run: one file per host, from paths, run directories, logdirs or
directory trees, local or in a bucket (``gs://``, ``s3://``, any fsspec URL).

* a file: itself;
* a run directory (``<logdir>/plugins/profile/<run>/``): every host's file in it;
* a logdir: its newest run directory;
* any other tree: every run directory under it, as long as they hold different hosts (one job
  whose hosts wrote their own directories); where the same host appears in several, they are
  several runs, and the newest is read.

A host's XSpace is preferred over its Chrome JSON export (the same capture); hosts with the same
name in different directories (processes on one machine, each in its own directory) are told
apart by their directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from rooflens.errors import RooflensError
from rooflens.trace import formats, fs

#: how deep under a given directory trace files are looked for (``rooflens report /`` must not walk the disk)
MAX_DEPTH = 6
MAX_DIRS = 20_000


@dataclass(frozen=True)
class HostFile:
    path: str  # a local path or an fsspec URL
    host: str  # the host's name in the report

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]


host_of = formats.host_of


def _run_files(entries: list[str]) -> dict[str, str]:
    """host → file among one directory's entries (by the formats' preference: an XSpace over its
    Chrome export). An entry that is a directory is a trace only as an extracted archive."""
    by_host: dict[str, tuple[int, str]] = {}
    for f in sorted(entries):
        fmt = formats.format_of(f) or formats.format_of(f, is_dir=True)
        if fmt is None:
            continue
        host = host_of(f.rstrip("/").rsplit("/", 1)[-1])
        if host not in by_host or fmt.preference < by_host[host][0]:
            by_host[host] = (fmt.preference, f)
    return {h: f for h, (_, f) in by_host.items()}


def find(paths: list[str]) -> tuple[list[str], list[HostFile]]:
    """(run directories, host files) for the paths a user gave."""
    runs, files, _ = find_runs(paths)
    return runs, files


def find_runs(paths: list[str]) -> tuple[list[str], list[HostFile], list[str]]:
    """(run directories, host files, the older runs passed over) for the paths a user gave: a logdir that holds
    several runs is read at its newest, and the others are named (the report says which was read)."""
    runs: list[str] = []
    files: list[HostFile] = []
    older: list[str] = []
    for p in paths:
        r, f, o = _find_one(str(p))
        runs += r
        files += f
        older += o
    seen: dict[str, int] = {}
    for f in files:
        seen[f.host] = seen.get(f.host, 0) + 1
    if any(n > 1 for n in seen.values()):  # one name, several files: name them by their directory too
        files = [HostFile(f.path, f"{_parent_name(f.path)}/{f.host}") if seen[f.host] > 1 else f for f in files]
    uniq: dict[str, HostFile] = {}
    for f in files:
        uniq.setdefault(f.path, f)
    return list(dict.fromkeys(runs)), list(uniq.values()), older


def _parent_name(path: str) -> str:
    parts = path.rstrip("/").rsplit("/", 2)
    return parts[-2] if len(parts) >= 2 else ""


def _find_one(path: str) -> tuple[list[str], list[HostFile], list[str]]:
    kind = fs.kind(path)
    if kind is None:
        raise RooflensError(f"{path} does not exist.")
    if kind == "dir" and formats.format_of(path, is_dir=True):  # an extracted archive is one host's profile
        return [fs.parent(path)], [HostFile(path, host_of(path.rstrip("/").rsplit("/", 1)[-1]))], []
    if kind == "file":
        if formats.is_trace_name(path.rstrip("/").rsplit("/", 1)[-1], named=True):
            return [fs.parent(path)], [HostFile(path, host_of(path.rstrip("/").rsplit("/", 1)[-1]))], []
        raise RooflensError(f"{path} is not a profile: give a logdir, a run directory, a *.xplane.pb, a "
                            "*.trace.json.gz, an nsys-jax archive or an Nsight Systems *.sqlite or *.nsys-rep.")
    here = _run_files(fs.listdir(path))
    if here:
        return [path], [HostFile(f, h) for h, f in here.items()], []
    plugin = fs.join(path, "plugins", "profile")
    if fs.kind(plugin) == "dir":
        runs = sorted(d for d in fs.listdir(plugin, dirs_only=True) if _run_files(fs.listdir(d)))
        if runs:
            newest = runs[-1]  # run directories are named by time
            return [newest], [HostFile(f, h) for h, f in _run_files(fs.listdir(newest)).items()], runs[:-1]
    found = _walk(path)
    if not found:
        raise RooflensError(f"{path} holds no profile (no *.xplane.pb, *.trace.json.gz or Nsight file under it, "
                            f"{MAX_DEPTH} levels deep).")
    hosts = [h for files in found.values() for h in files]
    if len(hosts) == len(set(hosts)):  # one job: each directory holds other hosts
        return sorted(found), [HostFile(f, h) for d in sorted(found) for h, f in found[d].items()], []
    newest = sorted(found)[-1]  # the same hosts again: several runs; the newest
    return [newest], [HostFile(f, h) for h, f in found[newest].items()], sorted(found)[:-1]


def _walk(root: str) -> dict[str, dict[str, str]]:
    """Directories under ``root`` (at most MAX_DEPTH deep) that hold trace files → their host files."""
    out: dict[str, dict[str, str]] = {}
    frontier, depth, visited = [root], 0, 0
    seen: set[str] = set()  # local directories by their real path: a symlink loop or a second link is one visit
    while frontier and depth <= MAX_DEPTH:
        nxt = []
        for d in frontier:
            if not fs.is_url(d):
                real = os.path.realpath(d)
                if real in seen:
                    continue
                seen.add(real)
            visited += 1
            if visited > MAX_DIRS:
                raise RooflensError(f"{root} is too large a tree to search for profiles (over {MAX_DIRS:,} "
                                    "directories); give the logdir or run directory itself.")
            try:
                entries = fs.listdir(d)
            except RooflensError:
                continue  # a directory we may not list: skipped, like any other without traces
            files = _run_files(entries)
            if files:
                out[d] = files
                continue
            nxt += fs.listdir(d, dirs_only=True)
        frontier, depth = nxt, depth + 1
    return out
