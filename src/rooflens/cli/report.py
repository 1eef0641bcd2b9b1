"""``rooflens report``: what ran, against its roofline, with findings (terminal, JSON, HTML, Perfetto)."""

from __future__ import annotations

import os

import click

from rooflens.cli.common import (
    FiniteFloat,
    UserError,
    check_outputs,
    console,
    json_text,
    load_report,
    need_dir,
)
from rooflens.cli.output import written_whole


@click.command()
@click.argument("logdirs", nargs=-1, required=True, metavar="LOGDIR|RUN_DIR|TRACE_FILE...")
@click.option("--hlo", "hlo_dir", metavar="DIR", help="HLO text files of the programs (an XLA dump directory), for "
                                                       "traces captured without rooflens.")
@click.option("--chip", "chip_name", help="Compare with this chip's roofline (default: inferred from the trace; a "
                                          "CPU trace uses the calibrated 'local').")
@click.option("--workers", type=click.IntRange(min=1), metavar="N",
              help="Processes reading host files side by side (default: this machine's cores).")
@click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="Read the hosts on a local process pool, or as Ray tasks (pip install 'rooflens[ray]').")
@click.option("--ray-address", metavar="ADDR", help="An existing Ray cluster (default: a local one for this call).")
@click.option("--merge", type=click.Choice(["auto", "events", "aggregates"]), default="auto", show_default=True,
              help="Hold every host's op events here (exact), or have each worker send its host's aggregates "
                   "(memory flat in the hosts; medians within 1%, one sampled step's events): auto takes "
                   "aggregates for several hosts over 1 GiB of files.")
@click.option("--top", default=20, show_default=True, type=click.IntRange(min=0), help="How many ops to list.")
@click.option("--json", "as_json", is_flag=True, help="Print all the stats as JSON.")
@click.option("--html", "html_path", metavar="FILE", help="Also write the single-file HTML report here.")
@click.option("--out", "json_path", metavar="FILE",
              help="Write the JSON report (schema: docs/report-schema.md) here.")
@click.option("--perfetto", "perfetto_path", metavar="FILE",
              help="Write the device ops, with their rooflines, as a Chrome trace for ui.perfetto.dev (.json[.gz]).")
@click.option("--force", is_flag=True, help="Overwrite existing --html/--out/--perfetto files.")
@click.option("--include-warmup", is_flag=True, help="Keep each program's compilation and first run in the stats "
                                                    "(a `rooflens run` profile leaves them out).")
@click.option("--step-fn", metavar="NAME",
              help="The step program: a jitted function's or a program's name (train_step, jit_train_step, "
                   "jit_train_step(12)); default: chosen, and the notes say which and why.")
@click.option("--no-calibrate", is_flag=True, help="On a CPU trace with no calibration yet, do not measure this "
                                                  "machine (the report then has no roofline comparison).")
@click.option("--plan-model", metavar="NAME|FILE.toml", help="Set this model's plan (rooflens plan) against the run.")
@click.option("--plan-batch-tokens", type=FiniteFloat(min=0, min_open=True), metavar="N",
              help="Tokens per step for --plan-model (default: inferred from the measured model FLOPs).")
def report(logdirs: tuple[str, ...], hlo_dir: str | None, chip_name: str | None, workers: int | None, engine: str,
           ray_address: str | None, merge: str, top: int, as_json: bool, html_path: str | None, json_path: str | None,
           perfetto_path: str | None, force: bool, include_warmup: bool = False, no_calibrate: bool = False,
           plan_model: str | None = None, plan_batch_tokens: float | None = None, step_fn: str | None = None) -> None:
    """What ran, against its roofline: op stats, expected vs observed, the step, and findings.

    Reads TensorBoard/XProf logdirs, run directories, or *.xplane.pb / *.trace.json.gz files, from
    CPU, GPU or TPU, local or in a bucket (gs://, s3://): every host of the run, in one report. Also
    Nsight Systems: nsys-jax archives (*.zip), SQLite exports (`nsys export --type sqlite`: *.sqlite)
    and raw *.nsys-rep reports (exported through `nsys` when it is on PATH).
    """
    check_outputs(force, ("--html", html_path), ("--out", json_path), ("--perfetto", perfetto_path))
    if hlo_dir:
        need_dir(hlo_dir, "--hlo")
    rep = load_report(list(logdirs), hlo_dir, chip_name, include_warmup, no_calibrate,
                      workers=workers or os.cpu_count() or 1, engine=engine, ray_address=ray_address, merge=merge,
                      step_fn=step_fn)
    if os.environ.get("ROOFLENS_DEBUG"):  # a debugging session: say any number the report should not print
        from rooflens.analysis.invariants import violations

        for v in violations(rep):
            click.echo(f"rooflens: debug: impossible number: {v}", err=True)
    if plan_model:
        from rooflens.api import plan_check

        rep.plan = plan_check(rep, plan_model, plan_batch_tokens)
    if html_path:
        from rooflens.report.html import write_html

        with written_whole(html_path) as tmp:
            write_html(rep, tmp)
        click.echo(f"rooflens: wrote {html_path}", err=True)
    if perfetto_path:
        if rep.roofs is None:
            raise UserError(f"the Perfetto file carries roofline times and there is none: {rep.chip_reason}")
        from rooflens.report.perfetto import write_perfetto

        with written_whole(perfetto_path) as tmp:
            write_perfetto(rep, str(tmp))
        click.echo(f"rooflens: wrote {perfetto_path} (open it at ui.perfetto.dev)", err=True)
    if json_path:
        with written_whole(json_path) as tmp:
            tmp.write_text(json_text(rep.to_json()), encoding="utf-8")
        click.echo(f"rooflens: wrote {json_path}", err=True)
    if as_json:
        click.echo(json_text(rep.to_json()))
        return
    from rooflens.report.trace_view import render_op_stats, render_report  # rich: for the terminal only

    con = console()
    source = ", ".join(rep.sources)
    render_op_stats(con, rep, source=source, top=top)
    render_report(con, rep, source=source, top=top)
    if rep.plan is not None:
        from rooflens.report.plan_view import render_check

        render_check(con, rep.plan)
