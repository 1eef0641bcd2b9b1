"""``rooflens check``: a run against performance budgets, for CI (exit 1 names every violated one)."""

from __future__ import annotations

import sys

import click

from rooflens.cli.common import emit, load_report


@click.command()
@click.argument("logdir", metavar="LOGDIR|RUN_DIR|TRACE_FILE")
@click.option("--budget", "budget_path", required=True, metavar="FILE",
              help="The budgets (TOML): max_recompiles, max_idle_fraction, min_mfu, max_step_time_s, "
                   'max_recoverable_share, [max_ratio], [max_share], [max_recoverable_s], [program."NAME"].')
@click.option("--chip", "chip_name", help="Compare with this chip's roofline (default: inferred from the trace).")
@click.option("--json", "as_json", is_flag=True, help="Print every budget and its measured value as JSON.")
@click.option("--no-calibrate", is_flag=True, help="On a CPU trace with no calibration yet, do not measure this "
                                                  "machine (min_mfu and max_ratio then cannot be met).")
def check(logdir: str, budget_path: str, chip_name: str | None, as_json: bool, no_calibrate: bool) -> None:
    """Check a run against performance budgets (for CI): prints every budget with its measured value
    and exits 1 naming every violated one (2 for a budget file that cannot be used)."""
    from rooflens.analysis.budget import evaluate
    from rooflens.api import load_budget

    budget = load_budget(budget_path)  # a bad budget file fails before the trace is read
    rep = load_report(logdir, chip_name=chip_name, no_calibrate=no_calibrate)
    result = evaluate(rep, budget)
    from rooflens.report.diff_view import render_check

    emit(result.to_json, as_json, lambda c: render_check(c, result, source=logdir))
    if not result.ok:
        click.echo(f"rooflens: {result.message()}", err=True)
        sys.exit(1)
