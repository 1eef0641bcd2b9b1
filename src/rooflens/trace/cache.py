"""A columnar cache of decoded traces, so a second report of the same trace skips decoding.

One Arrow IPC file per trace file, in the user cache directory (``rooflens.userdirs``, under
``traces/``), never beside the trace: a user's logdir (a shared bucket, a checked-in folder, a
read-only mount) is read, not written. Its name is a digest of the trace's identity (resolved
path, size, modification time, inode) and of the reader code, and the file repeats that key, so a
changed trace or a newer rooflens decodes again. Files are written whole under a temporary name
and renamed (two reports of one fresh trace at once each write their own, the last rename wins,
neither reads half a file); one that cannot be read (damaged, truncated, from other code) is
never trusted: the trace is decoded again and the entry replaced. A fresh entry is written on the
writer thread of :mod:`rooflens.trace.background` while the analysis goes on. Past ``ROOFLENS_CACHE_MAX``
bytes (default 4 GiB; ``500M``, ``2G`` also read) the least recently used entries are removed.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import os
import re
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from rooflens.trace import background, formats, memo
from rooflens.trace.events import EventTable
from rooflens.trace.formats.raw import Progress, RawTrace
from rooflens.userdirs import cache_dir

#: bump when what a reader produces changes: older caches are then decoded again
READER_VERSION = 1
COLUMNS = ("host", "device", "line", "name", "program", "start_ps", "dur_ps")
#: columns a table has only where its trace says them (EventTable.copy_bytes, host_pinned): stored when present
OPTIONAL_COLUMNS = (("copy_bytes", np.int64), ("host_pinned", np.int8))
DEFAULT_MAX_BYTES = 4 << 30
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.I)


@functools.cache
def _readers_digest() -> str:
    """A digest of the reader code itself: a cache written by other code is never trusted."""
    h = hashlib.sha1(str(READER_VERSION).encode())
    here = Path(__file__).parent
    for f in sorted([here / "events.py", here / "cache.py", *(here / "formats").rglob("*.py")]):
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _newest_stat(path: Path) -> os.stat_result:
    """A file's stat; an extracted archive (a directory): its newest file's."""
    if not path.is_dir():
        return path.stat()
    return max((p.stat() for p in path.rglob("*") if p.is_file()), key=lambda st: st.st_mtime_ns,
               default=path.stat())


def identity(path: Path) -> dict:
    st = _newest_stat(path)
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino,
            "readers": _readers_digest()}


def traces_dir() -> Path:
    return cache_dir() / "traces"


def location(key: dict) -> Path:
    """Where the cache entry of a trace with this identity lives."""
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return traces_dir() / f"{Path(key['path']).name[:80]}-{digest}.arrow"


def max_bytes() -> int:
    """The cache's size cap: ``ROOFLENS_CACHE_MAX`` (bytes, or with a k/M/G/T suffix), else 4 GiB."""
    raw = os.environ.get("ROOFLENS_CACHE_MAX", "")
    m = _SIZE.match(raw)
    if not m:
        return DEFAULT_MAX_BYTES
    return int(float(m.group(1)) * 1024 ** "_kmgt".index((m.group(2) or "_").lower()))


def evict(keep: Path | None = None, limit: int | None = None) -> list[Path]:
    """Remove the least recently used entries (by modification time, which a hit refreshes) until the
    cache is within its cap; ``keep``, the entry just written, stays. Returns what was removed."""
    limit = max_bytes() if limit is None else limit
    try:
        entries = [(p.stat(), p) for p in traces_dir().glob("*.arrow")]
    except OSError:
        return []
    total = sum(st.st_size for st, _ in entries)
    removed = []
    for st, p in sorted(entries, key=lambda e: e[0].st_mtime_ns):
        if total <= limit:
            break
        if keep is not None and p == keep:
            continue
        try:
            p.unlink()
        except OSError:
            continue
        total -= st.st_size
        removed.append(p)
    return removed


def has_entry(path: Path) -> bool:
    """Whether the cache holds an entry for the trace file as it is now (reading it will decode nothing)."""
    if os.environ.get("ROOFLENS_NO_CACHE") == "1":
        return False
    try:
        return location(identity(path)).is_file()
    except OSError:
        return False


def read_cached(path: Path, progress: Progress = None, use_cache: bool = True) -> RawTrace:
    """The trace file, from its cache when that matches the file, else decoded (and cached)."""
    reader = formats.reader_for(str(path), is_dir=path.is_dir()).read
    if not use_cache or os.environ.get("ROOFLENS_NO_CACHE") == "1":
        return reader(path, progress)
    try:
        key = identity(path)
    except OSError:
        return reader(path, progress)
    loc = location(key)
    background.flush(loc)  # this process's own write of the entry, if one is still going
    raw = _load(loc, key)
    if raw is not None:
        _touch(loc)  # recently used: the last to be evicted
        return raw
    raw = reader(path, progress)
    write = _writer(raw, key)  # what to write, taken now: the analysis goes on while it is written
    used_ns = time.time_ns()  # recency is when the entry was asked for, not when its write ended

    def store() -> None:
        if _save(loc, write):
            _touch(loc, used_ns)
            evict(keep=loc)

    background.submit(store, tag=loc)
    return raw


def _touch(loc: Path, now: int | None = None) -> None:
    """Stamp an entry as used now (or at ``now``, ns), to the nanosecond (file systems stamp writes by a
    coarser clock)."""
    now = time.time_ns() if now is None else now
    with contextlib.suppress(OSError):
        os.utime(loc, ns=(now, now))


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
        "dispatches": {k: v.tolist() for k, v in raw.dispatches.items()}, "end_ps": raw.end_ps,
        "session_clock": raw.session_clock, "steps_ran": raw.steps_ran, "framework": raw.framework,
    }


#: from here on the columns' checksums are made on two threads (zlib releases the GIL): a 6 M-event table's
#: 225 MB took 60-90 ms on one core of a 2-core machine
PARALLEL_CRC_BYTES = 32 << 20


def _checksums(cols: dict[str, np.ndarray]) -> dict[str, int]:
    """A CRC-32 of each column's bytes: a cache whose data was damaged after it was written is never used."""
    views = {c: np.ascontiguousarray(v).view(np.uint8) for c, v in cols.items()}
    if sum(len(v) for v in views.values()) < PARALLEL_CRC_BYTES or (os.cpu_count() or 1) < 2:
        return {c: zlib.crc32(v) for c, v in views.items()}
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="rooflens-crc") as pool:
        done = {c: pool.submit(zlib.crc32, v) for c, v in sorted(views.items(), key=lambda cv: -len(cv[1]))}
        return {c: done[c].result() for c in views}


def _writer(raw: RawTrace, key: dict | None) -> Callable[[object], None]:
    """A function writing ``raw`` as Arrow IPC to a sink: the columns and metadata are taken now (the
    table's columns are never changed in place), the checksums and bytes are made when it is called."""
    t = raw.table
    cols = {c: getattr(t, c) for c in COLUMNS}
    cols.update({c: getattr(t, c) for c, _ in OPTIONAL_COLUMNS if getattr(t, c) is not None})
    meta = _meta(raw, key)

    def write(sink) -> None:
        import pyarrow as pa

        batch = pa.record_batch([_arrow(pa, v) for v in cols.values()], names=list(cols))
        info = {**meta, "crc32": _checksums(cols) if key is not None else None}
        schema = batch.schema.with_metadata({"rooflens": json.dumps(info, default=str)})
        with pa.ipc.new_file(sink, schema) as w:
            w.write_batch(batch)

    return write


def _arrow(pa, v: np.ndarray):
    """A numpy column as an Arrow array over the same bytes (``pa.array`` would also check for a masked array,
    importing numpy.ma: 50 ms of a small trace's first report)."""
    v = np.ascontiguousarray(v)
    if v.dtype.kind not in "iuf":  # Arrow packs booleans in bits: numpy's bytes are not its buffer
        return pa.array(v)
    return pa.Array.from_buffers(pa.from_numpy_dtype(v.dtype), len(v), [None, pa.py_buffer(v)])


def to_ipc(raw: RawTrace) -> bytes:
    """One host's columns as Arrow IPC bytes (what a Ray task hands back to the driver)."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    _writer(raw, None)(sink)
    return sink.getvalue().to_pybytes()


def from_ipc(data) -> RawTrace:
    import pyarrow as pa

    raw = _read(pa.BufferReader(data), None)
    assert raw is not None
    return raw


def _save(loc: Path, write: Callable[[object], None]) -> bool:
    try:
        loc.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=loc.parent, prefix=".tmp-", suffix=".arrow")
        try:
            with os.fdopen(fd, "wb") as fh:
                write(fh)
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


def _column(chunked) -> np.ndarray:
    """An Arrow column as numpy, read-only and without a copy where it is one chunk: a view of the mapped
    cache file (the mapping lives as long as the array), paged in as the analysis reads it."""
    if chunked.num_chunks == 1 and chunked.null_count == 0:
        return chunked.chunk(0).to_numpy(zero_copy_only=True)
    return chunked.to_numpy().copy()


def _read(src, key: dict | None) -> RawTrace | None:
    import pyarrow as pa

    reader = pa.ipc.open_file(src)
    meta = json.loads(reader.schema.metadata[b"rooflens"])
    if key is not None and meta.get("key") != key:
        return None
    batch = reader.read_all()
    cols = {c: _column(batch.column(c)) for c in COLUMNS}
    cols.update({c: _column(batch.column(c)) for c, _ in OPTIONAL_COLUMNS if c in batch.schema.names})
    if meta.get("crc32") is not None and _checksums(cols) != meta["crc32"]:
        return None
    n = len(cols["start_ps"])
    table = EventTable(
        host=cols["host"].astype(np.int32, copy=False), device=cols["device"].astype(np.int32, copy=False),
        line=cols["line"].astype(np.int32, copy=False), name=cols["name"].astype(np.int32, copy=False),
        program=cols["program"].astype(np.int32, copy=False), start_ps=cols["start_ps"].astype(np.int64, copy=False),
        dur_ps=cols["dur_ps"].astype(np.int64, copy=False),
        step=np.full(n, -1, np.int32), hosts=meta["hosts"], lines=meta["lines"], names=meta["names"],
        programs=meta["programs"], hlo_text={(p, k): v for p, k, v in meta["hlo_text"]},
        op_meta={(p, k): v for p, k, v in meta["op_meta"]}, program_keys=meta["program_keys"],
        origin_ns=int(meta["origin_ns"]),
        **{c: cols[c].astype(dtype, copy=False) for c, dtype in OPTIONAL_COLUMNS if c in cols})
    if meta.get("crc32") is not None:  # checked above, over these very bytes where no column was converted
        memo.known_crcs(table, {c: v for c, v in meta["crc32"].items()
                                if c in cols and getattr(table, c).dtype == cols[c].dtype})
    return RawTrace(
        meta["host"], table, [tuple(s) for s in meta["steps"]], meta["device_kind"], meta["platform"],
        notes=meta["notes"], plane_stats=meta["plane_stats"], host_events=[tuple(h) for h in meta["host_events"]],
        hlo_protos={k: base64.b64decode(v) for k, v in meta["hlo_protos"].items()},
        events_total=int(meta["events_total"]),
        dispatches={k: np.asarray(v, np.int64) for k, v in meta.get("dispatches", {}).items()},
        end_ps=int(meta.get("end_ps", 0)), session_clock=bool(meta.get("session_clock", False)),
        steps_ran=bool(meta.get("steps_ran", False)), framework=str(meta.get("framework") or ""))
