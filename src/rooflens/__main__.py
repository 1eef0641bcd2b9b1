"""``python -m rooflens``: the ``rooflens`` command (as MCP clients often start it: python -m rooflens mcp)."""

from rooflens.cli import command

command()
