"""Where rooflens keeps what it makes for the user: one place, for every layer."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The user cache directory (``ROOFLENS_CACHE_DIR`` overrides; else ``$XDG_CACHE_HOME/rooflens``)."""
    env = os.environ.get("ROOFLENS_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rooflens"
