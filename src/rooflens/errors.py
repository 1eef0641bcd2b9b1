"""The one error type every layer raises for bad input it was given.

The command line turns it into one sentence on stderr and exit status 2; library users catch it
like any exception. It lives outside the layers so each of them may raise it without importing
another.
"""

from __future__ import annotations

import os
from pathlib import Path


class RooflensError(Exception):
    """Bad input (an unknown chip, a malformed argument spec, a function that does not lower).

    The message is one sentence for a person, without a trailing traceback's worth of detail.
    """


def existing(path: str | os.PathLike, what: str = "") -> os.stat_result:
    """``path``'s stat, or one sentence: it does not exist, or a directory above it cannot be searched.
    ``what`` prefixes the path in the sentence (e.g. "--budget ")."""
    try:
        return Path(path).stat()
    except PermissionError:
        raise RooflensError(f"cannot reach {what}{path}: permission denied.") from None
    except OSError:
        raise RooflensError(f"{what}{path} does not exist.") from None
