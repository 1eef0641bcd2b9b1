"""A columnar cache of decoded traces, so a second report of the same trace skips decoding.

One Arrow IPC file per trace file, keyed by the trace's identity (resolved path, size,
modification time, inode) and the reader's version: beside the trace in ``.rooflens-cache/``
when that directory is writable, else in the user cache directory. A changed trace is decoded
again; a cache that cannot be read or written is ignored (a note, never an error).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from rooflens.trace.events import EventTable
from rooflens.trace.nsys import TRACE as NSYS_TRACE
from rooflens.trace.nsys import read_nsys
from rooflens.trace.readers import Progress, RawTrace, read_chrome, read_xspace
from rooflens.userdirs import cache_dir

#: bump when what a reader produces changes: older caches are then decoded again
READER_VERSION = 1
COLUMNS = ("host", "device", "line", "name", "program", "start_ps", "dur_ps")
CACHE_SUBDIR = ".rooflens-cache"


@functools.cache
def _readers_digest() -> str:
    """A digest of the reader code itself: a cache written by other code is never trusted."""
    h = hashlib.sha1(str(READER_VERSION).encode())
    for mod in ("wire", "xspace", "chrome", "readers", "events", "cache", "nsys", "hlo_ids"):
        h.update((Path(__file__).parent / f"{mod}.py").read_bytes())
    return h.hexdigest()[:16]


def identity(path: Path) -> dict:
    st = (path / NSYS_TRACE).stat() if path.is_dir() else path.stat()  # an extracted nsys-jax archive: its trace
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino,
            "readers": _readers_digest()}


def _locations(path: Path) -> list[Path]:
    """Where the cache of ``path`` may live, in order of preference."""
    name = path.name + ".arrow"
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:16]
    beside = [path.parent / CACHE_SUBDIR / name] if _writable(path.parent) else []
    return [*beside, cache_dir() / "traces" / f"{digest}-{name}"]


def _writable(directory: Path) -> bool:
    """Whether ``directory`` is meant to be written: permitted, and (as root ignores permissions) with a
    write bit set, so a read-only shared trace directory gets no cache files even from root."""
    try:
        return os.access(directory, os.W_OK) and bool(directory.stat().st_mode & 0o222)
    except OSError:
        return False


def read_cached(path: Path, progress: Progress = None, use_cache: bool = True) -> RawTrace:
    """The trace file, from its cache when that matches the file, else decoded (and cached)."""
    reader = read_nsys if path.is_dir() or path.name.endswith(".zip") else \
        read_xspace if path.name.endswith(".xplane.pb") else read_chrome
    if not use_cache or os.environ.get("ROOFLENS_NO_CACHE") == "1":
        return reader(path, progress)
    try:
        key = identity(path)
    except OSError:
        return reader(path, progress)
    for loc in _locations(path):
        raw = _load(loc, key)
        if raw is not None:
            return raw
    raw = reader(path, progress)
    for loc in _locations(path):
        if _save(loc, key, raw):
            break
    return raw


def _meta(raw: RawTrace, key: dict | None) -> dict:
    t = raw.table
    return {
        "key": key, "host": raw.host, "steps": raw.steps, "device_kind": raw.device_kind, "platform": raw.platform,
        "notes": raw.notes, "plane_stats": raw.plane_stats, "host_events": raw.host_events,
        "events_total": raw.events_total, "hosts": t.hosts, "lines": t.lines, "names": t.names,
        "programs": t.programs, "origin_ns": t.origin_ns,
        "hlo_text": [[p, n, v] for (p, n), v in t.hlo_text.items()],
        "op_meta": [[p, n, v] for (p, n), v in t.op_meta.items()], "program_keys": t.program_keys,
        "hlo_protos": {k: base64.b64encode(v).decode() for k, v in raw.hlo_protos.items()},
    }


def _write(sink, raw: RawTrace, key: dict | None) -> None:
    import pyarrow as pa

    t = raw.table
    batch = pa.record_batch([pa.array(getattr(t, c)) for c in COLUMNS], names=list(COLUMNS))
    schema = batch.schema.with_metadata({"rooflens": json.dumps(_meta(raw, key), default=str)})
    with pa.ipc.new_file(sink, schema) as w:
        w.write_batch(batch)


def to_ipc(raw: RawTrace) -> bytes:
    """One host's columns as Arrow IPC bytes (what a Ray task hands back to the driver)."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    _write(sink, raw, None)
    return sink.getvalue().to_pybytes()


def from_ipc(data) -> RawTrace:
    import pyarrow as pa

    raw = _read(pa.BufferReader(data), None)
    assert raw is not None
    return raw


def _save(loc: Path, key: dict, raw: RawTrace) -> bool:
    try:
        loc.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=loc.parent, prefix=".tmp-", suffix=".arrow")
        try:
            with os.fdopen(fd, "wb") as fh:
                _write(fh, raw, key)
            os.replace(tmp, loc)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except (OSError, ValueError, TypeError, ImportError):
        return False
    return True


def _load(loc: Path, key: dict) -> RawTrace | None:
    if not loc.is_file():
        return None
    try:
        import pyarrow as pa

        with pa.memory_map(str(loc), "r") as src:
            return _read(src, key)
    except Exception:  # noqa: BLE001 - any unreadable cache means "no usable cache": decode instead
        return None


def _read(src, key: dict | None) -> RawTrace | None:
    import pyarrow as pa

    reader = pa.ipc.open_file(src)
    meta = json.loads(reader.schema.metadata[b"rooflens"])
    if key is not None and meta.get("key") != key:
        return None
    batch = reader.read_all()
    cols = {c: batch.column(c).to_numpy().copy() for c in COLUMNS}
    n = len(cols["start_ps"])
    table = EventTable(
        host=cols["host"].astype(np.int32), device=cols["device"].astype(np.int32), line=cols["line"].astype(np.int32),
        name=cols["name"].astype(np.int32), program=cols["program"].astype(np.int32),
        start_ps=cols["start_ps"].astype(np.int64), dur_ps=cols["dur_ps"].astype(np.int64),
        step=np.full(n, -1, np.int32), hosts=meta["hosts"], lines=meta["lines"], names=meta["names"],
        programs=meta["programs"], hlo_text={(p, k): v for p, k, v in meta["hlo_text"]},
        op_meta={(p, k): v for p, k, v in meta["op_meta"]}, program_keys=meta["program_keys"],
        origin_ns=int(meta["origin_ns"]))
    return RawTrace(
        meta["host"], table, [tuple(s) for s in meta["steps"]], meta["device_kind"], meta["platform"],
        notes=meta["notes"], plane_stats=meta["plane_stats"], host_events=[tuple(h) for h in meta["host_events"]],
        hlo_protos={k: base64.b64decode(v) for k, v in meta["hlo_protos"].items()},
        events_total=int(meta["events_total"]))
