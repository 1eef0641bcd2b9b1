"""Memory: the program that holds the device, judged against the device's memory and the state it holds.

The main program is the one with the most device time (the step), so the initialisation, RNG seeding
and one-off conversions around it are context, not findings; its compiled peak is weighed against one
device's memory (recorded by the capture), not only against the state it holds.
"""

from __future__ import annotations

from rooflens.analysis.findings import Finding, OpRef
from rooflens.analysis.report import Report
from rooflens.analysis.rules.common import with_saving
from rooflens.memory.summary import PEAK_OVER_STATE

MEMORY_NEAR_FULL = 0.90  # the main program's peak above this share of the device: near an out-of-memory error
MEMORY_HALF = 0.50  # above half the device, a peak far over the state is worth a look
PEAK_OVER_STATE_UNKNOWN_DEVICE = 3.0  # the device's memory unknown: only a peak this far over the state is said


def _memory_severity(mem, ratio: float) -> str:
    """HIGH only for a peak near the device's memory or live memory growing step by step; a peak
    far above the state on a device it barely uses is information (a few MB on a 16 GB device)."""
    share = mem.peak_over_device
    if mem.growing or (share is not None and share >= MEMORY_NEAR_FULL):
        return "high"
    if share is None:  # the device's memory unknown: judged by the ratio alone, never an alarm
        return "medium" if ratio > 3 else "low"
    return "medium" if share >= MEMORY_HALF and ratio > 2 else "low"


def rule_memory_peak(report: Report) -> list[Finding]:
    """The main program's compiled peak far above the state it holds, near the device's memory, or
    live memory growing from step to step. The main program is the one holding the device (the
    step), not the initialisation, RNG seeding or one-off conversions around it."""
    mem = report.memory
    ratio = mem.peak_over_state if mem else None
    share = mem.peak_over_device if mem else None
    near = share is not None and share >= MEMORY_NEAR_FULL
    # a peak over the state matters when it takes much of the device (a few MB of a 16 GB device do not)
    over = bool(ratio) and (ratio > PEAK_OVER_STATE and share is not None and share >= MEMORY_HALF
                            or share is None and ratio > PEAK_OVER_STATE_UNKNOWN_DEVICE)
    if not mem or not (near or mem.growing or over):
        return []
    main = mem.main
    bufs = main.peak_buffers[:4]
    ops = tuple(OpRef(main.program, b.name) for b in main.peak_buffers
                if b.opcode != "parameter" and not _is_parameter(main, b.name))[:4]  # ops, not arguments
    gb = 1e9
    evidence = [f"{main.program}: peak {main.peak_bytes / gb:.3g} GB vs {main.state_bytes / gb:.3g} GB "
                f"of inputs and outputs ({ratio or 0:.1f}×); XLA's temp buffer {main.temp_bytes / gb:.3g} GB"]
    if share is not None:
        evidence.append(f"the peak is {share:.1%} of one device's {mem.device_bytes / gb:.3g} GB")
    if mem.growing:
        live = [s.total_bytes for s in mem.snapshots if s.label.startswith("step_")]
        evidence.append(f"live device memory grows every step: {live[0] / 1e6:.3g} MB → {live[-1] / 1e6:.3g} MB "
                        f"over {len(live)} steps")
    evidence += [f"at the peak: {b.name} {b.shape} {b.bytes / 1e6:.3g} MB"
                 + (f" from {b.named_scope}" if b.named_scope else "") for b in bufs]
    if main.padding_waste_bytes:
        evidence.append(f"tiling padding wastes {main.padding_waste_bytes / 1e6:.3g} MB")
    title = (f"Live device memory grows from step to step ({main.program})" if mem.growing else
             f"Peak memory of {main.program} is {share:.0%} of the device's memory" if near else
             f"Peak memory is {ratio:.1f}× the state the program holds"
             + (f" ({share:.1%} of the device's memory)" if share is not None else ""))
    # what a fix frees: the growth (a leak), else what the peak holds above the program's own state
    live = [s.total_bytes for s in mem.snapshots if s.label.startswith("step_")]
    headroom = (max(live[-1] - live[0], 0) if mem.growing and len(live) > 1
                else max(main.peak_bytes - main.state_bytes, 0))
    evidence.append(f"fixing it frees up to {headroom / 1e6:.3g} MB of device memory (no device time: 0 s per step)")
    training = _activations_at_peak(main) > 0
    if mem.growing:
        cause = "arrays kept alive across steps (a growing cache, a list of per-step outputs, a leak)"
        fix = "find what the loop keeps from each step (jax.live_arrays(), `rooflens memory`) and drop it"
    elif training:
        cause = ("retained activations (kept for the backward pass), XLA temporaries and tiling padding come on top "
                 "of the weights, optimizer state and batch")
        fix = ("reduce the batch size; recompute activations (jax.checkpoint / remat on the big scopes above); shard "
               "the state further (FSDP/ZeRO, tensor parallelism) or lower its precision; check the peak buffers' "
               "scopes for activations kept longer than needed")
    else:  # no backward pass holds activations at the peak: its temporaries and copies do
        cause = ("XLA temporaries (intermediate results, copies) and tiling padding come on top of the inputs and "
                 "outputs")
        fix = ("donate the inputs the program replaces (jax.jit donate_argnums) so outputs reuse their buffers; "
               "process the batch in smaller pieces; check the peak buffers above for copies of large inputs")
    return [with_saving(report, Finding(
        "memory-peak", _memory_severity(mem, ratio or 0.0), title, ops, 0.0, tuple(evidence), cause, fix),
        0.0, severity=False, headroom_bytes=float(headroom))]


def _is_parameter(main, name: str) -> bool:
    """A buffer the timeline counts among the program's arguments (a parameter allocation)."""
    tl = main.timeline
    return tl is not None and any(b.name == name and b.kind == "parameters" for b in tl.peak_buffers)


def _activations_at_peak(main) -> float:
    """Bytes of forward-pass activations kept for the backward pass, live at the peak (0: no backward pass)."""
    tl = main.timeline
    return sum(b.bytes for b in tl.peak_buffers if b.kind == "activations") if tl is not None else 0.0
