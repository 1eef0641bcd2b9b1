"""The ``rooflens`` command: one verb per stage, each with ``--json``."""

from __future__ import annotations

import gzip
import json
import os
import sys
from importlib import resources
from pathlib import Path

import click

from rooflens.errors import RooflensError

EXAMPLE_HLO = "transformer_train_step.8dev.after_optimizations.hlo.txt"


class UserError(RooflensError):
    """Bad input from the user: reported as one sentence, exit status 2."""


def _console():
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def example_hlo_path() -> Path:
    return Path(str(resources.files("rooflens") / "data" / EXAMPLE_HLO))


def read_hlo_file(path: str) -> str:
    """The text of an HLO file (plain or gzipped), or a UserError saying what is wrong."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"{path} does not exist.")
    if p.is_dir():
        dumps = sorted(p.glob("*after_optimizations.txt")) or sorted(p.glob("*.txt"))
        hint = f", e.g. {dumps[0]}" if dumps else " (e.g. a *after_optimizations.txt file of an XLA dump)"
        raise UserError(f"{path} is a directory; give one HLO text file{hint}.")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror or e}.") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError):
            raise UserError(f"{path} is a damaged gzip file.") from None
    if not data.strip():
        raise UserError(f"{path} is empty.")
    if b"\x00" in data[:65536]:
        raise UserError(f"{path} is a binary file, not HLO text.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{path} is not UTF-8 text (bad byte at offset {e.start}), so it is not HLO.") from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rooflens")
def cli() -> None:
    """rooflens: predict, measure and explain the performance of JAX programs."""


@cli.command()
@click.argument("file", required=False)
@click.option("--op", "op_name", metavar="NAME", help="Explain one instruction in plain words.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.option("--example", is_flag=True,
              help="Read the HLO of a small transformer training step on 8 devices shipped with rooflens.")
def hlo(file: str | None, op_name: str | None, as_json: bool, example: bool) -> None:
    """Read an HLO module: a summary, or one op explained (--op NAME).

    FILE is HLO text as printed by jax.jit(f).lower(...).compile().as_text() or dumped by
    XLA_FLAGS=--xla_dump_to=DIR (plain or .gz).
    """
    from rooflens import hlo as H
    from rooflens.hlo.explain import explain, suggest_names, summarize
    from rooflens.report.hlo_view import render_explanation, render_summary

    if example == bool(file):
        raise UserError("give one HLO file, or --example to read the one shipped with rooflens.")
    path = str(example_hlo_path()) if example else file
    text = read_hlo_file(path)
    try:
        module = H.parse(text)
    except H.HloParseError as e:
        raise UserError(f"{path} is not HLO text: line {e.line}, column {e.column}: {e.message}.") from None
    if op_name:
        try:
            exp = explain(module, op_name)
        except KeyError:
            close = suggest_names(module, op_name)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise UserError(f"there is no instruction named {op_name!r} in {path}.{hint}") from None
        if as_json:
            click.echo(json.dumps(exp.to_dict(), indent=2))
        else:
            render_explanation(_console(), exp)
        return
    summary = summarize(module)
    if as_json:
        click.echo(json.dumps({"file": path, **summary.to_dict()}, indent=2))
    else:
        render_summary(_console(), summary, source=path)


def main(argv: list[str] | None = None) -> None:
    """Entry point: user errors become one sentence on stderr and exit status 2."""
    try:
        cli.main(args=argv, prog_name="rooflens", standalone_mode=False)
    except RooflensError as e:
        click.echo(f"rooflens: {e}", err=True)
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("rooflens: interrupted.", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        click.echo("rooflens: interrupted.", err=True)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as e:  # a bug of ours: still one sentence, the traceback on request
        if os.environ.get("ROOFLENS_DEBUG"):
            raise
        click.echo(f"rooflens: internal error ({type(e).__name__}: {e}); set ROOFLENS_DEBUG=1 for the traceback.",
                   err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
