"""Sentences more than one view prints (terminal and HTML say them the same way)."""

from __future__ import annotations

from rooflens.units import fmt_bytes


def memory_line(mem) -> str:
    """``jit_step: compiled peak 16.8 MB per device, holding 0.52 MB of inputs and outputs (32×); …``"""
    main = mem.main
    ratio = mem.peak_over_state
    return (f"{main.program}: compiled peak {fmt_bytes(main.peak_bytes)} per device, holding "
            f"{fmt_bytes(main.state_bytes)} of inputs and outputs" + (f" ({ratio:.2f}×)" if ratio else "")
            + (f"; live device memory up to {fmt_bytes(mem.live_peak_bytes)}" if mem.live_peak_bytes else ""))
