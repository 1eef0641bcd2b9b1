"""``rooflens demo``: the whole loop on a built-in workload, on 8 virtual CPU devices."""

from __future__ import annotations

import stat
from pathlib import Path

import click

from rooflens.cli.common import UserError, check_writable, console, force_cpu_devices, json_text, writing

DEMO_DEVICES = 8


def taken(d: Path) -> bool:
    """``d`` holds something (a file of that name, or a directory that is not empty)."""
    try:
        if not stat.S_ISDIR(d.stat().st_mode):
            return True
    except (FileNotFoundError, NotADirectoryError):
        return False  # free (or impossible: then creating it says why)
    except OSError:
        return True
    try:
        return any(d.iterdir())
    except OSError:
        return True


def fresh_dir(base: Path, force: bool) -> Path:
    """``base``, or ``base-2``, ``base-3``… when it already holds anything (never overwrite unasked), checked
    writable before the demo runs."""
    if force and base.is_dir() or not taken(base):
        out = base
    else:
        n = 2
        while taken(base.parent / f"{base.name}-{n}") and n < 1000:
            n += 1
        out = base.parent / f"{base.name}-{n}"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create the --out directory {out}: {(e.strerror or str(e)).lower()}.") from None
    for name in ("report.html", "report.json"):
        check_writable(out / name, "--out", force, " (the demo's own files)")
    return out


@click.command()
@click.option("--out", default="rooflens-demo", show_default=True, help="Directory for the report and the trace.")
@click.option("--force", is_flag=True, help="Write into --out even if it already holds files (replacing the demo's "
                                            "report.html, report.json and logs).")
@click.option("--steps", default=5, show_default=True, type=click.IntRange(min=1, max=10_000),
              help="Training steps in the trace window.")
def demo(out: str, force: bool, steps: int) -> None:
    """The whole loop on a built-in workload: a transformer training step on 8 virtual CPU devices
    (4×2 data × model mesh) → capture → analyze against this CPU → predict on TPU v5e → report.html."""
    force_cpu_devices(DEMO_DEVICES)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    outdir = fresh_dir(Path(out), force)  # before the minutes of work: where it goes, and that it can
    con = console()
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=con,
                  transient=False) as progress:
        task = progress.add_task("starting JAX on 8 CPU devices", total=6)
        import jax
        import jax.numpy as jnp

        import rooflens as rl
        from rooflens.hardware import calibrate as K
        from rooflens.hardware import local_chip_path
        from rooflens.report.html import write_html
        from rooflens.workloads import TransformerConfig, make_mesh, sharded_train_step

        if len(jax.devices()) < DEMO_DEVICES:
            raise UserError(f"the demo needs {DEMO_DEVICES} devices but JAX sees {len(jax.devices())}; run it in a "
                            "fresh process (XLA_FLAGS must be set before JAX starts).")
        progress.advance(task)
        if not local_chip_path().is_file():
            progress.update(task, description="calibrating this CPU (once; saved as chip 'local')")
            K.save(K.measure(**K.QUICK))
        progress.advance(task)
        progress.update(task, description="compiling and warming up the training step")
        step, (ap, at) = sharded_train_step(TransformerConfig(), make_mesh())
        params = jax.tree.map(lambda s: jax.device_put(jnp.zeros(s.shape, s.dtype), s.sharding), ap)
        tokens = jax.device_put(jnp.zeros(at.shape, at.dtype), at.sharding)
        progress.advance(task)
        progress.update(task, description=f"capturing {steps} steps")
        prof = rl.capture(step, params, tokens, steps=steps, logdir=outdir / "logs",
                          feed=lambda o, a: (o[0], a[1]))
        progress.advance(task)
        progress.update(task, description="comparing with the roofline of this CPU")
        rep = rl.analyze(prof)
        progress.advance(task)
        progress.update(task, description="predicting the same step on tpu-v5e")
        pred = rl.predict(step, ap, at, chip="tpu-v5e")
        with writing(outdir):
            write_html(rep, outdir / "report.html", prediction=pred, title="rooflens demo: a transformer step")
            (outdir / "report.json").write_text(json_text(rep.to_json()))
        progress.advance(task)
        progress.update(task, description="done")
    from rooflens.report.trace_view import render_op_stats, render_report

    render_op_stats(con, rep, source=", ".join(rep.sources), top=10)
    render_report(con, rep, source="", top=10)
    con.print(f"\n[bold]On tpu-v5e[/bold] the same step would take {pred.time_s * 1e6:.3g} µs per device "
                  f"(roofline; {pred.source}).")
    con.print(f"\n[bold]Report:[/bold] {outdir / 'report.html'}  (open it in a browser; the trace is in "
                  f"{outdir / 'logs'}, readable by TensorBoard and `rooflens report`)")
