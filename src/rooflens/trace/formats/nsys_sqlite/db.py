"""An Nsight Systems SQLite export, read a table at a time into numpy columns.

The schema is Nsight's own (``nsys export --type sqlite``; schema 3.25 from nsys 2026.2 in the
fixtures): ``CUPTI_ACTIVITY_KIND_KERNEL``/``_MEMCPY``/``_MEMSET`` (device work: ``start``/``end`` in ns,
``deviceId``, ``streamId``, ``correlationId``, ``globalPid``; a kernel's names are ``StringIds`` ids),
``CUPTI_ACTIVITY_KIND_RUNTIME`` (CUDA runtime and driver calls: ``globalTid``, ``correlationId`` equal
to the work they launched), ``NVTX_EVENTS`` (``text`` inline, or ``textId`` → ``StringIds``),
``TARGET_INFO_GPU`` (absent from some exports), ``TARGET_INFO_SESSION_START_TIME``, ``ANALYSIS_DETAILS``.
A ``globalTid`` is ``globalPid | tid`` (the process in bits 24 and up, Nsight's serialized GlobalId).

Each query selects integer columns only (NULLs made -1 in SQL) and becomes one int64 array through
``np.fromiter``: sqlite3's row tuples are the only Python objects per row. The database is opened
read-only and immutable, so nothing (no journal, no lock file) is ever written beside it.
"""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path
from urllib.parse import quote

import numpy as np

from rooflens.errors import RooflensError

KERNEL, MEMCPY, MEMSET = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME, NVTX, STRINGS = "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "StringIds"
SQLITE_MAGIC = b"SQLite format 3\x00"
TID_BITS = 24  # a globalTid's thread id; the rest is its globalPid
#: ENUM_NSYS_EVENT_TYPE's NvtxPushPopRange: a range pushed and popped on one thread (ids of nsys 2026.2)
PUSH_POP = "NvtxPushPopRange"
PUSH_POP_ID = 59


def _uri(path: Path) -> str:
    return f"file:{quote(str(path.resolve()))}?mode=ro&immutable=1"


def is_nsys_export(path: str) -> bool:
    """Whether ``path`` is an Nsight Systems SQLite export, by its content: an SQLite database with
    Nsight's kernel table, or its NVTX and string tables. A remote path is judged by its name."""
    if "://" in path:
        return path.endswith(".sqlite")
    try:
        with open(path, "rb") as fh:
            if fh.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
                return False
        with Export(Path(path)) as db:
            return db.is_nsys()
    except (OSError, RooflensError):
        return False


class Export:
    """One export, open read-only."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            with open(path, "rb") as fh:
                head = fh.read(len(SQLITE_MAGIC))
        except OSError as e:
            raise RooflensError(f"cannot read {path}: {e.strerror or e}.") from None
        if head != SQLITE_MAGIC:
            raise RooflensError(f"{path} is not an SQLite database (an Nsight Systems export, "
                                "`nsys export --type sqlite`, is one).")
        try:
            self.con = sqlite3.connect(_uri(path), uri=True, check_same_thread=False)
            self.tables = {r[0] for r in self.con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        except sqlite3.Error as e:
            raise RooflensError(f"{path} is a damaged or truncated SQLite database ({e}).") from None
        self._columns: dict[str, set[str]] = {}

    def __enter__(self) -> Export:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.con.close()

    def is_nsys(self) -> bool:
        return KERNEL in self.tables or {STRINGS, NVTX} <= self.tables

    def has(self, table: str) -> bool:
        return table in self.tables

    def columns(self, table: str) -> set[str]:
        if table not in self._columns:
            self._columns[table] = {r[1] for r in self._run(f"PRAGMA table_info({table})")} if self.has(table) \
                else set()
        return self._columns[table]

    def _run(self, sql: str, params: tuple = ()) -> sqlite3.Cursor:
        try:
            return self.con.execute(sql, params)
        except sqlite3.Error as e:
            raise RooflensError(f"{self.path} is damaged or truncated, or an Nsight export this reader does not "
                                f"know ({e}).") from None

    def ints(self, sql: str, ncols: int, params: tuple = ()) -> np.ndarray:
        """An all-integer query as an int64 array of shape (rows, ncols)."""
        cur = self._run(sql, params)
        try:
            flat = np.fromiter(itertools.chain.from_iterable(cur), np.int64)
        except sqlite3.Error as e:
            raise RooflensError(f"{self.path} is damaged or truncated ({e}).") from None
        except (TypeError, ValueError, OverflowError) as e:  # a NULL or text where Nsight writes integers
            raise RooflensError(f"{self.path} holds a value this reader cannot read as an integer ({e}).") from None
        return flat.reshape(-1, ncols)

    def script(self, sql: str) -> None:
        """Statements that change nothing in the export (temporary tables, pragmas)."""
        try:
            self.con.executescript(sql)
        except sqlite3.Error as e:
            raise RooflensError(f"{self.path} is damaged or truncated ({e}).") from None

    def rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        try:
            return self._run(sql, params).fetchall()
        except sqlite3.Error as e:
            raise RooflensError(f"{self.path} is damaged or truncated ({e}).") from None

    def strings(self, ids_sql: str) -> dict[int, str]:
        """``StringIds`` values for the ids a query selects (one column)."""
        if not self.has(STRINGS):
            return {}
        return dict(self.rows(f"SELECT id, value FROM {STRINGS} WHERE id IN ({ids_sql})"))

    def event_type(self, name: str, default: int) -> int:
        """An ``ENUM_NSYS_EVENT_TYPE`` id by name (the export's own table where it has one)."""
        if self.has("ENUM_NSYS_EVENT_TYPE"):
            got = self.rows("SELECT id FROM ENUM_NSYS_EVENT_TYPE WHERE name = ?", (name,))
            if got:
                return int(got[0][0])
        return default

    def records(self, table: str) -> list[dict]:
        """Every row of a (small) table, as dicts by column name."""
        if not self.has(table):
            return []
        cur = self._run(f"SELECT * FROM {table}")
        names = [d[0] for d in cur.description]
        try:
            return [dict(zip(names, r)) for r in cur.fetchall()]
        except sqlite3.Error as e:
            raise RooflensError(f"{self.path} is damaged or truncated ({e}).") from None

    def first(self, sql: str):
        got = self.rows(sql)
        return got[0] if got else None
