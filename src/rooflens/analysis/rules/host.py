"""The host: devices left idle between executions, compilations inside the window, and host↔device transfers:
the time the trace measures in them (memcpy through the host, XLA's host-offload copies), and the implicit ones
the capture recorded."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from rooflens.analysis.findings import Finding
from rooflens.analysis.report import Report
from rooflens.analysis.rules.common import (
    in_terms_of,
    is_jax,
    per_device_step,
    per_step_of,
    per_what,
    periods_of,
    ref,
    runs_per_step,
    severity_of,
    step_time_of,
    with_saving,
)
from rooflens.hlo.shape import HOST_MEMORY_SPACE, element_bytes
from rooflens.trace.idle import IdleUnit
from rooflens.trace.warmup import COMPILE_FRAME
from rooflens.units import fmt_bytes, fmt_name, fmt_number, fmt_percent, fmt_rate, plural
from rooflens.units import fmt_seconds as _ms

IDLE_SHARE = 0.40
MIN_GAP_S = 1e-3
RECOMPILE_MANY = 3  # this many recompilations in a run traced from its start: high
TRANSFERS_PER_STEP = 0.75  # implicit transfers in (nearly) every step: medium
TRANSFER_SHARE = 0.05  # measured transfer time no kernel hides, over the step: a finding
TRANSFER_HIDDEN_SHARE = 0.25  # transfers this share of the step, hidden under kernels or not: a finding (what
# they would cost once the kernels around them are faster)
LINK_BOUND = 0.5  # bytes over transfer time at least this share of the host link's bandwidth: the link is the limit
# a copy this small spends about as long in its fixed set-up (~10 µs to launch a cudaMemcpy and start its DMA) as in
# moving its bytes at a PCIe 5 x16 link's 64 GB/s (10 µs × 64 GB/s = 640 kB): below it, many small copies are the cause
SMALL_COPY_BYTES = 1 << 20


HOST_WORK_SHARE = 0.3  # the program's host work (or its reading values back) covering this share of the devices'
# gaps in the steps is what they wait for: the cause the idle and overhead findings give
#: JAX's frames that wait for a device array's value: float(x), int(x), bool(x), np.asarray(x), printing it, x.item(),
#: x.tolist(), x.block_until_ready(), jax.device_get(x)
READ_BACK = re.compile(r"^array\.py:\d+ (_value|__float__|__int__|__bool__|__index__|__array__|__format__|__str__|"
                       r"__repr__|item|tolist|block_until_ready)$|^api\.py:\d+ (device_get|block_until_ready)$")
#: waiting on another thread: a lock's acquire (in C, which the tracer names ``<unknown> acquire``), a condition's wait,
#: a queue's get (a data loader's queue, a future's result)
WAIT_ON_THREAD = re.compile(r"^<unknown> acquire$|^threading\.py:\d+ (wait|join)$|^queue\.py:\d+ get$|"
                            r"^_base\.py:\d+ result$")
#: JAX copying host data to the device (a NumPy batch passed to a jitted function, jax.device_put)
DEVICE_PUT = re.compile(r"^pxla\.py:\d+ (batched_device_put|shard_args|_shard_np_array)$|"
                        r"^api\.py:\d+ device_put$|^dispatch\.py:\d+ _(batched_)?device_put_impl$")
#: JAX's own dispatch in Python: a jitted call's slow path, an eager primitive
JAX_DISPATCH = re.compile(r"^pjit\.py:\d+ (_pjit_call_impl_python|_python_pjit_helper|cache_miss|_cpp_pjit)$|"
                          r"^dispatch\.py:\d+ apply_primitive$|^api\.py:\d+ cache_miss$")
#: a library's jit around JAX's, in Python on every call: Equinox's filter_jit (its ``_call``), Flax NNX's nnx.jit
#: (``compilation.py``'s ``__call__``) and the graph flattening it does (``graphlib.py``)
LIBRARY_JIT = re.compile(r"^_jit\.py:\d+ (_call|__call__)$|^compilation\.py:\d+ __call__$|^graphlib\.py:\d+ \w+$")
#: JAX's eager ops: jnp and lax functions called outside jit (jnp.full, a conversion, an index), each binding a
#: primitive that dispatches a small program of its own
EAGER_JAX = re.compile(r"^(lax|lax_numpy|array_creation|ufuncs|reductions|indexing|slicing|core)\.py:\d+ \w+$|"
                       r"^array\.py:\d+ __getitem__$")
#: what a frame of these is, said after its name, and the cause it counts toward (a library's jit and JAX's own
#: dispatch are one: Python around the jitted calls)
FRAME_KINDS = ((READ_BACK, "reading a value back", "read back"),
               (WAIT_ON_THREAD, "waiting on another thread", "waiting"),
               (DEVICE_PUT, "copying host data to the device", "device put"),
               (JAX_DISPATCH, "JAX's dispatch", "dispatch"),
               (LIBRARY_JIT, "a library's jit, in Python on each call", "dispatch"),
               (EAGER_JAX, "JAX's eager op, outside jit", "eager"))


def _kind_of(frame: str) -> tuple[str, str]:
    """(what the frame is, the cause it counts toward), ("", "") for the program's own work."""
    return next(((what, cause) for pattern, what, cause in FRAME_KINDS if pattern.match(frame)), ("", ""))


@dataclass(frozen=True)
class HostInGaps:
    """What the host's Python was doing while its devices ran no op in the steps (``DeviceTime.host_in_gaps`` of
    each host's devices together): the gaps credited, the program's frames in them, and the cause where one holds
    HOST_WORK_SHARE of them."""

    gaps_s: float  # the gaps credited, in all (≥ 20 µs each, between two events in the steps where there are steps),
    # those the host spent compiling left out
    frames: tuple[tuple[str, float], ...]  # the program's frames and the seconds of gaps each covers, most first
    by_cause: dict[str, float]  # seconds per cause of FRAME_KINDS (read back, waiting, device put, dispatch, eager)
    work: tuple[str, float] | None  # the program's own work (frames none of FRAME_KINDS's) holding the most of the
    # gaps: the script's frame they were called from, or the frame itself
    work_inner: str = ""  # the frame inside the work's script frame holding the most of its gaps ("": itself)
    callers: tuple[tuple[str, str], ...] = ()  # (frame, the script's frame it was mostly called from), where named


def host_in_gaps(report: Report) -> HostInGaps | None:
    """The hosts' frames in their devices' gaps (each host's devices together, one host's frames per host), None
    where the trace has no Python frames (JAX's Python tracer was off) or no gap was credited to a frame of the
    program's. The program's own work is taken by the script's frame it was called from, where the trace names one
    (a library's ``_savez`` called from the script's ``save_checkpoint`` is that function's work)."""
    by: dict[tuple[str, str], float] = {}
    for d in report.stats.hosts or report.stats.devices:
        for frame, s, *caller in d.host_in_gaps:
            if not COMPILE_FRAME.match(frame):  # compiling is warm-up
                key = (frame, caller[0] if caller else "")
                by[key] = by.get(key, 0.0) + s
    total = sum(by.values())
    per_frame: dict[str, float] = {}
    by_cause: dict[str, float] = {}
    work_by: dict[str, dict[str, float]] = {}  # the script's frame (or the frame itself) → its frames inside
    callers: dict[str, tuple[float, str]] = {}  # frame → (seconds, the script's frame) with the most seconds
    for (frame, caller), s in sorted(by.items()):
        if not frame:
            continue
        per_frame[frame] = per_frame.get(frame, 0.0) + s
        if cause := _kind_of(frame)[1]:
            by_cause[cause] = by_cause.get(cause, 0.0) + s
        else:
            inner = work_by.setdefault(caller or frame, {})
            inner[frame] = inner.get(frame, 0.0) + s
        if caller and s > callers.get(frame, (0.0, ""))[0]:
            callers[frame] = (s, caller)
    frames = tuple(sorted(per_frame.items(), key=lambda fs: (-fs[1], fs[0])))
    if total <= 0 or not frames:  # no gap the program's own frame covers: nothing to say of it
        return None
    work, inner = None, ""
    if work_by:
        name, inside = min(work_by.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
        work = (name, sum(inside.values()))
        inner = max(inside, key=lambda f: (inside[f], f))
        inner = "" if inner == name else inner
    return HostInGaps(total, frames, by_cause, work, inner, tuple(sorted((f, c) for f, (_, c) in callers.items())))


def frame_label(frame: str) -> str:
    """A Python tracer frame (``train.py:22 next_batch``) as a reader says it: ``next_batch (train.py:22)``; one of C
    code, ``time.sleep`` (``time sleep``) or ``acquire (a C function)`` (``<unknown> acquire``)."""
    where, _, function = frame.partition(" ")
    if not function:
        return frame
    if ".py:" in where:
        return f"{function} ({where})"
    return f"{function} (a C function)" if where == "<unknown>" else f"{where}.{function}"


def _in_steps(report: Report) -> str:
    """Where the gaps were credited: in the steps (DeviceTime.host_in_gaps takes those between two events in the
    steps where the trace has steps), else anywhere in the trace."""
    return "in the steps" if report.stats.steps is not None else "in the trace"


def host_gap_evidence(report: Report, h: HostInGaps) -> str:
    """One line: the host's frames in the devices' gaps, the largest three, and what is left."""
    called_from = dict(h.callers)
    shown = []
    for f, s in h.frames[:3]:
        what = _kind_of(f)[0]
        shown.append(frame_label(f) + (f" ({what})" if what else "")
                     + (f" from {frame_label(called_from[f])}" if f in called_from else "") + f" {_ms(s)}")
    rest = h.gaps_s - sum(s for _, s in h.frames[:3])
    if rest > 0.005 * h.gaps_s:
        shown.append(f"the rest {_ms(rest)} (other frames, or none of the program's: JAX's dispatch in C++, "
                     "rooflens's capture)")
    return (f"while the devices ran no op {_in_steps(report)} ({_ms(h.gaps_s)} in gaps of 20 µs or more, the host's "
            f"devices together), the host's Python was in: {', '.join(shown)}")


def frames_hint(report: Report) -> str:
    """Evidence for a finding of the device waiting on the host when the trace credits none of its gaps to a Python
    frame (no device or host has any): how to get them."""
    if not is_jax(report) or any(d.host_in_gaps for d in (report.stats.hosts or report.stats.devices)):
        return ""
    return ("no Python frame of the host is known in these gaps (the trace has none of JAX's Python tracer, or the "
            "gaps are under 20 µs): a window (`rooflens run --steps`) or `--python-tracer` records what the host did "
            "in them")


def host_gap_cause(report: Report, h: HostInGaps | None) -> tuple[str, str] | None:
    """The cause and fix when one thing the host did holds HOST_WORK_SHARE of the gaps: the program's own work (its
    largest frame), JAX's eager ops, dispatching jitted calls in Python, copying host data to the device, reading
    values back, or waiting on another thread; the largest of them."""
    if h is None:
        return None
    shares = {"work": h.work[1] if h.work else 0.0, **h.by_cause}
    order = ("work", "eager", "dispatch", "device put", "read back", "waiting")  # the first of equals
    cause = max(order, key=lambda c: (shares.get(c, 0.0), -order.index(c)))
    took = shares.get(cause, 0.0)
    if took < HOST_WORK_SHARE * h.gaps_s:
        return None
    part = f"for {_ms(took)} of the {_ms(h.gaps_s)} its devices ran no op {_in_steps(report)}"
    if cause == "work":
        name = frame_label(h.work[0])
        inside = f", in {frame_label(h.work_inner)}" if h.work_inner else ""
        return (f"the host's own work between dispatches: {part}, the host was in {name}{inside}, so the next work "
                "was not yet queued (input preparation or other Python on the step's critical path)",
                f"take {name} off the critical path: run it while the device works (an input pipeline's next batch "
                "prepared during this step, by a background thread or a loader that prefetches, such as grain or "
                "tf.data's prefetch, and jax.device_put of it before the step is called; a checkpoint or a log "
                "written asynchronously, or every N steps), or make it cheaper")
    if cause == "eager":
        return (f"JAX's eager ops between the jitted calls: {part}, the host was in jnp or lax functions called "
                "outside jit (building an array, converting or indexing one), each dispatching a small program of "
                "its own",
                "move that work into the jitted step (pass the loop index or the raw value as an argument and build "
                "the array inside), or make it with NumPy on the host")
    if cause == "dispatch":
        library = next((frame_label(f) for f, _ in h.frames if LIBRARY_JIT.match(f)), "")
        return (f"the Python around each jitted call: {part}, the host was dispatching"
                + (f", in {library} (Equinox's filter_jit or Flax NNX's nnx.jit flattens the model's pytree or graph "
                   "on every call)" if library else " in JAX's Python path (a jitted call's slow path, eager ops)")
                + "; JAX's Python tracer, on in this trace, makes Python-heavy dispatch slower than it runs untraced",
                "time the step untraced first (the script's own timing); if the dispatch still shows, flatten once: "
                "split the model into arrays and the rest once (eqx.partition, nnx.split) and jit a function of the "
                "arrays (jax.jit, combining or merging inside), or make fewer, larger jitted calls per step")
    if cause == "device put":
        return (f"copying host data to the device between dispatches: {part}, the host was in JAX's device_put "
                "(NumPy arrays passed to a jitted function are copied then, before it is dispatched)",
                "put the next batch on the device ahead of the step (jax.device_put on a background thread, or a "
                "loader that prefetches to the device), and keep arrays that do not change on the device")
    if cause == "read back":
        return (f"reading values back {_in_steps(report)}: for {_ms(took)} of the {_ms(h.gaps_s)} its devices ran no "
                "op, the host waited for a device value (float(), np.asarray, printing, .item(), block_until_ready), "
                "which drains the device's queue before the next work is dispatched",
                "read a step's values back after the next step is dispatched (its loss one step late: the device "
                "then has work queued while the host waits), and less often: keep metrics on the device (in the "
                "step's state) and fetch them together every N steps")
    return (f"the host waited on another thread: {part}, it was in a lock's acquire, a queue's get or a condition's "
            "wait (a data loader's workers not keeping up with the device, or a lock held elsewhere)",
            "make the input pipeline faster than the step (more workers or processes, cheaper preprocessing, a deeper "
            "prefetch); a run fed one fixed batch shows the step's speed without it")


def _where(unit: IdleUnit) -> tuple[list, list[str]]:
    """The unit's largest gaps (≥ MIN_GAP_S, at most 3) and where each one is."""
    d = unit.unit
    if unit.gaps is None:
        gaps = [g for g in d.largest_gaps if g.duration_s >= MIN_GAP_S]
        return gaps, [f"gap of {_ms(g.duration_s)} at {_ms(g.start_s)} between {fmt_name(g.before)} and "
                      f"{fmt_name(g.after)}"
                      + (f"; the host was in {frame_label(g.host)}" if g.host else "") for g in gaps[:3]]
    # gaps left once warm-up is taken out; the stats' own gap names where one matches
    big = unit.gaps.largest(3, MIN_GAP_S)
    named = {round(g.start_s, 6): g for g in d.largest_gaps}
    where = []
    for gap in big:
        g = named.get(round(gap.start_s, 6))
        where.append(f"gap of {_ms(gap.duration_s)} at {_ms(gap.start_s)}"
                     + (f" between {fmt_name(g.before)} and {fmt_name(g.after)}"
                        + (f"; the host was in {frame_label(g.host)}" if g.host else "")
                        if g else ""))
    return big, where


def idle_flagged(report: Report) -> list[int]:
    """Indices (in ``report.steady.idle``) of the units the idle finding reports: idle a large share of the
    steady state, with gaps of at least MIN_GAP_S."""
    out = []
    for k, unit in enumerate(report.steady.idle):
        d = unit.unit
        if d.window_s > 0 and unit.idle_s / d.window_s >= IDLE_SHARE and _where(unit)[0]:
            out.append(k)
    return out


def rule_idle(report: Report) -> list[Finding]:
    """Devices idle a large share of the steady state (Report.steady.idle measures it)."""
    out = []
    main = report.steps.program if report.steps else None
    # forced CPU devices are threads time-sliced on shared cores: one waits while another runs, so
    # idleness is judged for the CPU as a whole (all devices of the host together)
    in_gaps = host_in_gaps(report)  # the hosts' devices together: one for every unit
    for k in idle_flagged(report):
        unit = report.steady.idle[k]
        d, idle_s, warm_s = unit.unit, unit.idle_s, unit.warmup_s
        share = idle_s / d.window_s
        gaps, where = _where(unit)
        who = f"The CPU ({report.num_devices} devices together)" if d.device < 0 else f"Device {d.device}"
        st = report.steps
        by_steps = st is not None and st.basis != "executions"
        stepped = by_steps and st.step_time_s > 0
        # with steps, they hold their gaps: idle per step is the idle share of the steady window in a step (divided
        # by the steps it counted 6.6 ms in a 1.86 ms step where the window held more than the steps: a step with a
        # compilation in it left out of them, its gaps not); per execution of the main program, the idle over them
        per = share * st.step_time_s if stepped else idle_s / periods_of(report)
        evidence = [f"idle {_ms(idle_s)} of {_ms(d.window_s)}: {_ms(per)} per "
                    f"{'step' if st is None or by_steps else 'execution'}"]
        evidence += where
        if warm_s > 0:
            evidence.append(f"not counted: {_ms(warm_s)} of idle time while the host compiled or around first runs "
                            "(warm-up)")
        evidence.append(host_gap_evidence(report, in_gaps) if in_gaps is not None else frames_hint(report))
        cause, fix = host_gap_cause(report, in_gaps) or (
            "the host does not feed the device fast enough: Python or data loading between steps, a "
            "synchronisation (print, device_get, block_until_ready) or a host-side stall",
            "prefetch the next batch while the device runs (async data loading), move host work off the critical "
            "path, and drop per-step synchronisations")
        f = Finding(
            "idle", severity_of(share), f"{who} is idle {fmt_percent(share)} of the time", (),
            per if by_steps else per_device_step(report, idle_s) * max(report.num_devices, 1),
            tuple(e for e in evidence if e), cause, fix)
        out.append(with_saving(report, f, per, main))
    if len(out) > 1:  # one finding for all devices, with the worst one's numbers
        worst = max(out, key=lambda f: f.recoverable_s)
        return [replace(worst, title=worst.title.replace("Device", f"{len(out)} devices idle; device"))]
    return out


def rule_async_tail(report: Report) -> list[Finding]:
    """The trace stopped while the host's dispatches were still queued on the device (OpStats.unran): it holds
    fewer executions than the host dispatched, so its steps are the ones that ran, and the rest is missing."""
    queued = [u for u in report.stats.unran if u.queued]
    if not queued:
        return []
    unran, dispatched = sum(u.unran for u in queued), sum(u.dispatched for u in queued)
    worst = max(queued, key=lambda u: u.unran / u.dispatched)
    evidence = [f"{u.unran} of {u.dispatched} dispatches of {u.shown}"
                + (f" on {u.host}" if len(report.hosts) > 1 else "") + " never ran on the device inside the trace"
                + (f": about {_ms(u.missing_s)} of device work" if u.missing_s else "") for u in queued[:5]]
    main = report.steps.program if report.steps else ""
    if main and report.steps.steps:
        n = report.steps.steps
        evidence.append(f"the {plural(n, 'step')} here {'is an execution' if n == 1 else 'are executions'} of {main} "
                        "that ran inside the trace")
    # a trace cut short costs the run no device time: fixing it gives back none, it makes the report whole
    return [with_saving(report, Finding(
        "async-tail", "high" if worst.unran * 2 >= worst.dispatched else "medium",
        f"The trace stopped with {unran} of {dispatched} dispatches still queued on the device", (),
        sum(u.missing_s for u in queued), tuple(evidence),
        "JAX dispatches asynchronously: the script queued work faster than the device ran it and the trace "
        "stopped (or the script exited) before the device had run it, so the trace holds only the first "
        "executions and its last one may be cut short",
        "block until the device is done before the trace stops: jax.block_until_ready(state) (or "
        ".block_until_ready() on the step's output) before jax.profiler.stop_trace, or before leaving the "
        "jax.profiler.trace block"), 0.0, severity=False)]


_AVAL = re.compile(r"([a-z][a-z0-9_]*)\[([0-9, ]*)\]")


def transfer_bytes(line: str) -> float | None:
    """Bytes one transfer-guard line moves, None when it says none (a repeat: JAX details only the first of
    repeated transfers). JAX writes a line per destination device, each with the whole array's type
    (``aval=ShapedArray(float32[1024,256])``) and the destination's sharding: a line moves that device's shard
    (an array split 8 ways over 8 devices is 8 lines of an eighth each; replicated, 8 whole copies)."""
    head, _, sharding = line.partition("dst_sharding")
    m = _AVAL.search(head[head.find("aval="):] if "aval=" in head else head)
    if m is None or (size := element_bytes(m.group(1))) is None:
        return None
    dims = [int(d) if d else 1 for d in m.group(2).replace(" ", "").split(",")] if m.group(2).strip() else []
    n = 1
    for d, parts in zip(dims, shard_splits(sharding, len(dims))):
        n *= -(-d // parts)  # the largest shard (an uneven split pads the last)
    return n * size


def shard_splits(sharding: str, rank: int) -> list[int]:
    """Into how many parts a sharding's text splits each of an array's ``rank`` dimensions: JAX's
    ``NamedSharding(mesh=Mesh('data': 4, 'model': 2, …), spec=P('data', None))`` (each dimension by the mesh axes
    its entry names), ``GSPMDSharding({devices=[8,1]<=[8]})`` (the tile shape; a trailing replicated tile
    dimension splits nothing), ``PmapSharding(…Unstacked(8)…)``; 1 for each dimension of anything else
    (replicated, one device, a form not known)."""
    splits = [1] * rank
    if (at := sharding.find("spec=")) >= 0 and "Mesh(" in sharding:
        sizes = {a: int(n) for a, n in re.findall(r"'([^']+)':\s*(\d+)", sharding[:at])}
        for k, entry in enumerate(_spec_entries(sharding[at:])[:rank]):
            for axis in re.findall(r"'([^']+)'", entry):
                splits[k] *= sizes.get(axis, 1)
    elif (m := re.search(r"devices=\[([\d,\s]+)\]", sharding)) is not None:
        tiles = [int(t) for t in m.group(1).replace(" ", "").split(",") if t]
        splits[:min(rank, len(tiles))] = tiles[:rank]
    elif "Unstacked(" in sharding or "Chunked(" in sharding:
        for k, m in enumerate(re.finditer(r"(Unstacked|Chunked|NoSharding)\(\[?(\d*)", sharding)):
            if k < rank and m.group(2):
                splits[k] = int(m.group(2))
    return [max(s, 1) for s in splits]


def _spec_entries(text: str) -> list[str]:
    """The entries of the first ``P(…)`` / ``PartitionSpec(…)`` in ``text``, split at its top-level commas."""
    start = text.find("(")
    entries, depth, cur = [], 0, ""
    for ch in text[start + 1:] if start >= 0 else "":
        if ch == "(":
            depth += 1
        elif ch == ")":
            if depth == 0:
                break
            depth -= 1
        if ch == "," and depth == 0:
            entries.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        entries.append(cur.strip())
    return entries


def _host_link(report: Report) -> tuple[float, str]:
    """The chip's host link (PCIe) in bytes/s per direction and the catalogue's source for it; (0, "") when the
    chip is unknown or the catalogue has no such figure."""
    if not report.chip:
        return 0.0, ""
    from rooflens.hardware import chip as get_chip

    try:
        c = get_chip(report.chip)
    except Exception:  # a custom chip not in the catalogue
        return 0.0, ""
    return float(c.value("interconnect.pcie_bytes_per_s") or 0.0), c.source("interconnect.pcie_bytes_per_s")


def _transfer_rate(report: Report) -> tuple[float, str]:
    """Bytes/s of a host↔device copy on this chip, and which figure: PCIe (TPU/GPU), host memory on a CPU."""
    if report.platform == "cpu":
        bw = report.roofs.hbm_bytes_per_s if report.roofs else 0.0
        return bw, "the CPU's memory bandwidth"
    return _host_link(report)[0], "the chip's PCIe bandwidth"


def rule_host_callbacks(report: Report) -> list[Finding]:
    """Host callbacks in the step (``jax.debug.print``, ``jax.debug.callback``, ``io_callback``, ``pure_callback``):
    the device stops at each, hands its values to Python on the host and waits. What a fix gives back is their time
    per step as the trace measures it (the host's round trips around them are the overheads finding's gaps)."""
    st = report.steps
    calls = [c for c in report.comparison if c.host_callback
             and (st is None or st.basis != "executions" or c.program == st.program)]
    main = st.program if st else None
    per = per_step_of(report, sum(step_time_of(report, c) for c in calls), main)
    if per <= 0:
        return []
    calls.sort(key=lambda c: -c.total_time_s)
    unit = per_what(st)
    verb = "take" if len(calls) > 1 else "takes"
    f = Finding(
        "host-callback", "low", f"{plural(len(calls), 'host callback')} in the {unit} {verb} {_ms(per)} of it",
        tuple(ref(c) for c in calls[:6]), per,
        tuple(f"{fmt_name(str(ref(c)))}: {_ms(c.measured_s)} median per execution of its program (mean "
              f"{_ms(c.mean_s)}), {fmt_number(runs_per_step(report, c))} per {unit} on each device" for c in calls[:4]),
        "jax.debug.print, jax.debug.callback, io_callback or pure_callback inside the jitted step: at each the "
        "device stops, copies the values to the host and waits for Python to run",
        "take the callback out of the step (return the values and print or log them outside the jitted function, "
        "every N steps), or keep it for debugging runs only")
    return [with_saving(report, f, per, main)]


def rule_in_window(report: Report) -> list[Finding]:
    out = []
    w = report.in_window
    comps = w.compilations
    if comps:
        where = sorted({c.where for c in comps if c.where})
        total = w.compile_s
        if w.whole_run:  # rooflens run: `compilations` holds recompilations only
            reasons = list(dict.fromkeys(f"{c.module or '?'}: {c.reason}" for c in comps if c.reason))
            title = f"{plural(len(comps), 'recompilation')} of already-compiled functions"
            # one recompilation (a second call whose input types differ once: weak types, a committed
            # array) is a second warm-up; churn is a function compiled again and again
            severity = "high" if len(comps) >= RECOMPILE_MANY else "medium" if len(comps) > 1 else "low"
        else:
            reasons = [m.splitlines()[-1].strip() for m in w.cache_misses]
            title = f"{plural(len(comps), 'compilation')} inside the measured window"
            severity = "high"
        per = total / periods_of(report)
        f = Finding(
            "recompilation", severity, title, (), per,  # per step, as every finding's time
            tuple([f"{_ms(total)} compiling, from {', '.join(where[:3]) or 'an unknown place'}: {_ms(per)} per "
                   "step on average"] + reasons[:3]),
            "a jitted function sees new shapes or dtypes (or a new Python function object) during the steady "
            "state, so XLA compiles again",
            "keep shapes static (pad batches to fixed sizes, bucket sequence lengths), keep dtypes stable, and "
            "jit once outside the loop"
            # JAX's reason names a static argument whose value changed (a learning rate from a schedule)
            + ("; pass a value that changes between calls as an array argument, not a static one (static_argnums "
               "compiles once per value)" if any("Static(" in r for r in reasons) else ""))
        # churn is judged by its count (one recompilation is a second warm-up); what it costs is its time. That time
        # is the host's, compiling between the steps: spread over them it may exceed a step, and it is no share of
        # the step's device time (capped at the step, it read "would save 28 ms of a 28 ms step (100 %)")
        f = with_saving(report, f, per, report.steps.program if report.steps else None, severity=False)
        out.append(replace(f, recoverable_s=per, step_s=0.0,
                           per=f"{f.per} on average (the host's time compiling, not the device's)"))
    implicit = _implicit_transfers(report)
    measured = measured_transfers(report)
    if measured is not None and transfers_matter(report, measured):
        out.append(_measured_finding(report, measured, implicit))
    elif implicit is not None:
        out.append(_implicit_finding(report, implicit, measured))
    return out


@dataclass(frozen=True)
class Implicit:
    """The implicit host↔device transfers the capture recorded in the steady state (transfer-guard lines)."""

    lines: tuple[str, ...]
    nbytes: float
    steps: int
    unsized: int = 0  # repeats whose detailed line came before the window: their size is not recorded


def _implicit_transfers(report: Report) -> Implicit | None:
    w = report.in_window
    transfers = list(w.transfers)
    times = list(w.transfer_times_unix_s or ())
    steps = report.steps.steps if report.steps and report.steps.steps else 1
    # a Python scalar turned into a device constant (jnp.ones(n), x * 2.0) is not a data transfer
    # (JAX details only the first of repeated transfers: a repeat is like the detailed one before it)
    data, scalar = [], False
    for x in transfers:
        if "(a repeat" not in x:
            scalar = x.startswith("host-to-device") and "[]" in x.split("dst_sharding")[0]
        data.append(not scalar)
    steady = report.steady
    if transfers and len(times) == len(transfers) and steady.transfers_from_unix_s is not None:
        # only the transfers of the steady state (set-up uploads are not per step)
        steps = steady.transfer_steps or steps
        data = [d and at >= steady.transfers_from_unix_s for d, at in zip(data, times)]
    sizes, last = [], None
    for x in list(w.transfers):  # a repeat moves what the detailed line before it moved
        last = transfer_bytes(x) if "(a repeat" not in x else last
        sizes.append(last)
    kept = [(x, b) for x, b, d in zip(w.transfers, sizes, data) if d]
    if not kept:
        return None
    return Implicit(tuple(x for x, _ in kept), sum(b or 0.0 for _, b in kept), steps,
                    sum(1 for _, b in kept if b is None))


def _implicit_finding(report: Report, implicit: Implicit, measured: MeasuredTransfers | None) -> Finding:
    """The implicit transfers the capture recorded; priced at the host link's roofline, or at the transfer time
    the trace measures where it measures some (not enough for a finding of their own)."""
    transfers, nbytes, steps = list(implicit.lines), implicit.nbytes, implicit.steps
    rate, what = _transfer_rate(report)
    per = nbytes / rate / steps if rate else 0.0
    unsized = implicit.unsized
    # JAX details the first of repeated transfers only: one made before the window leaves its repeats in it sizeless
    least = f"at least {fmt_bytes(nbytes)} ({unsized:,} of unrecorded size)" if unsized else fmt_bytes(nbytes)
    priced = (f"{least} in all, {_ms(per)} per step at {what} ({fmt_rate(rate)}); the trace "
              "does not time implicit transfers, so this is their roofline" if rate else
              f"{least} in all; no bandwidth is known for them on this chip, so their time is not priced")
    if unsized == len(transfers):
        priced = ("their sizes are not recorded (JAX details only the first of repeated transfers, and it came "
                  "before the window), so their time is not priced")
    detailed = [x for x in transfers if "(a repeat" not in x]
    evidence = [f"{fmt_number(len(transfers) / steps)} per step", priced] + (detailed or transfers)[:2]
    if measured is not None:  # the trace times the transfers (these among them): what it measures is what they cost
        per = measured.exposed_s
        evidence.insert(2, f"the trace measures {_ms(measured.time_s)} per {per_what(report.steps)} in host↔device "
                           f"transfers on each device, {_ms(measured.exposed_s)} of it with no kernel alongside: "
                           "what fixing them gives back at most")
    reshards = sum(x.startswith("device-to-device") for x in transfers)
    host = (plural(len(transfers), "implicit host↔device transfer"),
            "NumPy arrays or Python scalars cross to the device each step (or device values are read back), which "
            "serialises host and device",
            "device_put inputs ahead of time (prefetch), keep the loop state on the device, and read values back "
            "only when needed")
    reshard = (plural(len(transfers), "implicit device-to-device transfer"),
               "an array placed on one device or sharding is copied to the sharding the step takes on every call (one "
               "device's array fed to a pmap or a sharded jit)",
               "put such an input in the step's input sharding once, outside the loop (jax.device_put(x, sharding)), "
               "and keep the loop state in the sharding the step returns")
    if not reshards:
        what, cause, fix = host
    elif reshards == len(transfers):  # every one a copy between devices: an array resharded to the step's input
        what, cause, fix = reshard
    else:
        what = (f"{plural(len(transfers), 'implicit transfer')} ({len(transfers) - reshards:,} host↔device, "
                f"{reshards:,} device-to-device)")
        cause, fix = f"{host[1]}; and {reshard[1]}", f"{host[2]}; {reshard[2]}"
    f = Finding("host-transfers", "medium" if len(transfers) >= TRANSFERS_PER_STEP * steps else "low",
                f"{what} inside the window", (), 0.0, tuple(evidence), cause, fix)
    return with_saving(report, f, per, report.steps.program if report.steps else None, severity=False)


@dataclass(frozen=True)
class MeasuredTransfers:
    """The host↔device transfers the trace measures in the step (``DeviceTime.transfers``: op events of category
    ``host transfer``), per device per step (per execution of the step's program when the trace has no steps),
    the mean over the devices."""

    time_s: float  # in transfers (the union of their events)
    exposed_s: float  # of which no kernel ran alongside on the same device: what the device waited
    events: float  # transfer events
    worst: tuple[str, float]  # the device with the most exposed transfer time, and that time
    ops: tuple  # the transfer ops (OpStat) of the step, most time first
    scope: str | None  # the program they were counted in (None: every program, in the steps or the window)
    #: bytes per (program, op) the trace records the transfers moved (Nsight's memcpy rows), per device per step;
    #: None where it does not record every one's
    traced_bytes: dict[tuple[str, str], float] | None = None
    pinned: float = 0.0  # transfer events per step per device from page-locked host memory, as the trace says
    pageable: float = 0.0  # and from pageable host memory


def measured_transfers(report: Report) -> MeasuredTransfers | None:
    """What the devices spent in host↔device transfers per step, and how much of it no kernel hid; None when the
    trace measures none (in the step's program, for a trace judged per execution)."""
    st = report.steps
    scope = st.program if st is not None and st.basis == "executions" else None
    time = exposed = events = pinned = pageable = 0.0
    worst = ("", 0.0)
    traced: dict[tuple[str, str], float] | None = {}
    for d in report.stats.devices:
        xs = [x for x in d.transfers if scope is None or x.program == scope]
        mine = sum(x.exposed_s for x in xs)
        time += sum(x.time_s for x in xs)
        exposed += mine
        events += sum(x.events for x in xs)
        pinned += sum(x.pinned_events for x in xs)
        pageable += sum(x.pageable_events for x in xs)
        for x in xs:
            if traced is not None and not x.copy_bytes:  # a transfer whose bytes the trace does not say
                traced = None
            for name, b in x.copy_bytes if traced is not None else ():
                traced[(x.program, name)] = traced.get((x.program, name), 0.0) + b
        if xs and mine >= worst[1]:
            worst = (f"{d.host}:{d.device}" if len(report.hosts) > 1 else str(d.device), mine)
    if not time:
        return None
    n, periods = max(report.num_devices, 1), periods_of(report)
    ops = sorted((s for s in report.stats.op_stats if s.category == "host transfer"
                  and (scope is None or s.program == scope)), key=lambda s: -s.total_time_s)
    return MeasuredTransfers(time / n / periods, exposed / n / periods, events / n / periods,
                             (worst[0], worst[1] / periods), tuple(ops), scope,
                             {k: b / n / periods for k, b in traced.items()} if traced else None,
                             pinned / n / periods, pageable / n / periods)


def _step_s(report: Report) -> float:
    """The step (execution) the transfers are judged in; the devices' mean window where none was measured."""
    st = report.steps
    if st is not None and st.step_time_s > 0:
        return st.step_time_s
    windows = [d.window_s for d in report.stats.devices if d.window_s > 0]
    return sum(windows) / len(windows) / periods_of(report) if windows else 0.0


def transfers_matter(report: Report, m: MeasuredTransfers) -> bool:
    """Transfers a finding: the time no kernel hides a share of the step (TRANSFER_SHARE), or the transfers
    themselves a large one (TRANSFER_HIDDEN_SHARE) even where kernels hide them."""
    step = _step_s(report)
    return step > 0 and (m.exposed_s >= TRANSFER_SHARE * step or m.time_s >= TRANSFER_HIDDEN_SHARE * step)


def transfer_direction(report: Report, program: str, name: str) -> str:
    """Which way a transfer op moves data: by its name (Nsight labels ``[CUDA memcpy Host-to-Device]``), else by
    its HLO (a copy to or from host memory ``S(5)``, infeed, outfeed); "" when neither says."""
    low = name.lower()
    if "host-to-device" in low or "host-to-array" in low:
        return "host→device"
    if "device-to-host" in low or "array-to-host" in low:
        return "device→host"
    module = report.modules.get(program)
    ins = module.find(name) if module is not None else None
    if ins is None:
        return ""
    if ins.opcode in ("infeed", "outfeed"):
        return "host→device" if ins.opcode == "infeed" else "device→host"
    if ins.opcode in ("copy-start", "copy-done", "copy") and ins.shape.leaves():
        # a copy-done's result is the destination; a copy-start's is (destination, source, context)
        return "device→host" if ins.shape.leaves()[0].memory_space == HOST_MEMORY_SPACE else "host→device"
    return ""


def _bytes_by_direction(report: Report, scope: str | None) -> tuple[dict[str, float], float] | None:
    """Bytes each direction moves per step per device, from the comparison's transfer ops (their HLO's shapes),
    and the transfers per step; None unless every transfer op's bytes are known (an async copy is counted once:
    a copy-start's bytes are its copy-done's)."""
    rows = [c for c in report.comparison if c.category == "host transfer" and c.opcode != "copy-start"
            and (scope is None or c.program == scope)]
    if not rows or any(not c.bytes for c in rows):
        return None
    out: dict[str, float] = {}
    for c in rows:
        d = transfer_direction(report, c.program, c.name) or "either way"
        out[d] = out.get(d, 0.0) + c.bytes * runs_per_step(report, c)
    return out, sum(runs_per_step(report, c) for c in rows)


def _traced_by_direction(report: Report, m: MeasuredTransfers) -> tuple[dict[str, float], float] | None:
    """Bytes each direction moves per step per device, as the trace records each transfer (Nsight's memcpy
    ``bytes``), and the transfers per step; None where it does not record every one's."""
    if not m.traced_bytes:
        return None
    out: dict[str, float] = {}
    for (program, name), b in m.traced_bytes.items():
        d = transfer_direction(report, program, name) or "either way"
        out[d] = out.get(d, 0.0) + b
    return out, m.events


def _measured_finding(report: Report, m: MeasuredTransfers, implicit: Implicit | None) -> Finding:
    per, step = per_what(report.steps), _step_s(report)
    steps_basis = report.steps is not None and report.steps.basis == "steps"
    evidence = [f"{_ms(m.time_s)} per {per} on each device in host↔device transfers "
                f"({fmt_percent(m.time_s / step)} of the "
                f"{_ms(step)} {per}), {_ms(m.exposed_s)} of it with no kernel running alongside on the device "
                f"({fmt_percent(m.exposed_s / step)}), in {fmt_number(m.events)} transfer "
                f"{'event' if m.events == 1 else 'events'} per {per}"]
    if report.num_devices > 1 and m.worst[0] and m.worst[1] > 1.1 * m.exposed_s:  # the mean hides one device
        evidence.append(f"the most on device {m.worst[0]}: {_ms(m.worst[1])} per {per} with no kernel alongside")
    for s in m.ops[:4]:
        way = transfer_direction(report, s.program, s.name)
        counts = (f"{s.occurrences} in the trace, {_ms(s.total_time_s)} over its devices" if steps_basis else
                  f"{fmt_number(per_step_of(report, s.occurrences, report.steps.program if report.steps else None))}"
                  " per "
                  f"{per}, {_ms(per_step_of(report, s.total_time_s, report.steps.program if report.steps else None))}")
        evidence.append(f"{s.name}{f' ({way})' if way else ''}: {counts}")
    link, source = _host_link(report)
    counted = _traced_by_direction(report, m) or _bytes_by_direction(report, m.scope)
    moved, copies = counted if counted is not None else ({}, 0.0)
    whence = "as the trace records each copy" if m.traced_bytes else "from the HLO's shapes"
    share = None
    if moved:
        total = sum(moved.values())
        busiest = max(moved.values())
        rate = busiest / m.time_s
        ways = ", ".join(f"{fmt_bytes(b)} {d}" for d, b in sorted(moved.items(), key=lambda kv: -kv[1]))
        line = (f"{fmt_bytes(total)} moved per {per} on each device ({ways}; {whence}), "
                f"{fmt_bytes(total / copies)} per transfer: {fmt_rate(rate)} over the transfer time in the "
                "busier direction")
        if link:
            share = rate / link
            line += f", {fmt_percent(share)} of the host link's {fmt_rate(link)} ({source})"
        evidence.append(line)
    else:
        evidence.append("the trace as read gives no byte counts for these transfers (no HLO prices them), so their "
                        "achieved bandwidth is not known")
    if not link:
        evidence.append(f"the catalogue has no host-link (PCIe) bandwidth for {report.chip}" if report.chip else
                        "the chip is unknown, so its host link's bandwidth is not known: "
                        + (report.chip_reason or "give --chip"))
    elif not moved:
        evidence.append(f"the host link: {fmt_rate(link)} per direction ({source})")
    said = m.pinned + m.pageable
    if said:
        evidence.append(f"host memory: {fmt_number(m.pinned)} of the {fmt_number(m.events)} transfers per {per} from "
                        f"pinned (page-locked) memory, {fmt_number(m.pageable)} from pageable memory (as the trace "
                        "records them)")
    if implicit is not None:
        evidence.append(f"the capture recorded {plural(len(implicit.lines), 'implicit transfer')} over "
                        f"{plural(implicit.steps, 'step')} among them: {implicit.lines[0]}")
    hidden = m.exposed_s < TRANSFER_SHARE * step
    per_copy = sum(moved.values()) / copies if moved and copies else None
    if hidden:
        cause = ("the transfers run beside the kernels (overlapped), so they cost the step little now; they take a "
                 "large share of it and come onto the critical path as soon as the kernels around them get faster")
        fix = ("move fewer bytes between host and device: keep parameters and state on the device across steps, "
               "offload less, transfer in a narrower dtype")
    elif share is not None and share >= LINK_BOUND:
        cause = (f"the device waits for copies that already move {fmt_percent(share)} of what the host link carries: "
                 "the link is the limit, and the copies are not overlapped with compute")
        fix = ("move fewer bytes across (keep parameters and state on the device between steps, offload fewer "
               "tensors, transfer in a narrower dtype), and overlap what must move with compute: start each copy a "
               "step ahead (jax.device_put of the next batch before this step runs; host offloading whose copy-start "
               "is scheduled earlier; in PyTorch, a non_blocking copy on a side stream)")
    elif said and m.pageable >= m.pinned:
        cause = (f"the device waits for copies from pageable host memory ({fmt_number(m.pageable)} of the "
                 f"{fmt_number(said)} whose "
                 "memory the trace records): the driver stages each through a pinned bounce buffer, synchronously, at "
                 "a fraction of the link's bandwidth, and no kernel overlaps them")
        fix = ("pin the host memory (PyTorch: pin_memory=True in the DataLoader and .to(device, non_blocking=True); "
               "JAX: device_put from arrays the runtime pinned), keep the data on the device across steps, and "
               "prefetch the next batch while this step runs so that copies overlap compute")
    elif said:
        small = per_copy is not None and per_copy < SMALL_COPY_BYTES
        size = f" of {fmt_bytes(per_copy)} each" if per_copy is not None else ""
        rate_said = (f"at {fmt_percent(share)} of the host link" if share is not None else
                     "at a rate this chip's host link is not known to compare with")
        cause = (f"the copies come from pinned host memory ({fmt_number(m.pinned)} of the {fmt_number(said)} whose "
                 "memory the trace "
                 f"records), so pageable staging is not the cause; they move {rate_said}, and no kernel overlaps "
                 "them: " + (f"many small copies{size}, each paying a fixed launch and DMA set-up latency" if small
                             else f"the copies{size} are large, so per-copy latency is not it either: they run "
                             "synchronously (on the stream the kernels run on, or waited for before the kernels that "
                             "need them), or the host side (several GPUs copying at once through one switch or host "
                             "memory) holds them below the link"))
        fix = (("batch the small copies into one (a contiguous pinned staging buffer), " if small else "")
               + "issue the copies non-blocking on a separate stream a step ahead ("
               + in_terms_of(report, "jax.device_put of the next batch before this step runs",
                             ".to(device, non_blocking=True) of the next batch on a side stream",
                             "the next batch's copy started before this step runs")
               + ") so that they overlap compute, and keep on the device what need not cross each step")
    else:
        cause = ("the device waits for copies between host and device memory that no kernel overlaps: data fed or read "
                 "back every step, from pageable host memory (staged through a bounce buffer, at a fraction of the "
                 "link's bandwidth), in many small copies that each pay a fixed latency, or on the stream the "
                 "kernels run on")
        fix = ("keep the data on the device across steps; "
               + in_terms_of(report, "batch small copies into one; prefetch the next batch while this step runs "
                             "(jax.device_put ahead of the step) so that copies overlap compute",
                             "pin the host memory (pin_memory=True and .to(device, non_blocking=True)); batch small "
                             "copies into one; prefetch the next batch on a separate stream while this step runs",
                             "pin the host memory; batch small copies into one; prefetch the next batch on a "
                             "separate stream while this step runs so that copies overlap compute"))
    title = (f"Host↔device transfers take {fmt_percent(m.time_s / step)} of the {per}"
             + (", overlapped with kernels" if hidden else
                f", {fmt_percent(m.exposed_s / step)} with no kernel alongside"))
    f = Finding("host-transfers", "low", title, tuple(ref(s) for s in m.ops[:6]), m.time_s, tuple(evidence), cause,
                fix)
    return with_saving(report, f, m.exposed_s, report.steps.program if report.steps else None)
