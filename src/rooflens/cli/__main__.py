"""``python -m rooflens.cli``: the same as the ``rooflens`` command."""

from rooflens.cli import command

command()
