"""The plan set against measurement: what the first-principles estimate said, and what the run did.

The profiling chapter's advice (scaling book, profiling.md): predict from first principles, then measure to see
whether reality agrees. A :class:`PlanCheck` holds both sides for one captured training step of a known model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from rooflens.errors import RooflensError
from rooflens.plan.model import Transformer
from rooflens.units import fmt_g


@dataclass(frozen=True)
class PlanCheck:
    model: str
    chip: str
    chips: int
    batch_tokens: float
    batch_inferred: bool  # tokens per step inferred from the measured model FLOPs
    seq_len: int | None
    peak_flops_per_s: float  # per chip, as the measured MFU uses it
    planned_flops: float  # model (matmul) FLOPs of one step, all chips
    measured_flops: float | None
    planned_mfu: float  # the MFU the planned step assumes (1.0: the roofline's compute time)
    planned_step_s: float
    measured_step_s: float | None
    measured_mfu: float | None  # planned FLOPs (6·P·T) / (measured step × chips × peak)
    #: the report's MFU, the same step's: FLOPs of the dots XLA ran / (measured step × chips × peak); it differs
    #: from measured_mfu by measured_flops / planned_flops (what 6·P·T leaves out or adds: attention, embeddings)
    report_mfu: float | None
    planned_memory_per_chip_bytes: float  # model state + one checkpoint per layer, fully sharded
    measured_memory_per_chip_bytes: float | None  # the compiled peak of the main program
    explain: tuple[str, ...]

    def to_dict(self) -> dict:
        return {**asdict(self), "explain": list(self.explain)}


def check_plan(model: Transformer, chip: str, chips: int, peak_flops_per_s: float, measured_step_s: float | None,
               measured_flops_per_device: float | None, measured_memory_per_chip_bytes: float | None,
               batch_tokens: float | None = None, seq_len: int | None = None, mfu: float = 1.0,
               optimizer: str = "adam", param_dtype: str = "bf16", activation_dtype: str = "bf16",
               report_mfu: float | None = None) -> PlanCheck:
    """Plan ``model``'s step with the run's chip and device count and compare (all numbers handed in: pure).
    ``report_mfu``: the run's report's own MFU (of the FLOPs of the dots XLA ran; None where it withheld it)."""
    if chips < 1 or not peak_flops_per_s:
        raise RooflensError("a plan check needs the run's device count and its chip's peak FLOP/s.")
    fpt = model.flops_per_token(True, seq_len)
    measured = measured_flops_per_device * chips if measured_flops_per_device else None
    inferred = batch_tokens is None
    if inferred:
        if not measured:
            raise RooflensError("the run has no measured model FLOPs to infer its tokens per step from; give "
                                "the batch tokens of the plan.")
        batch_tokens = measured / fpt
    planned = fpt * batch_tokens
    step = planned / (chips * peak_flops_per_s * mfu)
    measured_mfu = planned / (measured_step_s * chips * peak_flops_per_s) if measured_step_s else None
    state = model.state(optimizer, param_dtype).total_bytes
    act = model.activation_bytes(batch_tokens, 1, activation_dtype)
    mem = (state + act) / chips
    lines = (
        f"planned FLOPs = 6 × {model.matmul_params:,} matmul params"
        + (f" + attention (T={seq_len})" if seq_len else "") + f" × {batch_tokens:,.0f} tokens = {fmt_g(planned)}"
        + (" (tokens inferred from the measured model FLOPs)" if inferred else "")
        + (f"; measured {fmt_g(measured)} (ratio {measured / planned:.4f})" if measured else ""),
        f"planned step = FLOPs/(chips·C·MFU) = {fmt_g(planned)}/({chips}·{fmt_g(peak_flops_per_s)}·{mfu:g}) = "
        f"{fmt_g(step)} s"
        + (f"; measured {fmt_g(measured_step_s)} s → MFU {measured_mfu:.1%} of the plan's FLOPs"
           if measured_mfu is not None else "")
        + (f" (the report's MFU, {report_mfu:.1%}, counts the FLOPs of the dots XLA ran instead)"
           if report_mfu is not None and measured_mfu is not None and abs(report_mfu - measured_mfu) > 5e-4 else ""),
        f"planned memory per chip = ({fmt_g(state)} B state ({optimizer}, {param_dtype}) + {fmt_g(act)} B of one "
        f"checkpoint per layer) / {chips} = {fmt_g(mem)} B, fully sharded"
        + (f"; measured compiled peak {fmt_g(measured_memory_per_chip_bytes)} B" if measured_memory_per_chip_bytes
           else ""),
    )
    return PlanCheck(model.name, chip, chips, float(batch_tokens), inferred, seq_len, peak_flops_per_s, planned,
                     measured, mfu, step, measured_step_s, measured_mfu, report_mfu, mem,
                     measured_memory_per_chip_bytes or None, lines)
