"""``rooflens export``: the op event table as Parquet."""

from __future__ import annotations

from pathlib import Path

import click

from rooflens.cli.common import UserError, check_writable, need_dir


@click.command()
@click.argument("logdir", metavar="LOGDIR|RUN_DIR|TRACE_FILE")
@click.option("--parquet", "parquet_dir", required=True, metavar="DIR",
              help="Write DIR/ops.parquet: one row per op execution (columns: docs/export-schema.md).")
@click.option("--hlo", "hlo_dir", metavar="DIR", help="HLO text files of the programs (an XLA dump directory).")
@click.option("--force", is_flag=True, help="Replace an existing DIR/ops.parquet.")
def export(logdir: str, parquet_dir: str, hlo_dir: str | None, force: bool) -> None:
    """The op event table, for pandas / polars / DuckDB: one row per op execution, times in ps."""
    from rooflens.trace import load
    from rooflens.trace.export import EXPORT_FILE, write_parquet

    target = Path(parquet_dir)
    if target.exists() and not target.is_dir():
        raise UserError(f"{parquet_dir} is a file; --parquet takes a directory.")
    if (target / EXPORT_FILE).exists() and not force:
        raise UserError(f"{target / EXPORT_FILE} exists; give another --parquet directory or --force to replace it.")
    if target.is_dir():
        check_writable(target / EXPORT_FILE, "--parquet", True)
    if hlo_dir:
        need_dir(hlo_dir, "--hlo")
    prof = load(logdir, hlo_dir=hlo_dir)
    try:
        out = write_parquet(prof, target)
    except OSError as e:
        raise UserError(f"cannot write {target / EXPORT_FILE}: {e.strerror or e}.") from None
    click.echo(f"rooflens: wrote {out} ({len(prof.table):,} op events)", err=True)
