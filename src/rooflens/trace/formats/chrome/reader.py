"""Chrome trace JSON (``*.trace.json.gz``) → :class:`RawTrace`, streamed (:mod:`.events`): the same
columns as an XSpace gives."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from rooflens.errors import RooflensError
from rooflens.trace import command_buffers
from rooflens.trace import events as E
from rooflens.trace.formats.raw import (
    AUTOTUNER_KERNEL,
    DEVICE_PLANE,
    DISPATCH,
    DISPATCH_PREFIXES,
    EXECUTE_PREFIXES,
    HOST_EVENT_MIN_PS,
    Progress,
    RawTrace,
    autotuning,
    containing,
    device_span,
    foreign_note,
    framework_of,
    is_python_line,
    kernels_note,
    op_name,
    top_level_dispatches,
    trace_op_meta,
)
from rooflens.trace.groupby import unique_values

MAX_SPAN_US = 9e12  # int64 picoseconds hold 9.2e18 ps
KINETO_GPU = re.compile(r"GPU (\d+)")
KINETO_WAITS = frozenset({"Stream Sync", "Context Sync", "Event Sync", "Stream Wait Event", "Device Sync"})


def read_chrome(path: Path, progress: Progress = None) -> RawTrace:
    """A Chrome trace JSON, streamed (:mod:`rooflens.trace.formats.chrome.events`), into the same RawTrace as XSpace."""
    from rooflens.trace.formats.chrome.events import read_events

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
    proc_dev = {pid: DEVICE_PLANE.match(name) for pid, name in ev.processes.items()}
    dev_kind = np.zeros(len(words) + 1, np.int64)
    dev_num = np.full(len(words) + 1, -1, np.int64)
    for pid, m in proc_dev.items():
        if m:
            dev_kind[pid] = 1 if m.group(1) == "TPU" else 2
            dev_num[pid] = int(m.group(2))
    # PyTorch's profiler (Kineto) labels a GPU's process "GPU 0" and names its streams' threads "stream 7"
    kineto = {pid: int(m.group(1)) for pid, label in ev.labels.items() if not proc_dev.get(pid)
              and (m := KINETO_GPU.fullmatch(label.strip()))}
    for pid, num in kineto.items():
        dev_kind[pid], dev_num[pid] = 2, num
    pid, tid = c["pid"], c["tid"]
    line_key, line_inv = E.unique_rows(pid, tid)
    line_names = [ev.threads.get((int(p), int(t)), words[t] if t >= 0 else "") for p, t in line_key]
    role = {"XLA Ops": 1, "XLA Modules": 2}  # 4: the Python tracer's line (raw.is_python_line)
    ev_role = np.asarray([role.get(x, 4 if is_python_line(x) else 0) for x in line_names] + [0],
                         np.int64)[line_inv] if n else line_inv
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
        name_c = np.asarray([code(op_name(words[k])) for k in u_name], np.int64)[inv.ravel()]
        prog = np.where(c["hlo_module"][tpu] >= 0, c["hlo_module"][tpu], -1)
        missing = np.flatnonzero(prog < 0)
        for d in unique_values(dev[tpu[missing]]):
            mine = mods[dev[mods] == d]
            rows = missing[dev[tpu[missing]] == d]
            prog[rows] = containing(event_start[mine], event_start[mine] + event_dur[mine], c["name"][mine],
                                     event_start[tpu[rows]], code(""))
        keyed = E.unique_rows(prog, name_c, c["name"][tpu], c["long_name"][tpu], c["pid"][tpu])[0]
        for pc, nc, raw, long_name, p in keyed.tolist():
            key = (words[pc], words[nc])
            hlo_text.setdefault(key, words[long_name] if long_name >= 0 else words[raw])
            args = ev.op_meta.get((p, raw))
            if args is not None:
                op_meta.setdefault(key, trace_op_meta(args))
        parts.append((tpu, dev[tpu], name_c, prog))
    from rooflens.trace.formats.xspace.decode import is_kernel_line

    kernel_line = np.asarray([is_kernel_line(x) or (int(p) in kineto and x.lower().startswith("stream"))
                              for x, (p, _) in zip(line_names, line_key.tolist())] + [False])
    notes = []
    kernel = (kind == 2) & (ev_role == 0) & kernel_line[line_inv] if n else np.zeros(0, np.bool_)
    helper = np.asarray([bool(AUTOTUNER_KERNEL.search(w)) for w in words] + [False])[c["name"]] if n else kernel
    tuning, said = autotuning(kernel, helper, c["hlo_module"], -1, c["hlo_op"] >= 0, dev, start, dur,
                              lambda m: words[m])
    if said:
        notes.append(said)
    gpu = np.flatnonzero((kind == 2) & (c["hlo_op"] >= 0) & ~tuning)
    if len(gpu):
        platform, device_kind = "gpu", "GPU"
        names = command_buffers.labelled(c["hlo_op"][gpu], c["name"][gpu], words, code, lambda k: words[k])
        parts.append((gpu, dev[gpu], names, _chrome_programs(c, gpu, word, code)))
    # Kineto's copy engines and its waits (cuda_sync: "Stream Sync", "Context Sync", "Stream Wait Event") are no kernels
    copies = np.asarray([w.startswith(("Memcpy", "Memset")) or w in KINETO_WAITS for w in words] + [False])
    other = np.flatnonzero((kind == 2) & (c["hlo_op"] < 0) & (ev_role == 0) & kernel_line[line_inv]
                           & ~copies[c["name"]] & ~tuning) if n else []
    framework = "PyTorch" if kineto else framework_of(bool(parts), line_names)
    if len(other):  # kernels that name no HLO op: counted, by kernel name, in no XLA program (as the XSpace reader)
        platform, device_kind = "gpu", device_kind or "GPU"
        parts.append((other, dev[other], c["name"][other], np.full(len(other), code(""), np.int64)))
        notes.append(kernels_note(words, c["name"][other], dur[other])
                     if framework in ("JAX", "") else foreign_note(framework))
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
    dispatches = _dispatches(c, words, kind, line_inv, event_start, event_dur)
    return RawTrace(host, table, sorted(steps), device_kind or "unknown", platform, notes=notes,
                    framework=framework or ("JAX" if platform == "cpu" or dispatches else ""),
                    host_events=host_events, events_total=ev.count, dispatches=dispatches,
                    end_ps=int((event_start + event_dur).max()) if n else 0)


def _dispatches(c: dict, words: list[str], kind: np.ndarray, line: np.ndarray, start: np.ndarray, dur: np.ndarray
                ) -> dict[str, np.ndarray]:
    """The host's dispatches of jitted functions: its outermost ``PjitFunction(<fn>)`` events that launched an
    execution (:func:`~rooflens.trace.formats.raw.top_level_dispatches`)."""
    if not len(start):
        return {}
    fn = [m.group(1) if w.startswith(DISPATCH_PREFIXES) and (m := DISPATCH.match(w)) else None for w in words]
    is_dispatch = np.asarray([f is not None for f in fn] + [False])
    is_execute = np.asarray([w.startswith(EXECUTE_PREFIXES) for w in words] + [False])
    host = kind == 0
    rows = np.flatnonzero(host & is_dispatch[c["name"]])
    run = np.flatnonzero(host & is_execute[c["name"]])
    return top_level_dispatches(c["name"][rows], [f or "" for f in fn], line[rows], start[rows], dur[rows],
                                line[run], start[run])


def _chrome_programs(c: dict, rows: np.ndarray, word: np.ndarray, code) -> np.ndarray:
    """Program codes (``jit_step(24)``) of events with ``hlo_module`` and maybe ``program_id``."""
    pairs, inv = E.unique_rows(c["hlo_module"][rows], c["program_id"][rows])
    out = []
    for m, p in pairs.tolist():
        module = word[m] if m >= 0 else ""
        out.append(code(f"{module}({word[p]})" if p >= 0 and module else module))
    return np.asarray(out, np.int64)[inv]
