"""Terminal views of a plan: a model's counts, a training plan's strategies, a decode step, a plan check."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from rooflens.report.text import e
from rooflens.units import (
    fmt_bytes,
    fmt_count,
    fmt_flops,
    fmt_number,
    fmt_percent,
    fmt_ratio,
    fmt_seconds,
    fmt_si,
    plural,
)


def render_model(console: Console, m) -> None:
    p = m.params
    console.print(f"[bold]{e(m.name)}[/bold]: {p.total:,} parameters (ffw {p.ffw:,}, attention {p.attention:,}, "
                  f"vocab {p.vocab:,}, norms {p.norms:,}" + (f", router {p.router:,}" if p.router else "")
                  + (f"; {p.active:,} active per token" if p.active != p.total else "") + ")")
    console.print(f"  L={m.layers} D={m.d_model} F={m.d_ff} N={m.heads} K={m.kv_heads} H={m.head_dim} V={m.vocab}"
                  f"{' gated' if m.gated_mlp else ''}{' tied' if m.tied_embeddings else ''}"
                  + (f" experts={m.experts}/{m.active_experts}" if m.experts > 1 else ""))
    if m.source:
        console.print(f"  source: {e(m.source)}")


def render_train(console: Console, plan, explain: bool = False) -> None:
    console.print(f"[bold]Training plan[/bold]: {e(plan.model)} on {plan.chips} × {e(plan.chip)}, "
                  f"{plan.batch_tokens:,.0f} tokens per step ({plural(plan.pods, 'pod')})")
    t = Table(title_justify="left")
    for col in ("strategy", "X × Y", "memory/chip", "fits", "batch/chip", "critical", "compute-bound", "math",
                "comm", "roofline step"):
        t.add_column(col, justify="left" if col in ("strategy", "fits", "compute-bound") else "right")
    for s in plan.strategies:
        mark = " *" if s.name == plan.best else ""
        t.add_row(s.name + mark, f"{s.data} × {s.model}", fmt_bytes(s.memory_per_chip_bytes, 3),
                  "yes" if s.fits else "[red]no[/red]", f"{s.batch_per_chip:,.0f}",
                  "—" if s.critical_batch_per_chip is None else f"{s.critical_batch_per_chip:,.0f}",
                  "yes" if s.compute_bound else "[yellow]no[/yellow]", fmt_seconds(s.t_math_s),
                  fmt_seconds(s.t_comm_s), fmt_seconds(s.step_time_s))
    console.print(t)
    console.print(f"step: {fmt_seconds(plan.step_time_s)}" + (f" at MFU {plan.mfu:g}" if plan.mfu else " (roofline)")
                  + f"; {fmt_flops(plan.step_flops)} per step")
    tp = ("tensor parallelism does not pay here (Y_opt below 1 way)" if plan.y_opt < 1 else
          f"tensor parallelism pays up to {fmt_number(plan.max_model_parallel)} ways")
    console.print(f"best FSDP × TP split (training.md, 'Mixed FSDP and Tensor Parallelism'): "
                  f"X_opt = {fmt_number(plan.x_opt)} FSDP ways × Y_opt = {fmt_number(plan.y_opt)} tensor-parallel "
                  f"ways (X_opt · Y_opt = the chips of one pod); {tp}")
    console.print(f"state: {fmt_bytes(plan.state_bytes, 3)} = {e(plan.state_recipe)}")
    if plan.days is not None:
        console.print(f"run: {fmt_count(plan.tokens, 'tokens')} in {fmt_number(plan.days)} days")
    _explain(console, plan.explain if explain else ())


def render_decode(console: Console, d, explain: bool = False) -> None:
    console.print(f"[bold]Decode plan[/bold]: {e(d.model)} on {d.chips} × {e(d.chip)}, batch {d.batch}, context "
                  f"{d.context} (weights {e(d.param_dtype)}, KV {e(d.kv_dtype)})")
    t = Table(title_justify="left")
    for col in ("step", "tokens/s", "per chip", "KV load", "weights load", "FLOPs", "MLP bound", "memory/chip",
                "fits", "min topology", "prefill"):
        t.add_column(col, justify="left" if col in ("MLP bound", "fits", "min topology") else "right")
    t.add_row(fmt_seconds(d.step_time_s), f"{d.tokens_per_s:,.0f}", f"{d.tokens_per_s_per_chip:,.1f}",
              fmt_seconds(d.t_kv_s), fmt_seconds(d.t_weights_s), fmt_seconds(d.t_flops_s), d.bound,
              fmt_bytes(d.memory_per_chip_bytes, 3), "yes" if d.fits else "[red]no[/red]", d.min_topology,
              fmt_seconds(d.prefill_s))
    console.print(t)
    _explain(console, d.explain if explain else ())


def render_check(console: Console, c) -> None:
    """A PlanCheck: the plan of the model that ran, set against what was measured."""
    console.print(f"[bold]Plan vs measured[/bold] ({e(c.model)}, {c.batch_tokens:,.0f} tokens per step"
                  f"{' (inferred from the measured FLOPs)' if c.batch_inferred else ''})")
    t = Table(title_justify="left")
    for col in ("", "planned", "measured", "measured / planned"):
        t.add_column(col, justify="left" if not col else "right")
    for label, p, m, fmt in (("model FLOPs per step", c.planned_flops, c.measured_flops, lambda v: fmt_si(v, "FLOP")),
                             ("step time", c.planned_step_s, c.measured_step_s, fmt_seconds),
                             ("MFU of the plan's FLOPs", c.planned_mfu, c.measured_mfu, fmt_percent),
                             ("MFU of XLA's FLOPs (the report's)", None, c.report_mfu, fmt_percent),
                             ("memory per chip", c.planned_memory_per_chip_bytes, c.measured_memory_per_chip_bytes,
                              lambda v: fmt_bytes(v, 3))):
        t.add_row(label, "—" if p is None else fmt(p), "—" if m is None else fmt(m),
                  fmt_ratio(m / p) if p and m is not None else "—")
    console.print(t)
    for line in c.explain:
        console.print(f"  {e(line)}")


def _explain(console: Console, lines) -> None:
    for line in lines:
        console.print(f"  {e(line)}")
