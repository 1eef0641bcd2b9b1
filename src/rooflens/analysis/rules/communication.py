"""Communication: collectives slower than their bandwidth prediction, or too large a share of the step."""

from __future__ import annotations

from rooflens.analysis.findings import Finding
from rooflens.analysis.report import Report
from rooflens.analysis.rules.common import (
    busy_total,
    per_device_step,
    per_execution,
    producer_chain,
    ref,
    runs_per_step,
    severity_of,
    step_time_of,
    with_saving,
)
from rooflens.analysis.rules.device_time import MIN_SHARE
from rooflens.hlo import Instruction, Module
from rooflens.units import fmt_bytes, fmt_percent, fmt_ratio_range, plural
from rooflens.units import fmt_seconds as _ms

SLOW_COLLECTIVE_RATIO = 3.0
COMM_SHARE = 0.25  # collectives above a quarter of the step


def rule_slow_collectives(report: Report) -> list[Finding]:
    """Collectives much slower than their bandwidth prediction (one finding for all of them)."""
    busy = busy_total(report)
    slow = [c for c in report.comparison if c.category == "collective" and c.priced and c.ratio is not None
            and c.ratio > SLOW_COLLECTIVE_RATIO and c.total_time_s / busy >= MIN_SHARE]
    if not slow:
        return []
    slow.sort(key=lambda c: -c.total_time_s)
    total = sum(c.total_time_s for c in slow)
    cause = ("the devices wait for each other (a straggler or an earlier op delays a participant), or the group "
             "does not map onto the interconnect as assumed")
    if report.platform == "cpu":
        cause = ("on a CPU with forced devices every device is a thread pool sharing the same cores, so a collective "
                 "mostly waits for the other devices' threads to reach it")
    main = report.steps.program if report.steps else None
    per_exec = report.steps is not None and report.steps.basis == "executions"
    # what they spend beyond their bandwidth/latency model (their measured time is what is exposed of them)
    saved = sum(max(c.measured_s - c.predicted_s, 0.0) * runs_per_step(report, c) for c in slow
                if not per_exec or c.program == main)
    f = Finding(
        "slow-collective", severity_of(total / busy),
        f"{plural(len(slow), 'collective')} {'takes' if len(slow) == 1 else 'take'} "
        f"{fmt_ratio_range(min(c.ratio for c in slow), max(c.ratio for c in slow))} "
        f"{'its' if len(slow) == 1 else 'their'} bandwidth prediction", tuple(ref(c) for c in slow[:8]),
        per_device_step(report, sum(step_time_of(report, c) for c in slow)),
        tuple(f"{ref(c)}: {per_execution(c)} vs {_ms(c.predicted_s)} for {fmt_bytes(c.comm_bytes)} sent per "
              "device" for c in slow[:4]) + (f"{_ms(saved)} per step beyond their bandwidth and latency model",),
        cause, "look at what runs just before it on the slowest device; check the mesh axes against the topology")
    return [with_saving(report, f, saved, main)]


def _gathers_weights(module: Module, ins: Instruction) -> bool:
    """An all-gather whose input comes straight from a program parameter (a sharded weight)."""
    target = ins
    if ins.opcode.endswith("-done"):
        target = module.collective_of(ins) or ins
    for op in producer_chain(module, target, depth=4):
        if op.opcode == "parameter" and op.computation is module.entry:
            return True
    return False


def rule_communication_share(report: Report) -> list[Finding]:
    if not report.steps or report.steps.step_time_s <= 0:
        return []
    st = report.steps
    share = st.communication_s / st.step_time_s
    if share < COMM_SHARE:
        return []
    colls = sorted((c for c in report.comparison if c.category == "collective"), key=lambda c: -c.total_time_s)
    module = report.modules.get(st.program)
    weights = [c for c in colls if module is not None and "all-gather" in c.opcode
               and module.find(c.name) is not None and _gathers_weights(module, module.find(c.name))]
    ops = tuple(ref(c) for c in colls[:6])
    # exposed: the collectives' time, but no more than the step leaves once its other ops have run
    others = st.compute_s + st.layout_s + st.host_s + st.other_s
    exposed = min(st.communication_s, max(st.step_time_s - others, 0.0))
    evidence = [f"collectives take {_ms(st.communication_s)} of a {_ms(st.step_time_s)} step ({fmt_percent(share)}); "
                f"exposed, at most {_ms(exposed)} (the step less its other ops)"]
    evidence += [f"{ref(c)}: {per_execution(c)}, "
                 f"{fmt_bytes(c.comm_bytes)} per device" for c in colls[:3]]
    if weights:
        evidence.append(f"{plural(len(weights), 'all-gather')} {'reads' if len(weights) == 1 else 'read'} program "
                        "parameters: the weights are gathered every step")
        gathered = sum(c.total_time_s for c in weights) / max(report.num_devices, 1) / (st.periods or 1.0)
        return [with_saving(report, Finding(
            "weights-all-gathered", severity_of(share), "Weights are all-gathered every step (FSDP-style sharding)",
            tuple(ref(c) for c in weights), st.communication_s, tuple(evidence),
            "parameters are sharded over a mesh axis, so every step gathers them back before the matmuls; "
            "on a model this small the gathers cost more than the memory they save",
            "replicate the weights and shard only the batch (data parallelism), or pin the intended layout with "
            "jax.lax.with_sharding_constraint / shard_map, or use a mesh whose axis matches the sharding"),
            min(gathered, exposed), st.program)]
    return [with_saving(report, Finding(
        "communication-share", severity_of(share), f"Collectives take {fmt_percent(share)} of the step", ops,
        st.communication_s, tuple(evidence),
        "the sharding makes devices exchange activations or gradients more than they compute",
        "check which tensors the collectives move (`rooflens hlo --op`); add with_sharding_constraint on the "
        "intermediate that XLA gathers, or change the mesh so the heavy matmuls need no communication"),
        exposed, st.program)]
