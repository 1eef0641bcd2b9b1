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

import bisect
import gzip
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rooflens.errors import RooflensError
from rooflens.trace.events import EventTable, TableBuilder

_DEVICE_PLANE = re.compile(r"^/device:(TPU|GPU):(\d+)")
_EXECUTE = "CommonPjRtLoadedExecutable::Execute"
HOST_EVENT_MIN_NS = 2e5


@dataclass
class RawTrace:
    host: str
    table: EventTable
    steps: list[tuple[int, float, float]]  # (step number, start ns, end ns)
    device_kind: str  # "TPU v6 Lite", "cpu", "GPU", …
    platform: str  # tpu | gpu | cpu | unknown
    notes: list[str] = field(default_factory=list)  # what the trace could not give
    plane_stats: dict = field(default_factory=dict)  # e.g. a TPU's peak_teraflops_per_second
    host_events: list[tuple[str, float, float]] = field(default_factory=list)  # Python frames ≥ 0.2 ms


def _op_name(text: str) -> str:
    """``%all-reduce = f32[…] all-reduce(…)`` → ``all-reduce`` (TPU events name the whole instruction)."""
    head = text.split(" = ", 1)[0] if " = " in text else text
    return head.strip().lstrip("%").removeprefix("ROOT ").strip()


def _program_at(programs: list[tuple[float, float, str]], t: float) -> str:
    """The program running at time t on one device (executions sorted by start)."""
    k = bisect.bisect_right(programs, (t, float("inf"), "\uffff"))
    if k and programs[k - 1][0] <= t <= programs[k - 1][1]:
        return programs[k - 1][2]
    return ""



def read_xspace(path: Path) -> RawTrace:
    head = _read_bytes(path, 1)  # the file itself goes straight to the C++ parser: no Python copy of it
    if head != b"\x0a":
        raise RooflensError(f"{path} is not an XSpace profile (.xplane.pb); it does not start like one.")
    try:
        from jax.profiler import ProfileData

        pd = ProfileData.from_file(str(path))
        planes = list(pd.planes)
    except Exception as e:  # the C++ parser's message names the protobuf problem
        raise RooflensError(f"{path} is a damaged or truncated XSpace profile ({_first(e)}).") from None
    host = path.name.removesuffix(".xplane.pb")
    b = TableBuilder()
    steps: list[tuple[int, float, float]] = []
    device_kind, platform, plane_stats = "", "unknown", {}
    device_rows = 0
    host_events: list[tuple[str, float, float]] = []
    for plane in planes:
        m = _DEVICE_PLANE.match(plane.name)
        if not m:
            continue
        kind, dev = m.group(1), int(m.group(2))
        stats = dict(plane.stats)
        if not device_kind:
            device_kind = str(stats.get("device_type_string") or stats.get("device_vendor") or kind)
            plane_stats = {k: v for k, v in stats.items() if isinstance(v, int | float)}
        lines = list(plane.lines)
        if kind == "TPU":
            platform = "tpu"
            modules = sorted((e.start_ns, e.start_ns + e.duration_ns, e.name)
                             for ln in lines if ln.name == "XLA Modules" for e in ln.events)
            for ln in lines:
                if ln.name == "Steps":
                    steps += [(_step_num(e), e.start_ns, e.start_ns + e.duration_ns) for e in ln.events]
                if ln.name != "XLA Ops":
                    continue
                for e in ln.events:
                    name = _op_name(e.name)
                    program = _program_at(modules, e.start_ns)
                    b.add(host, dev, ln.name, name, program, e.start_ns, e.duration_ns)
                    b.hlo_text.setdefault((program, name), e.name)
                    device_rows += 1
        else:
            platform = "gpu"
            for ln in lines:
                if ln.name == "Steps":
                    steps += [(_step_num(e), e.start_ns, e.start_ns + e.duration_ns) for e in ln.events]
                    continue
                for e in ln.events:
                    st = dict(e.stats)
                    op = st.get("hlo_op")
                    if not op:
                        continue
                    b.add(host, dev, ln.name, str(op), _program(st), e.start_ns, e.duration_ns)
                    device_rows += 1
    for plane in planes:
        if plane.name != "/host:CPU":
            continue
        for ln in plane.lines:
            if ln.name == "python":  # JAX's Python tracer: what the host was doing (for idle gaps)
                host_events += [(e.name, e.start_ns, e.start_ns + e.duration_ns) for e in ln.events
                                if e.duration_ns >= HOST_EVENT_MIN_NS and e.name.startswith("$")]
        skip: set[str] = set()  # runtime bookkeeping names (thread-pool regions, waits): no stats needed
        host_c, name_code, prog_code = b.hosts.code(host), b.names.code, b.programs.code
        cols = b.cols
        for ln in plane.lines:
            execute_dev: list[tuple[float, float, int]] = []
            line_c = b.lines.code(ln.name)
            for e in ln.events:
                name = e.name
                if name in skip:
                    continue
                st = dict(e.stats)
                if not st or ("hlo_op" not in st and "step_num" not in st and "global_device_id" not in st
                              and not name.startswith(_EXECUTE)):
                    skip.add(name)
                    continue
                if "step_num" in st:
                    steps.append((int(st["step_num"]), e.start_ns, e.start_ns + e.duration_ns))
                    continue
                if device_rows:
                    continue  # TPU/GPU: host threads only launch; the device planes hold the ops
                if e.name.startswith(_EXECUTE) or "global_device_id" in st:
                    if "global_device_id" in st:
                        execute_dev.append((e.start_ns, e.start_ns + e.duration_ns, int(st["global_device_id"])))
                    continue
                op = st.get("hlo_op")
                if not op:
                    continue
                dev = st.get("device_ordinal")
                start = e.start_ns
                if dev is None:
                    dev = next((d for s, t, d in reversed(execute_dev) if s <= start <= t), -1)
                cols["host"].append(host_c)
                cols["device"].append(int(dev))
                cols["line"].append(line_c)
                cols["name"].append(name_code(str(op)))
                cols["program"].append(prog_code(_program(st)))
                cols["start"].append(start)
                cols["dur"].append(e.duration_ns)
                platform = "cpu"
        if platform == "cpu":
            device_kind = "cpu"
    return RawTrace(host, b.build(), sorted(steps), device_kind or "unknown", platform, plane_stats=plane_stats,
                    host_events=host_events)


def _number(v) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _program(st: dict) -> str:
    """``jit_step(24)``: the module name and, when the event carries it, its program id."""
    name = str(st.get("hlo_module", ""))
    pid = st.get("program_id")
    return f"{name}({pid})" if pid is not None and name else name


def _step_num(e) -> int:
    st = dict(e.stats)
    for k in ("step_num", "step_id", "group_id"):
        if k in st:
            return int(st[k])
    return -1


def read_chrome(path: Path) -> RawTrace:
    data = _read_bytes(path)
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError):
            raise RooflensError(f"{path} is a damaged or truncated gzip file.") from None
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise RooflensError(f"{path} is not a Chrome trace (it is not JSON, or it is cut short).") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise RooflensError(f"{path} is JSON but not a Chrome trace (no traceEvents).")
    host = path.name.removesuffix(".gz").removesuffix(".json").removesuffix(".trace")
    procs: dict = {}
    threads: dict = {}
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "M":
            if e.get("name") == "process_name":
                procs[e.get("pid")] = str(e.get("args", {}).get("name", ""))
            elif e.get("name") == "thread_name":
                threads[(e.get("pid"), e.get("tid"))] = str(e.get("args", {}).get("name", ""))
    b = TableBuilder()
    steps: list[tuple[int, float, float]] = []
    platform, device_kind = "unknown", ""
    device_pids = {pid: _DEVICE_PLANE.match(name) for pid, name in procs.items() if _DEVICE_PLANE.match(name)}
    has_device_ops = False
    cpu_rows = []
    host_events: list[tuple[str, float, float]] = []
    tpu_modules: dict[int, list] = {}
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        pid = e.get("pid")
        line = threads.get((pid, e.get("tid")), str(e.get("tid")))
        if line == "XLA Modules" and pid in device_pids:
            start = float(e.get("ts", 0)) * 1e3
            tpu_modules.setdefault(pid, []).append((start, start + float(e.get("dur", 0)) * 1e3,
                                                    str(e.get("name", ""))))
    for mods in tpu_modules.values():
        mods.sort()
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        pid = e.get("pid")
        args = e.get("args") or {}
        start, dur = float(e.get("ts", 0)) * 1e3, float(e.get("dur", 0)) * 1e3
        if "step_num" in args:
            steps.append((int(args["step_num"]), start, start + dur))
            continue
        line = threads.get((pid, e.get("tid")), str(e.get("tid")))
        name = str(e.get("name", ""))
        if line == "python" and dur >= HOST_EVENT_MIN_NS and name.startswith("$"):
            host_events.append((name, start, start + dur))
            continue
        m = device_pids.get(pid)
        if m:
            dev = int(m.group(2))
            if m.group(1) == "TPU":
                platform, device_kind = "tpu", device_kind or "TPU"
                if line != "XLA Ops":
                    continue
                long_name = str(args.get("long_name") or e.get("name", ""))
                name = _op_name(str(e.get("name", "")))
                program = str(args.get("hlo_module") or _program_at(tpu_modules.get(pid, []), start))
                b.add(host, dev, line, name, program, start, dur)
                b.hlo_text.setdefault((program, name), long_name)
                if "hlo_category" in args or "tf_op" in args:
                    b.op_meta.setdefault((program, name), {
                        "hlo_category": str(args.get("hlo_category", "")), "op_name": str(args.get("tf_op", "")),
                        # XLA's own per-op counts (TPU profiler): they price ops whose HLO the trace lacks
                        "flops": _number(args.get("model_flops")), "bytes": _number(args.get("bytes_accessed"))})
                has_device_ops = True
            elif args.get("hlo_op"):
                platform, device_kind = "gpu", device_kind or "GPU"
                b.add(host, dev, line, str(args["hlo_op"]), _program(args), start, dur)
                has_device_ops = True
        elif args.get("hlo_op") and "device_ordinal" in args:
            cpu_rows.append((int(args["device_ordinal"]), line, str(args["hlo_op"]), _program(args), start, dur))
    if not has_device_ops and cpu_rows:
        platform, device_kind = "cpu", "cpu"
        for dev, line, op, program, start, dur in cpu_rows:
            b.add(host, dev, line, op, program, start, dur)
    return RawTrace(host, b.build(), sorted(steps), device_kind or "unknown", platform, host_events=host_events)


def _read_bytes(path: Path, limit: int = -1) -> bytes:
    try:
        with path.open("rb") as fh:
            data = fh.read(limit)
    except OSError as e:
        raise RooflensError(f"cannot read {path}: {e.strerror or e}.") from None
    if not data:
        raise RooflensError(f"{path} is empty.")
    return data


def _first(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return (lines[0] if lines else type(e).__name__)[:200]


def assign_steps(table: EventTable, steps: list[tuple[int, float, float]]) -> None:
    """Set each event's step: the annotated step whose interval holds the event's start."""
    if not steps or not len(table):
        return
    starts = np.asarray([s for _, s, _ in steps])
    ends = np.asarray([t for _, _, t in steps])
    nums = np.asarray([n for n, _, _ in steps], dtype=np.int32)
    idx = np.searchsorted(starts, table.start_ns, side="right") - 1
    ok = (idx >= 0) & (table.start_ns <= ends[np.clip(idx, 0, None)])
    table.step[:] = np.where(ok, nums[np.clip(idx, 0, None)], -1)
