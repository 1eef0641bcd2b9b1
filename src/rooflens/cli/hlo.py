"""``rooflens hlo``: read an HLO module, explain one op, draw its graph."""

from __future__ import annotations

from pathlib import Path

import click

from rooflens.cli.common import UserError, emit, example_hlo_path, no_such_op, parse_hlo_file


@click.command()
@click.argument("file", required=False)
@click.option("--op", "op_name", metavar="NAME", help="Explain one instruction in plain words.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.option("--example", is_flag=True,
              help="Read the HLO of a small transformer training step on 8 devices shipped with rooflens.")
@click.option("--graph", "graph_path", metavar="OUT.svg",
              help="With --op: write the op's dataflow graph (fusion body, operands, users) as a standalone SVG.")
@click.option("--force", is_flag=True, help="Overwrite the --graph file if it exists.")
def hlo(file: str | None, op_name: str | None, as_json: bool, example: bool, graph_path: str | None,
        force: bool) -> None:
    """Read an HLO module: a summary, or one op explained (--op NAME).

    FILE is HLO text as printed by jax.jit(f).lower(...).compile().as_text() or dumped by
    XLA_FLAGS=--xla_dump_to=DIR (plain or .gz).
    """
    from rooflens.report.hlo_view import render_explanation, render_summary

    if example == bool(file):
        raise UserError("give one HLO file, or --example to read the one shipped with rooflens.")
    path = str(example_hlo_path()) if example else file
    module = parse_hlo_file(path)
    if graph_path:
        write_graph(module, path, op_name, graph_path, force)
        return
    if op_name:
        from rooflens.cost.counts import explain_op

        if module.find(op_name) is None:
            raise no_such_op(module, op_name, path)
        exp = explain_op(module, op_name)
        emit(exp.to_dict, as_json, lambda c: render_explanation(c, exp))
        return
    from rooflens.hlo.explain import summarize

    summary = summarize(module)
    emit(lambda: {"file": path, **summary.to_dict()}, as_json, lambda c: render_summary(c, summary, source=path))


def write_graph(module, path: str, op_name: str | None, out: str, force: bool) -> None:
    """``rooflens hlo FILE --op NAME --graph OUT.svg``: the op's graph, laid out, as an SVG file."""
    from rooflens.hlo.graph import op_graph
    from rooflens.report.graph_view import render_graph_svg

    if not op_name:
        raise UserError("--graph draws one op: give it with --op NAME.")
    if module.find(op_name) is None:
        raise no_such_op(module, op_name, path)
    target = Path(out)
    if target.exists() and not force:
        raise UserError(f"{out} already exists; give --force to overwrite it.")
    if target.parent != Path("") and not target.parent.is_dir():
        raise UserError(f"cannot write {out}: the directory {target.parent} does not exist.")
    g = op_graph(module, op_name)
    try:
        target.write_text(render_graph_svg(g), encoding="utf-8")
    except OSError as e:
        raise UserError(f"cannot write {out}: {e.strerror or e}.") from None
    click.echo(f"wrote {out}: {g.opcode} {g.op}, {len(g.nodes)} nodes, {len(g.edges)} edges"
               + (f" ({'; '.join(g.notes)})" if g.notes else ""))
