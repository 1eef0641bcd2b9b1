"""A training run planned from first principles: the scaling book's training chapter on a catalogue chip.

Sections cited: training.md ("How to Parallelize a Transformer for Training": 'Data Parallelism', 'Fully-Sharded
Data Parallelism (FSDP)', 'Tensor Parallelism', 'Mixed FSDP and Tensor Parallelism', 'Scaling Between Pods'),
applied-training.md ("Training LLaMA 3 on TPUs") and transformers.md. C is the chip's peak FLOP/s in the compute
dtype, W the network bandwidth as ``rooflens.plan.network`` takes it, α = C / W_ici.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from rooflens.errors import RooflensError
from rooflens.hardware import Chip
from rooflens.hardware import chip as get_chip
from rooflens.plan.model import Transformer, dtype_bytes
from rooflens.plan.network import Level, bandwidth_for, divisors, levels, parse_topology
from rooflens.units import fmt_g

STRATEGIES = ("dp", "fsdp", "tp", "fsdp+tp")
#: Megatron blocks per layer that gather their input and scatter their output: attention and the MLP
TP_BLOCKS_PER_LAYER = 2
SECONDS_PER_DAY = 86400.0


@dataclass(frozen=True)
class StrategyPlan:
    """One sharding of the step over the chips of one pod (replicated over DCN beyond it)."""

    name: str  # dp | fsdp | tp | fsdp+tp
    data: int  # X: batch (and, for FSDP, weight) shards
    model: int  # Y: tensor-parallel shards
    axes_data: int  # M_X
    axes_model: int  # M_Y
    memory_per_chip_bytes: float
    fits: bool
    batch_per_chip: float
    critical_batch_per_chip: float | None  # below it the step is communication-bound (None: TP, batch-free)
    compute_bound: bool  # by the book's criterion (batch per chip above the critical batch; TP: Y ≤ M·F/α)
    t_math_per_layer_s: float  # forward + backward
    t_comm_per_layer_s: float
    t_math_s: float  # the whole step
    t_comm_s: float
    step_time_s: float  # roofline: each pass max(math, comm), communication overlapped
    t_comm_exposed_s: float  # what of the communication the roofline step cannot hide behind math
    explain: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {**asdict(self), "explain": list(self.explain)}


@dataclass(frozen=True)
class TrainPlan:
    model: str
    chip: str
    chips: int
    batch_tokens: float
    seq_len: int | None
    peak_flops_per_s: float
    flops_per_token: float
    step_flops: float
    mfu: float | None
    step_time_s: float  # at ``mfu`` when given, else the best strategy's roofline
    step_time_roofline_s: float
    state_bytes: float  # weights + optimizer (+ grads, master) for the whole model
    state_recipe: str  # what state_bytes counts per parameter (rl.memory.estimate's recipe)
    activation_bytes: float  # checkpoints of one step, whole batch
    min_chips_memory: int  # chips whose HBM holds state + activations at all
    levels: tuple[Level, ...]
    pods: int
    strategies: tuple[StrategyPlan, ...]
    best: str
    critical_batch_per_chip_one_axis: float  # α = C / W_ici
    critical_batch_per_chip: float  # DP / FSDP over every axis: α / M
    critical_batch_per_chip_fsdp_tp: float  # 4α² / (M_X M_Y F)
    critical_batch_per_pod_dcn: float | None  # C / W_dcn, per pod
    max_model_parallel: float  # M · F / α
    x_opt: float  # FSDP ways minimising FSDP+TP comms
    y_opt: float
    tokens: float | None
    run_time_s: float | None
    days: float | None
    explain: tuple[str, ...]

    def strategy(self, name: str) -> StrategyPlan:
        for s in self.strategies:
            if s.name == name:
                return s
        raise KeyError(name)

    @property
    def memory_per_chip_bytes(self) -> float:
        return self.strategy(self.best).memory_per_chip_bytes

    def to_dict(self) -> dict:
        d = asdict(self)
        d["levels"] = [lv.to_dict() for lv in self.levels]
        d["strategies"] = [s.to_dict() for s in self.strategies]
        d["explain"] = list(self.explain)
        d["memory_per_chip_bytes"] = self.memory_per_chip_bytes
        return d


def peak_flops(chip: Chip, dtype: str) -> float:
    """The chip's published peak FLOP/s for a compute dtype (bf16, fp8, int8, …); one sentence when absent."""
    key = {"bfloat16": "bf16", "float16": "fp16", "f16": "fp16", "f32": "fp32", "float32": "fp32",
           "s8": "int8"}.get(dtype, dtype)
    peak = chip.peak_flops_per_s.get(key)
    if not peak:
        raise RooflensError(f"chip {chip.name} has no published {dtype} peak (it has "
                            f"{', '.join(sorted(chip.peak_flops_per_s)) or 'none'}).")
    return float(peak)


@dataclass(frozen=True)
class _Setup:
    """What every strategy shares (one pod's share of the step)."""

    m: Transformer
    chip: Chip
    inner: Level
    outer: Level
    n: int  # chips in one pod (the strategies' domain)
    batch: float  # tokens per pod per step
    c: float
    math_fwd_layer_s: float  # one layer's forward matmuls over the pod
    unembed_s: float  # the unembedding matmul, forward + backward
    weight_bytes_layer: float
    act_bytes: float  # bytes per activation element
    state_bytes: float
    activation_bytes: float  # whole batch, all pods
    chips: int
    hbm_bytes: float


def _pass_time(math_s: float, comm_s: float) -> float:
    return max(math_s, comm_s)


def _strategy(s: _Setup, name: str, x: int, y: int, mx: int, my: int) -> StrategyPlan:
    """Per-layer forward/backward communication of one strategy (training.md's algorithms), priced on W."""
    wx, ax, lx = bandwidth_for(x, s.inner, s.outer, s.chip)
    wy, ay, ly = bandwidth_for(y, s.inner, s.outer, s.chip)
    mx, my = (min(mx, ax) if lx == s.inner.name else 1), (min(my, ay) if ly == s.inner.name else 1)
    wb = s.weight_bytes_layer
    fwd = bwd = 0.0
    lines = []
    if name == "dp":
        bwd = 2 * wb / (wx * mx)
        lines.append(f"DP: gradients all-reduced in the backward pass, 2·W_bytes/(W·M) = "
                     f"2·{fmt_g(wb)}/({fmt_g(wx)}·{mx}) "
                     f"= {fmt_g(bwd)} s per layer (training.md, 'Data Parallelism')")
    if name in ("fsdp", "fsdp+tp"):
        fwd += wb / (y * wx * mx)
        bwd += 2 * wb / (y * wx * mx)
        lines.append(f"FSDP: weights all-gathered forward, all-gathered and reduce-scattered backward: "
                     f"W_bytes/(Y·W·M_X) = {fmt_g(wb)}/({y}·{fmt_g(wx)}·{mx}) = {fmt_g(wb / (y * wx * mx))} s "
                     "per gather "
                     "(training.md, 'Fully-Sharded Data Parallelism')")
    if name in ("tp", "fsdp+tp"):
        tp = TP_BLOCKS_PER_LAYER * 2 * (s.batch / x) * s.m.d_model * s.act_bytes / (wy * my)
        fwd += tp
        bwd += tp
        lines.append(f"TP: each of {TP_BLOCKS_PER_LAYER} blocks all-gathers In[B/X, D] and reduce-scatters its output "
                     f"each pass: {TP_BLOCKS_PER_LAYER}·2·(B/X)·D·bytes/(W·M_Y) = {fmt_g(tp)} s per layer "
                     "(training.md, 'Tensor Parallelism')")
    mf = s.math_fwd_layer_s
    layers = s.m.layers
    math_layer, comm_layer = 3 * mf, fwd + bwd
    step = layers * (_pass_time(mf, fwd) + _pass_time(2 * mf, bwd)) + s.unembed_s
    state = s.state_bytes if name == "dp" else s.state_bytes / s.n
    mem = state + s.activation_bytes / s.chips
    batch_per_chip = s.batch / s.n
    alpha = s.c / s.inner.bytes_per_s
    if name in ("dp", "fsdp"):
        crit = s.c / (wx * mx)
    elif name == "fsdp+tp":
        crit = 4 * alpha ** 2 / (max(mx * my, 1) * s.m.d_ff)
    else:
        crit = None
    if crit is not None:
        bound = batch_per_chip >= crit
    else:
        bound = y <= my * s.m.d_ff / alpha
    t_math = layers * math_layer + s.unembed_s
    return StrategyPlan(name, x, y, mx, my, mem, mem <= s.hbm_bytes, batch_per_chip, crit, bound, math_layer,
                        comm_layer, t_math, layers * comm_layer, step, step - t_math, tuple(lines))


def _best_split(s: _Setup, mx: int, my: int) -> tuple[int, int]:
    """The (X, Y) with X·Y = N that minimises FSDP + TP communication per layer (X a divisor of N)."""
    best = None
    for x in divisors(s.n):
        y = s.n // x
        if y == 1 or x == 1:
            continue
        st = _strategy(s, "fsdp+tp", x, y, mx, my)
        if best is None or st.t_comm_per_layer_s < best[0]:
            best = (st.t_comm_per_layer_s, x, y)
    return (best[1], best[2]) if best else (s.n, 1)


def train(model: Transformer, chip: str | Chip, chips: int, batch_tokens: float, strategy: str | None = None,
          mfu: float | None = None, tokens: float | None = None, topology: str | tuple | None = None,
          seq_len: int | None = None, checkpoints_per_layer: int | str = 1, dtype: str = "bf16",
          optimizer: str = "adam", param_dtype: str = "bf16", grad_dtype: str | None = None,
          master_dtype: str | None = None) -> TrainPlan:
    """Plan one training step of ``model`` on ``chips`` chips with ``batch_tokens`` tokens per step.

    ``mfu`` prices the step at that fraction of peak (the book's 'step time at 40% MFU'); without it the step
    is the best fitting strategy's roofline. ``tokens`` gives the whole run's duration. ``strategy`` picks which
    one the plan's memory and roofline step come from (default: the fastest that fits). ``seq_len`` adds the
    attention FLOPs of that context; ``checkpoints_per_layer`` follows ``Transformer.activation_bytes``.
    """
    from rooflens.plan.presets import model as preset

    m = preset(model) if isinstance(model, str) else model
    c = get_chip(chip) if isinstance(chip, str) else chip
    _check_args(chips, batch_tokens, mfu, tokens, strategy)
    peak = peak_flops(c, dtype)
    inner, outer = levels(c, chips, parse_topology(topology))
    pods = max(1, math.ceil(chips / inner.devices)) if c.kind == "tpu" else 1
    if chips % pods:
        raise RooflensError(f"{chips} chips do not split evenly into {pods} pods of at most {inner.devices}.")
    n = chips // pods
    fpt = m.flops_per_token(True, seq_len)
    step_flops = fpt * batch_tokens
    act = m.activation_bytes(batch_tokens, checkpoints_per_layer, dtype)
    est = m.state(optimizer, param_dtype, grad_dtype, master_dtype)
    state, recipe = est.total_bytes, est.recipe
    if not est.gradients_bytes or not est.master_bytes:  # say what the other usual recipe would count
        full = m.state(optimizer, param_dtype, grad_dtype or param_dtype, master_dtype or "f32")
        recipe += (f"; with {'gradients' if not est.gradients_bytes else ''}"
                   f"{' and ' if not est.gradients_bytes and not est.master_bytes else ''}"
                   f"{'an f32 master copy' if not est.master_bytes else ''} too (`rooflens memory --estimate`'s "
                   f"default) it is {full.bytes_per_param:.3g} B/parameter")
    hbm = float(c.hbm_bytes or 0.0)
    pod_batch = batch_tokens / pods
    attn_fwd_layer = (m.attention_flops_per_token(seq_len, False) / m.layers) if seq_len else 0.0
    math_fwd_layer = pod_batch * (2 * m.layer_matmul_params + attn_fwd_layer) / (n * peak)
    setup = _Setup(m, c, inner, outer, n, pod_batch, peak, math_fwd_layer,
                   6 * pod_batch * m.vocab * m.d_model / (n * peak), m.layer_matmul_params * dtype_bytes(param_dtype),
                   dtype_bytes(dtype), state, act, chips, hbm)
    axes = inner.axes
    mx, my = (axes - 1, 1) if axes >= 2 else (1, 1)
    x_opt = math.sqrt(pod_batch / m.d_ff * mx / my * n)
    x, y = _best_split(setup, mx, my)
    plans = (_strategy(setup, "dp", n, 1, axes, 1), _strategy(setup, "fsdp", n, 1, axes, 1),
             _strategy(setup, "tp", 1, n, 1, axes), _strategy(setup, "fsdp+tp", x, y, mx, my))
    fitting = [p for p in plans if p.fits] or list(plans)
    best = strategy or min(fitting, key=lambda p: p.step_time_s).name
    chosen = next(p for p in plans if p.name == best)
    alpha = peak / inner.bytes_per_s
    dcn = peak / outer.bytes_per_s if outer.bytes_per_s and c.kind == "tpu" else None
    step_mfu = step_flops / (chips * peak * mfu) if mfu else None
    step = step_mfu if step_mfu is not None else chosen.step_time_s
    run_s = tokens / batch_tokens * step if tokens else None
    total_mem = state + act
    plan = TrainPlan(
        m.name, c.name, chips, float(batch_tokens), seq_len, peak, fpt, step_flops, mfu, step, chosen.step_time_s,
        state, recipe, act, max(1, math.ceil(total_mem / hbm)) if hbm else 0, (inner, outer), pods, plans, best,
        alpha, alpha / axes, 4 * alpha ** 2 / (mx * my * m.d_ff), dcn, axes * m.d_ff / alpha, x_opt, n / x_opt,
        tokens, run_s, run_s / SECONDS_PER_DAY if run_s is not None else None, ())
    return _with_explain(plan, m, setup, mx, my)


def _check_args(chips, batch_tokens, mfu, tokens, strategy) -> None:
    if not isinstance(chips, int) or isinstance(chips, bool) or chips < 1:
        raise RooflensError(f"chips must be a positive integer, not {chips!r}.")
    if not (isinstance(batch_tokens, int | float) and math.isfinite(batch_tokens) and batch_tokens > 0):
        raise RooflensError(f"batch_tokens must be a positive number, not {batch_tokens!r}.")
    if mfu is not None and not 0 < mfu <= 1:
        raise RooflensError(f"mfu must be in (0, 1], not {mfu!r}.")
    if tokens is not None and not (math.isfinite(tokens) and tokens > 0):
        raise RooflensError(f"tokens must be a positive number, not {tokens!r}.")
    if strategy is not None and strategy not in STRATEGIES:
        raise RooflensError(f"unknown strategy {strategy!r} (one of {', '.join(STRATEGIES)}).")


def _with_explain(p: TrainPlan, m: Transformer, s: _Setup, mx: int, my: int) -> TrainPlan:
    from dataclasses import replace

    inner, outer = p.levels
    lines = [
        f"FLOPs/token = 6 × {m.matmul_params:,} matmul params"
        + (f" + 12·T·N·H·L attention (T={p.seq_len})" if p.seq_len else " (attention left out: give seq_len)")
        + f" = {fmt_g(p.flops_per_token)} (transformers.md, 'Forward and reverse FLOPs', 'Attention')",
        f"step FLOPs = {fmt_g(p.flops_per_token)} × {fmt_g(p.batch_tokens)} tokens = {fmt_g(p.step_flops)}",
        f"C = {fmt_g(p.peak_flops_per_s)} FLOP/s per chip; {inner.name} W = {fmt_g(inner.bytes_per_s)} B/s over "
        f"{inner.axes} {'axis' if inner.axes == 1 else 'axes'} ({inner.source})",
        f"α = C/W = {p.critical_batch_per_chip_one_axis:.1f}: DP/FSDP compute-bound when B/X > α/M = "
        f"{p.critical_batch_per_chip:.1f} tokens per chip (training.md, 'Data Parallelism', 'FSDP' takeaways)",
        f"TP comms-bound beyond Y = M·F/α = {inner.axes}·{m.d_ff}/{p.critical_batch_per_chip_one_axis:.0f} = "
        f"{p.max_model_parallel:.1f} ways (training.md, 'Tensor Parallelism' takeaway)",
        f"FSDP+TP: B/N > 4α²/(M_X·M_Y·F) = {p.critical_batch_per_chip_fsdp_tp:.1f} (M_X={mx}, M_Y={my}); "
        f"X_opt = √(B/F · M_X/M_Y · N) = √({fmt_g(s.batch)}/{m.d_ff} · {mx}/{my} · {s.n}) = {p.x_opt:.1f}, "
        f"Y_opt = N/X_opt = {p.y_opt:.2f} (training.md, 'Mixed FSDP and Tensor Parallelism')",
        f"memory: state {fmt_g(p.state_bytes)} B ({m.params.total:,} params × {p.state_recipe}) "
        f"+ activations {fmt_g(p.activation_bytes)} B = {fmt_g(p.state_bytes + p.activation_bytes)} B; at least "
        f"{p.min_chips_memory} chips of {fmt_g(s.hbm_bytes)} B (applied-training.md, 'Counting parameters and FLOPs')",
    ]
    if p.critical_batch_per_pod_dcn is not None:
        lines.append(f"DCN: pure data parallelism between pods needs a per-pod batch > C/W_dcn = "
                     f"{p.critical_batch_per_pod_dcn:,.0f} tokens ({p.pods} pod{'s' if p.pods != 1 else ''}, "
                     f"{s.batch:,.0f} tokens each; "
                     "training.md, 'Scaling Between Pods')")
    elif outer.bytes_per_s:
        lines.append(f"{outer.name}: beyond {inner.devices} chips collectives run at {fmt_g(outer.bytes_per_s)} B/s "
                     f"per chip: data parallel compute-bound when B/X > C/W = "
                     f"{p.peak_flops_per_s / outer.bytes_per_s:,.0f}")
    if p.mfu:
        lines.append(f"step at MFU {p.mfu:g}: {fmt_g(p.step_flops)} / ({p.chips} × {fmt_g(p.peak_flops_per_s)} × "
                     f"{p.mfu:g}) = {fmt_g(p.step_time_s)} s (applied-training.md, 'Counting parameters and FLOPs')")
    lines.append(f"roofline step ({p.best}): {fmt_g(p.step_time_roofline_s)} s")
    if p.run_time_s is not None:
        lines.append(f"run: {fmt_g(p.tokens)} tokens / {fmt_g(p.batch_tokens)} per step × {fmt_g(p.step_time_s)} s = "
                     f"{fmt_g(p.run_time_s)} s = {p.days:.1f} days")
    return replace(p, explain=tuple(lines))
