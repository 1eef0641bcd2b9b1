"""Nsight Systems SQLite exports (``nsys export --type sqlite``) → :class:`RawTrace`.

The device work is every kernel, memcpy and memset (one device per ``deviceId``, one line per CUDA
stream), timed in ns from the session start (``ANALYSIS_DETAILS.startTime``; the table's origin is
the session's UTC start, so several hosts' exports share one time axis). Each is launched by a CUDA
runtime or driver call with the same ``correlationId`` in the same process: that call's thread and
start say which NVTX ranges were open when it was launched (:mod:`.nest`).

* **JAX** (XLA's ``TSL`` ranges present, :mod:`rooflens.trace.formats.tsl`): a kernel belongs to the
  innermost ``Thunk`` range open at its launch (its HLO op) and to the innermost ``XlaModule`` range
  (its program, ``<module>(<program id>)``): the same table an XSpace GPU trace gives. Kernels launched
  inside a compilation range (the GPU autotuner's measurements) are compilation, not the program:
  counted in a note. Memcpy/memset outside any op (``jax.device_put``) stay, as host transfers.
  Steps are the main program's executions; the host's XLA compilations are host events.
* **Anything else** (PyTorch, a JAX without XLA's ranges): kernels grouped by kernel name
  (``shortName``), each with the NVTX range path it was most often launched under as its scope; NCCL
  kernels are collectives (by name), memcpy/memset host transfers or device copies by their kind.
  There is no HLO, so no roofline: said once in the notes.

:func:`read_nsys_report` reads a raw ``.nsys-rep`` through ``nsys export`` when Nsight Systems is
installed (into a temporary file in the user cache, never beside the report).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rooflens.errors import RooflensError
from rooflens.trace import events as E
from rooflens.trace.formats import tsl
from rooflens.trace.formats.nsys_sqlite import db as D
from rooflens.trace.formats.nsys_sqlite.nest import Nest
from rooflens.trace.formats.raw import HOST_EVENT_MIN_PS, Progress, RawTrace

KERNEL_WORK, MEMCPY_WORK, MEMSET_WORK = 0, 1, 2
#: CUPTI's CUpti_ActivityMemcpyKind (cupti_activity.h), the ids of the export's ENUM_CUDA_MEMCPY_OPER
MEMCPY_KINDS = {1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array", 4: "Array-to-Host",
                5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array", 8: "Device-to-Device",
                9: "Host-to-Host", 10: "Peer-to-Peer"}
MEMSET_NAME = "[CUDA memset]"  # Nsight's own labels for the transfers: "[CUDA memcpy Host-to-Device]", …
#: XSpace GPU plane stats (xla/tsl/profiler/utils/xplane_schema.h; clock_rate in kHz) from TARGET_INFO_GPU's
#: columns (clockRate in Hz), so chip inference reads an export as it reads an XSpace
GPU_PLANE_STATS = (("clock_rate", "clockRate", 1e-3), ("core_count", "smCount", 1),
                   ("memory_bandwidth", "memoryBandwidth", 1), ("memory_size", "totalMemory", 1),
                   ("compute_cap_major", "computeMajor", 1), ("compute_cap_minor", "computeMinor", 1),
                   ("l2_cache_size", "l2CacheSize", 1))
_XLA_DEVICE = re.compile(r"Xla:#.*?global=(\d+)")
#: what PyTorch's emit_nvtx appends to an op's range name (torch/csrc/profiler: ", seq = N, op_id = N, sizes = …")
_TORCH_ARGS = re.compile(r", (?:seq|op_id|sizes|input_op_ids) = .*$", re.S)


def read_nsys_sqlite(path: Path, progress: Progress = None) -> RawTrace:
    """An Nsight Systems SQLite export → :class:`RawTrace` (see the module doc)."""
    with D.Export(path) as db:
        if not db.is_nsys():
            raise RooflensError(f"{path} is an SQLite database but not an Nsight Systems export (it has no "
                                f"{D.KERNEL} or {D.NVTX} table): export a report with `nsys export --type sqlite`.")
        return _read(db, path, path.name.removesuffix(".sqlite"), progress)


def export_command(report: Path | str, output: Path | str) -> list[str]:
    """The ``nsys export`` that writes a report's SQLite export."""
    return ["nsys", "export", "--type", "sqlite", "--output", str(output), str(report)]


def read_nsys_report(path: Path, progress: Progress = None) -> RawTrace:
    """A raw ``.nsys-rep`` (Nsight's own format: only ``nsys export`` reads it), exported to a temporary
    SQLite file in the user cache and read; without ``nsys`` on PATH, one sentence saying what to run."""
    sqlite_name = path.with_name(path.name.removesuffix(".nsys-rep") + ".sqlite")
    exe = shutil.which("nsys")
    if exe is None:
        raise RooflensError(f"{path} is a raw Nsight Systems report, which only Nsight Systems reads: run "
                            f"`{' '.join(export_command(path, sqlite_name))}` (Nsight Systems), then "
                            f"`rooflens report {sqlite_name}`.")
    from rooflens.userdirs import cache_dir

    root = cache_dir() / "nsys-export"
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix="export-"))
    try:
        out = tmp / sqlite_name.name
        cmd = [exe, *export_command(path, out)[1:]]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not out.is_file():
            said = (done.stderr or done.stdout or "").strip().splitlines()
            raise RooflensError(f"`nsys export` could not export {path} (exit {done.returncode}"
                                f"{': ' + said[-1] if said else ''}).")
        with D.Export(out) as db:
            return _read(db, path, path.name.removesuffix(".nsys-rep"), progress)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- the tables ------------------------------------------------------------------------------------

@dataclass
class _Work:
    """Every kernel, memcpy and memset: times in ns on the export's clock, its names coded."""

    start: np.ndarray
    end: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    corr: np.ndarray  # correlationId (-1: none)
    pid: np.ndarray  # globalPid (-1: none)
    kind: np.ndarray  # KERNEL_WORK / MEMCPY_WORK / MEMSET_WORK
    name: np.ndarray  # codes into names
    graph: np.ndarray  # bool: launched inside a CUDA graph
    names: list[str]
    categories: dict[str, str] = field(default_factory=dict)  # a transfer's name → its category

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


def _transfer_category(label: str) -> str:
    """A memcpy's category by its kind: through the host (PCIe), between GPUs, or within one."""
    return "host transfer" if "Host" in label else "collective" if "Peer" in label else "copy/transpose"


def _work(db: D.Export) -> _Work:
    parts, names, categories = [], [], {}
    cols = db.columns(D.KERNEL)
    name_col = _kernel_name_column(cols)
    if name_col:
        graph = "COALESCE(graphId, 0)" if "graphId" in cols else "0"
        k = db.ints(f'SELECT start, "end", deviceId, streamId, COALESCE(correlationId, -1), COALESCE(globalPid, -1), '
                    f"{name_col}, {graph} FROM {D.KERNEL}", 8)
        ids, inv = np.unique(k[:, 6], return_inverse=True)
        words = db.strings(f"SELECT DISTINCT {name_col} FROM {D.KERNEL}")
        names += [words.get(int(i), f"kernel {int(i)}") for i in ids]
        parts.append((k[:, :6], np.full(len(k), KERNEL_WORK, np.int8), inv.reshape(-1), k[:, 7] != 0))
    if db.columns(D.MEMCPY) >= {"copyKind", "deviceId"}:
        m = db.ints(f'SELECT start, "end", deviceId, streamId, COALESCE(correlationId, -1), COALESCE(globalPid, -1), '
                    f"copyKind FROM {D.MEMCPY}", 7)
        kinds, inv = np.unique(m[:, 6], return_inverse=True)
        labels = _memcpy_labels(db)
        words = [f"[CUDA memcpy {labels.get(int(c), f'kind {int(c)}')}]" for c in kinds]
        categories.update({w: _transfer_category(w) for w in words})
        parts.append((m[:, :6], np.full(len(m), MEMCPY_WORK, np.int8), len(names) + inv.reshape(-1),
                      np.zeros(len(m), bool)))
        names += words
    if db.columns(D.MEMSET) >= {"deviceId"}:
        s = db.ints(f'SELECT start, "end", deviceId, streamId, COALESCE(correlationId, -1), COALESCE(globalPid, -1) '
                    f"FROM {D.MEMSET}", 6)
        if len(s):
            categories[MEMSET_NAME] = "data movement"
            parts.append((s, np.full(len(s), MEMSET_WORK, np.int8), np.full(len(s), len(names)),
                          np.zeros(len(s), bool)))
            names.append(MEMSET_NAME)
    if not parts:
        return _Work(*(np.zeros(0, np.int64),) * 8, np.zeros(0, bool), [])
    cols6 = np.concatenate([p[0] for p in parts])
    return _Work(cols6[:, 0], cols6[:, 1], cols6[:, 2], cols6[:, 3], cols6[:, 4], cols6[:, 5],
                 np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts]).astype(np.int64),
                 np.concatenate([p[3] for p in parts]), names, categories)


def _launches(db: D.Export, work: _Work) -> tuple[np.ndarray, np.ndarray, int]:
    """Each work row's launching call: (its thread's globalTid, its start in ns; -1 where the export has
    none), and how many runtime rows were read. Joined on (process, correlationId): ids repeat across
    processes."""
    n = len(work)
    none = np.full(n, -1, np.int64)
    if not db.has(D.RUNTIME) or not (db.columns(D.RUNTIME) >= {"correlationId", "globalTid", "start"}):
        return none, none.copy(), 0
    sources = [t for t in (D.KERNEL, D.MEMCPY, D.MEMSET) if "correlationId" in db.columns(t)]
    wanted = " UNION ".join(f"SELECT correlationId FROM {t}" for t in sources)
    rt = db.ints(f"SELECT correlationId, COALESCE(globalTid, -1), start FROM {D.RUNTIME} "
                 f"WHERE correlationId IN ({wanted})", 3)
    if not len(rt) or not n:
        return none, none.copy(), len(rt)
    mask = np.int64((1 << D.TID_BITS) - 1)
    rt_pid = np.where(rt[:, 1] >= 0, rt[:, 1] & ~mask, -1)
    pid = work.pid
    if (pid < 0).all():  # an export without the work's process: correlation ids alone
        pid, rt_pid = np.zeros(n, np.int64), np.zeros(len(rt), np.int64)
    _, inv = E.unique_rows(np.concatenate([pid, rt_pid]), np.concatenate([work.corr, rt[:, 0]]))
    lut = np.full(int(inv.max()) + 1, -1, np.int64)
    lut[inv[n:]] = np.arange(len(rt))
    hit = np.where(work.corr >= 0, lut[inv[:n]], -1)
    return np.where(hit >= 0, rt[np.clip(hit, 0, None), 1], -1), np.where(hit >= 0, rt[np.clip(hit, 0, None), 2], -1), \
        len(rt)


@dataclass
class _Ranges:
    """NVTX push/pop ranges on the threads that launched GPU work: times in ns, names coded."""

    thread: np.ndarray
    start: np.ndarray
    end: np.ndarray
    name: np.ndarray  # codes into words
    words: list[str]

    def __len__(self) -> int:
        return len(self.start)


def _ranges(db: D.Export, stop_ns: int) -> _Ranges:
    cols = db.columns(D.NVTX)
    if not (cols >= {"start", "eventType"}):
        return _Ranges(*(np.zeros(0, np.int64),) * 4, [""])
    where = f"eventType = {db.event_type(D.PUSH_POP, D.PUSH_POP_ID)}"
    if db.has(D.RUNTIME) and "globalTid" in cols:  # only threads that launched work can give it context
        where += f" AND globalTid IN (SELECT DISTINCT globalTid FROM {D.RUNTIME})"
    text_id = "COALESCE(textId, -1)" if "textId" in cols else "-1"
    has_text = "text IS NOT NULL" if "text" in cols else "0"
    end = 'COALESCE("end", -1)' if "end" in cols else "-1"
    tid = "COALESCE(globalTid, -1)" if "globalTid" in cols else "-1"
    a = db.ints(f"SELECT start, {end}, {tid}, {text_id}, {has_text} FROM {D.NVTX} WHERE {where} ORDER BY rowid", 5)
    ids = a[:, 3]
    by_id = ids >= 0
    u_ids, id_inv = np.unique(ids[by_id], return_inverse=True)
    id_words = db.strings(f"SELECT DISTINCT textId FROM {D.NVTX} WHERE {where}") if "textId" in cols else {}
    words = [id_words.get(int(i), "") for i in u_ids]
    code = np.full(len(a), -1, np.int64)
    code[by_id] = id_inv.reshape(-1)
    inline = (a[:, 4] == 1) & ~by_id
    if (a[:, 4] == 1).any():
        index: dict[str, int] = {}
        texts = db.rows(f"SELECT text FROM {D.NVTX} WHERE {where} AND text IS NOT NULL ORDER BY rowid")
        got = np.fromiter((index.setdefault(t, len(index)) for (t,) in texts), np.int64, count=len(texts))
        code[inline] = len(words) + got[inline[a[:, 4] == 1]]
        words += list(index)
    code[code < 0] = len(words)
    words.append("")
    return _Ranges(a[:, 2], a[:, 0], np.where(a[:, 1] >= 0, a[:, 1], stop_ns), code, words)


def _clock(db: D.Export, work: _Work) -> tuple[int, int]:
    """(the session's start on the export's clock, ns; its UTC time, ns since the epoch): an export without them
    keeps its own clock (origin 0)."""
    start = db.first("SELECT startTime FROM ANALYSIS_DETAILS") if "startTime" in db.columns("ANALYSIS_DETAILS") \
        else None
    session = db.first("SELECT utcEpochNs, systemClockNs FROM TARGET_INFO_SESSION_START_TIME") \
        if db.columns("TARGET_INFO_SESSION_START_TIME") >= {"utcEpochNs", "systemClockNs"} else None
    base = start[0] if start and start[0] is not None else session[1] if session and session[1] is not None else 0
    base = min(int(base), int(work.start.min()))  # never a negative time
    origin = 0
    if session and session[0] is not None and session[1] is not None:
        origin = int(session[0]) + (base - int(session[1]))
    return base, origin


def _gpu(db: D.Export, devices: np.ndarray) -> tuple[str, dict, list[str]]:
    """(device kind, XSpace-named plane stats, notes) from TARGET_INFO_GPU: the first device's row."""
    rows = db.records("TARGET_INFO_GPU")
    if not rows:
        return "GPU", {}, ["the export has no TARGET_INFO_GPU table: the GPU is unknown (give --chip)"]
    first = int(devices.min()) if len(devices) else 0
    row = next((r for key in ("cuDevice", "id") for r in rows if r.get(key) == first), rows[0])
    name = str(row.get("name") or "")
    stats: dict = {"device_name": name} if name else {}
    if name:
        stats["device_vendor"] = "NVIDIA"
    for key, col, scale in GPU_PLANE_STATS:
        v = row.get(col)
        if isinstance(v, int | float) and v == v:
            stats[key] = int(v * scale) if float(v * scale).is_integer() else float(v * scale)
    if row.get("chipName"):
        stats["chip_name"] = str(row["chipName"])
    names = {str(r.get("name")) for r in rows if r.get("name")}
    notes = [f"the GPU, from the export's TARGET_INFO_GPU: {name}"] if name else []
    if len(names) > 1:
        notes.append(f"the export lists several GPU models ({', '.join(sorted(names))}): the roofline is {name}'s")
    return name or "GPU", stats, notes


def _xla_devices(db: D.Export, device: np.ndarray) -> np.ndarray:
    """Device ids as XLA numbers them (``Xla:#global=G,…#``, the name XLA gives each CUDA device through
    NVTX, in TARGET_INFO_NVTX_CUDA_DEVICE) where the export has them, else the CUDA ``deviceId``."""
    named = {}
    for r in db.records("TARGET_INFO_NVTX_CUDA_DEVICE"):
        m = _XLA_DEVICE.search(str(r.get("name") or ""))
        if m and isinstance(r.get("deviceId"), int):
            named[r["deviceId"]] = int(m.group(1))
    if not named or len(set(named.values())) != len(named):
        return device
    ids = np.unique(device)
    lut = {int(d): named.get(int(d), int(d)) for d in ids}
    if len(set(lut.values())) != len(lut):  # a clash with an unnamed device: keep CUDA's numbering
        return device
    return np.asarray([lut[int(d)] for d in ids], np.int64)[np.searchsorted(ids, device)]


# -- the two readings ------------------------------------------------------------------------------

@dataclass
class _Ops:
    """The rows of the work kept, named: what both readings hand the table."""

    rows: np.ndarray
    name: np.ndarray
    names: list[str]
    program: np.ndarray
    programs: list[str]
    op_meta: dict
    steps: list[tuple[int, int, int]]
    host_events: list[tuple[str, int, int]]
    notes: list[str]


def _transfer_meta(work: _Work, rows: np.ndarray, program: str = "") -> dict:
    """op_meta of the transfers among ``rows``: their category, which their name says (no HLO does)."""
    used = np.unique(work.name[rows[work.kind[rows] != KERNEL_WORK]])
    return {(program, work.names[c]): {"category": work.categories[work.names[c]]} for c in used.tolist()
            if work.names[c] in work.categories}


def _s(ns: float) -> str:
    return f"{ns * 1e-9:.3g} s"


def _xla(work: _Work, gtid: np.ndarray, launch: np.ndarray, r: _Ranges, kinds: tsl.RangeKinds,
         base: int) -> _Ops:
    """JAX: each launch's innermost Thunk (op) and XlaModule (program) on its thread; compilation apart."""

    def nest(flag: np.ndarray) -> tuple[np.ndarray, Nest, np.ndarray]:
        sel = np.flatnonzero(flag[r.name])
        nst = Nest(r.thread[sel], r.start[sel], r.end[sel])
        at = nst.innermost(gtid, launch)
        return sel, nst, np.where(at >= 0, sel[nst.rows[np.clip(at, 0, None)]], -1) if len(nst) else at

    _, _, thunk = nest(kinds.thunk)
    _, _, module = nest(kinds.module)
    _, _, compiling = nest(kinds.compile)
    tuning = compiling >= 0
    is_op = (thunk >= 0) & (module >= 0) & ~tuning
    is_transfer = ~is_op & ~tuning & (work.kind != KERNEL_WORK)
    rows = np.flatnonzero(is_op | is_transfer)
    op = is_op[rows]
    n_words = len(r.words)
    # names: the ops (per range name), then the work's own names (the transfers outside any op)
    name = np.where(op, r.name[np.where(op, thunk[rows], 0)], n_words + work.name[rows])
    names = kinds.op + work.names
    program = np.where(op, r.name[np.where(op, module[rows], 0)], n_words)
    programs = [p if m else "" for p, m in zip(kinds.program, kinds.module)] + [""]
    notes = []
    lost = ~is_op & ~tuning & (work.kind == KERNEL_WORK)
    if lost.any():
        launched = lost & (gtid >= 0)
        notes.append(f"{int(lost.sum())} kernels ({_s(float((work.end - work.start)[lost].sum()))} on the GPU) ran "
                     f"outside any XLA op range ({int((~launched & lost).sum())} without a launching call in the "
                     "export): not XLA's ops, left out")
    if tuning.any():
        candidates = sorted({kinds.program[c] for c in np.unique(r.name[module[tuning & (module >= 0)]]).tolist()}
                            - {""})
        shown = ", ".join(_plain(m) for m in candidates[:4]) + (", …" if len(candidates) > 4 else "")
        notes.append(f"compilation, not the program: {int(tuning.sum())} kernels "
                     f"({_s(float((work.end - work.start)[tuning].sum()))} on the GPU) ran while XLA compiled "
                     f"({int(kinds.autotune[r.name].sum())} GPU autotuner measurements"
                     f"{', candidate modules ' + shown if shown else ''}); left out of the op stats")
    # op_meta: the JAX name stack of each op (its scope where the HLO has none), the transfers' categories
    op_meta = _transfer_meta(work, rows)
    if op.any():
        pairs = E.unique_rows(program[op], name[op])[0]
        for p, c in pairs.tolist():
            if kinds.scope[c]:
                op_meta[(programs[p], names[c])] = {"hlo_category": "", "op_name": kinds.scope[c], "flops": None,
                                                    "bytes": None}
    steps, main = _steps(work, rows[op], module[rows[op]], r, kinds, base)
    if main:
        notes.append(f"steps: the {len(steps)} executions of {_plain(main)}, the main program "
                     "(the trace has no step annotations): each from one execution's start to the next's")
    name, names = _compact(name, names)
    program, programs = _compact(program, programs)
    return _Ops(rows, name, names, program, programs, op_meta, steps, _compilations(r, kinds, base), notes)


def _plain(program: str) -> str:
    return re.sub(r"\(\d+\)$", "", program)


def _compact(codes: np.ndarray, words: list[str]) -> tuple[np.ndarray, list[str]]:
    """Codes into only the words they use."""
    used, inv = np.unique(codes, return_inverse=True)
    return inv.reshape(-1), [words[int(u)] for u in used] or [""]


def _steps(work: _Work, rows: np.ndarray, module: np.ndarray, r: _Ranges, kinds: tsl.RangeKinds,
           base: int) -> tuple[list[tuple[int, int, int]], str]:
    """The main program's executions (each XlaModule range that ran work: its work's device span) as steps."""
    if not len(rows):
        return [], ""
    runs, inv = np.unique(module, return_inverse=True)
    inv = inv.reshape(-1)
    start = np.full(len(runs), np.iinfo(np.int64).max, np.int64)
    end = np.full(len(runs), np.iinfo(np.int64).min, np.int64)
    np.minimum.at(start, inv, work.start[rows])
    np.maximum.at(end, inv, work.end[rows])
    device = np.zeros(len(runs), np.int64)
    device[inv] = work.device[rows]
    progs, prog = np.unique(r.name[runs], return_inverse=True)
    steps, main = tsl.execution_steps((start - base) * 1000, (end - base) * 1000, prog.reshape(-1), device,
                                      len(progs))
    return steps, kinds.program[int(progs[main])] if main >= 0 else ""


def _compilations(r: _Ranges, kinds: tsl.RangeKinds, base: int) -> list[tuple[str, int, int]]:
    """The host's XLA compilations (``XlaCompile`` ranges) as host events: ("XlaCompile <module>", ps, ps)."""
    sel = np.flatnonzero(kinds.top_compile[r.name] & ((r.end - r.start) * 1000 >= HOST_EVENT_MIN_PS))
    return sorted(((f"XlaCompile {kinds.program[c] or '?'}", (s - base) * 1000, (e - base) * 1000)
                   for c, s, e in zip(r.name[sel].tolist(), r.start[sel].tolist(), r.end[sel].tolist())),
                  key=lambda h: h[1])


def _clean(word: str) -> str:
    """An NVTX range's name as a scope: PyTorch's per-call arguments cut, ``/`` kept out of the path."""
    return _TORCH_ARGS.sub("", word).replace("/", "∕").strip()


def _by_kernel(work: _Work, gtid: np.ndarray, launch: np.ndarray, r: _Ranges, base: int) -> _Ops:
    """Not XLA: every kernel and transfer, named by itself; its scope the NVTX range path it ran under most."""
    rows = np.arange(len(work))
    op_meta = _transfer_meta(work, rows)
    host_events: list[tuple[str, int, int]] = []
    if len(r):
        clean_code, clean_words = E.vocab(np.arange(len(r.words)), [_clean(w) for w in r.words])
        nest = Nest(r.thread, r.start, r.end)
        at = nest.innermost(gtid, launch)
        if (at >= 0).any():
            path, up, last = nest.paths(clean_code[r.name[nest.rows]])
            for c, scope in _dominant_scopes(work, at, path, up, last, clean_words).items():
                op_meta.setdefault(("", work.names[c]), {})["scope"] = scope
        long = np.flatnonzero((r.end - r.start) * 1000 >= HOST_EVENT_MIN_PS)
        host_events = sorted(((clean_words[clean_code[c]], (s - base) * 1000, (e - base) * 1000) for c, s, e in
                              zip(r.name[long].tolist(), r.start[long].tolist(), r.end[long].tolist())
                              if clean_words[clean_code[c]]), key=lambda h: h[1])
    notes = ["no XLA ranges (TSL XlaModule/Thunk) in this export, so no HLO: not a JAX program, or a JAX that did "
             "not emit them. Kernels are grouped by kernel name (their scope: the NVTX ranges they were launched "
             "under most), and there is no roofline to compare with"]
    return _Ops(rows, work.name, work.names, np.zeros(len(rows), np.int64), [""], op_meta, [], host_events, notes)


def _dominant_scopes(work: _Work, at: np.ndarray, path: np.ndarray, up: np.ndarray, last: np.ndarray,
                     words: list[str]) -> dict[int, str]:
    """Per work name code: the NVTX path its launches spent the most GPU time under, as text."""
    has = np.flatnonzero(at >= 0)
    pairs, inv = E.unique_rows(work.name[has], path[at[has]])
    time = np.bincount(inv, weights=(work.end - work.start)[has].astype(np.float64), minlength=len(pairs))
    order = np.lexsort((-time, pairs[:, 0]))
    first = order[np.r_[True, pairs[order, 0][1:] != pairs[order, 0][:-1]]]
    out = {}
    for c, p in pairs[first].tolist():
        parts = []
        while p >= 0:
            parts.append(words[int(last[p])])
            p = int(up[p])
        out[c] = "/".join(w for w in reversed(parts) if w)
    return {c: s for c, s in out.items() if s}


# -- the trace -------------------------------------------------------------------------------------

def _read(db: D.Export, path: Path, host: str, progress: Progress) -> RawTrace:
    work = _work(db)
    if not len(work):
        raise RooflensError(f"{path} holds no GPU work (no kernel, memcpy or memset rows): profile with "
                            "`nsys profile --trace=cuda,nvtx …` so that CUDA is traced.")
    if progress:
        progress(0, 3)
    base, origin = _clock(db, work)
    gtid, launch, n_runtime = _launches(db, work)
    r = _ranges(db, int(max(work.end.max(), launch.max())))
    if progress:
        progress(1, 3)
    kinds = tsl.range_kinds(r.words)
    xla = bool(len(r)) and bool(kinds.thunk[r.name].any())
    ops = _xla(work, gtid, launch, r, kinds, base) if xla else _by_kernel(work, gtid, launch, r, base)
    rows = ops.rows
    device = _xla_devices(db, work.device)
    device_kind, plane_stats, gpu_notes = _gpu(db, work.device[rows])
    streams, line = np.unique(work.stream[rows], return_inverse=True)
    table = E.build(
        host=np.zeros(len(rows), np.int32), device=device[rows], line=line.reshape(-1), name=ops.name,
        program=ops.program, start_ps=(work.start[rows] - base) * 1000,
        dur_ps=(work.end[rows] - work.start[rows]) * 1000, hosts=[host], lines=[f"Stream #{s}" for s in streams],
        names=ops.names or [""], programs=ops.programs, origin_ns=origin, op_meta=ops.op_meta)
    notes = ops.notes + gpu_notes
    if ops.host_events and xla:
        compile_s = sum(e - s for _, s, e in ops.host_events) * 1e-12
        notes.append(f"the host compiled {len(ops.host_events)} XLA modules in {compile_s:.3g} s (XlaCompile "
                     "ranges): the device idles meanwhile")
    unlaunched = int((gtid[rows] < 0).sum())
    if unlaunched:
        notes.append(f"{unlaunched} of the {len(rows)} GPU activities have no launching CUDA call in the export "
                     "(its CUDA API trace was off or cut): no NVTX range can name their context")
    in_graph = int((work.graph[rows]).sum())
    if in_graph:
        notes.append(f"{in_graph} kernels ran inside CUDA graphs, which one launch starts: each is given the "
                     "range open at its graph's launch (for JAX, XLA_FLAGS=--xla_gpu_enable_command_buffer= "
                     "launches every op on its own)")
    if progress:
        progress(3, 3)
    return RawTrace(host, table, ops.steps, device_kind, "gpu", notes=notes, plane_stats=plane_stats,
                    host_events=ops.host_events, events_total=len(work) + n_runtime + len(r))
