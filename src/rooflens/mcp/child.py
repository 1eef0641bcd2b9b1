"""Tool calls in a process of their own.

``python -m rooflens.mcp.child`` answers one call: it reads ``{"tool": …, "args": {…}}`` on stdin and
writes the tool's JSON document on stdout, exit status 0. Bad input is what the command line does with
it: one sentence on stderr (``rooflens: …``) and exit status 2; a bug of ours is one sentence too, with
exit status 1.

``python -m rooflens.mcp.child --serve`` answers call after call, one JSON line in, one JSON line out
(``{"status": 0, "doc": …}`` or ``{"status": 2, "sentence": "rooflens: …"}``), keeping the last reports
it made so that ``op`` after ``report`` on the same trace does not read and analyse it again.

Either way, everything else written meanwhile (a user's module that prints, JAX, progress bars) goes
to stderr, which the server reads as progress.
"""

from __future__ import annotations

import json
import os
import sys


def answer(request: dict) -> tuple[int, object]:
    """(0, the tool's document), or (exit status, the one sentence the command line would print)."""
    from rooflens.errors import RooflensError

    try:
        from rooflens.mcp.tools import TOOLS

        return 0, TOOLS[request["tool"]](**request["args"])
    except RooflensError as e:
        return 2, f"rooflens: {e}"
    except OSError as e:  # a file the system refused: the user's to fix, as on the command line
        if e.filename is None or os.environ.get("ROOFLENS_DEBUG"):
            raise
        return 2, f"rooflens: cannot use {e.filename}: {(e.strerror or str(e)).lower()}."
    except Exception as e:  # a bug of ours: still one sentence, the traceback on request
        if os.environ.get("ROOFLENS_DEBUG"):
            raise
        return 1, f"rooflens: internal error ({type(e).__name__}: {e}); set ROOFLENS_DEBUG=1 for the traceback."


def main(argv: list[str]) -> int:
    from rooflens.cli.common import say
    from rooflens.report.text import escape_controls, json_text

    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # the file descriptor too: C extensions and subprocesses write there
    sys.stdout = sys.stderr
    if argv[:1] == ["--serve"]:
        for line in sys.stdin:
            if not line.strip():
                continue
            status, payload = answer(json.loads(line))
            reply = ({"status": 0, "doc": payload} if status == 0 else
                     {"status": status, "sentence": escape_controls(payload)})  # as say() prints it
            out.write(json_text(reply, indent=False) + "\n")  # one line: orjson escapes newlines in strings
            out.flush()
        return 0
    status, payload = answer(json.loads(sys.stdin.read()))
    if status:
        say(payload)
        return status
    out.write(json_text(payload, indent=False))
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
