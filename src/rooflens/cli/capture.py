"""``rooflens capture HOST:PORT --duration S``: profile a running job on demand (see
:mod:`rooflens.capture.ondemand`)."""

from __future__ import annotations

import click


@click.command("capture")
@click.argument("addresses", metavar="HOST:PORT[,HOST:PORT…]")
@click.option("--duration", "duration_s", type=float, required=True, metavar="SECONDS", help="How long to trace.")
@click.option("--logdir", default=None, metavar="DIR", help="Where to write the profile (default: ./rooflens-logs); "
              "each job writes its own trace there, so it must be a path the job's machine can write.")
def capture(addresses: str, duration_s: float, logdir: str | None) -> None:
    """Take a profile of a running job that called jax.profiler.start_server(PORT), as TensorBoard's
    capture button does: one host (HOST:PORT) or several (HOST1:PORT,HOST2:PORT).

    Writes a run directory (<logdir>/plugins/profile/<run>/, one <host>.port<PORT>.xplane.pb per
    job, the programs' HLO inside) that `rooflens report` reads and compares with the roofline.
    """
    from rooflens.capture.ondemand import capture as take

    run_dir, problems = take(addresses, duration_s, logdir)
    for problem in problems:
        click.echo(f"rooflens: {problem}.", err=True)
    click.echo(f"rooflens: profile written to {run_dir}; read it with: rooflens report {run_dir}", err=True)
