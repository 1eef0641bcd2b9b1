"""Serving planned from first principles: the scaling book's inference arithmetic on a catalogue chip.

Sections cited: inference.md ("All About Transformer Inference": 'Theoretical estimates for LLM latency and
throughput', 'What about memory?', 'Generation') and applied-inference.md ("Serving LLaMA 3-70B").
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from rooflens.errors import RooflensError
from rooflens.hardware import Chip
from rooflens.hardware import chip as get_chip
from rooflens.plan.model import Transformer, dtype_bytes
from rooflens.plan.network import levels
from rooflens.plan.train import peak_flops as peak_of
from rooflens.units import fmt_g

DEFAULT_PREFILL_MFU = 0.4  # applied-inference.md, 'What about prefill?': "Assume we achieve a 40% FLOPs utilization"


@dataclass(frozen=True)
class DecodePlan:
    model: str
    chip: str
    chips: int
    batch: int
    context: int
    param_dtype: str
    kv_dtype: str
    peak_flops_per_s: float  # per chip, in the compute dtype
    hbm_bytes_per_s: float  # per chip
    param_bytes: float  # every parameter, held in HBM
    weight_bytes: float  # what one step streams: the matmul weights (the input embedding is only gathered)
    kv_bytes: float  # batch × context × KV bytes per token
    memory_per_chip_bytes: float
    fits: bool
    max_batch: int  # sequences of ``context`` whose KV caches fit beside the weights
    min_chips: int
    min_topology: str  # the smallest published slice (TPU) or device count that holds weights + KV caches
    t_kv_s: float
    t_weights_s: float
    t_flops_s: float
    step_time_s: float
    tokens_per_s: float
    tokens_per_s_per_chip: float
    bound: str  # what the MLP part is limited by: memory (weight loading) or compute
    critical_batch: float  # where the MLP turns compute-bound: (C / W_hbm) · weight bytes per param / 2
    max_model_parallel: float  # ICI limit when compute-bound: M · F / α
    max_model_parallel_memory_bound: float  # when weight loading dominates: F / (B · β), β = W_hbm / W_ici
    prefill_tokens: int
    prefill_mfu: float
    prefill_s: float  # 2 · matmul params · tokens / (N · C · MFU) (the book's)
    prefill_with_attention_s: float  # plus causal dot-product attention over the prompt
    explain: tuple[str, ...]

    def to_dict(self) -> dict:
        return {**asdict(self), "explain": list(self.explain)}


def _min_topology(c: Chip, needed_bytes: float) -> tuple[int, str]:
    hbm = float(c.hbm_bytes or 0.0)
    if not hbm:
        raise RooflensError(f"chip {c.name} has no HBM size in the catalogue; a decode plan needs one.")
    need = max(1, math.ceil(needed_bytes / hbm - 1e-9))
    for s in c.slices:
        if math.prod(s) >= need:
            return math.prod(s), "x".join(str(d) for d in s)
    n = 1 << (need - 1).bit_length()  # powers of two (applied-inference.md's min_topology: 2 ** ceil(log2))
    return n, f"{n} chips"


def decode(model: Transformer | str, chip: str | Chip, chips: int, batch: int, context: int,
           kv_dtype: str = "bf16", param_dtype: str = "bf16", flops_dtype: str = "bf16",
           prefill_tokens: int | None = None, prefill_mfu: float = DEFAULT_PREFILL_MFU) -> DecodePlan:
    """One generate step of ``batch`` sequences with ``context`` tokens of KV cache each, over ``chips`` chips
    (weights and KV caches fully sharded), and the prefill of a ``prefill_tokens`` prompt (default: ``context``)."""
    from rooflens.plan.presets import model as preset

    m = preset(model) if isinstance(model, str) else model
    c = get_chip(chip) if isinstance(chip, str) else chip
    for what, v in (("chips", chips), ("batch", batch), ("context", context)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise RooflensError(f"{what} must be a positive integer, not {v!r}.")
    if not 0 < prefill_mfu <= 1:
        raise RooflensError(f"prefill_mfu must be in (0, 1], not {prefill_mfu!r}.")
    peak = peak_of(c, flops_dtype)
    hbm_bw = float(c.hbm_bytes_per_s or 0.0)
    if not hbm_bw:
        raise RooflensError(f"chip {c.name} has no HBM bandwidth in the catalogue.")
    pb, kb = dtype_bytes(param_dtype), m.kv_bytes_per_token(kv_dtype)
    param_bytes = m.params.total * pb
    weight_bytes = m.matmul_params * pb
    kv = batch * context * kb
    t_kv = kv / (chips * hbm_bw)
    t_w = weight_bytes / (chips * hbm_bw)
    t_f = 2 * batch * m.matmul_params / (chips * peak)
    step = t_kv + max(t_f, t_w)
    hbm = float(c.hbm_bytes or 0.0)
    min_chips, topo = _min_topology(c, param_bytes + kv)
    max_batch = max(0, int((chips * hbm - param_bytes) // (context * kb)))
    inner, _ = levels(c, chips)
    alpha, beta = peak / inner.bytes_per_s, hbm_bw / inner.bytes_per_s
    crit = peak / hbm_bw * pb / 2
    prompt = prefill_tokens or context
    pre = 2 * m.matmul_params * prompt / (chips * peak * prefill_mfu)
    # causal attention over the prompt: on average half of 4·T·N·H per token and layer
    pre_attn = pre + m.attention_flops_per_token(prompt, training=False) / 2 * prompt / (chips * peak * prefill_mfu)
    explain = (
        f"KV cache: 2·L·K·H·bytes = 2·{m.layers}·{m.kv_heads}·{m.head_dim}·{dtype_bytes(kv_dtype):g} = {kb:,.0f} B per "
        f"token; × {batch} × {context} = {fmt_g(kv)} B (inference.md, 'What about memory?')",
        f"weights: {fmt_g(param_bytes)} B held ({m.params.total:,} params × {pb:g} B), {fmt_g(weight_bytes)} B "
        "streamed "
        "per step (all but the input embedding, a gather)",
        f"step = B·KV/(N·W_hbm) + max(2·B·P/(N·C), P_bytes/(N·W_hbm)) = {fmt_g(t_kv)} + "
        f"max({fmt_g(t_f)}, {fmt_g(t_w)}) = "
        f"{fmt_g(step)} s (inference.md, 'Theoretical estimates for LLM latency and throughput')",
        f"throughput = B/step = {batch / step:,.1f} tokens/s, {batch / step / chips:,.1f} per chip",
        f"MLP compute-bound above B = (C/W_hbm)·(weight bytes/2) = {crit:.0f} (applied-inference.md, 'Thinking "
        "about throughput')",
        f"memory: {fmt_g((param_bytes + kv) / chips)} B per chip of {fmt_g(hbm)}; needs {min_chips} chips ({topo}); "
        f"at most {max_batch} sequences of {context} fit on {chips} (applied-inference.md)",
        f"model parallelism: ICI-bound beyond Y = M·F/α = {inner.axes}·{m.d_ff}/{alpha:.0f} = "
        f"{inner.axes * m.d_ff / alpha:.1f} when compute-bound, F/(B·β) = {m.d_ff / (batch * beta):.1f} when "
        f"weight-loading-bound (inference.md, 'Generation')",
        f"prefill of {prompt} tokens at MFU {prefill_mfu:g}: 2·P·T/(N·C·MFU) = {fmt_g(pre)} s "
        f"({fmt_g(pre_attn)} s with causal attention; applied-inference.md, 'What about prefill?')",
    )
    return DecodePlan(
        m.name, c.name, chips, batch, context, param_dtype, kv_dtype, peak, hbm_bw, param_bytes, weight_bytes, kv,
        (param_bytes + kv) / chips, (param_bytes + kv) / chips <= hbm, max_batch, min_chips, topo, t_kv, t_w, t_f,
        step, batch / step, batch / step / chips, "compute" if t_f > t_w else "memory", crit,
        inner.axes * m.d_ff / alpha, m.d_ff / (batch * beta), prompt, prefill_mfu, pre, pre_attn, explain)
