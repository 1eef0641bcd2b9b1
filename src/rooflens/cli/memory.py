"""``rooflens memory``: where the bytes go (a run, an XLA dump, or the model-state estimate)."""

from __future__ import annotations

from pathlib import Path

import click

from rooflens.cli.common import MAX_PARAMS, FiniteFloat, UserError, emit
from rooflens.errors import existing


@click.command()
@click.argument("path", required=False, metavar="[LOGDIR|DUMP_DIR]")
@click.option("--estimate", "do_estimate", is_flag=True, help="Estimate the model state instead of reading a run.")
@click.option("--params", type=FiniteFloat(min=0, max=MAX_PARAMS, min_open=True), metavar="N",
              help="Parameter count for --estimate, e.g. 7e9.")
@click.option("--optimizer", default="adam", show_default=True, help="sgd, momentum, adam, adamw, lion, …")
@click.option("--param-dtype", default="bf16", show_default=True)
@click.option("--grad-dtype", default="bf16", show_default=True)
@click.option("--master-dtype", default="f32", show_default=True, help="'none' to train in the parameter dtype.")
@click.option("--shards", default=1, show_default=True, type=click.IntRange(min=1),
              help="Devices the state is split over (FSDP/ZeRO-3).")
@click.option("--chip", "chip_names", multiple=True, help="Check the fit on these chips (default: all).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def memory(path: str | None, do_estimate: bool, params: float | None, optimizer: str, param_dtype: str,
           grad_dtype: str, master_dtype: str, shards: int, chip_names: tuple[str, ...], as_json: bool) -> None:
    """Where the bytes go: a run's compiled peak and peak buffers, live snapshots; or the model-state estimate.

    rooflens memory LOGDIR · rooflens memory XLA_DUMP_DIR · rooflens memory --estimate --params 7e9 --chip h100-sxm
    """
    from rooflens import hardware as C
    from rooflens.report.memory_view import render_estimate, render_memory

    if do_estimate:
        from rooflens.memory import estimate

        if not params:
            raise UserError("--estimate needs --params N (a parameter count, e.g. 7e9).")
        for name in chip_names:
            C.chip(name)
        est = estimate(params, optimizer=optimizer, param_dtype=param_dtype, grad_dtype=grad_dtype,
                       master_dtype=None if master_dtype.lower() == "none" else master_dtype, shards=shards,
                       chips=chip_names or None)
        emit(est.to_dict, as_json, lambda c: render_estimate(c, est))
        return
    if not path:
        raise UserError("give a logdir (captured by rooflens), an XLA dump directory, or --estimate --params N.")
    p = Path(path)
    existing(path)
    if not p.is_dir() and not p.is_file():
        raise UserError(f"{path} is not a regular file (a device or a pipe); give a logdir or an XLA dump directory.")
    if p.is_dir() and list(p.glob("*buffer-assignment.txt")):
        from rooflens.memory import read_dump_memory

        mem = read_dump_memory(p)
    else:
        from rooflens.memory import read_run_memory
        from rooflens.trace import load

        mem = read_run_memory(load(path))
        if mem is None:
            raise UserError(f"{path} has no memory data: capture it with rl.capture (which saves XLA's buffer "
                            "assignment and device memory snapshots), or give an XLA dump directory.")
    emit(mem.to_dict, as_json, lambda c: render_memory(c, mem, source=path))
