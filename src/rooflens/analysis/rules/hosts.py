"""Several hosts: the host the others wait for, and ops slow on one host only."""

from __future__ import annotations

import statistics

from rooflens.analysis.findings import Finding, OpRef
from rooflens.analysis.report import Report
from rooflens.analysis.rules.common import severity_of, step_of, with_saving
from rooflens.units import fmt_seconds as _ms

STRAGGLER_WAIT = 0.10  # the others wait in collectives at least this share of the step for one host
OUTLIER_SHARE = 0.05  # a per-host op outlier costs at least this share of that host's busy time


def rule_hosts(report: Report) -> list[Finding]:
    """Several hosts: the straggler (the host the others wait for) and ops slow on one host only.

    A host that reaches each collective late spends the least time inside it, while the others sit
    in the same collective until it arrives: the straggler is the host with the least collective
    time per step when the others' exceeds it by a share of the step."""
    hs = report.stats.host_steps
    if hs is None or len(hs.hosts) < 2:
        return []
    out = []
    step_s = statistics.median([x for row in hs.times_s for x in row if x is not None] or [0.0])
    coll = list(hs.collective_s)
    k = min(range(len(coll)), key=coll.__getitem__)
    others = [c for j, c in enumerate(coll) if j != k]
    wait = statistics.median(others) - coll[k]
    if step_s > 0 and wait > STRAGGLER_WAIT * step_s and coll[k] < 0.7 * statistics.median(others):
        host = hs.hosts[k]
        out.append(with_saving(report, Finding(
            "straggler", severity_of(wait / step_s), f"Host {host} is the straggler: the other hosts wait for it "
            f"{_ms(wait)} per step inside collectives", (), wait,  # per device per step, as every finding's time
            (f"time inside collectives per step: {host} {_ms(coll[k])}, the other {len(others)} hosts "
             f"{_ms(min(others))}–{_ms(max(others))} (step {_ms(step_s)})",
             f"its other ops: {_ms(hs.other_s[k])} per step, the others' median "
             f"{_ms(statistics.median([o for j, o in enumerate(hs.other_s) if j != k]))}",
             f"step-time skew across hosts: median {_ms(statistics.median(hs.skew_s or (0.0,)))}, "
             f"max {_ms(max(hs.skew_s or (0.0,)))}"),
            f"{host} reaches every collective late, so the others sit in it until it arrives: its host-side work "
            "before the step (input pipeline, Python, logging, checkpointing), a slower or busier machine, or more "
            "work on its shard",
            f"look at what {host}'s host does between steps (its idle gaps and Python frames), prefetch its input, "
            "and balance its shard"), wait))
    busy = {d.host: d.busy_s for d in report.stats.hosts}
    devices = dict(zip(hs.hosts, hs.devices))
    st = step_of(report)
    periods = st.periods if st is not None and st.periods > 0 else 1.0
    for program, op, host, mean_s, median_s, runs in hs.op_outliers:
        excess_s = (mean_s - median_s) * runs
        if excess_s < OUTLIER_SHARE * busy.get(host, float("inf")):
            continue
        # the others wait for that host's devices in the next collective: its excess per step and device
        saved = excess_s / max(devices.get(host, 1), 1) / periods
        out.append(with_saving(report, Finding(
            "host-outlier", "medium", f"{OpRef(program, op)} takes {mean_s / median_s:.1f}× longer on {host} "
            "than on the other hosts", (OpRef(program, op),), excess_s,
            (f"{program}/{op}: {_ms(mean_s)} per run on {host} ({runs} runs), median over hosts "
             f"{_ms(median_s)}; {_ms(excess_s)} more in all, of {host}'s {_ms(busy[host])} busy",),
            "a slower or thermally throttled device, another job sharing the host, or a larger shard there",
            f"compare {host}'s devices and load with the others'; check the op's input shapes on that host"), saved))
    return out
