"""The ``rooflens`` command: one module per verb, the plumbing they share in :mod:`.common`.

Every verb takes ``--json``; bad input is one sentence on stderr and exit status 2 (:func:`main`).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import sys

import click

from rooflens.cli import (
    calibrate,
    capture,
    check,
    chips,
    demo,
    diff,
    export,
    hlo,
    mcp,
    memory,
    plan,
    predict,
    report,
    run,
)
from rooflens.cli.common import say
from rooflens.cli.signals import Interrupts
from rooflens.errors import RooflensError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rooflens")
def cli() -> None:
    """rooflens: predict, measure and explain the performance of JAX programs."""


#: the verbs, in the order ``rooflens --help`` lists them
VERBS = (hlo.hlo, chips.chips, calibrate.calibrate, predict.predict, run.run, capture.capture, report.report,
         diff.diff, check.check, export.export, memory.memory, plan.plan, mcp.mcp, demo.demo)
for _verb in VERBS:
    cli.add_command(_verb)


def command() -> None:
    """The ``rooflens`` executable and ``python -m rooflens.cli``: :func:`main` in a process of its own, whose
    exit skips collecting its cyclic garbage. Finalizing numba's compiled kernels and LLVM objects one by one
    takes about 0.2 s of a 1.6 s report on a 2-core machine; the operating system frees that memory at once.
    Nothing is lost: files are closed by the verbs (``with``), the cache's writer thread is joined and
    ``atexit`` handlers run as before (``gc.freeze`` only keeps the collector away). A caller of :func:`main`
    in its own process (a notebook, a test) keeps its collector (and its allocator: :func:`_large_frees_go_back`)."""
    _large_frees_go_back()
    try:
        main()
    finally:
        gc.freeze()


#: glibc's ``mallopt`` parameter: the size from which an allocation is pages of its own (malloc.h)
_M_MMAP_THRESHOLD = -3
#: event-sized columns and their temporaries: a 2 M-event trace's int64 columns are 16 MB
_OWN_PAGES_BYTES = 16 << 20


def _large_frees_go_back() -> None:
    """In the ``rooflens`` process, allocations of 16 MB and more are pages of their own, handed back to the
    system when freed. glibc otherwise raises that bound as large blocks are freed (up to 32 MB), after which a
    large trace's 25 MB columns come from the heap and stay there, freed but held: the report of a 1 GB CPU trace
    peaked 44 MiB higher (901 against 857 MiB, median of 6 side by side), with no change in its time, nor in a
    2.5 M-event trace's (whose peak fell 14 MiB). Elsewhere than glibc, nothing changes."""
    # no C library to load by that name (Windows), or one without mallopt (macOS): nothing to set
    with contextlib.suppress(OSError, AttributeError, TypeError):
        ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, _OWN_PAGES_BYTES)


def main(argv: list[str] | None = None) -> None:
    """Entry point: user errors become one sentence on stderr and exit status 2."""
    try:
        with Interrupts() as interrupts:
            cli.main(args=argv, prog_name="rooflens", standalone_mode=False)
        if interrupts.any:  # a Ctrl-C that Python lost on the way (see cli.signals)
            raise KeyboardInterrupt
    except RooflensError as e:
        say(f"rooflens: {e}")
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("rooflens: interrupted.", err=True)
        sys.exit(130)
    except click.UsageError as e:  # a bad option or argument: one line too, with where to look
        where = f" (see '{e.ctx.command_path} -h')" if e.ctx is not None else ""
        say(f"rooflens: {e.format_message().rstrip('.')}{where}.")
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        click.echo("rooflens: interrupted.", err=True)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as e:
        if os.environ.get("ROOFLENS_DEBUG"):
            raise
        if isinstance(e, OSError) and e.filename is not None:  # a file the system refused (permissions, a full
            say(f"rooflens: cannot use {e.filename}: {(e.strerror or str(e)).lower()}.")  # disk): the user's to fix
            sys.exit(2)
        # a bug of ours (an OSError naming no file among them): still one sentence, the traceback on request
        say(f"rooflens: internal error ({type(e).__name__}: {e}); set ROOFLENS_DEBUG=1 for the traceback.")
        sys.exit(1)
