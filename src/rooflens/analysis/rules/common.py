"""What the rules share: severity from a share of time, per-step scaling, and the HLO walks."""

from __future__ import annotations

from rooflens.analysis.findings import Severity
from rooflens.analysis.report import Report
from rooflens.hlo import Instruction, Module
from rooflens.hlo.opcodes import MODEL_FLOP_OPCODES

TINY_OP_S = 20e-6  # below this an op costs about what launching it does (GPU/TPU launch ≈ 5–10 µs)
TINY_OPS_PER_STEP = 100


def severity_of(share: float) -> Severity:
    return "high" if share >= 0.2 else "medium" if share >= 0.05 else "low"


def per_device_step(report: Report, total_s: float) -> float:
    """A time summed over devices and steps, per device per step (per device where there are no steps)."""
    steps = report.steps.steps if report.steps and report.steps.steps else 1
    return total_s / max(report.num_devices, 1) / steps


def busy_total(report: Report) -> float:
    return sum(d.busy_s for d in report.stats.devices) or 1.0


def producer_chain(module: Module, ins: Instruction, depth: int = 3) -> list[Instruction]:
    """The operands of ``ins``, and theirs through bitcasts, reshapes and converts, ``depth`` levels up."""
    out, frontier = [], [ins]
    for _ in range(depth):
        nxt = []
        for i in frontier:
            for op in module.operands_of(i):
                out.append(op)
                if op.opcode in ("bitcast", "reshape", "get-tuple-element", "convert"):
                    nxt.append(op)
        frontier = nxt
    return out


def dot_of(module: Module, ins: Instruction) -> Instruction | None:
    """The dot or convolution ``ins`` is, or the first one its fusion body holds."""
    if ins.opcode in MODEL_FLOP_OPCODES:
        return ins
    return next((i for i in module.fusion_body(ins) if i.opcode in MODEL_FLOP_OPCODES), None)
