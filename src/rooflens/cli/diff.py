"""``rooflens diff``: what changed from run A to run B."""

from __future__ import annotations

import click

from rooflens.cli.common import check_outputs, console, json_text, load_report
from rooflens.cli.output import written_whole


@click.command()
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@click.option("--chip", "chip_name", help="Compare both with this chip's roofline (default: each from its trace).")
@click.option("--chip-b", "chip_b", help="B's chip, when it differs from A's (a run on another chip).")
@click.option("--top", default=20, show_default=True, type=click.IntRange(min=0),
              help="How many matched ops to list.")
@click.option("--json", "as_json", is_flag=True, help="Print the diff as JSON.")
@click.option("--html", "html_path", metavar="FILE", help="Also write the diff as a single-file HTML page.")
@click.option("--force", is_flag=True, help="Overwrite an existing --html file.")
@click.option("--no-calibrate", is_flag=True, help="On a CPU trace with no calibration yet, do not measure this "
                                                  "machine (the diff then has no roofline columns).")
def diff(a: str, b: str, chip_name: str | None, chip_b: str | None, top: int, as_json: bool, html_path: str | None,
         force: bool, no_calibrate: bool) -> None:
    """What changed from run A to run B (two batch sizes, two chips, two commits): step time, MFU,
    time and share of the step per category and per op, and the ops that appeared or disappeared.

    A and B are logdirs, run directories or trace files, or reports saved with
    `rooflens report --out FILE.json` (those keep the chip they were priced on).
    """
    from rooflens.analysis.diff import diff as diff_reports
    from rooflens.api import saved_report

    check_outputs(force, ("--html", html_path))
    ra = saved_report(a) or load_report(a, chip_name=chip_name, no_calibrate=no_calibrate)
    rb = saved_report(b) or load_report(b, chip_name=chip_b or chip_name, no_calibrate=no_calibrate)
    d = diff_reports(ra, rb, a, b)
    if html_path:
        from rooflens.report.html import render_diff_html

        with written_whole(html_path) as tmp:
            tmp.write_text(render_diff_html(d), encoding="utf-8")
        click.echo(f"rooflens: wrote {html_path}", err=True)
    if as_json:
        click.echo(json_text(d.to_json()))
        return
    from rooflens.report.diff_view import render_diff

    render_diff(console(), d, top=top)
