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
from pathlib import Path

import numpy as np

from rooflens.errors import RooflensError
from rooflens.trace import events as E
from rooflens.trace import wire as W
from rooflens.trace.events import EventTable

_DEVICE_PLANE = re.compile(r"^/device:(TPU|GPU):(\d+)")
_EXECUTE = "CommonPjRtLoadedExecutable::Execute"
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


def _op_name(text: str) -> str:
    """``%all-reduce = f32[…] all-reduce(…)`` → ``all-reduce`` (TPU events name the whole instruction)."""
    head = text.split(" = ", 1)[0] if " = " in text else text
    return head.strip().lstrip("%").removeprefix("ROOT ").strip()


def _uint64(v: int) -> int:
    return int(v) & 0xFFFFFFFFFFFFFFFF


def _program(module: str, program_id: int | None) -> str:
    """``jit_step(24)``: the module name and, when the event carries it, its program id."""
    return f"{module}({_uint64(program_id)})" if program_id is not None and module else module


def _containing(starts: np.ndarray, ends: np.ndarray, values: np.ndarray, t: np.ndarray, default: int = -1
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


def read_xspace(path: Path, progress: Progress = None, device_time: bool = True) -> RawTrace:
    """An ``.xplane.pb`` through our compiled decoder (:mod:`rooflens.trace.xspace`).

    Device work: TPU ``XLA Ops`` events (named by their metadata, the HLO instruction text; program
    by the op's ``program_id`` metadata stat, else the ``XLA Modules`` event around it; timed by
    XProf's device span), GPU kernels with ``hlo_op``, else CPU op events on host threads
    (device from ``device_ordinal``, or the enclosing ``Execute`` event's ``global_device_id``).
    """
    from rooflens.trace.xspace import decode

    x = decode(path, progress)
    host = path.name.removesuffix(".xplane.pb")
    kinds = []
    for p in x.planes:
        m = _DEVICE_PLANE.match(p.name)
        kinds.append((m.group(1), int(m.group(2))) if m else ("host" if p.name.startswith("/host:") else "", -1))
    # per event, small types: a 1 GB trace keeps millions of events
    plane_kind = np.asarray([{"TPU": 1, "GPU": 2, "host": 3}.get(k, 0) for k, _ in kinds] or [0], np.int8)
    plane_dev = np.asarray([d for _, d in kinds] or [-1], np.int32)
    line = x.line
    ev_plane = x.line_plane.astype(np.int32)[line] if len(x) else np.zeros(0, np.int32)
    ev_kind, ev_dev = plane_kind[ev_plane], plane_dev[ev_plane]
    lname = np.asarray(x.line_names + [""], dtype=object)
    role = {"XLA Ops": 1, "XLA Modules": 2, "Steps": 3, "python": 4}
    line_role = np.asarray([role.get(n, 0) for n in x.line_names] + [0], np.int8)
    ev_role = line_role[line] if len(x) else np.zeros(0, np.int8)
    event_start, start, dur = x.start_ps, x.start_ps, x.dur_ps
    if device_time:  # XProf's rule (tsl GetDeviceEventTimespan): device events carrying both stats are timed by them
        start, dur = device_span(start, dur, x.col("device_offset_ps"), x.col("device_duration_ps"),
                                 ev_kind != 3, x.origin_ns)
    meta = x.cols[W.COL_META]
    hlo_op = x.col("hlo_op")
    none = W.NONE

    # steps: device Steps lines, and host step annotations (jax.profiler.StepTraceAnnotation)
    steps: list[tuple[int, int, int]] = []
    step_num, step_id, group_id = x.col("step_num"), x.col("step_id"), x.col("group_id")
    sel = np.flatnonzero(((ev_kind == 1) | (ev_kind == 2)) & (ev_role == 3))
    host_step = np.flatnonzero((ev_kind == 3) & (step_num != none))
    for idx in (sel, host_step):
        a, b, c = step_num[idx], step_id[idx], group_id[idx]
        number = np.where(a != none, a, np.where(b != none, b, np.where(c != none, c, -1)))
        steps += list(zip(number.tolist(), start[idx].tolist(), (start[idx] + dur[idx]).tolist()))

    # the first device plane: what the device is, and its peaks
    device_kind, platform, plane_stats = "", "unknown", {}
    for p, (k, _) in zip(x.planes, kinds):
        if k in ("TPU", "GPU"):
            plane_stats = {a: v for a, v in p.stats.items() if isinstance(v, int | float | str)}
            device_kind = str(p.stats.get("device_type_string") or p.stats.get("device_vendor") or k)
            break

    hlo_text: dict[tuple[str, str], str] = {}
    op_meta: dict[tuple[str, str], dict] = {}
    vocab = E.Vocab()  # op names and programs, coded together
    words, code = vocab.words, vocab.code

    # TPU: op events named by their metadata; programs from XLA Modules
    tpu_ops = np.flatnonzero((ev_kind == 1) & (ev_role == 1))
    tpu_mod = np.flatnonzero((ev_kind == 1) & (ev_role == 2))
    parts = []  # (rows, device, name codes, program codes)
    if len(tpu_ops):
        platform = "tpu"
        pm = ev_plane[tpu_mod].astype(np.int64) << 40 | meta[tpu_mod]
        mod_key, mod_inv = np.unique(pm, return_inverse=True)
        mod_names = [x.event_metadata(x.planes[int(k >> 40)], int(k & ((1 << 40) - 1)))[0] for k in mod_key]
        by_id = {m.rsplit("(", 1)[1].rstrip(")"): m for m in mod_names if m.endswith(")") and "(" in m}
        mod_code = np.asarray([code(m) for m in mod_names] or [0], np.int64)[mod_inv] if len(tpu_mod) else \
            np.zeros(0, np.int64)
        key = ev_plane[tpu_ops].astype(np.int64) << 40 | meta[tpu_ops]
        uk, inv = np.unique(key, return_inverse=True)
        name_c = np.empty(len(uk), np.int64)
        prog_c = np.full(len(uk), -1, np.int64)
        texts, metas = [], []
        for k, kk in enumerate(uk):
            text, _, st = x.event_metadata(x.planes[int(kk >> 40)], int(kk & ((1 << 40) - 1)))
            name_c[k] = code(_op_name(text))
            pid = st.get("program_id")
            program = by_id.get(str(_uint64(pid))) if pid is not None else None
            if program is not None:
                prog_c[k] = code(program)
            texts.append(text)
            metas.append(_trace_op_meta(st) if "hlo_category" in st or "tf_op" in st else None)
        prog = prog_c[inv]
        # ops whose metadata names no program: the XLA Modules event around them on their device
        missing = np.flatnonzero(prog < 0)
        for d in np.unique(ev_dev[tpu_ops[missing]]):
            mine = np.flatnonzero(ev_dev[tpu_mod] == d)
            rows = missing[ev_dev[tpu_ops[missing]] == d]
            prog[rows] = _containing(event_start[tpu_mod[mine]], event_start[tpu_mod[mine]] + x.dur_ps[tpu_mod[mine]],
                                     mod_code[mine], event_start[tpu_ops[rows]], code(""))
        for k, pc in E.unique_rows(inv.ravel(), prog)[0].tolist():
            op_key = (words[pc], words[name_c[k]])
            hlo_text.setdefault(op_key, texts[k])
            if metas[k] is not None:
                op_meta.setdefault(op_key, metas[k])
        parts.append((tpu_ops, ev_dev[tpu_ops], name_c[inv.ravel()], prog))

    # GPU: kernels that name their HLO op
    gpu_ops = np.flatnonzero((ev_kind == 2) & (hlo_op != none))
    if len(gpu_ops):
        platform = "gpu"
        parts.append((gpu_ops, ev_dev[gpu_ops], *_string_codes(x, gpu_ops, code)))

    # CPU: XLA:CPU ops on host threads, when no device plane had any
    if not parts:
        cpu_ops = np.flatnonzero((ev_kind == 3) & (hlo_op != none))
        if len(cpu_ops):
            platform, device_kind = "cpu", "cpu"
            dev = x.col("device_ordinal")[cpu_ops].copy()
            unknown = np.flatnonzero(dev == none)
            if len(unknown):  # older jaxlibs: the device is the enclosing Execute's global_device_id
                gdev = x.col("global_device_id")
                execs = np.flatnonzero((ev_kind == 3) & (gdev != none))
                rows = cpu_ops[unknown]
                found = np.full(len(rows), -1, np.int64)
                for ln in np.unique(line[rows]):
                    mine = execs[line[execs] == ln]
                    at = np.flatnonzero(line[rows] == ln)
                    found[at] = _containing(start[mine], start[mine] + dur[mine], gdev[mine], start[rows[at]])
                dev[unknown] = found
            parts.append((cpu_ops, dev, *_string_codes(x, cpu_ops, code)))

    rows = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
    table = E.build(
        host=np.zeros(len(rows), np.int32), device=np.concatenate([p[1] for p in parts]) if parts else rows,
        line=line[rows], name=np.concatenate([p[2] for p in parts]) if parts else rows,
        program=np.concatenate([p[3] for p in parts]) if parts else rows, start_ps=start[rows], dur_ps=dur[rows],
        hosts=[host], lines=list(lname), names=words or [""], programs=words or [""], origin_ns=_absolute_origin(x),
        hlo_text=hlo_text, op_meta=op_meta)

    # the host's Python (JAX's Python tracer), for what the host did during idle gaps
    py = np.flatnonzero((ev_kind == 3) & (ev_role == 4))
    host_events = []
    if len(py):
        py_plane = ev_plane[py].astype(np.int64) << 40 | meta[py]
        uk, inv = np.unique(py_plane, return_inverse=True)
        names = [x.event_metadata(x.planes[int(k >> 40)], int(k & ((1 << 40) - 1)))[0] for k in uk]
        ok = np.asarray([n.startswith("$") for n in names] + [False])[inv]
        host_events = [(names[i], s, s + d) for i, s, d in
                       zip(inv[ok].tolist(), start[py[ok]].tolist(), dur[py[ok]].tolist())]

    protos = {}
    for p in x.planes:
        if p.name == "/host:metadata":
            for mid in p.meta_ids:
                name, _, st = x.event_metadata(p, int(mid))
                blob = st.get("Hlo Proto")
                if isinstance(blob, bytes):
                    module = _hlo_module_of(blob)
                    if module is not None:
                        protos[name] = module
    x.close()
    return RawTrace(host, table, sorted(steps), device_kind or ("cpu" if platform == "cpu" else "unknown"), platform,
                    plane_stats=plane_stats, host_events=host_events, hlo_protos=protos,
                    events_total=x.events_total)


def _absolute_origin(x) -> int:
    """The trace's origin on the wall clock: XSpace times count from the profile's start, which the
    ``Task Environment`` plane records (ns since the epoch); hosts of one job line up by it."""
    for p in x.planes:
        start = p.stats.get("profile_start_time") if p.name == "Task Environment" else None
        if isinstance(start, int) and start > 0:
            return start + x.origin_ns
    return x.origin_ns


def _string_codes(x, rows: np.ndarray, code) -> tuple[np.ndarray, np.ndarray]:
    """(op name codes, program codes) of events that carry ``hlo_op``/``hlo_module``/``program_id``."""
    op = x.col("hlo_op")[rows]
    mod = x.col("hlo_module")[rows]
    pid = x.col("program_id")[rows]
    u_op, inv_op = np.unique(op, return_inverse=True)
    names = np.asarray([code(x.strings[int(c)]) for c in u_op], np.int64)[inv_op]
    pairs, inv_p = E.unique_rows(mod, pid)
    progs = np.asarray([code(_program(x.strings[int(m)] if m != W.NONE else "", None if p == W.NONE else int(p)))
                        for m, p in pairs.tolist()], np.int64)[inv_p]
    return names, progs


def _hlo_module_of(hlo_proto: bytes) -> bytes | None:
    """``xla.HloProto.hlo_module`` (field 1) of a serialized HloProto."""
    from rooflens.trace.xspace import _py_fields

    try:
        for num, wt, v in _py_fields(hlo_proto):
            if num == 1 and wt == 2:
                return bytes(v)
    except (ValueError, IndexError):
        return None
    return None


def _number(v) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _trace_op_meta(st: dict) -> dict:
    """What a TPU trace says of an op itself: XLA's category, the framework op (named scope) and its
    own per-op counts, which price ops whose HLO the trace lacks."""
    return {"hlo_category": str(st.get("hlo_category", "")), "op_name": str(st.get("tf_op", "")),
            "flops": _number(st.get("model_flops")), "bytes": _number(st.get("bytes_accessed"))}


MAX_SPAN_US = 9e12  # int64 picoseconds hold 9.2e18 ps


def read_chrome(path: Path, progress: Progress = None) -> RawTrace:
    """A Chrome trace JSON, streamed (:mod:`rooflens.trace.chrome`), into the same RawTrace as XSpace."""
    from rooflens.trace.chrome import read_events

    ev = read_events(path, progress)
    host = path.name.removesuffix(".gz").removesuffix(".json").removesuffix(".trace")
    c = ev.arrays(path)
    words = list(ev.words)
    word = np.asarray(words + [""], dtype=object)
    n = len(c["ts"])
    t0 = float(c["ts"].min()) if n else 0.0
    if n:  # times are kept as int64 picoseconds: a span past ~106 days is a damaged field, not a trace
        span_us = max(float(c["ts"].max()) - t0, float(np.max(c["dur"])))
        if not np.isfinite(span_us) or span_us > MAX_SPAN_US:
            raise RooflensError(f"{path} has event times {span_us:.3g} µs apart or long, beyond any trace "
                                f"(at most {MAX_SPAN_US:.3g} µs); its 'ts' or 'dur' fields are damaged.")
    start = np.rint((c["ts"] - t0) * 1e6).astype(np.int64)
    dur = np.rint(np.maximum(c["dur"], 0) * 1e6).astype(np.int64)
    # XProf's rule for device ops: the span is (device_offset_ps, device_duration_ps) when both are given

    # processes and threads: device planes are processes named /device:TPU:N
    proc_dev = {pid: _DEVICE_PLANE.match(name) for pid, name in ev.processes.items()}
    dev_kind = np.zeros(len(words) + 1, np.int64)
    dev_num = np.full(len(words) + 1, -1, np.int64)
    for pid, m in proc_dev.items():
        if m:
            dev_kind[pid] = 1 if m.group(1) == "TPU" else 2
            dev_num[pid] = int(m.group(2))
    pid, tid = c["pid"], c["tid"]
    line_key, line_inv = E.unique_rows(pid, tid)
    line_names = [ev.threads.get((int(p), int(t)), words[t] if t >= 0 else "") for p, t in line_key]
    role = {"XLA Ops": 1, "XLA Modules": 2, "python": 4}
    ev_role = np.asarray([role.get(x, 0) for x in line_names] + [0], np.int64)[line_inv] if n else line_inv
    kind, dev = dev_kind[pid], dev_num[pid]
    event_start, event_dur = start, dur
    start, dur = device_span(start, dur, c["device_offset_ps"], c["device_duration_ps"], kind > 0,
                             int(round(t0 * 1e3)), absent=-1)

    steps = [(s_, a, a + d) for s_, a, d in zip(c["step_num"][c["step_num"] >= 0].tolist(),
                                                 start[c["step_num"] >= 0].tolist(), dur[c["step_num"] >= 0].tolist())]
    vocab = E.Vocab(words)
    words, code = vocab.words, vocab.code

    hlo_text: dict[tuple[str, str], str] = {}
    op_meta: dict[tuple[str, str], dict] = {}
    parts = []
    platform, device_kind = "unknown", ""
    tpu = np.flatnonzero((kind == 1) & (ev_role == 1))
    if len(tpu):
        platform, device_kind = "tpu", "TPU"
        mods = np.flatnonzero((kind == 1) & (ev_role == 2))
        u_name, inv = np.unique(c["name"][tpu], return_inverse=True)
        name_c = np.asarray([code(_op_name(words[k])) for k in u_name], np.int64)[inv.ravel()]
        prog = np.where(c["hlo_module"][tpu] >= 0, c["hlo_module"][tpu], -1)
        missing = np.flatnonzero(prog < 0)
        for d in np.unique(dev[tpu[missing]]):
            mine = mods[dev[mods] == d]
            rows = missing[dev[tpu[missing]] == d]
            prog[rows] = _containing(event_start[mine], event_start[mine] + event_dur[mine], c["name"][mine],
                                     event_start[tpu[rows]], code(""))
        keyed = E.unique_rows(prog, name_c, c["name"][tpu], c["long_name"][tpu], c["pid"][tpu])[0]
        for pc, nc, raw, long_name, p in keyed.tolist():
            key = (words[pc], words[nc])
            hlo_text.setdefault(key, words[long_name] if long_name >= 0 else words[raw])
            args = ev.op_meta.get((p, raw))
            if args is not None:
                op_meta.setdefault(key, _trace_op_meta(args))
        parts.append((tpu, dev[tpu], name_c, prog))
    gpu = np.flatnonzero((kind == 2) & (c["hlo_op"] >= 0))
    if len(gpu):
        platform, device_kind = "gpu", "GPU"
        parts.append((gpu, dev[gpu], c["hlo_op"][gpu], _chrome_programs(c, gpu, word, code)))
    if not parts:
        cpu = np.flatnonzero((kind == 0) & (c["hlo_op"] >= 0) & (c["device_ordinal"] >= 0))
        if len(cpu):
            platform, device_kind = "cpu", "cpu"
            parts.append((cpu, c["device_ordinal"][cpu], c["hlo_op"][cpu], _chrome_programs(c, cpu, word, code)))
    rows = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
    table = E.build(
        host=np.zeros(len(rows), np.int32), device=np.concatenate([p[1] for p in parts]) if parts else rows,
        line=line_inv[rows], name=np.concatenate([p[2] for p in parts]) if parts else rows,
        program=np.concatenate([p[3] for p in parts]) if parts else rows, start_ps=start[rows], dur_ps=dur[rows],
        hosts=[host], lines=line_names or [""], names=words or [""], programs=words or [""],
        origin_ns=int(round(t0 * 1e3)), hlo_text=hlo_text, op_meta=op_meta)
    py = np.flatnonzero((ev_role == 4) & (dur >= HOST_EVENT_MIN_PS))
    host_events = [(words[k], s_, s_ + d) for k, s_, d in zip(c["name"][py].tolist(), start[py].tolist(),
                                                               dur[py].tolist()) if words[k].startswith("$")]
    return RawTrace(host, table, sorted(steps), device_kind or "unknown", platform, host_events=host_events,
                    events_total=ev.count)


def _chrome_programs(c: dict, rows: np.ndarray, word: np.ndarray, code) -> np.ndarray:
    """Program codes (``jit_step(24)``) of events with ``hlo_module`` and maybe ``program_id``."""
    pairs, inv = E.unique_rows(c["hlo_module"][rows], c["program_id"][rows])
    out = []
    for m, p in pairs.tolist():
        module = word[m] if m >= 0 else ""
        out.append(code(f"{module}({word[p]})" if p >= 0 and module else module))
    return np.asarray(out, np.int64)[inv]


def assign_steps(table: EventTable, steps: list[tuple[int, float, float]], rows: np.ndarray | None = None) -> None:
    """Set each event's step (of ``rows``, default all): the step (number, start ns, end ns, from the
    table's origin) whose interval holds the event's start."""
    if not steps or not len(table):
        return
    starts = np.asarray([s for _, s, _ in steps], np.float64)
    ends = np.asarray([t for _, _, t in steps], np.float64)
    nums = np.asarray([n for n, _, _ in steps], dtype=np.int32)
    at = table.start_ns if rows is None else table.start_ns[rows]
    idx = np.searchsorted(starts, at, side="right") - 1
    ok = (idx >= 0) & (at <= ends[np.clip(idx, 0, None)])
    got = np.where(ok, nums[np.clip(idx, 0, None)], -1)
    if rows is None:
        table.step[:] = got
    else:
        table.step[rows] = got
