"""Nsight Systems SQLite exports (``nsys export --type sqlite``) → :class:`RawTrace`.

The device work is every kernel, memcpy and memset (one device per ``deviceId``, one line per CUDA
stream), timed in ns from the session start (``ANALYSIS_DETAILS.startTime``; the table's origin is
the session's UTC start, so several hosts' exports share one time axis). Each is launched by a CUDA
runtime or driver call with the same ``correlationId`` in the same process: that call's thread and
start say which NVTX ranges were open when it was launched (:mod:`.tables` reads them, :mod:`.nest`
finds the ranges open).

* **JAX** (XLA's ``TSL`` ranges present, :mod:`rooflens.trace.formats.tsl`): a kernel belongs to the
  innermost ``Thunk`` range open at its launch (its HLO op) and to the innermost ``XlaModule`` range
  (its program, ``<module>(<program id>)``): the same table an XSpace GPU trace gives. Kernels launched
  inside a compilation range (the GPU autotuner's measurements) are compilation, not the program:
  counted in a note. Memcpy/memset outside any op (``jax.device_put``) stay, as host transfers.
  Steps are the main program's executions; the host's XLA compilations are host events; its ``XlaModule``
  ranges are its dispatches of each program (:func:`rooflens.trace.formats.tsl.dispatches`), whether or not
  the GPU ran them inside the trace.
* **Anything else** (PyTorch, a JAX without XLA's ranges): kernels grouped by kernel name
  (``shortName``), each with the NVTX range path it was most often launched under as its scope; NCCL
  kernels are collectives (by name), memcpy/memset host transfers or device copies by their kind.

Each memcpy and memset keeps its ``bytes`` and whether its host memory was pinned (``srcKind``/``dstKind``,
``memKind``) in the table's ``copy_bytes``/``host_pinned`` columns: what a transfer moved, not an op's HLO traffic.
  There is no HLO, so no roofline: said once in the notes.

:func:`read_nsys_report` reads a raw ``.nsys-rep`` through ``nsys export`` when Nsight Systems is
installed (into a temporary file in the user cache, never beside the report).
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rooflens.errors import RooflensError
from rooflens.trace import events as E
from rooflens.trace.formats import tsl
from rooflens.trace.formats.nsys_sqlite import db as D
from rooflens.trace.formats.nsys_sqlite import tables as T
from rooflens.trace.formats.nsys_sqlite.nest import Nest
from rooflens.trace.formats.raw import HOST_EVENT_MIN_PS, Progress, RawTrace
from rooflens.trace.groupby import unique_values

#: PyTorch's per-call arguments in a range name (cut in SQL from inline names; from registered ones here)
_TORCH_ARGS = re.compile(T.torch_args_pattern())


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
                            f"`{shlex.join(export_command(path, sqlite_name))}` (Nsight Systems), then "
                            f"`{shlex.join(['rooflens', 'report', str(sqlite_name)])}`.")
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


def _transfer_meta(work: T.Work, rows: np.ndarray, program: str = "") -> dict:
    """op_meta of the transfers among ``rows``: their category, which their name says (no HLO does)."""
    used = unique_values(work.name[rows[work.kind[rows] != T.KERNEL_WORK]])
    return {(program, work.names[c]): {"category": work.categories[work.names[c]]} for c in used.tolist()
            if work.names[c] in work.categories}


def _s(ns: float) -> str:
    return f"{ns * 1e-9:.3g} s"


def _xla(work: T.Work, gtid: np.ndarray, launch: np.ndarray, r: T.Ranges, kinds: tsl.RangeKinds,
         base: int) -> _Ops:
    """JAX: each launch's innermost Thunk (op) and XlaModule (program) on its thread; compilation apart."""

    def innermost(flag: np.ndarray) -> np.ndarray:
        """Per launch: the innermost range of the kinds ``flag`` marks open at it (its row of ``r``; -1: none)."""
        sel = np.flatnonzero(flag[r.name])
        nest = Nest(r.thread[sel], r.start[sel], r.end[sel])
        at = nest.innermost(gtid, launch)
        return np.where(at >= 0, sel[nest.rows[np.clip(at, 0, None)]], -1) if len(nest) else at

    thunk, module, compiling = innermost(kinds.thunk), innermost(kinds.module), innermost(kinds.compile)
    tuning = compiling >= 0
    is_op = (thunk >= 0) & (module >= 0) & ~tuning
    is_transfer = ~is_op & ~tuning & (work.kind != T.KERNEL_WORK)
    rows = np.flatnonzero(is_op | is_transfer)
    op = is_op[rows]
    n_words = len(r.words)
    # names: the ops (per range name), then the work's own names (the transfers outside any op)
    name = np.where(op, r.name[np.where(op, thunk[rows], 0)], n_words + work.name[rows])
    names = kinds.op + work.names
    program = np.where(op, r.name[np.where(op, module[rows], 0)], n_words)
    programs = [p if m else "" for p, m in zip(kinds.program, kinds.module)] + [""]
    notes = []
    lost = ~is_op & ~tuning & (work.kind == T.KERNEL_WORK)
    if lost.any():
        launched = lost & (gtid >= 0)
        notes.append(f"{int(lost.sum())} kernels ({_s(float((work.end - work.start)[lost].sum()))} on the GPU) ran "
                     f"outside any XLA op range ({int((~launched & lost).sum())} without a launching call in the "
                     "export): not XLA's ops, left out")
    if tuning.any():
        _, shown = tsl.candidate_modules(kinds, np.where(module[tuning] >= 0, r.name[module[tuning]], -1))
        notes.append(f"compilation, not the program: {int(tuning.sum())} kernels "
                     f"({_s(float((work.end - work.start)[tuning].sum()))} on the GPU) ran while XLA compiled "
                     f"({int(kinds.autotune[r.name].sum())} GPU autotuner measurements"
                     f"{', candidate modules ' + shown if shown else ''}); left out of the op stats")
    # op_meta: the JAX name stack of each op (its scope where the HLO has none), the transfers' categories
    op_meta = _transfer_meta(work, rows[~op])
    if op.any():
        pairs = E.unique_rows(program[op], name[op])[0]
        for p, c in pairs.tolist():
            if kinds.scope[c]:
                op_meta[(programs[p], names[c])] = {"hlo_category": "", "op_name": kinds.scope[c], "flops": None,
                                                    "bytes": None}
    steps, step_notes = _steps(work, rows[op], module[rows[op]], r, kinds, base)
    notes += step_notes
    name, names = _compact(name, names)
    program, programs = _compact(program, programs)
    compiled = tsl.compilations(kinds, r.name, (r.start - base) * 1000, (r.end - base) * 1000)
    return _Ops(rows, name, names, program, programs, op_meta, steps, compiled, notes)


def _compact(codes: np.ndarray, words: list[str]) -> tuple[np.ndarray, list[str]]:
    """Codes into only the words they use."""
    used, inv = np.unique(codes, return_inverse=True)
    return inv.reshape(-1), [words[int(u)] for u in used] or [""]


def _steps(work: T.Work, rows: np.ndarray, module: np.ndarray, r: T.Ranges, kinds: tsl.RangeKinds,
           base: int) -> tuple[list[tuple[int, int, int]], list[str]]:
    """The main program's executions (each XlaModule range that ran work: its work's device span) as steps,
    and a note."""
    if not len(rows):
        return [], []
    runs, inv = np.unique(module, return_inverse=True)
    inv = inv.reshape(-1)
    start = np.full(len(runs), np.iinfo(np.int64).max, np.int64)
    end = np.full(len(runs), np.iinfo(np.int64).min, np.int64)
    np.minimum.at(start, inv, work.start[rows])
    np.maximum.at(end, inv, work.end[rows])
    device = np.zeros(len(runs), np.int64)
    device[inv] = work.device[rows]
    progs, prog = np.unique(r.name[runs], return_inverse=True)
    return tsl.execution_steps((start - base) * 1000, (end - base) * 1000, prog.reshape(-1), device,
                               [kinds.program[c] for c in progs.tolist()])


def _clean(word: str) -> str:
    """An NVTX range's name as a scope: PyTorch's per-call arguments cut, ``/`` kept out of the path."""
    return _TORCH_ARGS.sub("", word).replace("/", "∕").strip()


def _by_kernel(work: T.Work, gtid: np.ndarray, launch: np.ndarray, r: T.Ranges, base: int) -> _Ops:
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
    made = framework_of_ranges(r.words) if len(r) else ""
    notes = [(f"no XLA ranges (TSL XlaModule/Thunk) in this export: this is a {made} trace, not a JAX program"
              if made else "no XLA ranges (TSL XlaModule/Thunk) in this export, so no HLO: not a JAX program, or a "
              "JAX that did not emit them")
             + ". Kernels are grouped by kernel name (their scope: the NVTX ranges they were launched under most), "
             "and with no HLO there is no roofline to compare with"]
    return _Ops(rows, work.name, work.names, np.zeros(len(rows), np.int64), [""], op_meta, [], host_events, notes)


def _dominant_scopes(work: T.Work, at: np.ndarray, path: np.ndarray, up: np.ndarray, last: np.ndarray,
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

def framework_of_ranges(words: list[str]) -> str:
    """The framework an export's NVTX ranges show (no XLA ranges): PyTorch's profiler names its ranges after
    its operators (``aten::mm``), TensorFlow after ``tf.…``/``TensorFlow`` ones; "" when they say nothing."""
    if any(w.startswith("aten::") for w in words):
        return "PyTorch"
    if any(w.startswith(("tf.", "TensorFlow")) for w in words):
        return "TensorFlow"
    return ""


def _read(db: D.Export, path: Path, host: str, progress: Progress) -> RawTrace:
    nvtx = T.range_columns(db)
    if nvtx is not None:  # the largest table, read on another thread while the GPU work and its launches are
        db.prefetch(*nvtx)
    work = T.work(db)
    if not len(work):
        raise RooflensError(f"{path} holds no GPU work (no kernel, memcpy or memset rows): profile with "
                            "`nsys profile --trace=cuda,nvtx …` so that CUDA is traced.")
    if progress:
        progress(0, 3)
    base, origin = T.clock(db, work)
    gtid, launch, n_runtime, threads = T.launches(db, work)
    r = T.ranges(db, int(max(work.end.max(), launch.max())), threads)
    if progress:
        progress(1, 3)
    kinds = tsl.range_kinds(r.words)
    xla = bool(len(r)) and bool(kinds.thunk[r.name].any())
    ops = _xla(work, gtid, launch, r, kinds, base) if xla else _by_kernel(work, gtid, launch, r, base)
    rows = ops.rows
    device = T.xla_devices(db, work.device)
    device_kind, plane_stats, gpu_notes = T.gpu(db, work.device[rows])
    streams, line = np.unique(work.stream[rows], return_inverse=True)
    table = E.build(
        host=np.zeros(len(rows), np.int32), device=device[rows], line=line.reshape(-1), name=ops.name,
        program=ops.program, start_ps=(work.start[rows] - base) * 1000,
        dur_ps=(work.end[rows] - work.start[rows]) * 1000, hosts=[host], lines=[f"Stream #{s}" for s in streams],
        names=ops.names or [""], programs=ops.programs, origin_ns=origin, op_meta=ops.op_meta,
        copy_bytes=None if work.copy_bytes is None else work.copy_bytes[rows],
        host_pinned=None if work.host_pinned is None else work.host_pinned[rows])
    notes = ops.notes + gpu_notes
    if xla:
        notes += tsl.compilations_note(ops.host_events)
    unlaunched = int((gtid[rows] < 0).sum())
    if unlaunched:
        notes.append(f"{unlaunched} of the {len(rows)} GPU activities have no launching CUDA call in the export "
                     "(its CUDA API trace was off or cut): no NVTX range can name their context")
    in_graph = work.in_graphs
    if in_graph:
        notes.append(f"{in_graph} kernels ran inside CUDA graphs, which one launch starts: each is given the "
                     "range open at its graph's launch (for JAX, XLA_FLAGS=--xla_gpu_enable_command_buffer= "
                     "launches every op on its own)")
    if progress:
        progress(3, 3)
    # the host's dispatches of each program: its XlaModule ranges, run on the GPU or not; the trace's end: the
    # session's recorded stop, or its last activity, range or launch when later
    dispatches = tsl.dispatches(kinds, r.name, r.thread, (r.start - base) * 1000, (r.end - base) * 1000) if xla \
        else {}
    end_ns = max(T.stop_ns(db) or 0, int(work.end.max()), int(r.end.max()) if len(r) else 0, int(launch.max()))
    return RawTrace(host, table, ops.steps, device_kind, "gpu", notes=notes, plane_stats=plane_stats,
                    host_events=ops.host_events, events_total=len(work) + n_runtime + len(r),
                    dispatches=dispatches, end_ps=(end_ns - base) * 1000, steps_ran=True,
                    # the session's start on its host's clock, one session per process
                    session_clock=True, framework="JAX" if xla else framework_of_ranges(r.words))
