"""What an Nsight Systems export says, as numpy columns: its GPU work, the calls that launched it, the NVTX
ranges of the launching threads, its clock and its GPUs.

Names are coded, never one Python string per row: kernels by their ``StringIds`` id, memcpy by their kind, NVTX
ranges by ``textId`` or, for inline ``text``, in Arrow (a dictionary encoding of the column). PyTorch's
``emit_nvtx`` appends each call's arguments to an op's range name (``aten::mm, seq = 12, op_id = 40``): they are
cut in Arrow before the encoding, so a run's millions of calls name a few hundred ops.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rooflens.trace import events as E
from rooflens.trace.formats import tsl
from rooflens.trace.formats.nsys_sqlite import db as D
from rooflens.trace.groupby import unique_values

KERNEL_WORK, MEMCPY_WORK, MEMSET_WORK = 0, 1, 2
#: CUPTI's CUpti_ActivityMemcpyKind (cupti_activity.h), the ids of the export's ENUM_CUDA_MEMCPY_OPER
MEMCPY_KINDS = {1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array", 4: "Array-to-Host",
                5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array", 8: "Device-to-Device",
                9: "Host-to-Host", 10: "Peer-to-Peer"}
#: Nsight's memory kinds (the export's ENUM_CUDA_MEM_KIND: CUDA_MEMOPR_MEMORY_KIND_PAGEABLE = 0, _PINNED = 1,
#: _DEVICE = 2, …, _UNKNOWN = 7), of a memcpy's srcKind/dstKind and a memset's memKind
MEM_KIND_PAGEABLE, MEM_KIND_PINNED = 0, 1
MEMSET_NAME = "[CUDA memset]"  # Nsight's own labels for the transfers: "[CUDA memcpy Host-to-Device]", …
#: XSpace GPU plane stats (xla/tsl/profiler/utils/xplane_schema.h: clock_rate in kHz, memory_bandwidth in
#: bytes/s, memory_size in bytes, core_count = SMs) from TARGET_INFO_GPU's columns (clockRate in Hz), so chip
#: inference reads an export (and an nsys-jax archive's device-metadata.parquet, a copy of the table) as it
#: reads an XSpace
GPU_PLANE_STATS = (("clock_rate", "clockRate", 1e-3), ("core_count", "smCount", 1),
                   ("memory_bandwidth", "memoryBandwidth", 1), ("memory_size", "totalMemory", 1),
                   ("compute_cap_major", "computeMajor", 1), ("compute_cap_minor", "computeMinor", 1),
                   ("l2_cache_size", "l2CacheSize", 1))
#: what PyTorch's emit_nvtx appends to an op's range name, in its order (torch/csrc/profiler: "<op>, seq = N,
#: op_id = N, sizes = […], input_op_ids = […]"): the name is cut at the first of them present
TORCH_ARGS = (", seq = ", ", op_id = ", ", sizes = ", ", input_op_ids = ")


@dataclass
class Work:
    """Every kernel, memcpy and memset: times in ns on the export's clock, its names coded."""

    start: np.ndarray
    end: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    corr: np.ndarray  # correlationId (-1: none)
    pid: np.ndarray  # globalPid (-1: none)
    kind: np.ndarray  # KERNEL_WORK / MEMCPY_WORK / MEMSET_WORK
    name: np.ndarray  # codes into names
    names: list[str]
    categories: dict[str, str] = field(default_factory=dict)  # a transfer's name → its category
    in_graphs: int = 0  # kernels launched inside CUDA graphs
    copy_bytes: np.ndarray | None = None  # a memcpy's or memset's bytes (-1: a kernel, or not in the export)
    host_pinned: np.ndarray | None = None  # its host memory pinned 1 / pageable 0 (-1: no host side, not said)

    def __len__(self) -> int:
        return len(self.start)


def _kernel_name_column(cols: set[str]) -> str | None:
    return next((c for c in ("shortName", "demangledName", "mangledName") if c in cols), None)


def _memcpy_labels(db: D.Export) -> dict[int, str]:
    labels = dict(MEMCPY_KINDS)
    for row in db.records("ENUM_CUDA_MEMCPY_OPER"):
        if isinstance(row.get("id"), int) and row.get("label"):
            labels[row["id"]] = str(row["label"])
    return labels


def transfer_category(label: str) -> str:
    """A memcpy's category by its kind: through the host (PCIe), between GPUs, or within one."""
    return "host transfer" if "Host" in label else "collective" if "Peer" in label else "copy/transpose"


def _work_columns(db: D.Export, table: str, extra: list[str]) -> tuple[np.ndarray, D.Scan]:
    """start, end, device, stream, correlation id, process of a work table as an int64 (rows, 6) array (-1 for a
    NULL, or a column an older export lacks), and the scan holding the ``extra`` columns it has."""
    cols = db.columns(table)
    opt = [c for c in ("deviceId", "streamId", "correlationId", "globalPid") if c in cols]
    got = db.scan(table, ["start", "end", *opt, *[c for c in extra if c in cols]])
    out = np.full((len(got), 6), -1, np.int64)
    out[:, 0], out[:, 1] = got.get("start"), got.get("end")
    for k, c in enumerate(("deviceId", "streamId", "correlationId", "globalPid")):
        if c in opt:
            out[:, 2 + k] = got.get(c, -1)
    return out, got


def _host_pinned(got: D.Scan, kinds: list[str]) -> np.ndarray:
    """1 where any of the host-side memory kinds ``kinds`` is pinned, 0 pageable (checked first), else -1 (SQL's
    CASE WHEN any = 0 THEN 0 WHEN any = 1 THEN 1 ELSE -1, a NULL matching neither)."""
    out = np.full(len(got), -1, np.int64)
    if not kinds:
        return out
    def any_is(kind: int) -> np.ndarray:
        return np.logical_or.reduce([(got.ints[k] == kind) & ~got.nulls[k] for k in kinds])

    out[any_is(MEM_KIND_PINNED)] = 1
    out[any_is(MEM_KIND_PAGEABLE)] = 0
    return out


def work(db: D.Export) -> Work:
    """The export's kernels, memcpy and memset, one row each."""
    parts, names, categories, in_graphs = [], [], {}, 0
    copies = []  # per part: (bytes, host pinned) columns
    cols = db.columns(D.KERNEL)
    name_col = _kernel_name_column(cols)
    if name_col and cols >= {"start", "end"}:
        k, got = _work_columns(db, D.KERNEL, [name_col, "graphId"])
        ids, inv = np.unique(got.get(name_col), return_inverse=True)
        words = db.strings(",".join(map(str, ids.tolist())) or "NULL")
        names += [words.get(int(i), f"kernel {int(i)}") for i in ids]
        parts.append((k, KERNEL_WORK, inv.reshape(-1)))
        copies.append(np.full((len(k), 2), -1, np.int64))
        if "graphId" in cols:
            in_graphs = int(((got.ints["graphId"] != 0) & ~got.nulls["graphId"]).sum())
    if (mc := db.columns(D.MEMCPY)) >= {"start", "end", "copyKind"}:
        m, got = _work_columns(db, D.MEMCPY, ["copyKind", "bytes", "srcKind", "dstKind"])
        nbytes = got.get("bytes", -1) if "bytes" in mc else np.full(len(m), -1, np.int64)
        copies.append(np.stack([nbytes, _host_pinned(got, [c for c in ("srcKind", "dstKind") if c in mc])], 1))
        kinds, inv = np.unique(got.get("copyKind"), return_inverse=True)
        labels = _memcpy_labels(db)
        words = [f"[CUDA memcpy {labels.get(int(c), f'kind {int(c)}')}]" for c in kinds]
        categories.update({w: transfer_category(w) for w in words})
        parts.append((m, MEMCPY_WORK, len(names) + inv.reshape(-1)))
        names += words
    if (sc := db.columns(D.MEMSET)) >= {"start", "end"}:
        s, got = _work_columns(db, D.MEMSET, ["bytes", "memKind"])
        nbytes = got.get("bytes", -1) if "bytes" in sc else np.full(len(s), -1, np.int64)
        copies.append(np.stack([nbytes, _host_pinned(got, ["memKind"] if "memKind" in sc else [])], 1))
        if len(s):
            categories[MEMSET_NAME] = "data movement"
            parts.append((s, MEMSET_WORK, np.full(len(s), len(names))))
            names.append(MEMSET_NAME)
    if not parts:
        return Work(*(np.zeros(0, np.int64),) * 8, [])
    cols6 = np.concatenate([p[0] for p in parts])
    kind = np.concatenate([np.full(len(p[0]), p[1], np.int8) for p in parts])
    copy = np.concatenate(copies)
    return Work(cols6[:, 0], cols6[:, 1], cols6[:, 2], cols6[:, 3], cols6[:, 4], cols6[:, 5], kind,
                np.concatenate([p[2] for p in parts]).astype(np.int64), names, categories, in_graphs,
                copy[:, 0], copy[:, 1].astype(np.int8))


def launches(db: D.Export, w: Work) -> tuple[np.ndarray, np.ndarray, int, np.ndarray | None]:
    """Each work row's launching call: (its thread's globalTid, its start in ns; -1 where the export has
    none), how many runtime rows were read, and every thread that made a runtime call (sorted; None where
    the table was not read). Joined on (process, correlationId): ids repeat across processes."""
    n = len(w)
    none = np.full(n, -1, np.int64)
    if not (db.columns(D.RUNTIME) >= {"correlationId", "globalTid", "start"}):
        return none, none.copy(), 0, None
    # every runtime call, kept where its correlation id is some work's (in numpy: SQL's IN over the work tables
    # took longer than reading the whole table)
    got = db.scan(D.RUNTIME, ["correlationId", "globalTid", "start"])
    threads = unique_values(got.ints["globalTid"][~got.nulls["globalTid"]])  # the ranges' threads: one read
    rt = np.stack([got.get("correlationId", -1), got.get("globalTid", -1), got.get("start")], 1)
    ids = np.sort(w.corr[w.corr >= 0])
    at = np.clip(np.searchsorted(ids, rt[:, 0]), 0, max(len(ids) - 1, 0))
    rt = rt[(rt[:, 0] >= 0) & (ids[at] == rt[:, 0])] if len(ids) else rt[:0]
    if not len(rt) or not n:
        return none, none.copy(), len(rt), threads
    mask = np.int64((1 << D.TID_BITS) - 1)
    rt_pid = np.where(rt[:, 1] >= 0, rt[:, 1] & ~mask, -1)
    pid = w.pid
    if (pid < 0).all():  # an export without the work's process: correlation ids alone
        pid, rt_pid = np.zeros(n, np.int64), np.zeros(len(rt), np.int64)
    _, inv = E.unique_rows(np.concatenate([pid, rt_pid]), np.concatenate([w.corr, rt[:, 0]]))
    lut = np.full(int(inv.max()) + 1, -1, np.int64)
    lut[inv[n:]] = np.arange(len(rt))
    hit = np.where(w.corr >= 0, lut[inv[:n]], -1)
    at = np.clip(hit, 0, None)
    return np.where(hit >= 0, rt[at, 1], -1), np.where(hit >= 0, rt[at, 2], -1), len(rt), threads


@dataclass
class Ranges:
    """NVTX push/pop ranges on the threads that launched GPU work: times in ns, names coded (the last word
    is "", a range without a name)."""

    thread: np.ndarray
    start: np.ndarray
    end: np.ndarray
    name: np.ndarray  # codes into words
    words: list[str]

    def __len__(self) -> int:
        return len(self.start)


def torch_args_pattern() -> str:
    """A regular expression (RE2's syntax and Python's) matching a range name's tail from the first of PyTorch's
    per-call arguments it holds."""
    return D.literal_pattern(TORCH_ARGS)


def range_columns(db: D.Export) -> tuple | None:
    """The arguments of :meth:`.db.Export.scan` that :func:`ranges` reads the NVTX table with (None: it has no
    ranges to read)."""
    cols = db.columns(D.NVTX)
    if not (cols >= {"start", "eventType"}):
        return None
    opt = [c for c in ("end", "globalTid", "textId") if c in cols]
    return D.NVTX, ["start", "eventType", *opt], "text" if "text" in cols else None, TORCH_ARGS


def ranges(db: D.Export, stop_ns: int, threads: np.ndarray | None = None) -> Ranges:
    """The push/pop ranges on the threads that made CUDA runtime calls (an unclosed one ends at ``stop_ns``):
    the whole table read, filtered in numpy (SQL's WHERE and IN, as before: a NULL matches neither).
    ``threads``: those threads, sorted, where :func:`launches` has read them (else the runtime table is read)."""
    cols = db.columns(D.NVTX)
    read = range_columns(db)
    if read is None:
        return Ranges(*(np.zeros(0, np.int64),) * 4, [""])
    got = db.scan(*read)
    keep = (got.ints["eventType"] == db.event_type(D.PUSH_POP, D.PUSH_POP_ID)) & ~got.nulls["eventType"]
    if "globalTid" in cols and db.columns(D.RUNTIME) >= {"globalTid"}:  # only launching threads give context
        if threads is None:
            rt = db.scan(D.RUNTIME, ["globalTid"])
            threads = unique_values(rt.ints["globalTid"][~rt.nulls["globalTid"]])
        tid = got.ints["globalTid"]
        at = np.clip(np.searchsorted(threads, tid), 0, max(len(threads) - 1, 0))
        keep &= ~got.nulls["globalTid"] & (threads[at] == tid) if len(threads) else np.zeros(len(got), bool)
    rows = np.flatnonzero(keep)
    start = got.get("start", rows=rows)
    end = got.get("end", -1, rows) if "end" in cols else np.full(len(rows), -1, np.int64)
    thread = got.get("globalTid", -1, rows) if "globalTid" in cols else np.full(len(rows), -1, np.int64)
    ids = got.get("textId", -1, rows) if "textId" in cols else np.full(len(rows), -1, np.int64)
    # the inline names of the rows kept, coded anew in order of first appearance (as a filtered query's would be)
    inline = got.codes[rows] if got.codes is not None else np.full(len(rows), -1, np.int64)
    inline_words = list(got.words)
    if len(rows) < len(got):  # some rows left out: the words of those kept only
        used, first = np.unique(inline[inline >= 0], return_index=True)
        order = used[np.argsort(first)]
        recode = np.full(len(got.words) + 1, -1, np.int64)
        recode[order] = np.arange(len(order))
        inline = np.where(inline >= 0, recode[inline], -1)
        inline_words = [got.words[int(c)] for c in order]
    by_id = ids >= 0
    u_ids, id_inv = np.unique(ids[by_id], return_inverse=True)
    id_words = db.strings(",".join(map(str, u_ids.tolist())) or "NULL") if "textId" in cols else {}
    words = [id_words.get(int(i), "") for i in u_ids] + inline_words + [""]
    code = np.full(len(rows), len(words) - 1, np.int64)
    code[by_id] = id_inv.reshape(-1)
    named = ~by_id & (inline >= 0)
    code[named] = len(u_ids) + inline[named]
    return Ranges(thread, start, np.where(end >= 0, end, stop_ns), code, words)


def clock(db: D.Export, w: Work) -> tuple[int, int]:
    """(the session's start on the export's clock, ns; its UTC time, ns since the epoch): an export without them
    keeps its own clock (origin 0)."""
    start = db.first("SELECT startTime FROM ANALYSIS_DETAILS") if "startTime" in db.columns("ANALYSIS_DETAILS") \
        else None
    session = db.first("SELECT utcEpochNs, systemClockNs FROM TARGET_INFO_SESSION_START_TIME") \
        if db.columns("TARGET_INFO_SESSION_START_TIME") >= {"utcEpochNs", "systemClockNs"} else None
    base = start[0] if start and start[0] is not None else session[1] if session and session[1] is not None else 0
    base = min(int(base), int(w.start.min()))  # never a negative time
    origin = 0
    if session and session[0] is not None and session[1] is not None:
        origin = int(session[0]) + (base - int(session[1]))
    return base, origin


def stop_ns(db: D.Export) -> int | None:
    """Where the session stopped on the export's clock (``ANALYSIS_DETAILS.stopTime``, ns), when the export says."""
    row = db.first("SELECT stopTime FROM ANALYSIS_DETAILS") if "stopTime" in db.columns("ANALYSIS_DETAILS") else None
    return int(row[0]) if row and isinstance(row[0], int) else None


def number_stat(v, scale=1):
    """A plane stat's number: an integral one as int, else float; None for what is not a number."""
    if isinstance(v, bool) or not isinstance(v, int | float) or v != v:
        return None
    x = v * scale
    return int(x) if float(x).is_integer() else float(x)


def gpu_vendor(name: str) -> str:
    """A GPU's vendor by its name's first word (``NVIDIA A100-SXM4-40GB``); NVIDIA's where it names none."""
    word = name.split()[0] if name.split() else ""
    return word if word.lower() in ("nvidia", "amd") else "NVIDIA"


def gpu_plane_stats(row: dict) -> dict:
    """One GPU's row of TARGET_INFO_GPU (column → value) as XSpace GPU plane stats (:data:`GPU_PLANE_STATS`,
    ``device_name``, ``device_vendor``, ``chip_name``)."""
    name = str(row.get("name") or "")
    stats: dict = {"device_name": name, "device_vendor": gpu_vendor(name)} if name else {}
    for key, col, scale in GPU_PLANE_STATS:
        v = number_stat(row.get(col), scale)
        if v is not None:
            stats[key] = v
    if row.get("chipName"):
        stats["chip_name"] = str(row["chipName"])
    return stats


def gpu(db: D.Export, devices: np.ndarray) -> tuple[str, dict, list[str]]:
    """(device kind, XSpace-named plane stats, notes) from TARGET_INFO_GPU: the first device's row."""
    rows = db.records("TARGET_INFO_GPU")
    if not rows:
        return "GPU", {}, ["the export has no TARGET_INFO_GPU table: the GPU is unknown (give --chip)"]
    first = int(devices.min()) if len(devices) else 0
    row = next((r for key in ("cuDevice", "id") for r in rows if r.get(key) == first), rows[0])
    name = str(row.get("name") or "")
    stats = gpu_plane_stats(row)
    models = {str(r.get("name")) for r in rows if r.get("name")}
    notes = [f"the GPU, from the export's TARGET_INFO_GPU: {name}"] if name else []
    if len(models) > 1:
        notes.append(f"the export lists several GPU models ({', '.join(sorted(models))}): the roofline is {name}'s")
    return name or "GPU", stats, notes


def xla_devices(db: D.Export, device: np.ndarray) -> np.ndarray:
    """Device ids as XLA numbers them (``Xla:#global=G,…#``, the name XLA gives each CUDA device through
    NVTX, in TARGET_INFO_NVTX_CUDA_DEVICE: :func:`rooflens.trace.formats.tsl.xla_device`) where the export has
    them, else the CUDA ``deviceId``."""
    named = {}
    for r in db.records("TARGET_INFO_NVTX_CUDA_DEVICE"):
        hit = tsl.xla_device(str(r.get("name") or ""))
        if hit is not None and hit[0] == "Xla" and isinstance(r.get("deviceId"), int):
            named[r["deviceId"]] = hit[1].global_id
    if not named or len(set(named.values())) != len(named):
        return device
    ids = unique_values(device)
    lut = {int(d): named.get(int(d), int(d)) for d in ids}
    if len(set(lut.values())) != len(lut):  # a clash with an unnamed device: keep CUDA's numbering
        return device
    return np.asarray([lut[int(d)] for d in ids], np.int64)[np.searchsorted(ids, device)]
