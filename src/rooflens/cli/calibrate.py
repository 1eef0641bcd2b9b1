"""``rooflens calibrate``: measure this machine; saved as the chip 'local'."""

from __future__ import annotations

import click

from rooflens.cli.common import emit


@click.command()
@click.option("--repeats", default=7, show_default=True, type=click.IntRange(min=2, max=10_000),
              help="Timed runs per kernel (after warm-up; at least 2, so there is a spread to report).")
@click.option("--quick", is_flag=True, help="Smaller kernels and fewer runs (a rough figure in seconds).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def calibrate(repeats: int, quick: bool, as_json: bool) -> None:
    """Measure this machine's matmul FLOP/s and memory bandwidth; save them as the chip 'local'."""
    from rooflens.hardware import calibrate as K
    from rooflens.report.cost_view import render_calibration

    kw = K.QUICK if quick else {"repeats": repeats}
    cal = K.measure(**kw)
    path = K.save(cal)
    emit(lambda: {
            "path": str(path), "backend": cal.backend, "device_kind": cal.device_kind, "when": cal.when,
            "measurements": [{"what": m.what, "unit": m.unit, "times_s": list(m.times_s), **m.spread}
                             for m in [*(x for ms in cal.matmul.values() for x in ms), *cal.copy]],
    }, as_json, lambda c: render_calibration(c, cal, path))
