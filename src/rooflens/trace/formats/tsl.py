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
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from rooflens.trace.formats.raw import program_name

DOMAIN = "TSL"
_MODULE = re.compile(r"(?:^|[#,])hlo_module=([^,#]+)")
_PROGRAM_ID = re.compile(r"(?:^|[#,])program_id=(\d+)")
_COMPILE_MODULE = re.compile(r"(?:^|[#,])module=([^,#]+)")
#: range kinds that are compilation (XlaPass covers XlaPassPipeline)
COMPILE_KINDS = ("XlaCompile", "XlaAutotunerMeasurement", "XlaPass")
AUTOTUNE_KIND = "XlaAutotunerMeasurement"


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
            top[k] = kind == "XlaCompile"
            m = _COMPILE_MODULE.search(p)
            program[k] = m.group(1) if m else ""
    return RangeKinds(module, thunk, compile_, autotune, top, program, op, scope)


def execution_steps(start_ps: np.ndarray, end_ps: np.ndarray, program: np.ndarray, device: np.ndarray,
                    n_programs: int) -> tuple[list[tuple[int, int, int]], int]:
    """The main program's executions as steps, and the main program's code (-1: none).

    ``start_ps``/``end_ps``/``program``/``device``: one row per program execution (its device span,
    its program code, its device). The main program is the one with the most device time among those
    run more than once (else the one with the most). Each device's executions of it are numbered in
    time order; step k runs from the first device's start of its k-th execution to the start of the
    k+1-th (the host's work between them belongs to the step, as under a step annotation); the last
    ends with its latest execution's end."""
    if not len(start_ps):
        return [], -1
    count = np.bincount(program, minlength=n_programs)
    busy = np.bincount(program, weights=(end_ps - start_ps).astype(np.float64), minlength=n_programs)
    devs = np.maximum(np.asarray([len(np.unique(device[program == p])) for p in range(n_programs)]), 1)
    pool = np.flatnonzero(count > devs)  # run more than once on some device
    if not len(pool):
        pool = np.flatnonzero(count)
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
    return [(j, int(a), int(max(b, a))) for j, (a, b) in enumerate(zip(starts.tolist(), stop.tolist()))], main
