"""Files the user asked for (``--out``, ``--html``, ``--perfetto``), written whole or not at all.

A report is written to a hidden file beside its target and renamed onto it only when complete, so a
full disk, a signal or Ctrl-C half way leaves the old file (or none) and never a truncated one that
spoils the next run. The hidden file keeps the target's name as its tail, suffixes included, so a
writer that picks its encoding by suffix (``.json.gz``) still sees it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from rooflens.errors import RooflensError

PARTIAL_PREFIX = ".rooflens-partial-"


def partial_path(target: Path) -> Path:
    """Where ``target`` is written before it is complete: same directory, a hidden name ending in its own."""
    return target.parent / f"{PARTIAL_PREFIX}{secrets.token_hex(4)}-{target.name}"


@contextlib.contextmanager
def written_whole(path: str | os.PathLike) -> Iterator[Path]:
    """Yield the path to write to; on success it becomes ``path`` in one rename.

    Any failure (an OSError such as a full disk, an interrupt, a bug) removes the partial file; an
    OSError becomes one sentence (:class:`RooflensError`), anything else goes on up unchanged."""
    target = Path(path)
    tmp = partial_path(target)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:  # on disk before the rename, so a crash cannot leave an empty report
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except OSError as e:
        _discard(tmp)
        raise RooflensError(f"cannot write {target}: {(e.strerror or str(e)).lower()}.") from None
    except BaseException:
        _discard(tmp)
        raise


def _discard(tmp: Path) -> None:
    with contextlib.suppress(OSError):
        tmp.unlink()
