"""Device memory snapshots (``jax.profiler.device_memory_profile()``): the pprof ``Profile`` protobuf.

The message classes are built at import from descriptors written here after the public spec
(github.com/google/pprof, proto/profile.proto): Profile, ValueType, Sample, Label, Mapping,
Location, Line, Function. Decoding is the ``protobuf`` library's.
"""

from __future__ import annotations

import gzip
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache

from rooflens.capture.common import ROOFLENS_DIR, is_library, real_path, under
from rooflens.errors import RooflensError

# (message, [(field name, number, type, label, message type)])  — type/label names from FieldDescriptorProto
_SPEC = {
    "ValueType": [("type", 1, "int64", "optional", None), ("unit", 2, "int64", "optional", None)],
    "Label": [("key", 1, "int64", "optional", None), ("str", 2, "int64", "optional", None),
              ("num", 3, "int64", "optional", None), ("num_unit", 4, "int64", "optional", None)],
    "Sample": [("location_id", 1, "uint64", "repeated", None), ("value", 2, "int64", "repeated", None),
               ("label", 3, "message", "repeated", "Label")],
    "Mapping": [("id", 1, "uint64", "optional", None), ("memory_start", 2, "uint64", "optional", None),
                ("memory_limit", 3, "uint64", "optional", None), ("file_offset", 4, "uint64", "optional", None),
                ("filename", 5, "int64", "optional", None), ("build_id", 6, "int64", "optional", None)],
    "Line": [("function_id", 1, "uint64", "optional", None), ("line", 2, "int64", "optional", None),
             ("column", 3, "int64", "optional", None)],
    "Location": [("id", 1, "uint64", "optional", None), ("mapping_id", 2, "uint64", "optional", None),
                 ("address", 3, "uint64", "optional", None), ("line", 4, "message", "repeated", "Line"),
                 ("is_folded", 5, "bool", "optional", None)],
    "Function": [("id", 1, "uint64", "optional", None), ("name", 2, "int64", "optional", None),
                 ("system_name", 3, "int64", "optional", None), ("filename", 4, "int64", "optional", None),
                 ("start_line", 5, "int64", "optional", None)],
    "Profile": [("sample_type", 1, "message", "repeated", "ValueType"), ("sample", 2, "message", "repeated", "Sample"),
                ("mapping", 3, "message", "repeated", "Mapping"), ("location", 4, "message", "repeated", "Location"),
                ("function", 5, "message", "repeated", "Function"), ("string_table", 6, "string", "repeated", None),
                ("drop_frames", 7, "int64", "optional", None), ("keep_frames", 8, "int64", "optional", None),
                ("time_nanos", 9, "int64", "optional", None), ("duration_nanos", 10, "int64", "optional", None),
                ("period_type", 11, "message", "optional", "ValueType"), ("period", 12, "int64", "optional", None),
                ("comment", 13, "int64", "repeated", None),
                ("default_sample_type", 14, "int64", "optional", None)],
}


@lru_cache(maxsize=1)
def profile_class():
    """The pprof ``Profile`` message class (built once from the descriptors above)."""
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError:  # pragma: no cover - protobuf is a dependency
        raise RooflensError("reading device memory profiles needs the 'protobuf' package.") from None
    fd = descriptor_pb2.FileDescriptorProto(name="rooflens_pprof_profile.proto", package="rooflens.pprof",
                                            syntax="proto3")
    types = descriptor_pb2.FieldDescriptorProto
    for msg, fields in _SPEC.items():
        m = fd.message_type.add(name=msg)
        for name, number, typ, label, ref in fields:
            f = m.field.add(name=name, number=number, type=getattr(types, f"TYPE_{typ.upper()}"),
                            label=getattr(types, f"LABEL_{label.upper()}"))
            if ref:
                f.type_name = f".rooflens.pprof.{ref}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("rooflens.pprof.Profile"))


@dataclass
class MemorySnapshot:
    """One ``device_memory_profile()``: live bytes in all, by device, by kind and by allocation site."""

    label: str
    total_bytes: float
    by_device: dict = field(default_factory=dict)
    by_kind: dict = field(default_factory=dict)  # "buffer", "executable", …
    by_site: dict = field(default_factory=dict)  # innermost Python function that allocated it


#: the file (relative to the rooflens package) where the captures' drain barrier
#: (``rooflens.capture.common.drain_devices``) allocates its one byte
DRAIN_FILE = "capture/common.py"
#: a recorded frame in an installed package or a Python's standard library, on whichever machine it was taken
_RECORDED_LIBRARY = re.compile(r"/(site|dist)-packages/|/lib/python3\.\d+/")


@lru_cache(maxsize=4096)
def _rooflens_file(filename: str) -> str | None:
    """Which file of the rooflens package a snapshot's frame is in (``capture/common.py``), or None: by its real path
    under this package's directory, or (recorded by a rooflens installed elsewhere: another checkout, another
    machine's) by its path ending in ``rooflens/`` and the path of a file this package has. A user's own file in a
    folder named ``rooflens`` (a clone's ``tests/…``, a project of that name) is none of them."""
    path = real_path(filename)
    if under(path, (ROOFLENS_DIR,)):
        return os.path.relpath(path, ROOFLENS_DIR).replace(os.sep, "/")
    _, found, tail = filename.replace("\\", "/").rpartition("/rooflens/")
    return tail if found and os.path.isfile(os.path.join(ROOFLENS_DIR, *tail.split("/"))) else None


@lru_cache(maxsize=4096)
def _library_frame(filename: str) -> bool:
    """Whether a snapshot's frame is library code (jax's, rooflens's own, an installed package's, the standard
    library's), judged here and by the path it was recorded with: a snapshot captured by a rooflens installed
    elsewhere names that installation's files, which this one's paths do not hold."""
    return (is_library(filename) or bool(_RECORDED_LIBRARY.search(filename.replace("\\", "/")))
            or _rooflens_file(filename) is not None)


def _is_drain(frames: list[tuple[str, str]]) -> bool:
    """Whether an allocation was made by the drain barrier: its innermost frame outside jax's internals is the
    drain's file (a snapshot taken as the trace stops holds that byte), wherever the rooflens that captured it was
    installed; another of rooflens's files, or the user's, before it: not the drain."""
    for _, filename in frames:
        own = _rooflens_file(filename) if filename else None
        if own == DRAIN_FILE:
            return True
        if own is not None or not _library_frame(filename):
            return False
    return False


def parse_snapshot(data: bytes, label: str = "") -> MemorySnapshot:
    """Decode one pprof snapshot (gzipped or not)."""
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError):
            raise RooflensError(f"memory snapshot {label or ''} is a damaged gzip file.") from None
    msg = profile_class()()
    try:
        msg.ParseFromString(data)
    except Exception:
        raise RooflensError(f"memory snapshot {label or ''} is not a pprof profile.") from None
    strings = list(msg.string_table)
    types = [strings[v.type] if v.type < len(strings) else "" for v in msg.sample_type]
    space = types.index("space") if "space" in types else (len(types) - 1)
    funcs = {f.id: (strings[f.name], strings[f.filename]) for f in msg.function}
    locs = {loc.id: [funcs.get(line.function_id, ("", "")) for line in loc.line] for loc in msg.location}
    snap = MemorySnapshot(label, 0.0)
    for s in msg.sample:
        frames = [f for lid in s.location_id for f in locs.get(lid, []) if f[0]]
        if _is_drain(frames):
            continue  # the capture's own buffer (its drain barrier's one byte), not the program's memory
        nbytes = float(s.value[space]) if len(s.value) > space else 0.0
        snap.total_bytes += nbytes
        labels = {strings[lb.key]: (strings[lb.str] if lb.str else lb.num) for lb in s.label}
        dev = str(labels.get("device", "?"))
        snap.by_device[dev] = snap.by_device.get(dev, 0.0) + nbytes
        kind = str(labels.get("kind", "?"))
        snap.by_kind[kind] = snap.by_kind.get(kind, 0.0) + nbytes
        user = [f for f in frames if not _library_frame(f[1])]
        site = (user or frames or [("?", "")])[0][0]
        snap.by_site[site] = snap.by_site.get(site, 0.0) + nbytes
    for d in (snap.by_device, snap.by_kind, snap.by_site):
        items = sorted(d.items(), key=lambda kv: -kv[1])
        d.clear()
        d.update(items)
    return snap
