"""XSpace (``*.xplane.pb``) → :class:`RawTrace`, through our compiled decoder (:mod:`.decode`).

Where the device work is: TPU planes ``/device:TPU:N``, line ``XLA Ops`` (event name = the full HLO
instruction text), programs on the ``XLA Modules`` line; GPU kernels on ``Stream #…`` lines carrying
``hlo_op`` and ``hlo_module``; CPU op events on host threads (device from ``device_ordinal``, or the
enclosing ``CommonPjRtLoadedExecutable::Execute`` event's ``global_device_id``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rooflens.trace import events as E
from rooflens.trace.formats.raw import (
    DEVICE_PLANE,
    Progress,
    RawTrace,
    containing,
    device_span,
    hlo_module_of,
    op_name,
    program_name,
    trace_op_meta,
    uint64,
)
from rooflens.trace.formats.xspace import wire as W


def read_xspace(path: Path, progress: Progress = None, device_time: bool = True) -> RawTrace:
    """An ``.xplane.pb`` through our compiled decoder (:mod:`rooflens.trace.formats.xspace.decode`).

    Device work: TPU ``XLA Ops`` events (named by their metadata, the HLO instruction text; program
    by the op's ``program_id`` metadata stat, else the ``XLA Modules`` event around it; timed by
    XProf's device span), GPU kernels with ``hlo_op``, else CPU op events on host threads
    (device from ``device_ordinal``, or the enclosing ``Execute`` event's ``global_device_id``).
    """
    from rooflens.trace.formats.xspace.decode import decode

    x = decode(path, progress)
    host = path.name.removesuffix(".xplane.pb")
    kinds = []
    for p in x.planes:
        m = DEVICE_PLANE.match(p.name)
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
            name_c[k] = code(op_name(text))
            pid = st.get("program_id")
            program = by_id.get(str(uint64(pid))) if pid is not None else None
            if program is not None:
                prog_c[k] = code(program)
            texts.append(text)
            metas.append(trace_op_meta(st) if "hlo_category" in st or "tf_op" in st else None)
        prog = prog_c[inv]
        # ops whose metadata names no program: the XLA Modules event around them on their device
        missing = np.flatnonzero(prog < 0)
        for d in np.unique(ev_dev[tpu_ops[missing]]):
            mine = np.flatnonzero(ev_dev[tpu_mod] == d)
            rows = missing[ev_dev[tpu_ops[missing]] == d]
            prog[rows] = containing(event_start[tpu_mod[mine]], event_start[tpu_mod[mine]] + x.dur_ps[tpu_mod[mine]],
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
                    found[at] = containing(start[mine], start[mine] + dur[mine], gdev[mine], start[rows[at]])
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
                    module = hlo_module_of(blob)
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
    progs = np.asarray([code(program_name(x.strings[int(m)] if m != W.NONE else "", None if p == W.NONE else int(p)))
                        for m, p in pairs.tolist()], np.int64)[inv_p]
    return names, progs
