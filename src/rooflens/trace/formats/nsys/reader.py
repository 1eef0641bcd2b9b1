"""nsys-jax archives (NVIDIA JAX-Toolbox): JAX on NVIDIA GPUs profiled with Nsight Systems.

``nsys-jax`` runs a JAX program under ``nsys profile`` and post-processes the capture into a zip
archive (or its extracted directory) holding:

* ``nvtx_gpu_proj_trace/trace.parquet``: the NVTX ranges the process pushed, projected onto the
  GPU timeline by Nsight's ``nvtx_gpu_proj_trace`` recipe (``Projected Start``/``Projected
  Duration`` in ns from the session start; ``RangeId``/``ParentId`` nest them). XLA's GPU runtime
  names them (domain ``TSL``, read by :mod:`rooflens.trace.formats.tsl`): an ``XlaModule`` range per
  program execution, a ``Thunk`` range per HLO op (its kernels' span), and compilation ranges, under
  which the GPU autotuner runs whole candidate modules. A control op's thunk (``while``,
  ``conditional``, ``call``) encloses its body's thunks (their ``ParentId``); Nsight 2024.5 on writes
  other column names (:data:`_LAYOUTS`);
* ``thread-metadata.parquet`` (every thread's name): one process driving several GPUs launches each
  GPU's work from a thread XLA names ``XlaLauncher:#global=G,local=L,process=P,slice=S#``;
* ``device-metadata.parquet`` (``TARGET_INFO_GPU``: name, totalMemory, memoryBandwidth, smCount,
  clockRate, compute capability; ``TARGET_INFO_NVTX_CUDA_DEVICE``: the name XLA gave the device,
  ``Xla:#global=G,local=L,process=P,slice=S#``), ``system-metadata.parquet`` (``Hostname``); older
  archives lack ``device-metadata.parquet`` and name the GPU only in the dump's
  ``module_<id>.<name>.gpu_target_config.pbtxt.xz``;
* ``dump/module_<id>.<name>.{before_optimizations,<target>_after_optimizations}.hlo.pb.xz``:
  xz-compressed ``xla.HloProto``s of every program XLA compiled (``<id>`` is its program id).

:func:`read_nsys` turns one archive into the :class:`RawTrace` every reader produces: one event
per ``Thunk`` range of a program execution (named by ``hlo_op``, program ``<module>(<id>)``, on the
GPU of the thread that pushed it: each GPU its own device, so ops nest within their own GPU's
lanes), the steps (the k-th execution of the main program on every GPU is step k), the GPU's
properties under the names an XSpace GPU plane uses (so chip inference is the same), and the
optimized HLO of each program that ran, and from the host-side ranges (``report_nvtx_pushpop_trace.csv.xz``)
the host's XLA compilations and its dispatches of each program (its ``XlaModule`` ranges, projected onto the GPU
or not: one the GPU never ran has no projection). Autotuner measurements are compilation, not the program:
counted in a note, never events. Columns are built with pyarrow and numpy: no Python object per range.
"""

from __future__ import annotations

import io
import lzma
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rooflens.errors import RooflensError
from rooflens.trace import events as E
from rooflens.trace.formats import tsl
from rooflens.trace.formats.nsys.archive import (
    DEVICE_METADATA,
    HOST_RANGES,
    TRACE,
    Archive,
    GpuInfo,
    dump_files,
    gpu_info,
    hostname,
    parquet,
    read_hlo_proto,
    thread_devices,
)
from rooflens.trace.formats.raw import Progress, RawTrace
from rooflens.trace.formats.tsl import XlaDevice
from rooflens.trace.groupby import unique_values

COLLECTIVE_OPCODES = frozenset({
    "all-gather", "all-gather-start", "all-reduce", "all-reduce-start", "reduce-scatter", "all-to-all",
    "collective-permute", "collective-permute-start", "collective-broadcast", "send", "recv", "ragged-all-to-all",
})
COMPUTE_LINE, COLLECTIVE_LINE = "GPU ops (NVTX projected)", "NCCL collectives (NVTX projected)"
#: Suffixes XLA's GPU loop double-buffering gives the instructions it copies
#: (``xla/backends/gpu/transforms/double_buffer_loop_unrolling.cc``: ``Clone("double_buffer_clone")`` in the
#: unrolled body, ``Clone("peeled_double_buffer")`` for the iteration peeled before the loop): real
#: instructions of the optimized module, named ``<original>.<suffix>``
CLONE_SUFFIXES = (".double_buffer_clone", ".peeled_double_buffer")


def _opcodes(module: bytes) -> tuple[dict[str, str], dict[str, str]]:
    """(instruction name → opcode, wrapped instruction → its ``async-start``) of a serialized
    HloModuleProto. XLA prints an ``async-start`` that wraps a collective as ``reduce-scatter-start``
    and hides the wrapped ``reduce-scatter.131`` the runtime names its thunk after."""
    from rooflens.trace.formats.protowire import field_spans, int_values

    opcode: dict[str, str] = {}
    root_of: dict[int, str] = {}  # computation id → its root instruction's name
    calls: list[tuple[str, list[int]]] = []  # async-starts and the computations they call
    for num, wt, _, v, _ in field_spans(module):
        if num != 3 or wt != 2:
            continue
        cid = root = None
        ids: dict[int, str] = {}
        for cn, cw, _, cv, _ in field_spans(module, *v):
            if cn == 5 and cw == 0:
                cid = cv
            elif cn == 6 and cw == 0:
                root = cv
            elif cn == 2 and cw == 2:
                name = op = ""
                iid, called = None, []
                for i_n, iw, _, iv, _ in field_spans(module, *cv):
                    if i_n == 1 and iw == 2:
                        name = module[iv[0]:iv[1]].decode("utf-8", "replace")
                    elif i_n == 2 and iw == 2:
                        op = module[iv[0]:iv[1]].decode("utf-8", "replace")
                    elif i_n == 35 and iw == 0:
                        iid = iv
                    elif i_n == 38:
                        called += int_values(module, iw, iv)
                opcode[name] = op
                if iid is not None:
                    ids[iid] = name
                if op == "async-start":
                    calls.append((name, called))
        if cid is not None and root in ids:
            root_of[cid] = ids[root]
    wrapped = {root_of[c]: start for start, called in calls for c in called[:1] if c in root_of}
    return opcode, wrapped


# -- the ranges -----------------------------------------------------------------------------------

def _ancestors(parent: np.ndarray, own: np.ndarray, flag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For every range: the nearest range at or above it with ``own`` (its row, else -1), and whether
    any range at or above it has ``flag``; by doubling over the parent links (log depth passes)."""
    n = len(parent)
    near = np.where(own, np.arange(n), -1)
    anc = parent.copy()
    under = flag.copy()
    while (anc >= 0).any():
        has = anc >= 0
        a = np.where(has, anc, 0)
        near = np.where((near < 0) & has, near[a], near)
        under = under | (has & under[a])
        anc = np.where(has, anc[a], -1)
    return near, under


def _ids(col) -> np.ndarray:
    """RangeId/ParentId/PID/TID (integers, or float64 with nulls) → int64, -1 for null."""
    a = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)
    return np.where(np.isnan(a), -1, a).astype(np.int64)


#: The layouts of ``trace.parquet`` that Nsight's ``nvtx_gpu_proj_trace`` recipe has written, as
#: NVIDIA/JAX-Toolbox's nsys-jax reads them (``nsys_jax/data_loaders.py``): (name, start, duration, end,
#: range id, parent id) columns. Nsight ≤ 2024.4: ``Name`` (``TSL:…``), ``Projected Start``/``Projected
#: Duration``, ``RangeId``/``ParentId``; 2024.5 on: ``Text`` (without the ``TSL:`` domain), ``Start``/``End``,
#: ``Range ID``/``Parent ID``; 2026.1.1 adds ``Domain`` (the name is ``Domain:Text``). Every layout has
#: ``PID``, ``TID`` and ``Rank``. Times are ns on the GPU timeline.
_LAYOUTS = (("Name", "Projected Start", "Projected Duration", None, "RangeId", "ParentId"),
            ("Text", "Start", None, "End", "Range ID", "Parent ID"))


def _range_columns(t, path: Path):
    """(names, start ns, duration ns, timed, range id, parent id, pid, tid, rank) of any layout."""
    import pyarrow.compute as pc

    have = set(t.column_names)
    layout = next((lay for lay in _LAYOUTS if {c for c in lay if c} <= have), None)
    if layout is None or "PID" not in have:
        want = ", ".join(c for c in _LAYOUTS[0] if c)
        raise RooflensError(f"{path} is not an nsys-jax archive this reader knows: {TRACE} has none of the column "
                            f"layouts Nsight writes (e.g. {want}, PID).")
    name_c, start_c, dur_c, end_c, id_c, parent_c = layout
    names = t.column(name_c)
    if "Domain" in have and name_c == "Text":  # Nsight 2026.1: the domain in a column of its own
        names = pc.coalesce(pc.binary_join_element_wise(t.column("Domain"), names, ":"), names)
    start = np.asarray(t.column(start_c).to_numpy(zero_copy_only=False), np.float64)
    if dur_c is not None:
        dur = np.asarray(t.column(dur_c).to_numpy(zero_copy_only=False), np.float64)
    else:
        dur = np.asarray(t.column(end_c).to_numpy(zero_copy_only=False), np.float64) - start
    timed = ~(np.isnan(start) | np.isnan(dur))
    start_ns = np.where(timed, np.nan_to_num(start), 0).astype(np.int64)
    dur_ns = np.where(timed, np.nan_to_num(dur), 0).astype(np.int64)
    n = t.num_rows
    tid = _ids(t.column("TID")) if "TID" in have else np.full(n, -1, np.int64)
    rank = _ids(t.column("Rank")) if "Rank" in have else np.zeros(n, np.int64)
    return (names, start_ns, dur_ns, timed, _ids(t.column(id_c)), _ids(t.column(parent_c)), _ids(t.column("PID")),
            tid, rank)


def read_nsys(path: Path, progress: Progress = None) -> RawTrace:
    """An nsys-jax archive (zip or extracted directory) → :class:`RawTrace` (see the module doc)."""
    archive = Archive(path)
    try:
        return _read(archive, path, progress)
    finally:
        archive.close()


@dataclass
class _Ranges:
    """The trace's NVTX ranges decoded: names coded per distinct name, GPU-projected times, and where
    each range sits (its nearest XlaModule range above it, whether compilation holds it, the thread that
    pushed it)."""

    n: int
    names: int  # distinct names, plus one code for a null name
    name_code: np.ndarray
    kinds: tsl.RangeKinds
    start_ns: np.ndarray
    dur_ns: np.ndarray
    timed: np.ndarray  # bool: it has a GPU projection
    is_module: np.ndarray
    is_thunk: np.ndarray
    module_row: np.ndarray  # the nearest XlaModule range at or above it (-1: none)
    compiling: np.ndarray  # bool: under a compilation range
    rank: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    parent: np.ndarray  # the row of its parent range (-1: none)


def _ranges(t, path: Path, progress: Progress) -> _Ranges:
    """Read the ranges table: names coded, times, parent links resolved."""
    import pyarrow.compute as pc

    names, start_ns, dur_ns, timed, range_id, parent_id, pid, tid, rank = _range_columns(t, path)
    n = t.num_rows
    if progress:
        progress(0, max(n, 1))
    enc = pc.dictionary_encode(names).combine_chunks()
    words = [w if w is not None else "" for w in enc.dictionary.to_pylist()]
    name_code = enc.indices.to_numpy(zero_copy_only=False)
    name_code = np.where(np.isnan(name_code.astype(np.float64)), len(words), name_code).astype(np.int64) \
        if enc.indices.null_count else name_code.astype(np.int64)
    kinds = tsl.range_kinds(words + [""])
    order = np.argsort(range_id, kind="stable")
    k = np.clip(np.searchsorted(range_id[order], parent_id), 0, max(n - 1, 0))
    parent = np.where((parent_id >= 0) & (range_id[order][k] == parent_id), order[k], -1) if n else parent_id
    is_module, is_thunk = kinds.module[name_code], kinds.thunk[name_code]
    module_row, compiling = _ancestors(parent, is_module, kinds.compile[name_code])
    return _Ranges(n, len(words) + 1, name_code, kinds, start_ns, dur_ns, timed, is_module, is_thunk, module_row,
                   compiling, rank, pid, tid, parent)


def _select(r: _Ranges) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """(ops, autotuner op ranges, program executions, notes): the ops are the thunks of a program
    execution (a module range outside compilation)."""
    of_program = (r.module_row >= 0) & ~r.compiling
    ops = np.flatnonzero(r.is_thunk & of_program & r.timed)
    tuning = np.flatnonzero(r.is_thunk & r.compiling & r.timed)
    runs = np.flatnonzero(r.is_module & ~r.compiling & r.timed)
    notes: list[str] = []
    lost = int((r.is_thunk & ~r.timed).sum())
    if lost:
        notes.append(f"{lost} op ranges have no GPU projection (no kernel ran for them): left out")
    orphans = int((r.is_thunk & (r.module_row < 0) & ~r.compiling).sum())
    if orphans:
        notes.append(f"{orphans} op ranges are outside any XlaModule range: left out (no program to give them)")
    return ops, tuning, runs, notes


def _lanes(r: _Ranges, rows: np.ndarray, row_prog: np.ndarray, gpu: GpuInfo,
           launchers: dict[tuple[int, int], XlaDevice]) -> tuple[np.ndarray, list[str]]:
    """Each range of ``rows`` (of program ``row_prog``): the GPU (global id) its thread launched work on,
    and notes.

    One process driving several GPUs launches each GPU's work from a thread of its own, which XLA names
    ``XlaLauncher:#global=G,…#`` (``thread-metadata.parquet``); single-device programs run on the calling
    (main) thread, taken as the process's first GPU (JAX's default device), as nsys-jax does. With one
    GPU per process the main thread launches everything: that GPU. An archive that names no launcher
    thread: the threads that run a program together (its executions on several threads) are its GPUs,
    in the order of their thread ids (XLA makes them in device order); any other thread, the first."""
    if not len(rows):
        return np.zeros(0, np.int64), []
    threads, inv = E.unique_rows(r.pid[rows], r.tid[rows])
    dev = np.full(len(threads), -1, np.int64)
    notes: list[str] = []
    for pid in unique_values(threads[:, 0]).tolist():
        mine = np.flatnonzero(threads[:, 0] == pid)
        own = {tid: d for (p, tid), d in launchers.items() if p == pid}
        unnamed = [int(k) for k in mine if int(threads[k, 1]) not in own]
        for k in mine:
            if int(threads[k, 1]) in own:
                dev[k] = own[int(threads[k, 1])].global_id
        if own:
            first = min(own.values(), key=lambda d: (d.local, d.global_id))
            dev[unnamed] = first.global_id
            if len(own) > 1 and unnamed:
                count = int(np.isin(inv, unnamed).sum())
                notes.append(f"{count} ranges ran on a thread XLA did not name for a GPU (the main thread runs "
                             f"single-device programs): counted on GPU {first.global_id}, the process's first "
                             "(the archive does not say which GPU they used)")
            continue
        # no thread named: the threads that share a program's executions launch for its GPUs
        here = np.isin(inv, mine)
        pairs = E.unique_rows(row_prog[here], inv[here])[0]
        progs, n_threads = np.unique(pairs[:, 0], return_counts=True)
        shared = np.isin(pairs[:, 0], progs[n_threads > 1])
        workers = sorted({int(k) for k in pairs[shared, 1].tolist()}, key=lambda k: int(threads[k, 1]))
        if len(workers) <= 1:  # one thread launches everything: the process's GPU
            dev[unnamed] = gpu.global_id if gpu.global_id >= 0 else 0
            continue
        for ordinal, k in enumerate(workers):
            dev[k] = gpu.devices[ordinal].global_id if ordinal < len(gpu.devices) else ordinal
        rest = [k for k in unnamed if k not in set(workers)]
        dev[rest] = dev[workers[0]]
        notes.append(f"the archive names no thread that launches work on a GPU (no XlaLauncher names in "
                     f"thread-metadata.parquet): the {len(workers)} threads that run programs together are taken "
                     f"as GPUs {', '.join(str(int(dev[k])) for k in workers)} in the order of their thread ids"
                     + (f", {len(rest)} other thread{'s' if len(rest) > 1 else ''} (the main thread: single-device "
                        "programs) as the first" if rest else ""))
    return dev[inv], notes


def _hosts(r: _Ranges, ops: np.ndarray, base: str, process: int) -> tuple[list[str], np.ndarray]:
    """The host names (one per process in the archive) and each op's host code."""
    procs, host_code = E.unique_rows(r.rank[ops], r.pid[ops]) if len(ops) else (np.zeros((0, 2), np.int64), ops)
    if len(procs) <= 1:
        index = process if process >= 0 else int(procs[0][0]) if len(procs) else 0
        return [f"{base}/rank{index}"], host_code
    # an archive combining several processes (nsys-jax-combine): told apart by rank and PID
    return [f"{base}/rank{rk}/pid{p}" for rk, p in procs.tolist()], host_code


def _program_hlo(archive: Archive, programs: list[str]) -> tuple[dict, dict, dict, list[str]]:
    """The HLO of every program that ran, each op's opcode (collectives run on streams of their own)
    and the collectives wrapped in an async-start: (protos, opcodes, wrapped, notes)."""
    protos, opcodes, wrapped = {}, {}, {}
    dump = dump_files(archive)
    by_name: dict[str, list] = {}
    for (_, name), files in dump.items():
        by_name.setdefault(name, []).append(files)
    for program in programs:
        module, program_id = tsl.program_parts(program)
        # a module range without program_id (XLA's ModuleAnnotation(name)): its dump when the name is unique
        files = dump.get((program_id, module)) if program_id is not None else \
            (by_name[program][0] if len(by_name.get(program, ())) == 1 else None)
        if files and "after" in files and (proto := read_hlo_proto(archive, files["after"])) is not None:
            protos[program] = proto
            opcodes[program], wrapped[program] = _opcodes(proto)
    no_hlo = [p for p in programs if p not in protos]
    notes = [f"the archive's HLO dump lacks (or cannot read) {', '.join(no_hlo[:5])}"] if no_hlo and dump else []
    return protos, opcodes, wrapped, notes


def _op_table(r: _Ranges, ops: np.ndarray, op_prog: np.ndarray, op_dev: np.ndarray, programs: list[str],
              opcodes: dict, wrapped: dict, hosts: list[str], host_code: np.ndarray) -> tuple[E.EventTable, list[str]]:
    """The op events: named as the HLO shows them, on their GPU, collectives on a line of their own."""
    op_names = [r.kinds.op[c] for c in range(r.names)]
    notes = []
    # ops the HLO text shows under another name (a collective wrapped in an async-start): that name
    pairs, pair_inv = E.unique_rows(op_prog, r.name_code[ops]) if len(ops) else (np.zeros((0, 2), np.int64), ops)
    shown = [wrapped.get(programs[p], {}).get(op_names[c], op_names[c]) for p, c in pairs.tolist()]
    renamed = sum(1 for (_, c), w in zip(pairs.tolist(), shown) if w != op_names[c])
    if renamed:
        notes.append(f"{renamed} collective ops are named by the async-start that wraps them in the HLO "
                     "(the runtime names their ranges after the wrapped instruction, e.g. reduce-scatter.N)")
    notes += _unmatched_note([(programs[p], op_names[c]) for p, c in pairs.tolist()], opcodes)
    # lines: collectives on their own (their NCCL kernels overlap compute), everything else on one
    collective = np.asarray([is_collective(opcodes.get(programs[p], {}), op_names[c]) for p, c in pairs.tolist()]
                            or [False], bool)
    line = collective[pair_inv].astype(np.int64) if len(ops) else ops
    op_meta = {}
    for (p, c), w in zip(pairs.tolist(), shown):
        if r.kinds.scope[c]:  # the name stack: the named scope when the HLO has none
            op_meta[(programs[p], w)] = {"hlo_category": "", "op_name": r.kinds.scope[c], "flops": None,
                                         "bytes": None}
    name_col = (len(op_names) + np.arange(len(pairs)))[pair_inv] if len(ops) else ops
    table = E.build(
        host=host_code.astype(np.int32), device=op_dev.astype(np.int32), line=line,
        name=name_col, program=op_prog, start_ps=r.start_ns[ops] * 1000, dur_ps=r.dur_ns[ops] * 1000,
        hosts=hosts, lines=[COMPUTE_LINE, COLLECTIVE_LINE], names=op_names + shown, programs=programs or [""],
        origin_ns=0, op_meta=op_meta)
    return table, notes


def _unmatched_note(pairs: list[tuple[str, str]], opcodes: dict) -> list[str]:
    """The op names a program's optimized HLO does not define. XLA names a thunk's range after its
    instruction (``annotation.cc``: ``hlo_op=<inst.name()>``) in the module it dumps as
    ``*_gpu_after_optimizations``, suffixes included: ``cublas-gemm.2.0`` (the ``.0`` XLA's pre-fusion
    ``AddTrackingSuffixToInstructionNames`` appends), ``….double_buffer_clone``, ``….peeled_double_buffer``
    (:data:`CLONE_SUFFIXES`), so names join the HLO as they are; one that does not is measured but not
    priced, and said here."""
    missing = [(p, n) for p, n in pairs if p in opcodes and n not in opcodes[p]]
    if not missing:
        return []
    shown = ", ".join(f"{n} ({tsl.module_of(p)})" for p, n in missing[:4]) + (", …" if len(missing) > 4 else "")
    return [f"{len(missing)} op names are not instructions of their program's optimized HLO ({shown}): "
            "measured, not priced"]


def _tuning_note(r: _Ranges, tuning: np.ndarray) -> list[str]:
    """The GPU autotuner's measurements: compilation, not the program."""
    if not len(tuning):
        return []
    held = r.module_row[tuning]
    modules, shown = tsl.candidate_modules(r.kinds, np.where(held >= 0, r.name_code[held], -1))
    return [f"compilation, not the program: the GPU autotuner ran {int(r.kinds.autotune[r.name_code].sum())} "
            f"measurements ({len(tuning)} op ranges, {r.dur_ns[tuning].sum() * 1e-9:.3g} s on the GPU, "
            f"{modules} candidate modules: {shown}); left out of the op stats"]


def _read(archive: Archive, path: Path, progress: Progress) -> RawTrace:
    r = _ranges(parquet(archive, TRACE), path, progress)
    ops, tuning, runs, notes = _select(r)
    gpu, gpu_notes = gpu_info(archive)
    notes += gpu_notes
    hosts, host_code = _hosts(r, ops, hostname(archive) or path.name.removesuffix(".zip"), gpu.process)

    # programs and op names, coded (per distinct range name, then gathered)
    programs = sorted({r.kinds.program[c] for c in unique_values(r.name_code[r.is_module & ~r.compiling]).tolist()})
    prog_code_of = {p: c for c, p in enumerate(programs)}
    prog_of_name = np.asarray([prog_code_of.get(r.kinds.program[c], -1) for c in range(r.names)], np.int64)
    run_prog = prog_of_name[r.name_code[runs]]
    op_prog = prog_of_name[r.name_code[r.module_row[ops]]]
    lane, lane_notes = _lanes(r, np.concatenate([ops, runs]), np.concatenate([op_prog, run_prog]), gpu,
                              thread_devices(archive))
    op_dev, run_dev = lane[:len(ops)], lane[len(ops):]
    notes += lane_notes
    protos, opcodes, wrapped, hlo_notes = _program_hlo(archive, programs)
    table, table_notes = _op_table(r, ops, op_prog, op_dev, programs, opcodes, wrapped, hosts, host_code)
    notes += hlo_notes + table_notes

    # the k-th execution of the main program on every GPU is step k (no step annotations in the archive)
    run_start_ps = r.start_ns[runs] * 1000
    steps, step_note = tsl.execution_steps(run_start_ps, run_start_ps + r.dur_ns[runs] * 1000, run_prog, run_dev,
                                           programs)
    notes += step_note
    notes += _tuning_note(r, tuning)
    if gpu.name and gpu.source == DEVICE_METADATA:
        notes.append(f"the GPU, from the archive's {DEVICE_METADATA}: {gpu.name}")
    host = _host_side(archive, unique_values(r.pid[ops[host_code == 0]]) if len(ops) else np.zeros(0, np.int64))
    notes += tsl.compilations_note(host.compilations)
    if progress:
        progress(r.n, max(r.n, 1))
    gpu_end_ps = int((r.start_ns + r.dur_ns)[r.timed].max()) * 1000 if r.timed.any() else 0
    return RawTrace(hosts[0], table, steps, gpu.name or "GPU", "gpu", notes=notes, plane_stats=gpu.plane_stats,
                    host_events=host.compilations, hlo_protos=protos, events_total=r.n,
                    dispatches=host.dispatches, end_ps=max(host.end_ps, gpu_end_ps), steps_ran=True,
                    # ns from the start of the process's own Nsight session; nsys-jax is NVIDIA's JAX wrapper
                    session_clock=True, framework="JAX")


@dataclass
class _HostSide:
    """What the host-side NVTX trace says: the host's XLA compilations (host events), each program's dispatches
    (ps, sorted) and where the trace ends (ps; 0: unknown)."""

    compilations: list[tuple[str, int, int]]
    dispatches: dict[str, np.ndarray]
    end_ps: int


def _host_side(archive: Archive, pids: np.ndarray) -> _HostSide:
    """The host-side NVTX trace (``report_nvtx_pushpop_trace.csv.xz``: every range the process pushed, with
    ``Start (ns)``/``End (ns)``/``Duration (ns)``, ``Name`` (``TSL:…``), ``PID``, ``TID``, on the projection's
    clock), of the processes ``pids`` (the host's; every one when empty): its top-level ``TSL:XlaCompile`` ranges
    as host events, its ``XlaModule`` ranges as each program's dispatches (:func:`tsl.dispatches`: a range with no
    GPU projection never ran on the GPU), and its last range's end."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pcsv

    none = _HostSide([], {}, 0)
    if not archive.has(HOST_RANGES):
        return none
    cols = ["Start (ns)", "End (ns)", "Duration (ns)", "Name", "PID", "TID"]
    try:
        data = lzma.decompress(archive.read(HOST_RANGES))
        t = pcsv.read_csv(io.BytesIO(data), convert_options=pcsv.ConvertOptions(
            include_columns=cols, include_missing_columns=True,
            column_types={c: pa.int64() for c in cols if c != "Name"}))
    except (lzma.LZMAError, pa.ArrowException, RooflensError):
        return none  # the host side is extra: a damaged one loses the compile spans and the dispatches
    if t.column("Start (ns)").null_count == t.num_rows or t.column("Name").null_count == t.num_rows:
        return none  # not the columns nsys writes

    def ints(col: str, fill: int = -1) -> np.ndarray:
        return np.asarray(pc.fill_null(t.column(col), fill).to_numpy(zero_copy_only=False), np.int64)

    pid = ints("PID")
    if len(pids) and (pid >= 0).any():  # another process's ranges (the launcher's) are not this host's
        t = t.filter(pa.array(np.isin(pid, pids)))
        pid = ints("PID")
    start_ns, end_ns = ints("Start (ns)", 0), ints("End (ns)")
    end_ns = np.where(end_ns >= 0, end_ns, start_ns + np.maximum(ints("Duration (ns)", 0), 0))
    enc = pc.dictionary_encode(t.column("Name")).combine_chunks()
    words = [w if w is not None else "" for w in enc.dictionary.to_pylist()] + [""]
    name = np.asarray(pc.fill_null(enc.indices, len(words) - 1).to_numpy(zero_copy_only=False), np.int64)
    kinds = tsl.range_kinds(words)
    thread = E.unique_rows(pid, ints("TID"))[1]
    start_ps, end_ps = start_ns * 1000, end_ns * 1000
    return _HostSide(tsl.compilations(kinds, name, start_ps, end_ps),
                     tsl.dispatches(kinds, name, thread, start_ps, end_ps), int(end_ps.max()) if len(end_ps) else 0)


def is_collective(opcodes: dict[str, str], name: str) -> bool:
    """Whether the op ``name`` is a collective: by its opcode in the HLO (``opcodes``), else by its name."""
    op = opcodes.get(name)
    if op is None:  # no HLO: XLA names an instruction after its opcode (a loop's copies add a suffix)
        base = name
        for suffix in CLONE_SUFFIXES:
            base = base.removesuffix(suffix)
        op = re.sub(r"(\.\d+)+$", "", base)
    return op in COLLECTIVE_OPCODES
