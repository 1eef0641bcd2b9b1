"""What the comparison can vouch for: custom kernels priced from the trace's own text, rooflines
that a measurement proves wrong, and program executions as the unit where a trace has no steps.

* A TPU trace (Chrome JSON ``long_name``, XSpace ``XLA Ops`` metadata) carries each op's HLO line
  even when it carries no program HLO: a custom call is priced from that one line
  (:func:`rooflens.cost.kernels.instruction_module`).
* An op measured faster than its roofline (above 100 % of a peak) shows that the model or the
  chip is wrong: the op's roofline is marked unreliable and its fractions are not printed
  (:func:`check_roofline`); :mod:`rooflens.analysis.chip_rates` names the catalogue chips its rates fit.
* Without step markers a program is judged per execution: :func:`rooflens.trace.warmup.program_executions`
  gives each program's executions per device and their mean and median span (first op start to last op end).

Pure functions over loaded data: no files, no printing.
"""

from __future__ import annotations

from dataclasses import replace

from rooflens.analysis.report import OpComparison
from rooflens.cost.kernels import KernelCost, instruction_module, kernel_cost
from rooflens.cost.model import OpPrediction, costs, price
from rooflens.hardware import Chip
from rooflens.hardware.calibrate import spread_words
from rooflens.hardware.infer import MeasuredRate
from rooflens.hlo import Module
from rooflens.trace.events import EventTable

#: an achieved fraction above this is impossible on the chip (1 % for timer rounding)
MAX_FRACTION = 1.0
#: what a roofline note says when a measurement beats its roof: the figures that would exceed 100 % are not given
WITHHELD = "its ratio and fractions of peak are withheld"
#: how a roofline note begins for a CPU op at its calibrated roof within the calibration's own wobble
#: (``OpComparison.within_calibration_spread``)
AT_THE_ROOF = "at the calibrated roof"


def price_from_text(table: EventTable, priced: set[tuple[str, str]], chip: Chip,
                    modules: dict[str, Module]) -> tuple[dict[tuple[str, str], OpPrediction], dict]:
    """Custom calls the programs' HLO does not hold, priced from the instruction text the trace carries."""
    preds: dict[tuple[str, str], OpPrediction] = {}
    kernels: dict[tuple[str, str], KernelCost] = {}
    for key, text in table.hlo_text.items():
        if key in priced or key[0] in modules or " custom-call(" not in (text or ""):
            continue
        m = instruction_module(text)
        if m is None:
            continue
        ins = m.instructions()[0]
        kc = kernel_cost(m, ins)
        if kc is None:
            continue
        oc = next((c for c in costs(m, emulate_fusion=False) if c.name == ins.name), None)
        if oc is not None:
            preds[key] = price(oc, chip)
            kernels[key] = kc
    return preds, kernels


def hbm_bytes_of_text(text: str | None) -> float | None:
    """HBM bytes of one op from its instruction text (operands and result, shapes printed inline):
    arrays in on-chip memory (TPU ``S(1)`` VMEM) or host memory are not HBM traffic. XLA's
    ``bytes_accessed`` counts every memory space, so a TPU op looks faster than HBM allows."""
    from rooflens.cost.traffic import hbm_bytes

    m = instruction_module(text or "")
    if m is None:
        return None
    ins = m.instructions()[0]
    if any(o.shape is None for o in ins.operands):
        return None
    return hbm_bytes(ins.shape) + sum(hbm_bytes(o.shape) for o in ins.operands)


def trace_hbm_bytes(text: str | None, bytes_accessed: float) -> tuple[float, str]:
    """HBM bytes of an op the trace counted (XLA's ``bytes_accessed``) and how they were had.

    XLA counts an op's result whole and its operands as far as it reads them, in every memory space.
    Two upper bounds on the HBM part follow from the op's own line: ``bytes_accessed`` less its result
    arrays that live off HBM (VMEM ``S(1)``, host), and its HBM operands whole plus its HBM result
    (:func:`hbm_bytes_of_text`). The smaller is kept: a slice fusion writing into VMEM (``fusion.1537``
    of the vLLM trace: 2 MiB read from HBM, 2 MiB written to VMEM) is neither bound's overcount."""
    from rooflens.cost.traffic import OFF_HBM

    m = instruction_module(text or "")
    if m is None:
        return bytes_accessed, "XLA's bytes_accessed, from the trace"
    ins = m.instructions()[0]
    off_result = float(sum(s.padded_bytes for s in (ins.shape.leaves() if ins.shape else ())
                           if s.is_array and s.memory_space in OFF_HBM))
    best, how = bytes_accessed, "XLA's bytes_accessed, from the trace"
    if 0 < off_result <= bytes_accessed:
        best, how = bytes_accessed - off_result, (f"XLA's bytes_accessed {bytes_accessed:.4g} B less its result in "
                                                  f"on-chip or host memory ({off_result:.4g} B)")
    whole = hbm_bytes_of_text(text)
    if whole is not None and whole < best:
        best, how = whole, (f"HBM operands and result of its HLO line; XLA's bytes_accessed {bytes_accessed:.4g} B "
                            "counts on-chip memory too")
    return best, how


def module_kernels(modules: dict[str, Module]) -> dict[tuple[str, str], KernelCost]:
    """The custom kernels of the programs' HLO that rooflens.cost.kernels prices, by (program, op)."""
    out = {}
    for program, m in modules.items():
        for ins in m.instructions():
            if ins.opcode == "custom-call" and (kc := kernel_cost(m, ins)) is not None:
                out[(program, ins.name)] = kc
    return out


def check_roofline(c: OpComparison, kc: KernelCost | None, *, cached: OpPrediction | None = None,
                   hbm_bytes_per_s: float = 0.0, calibrated: bool = False, spread: float = 0.0) -> OpComparison:
    """The comparison with its bound named, and marked unreliable where it achieves > 100 % of a roof, on
    every chip: a CPU's calibrated rates are its roofs too (beaten, they say the calibration is too low).
    ``cached``: the op priced with the reads a GPU's L2 still holds taken off HBM
    (:func:`rooflens.cost.cache.l2_resident_reads`); where the HBM roofline is beaten and this one is not,
    the comparison takes it (the op read those operands from L2). ``calibrated``: the roofs were measured on this
    machine (a CPU's ``local``), so the calibration is what the op beats; ``spread``: that calibration's own
    IQR / median. A calibrated roof is the median of its measurements, so an op beats it by more than that spread
    before the measurement says the calibration is wrong (the machine's own wobble is not a broken roof)."""
    if kc is not None and kc.bound != "exact":
        c = replace(c, roofline_bound=kc.bound, roofline_note=kc.note)
    # a calibrated chip prices a matmul at the rate it measured at the matmul's shape, below its peak: an op faster
    # than that roofline beats the calibration as surely as one beyond the peak (an ODE's matmuls ran 2.9× their
    # rooflines' rate at 82 % of the peak, and read "0.346×")
    at_shape = 1.0 / c.ratio if calibrated and c.bound == "compute" and c.ratio and c.roofline_bound == "exact" \
        else None
    over = [(f, what) for f, what in ((c.flops_fraction_of_peak, "peak FLOP/s"),
                                      (c.bytes_fraction_of_peak, "HBM bandwidth"),
                                      (at_shape, "matmul rate the calibration measured at its shape"))
            if f and f > MAX_FRACTION]
    if not over:
        return c
    f, what = max(over)
    if calibrated and f <= MAX_FRACTION * (1.0 + spread):  # at the roof, within what the calibration itself wobbled
        return replace(c, roofline_reliable=False, ratio=None, flops_fraction_of_peak=None,
                       bytes_fraction_of_peak=None, within_calibration_spread=True,
                       roofline_note=f"{AT_THE_ROOF}: measured at {f:.0%} of its {what}, within the calibration's "
                                     f"own spread ({spread_words(spread)}); {WITHHELD}")
    if is_async(c):
        return replace(c, roofline_reliable=False, ratio=None, flops_fraction_of_peak=None, bytes_fraction_of_peak=None,
                       roofline_note="an async op's event is its issue or its wait, not the transfer it starts")
    if cached is not None and (fixed := _from_cache(c, cached, f, what, hbm_bytes_per_s)) is not None:
        return fixed
    held = (" even with the reads the L2 holds off HBM" if cached is not None else "")
    blame = ("the calibration is too low (or the cost model overcounts this op)" if calibrated else
             "the cost model overcounts this op or the chip is not the one that ran it")
    why = f"measured at {f:.0%} of the chip's {what}{held}, which no kernel can reach: {blame}; {WITHHELD}"
    return replace(c, roofline_reliable=False, roofline_note=why, ratio=None,
                   flops_fraction_of_peak=None, bytes_fraction_of_peak=None)


def _from_cache(c: OpComparison, cached: OpPrediction, over: float, what: str,
                hbm_bytes_per_s: float) -> OpComparison | None:
    """The comparison priced with its L2-held reads off HBM, when that roofline is not beaten too."""
    per = c.measured_s
    frac = cached.bytes / per / hbm_bytes_per_s if per and hbm_bytes_per_s and cached.bytes else None
    if not per or (frac or 0.0) > MAX_FRACTION or (c.flops_fraction_of_peak or 0.0) > MAX_FRACTION:
        return None
    note = (f"{what} roofline beaten ({over:.0%}) with every operand from HBM: priced with "
            f"{c.bytes - cached.bytes:.4g} B of its reads from the L2, written or read by the ops just before it")
    return replace(c, predicted_s=cached.t_pred_s, ratio=per / cached.t_pred_s if cached.t_pred_s else None,
                   bound=cached.bound, bytes=cached.bytes, achieved_bytes_per_s=cached.bytes / per,
                   bytes_fraction_of_peak=frac, explanation=cached.explanation, roofline_note=note)


def rates_of_comparison(comparison: list[OpComparison]) -> list[MeasuredRate]:
    """What the exactly-priced ops achieved, by the model's counts (any of the chip's peaks may apply)."""
    return [MeasuredRate(c.name, c.model_flops / c.measured_s if c.model_flops else 0.0, (),
                         c.bytes / c.measured_s if c.category not in ("collective", "host transfer") else 0.0)
            for c in comparison if c.measured_s and c.roofline_bound == "exact" and not is_async(c)]


def is_async(c: OpComparison) -> bool:
    return c.opcode.endswith(("-start", "-done", "-update"))


