"""``rooflens demo``: the whole loop on a built-in workload, on 8 virtual CPU devices."""

from __future__ import annotations

import stat
from pathlib import Path

import click

from rooflens.cli.common import UserError, check_writable, console, err_console, force_cpu_devices, json_text, writing

DEMO_DEVICES = 8


#: What the demo writes into its --out directory, and nothing else: a directory holding only these is the
#: demo's own previous output, which a second run replaces (saying so).
DEMO_FILES = frozenset({"report.html", "report.json", "logs", ".rooflens-demo"})
MARKER = ".rooflens-demo"


def _entries(d: Path) -> set[str] | None:
    """The names in ``d`` (an empty set for a directory that does not exist yet); None: ``d`` is a file or
    cannot be read."""
    try:
        if not stat.S_ISDIR(d.stat().st_mode):
            return None
    except (FileNotFoundError, NotADirectoryError):
        return set()  # free (or impossible: then creating it says why)
    except OSError:
        return None
    try:
        return {e.name for e in d.iterdir()}
    except OSError:
        return None


def demo_dir(base: Path, force: bool) -> tuple[Path, bool]:
    """``base``, checked writable before the demo runs, and whether it held the demo's own previous output
    (which this run replaces). A directory holding anything else is the user's: the demo stops with one
    sentence (give another --out, or --force to write into it) and never picks another name by itself."""
    names = _entries(base)
    if names is None:
        raise UserError(f"--out {base} is a file or cannot be read; give a directory for the demo.")
    previous = bool(names) and names <= DEMO_FILES and (MARKER in names or {"report.html", "logs"} <= names)
    if names and not previous and not force:
        raise UserError(f"--out {base} already holds files that are not the demo's ({', '.join(sorted(names)[:3])}"
                        f"{', …' if len(names) > 3 else ''}); give another --out, or --force to write the demo's "
                        "report.html, report.json and logs/ into it.")
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create the --out directory {base}: {(e.strerror or str(e)).lower()}.") from None
    for name in ("report.html", "report.json"):
        check_writable(base / name, "--out", True, " (the demo's own files)")
    return base, previous


def clear_previous(outdir: Path) -> None:
    """Remove the demo's own previous trace (``logs/``): a second capture beside it would make
    ``rooflens report DIR/logs`` read two runs. Only called on a directory :func:`demo_dir` found to hold
    the demo's output and nothing else."""
    import shutil

    if (outdir / "logs").is_dir() and not (outdir / "logs").is_symlink():
        shutil.rmtree(outdir / "logs")


@click.command()
@click.option("--out", default="rooflens-demo", show_default=True, help="Directory for the report and the trace.")
@click.option("--force", is_flag=True, help="Write into --out even if it holds files that are not the demo's "
                                            "(replacing report.html, report.json and logs/ there). A second demo "
                                            "replaces its own previous output without it, and says so.")
@click.option("--steps", default=5, show_default=True, type=click.IntRange(min=1, max=10_000),
              help="Training steps in the trace window.")
def demo(out: str, force: bool, steps: int) -> None:
    """The whole loop on a built-in workload: a transformer training step on 8 virtual CPU devices
    (4×2 data × model mesh) → capture → analyze against this CPU → predict on TPU v5e → report.html.

    A second run replaces the first run's output in --out (it says so on stderr); a --out that holds
    anything else is left alone unless --force is given."""
    force_cpu_devices(DEMO_DEVICES)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from rooflens.cli.common import say

    outdir, previous = demo_dir(Path(out), force)  # before the minutes of work: where it goes, and that it can
    if previous:
        say(f"rooflens: replacing the previous demo's output in {outdir} (report.html, report.json, logs/).")
        clear_previous(outdir)
    elif force and (outdir / "logs").is_dir():
        say(f"rooflens: --force: writing the demo into {outdir}; its logs/ gets a new run beside what is there.")
    (outdir / MARKER).write_text("written by `rooflens demo`: a second demo replaces this directory's report.html, "
                                 "report.json and logs/\n")
    con = console()
    # the progress goes to stderr (stdout carries the report), and its last line with it
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=err_console(),
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
    from rooflens.units import fmt_seconds

    render_op_stats(con, rep, source=", ".join(rep.sources), top=10)
    render_report(con, rep, source="", top=10)
    con.print(f"\n[bold]On tpu-v5e[/bold] the same step would take {fmt_seconds(pred.time_s)} per device "
                  f"(roofline; {pred.source}).")
    con.print(f"\n[bold]Report:[/bold] {outdir / 'report.html'}  (open it in a browser; the trace is in "
                  f"{outdir / 'logs'}, readable by TensorBoard and `rooflens report`)")
