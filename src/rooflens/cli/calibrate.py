"""``rooflens calibrate``: measure this machine; saved as the chip 'local'."""

from __future__ import annotations

import click

from rooflens.cli.common import emit
from rooflens.units import plural


@click.command()
@click.option("--repeats", default=7, show_default=True, type=click.IntRange(min=2, max=10_000),
              help="Timed runs per kernel (after warm-up; at least 2, so there is a spread to report).")
@click.option("--quick", is_flag=True, help="Smaller kernels and fewer runs, measured once (a rough figure in "
                                            "seconds).")
@click.option("--attempts", default=3, show_default=True, type=click.IntRange(min=1, max=100),
              help="Measure again while the machine looks busy (IQR over median of a figure above 10%), up to this "
                   "many times in all, and keep the quietest.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def calibrate(repeats: int, quick: bool, attempts: int, as_json: bool) -> None:
    """Measure this machine's matmul FLOP/s and memory bandwidth; save them as the chip 'local'.

    Runs made by `rooflens run` record the calibration they were made with, so their reports do not
    change when this one does; `rooflens report --chip local` prices any trace with the newest."""
    from rooflens.hardware import calibrate as K
    from rooflens.report.cost_view import render_calibration

    kw = K.QUICK if quick else {"repeats": repeats}
    def again(spread: float, attempt: int, of: int) -> None:
        click.echo(f"rooflens: the machine looks busy ({K.spread_words(spread)}, over {K.BUSY_SPREAD:.0%}): "
                   f"measuring again (attempt {attempt} of {of})", err=True)

    cal, spreads = K.measure_until_quiet(attempts=1 if quick else attempts, again=again, **kw)
    path = K.save(cal)
    if cal.busy:
        click.echo(f"rooflens: warning: the machine was busy while it was measured ({K.spread_words(cal.spread, True)} "
                   f"in {plural(len(spreads), 'attempt')}, over {K.BUSY_SPREAD:.0%}): its figures may be too low, "
                   "and measurements will beat them. Run `rooflens calibrate` again when the machine is quiet.",
                   err=True)
    emit(lambda: {
            "path": str(path), "backend": cal.backend, "device_kind": cal.device_kind, "when": cal.when,
            "spread_iqr_over_median": cal.spread, "busy": cal.busy, "attempts_iqr_over_median": spreads,
            "measurements": [{"what": m.what, "unit": m.unit, "times_s": list(m.times_s), **m.spread}
                             for m in [*(x for ms in cal.matmul.values() for x in ms), *cal.copy]],
    }, as_json, lambda c: render_calibration(c, cal, path))
