"""One tool call in its own process: ``python -m rooflens.mcp.child`` reads ``{"tool": …, "args": {…}}``
on stdin and writes the tool's JSON document on stdout, exit status 0.

Bad input is what the command line does with it: one sentence on stderr (``rooflens: …``) and exit
status 2; a bug of ours is one sentence too, with exit status 1. Everything else written meanwhile
(a user's module that prints, JAX, progress bars) goes to stderr, which the server reads as progress.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> int:
    from rooflens.cli.common import say
    from rooflens.errors import RooflensError
    from rooflens.report.text import json_text

    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # the file descriptor too: C extensions and subprocesses write there
    sys.stdout = sys.stderr
    try:
        request = json.loads(sys.stdin.read())
        from rooflens.mcp.tools import TOOLS

        doc = TOOLS[request["tool"]](**request["args"])
    except RooflensError as e:
        say(f"rooflens: {e}")
        return 2
    except OSError as e:  # a file the system refused: the user's to fix, as on the command line
        if e.filename is None or os.environ.get("ROOFLENS_DEBUG"):
            raise
        say(f"rooflens: cannot use {e.filename}: {(e.strerror or str(e)).lower()}.")
        return 2
    except Exception as e:  # a bug of ours: still one sentence, the traceback on request
        if os.environ.get("ROOFLENS_DEBUG"):
            raise
        say(f"rooflens: internal error ({type(e).__name__}: {e}); set ROOFLENS_DEBUG=1 for the traceback.")
        return 1
    out.write(json_text(doc, indent=False))
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
