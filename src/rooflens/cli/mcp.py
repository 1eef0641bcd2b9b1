"""``rooflens mcp``: the verbs as tools of an MCP server over stdio, for agents (docs/agents.md)."""

from __future__ import annotations

import click

from rooflens.cli.common import UserError


@click.command()
def mcp() -> None:
    """Serve rooflens's verbs as MCP tools over stdio, for agents (report, op, predict, plan, diff, check,
    hlo, run, chips). Add `rooflens mcp` to your MCP client's configuration; docs/agents.md shows how,
    and the loop to follow. Needs the MCP SDK: pip install 'rooflens[mcp]'."""
    try:
        import mcp.server.mcpserver  # noqa: F401  (the SDK's 2.x server; 1.x had FastMCP instead)
    except ImportError:
        raise UserError("the MCP server needs the MCP SDK (mcp 2.x): pip install 'rooflens[mcp]'.") from None
    from rooflens.mcp.server import serve

    serve()
