"""XSpace (``*.xplane.pb``) → :class:`RawTrace`, through our compiled decoder (:mod:`.decode`).

Where the device work is: TPU planes ``/device:TPU:N``, line ``XLA Ops`` (event name = the full HLO
instruction text), programs on the ``XLA Modules`` line; GPU kernels on ``Stream #…`` lines carrying
``hlo_op`` and ``hlo_module``; CPU op events on host threads (device from ``device_ordinal``, or the
enclosing ``CommonPjRtLoadedExecutable::Execute`` event's ``global_device_id``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rooflens.trace import command_buffers
from rooflens.trace import events as E
from rooflens.trace.formats.compiled import njit, plain_twin
from rooflens.trace.formats.raw import (
    AUTOTUNER_KERNEL,
    DEVICE_PLANE,
    DISPATCH,
    EXECUTE_PREFIXES,
    Progress,
    RawTrace,
    autotuning,
    containing,
    device_span,
    foreign_note,
    framework_of,
    hlo_module_of,
    is_python_line,
    kernels_note,
    op_name,
    program_name,
    top_level_dispatches,
    trace_op_meta,
    uint64,
)
from rooflens.trace.formats.xspace import wire as W
from rooflens.trace.groupby import NUMPY_TWIN, unique_values


@dataclass
class _Events:
    """Every decoded event's plane, device kind and number, and line role (small types: a 1 GB trace
    keeps millions of events), with its times (``start``/``dur``: XProf's device span where given)."""

    plane: np.ndarray
    kind: np.ndarray  # 1 TPU, 2 GPU, 3 host, 0 other
    dev: np.ndarray
    role: np.ndarray  # 1 XLA Ops, 2 XLA Modules, 3 Steps, 4 python, 0 other
    event_start: np.ndarray  # the event's own start (XLA Modules spans use it)
    start: np.ndarray
    dur: np.ndarray
    kinds: list[tuple[str, int]]  # per plane


_KIND = {"TPU": 1, "GPU": 2, "host": 3}
_ROLE = {"XLA Ops": 1, "XLA Modules": 2, "Steps": 3}  # 4: the Python tracer's line (raw.is_python_line)


def read_xspace(path: Path, progress: Progress = None, device_time: bool = True) -> RawTrace:
    """An ``.xplane.pb`` through our compiled decoder (:mod:`rooflens.trace.formats.xspace.decode`).

    Device work: TPU ``XLA Ops`` events (named by their metadata, the HLO instruction text; program
    by the op's ``program_id`` metadata stat, else the ``XLA Modules`` event around it; timed by
    XProf's device span), GPU kernels with ``hlo_op``, else CPU op events on host threads
    (device from ``device_ordinal``, or the enclosing ``Execute`` event's ``global_device_id``).
    """
    from rooflens.trace.formats.xspace.decode import decode

    x = decode(path, progress)
    ev = _classify(x, device_time)
    # the sparse columns are read now and let go (a 1 GB CPU trace's peak is the op rows' sort below; its step
    # and device-id columns, a value in one event of a thousand, held 100 MB there)
    steps = _steps(x, ev)
    executions = _executions(x, ev)
    x.let_go("step_num", "step_id", "group_id", "global_device_id")
    device_kind, platform, plane_stats = _device(x, ev.kinds)
    vocab = E.Vocab()  # op names and programs, coded together
    hlo_text: dict[tuple[str, str], str] = {}
    op_meta: dict[tuple[str, str], dict] = {}
    parts = []  # (rows, device, name codes, program codes)
    tpu = _tpu_ops(x, ev, vocab, hlo_text, op_meta)
    if tpu is not None:
        platform = "tpu"
        parts.append(tpu)
    notes = []
    tuning, tuning_note = _autotuning(x, ev)
    if tuning_note:
        notes.append(tuning_note)
    gpu_ops = np.flatnonzero((ev.kind == 2) & x.has("hlo_op") & ~tuning)
    if len(gpu_ops):  # GPU: kernels that name their HLO op
        platform = "gpu"
        names, programs = _string_codes(x, gpu_ops, vocab.code)
        names = command_buffers.labelled(names, _metadata_key(x, ev, gpu_ops), vocab.words, vocab.code,
                                         lambda k: _metadata_of(x, k)[0])
        parts.append((gpu_ops, ev.dev[gpu_ops], names, programs))
    protos_seen = any(p.name == "/host:metadata" and len(p.meta_ids) for p in x.planes)
    framework = framework_of(bool(parts) or protos_seen, x.line_names)
    if (other := _kernels_without_op(x, ev, vocab, tuning)) is not None:  # counted, as XProf's kernel stats count them
        platform = "gpu"
        parts.append(other[:3] + (np.full(len(other[0]), vocab.code(""), np.int64),))
        notes.append(other[3] if framework == "JAX" or not framework else foreign_note(framework))
    if not parts and (cpu := _cpu_ops(x, ev, vocab, executions)) is not None:
        platform, device_kind = "cpu", "cpu"
        parts.append(cpu)
    rows = _joined([p[0] for p in parts])
    # the ops are found: the columns no step below reads go now (a 1 GB CPU trace's peak was at the dispatches,
    # with 200 MB of device, program and module columns still held)
    x.let_go("hlo_module", "program_id", "device_ordinal", "correlation_id", "device_offset_ps", "device_duration_ps")
    (dispatches, dispatching), end_ps = _dispatches(x, ev), _end_ps(x)
    host_events, protos, origin_ns = _host_events(x, ev, dispatching), _hlo_protos(x), _absolute_origin(x)
    # the decoded columns go as soon as they are used, before the table's are made: a 1 GB trace's
    # peak is lower, and the table's columns reuse memory this process has just let go of
    start, dur = ev.start, ev.dur
    del ev
    x.keep(W.COL_LINE, W.COL_START_PS, W.COL_DUR_PS)
    line = x.line[rows]
    x.close()
    start_ps, dur_ps = start[rows], dur[rows]
    del start, dur
    words = vocab.words
    table = E.build(
        host=np.zeros(len(rows), np.int32), device=_joined([p[1] for p in parts]),
        line=line, name=_joined([p[2] for p in parts]), program=_joined([p[3] for p in parts]), start_ps=start_ps,
        dur_ps=dur_ps, hosts=[path.name.removesuffix(".xplane.pb")], lines=[*x.line_names, ""],
        names=words or [""], programs=words or [""], origin_ns=origin_ns, hlo_text=hlo_text,
        op_meta=op_meta)
    return RawTrace(table.hosts[0], table, sorted(steps), device_kind or ("cpu" if platform == "cpu" else "unknown"),
                    platform, notes=notes, plane_stats=plane_stats, framework=framework or (
                        "JAX" if platform == "cpu" or dispatches else ""), host_events=host_events, hlo_protos=protos,
                    events_total=x.events_total, dispatches=dispatches, end_ps=end_ps)


def _joined(arrays: list[np.ndarray]) -> np.ndarray:
    """The arrays one after another (one array as it is: no copy of an event-sized column)."""
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays) if arrays else np.zeros(0, np.int64)


def _classify(x, device_time: bool) -> _Events:
    """Each event's plane (device kind and number) and line role; its span by XProf's rule (tsl
    GetDeviceEventTimespan: device events carrying both device stats are timed by them)."""
    kinds = []
    for p in x.planes:
        m = DEVICE_PLANE.match(p.name)
        kinds.append((m.group(1), int(m.group(2))) if m else ("host" if p.name.startswith("/host:") else "", -1))
    plane_kind = np.asarray([_KIND.get(k, 0) for k, _ in kinds] or [0], np.int8)
    plane_dev = np.asarray([d for _, d in kinds] or [-1], np.int32)
    ev_plane = x.line_plane.astype(np.int32)[x.line] if len(x) else np.zeros(0, np.int32)
    line_role = np.asarray([_ROLE.get(n, 4 if is_python_line(n) else 0) for n in x.line_names] + [0], np.int8)
    kind = plane_kind[ev_plane]
    start, dur = x.start_ps, x.dur_ps
    if device_time:
        start, dur = device_span(start, dur, x.col("device_offset_ps"), x.col("device_duration_ps"), kind != 3,
                                 x.origin_ns)
    return _Events(ev_plane, kind, plane_dev[ev_plane], line_role[x.line] if len(x) else np.zeros(0, np.int8),
                   x.start_ps, start, dur, kinds)


def _steps(x, ev: _Events) -> list[tuple[int, int, int]]:
    """Device ``Steps`` lines, and host step annotations (``jax.profiler.StepTraceAnnotation``)."""
    steps: list[tuple[int, int, int]] = []
    step_num, step_id, group_id = x.col("step_num"), x.col("step_id"), x.col("group_id")
    none_a, none_b, none_c = x.absent("step_num"), x.absent("step_id"), x.absent("group_id")
    sel = np.flatnonzero(((ev.kind == 1) | (ev.kind == 2)) & (ev.role == 3))
    host_step = np.flatnonzero((ev.kind == 3) & (step_num != none_a))
    for idx in (sel, host_step):
        a, b, c = step_num[idx], step_id[idx], group_id[idx]
        number = np.where(a != none_a, a, np.where(b != none_b, b, np.where(c != none_c, c, -1)))
        steps += list(zip(number.tolist(), ev.start[idx].tolist(), (ev.start[idx] + ev.dur[idx]).tolist()))
    return steps


def _device(x, kinds) -> tuple[str, str, dict]:
    """(device kind, platform, plane stats) from the first device plane: what the device is, and its peaks."""
    for p, (k, _) in zip(x.planes, kinds):
        if k in ("TPU", "GPU"):
            plane_stats = {a: v for a, v in p.stats.items() if isinstance(v, int | float | str)}
            return str(p.stats.get("device_type_string") or p.stats.get("device_vendor") or k), "unknown", plane_stats
    return "", "unknown", {}


def _metadata_key(x, ev: _Events, rows: np.ndarray) -> np.ndarray:
    """One int64 per event naming its (plane, event metadata): events of one op share it."""
    return ev.plane[rows].astype(np.int64) << 40 | x.cols[W.COL_META][rows]


def _metadata_of(x, key: int):
    return x.event_metadata(x.planes[int(key >> 40)], int(key & ((1 << 40) - 1)))


def _tpu_ops(x, ev: _Events, vocab, hlo_text: dict, op_meta: dict):
    """TPU op events, named by their metadata (the HLO instruction text); their program from the
    metadata's ``program_id``, else the ``XLA Modules`` event around them on their device."""
    tpu_ops = np.flatnonzero((ev.kind == 1) & (ev.role == 1))
    if not len(tpu_ops):
        return None
    code, words = vocab.code, vocab.words
    tpu_mod = np.flatnonzero((ev.kind == 1) & (ev.role == 2))
    mod_key, mod_inv = np.unique(_metadata_key(x, ev, tpu_mod), return_inverse=True)
    mod_names = [_metadata_of(x, k)[0] for k in mod_key]
    by_id = {m.rsplit("(", 1)[1].rstrip(")"): m for m in mod_names if m.endswith(")") and "(" in m}
    mod_code = np.asarray([code(m) for m in mod_names] or [0], np.int64)[mod_inv] if len(tpu_mod) else \
        np.zeros(0, np.int64)
    uk, inv = np.unique(_metadata_key(x, ev, tpu_ops), return_inverse=True)
    name_c = np.empty(len(uk), np.int64)
    prog_c = np.full(len(uk), -1, np.int64)
    texts, metas = [], []
    for k, kk in enumerate(uk):
        text, _, st = _metadata_of(x, kk)
        name_c[k] = code(op_name(text))
        pid = st.get("program_id")
        program = by_id.get(str(uint64(pid))) if pid is not None else None
        if program is not None:
            prog_c[k] = code(program)
        texts.append(text)
        metas.append(trace_op_meta(st) if "hlo_category" in st or "tf_op" in st else None)
    prog = prog_c[inv]
    missing = np.flatnonzero(prog < 0)
    starts = ev.event_start
    for d in unique_values(ev.dev[tpu_ops[missing]]):
        mine = np.flatnonzero(ev.dev[tpu_mod] == d)
        rows = missing[ev.dev[tpu_ops[missing]] == d]
        prog[rows] = containing(starts[tpu_mod[mine]], starts[tpu_mod[mine]] + x.dur_ps[tpu_mod[mine]],
                                mod_code[mine], starts[tpu_ops[rows]], code(""))
    for k, pc in E.unique_rows(inv.ravel(), prog)[0].tolist():
        op_key = (words[pc], words[name_c[k]])
        hlo_text.setdefault(op_key, texts[k])
        if metas[k] is not None:
            op_meta.setdefault(op_key, metas[k])
    return tpu_ops, ev.dev[tpu_ops], name_c[inv.ravel()], prog


def _kernel_rows(x, ev: _Events) -> np.ndarray:
    from rooflens.trace.formats.xspace.decode import is_kernel_line

    kernel_line = np.asarray([is_kernel_line(n) for n in x.line_names] + [False])
    return (ev.kind == 2) & (ev.role == 0) & kernel_line[x.line]


def _autotuning(x, ev: _Events) -> tuple[np.ndarray, str]:
    """XLA's GPU autotuning (:func:`rooflens.trace.formats.raw.autotuning`): a mask of its events, and a note."""
    kernel = _kernel_rows(x, ev)
    rows = np.flatnonzero(kernel)
    helper = np.zeros(len(x), np.bool_)
    if len(rows):
        uk, inv = np.unique(_metadata_key(x, ev, rows), return_inverse=True)
        named = np.asarray([bool(AUTOTUNER_KERNEL.search(_metadata_of(x, k)[0] or "")) for k in uk.tolist()])
        helper[rows] = named[inv.ravel()]
    return autotuning(kernel, helper, x.col("hlo_module"), x.absent("hlo_module"), x.has("hlo_op"), ev.dev, ev.start,
                      ev.dur,
                      lambda c: x.strings[c])


def _kernels_without_op(x, ev: _Events, vocab, tuning: np.ndarray):
    """GPU kernels that name no HLO op (a runtime's copy kernel such as ROCm's ``__amd_rocclr_copyBuffer`` behind
    ``hipMemcpyDtoDAsync``, a kernel of another framework): (rows, devices, name codes by kernel name, a note with
    their count and time by name), or None. They run on the device and count in its busy time; their program is
    "" (no XLA program: no roofline, as Nsight's kernels of no XLA program). Not the autotuner's (``tuning``),
    nor the copies of a stream that runs both kernels and copies (``MemcpyH2D``: a copy, not a kernel)."""
    rows = np.flatnonzero(_kernel_rows(x, ev) & ~x.has("hlo_op") & ~tuning)
    if not len(rows):
        return None
    uk, inv = np.unique(_metadata_key(x, ev, rows), return_inverse=True)
    inv = inv.ravel()
    names = [_metadata_of(x, k)[0] or _metadata_of(x, k)[1] or "kernel" for k in uk.tolist()]
    copies = np.asarray([n.startswith("Memcpy") for n in names])
    if copies.any():
        keep = ~copies[inv]
        rows, old = rows[keep], inv[keep]
        if not len(rows):
            return None
        names = [n for n, c in zip(names, copies) if not c]
        inv = (np.cumsum(~copies) - 1)[old]
    codes = np.asarray([vocab.code(n) for n in names], np.int64)
    note = kernels_note(names, inv, ev.dur[rows])
    return rows, ev.dev[rows], codes[inv], note


def _executions(x, ev: _Events) -> tuple[np.ndarray, np.ndarray]:
    """The host events that carry a ``global_device_id`` (an ``Execute`` event of older jaxlibs): (rows, ids)."""
    gdev = x.col("global_device_id")
    rows = np.flatnonzero((ev.kind == 3) & x.has("global_device_id"))
    return rows, gdev[rows]


def _cpu_ops(x, ev: _Events, vocab, executions: tuple[np.ndarray, np.ndarray]):
    """XLA:CPU ops on host threads; the device from ``device_ordinal``, or (older jaxlibs) the
    enclosing ``Execute`` event's ``global_device_id`` (``executions``: :func:`_executions`)."""
    cpu_ops = np.flatnonzero((ev.kind == 3) & x.has("hlo_op"))
    if not len(cpu_ops):
        return None
    # in time order (ties in file order), the event table's own: the table is built without a sort
    cpu_ops = cpu_ops[np.argsort(ev.start[cpu_ops], kind="stable")]
    dev = x.col("device_ordinal")[cpu_ops]
    unknown = np.flatnonzero(dev == x.absent("device_ordinal"))
    if len(unknown):
        execs, gdev = executions
        line = x.line
        rows = cpu_ops[unknown]
        found = np.full(len(rows), -1, np.int64)
        for ln in unique_values(line[rows]):
            on_line = line[execs] == ln
            mine = execs[on_line]
            at = np.flatnonzero(line[rows] == ln)
            found[at] = containing(ev.start[mine], ev.start[mine] + ev.dur[mine], gdev[on_line], ev.start[rows[at]])
        dev[unknown] = found
    return cpu_ops, dev, *_string_codes(x, cpu_ops, vocab.code)


def _host_events(x, ev: _Events, dispatching: np.ndarray) -> list[tuple[str, int, int]]:
    """The host's Python frames (JAX's Python tracer), for what the host did during idle gaps: those of the threads
    that dispatch the device's work (``dispatching``: their lines) where any does, as what the device waits for is
    on them (a poll loop's ``time.sleep`` on a thread of its own is not what a gap waited on); all where none does."""
    py = np.flatnonzero((ev.kind == 3) & (ev.role == 4))
    if len(py) and len(dispatching) and np.isin(x.line[py], dispatching).any():
        py = py[np.isin(x.line[py], dispatching)]
    if not len(py):
        return []
    uk, inv = np.unique(_metadata_key(x, ev, py), return_inverse=True)
    names = [_metadata_of(x, k)[0] for k in uk]
    ok = np.asarray([n.startswith("$") for n in names] + [False])[inv]
    return [(names[i], s, s + d) for i, s, d in zip(inv[ok].tolist(), ev.start[py[ok]].tolist(),
                                                    ev.dur[py[ok]].tolist())]


def _dispatches(x, ev: _Events) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The host's dispatches of jitted functions: its outermost ``PjitFunction(<fn>)`` events that launched an
    execution (:func:`~rooflens.trace.formats.raw.top_level_dispatches`), both kept by the walk for the metadata
    :func:`~rooflens.trace.formats.xspace.decode.dispatch_metadata` names; and the lines (threads) they are on."""
    host = np.flatnonzero((ev.kind == 3) & ~x.has("hlo_op"))  # op events are never dispatches
    if not len(host):
        return {}, np.zeros(0, np.int64)
    uk, inv = np.unique(_metadata_key(x, ev, host), return_inverse=True)
    names = [_metadata_of(x, k)[0] for k in uk.tolist()]
    fn = [m.group(1) if (m := DISPATCH.match(n)) else None for n in names]
    inv = inv.ravel()
    hit = np.asarray([f is not None for f in fn] + [False])[inv]
    run = host[np.asarray([n.startswith(EXECUTE_PREFIXES) for n in names] + [False])[inv]]
    rows = host[hit]
    return (top_level_dispatches(inv[hit], [f or "" for f in fn], x.line[rows], ev.event_start[rows], x.dur_ps[rows],
                                 x.line[run], ev.event_start[run]), np.unique(x.line[rows]))


def _end_ps(x) -> int:
    """Where the trace ends (ps from its origin): its last kept event's end, or the profiler's stop time (the
    ``Task Environment`` plane's ``profile_stop_time``) when that is later."""
    end = E.last_end_ps(x.start_ps, x.dur_ps)
    for p in x.planes:
        if p.name != "Task Environment":  # (another plane's stats are not read: one plane can hold 400,000)
            continue
        start, stop = p.stats.get("profile_start_time"), p.stats.get("profile_stop_time")
        if isinstance(start, int) and isinstance(stop, int) and stop > start:
            end = max(end, (stop - start - x.origin_ns) * 1000)
    return end


def _hlo_protos(x) -> dict[str, bytes]:
    """Program → its serialized HloModuleProto, from the ``/host:metadata`` plane."""
    protos = {}
    for p in x.planes:
        if p.name == "/host:metadata":
            for mid in p.meta_ids:
                name, _, st = x.event_metadata(p, int(mid))
                blob = st.get("Hlo Proto")
                if isinstance(blob, bytes):
                    module = hlo_module_of(blob)
                    if module is not None:
                        protos[name] = module
    return protos


def _absolute_origin(x) -> int:
    """The trace's origin on the wall clock: XSpace times count from the profile's start, which the
    ``Task Environment`` plane records (ns since the epoch); hosts of one job line up by it."""
    for p in x.planes:
        start = p.stats.get("profile_start_time") if p.name == "Task Environment" else None
        if isinstance(start, int) and start > 0:
            return start + x.origin_ns
    return x.origin_ns


def _string_codes(x, rows: np.ndarray, code) -> tuple[np.ndarray, np.ndarray]:
    """(op name codes, program codes) of events that carry ``hlo_op``/``hlo_module``/``program_id``: each
    distinct op string and (module, program id) pair is named once, in string-code and lexicographic order."""
    op, mod, pid = x.col("hlo_op"), x.col("hlo_module"), x.col("program_id")
    present = np.zeros(len(x.strings), np.bool_)  # op strings: interned codes, never absent on these rows
    pair, pair_mod, pair_pid = pair_codes(rows, op, mod, pid, present)
    lut = np.zeros(len(x.strings), np.int32)
    lut[present] = [code(x.strings[int(c)]) for c in np.flatnonzero(present)]
    plut = np.zeros(max(len(pair_mod), 1), np.int32)
    no_mod, no_pid = x.absent("hlo_module"), x.absent("program_id")
    for k in np.lexsort((pair_pid, pair_mod)).tolist():
        m, p = int(pair_mod[k]), int(pair_pid[k])
        plut[k] = code(program_name(x.strings[m] if m != no_mod else "", None if p == no_pid else p))
    return apply_codes(rows, op, lut, pair, plut)


@njit(cache=True, nogil=True)
def pair_slot(slots, first_mod, first_pid, a, b):
    """The slot of the pair (a, b) in an open-addressing table of pair numbers (``slots``, -1: empty;
    ``first_mod``/``first_pid``: each number's pair), or the empty slot where it would go."""
    mask = len(slots) - 1
    h = ((a * np.int64(-7046029254386353131)) ^ b) * np.int64(-4658895280553007687)
    s = (h ^ (h >> 29)) & mask
    while slots[s] >= 0 and not (first_mod[slots[s]] == a and first_pid[slots[s]] == b):
        s = (s + 1) & mask
    return s


@njit(cache=True, nogil=True)
def pair_codes(rows, op, mod, pid, present):
    """One pass over ``rows``: marks each row's op string in ``present``, and numbers its (module, program
    id) pair in first-seen order; returns the numbers (int32) and the distinct pairs. Consecutive rows
    mostly share a pair (the ops of one execution), so the last pair is checked before the table. The table
    grows here, between passes of :func:`_pairs_until_full` (an array bound anew inside the per-row loop made
    numba count references on every row: 50 ns a row, not 3)."""
    out = np.empty(len(rows), np.int32)
    room = 32
    slots = np.full(2 * room, -1, np.int64)  # at most half full
    first_mod = np.empty(room, np.int64)
    first_pid = np.empty(room, np.int64)
    i, m, last = 0, 0, -1
    while True:
        i, m, last = _pairs_until_full(rows, op, mod, pid, present, out, slots, first_mod, first_pid, i, m, last)
        if i >= len(rows):
            return out, first_mod[:m].copy(), first_pid[:m].copy()
        room *= 2  # full: twice the room, every pair placed again
        first_mod = np.concatenate((first_mod, np.empty(m, np.int64)))
        first_pid = np.concatenate((first_pid, np.empty(m, np.int64)))
        slots = np.full(2 * room, -1, np.int64)
        for c in range(m):
            slots[pair_slot(slots, first_mod, first_pid, first_mod[c], first_pid[c])] = c


@njit(cache=True, nogil=True)
def _pairs_until_full(rows, op, mod, pid, present, out, slots, first_mod, first_pid, i, m, last):
    """:func:`pair_codes` from row ``i`` (``m`` pairs numbered, ``last`` the previous row's) until the rows end or a
    new pair finds the table full; returns where it stopped, the pairs numbered and the last one."""
    while i < len(rows):
        r = rows[i]
        present[op[r]] = True
        a, b = mod[r], pid[r]
        if last < 0 or first_mod[last] != a or first_pid[last] != b:
            s = pair_slot(slots, first_mod, first_pid, a, b)
            if slots[s] < 0:  # a new pair
                if m == len(first_mod):
                    return i, m, last
                slots[s] = m
                first_mod[m], first_pid[m] = a, b
                m += 1
            last = slots[s]
        out[i] = last
        i += 1
    return i, m, last


@plain_twin(pair_codes, NUMPY_TWIN)
def _pair_codes_np(rows, op, mod, pid, present):
    present[op[rows]] = True
    pairs, inv = E.unique_rows(mod[rows], pid[rows])
    return inv.astype(np.int32), pairs[:, 0].copy(), pairs[:, 1].copy()


@njit(cache=True, nogil=True)
def apply_codes(rows, op, lut, pair, plut):
    """Each row's op name code ``lut[op[row]]``, and its program code ``plut[pair]`` (in place of ``pair``)."""
    names = np.empty(len(rows), np.int32)
    for i in range(len(rows)):
        names[i] = lut[op[rows[i]]]
        pair[i] = plut[pair[i]]
    return names, pair


@plain_twin(apply_codes, NUMPY_TWIN)
def _apply_codes_np(rows, op, lut, pair, plut):
    return lut[op[rows]], plut[pair]
