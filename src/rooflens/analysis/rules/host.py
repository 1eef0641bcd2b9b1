"""The host: devices left idle between executions, compilations and implicit transfers inside the window."""

from __future__ import annotations

import re
from dataclasses import replace

from rooflens.analysis.findings import Finding
from rooflens.analysis.report import Report
from rooflens.analysis.rules.common import per_device_step, severity_of, step_of, with_saving
from rooflens.hlo.shape import element_bytes
from rooflens.trace.idle import IdleUnit
from rooflens.units import fmt_seconds as _ms

IDLE_SHARE = 0.40
MIN_GAP_S = 1e-3
RECOMPILE_MANY = 3  # this many recompilations in a run traced from its start: high
TRANSFERS_PER_STEP = 0.75  # implicit transfers in (nearly) every step: medium


def _where(unit: IdleUnit) -> tuple[list, list[str]]:
    """The unit's largest gaps (≥ MIN_GAP_S, at most 3) and where each one is."""
    d = unit.unit
    if unit.gaps is None:
        gaps = [g for g in d.largest_gaps if g.duration_s >= MIN_GAP_S]
        return gaps, [f"gap of {_ms(g.duration_s)} at {_ms(g.start_s)} between {g.before} and {g.after}"
                      + (f"; the host was in {g.host}" if g.host else "") for g in gaps[:3]]
    # gaps left once warm-up is taken out; the stats' own gap names where one matches
    big = [g for g in sorted(unit.gaps, key=lambda g: -g.duration_s) if g.duration_s >= MIN_GAP_S][:3]
    named = {round(g.start_s, 6): g for g in d.largest_gaps}
    where = []
    for gap in big:
        g = named.get(round(gap.start_s, 6))
        where.append(f"gap of {_ms(gap.duration_s)} at {_ms(gap.start_s)}"
                     + (f" between {g.before} and {g.after}" + (f"; the host was in {g.host}" if g.host else "")
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


def _periods(report: Report) -> float:
    """What the main program's measured totals are divided by per device (steps, or its executions)."""
    st = step_of(report)
    return st.periods if st is not None and st.periods > 0 else 1.0


def rule_idle(report: Report) -> list[Finding]:
    """Devices idle a large share of the steady state (Report.steady.idle measures it)."""
    out = []
    main = report.steps.program if report.steps else None
    # forced CPU devices are threads time-sliced on shared cores: one waits while another runs, so
    # idleness is judged for the CPU as a whole (all devices of the host together)
    for k in idle_flagged(report):
        unit = report.steady.idle[k]
        d, idle_s, warm_s = unit.unit, unit.idle_s, unit.warmup_s
        share = idle_s / d.window_s
        gaps, where = _where(unit)
        who = f"The CPU ({report.num_devices} devices together)" if d.device < 0 else f"Device {d.device}"
        per = idle_s / _periods(report)  # this unit's idle per step (per execution of the main program)
        evidence = [f"idle {_ms(idle_s)} of {_ms(d.window_s)}: {_ms(per)} per "
                    f"{'step' if report.steps is None or report.steps.basis != 'executions' else 'execution'}"]
        evidence += where
        if warm_s > 0:
            evidence.append(f"not counted: {_ms(warm_s)} of idle time while the host compiled or around first runs "
                            "(warm-up)")
        f = Finding(
            "idle", severity_of(share), f"{who} is idle {share:.0%} of the time", (),
            per_device_step(report, idle_s) * max(report.num_devices, 1), tuple(evidence),
            "the host does not feed the device fast enough: Python or data loading between steps, a "
            "synchronisation (print, device_get, block_until_ready) or a host-side stall",
            "prefetch the next batch while the device runs (async data loading), move host work off the critical "
            "path, and drop per-step synchronisations")
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
    evidence = [f"{u.unran} of {u.dispatched} dispatches of {u.program} ({u.function}"
                + (f", on {u.host}" if len(report.hosts) > 1 else "") + ") never ran on the device inside the trace"
                + (f": about {_ms(u.missing_s)} of device work" if u.missing_s else "") for u in queued[:5]]
    main = report.steps.program if report.steps else ""
    if main and report.steps.steps:
        evidence.append(f"the {report.steps.steps} step(s) here are executions of {main} that ran inside the trace")
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
    """Bytes of one transfer-guard line's array (``aval=ShapedArray(float32[512,512])``), None when it says
    none (a repeat: JAX details only the first of repeated transfers)."""
    head = line.split("dst_sharding")[0]
    m = _AVAL.search(head[head.find("aval="):] if "aval=" in head else head)
    if m is None or (size := element_bytes(m.group(1))) is None:
        return None
    n = 1
    for d in m.group(2).replace(" ", "").split(","):
        n *= int(d) if d else 1
    return n * size


def _transfer_rate(report: Report) -> tuple[float, str]:
    """Bytes/s of a host↔device copy on this chip, and which figure: PCIe (TPU/GPU), host memory on a CPU."""
    if report.platform == "cpu":
        bw = report.roofs.hbm_bytes_per_s if report.roofs else 0.0
        return bw, "the CPU's memory bandwidth"
    from rooflens.hardware import chip as get_chip

    try:
        pcie = float(get_chip(report.chip).value("interconnect.pcie_bytes_per_s") or 0.0) if report.chip else 0.0
    except Exception:  # a custom chip not in the catalogue
        pcie = 0.0
    return pcie, "the chip's PCIe bandwidth"


def rule_in_window(report: Report) -> list[Finding]:
    out = []
    w = report.in_window
    comps = w.compilations
    if comps:
        where = sorted({c.where for c in comps if c.where})
        total = w.compile_s
        if w.whole_run:  # rooflens run: `compilations` holds recompilations only
            reasons = list(dict.fromkeys(f"{c.module or '?'}: {c.reason}" for c in comps if c.reason))
            title = f"{len(comps)} recompilation(s) of already-compiled functions"
            # one recompilation (a second call whose input types differ once: weak types, a committed
            # array) is a second warm-up; churn is a function compiled again and again
            severity = "high" if len(comps) >= RECOMPILE_MANY else "medium" if len(comps) > 1 else "low"
        else:
            reasons = [m.splitlines()[-1].strip() for m in w.cache_misses]
            title = f"{len(comps)} compilation(s) inside the measured window"
            severity = "high"
        per = total / _periods(report)
        f = Finding(
            "recompilation", severity, title, (), total,
            tuple([f"{_ms(total)} compiling, from {', '.join(where[:3]) or 'an unknown place'}: {_ms(per)} per "
                   "step on average"] + reasons[:3]),
            "a jitted function sees new shapes or dtypes (or a new Python function object) during the steady "
            "state, so XLA compiles again",
            "keep shapes static (pad batches to fixed sizes, bucket sequence lengths), keep dtypes stable, and "
            "jit once outside the loop")
        # churn is judged by its count (one recompilation is a second warm-up); what it costs is its time
        out.append(with_saving(report, f, per, report.steps.program if report.steps else None, severity=False))
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
    transfers = [x for x, _ in kept]
    if transfers:
        nbytes = sum(b or 0.0 for _, b in kept)
        rate, what = _transfer_rate(report)
        per = nbytes / rate / steps if rate else 0.0
        priced = (f"{nbytes / 1e6:.3g} MB in all, {_ms(per)} per step at {what} ({rate / 1e9:.3g} GB/s); the trace "
                  "does not time implicit transfers, so this is their roofline" if rate else
                  f"{nbytes / 1e6:.3g} MB in all; no bandwidth is known for them on this chip, so their time is not "
                  "priced")
        f = Finding(
            "host-transfers", "medium" if len(transfers) >= TRANSFERS_PER_STEP * steps else "low",
            f"{len(transfers)} implicit host↔device transfer(s) inside the window", (), 0.0,
            tuple([f"{len(transfers) / steps:.1f} per step", priced] + transfers[:2]),
            "NumPy arrays or Python scalars cross to the device each step (or device values are read back), "
            "which serialises host and device",
            "device_put inputs ahead of time (prefetch), keep the loop state on the device, and read values back "
            "only when needed")
        out.append(with_saving(report, f, per, report.steps.program if report.steps else None, severity=False))
    return out
