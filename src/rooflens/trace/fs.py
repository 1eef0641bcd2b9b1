"""Paths, local or in a bucket: a logdir may be ``gs://…`` or ``s3://…``, as TensorBoard and XProf
users keep them. URLs go through fsspec (an optional extra: ``pip install 'rooflens[buckets]'``
with gcsfs / s3fs for the bucket you use); plain paths never import it.

Our decoders map files, so a remote host file is first copied to a local temporary file (one at a
time per worker: memory and disk stay bounded by one host's trace).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from rooflens.errors import RooflensError


def is_url(path: str) -> bool:
    return "://" in str(path)


def _fs(url: str):
    try:
        import fsspec
    except ImportError:
        raise RooflensError(f"{url} is a URL: reading it needs fsspec (pip install 'rooflens[buckets]', plus "
                            "gcsfs for gs:// or s3fs for s3://).") from None
    try:
        fs, path = fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as e:
        raise RooflensError(f"cannot open {url}: {e}.") from None
    return fs, path


def _url(fs, path: str) -> str:
    protocol = fs.protocol[0] if isinstance(fs.protocol, tuple | list) else fs.protocol
    return path if protocol in ("file", "local") else f"{protocol}://{path.lstrip('/')}" if protocol != "memory" \
        else f"memory://{path if path.startswith('/') else '/' + path}"


def kind(path: str) -> str | None:
    """"file", "dir" or None (missing)."""
    if not is_url(path):
        p = Path(path)
        try:
            return "dir" if p.is_dir() else "file" if p.exists() else None
        except PermissionError:
            raise RooflensError(f"cannot reach {path}: permission denied (a directory above it cannot be "
                                "searched).") from None
        except OSError:
            return None
    fs, p = _fs(path)
    try:
        if fs.isdir(p):
            return "dir"
        return "file" if fs.exists(p) else None
    except OSError as e:
        raise RooflensError(f"cannot read {path}: {e}.") from None


def listdir(path: str, dirs_only: bool = False) -> list[str]:
    """Entries of a directory (full paths or URLs), sorted; ``dirs_only``: its subdirectories."""
    if not is_url(path):
        try:
            with os.scandir(path) as it:
                entries = [e for e in it]
                return sorted(e.path for e in entries if (e.is_dir(follow_symlinks=False) if dirs_only
                                                          else True))
        except PermissionError:
            raise RooflensError(f"cannot list {path}: permission denied.") from None
        except OSError as e:
            raise RooflensError(f"cannot list {path}: {e.strerror or e}.") from None
    fs, p = _fs(path)
    try:
        infos = fs.ls(p, detail=True)
    except OSError as e:
        raise RooflensError(f"cannot list {path}: {e}.") from None
    return sorted(_url(fs, i["name"]) for i in infos if not dirs_only or i.get("type") == "directory")


def join(path: str, *parts: str) -> str:
    return "/".join([path.rstrip("/"), *parts]) if is_url(path) else str(Path(path, *parts))


def parent(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[0] if is_url(path) else str(Path(path).parent)


def read_text(path: str) -> str | None:
    """A small file's text (``rooflens.json``), or None when it is not there."""
    if not is_url(path):
        p = Path(path)
        return p.read_text() if p.is_file() else None
    fs, p = _fs(path)
    try:
        if not fs.isfile(p):
            return None
        with fs.open(p, "rb") as fh:
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return None


@contextmanager
def local_copy(path: str):
    """A local path for ``path``: itself, or a temporary copy of a remote file (removed after)."""
    if not is_url(path):
        yield Path(path)
        return
    fs, p = _fs(path)
    tmp = tempfile.mkdtemp(prefix="rooflens-")
    local = Path(tmp) / p.rstrip("/").rsplit("/", 1)[-1]
    try:
        try:
            fs.get(p, str(local))
        except OSError as e:
            raise RooflensError(f"cannot read {path}: {e}.") from None
        yield local
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
