"""Memory: the compiled peak against the state the program holds."""

from __future__ import annotations

from rooflens.analysis.findings import Finding
from rooflens.analysis.report import Report
from rooflens.memory.summary import PEAK_OVER_STATE


def rule_memory_peak(report: Report) -> list[Finding]:
    """The compiled peak far above the state the program holds (inputs and outputs)."""
    mem = report.memory
    ratio = mem.peak_over_state if mem else None
    if not ratio or ratio <= PEAK_OVER_STATE:
        return []
    main = mem.main
    bufs = main.peak_buffers[:4]
    gb = 1e9
    evidence = [f"{main.program}: peak {main.peak_bytes / gb:.3g} GB vs {main.state_bytes / gb:.3g} GB "
                f"of inputs and outputs ({ratio:.1f}×); temporaries {main.temp_bytes / gb:.3g} GB"]
    evidence += [f"at the peak: {b.name} {b.shape} {b.bytes / 1e6:.3g} MB"
                 + (f" from {b.named_scope}" if b.named_scope else "") for b in bufs]
    if main.padding_waste_bytes:
        evidence.append(f"tiling padding wastes {main.padding_waste_bytes / 1e6:.3g} MB")
    # a training step's gradients and optimizer temporaries alone put it near 1.3–2×: worth a look, no alarm
    return [Finding(
        "memory-peak", "high" if ratio > 3 else "medium" if ratio > 2 else "low",
        f"Peak memory is {ratio:.1f}× the state the program holds", tuple(b.name for b in bufs), 0.0,
        tuple(evidence),
        "retained activations (kept for the backward pass), XLA temporaries and tiling padding come on top of "
        "the weights, optimizer state and batch",
        "reduce the batch size; recompute activations (jax.checkpoint / remat on the big scopes above); shard "
        "the state further (FSDP/ZeRO, tensor parallelism) or lower its precision; check the peak buffers' "
        "scopes for activations kept longer than needed")]
