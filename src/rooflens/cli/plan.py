"""``rooflens plan``: the scaling book's model-level arithmetic for a training run or a decode step."""

from __future__ import annotations

import math

import click

from rooflens.cli.common import emit
from rooflens.errors import RooflensError


def _positive(value: float | None, option: str) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise RooflensError(f"{option} must be a positive number, not {value!r}.")


@click.command()
@click.option("--model", "model_name", metavar="NAME", help="A preset (llama2-7b/13b/70b, llama3-8b/70b/405b, "
              "mistral-7b, mixtral-8x7b, rooflens-demo).")
@click.option("--config", "config_path", metavar="FILE.toml", help="A custom Transformer: its field names "
              "(layers, d_model, d_ff, heads, kv_heads, head_dim, vocab, gated_mlp, …) in TOML.")
@click.option("--chip", "chip_name", help="A catalogue chip (see `rooflens chips`).")
@click.option("--chips", type=click.IntRange(min=1), help="How many chips.")
@click.option("--batch-tokens", type=float, metavar="N", help="Tokens per training step, e.g. 3e6.")
@click.option("--mfu", type=float, help="Price the step at this fraction of peak FLOP/s (e.g. 0.4).")
@click.option("--tokens", type=float, metavar="N", help="Tokens of the whole run, e.g. 15e12: its duration.")
@click.option("--topology", metavar="SHAPE", help="TPU slice shape, e.g. 16x16x16 (default: the published one).")
@click.option("--seq-len", type=click.IntRange(min=1), help="Add the attention FLOPs of this context.")
@click.option("--checkpoints", default="1", show_default=True, metavar="K|POLICY",
              help="Activation checkpoints per layer: a count, or block, ffw, matmuls, none.")
@click.option("--decode", "do_decode", is_flag=True, help="Plan a decode step instead of a training step.")
@click.option("--batch", type=click.IntRange(min=1), help="Decode: sequences per step.")
@click.option("--context", type=click.IntRange(min=1), help="Decode: KV cache length per sequence.")
@click.option("--kv-dtype", default="bf16", show_default=True, help="Decode: KV cache dtype (bf16, int8, int4, …).")
@click.option("--param-dtype", default="bf16", show_default=True, help="Weight dtype.")
@click.option("--optimizer", default="adam", show_default=True, help="Training: the optimizer whose moments count.")
@click.option("--grad-dtype", default="none", show_default=True,
              help="Training: count gradients in this dtype ('none': the book's recipe, gradients not counted).")
@click.option("--master-dtype", default="none", show_default=True,
              help="Training: count a master copy of the weights in this dtype, e.g. f32 ('none': not counted).")
@click.option("--explain", is_flag=True, help="Show every formula with its numbers and the book's section.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
def plan(model_name, config_path, chip_name, chips, batch_tokens, mfu, tokens, topology, seq_len, checkpoints,
         do_decode, batch, context, kv_dtype, param_dtype, optimizer, grad_dtype, master_dtype, explain,
         as_json) -> None:
    """A model's parameters, memory, sharding, step time and run time, or its decode step, from first principles.

    rooflens plan --model llama2-13b --chip tpu-v5p --chips 4096 --batch-tokens 3e6 --mfu 0.4 --tokens 15e12
    rooflens plan --model llama3-70b --chip tpu-v5e --chips 8 --decode --batch 32 --context 8192 --kv-dtype int8
    """
    from rooflens.report import plan_view

    m, result = make_plan(model_name, config_path, chip_name, chips, batch_tokens, mfu, tokens, topology, seq_len,
                          checkpoints, do_decode, batch, context, kv_dtype, param_dtype, optimizer, grad_dtype,
                          master_dtype)

    def render(con) -> None:
        plan_view.render_model(con, m)
        (plan_view.render_decode if do_decode else plan_view.render_train)(con, result, explain)

    emit(lambda: plan_doc(m, result, do_decode), as_json, render)


def plan_doc(m, result, do_decode: bool) -> dict:
    """The JSON ``rooflens plan --json`` prints (and the MCP tool returns)."""
    return {"model": m.to_dict(), ("decode" if do_decode else "train"): result.to_dict()}


def make_plan(model_name=None, config_path=None, chip_name=None, chips=None, batch_tokens=None, mfu=None,
              tokens=None, topology=None, seq_len=None, checkpoints="1", do_decode=False, batch=None, context=None,
              kv_dtype="bf16", param_dtype="bf16", optimizer="adam", grad_dtype="none", master_dtype="none"):
    """The model and its training plan (or decode step) that ``rooflens plan`` shows, from its options."""
    from rooflens import plan as P

    if bool(model_name) == bool(config_path):
        raise RooflensError("give one of --model NAME or --config FILE.toml.")
    m = P.model(model_name) if model_name else P.load_config(config_path)
    if not chip_name or not chips:
        raise RooflensError("give --chip and --chips (the chips to plan on).")
    ckpt = int(checkpoints) if str(checkpoints).isdigit() else checkpoints
    if do_decode:
        if not batch or not context:
            raise RooflensError("--decode needs --batch and --context.")
        return m, P.decode(m, chip_name, chips, batch, context, kv_dtype=kv_dtype, param_dtype=param_dtype)
    if not batch_tokens:
        raise RooflensError("a training plan needs --batch-tokens N (tokens per step), or give --decode.")
    for value, option in ((batch_tokens, "--batch-tokens"), (tokens, "--tokens"), (mfu, "--mfu")):
        _positive(value, option)
    return m, P.train(m, chip_name, chips, batch_tokens, mfu=mfu, tokens=tokens, topology=topology, seq_len=seq_len,
                      checkpoints_per_layer=ckpt, param_dtype=param_dtype, optimizer=optimizer,
                      grad_dtype=None if str(grad_dtype).lower() == "none" else grad_dtype,
                      master_dtype=None if str(master_dtype).lower() == "none" else master_dtype)
