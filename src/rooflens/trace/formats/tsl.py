"""XLA's NVTX ranges (domain ``TSL``), as any Nsight Systems reader sees them.

XLA's GPU runtime pushes, on the thread that launches the work (openxla/xla
``xla/backends/gpu/runtime/annotation.cc``, ``MakeTitle`` and ``MakeInstructionTitle``):

* ``XlaModule:#[prefix=<op_name prefix>,]hlo_module=<module>,program_id=<id>#`` around each program execution;
* ``Thunk:#[name=<JAX name stack>,]hlo_op=<instruction>[,unique_hlo_op_id=<id>]#`` around each HLO op's
  launches (the name stack may hold commas: it ends where ``hlo_op=`` begins).

Compilation pushes ``XlaCompile``, ``XlaPass``/``XlaPassPipeline`` and, inside the GPU autotuner's passes,
``XlaAutotunerMeasurement`` ranges around whole candidate modules (``gemm_fusion_dot.N``, ``extracted``)
run while the program compiles: their kernels are compilation, not the program. Names may carry the
domain (``TSL:Thunk:#…#``, as nsys's own reports print them) or not (the SQLite export keeps the domain
apart): both are read.

XLA also names, through NVTX, each GPU it drives and the thread that launches work on it (openxla/xla
``xla/pjrt/gpu/se_gpu_pjrt_client.cc``, ``NameDeviceAndLauncherThread``): ``Xla:#global=G,local=L,process=P,
partition=S#`` (Nsight's ``TARGET_INFO_NVTX_CUDA_DEVICE``) and ``XlaLauncher:#…#`` (the thread's name);
``slice=`` before XLA renamed it ``partition=``.

Every Nsight Systems reader (nsys-jax archives, SQLite exports) reads these names here, infers the
steps of a trace without step annotations here (:func:`execution_steps`), and takes the host's dispatches of
each program from its host-side ``XlaModule`` ranges here (:func:`dispatches`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from rooflens.trace.events import unique_rows
from rooflens.trace.formats.raw import HOST_EVENT_MIN_PS, program_name
from rooflens.trace.groupby import unique_values

DOMAIN = "TSL"
_MODULE = re.compile(r"(?:^|[#,])hlo_module=([^,#]+)")
_PROGRAM_ID = re.compile(r"(?:^|[#,])program_id=(\d+)")
_COMPILE_MODULE = re.compile(r"(?:^|[#,])module=([^,#]+)")
_PROGRAM = re.compile(r"(.*)\((\d+)\)")  # "<module>(<program id>)", as program_name writes it
_XLA_NAME = re.compile(r"^(Xla|XlaLauncher):#global=(\d+),local=(\d+),process=(\d+),(?:partition|slice)=(\d+)#$")
#: range kinds that are compilation (XlaPass covers XlaPassPipeline)
COMPILE_KINDS = ("XlaCompile", "XlaAutotunerMeasurement", "XlaPass")
AUTOTUNE_KIND = "XlaAutotunerMeasurement"
TOP_COMPILE_KIND = "XlaCompile"  # one module's whole compilation


@dataclass
class RangeKinds:
    """Per distinct range name: what it is, and what its payload says."""

    module: np.ndarray  # bool: an XlaModule range (a program execution, unless compilation holds it)
    thunk: np.ndarray  # bool: a Thunk range (an HLO op)
    compile: np.ndarray  # bool: compilation (XlaCompile, XlaPass*, XlaAutotunerMeasurement)
    autotune: np.ndarray  # bool: an XlaAutotunerMeasurement range
    top_compile: np.ndarray  # bool: an XlaCompile range (one module's whole compilation)
    program: list[str]  # module ranges: "<module>(<id>)"; compile ranges: the module compiled
    op: list[str]  # thunk ranges: the HLO instruction
    scope: list[str]  # thunk ranges: the JAX name stack (may be "")


def payload(name: str) -> str:
    """What a range's name holds between its ``#``s (``a=1,b=2``)."""
    a = name.find("#")
    b = name.rfind("#")
    return name[a + 1:b] if 0 <= a < b else ""


def _kind(name: str) -> str:
    """``XlaModule`` of ``TSL:XlaModule:#…#`` or ``XlaModule:#…#``."""
    if name.startswith(DOMAIN + ":"):
        name = name[len(DOMAIN) + 1:]
    return name.split(":", 1)[0] if ":#" in name else ""


def range_kinds(names: list[str]) -> RangeKinds:
    """Classify distinct range names (one pass over the names, not over the ranges)."""
    n = len(names)
    module, thunk = np.zeros(n, bool), np.zeros(n, bool)
    compile_, autotune, top = np.zeros(n, bool), np.zeros(n, bool), np.zeros(n, bool)
    program, op, scope = [""] * n, [""] * n, [""] * n
    for k, name in enumerate(names):
        kind = _kind(name)
        if not kind:
            continue
        p = payload(name)
        if kind == "XlaModule":
            m, pid = _MODULE.search(p), _PROGRAM_ID.search(p)
            module[k] = m is not None
            program[k] = program_name(m.group(1), int(pid.group(1)) if pid else None) if m else ""
        elif kind == "Thunk":
            at = p.rfind("hlo_op=")
            if at >= 0 and (at == 0 or p[at - 1] == ","):
                thunk[k] = True
                op[k] = p[at + len("hlo_op="):].split(",", 1)[0]
                if p.startswith("name="):
                    scope[k] = p[len("name="):max(at - 1, len("name="))]
        elif kind.startswith(COMPILE_KINDS):
            compile_[k] = True
            autotune[k] = kind == AUTOTUNE_KIND
            top[k] = kind == TOP_COMPILE_KIND
            m = _COMPILE_MODULE.search(p)
            program[k] = m.group(1) if m else ""
    return RangeKinds(module, thunk, compile_, autotune, top, program, op, scope)


def program_parts(program: str) -> tuple[str, int | None]:
    """(module, program id) of a program named ``<module>(<id>)``; (name, None) for a module range
    without ``program_id`` (XLA's ``ModuleAnnotation(name)``)."""
    m = _PROGRAM.fullmatch(program)
    return (m.group(1), int(m.group(2))) if m else (program, None)


def module_of(program: str) -> str:
    """The module of a program named ``<module>(<id>)``, as notes show it."""
    return program_parts(program)[0]


def candidate_modules(kinds: RangeKinds, module: np.ndarray) -> tuple[int, str]:
    """The candidate modules the GPU autotuner ran (compilation, not the program), as a note shows them:
    (how many, the first four), from the name codes of the XlaModule ranges that held the measured work
    (-1: none)."""
    modules = sorted({kinds.program[c] for c in unique_values(module[module >= 0]).tolist()} - {""})
    return len(modules), ", ".join(module_of(m) for m in modules[:4]) + (", …" if len(modules) > 4 else "")


def compilations(kinds: RangeKinds, name: np.ndarray, start_ps: np.ndarray, end_ps: np.ndarray
                 ) -> list[tuple[str, int, int]]:
    """The host's XLA compilations as host events, in time order: ("XlaCompile <module>", start ps, end ps)
    of each ``XlaCompile`` range (``name``: codes into ``kinds``) at least ``HOST_EVENT_MIN_PS`` long."""
    sel = np.flatnonzero(kinds.top_compile[name] & (end_ps - start_ps >= HOST_EVENT_MIN_PS))
    return sorted(((f"{TOP_COMPILE_KIND} {kinds.program[c] or '?'}", s, e)
                   for c, s, e in zip(name[sel].tolist(), start_ps[sel].tolist(), end_ps[sel].tolist())),
                  key=lambda h: h[1])


def compilations_note(events: list[tuple[str, int, int]]) -> list[str]:
    """What the host's XLA compilations (:func:`compilations`) cost, as a note (none without any)."""
    if not events:
        return []
    compile_s = sum(e - s for _, s, e in events) * 1e-12
    return [f"the host compiled {len(events)} XLA modules in {compile_s:.3g} s ({TOP_COMPILE_KIND} ranges): "
            "the device idles meanwhile"]


def dispatches(kinds: RangeKinds, name: np.ndarray, thread: np.ndarray, start_ps: np.ndarray, end_ps: np.ndarray
               ) -> dict[str, np.ndarray]:
    """The host's dispatches of each program, as :attr:`~rooflens.trace.formats.raw.RawTrace.dispatches`
    holds them: program → start times (ps, sorted), from the host-side ranges (``name``: codes into ``kinds``;
    ``thread``: any integer id of the pushing thread).

    XLA pushes an ``XlaModule`` range on the launching thread around each program execution it starts (its
    launches inside it), whether or not the GPU ever runs the work: the range's start is the dispatch, and its
    program (``<module>(<program id>)``) the very name the executions carry, which
    :func:`rooflens.trace.dispatch.program_of` matches exactly. ``XlaModule`` ranges inside compilation (on the
    same thread, under ``XlaCompile``/``XlaPass*``/``XlaAutotunerMeasurement``: the autotuner's candidate
    modules) are not dispatches. One process driving several GPUs pushes one range per GPU for one execution,
    each on its GPU's launcher thread: a program's dispatches are those of the thread that pushed it most (as
    its executions are counted on its most complete device)."""
    rows = np.flatnonzero(kinds.module[name])
    if not len(rows):
        return {}
    rows = rows[~_inside(kinds.compile[name], thread, start_ps, end_ps, rows)]
    programs, code = np.unique(np.asarray(kinds.program, dtype=object), return_inverse=True)
    prog = code.reshape(-1)[name[rows]]
    pairs, inv = unique_rows(prog, thread[rows])  # (program, thread), in that order
    count = np.bincount(inv, minlength=len(pairs))
    best = np.lexsort((-count, pairs[:, 0]))  # per program, its thread with the most ranges first
    first = best[np.r_[True, pairs[best[1:], 0] != pairs[best[:-1], 0]]]
    keep = np.isin(inv, first)
    rows, prog = rows[keep], prog[keep]
    by = np.lexsort((start_ps[rows], prog))
    rows, prog = rows[by], prog[by]
    cut = np.flatnonzero(prog[1:] != prog[:-1]) + 1
    return {str(programs[int(prog[lo])]): start_ps[rows[lo:hi]].astype(np.int64)
            for lo, hi in zip(np.r_[0, cut].tolist(), np.r_[cut, len(rows)].tolist())}


def _inside(flag: np.ndarray, thread: np.ndarray, start_ps: np.ndarray, end_ps: np.ndarray, rows: np.ndarray
            ) -> np.ndarray:
    """For each range of ``rows``: whether a range that ``flag`` marks is open on its thread at its start (one
    that started by then, on that thread, and had not ended): the running maximum of those ranges' ends, in
    time order per thread, read at each row's start."""
    outer = np.flatnonzero(flag)
    if not len(outer) or not len(rows):
        return np.zeros(len(rows), bool)
    ends, end_rank = np.unique(end_ps[outer], return_inverse=True)
    both = np.concatenate([outer, rows])
    is_row = np.r_[np.zeros(len(outer), np.int8), np.ones(len(rows), np.int8)]
    _, t = np.unique(thread[both], return_inverse=True)
    order = np.lexsort((is_row, start_ps[both], t))  # a range pushed at the row's very start comes first
    lift = (len(ends) + 1) * t[order].astype(np.int64)  # each thread's values above every earlier thread's
    value = np.where(is_row[order] == 1, -1, np.r_[end_rank.reshape(-1), np.zeros(len(rows), np.int64)][order])
    reach = np.maximum.accumulate(value + lift) - lift  # per thread: the latest end rank so far (-1: none)
    out = np.zeros(len(both), bool)
    got = reach >= 0
    out[order[got]] = ends[reach[got]] >= start_ps[both][order[got]]
    return out[len(outer):]


@dataclass(frozen=True)
class XlaDevice:
    """A GPU as XLA numbers it: its global id in the job, its ordinal in its process, the process."""

    global_id: int
    local: int
    process: int


def xla_device(name: str) -> tuple[str, XlaDevice] | None:
    """``("Xla" | "XlaLauncher", device)`` of a name XLA gave a GPU or its launcher thread, else None."""
    m = _XLA_NAME.match(name or "")
    return (m.group(1), XlaDevice(int(m.group(2)), int(m.group(3)), int(m.group(4)))) if m else None


def execution_steps(start_ps: np.ndarray, end_ps: np.ndarray, program: np.ndarray, device: np.ndarray,
                    programs: list[str]) -> tuple[list[tuple[int, int, int]], list[str]]:
    """The main program's executions as steps: (number, start ps, end ps), numbered from 0 in time order,
    and a note saying so (none without executions).

    ``start_ps``/``end_ps``/``program``/``device``: one row per program execution (its device span, its
    program's code into ``programs``, its device). The main program is the one with the most device time
    among those a device ran more than once (else the one with the most). Each device runs its own
    executions (one process may drive several): the k-th on every device is step k, as nsys-jax numbers
    them (``ProgramExecution``, per device), from its first device's start to the start of step k+1 (the
    host's work between them belongs to the step, as under a step annotation); the last ends with its
    latest execution's end."""
    if not len(start_ps):
        return [], []
    n_programs = len(programs)
    pairs, pair_of = unique_rows(program, device)  # (program, device), in that order
    per_device = np.bincount(pair_of, minlength=len(pairs))  # executions of each program on each device
    most = np.zeros(n_programs, np.int64)
    np.maximum.at(most, pairs[:, 0], per_device)
    busy = np.bincount(program, weights=(end_ps - start_ps).astype(np.float64), minlength=n_programs)
    pool = np.flatnonzero(most > 1)  # run more than once on some device
    if not len(pool):
        pool = np.flatnonzero(most)
    main = int(pool[np.argmax(busy[pool])])
    mine = np.flatnonzero(program == main)
    mine = mine[np.lexsort((start_ps[mine], device[mine]))]  # by device, then time
    d = device[mine]
    first = np.r_[True, d[1:] != d[:-1]]
    k = np.arange(len(mine)) - np.maximum.accumulate(np.where(first, np.arange(len(mine)), 0))
    n = int(k.max()) + 1
    starts = np.full(n, np.iinfo(np.int64).max, np.int64)
    ends = np.full(n, np.iinfo(np.int64).min, np.int64)
    np.minimum.at(starts, k, start_ps[mine])
    np.maximum.at(ends, k, end_ps[mine])
    stop = np.append(starts[1:], ends[-1])
    steps = [(j, int(a), int(max(b, a))) for j, (a, b) in enumerate(zip(starts.tolist(), stop.tolist()))]
    ran = per_device[pairs[:, 0] == main]  # its executions on each device that ran it
    shown = module_of(programs[main])
    if len(ran) == 1:
        how = f"the {n} executions of {shown}"
    elif len(set(ran.tolist())) == 1:
        how = f"the {n} executions of {shown} on each of its {len(ran)} GPUs (the k-th on every GPU)"
    else:
        how = f"the executions of {shown} on its {len(ran)} GPUs ({', '.join(map(str, ran.tolist()))} times: the " \
              "k-th on every GPU)"
    return steps, [f"steps: {how}, the main program (the trace has no step annotations): each from one "
                   "execution's start to the next's"]
