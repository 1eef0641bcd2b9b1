"""Readers of JAX profiler output: XSpace (``*.xplane.pb``) and Chrome JSON (``*.trace.json.gz``).

Both produce the same :class:`RawTrace`: device op events in an :class:`EventTable`, step
intervals, and what the trace says about its devices. Where the device work is:

* TPU: planes ``/device:TPU:N``, line ``XLA Ops`` (event name = the full HLO instruction text),
  programs on the ``XLA Modules`` line;
* GPU: planes ``/device:GPU:N``, kernel events on ``Stream #…`` lines carrying ``hlo_op`` and
  ``hlo_module`` (several kernels may make one HLO op);
* CPU: XLA:CPU runs ops on host threads (``tf_XLAEigen…``, ``tf_XLAPjRtCpuClient…``); each op
  event carries ``hlo_op``, ``hlo_module`` and ``device_ordinal`` (older jaxlibs: the device comes
  from the enclosing ``CommonPjRtLoadedExecutable::Execute`` event's ``global_device_id``).

Steps come from step annotations (events with a ``step_num`` stat, as
``jax.profiler.StepTraceAnnotation`` writes them) or a device ``Steps`` line.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from rooflens.trace.events import EventTable
from rooflens.trace.formats.xspace import wire as W
from rooflens.trace.groupby import is_sorted, unique_values

DEVICE_PLANE = re.compile(r"^/device:(TPU|GPU):(\d+)")
HOST_EVENT_MIN_PS = 200_000_000  # Python frames shorter than 0.2 ms do not explain an idle gap
Progress = Callable[[int, int], None] | None


@dataclass
class RawTrace:
    """One host's trace file, read: its op events and what else the analysis needs. Times are
    picoseconds from ``table.origin_ns``."""

    host: str
    table: EventTable
    steps: list[tuple[int, int, int]]  # (step number, start ps, end ps)
    device_kind: str  # "TPU v6 Lite", "cpu", "GPU", …
    platform: str  # tpu | gpu | cpu | unknown
    notes: list[str] = field(default_factory=list)  # what the trace could not give
    plane_stats: dict = field(default_factory=dict)  # the first device plane's stats (numbers and strings)
    host_events: list[tuple[str, int, int]] = field(default_factory=list)  # Python frames ≥ 0.2 ms: name, start, end
    hlo_protos: dict[str, bytes] = field(default_factory=dict)  # program → serialized HloModuleProto
    events_total: int = 0  # every event the file holds, kept or not
    # the host's dispatches of jitted functions (``PjitFunction(<fn>)`` events, outermost only): fn → starts (ps); or
    # of programs named ``<module>(<program id>)`` (Nsight's XlaModule ranges: rooflens.trace.formats.tsl.dispatches)
    dispatches: dict[str, np.ndarray] = field(default_factory=dict)
    end_ps: int = 0  # where the trace ends: its last event's end, or the profiler's recorded stop when later
    # its times are on the clock of its process's own profiler session (Nsight Systems), not one the job's hosts
    # share: a pod's hosts are aligned on their collectives (rooflens.trace.align)
    session_clock: bool = False
    # its steps are executions the devices ran (the main program's, where the trace has no step annotations: Nsight),
    # not the host's annotations: a trace that stopped with work queued has no step of it to leave out
    steps_ran: bool = False
    # the framework that made it, as the trace shows it: "JAX", "TensorFlow", "PyTorch", or "" (not known)
    framework: str = ""


#: a host event that dispatches a jitted function: ``PjitFunction(train_step)`` (jaxlib's C++ dispatch path, on
#: the thread that called it; jax 0.4 to 0.10 on CPU, GPU and TPU), ``PmapFunction(f)`` for pmap
DISPATCH = re.compile(r"^(?:PjitFunction|PmapFunction)\((.*)\)$")
#: the host line JAX's Python tracer records its frames on: the thread running Python, which the profiler names
#: after the process, the interpreter's executable as it was started (``python``; ``python3`` under the
#: ``rooflens`` command, whose shebang names it; ``python3.12``; a free-threaded ``python3.13t``)
PYTHON_LINE = re.compile(r"python[0-9.]*t?")


def is_python_line(name: str) -> bool:
    """Whether a host line is the Python tracer's (:data:`PYTHON_LINE`)."""
    return PYTHON_LINE.fullmatch(name) is not None
DISPATCH_PREFIXES = ("PjitFunction(", "PmapFunction(")
#: a host event of the runtime launching a compiled program, on the thread that asked for it (an event whose name
#: starts with one of these): XLA:CPU's ``CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice`` (jax 0.10, a
#: trace made here) and ``…::Execute`` (older jaxlibs); GPU's ``PjRtStreamExecutorLoadedExecutable::Execute`` and
#: ``…::ExecuteHelper`` (tests/fixtures/gpu_amd); TPU's ``TfrtTpuLoadedExecutable::Execute`` and
#: ``TpuLoadedExecutable::Execute`` (tests/fixtures/tpu); a PJRT plugin's ``PJRT_LoadedExecutable_Execute`` and
#: ``PjRtCApiLoadedExecutable::Execute``; the TFRT CPU client's ``TfrtCpuExecutable::Execute…``
EXECUTE_PREFIXES = ("CommonPjRtLoadedExecutable::Execute", "PjRtStreamExecutorLoadedExecutable::Execute",
                    "TfrtTpuLoadedExecutable::Execute", "TpuLoadedExecutable::Execute",
                    "PjRtCApiLoadedExecutable::Execute", "PJRT_LoadedExecutable_Execute",
                    "TfrtCpuExecutable::Execute")


def top_level_dispatches(fn: np.ndarray, functions: list[str], line: np.ndarray, start: np.ndarray, dur: np.ndarray,
                         execute_line: np.ndarray | None = None, execute_start: np.ndarray | None = None
                         ) -> dict[str, np.ndarray]:
    """Each function's dispatches (start times, sorted) from its dispatch events (``fn``: the function each
    names, a code into ``functions``; ``line``: the thread it is on).

    A dispatch is a call that launched an execution: jaxlib records ``PjitFunction(f)`` for every call of a
    jitted function, those made on tracers while JAX traces something outside any jit too (Flax's ``init`` under
    ``nn.scan``, ``jax.eval_shape``), which run nothing. So where the trace records the runtime's execute events
    (``execute_line``/``execute_start``: those named by :data:`EXECUTE_PREFIXES`) on the threads that dispatch,
    only the dispatch events holding one (on their thread, starting within their span) count; where it records
    none there, every one does. An event nested in another counted dispatch event on its thread is not a dispatch
    of its own: jaxlib records ``PjitFunction(f)`` twice, one inside the other, for one call, and a jitted function
    called while another is traced (its first call) is part of that call."""
    if not len(start):
        return {}
    if execute_line is not None and execute_start is not None and len(execute_start):
        launched = _holding(line, start, start + dur, execute_line, execute_start)
        if launched is not None:
            fn, line, start, dur = fn[launched], line[launched], start[launched], dur[launched]
            if not len(start):
                return {}
    order = np.lexsort((-dur, start, line))
    ln, s, e = line[order], start[order], (start + dur)[order]
    nested = np.zeros(len(order), bool)
    for lo, hi in zip(*_runs(ln)):
        run_end = np.maximum.accumulate(e[lo:hi])
        nested[lo + 1:hi] = s[lo + 1:hi] < run_end[:-1]
    code, at = fn[order][~nested], s[~nested]
    by = np.lexsort((at, code))
    code, at = code[by], at[by]
    out: dict[str, np.ndarray] = {}
    for lo, hi in zip(*_runs(code)):  # one per function: several codes may name one function
        name = functions[int(code[lo])]
        out[name] = np.sort(np.concatenate([out[name], at[lo:hi]])) if name in out else at[lo:hi].astype(np.int64)
    return out


def _holding(line: np.ndarray, start: np.ndarray, end: np.ndarray, execute_line: np.ndarray,
             execute_start: np.ndarray) -> np.ndarray | None:
    """Which of the intervals (``line``, [``start``, ``end``)) hold an execute event's start on their line; None
    when no execute event is on any of their lines (the trace does not record them there)."""
    held = np.zeros(len(start), bool)
    seen = False
    for ln in unique_values(line).tolist():  # a searchsorted per thread
        at = np.sort(execute_start[execute_line == ln])
        if not len(at):
            continue
        seen = True
        mine = np.flatnonzero(line == ln)
        first = np.searchsorted(at, start[mine], side="left")  # the first execute at or after each start
        held[mine] = (first < len(at)) & (at[np.minimum(first, len(at) - 1)] < end[mine])
    return held if seen else None


def _runs(sorted_key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[lo, hi) of each run of equal values in a sorted array."""
    cut = np.flatnonzero(sorted_key[1:] != sorted_key[:-1]) + 1
    return np.concatenate([[0], cut]), np.concatenate([cut, [len(sorted_key)]])


def op_name(text: str) -> str:
    """``%all-reduce = f32[…] all-reduce(…)`` → ``all-reduce`` (TPU events name the whole instruction)."""
    head = text.split(" = ", 1)[0] if " = " in text else text
    return head.strip().lstrip("%").removeprefix("ROOT ").strip()


def uint64(v: int) -> int:
    return int(v) & 0xFFFFFFFFFFFFFFFF


def program_name(module: str, program_id: int | None) -> str:
    """``jit_step(24)``: the module name and, when the event carries it, its program id."""
    return f"{module}({uint64(program_id)})" if program_id is not None and module else module


def containing(starts: np.ndarray, ends: np.ndarray, values: np.ndarray, t: np.ndarray, default: int = -1
                ) -> np.ndarray:
    """For each time in ``t``: ``values`` of the latest interval (sorted by start) that holds it."""
    if not len(starts):
        return np.full(len(t), default, np.int64)
    k = np.searchsorted(starts, t, side="right") - 1
    kk = np.clip(k, 0, None)
    return np.where((k >= 0) & (t <= ends[kk]), values[kk], default)


def device_span(start_ps: np.ndarray, dur_ps: np.ndarray, device_offset_ps: np.ndarray,
                device_duration_ps: np.ndarray, on_device: np.ndarray, origin_ns: int,
                absent: int = W.NONE) -> tuple[np.ndarray, np.ndarray]:
    """XProf's timing of device events: (``device_offset_ps``, ``device_duration_ps``) where a device
    event carries both (the device's own clock, in ps on the trace's time base), else the event's span."""
    use = on_device & (device_offset_ps != absent) & (device_duration_ps != absent)
    if not use.any():
        return start_ps, dur_ps
    origin_ps = origin_ns * 1000 if origin_ns * 1000 <= np.iinfo(np.int64).max else 0
    return np.where(use, device_offset_ps - origin_ps, start_ps), np.where(use, device_duration_ps, dur_ps)


def hlo_module_of(hlo_proto: bytes) -> bytes | None:
    """``xla.HloProto.hlo_module`` (field 1) of a serialized HloProto."""
    from rooflens.trace.formats.protowire import fields

    try:
        for num, wt, v in fields(hlo_proto):
            if num == 1 and wt == 2:
                return bytes(v)
    except (ValueError, IndexError):
        return None
    return None


def number(v) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def trace_op_meta(st: dict) -> dict:
    """What a TPU trace says of an op itself: XLA's category, the framework op (named scope) and its
    own per-op counts, which price ops whose HLO the trace lacks."""
    return {"hlo_category": str(st.get("hlo_category", "")), "op_name": str(st.get("tf_op", "")),
            "flops": number(st.get("model_flops")), "bytes": number(st.get("bytes_accessed"))}


def assign_steps(table: EventTable, steps: list[tuple[int, float, float]], rows: np.ndarray | None = None) -> None:
    """Set each event's step (of ``rows``, default all): the step (number, start ns, end ns, from the
    table's origin) whose interval holds the event's start."""
    if not steps or not len(table):
        return
    starts = np.asarray([s for _, s, _ in steps], np.float64)
    ends = np.asarray([t for _, _, t in steps], np.float64)
    nums = np.asarray([n for n, _, _ in steps], dtype=np.int32)
    at = table.start_ns if rows is None else table.start_ns[rows]
    if is_sorted(starts) and is_sorted(at):
        # events and steps in time order (a table as read): each step's events are one slice of them
        got = np.full(len(at), -1, np.int32)
        lo = np.searchsorted(at, starts, side="left")
        hi = np.minimum(np.searchsorted(at, ends, side="right"),  # an event past a later step's start is that one's
                        np.searchsorted(at, np.append(starts[1:], np.inf), side="left"))
        for k in np.flatnonzero(hi > lo).tolist():
            got[lo[k]:hi[k]] = nums[k]
    else:  # the step whose start is the last at or before each event's, if the event starts before its end
        idx = np.searchsorted(starts, at, side="right") - 1
        ok = (idx >= 0) & (at <= ends[np.clip(idx, 0, None)])
        got = np.where(ok, nums[np.clip(idx, 0, None)], -1)
    if rows is None:
        table.step[:] = got
    else:
        table.step[rows] = got


#: lines TensorFlow's profiler derives on its device planes (tensorflow/profiler's GPU-multi-worker demo XSpace)
TENSORFLOW_LINES = ("TensorFlow Ops", "TensorFlow Name Scope")


def framework_of(jax_ops: bool, line_names, dispatches: bool = False) -> str:
    """What made a trace, from what it shows: XLA ops named by program (``hlo_op``/``hlo_module``) or jitted
    dispatches are JAX's; TensorFlow's derived device lines with none of those are TensorFlow's; else ""."""
    if jax_ops or dispatches:
        return "JAX"
    if any(n in TENSORFLOW_LINES for n in line_names):
        return "TensorFlow"
    return ""


def foreign_note(framework: str) -> str:
    """The sentence a trace of another framework gets: what rooflens reads of it, and what it cannot give."""
    return (f"this is a {framework} trace, not a JAX program: its GPU kernels are read by kernel name (time, "
            "timeline, idle), with no HLO and so no roofline to compare them with")


def kernels_note(names: list[str], index, dur_ps) -> str:
    """The note on GPU kernels that name no HLO op: their count and time, by kernel name, most time first.
    ``names[index[i]]`` is event i's kernel name (a name may stand at several places of ``names``)."""
    from rooflens.units import fmt_seconds, plural

    index = np.asarray(index, np.int64)
    counts = np.bincount(index, minlength=len(names)).tolist()
    times_s = (np.bincount(index, weights=np.asarray(dur_ps, np.float64), minlength=len(names)) * 1e-12).tolist()
    by_name: dict[str, list[float]] = {}
    for name, n, t in zip(names, counts, times_s):  # one entry a distinct name, not an event
        if n:
            c = by_name.setdefault(name, [0, 0.0])
            c[0] += n
            c[1] += t
    top = sorted(by_name.items(), key=lambda kv: -kv[1][1])
    verb = "names" if len(index) == 1 else "name"
    return (f"{plural(len(index), 'GPU kernel')} {verb} no HLO op ({fmt_seconds(sum(t for _, t in by_name.values()))} "
            "in all, counted in device busy time, no roofline): "
            + ", ".join(f"{n:,} × {name} ({fmt_seconds(t)})" for name, (n, t) in top[:4])
            + (f", and {len(top) - 4} more" if len(top) > 4 else ""))


#: XLA's GPU autotuner at work (jaxlib 0.11): the kernels that guard and time its candidates
#: (``stream_executor::gpu::RedzoneAllocatorKernelImpl``, ``…DelayKernel``, ``…RepeatBufferKernel``,
#: ``xla_fp_comparison<…>``, which checks candidates' results against each other)
AUTOTUNER_KERNEL = re.compile(r"^(?:void )?stream_executor::gpu::|xla_fp_comparison")


def autotuning(kernel: np.ndarray, helper: np.ndarray, module: np.ndarray, none: int, has_op: np.ndarray,
               dev: np.ndarray, start: np.ndarray, dur: np.ndarray, module_name) -> tuple[np.ndarray, str]:
    """XLA's GPU autotuning, traced when the trace holds a compilation: (a mask of its events, a note on them).

    The autotuner compiles each fusion it tunes as a module of its own, named after the fusion
    (``gemm_fusion_dot.1``, ``input_reduce_fusion``), and runs its candidate kernels between its own helper
    kernels (:data:`AUTOTUNER_KERNEL`), which carry that module's ``hlo_module``; the memsets and copies that
    prepare the candidates' buffers name no module. Those modules, the helpers and the kernels naming no op on
    the device while it tunes are compilation work, not the programs the script ran. Over every event: ``kernel``
    (a GPU kernel-line event), ``helper`` (an autotuner kernel by name), ``module`` (its module's code, ``none``
    for none), ``has_op`` (it names an HLO op); ``module_name(code)`` names a module."""
    mask = helper & kernel
    if not mask.any():
        return np.zeros(len(kernel), np.bool_), ""
    tuned = unique_values(module[mask])
    tuned = tuned[tuned != none]
    mask |= kernel & np.isin(module, tuned)
    no_op = np.flatnonzero(kernel & ~has_op)
    for d in unique_values(dev[mask]).tolist():
        on = mask & (dev == d)
        first, last = start[on].min(), (start[on] + dur[on]).max()
        mask[no_op[(dev[no_op] == d) & (start[no_op] >= first) & (start[no_op] < last)]] = True
    from rooflens.units import fmt_seconds, plural

    modules = sorted(module_name(int(c)) for c in tuned)
    what = (f"timing candidate kernels of {plural(len(modules), 'fusion')} ({', '.join(modules[:3])}"
            f"{', …' if len(modules) > 3 else ''})" if modules else "checking candidate kernels")
    return mask, (f"XLA's autotuner ran {plural(int(mask.sum()), 'kernel')} on the GPU while compiling, "
                  f"{fmt_seconds(float(dur[mask].sum()) * 1e-12)} in all, {what}: compilation work, not "
                  "the programs', left out of the device's ops")
