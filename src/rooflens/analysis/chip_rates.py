"""Which chip ran a trace that does not say, from what its ops achieved.

A TPU trace exported as Chrome JSON (vLLM's, for one) names its devices ``/device:TPU:N`` and
carries no generation and no peak stats, but every ``XLA Ops`` event carries XLA's own
``model_flops`` and ``bytes_accessed`` and the op's HLO line. An op measured at R FLOP/s or
B bytes/s of HBM proves the chip reaches R and B: every catalogue chip slower than that is
excluded (:func:`rooflens.hardware.infer.infer_chip_from_rates`). What is left are the
candidates; one is picked only when it is the only one.

Only counts that bound the work from below are used: async ops (an event is the issue or the
wait, not the transfer), collectives (their bytes cross links, not HBM) and custom calls (their
counts are the kernel author's estimate) are left out; HBM bytes leave on-chip memory out
(:func:`rooflens.analysis.trust.trace_hbm_bytes`).

Pure: the loaded profile in, rates out.
"""

from __future__ import annotations

import numpy as np

from rooflens.analysis.trust import trace_hbm_bytes
from rooflens.cost.kernels import instruction_module
from rooflens.errors import RooflensError
from rooflens.hardware import Chip, ChipError
from rooflens.hardware.infer import MeasuredRate, infer_chip_from_rates
from rooflens.trace.events import unique_rows
from rooflens.trace.groupby import group_medians
from rooflens.trace.profile import Profile

#: XLA Ops ``hlo_category`` values whose counts do not bound HBM or MXU work (xprof's categories)
NOT_BOUNDING = ("all-reduce", "all-gather", "all-to-all", "reduce-scatter", "collective", "send", "recv",
                "custom-call", "async", "host")
#: element types → the catalogue peak an MXU op on them may run at, at best
INT8_TYPES = frozenset({"s8", "u8", "s4", "u4"})


def peak_keys(dtypes: set[str]) -> tuple[str, ...]:
    """The peaks a matmul over operands of ``dtypes`` may run at, at best: int8 when one operand is an
    8-bit integer (a quantized matmul may carry a bf16 scale beside its int8 operands), fp8 when one is
    an fp8 type, bf16 for any other float (f32 too: a TPU runs it as bf16 passes by default). Erring fast
    never excludes the chip that ran the trace."""
    fp8 = {d for d in dtypes if d.startswith("f8")}
    keys = ["int8"] if dtypes & INT8_TYPES else []
    keys += ["fp8"] if fp8 else []
    if not keys or dtypes - INT8_TYPES - fp8:
        keys.append("bf16")
    return tuple(keys)


def _median_s(profile: Profile) -> dict[tuple[str, str], float]:
    """Each op's median time per event (s), as the op statistics have it."""
    if profile.reduced is not None:  # a pod merged from aggregates: its ops' medians are in its stats
        return {(s.program, s.name): s.median_time_s for s in profile.reduced.stats.op_stats}
    t = profile.table
    if not len(t):
        return {}
    ops, inv = unique_rows(t.program, t.name)
    medians = group_medians(inv, len(ops), t.dur_ps.astype(np.float64))[0]
    return {(t.programs[p], t.names[n]): m * 1e-12 for (p, n), m in zip(ops.tolist(), medians.tolist())}


def op_rates(profile: Profile) -> list[MeasuredRate]:
    """Every op's achieved model FLOP/s and HBM bytes/s from XLA's counts in the trace (TPU traces)."""
    meta = profile.table.op_meta
    if not meta:
        return []
    times = _median_s(profile)
    out = []
    for key, m in meta.items():
        time_s = times.get(key, 0.0)
        flops, nbytes = float(m.get("flops") or 0.0), float(m.get("bytes") or 0.0)
        category = str(m.get("hlo_category") or "").lower()
        if time_s <= 0 or not (flops or nbytes) or any(w in category for w in NOT_BOUNDING):
            continue
        text = profile.table.hlo_text.get(key)
        mod = instruction_module(text or "")
        if mod is None:
            continue
        ins = mod.instructions()[0]
        if ins.opcode.endswith(("-start", "-done", "-update")) or ins.opcode == "custom-call":
            continue
        dtypes = {s.dtype for o in ins.operands if o.shape is not None for s in o.shape.leaves() if s.is_array}
        hbm, _ = trace_hbm_bytes(text, nbytes)
        out.append(MeasuredRate(key[1], flops / time_s, peak_keys(dtypes), hbm / time_s))
    return out


def infer_tpu_from_rates(profile: Profile, why_not: str) -> tuple[Chip, str]:
    """The TPU generation of a trace that names none, from its ops' rates; else one sentence naming the
    candidates (``why_not``: what the device names and stats did not tell)."""
    rates = op_rates(profile)
    if not rates:
        raise RooflensError(why_not)
    try:
        return infer_chip_from_rates(rates, "tpu")
    except ChipError as e:
        raise RooflensError(str(e)) from None
