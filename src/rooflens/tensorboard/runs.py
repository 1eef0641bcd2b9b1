"""The profile runs under a TensorBoard logdir, and their reports, built once and cached.

A run is a directory ``<logdir>/plugins/profile/<run>/`` holding trace files, or the same under a
subdirectory run of the logdir (``<logdir>/<sub>/plugins/profile/<run>/``, named ``<sub>/<run>``),
as TensorBoard's profile plugin lists them. Logdirs may be local or fsspec URLs (``gs://…``): they
are listed through :mod:`rooflens.trace.fs`, and a report is built by ``rooflens report`` itself,
in a child process. That keeps the server free of a failing or huge trace, and lets the child run
without the decoded-trace cache, which would otherwise write ``.rooflens-cache/`` into the
logdir: nothing is ever written there. The built page is kept in memory and in the user cache
directory, keyed by the run's files (name, size, modification time) and the rooflens that built it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from rooflens.errors import RooflensError
from rooflens.trace import fs
from rooflens.trace.formats import is_trace_name
from rooflens.userdirs import cache_dir

#: how deep subdirectory runs are searched for ``plugins/profile`` (TensorBoard runs are usually 1–2 deep)
MAX_DEPTH = 4
MAX_DIRS = 5_000
#: a build of one run's report: a pod's worth of hosts takes minutes, a stuck one must end
BUILD_TIMEOUT_S = 1800.0
PROFILE = ("plugins", "profile")


def find_runs(logdir: str) -> dict[str, str]:
    """Run name → run directory, for every profile run under ``logdir`` (sorted by name)."""
    if not logdir or fs.kind(logdir) != "dir":
        return {}
    runs: dict[str, str] = {}
    frontier, depth, visited = [(logdir, "")], 0, 0
    while frontier and depth <= MAX_DEPTH:
        nxt = []
        for d, prefix in frontier:
            visited += 1
            if visited > MAX_DIRS:
                return dict(sorted(runs.items()))
            try:
                subdirs = fs.listdir(d, dirs_only=True)
            except RooflensError:
                continue
            for sub in subdirs:
                name = sub.rstrip("/").rsplit("/", 1)[-1]
                if name == PROFILE[0]:
                    runs.update(_profile_runs(sub, prefix))
                elif not name.startswith("."):
                    nxt.append((sub, f"{prefix}{name}/"))
        frontier, depth = nxt, depth + 1
    return dict(sorted(runs.items()))


def _profile_runs(plugins_dir: str, prefix: str) -> dict[str, str]:
    profile = fs.join(plugins_dir, PROFILE[1])
    try:
        dirs = fs.listdir(profile, dirs_only=True) if fs.kind(profile) == "dir" else []
    except RooflensError:
        return {}
    out = {}
    for run_dir in dirs:
        try:
            entries = fs.listdir(run_dir)
        except RooflensError:
            continue
        if any(is_trace_name(e.rstrip("/").rsplit("/", 1)[-1]) for e in entries):
            out[prefix + run_dir.rstrip("/").rsplit("/", 1)[-1]] = run_dir
    return out


def run_identity(run_dir: str) -> tuple[tuple[str, int, str], ...]:
    """(name, size, modification stamp) of each entry of the run directory: a changed file rebuilds."""
    if not fs.is_url(run_dir):
        try:
            with os.scandir(run_dir) as it:
                stats = [(e.name, e.stat()) for e in it]
        except OSError as e:
            raise RooflensError(f"cannot list {run_dir}: {e.strerror or e}.") from None
        return tuple(sorted((n, s.st_size, str(s.st_mtime_ns)) for n, s in stats))
    import fsspec

    fsys, path = fsspec.core.url_to_fs(run_dir)
    try:
        infos = fsys.ls(path, detail=True)
    except OSError as e:
        raise RooflensError(f"cannot list {run_dir}: {e}.") from None
    stamp = ("mtime", "LastModified", "updated", "last_modified", "created")
    return tuple(sorted((str(i["name"]).rsplit("/", 1)[-1], int(i.get("size") or 0),
                         str(next((i[k] for k in stamp if i.get(k) is not None), ""))) for i in infos))


def _code_stamp() -> str:
    """Which rooflens builds the page: its version and its report layer's files."""
    import rooflens

    report_dir = Path(rooflens.__file__).parent / "report"
    files = sorted([*report_dir.glob("*.py"), *report_dir.glob("templates/*")])
    return rooflens.__version__ + "".join(f":{p.name}:{p.stat().st_mtime_ns}" for p in files)


@dataclass(frozen=True)
class Built:
    """A run's report page, or the one sentence saying why there is none."""

    html: str = ""
    error: str = ""
    status: int = 200


def build_report(run_dir: str, out: Path, timeout_s: float = BUILD_TIMEOUT_S) -> str:
    """Write the report page of ``run_dir`` to ``out`` with ``rooflens report``; "" or why it failed."""
    env = dict(os.environ)
    cmd = [sys.executable, "-m", "rooflens.cli", "report", run_dir, "--html", str(out), "--top", "0", "--force"]
    try:
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                           timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return f"reading this run took over {timeout_s:.0f} s; run `rooflens report` on it instead."
    if r.returncode == 0 and out.is_file():
        return ""
    lines = [ln.strip() for ln in r.stderr.splitlines() if ln.strip()]
    last = lines[-1] if lines else f"exit status {r.returncode}"
    last = last.removeprefix("rooflens: ").removeprefix("error: ")
    if r.returncode != 2:  # not one of rooflens's sentences: the last line of what went wrong
        return f"rooflens could not build this run's report ({last})."
    return last


class ReportCache:
    """Reports by run, built on first view: in memory, and as files in the user cache directory."""

    def __init__(self, directory: Path | None = None, timeout_s: float = BUILD_TIMEOUT_S):
        self.directory = directory or cache_dir() / "tensorboard"
        self.timeout_s = timeout_s
        self._memory: dict[str, Built] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self.builds = 0  # how many reports this cache built (the rest came from memory or disk)

    def key(self, run_dir: str) -> str:
        ident = repr((run_dir, run_identity(run_dir), _code_stamp()))
        return hashlib.sha256(ident.encode()).hexdigest()[:24]

    def get(self, run_dir: str) -> Built:
        try:
            key = self.key(run_dir)
        except RooflensError as e:
            return Built(error=str(e), status=404)
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:  # one build per run, however many views ask at once
            if key in self._memory:
                return self._memory[key]
            built = self._from_disk(key) or self._build(run_dir, key)
            self._memory[key] = built
            return built

    def _from_disk(self, key: str) -> Built | None:
        path = self.directory / f"{key}.html"
        try:
            return Built(html=path.read_text(encoding="utf-8")) if path.is_file() else None
        except (OSError, UnicodeDecodeError):
            return None

    def _build(self, run_dir: str, key: str) -> Built:
        self.builds += 1
        with tempfile.TemporaryDirectory(prefix="rooflens-tb-") as tmp:
            out = Path(tmp) / "report.html"
            error = build_report(run_dir, out, self.timeout_s)
            if error:
                return Built(error=error, status=422)
            html = out.read_text(encoding="utf-8")
        with contextlib.suppress(OSError):  # an unwritable cache directory: the page is still kept in memory
            self.directory.mkdir(parents=True, exist_ok=True)
            part = self.directory / f"{key}.html.part"
            part.write_text(html, encoding="utf-8")
            part.replace(self.directory / f"{key}.html")
        return Built(html=html)
