"""``rooflens mcp``: the verbs as tools of an MCP server over stdio, for agents (docs/agents.md)."""

from __future__ import annotations

import importlib.util

import click

from rooflens.cli.common import UserError


@click.command()
def mcp() -> None:
    """Serve rooflens's verbs as MCP tools over stdio, for agents (report, op, predict, plan, diff, check,
    hlo, run, chips). Add `rooflens mcp` to your MCP client's configuration; docs/agents.md shows how,
    and the loop to follow. Needs the MCP SDK: pip install 'rooflens[mcp]'."""
    if importlib.util.find_spec("mcp") is None or importlib.util.find_spec("mcp.server.mcpserver") is None:
        raise UserError("rooflens mcp needs the MCP SDK (mcp 2.x): pip install 'rooflens[mcp]'.")
    from rooflens.mcp.server import serve

    serve()
