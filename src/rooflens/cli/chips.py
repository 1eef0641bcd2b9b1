"""``rooflens chips``: the catalogue, or one chip with the source of every number."""

from __future__ import annotations

import click

from rooflens.cli.common import chip_files, emit


@click.command()
@click.argument("name", required=False)
@click.option("--chips", "chips_file", multiple=True, metavar="FILE", help="Also read chips from this TOML file.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def chips(name: str | None, chips_file: tuple[str, ...], as_json: bool) -> None:
    """List the chip catalogue, or show one chip with the source of every number.

    Each entry describes ONE JAX device: a TensorCore on TPU v2/v3, a chip on v4 and later, one
    GPU. Add your own with ROOFLENS_CHIPS=file.toml or --chips FILE (same format).
    """
    from rooflens import hardware as C
    from rooflens.report.cost_view import render_chip, render_chip_list

    files = chip_files(chips_file)
    if name:
        c = C.chip(name, files)
        emit(c.to_dict, as_json, lambda con: render_chip(con, c))
        return
    rows = C.chip_rows(files)
    emit(lambda: [r.__dict__ for r in rows], as_json, lambda con: render_chip_list(con, rows))
