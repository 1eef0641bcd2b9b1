"""An Nsight Systems SQLite export, read a table at a time into numpy columns.

The schema is Nsight's own (``nsys export --type sqlite``; schema 3.25 from nsys 2026.2 in the
fixtures): ``CUPTI_ACTIVITY_KIND_KERNEL``/``_MEMCPY``/``_MEMSET`` (device work: ``start``/``end`` in ns,
``deviceId``, ``streamId``, ``correlationId``, ``globalPid``; a kernel's names are ``StringIds`` ids),
``CUPTI_ACTIVITY_KIND_RUNTIME`` (CUDA runtime and driver calls: ``globalTid``, ``correlationId`` equal
to the work they launched), ``NVTX_EVENTS`` (``text`` inline, or ``textId`` → ``StringIds``),
``TARGET_INFO_GPU`` (absent from some exports), ``TARGET_INFO_SESSION_START_TIME``, ``ANALYSIS_DETAILS``.
A ``globalTid`` is ``globalPid | tid`` (the process in bits 24 and up, Nsight's serialized GlobalId).

A large query is read columnar, into an Arrow table (:meth:`Export.table`): through the ADBC SQLite driver
(``adbc-driver-sqlite``, a core dependency: SQLite's rows straight into Arrow buffers in C, no Python object per
row, about 3x a ``sqlite3`` fetchall of the same rows), or, where that driver cannot be loaded, through ``sqlite3``
into the same Arrow table (``ROOFLENS_SQLITE=sqlite3`` picks it; both give identical tables). A large export's
big tables are read from the file's own pages instead (:mod:`.pages`, :meth:`Export.scan`; ``ROOFLENS_SQLITE=pages``
for any size, ``=adbc`` never). Integer columns
(NULLs made -1 in SQL) become int64 arrays; text stays Arrow strings, coded in Arrow (:mod:`.tables`). Small
tables (strings, GPUs, the clock) go through ``sqlite3``. The database is opened read-only and immutable, so
nothing (no journal, no lock file) is ever written beside it.
"""

from __future__ import annotations

import os
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
#: an export at least this large is read from its pages (:mod:`.pages`, compiled) even when numba is not loaded yet:
#: numba's import and load (~0.5-1 s of CPU on a 2-core machine) is what ADBC takes for ~1 M rows, ~80 MB of export
PAGES_MIN_BYTES = 64 << 20


def _uri(path: Path) -> str:
    return f"file:{quote(str(path.resolve()))}?mode=ro&immutable=1"


def _arrow_column(values: tuple):
    """A column of Python values (sqlite3's) as an Arrow array typed as the ADBC driver types it: integers int64,
    text string; a column of integers and text is text; one of NULLs only is int64."""
    import pyarrow as pa

    kinds = {type(v) for v in values} - {type(None)}
    if not kinds:
        return pa.array(values, pa.int64())
    if str in kinds:
        return pa.array([v if v is None or isinstance(v, str) else str(v) for v in values], pa.string())
    return pa.array(values)


class Scan:
    """A table's integer columns (``ints``: int64, 0 where NULL; ``nulls``: where NULL) and a text column coded
    (``codes``: -1 where NULL; ``words``)."""

    def __init__(self, path: Path, ints: dict, nulls: dict, codes, words: list[str]) -> None:
        self.path, self.ints, self.nulls, self.codes, self.words = path, ints, nulls, codes, words

    def __len__(self) -> int:
        return len(next(iter(self.ints.values()))) if self.ints else 0

    def get(self, col: str, default: int | None = None, rows: np.ndarray | None = None) -> np.ndarray:
        """A column (of ``rows`` only, when given) with NULLs made ``default`` (SQL's COALESCE); ``default`` None: a
        NULL is an error."""
        v, null = self.ints[col], self.nulls[col]
        if rows is not None:
            v, null = v[rows], null[rows]
        if not null.any():
            return v
        if default is None:
            raise RooflensError(f"{self.path} holds a value this reader cannot read as an integer (its {col!r} "
                                f"values are int64, {int(null.sum())} of them NULL).")
        return np.where(null, default, v)


def literal_pattern(cut: tuple[str, ...]) -> str:
    """A regular expression (RE2's syntax and Python's) matching a text's tail from the first of the literals."""
    assert all(c.isalnum() or c in " ,=_" for a in cut for c in a)  # literal in both syntaxes
    return "(?s)(?:" + "|".join(cut) + ").*$"


def coded(text, cut: tuple[str, ...]) -> tuple[np.ndarray, list[str]]:
    """An Arrow string column's values cut at the first of the literals ``cut``, coded (-1: NULL) in Arrow: no
    Python string per row (codes in order of first appearance)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not len(text):
        return np.zeros(0, np.int64), []
    if not pa.types.is_string(text.type) and not pa.types.is_large_string(text.type):
        text = pc.cast(text, pa.string())
    if cut:
        text = pc.replace_substring_regex(text, pattern=literal_pattern(cut), replacement="")
    enc = pc.dictionary_encode(text)
    enc = enc.combine_chunks() if isinstance(enc, pa.ChunkedArray) else enc
    return enc.indices.fill_null(-1).to_numpy().astype(np.int64), enc.dictionary.to_pylist()


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
            # text that is not UTF-8 (a damaged page) is read with U+FFFD in place, as the pages reader reads it
            self.con.text_factory = lambda b: b.decode("utf-8", "replace")
            self.tables = {r[0] for r in self.con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        except (sqlite3.Error, UnicodeDecodeError) as e:  # a damaged schema words its error in bytes
            raise RooflensError(f"{path} is a damaged or truncated SQLite database ({e}).") from None
        self._columns: dict[str, set[str]] = {}
        self._file = None  # the pages reader's map of the file (pages.File), made on the first scan
        self._arrow = None  # the ADBC connection, opened on the first large query (None: not yet; False: sqlite3)
        self._pool = None  # the thread prefetch reads on
        self._ahead: dict = {}  # prefetch's reads under way, by scan's arguments

    @property
    def reads_through(self) -> str:
        """Which library reads the large queries: ``"adbc"`` or ``"sqlite3"``."""
        return "adbc" if self._adbc() else "sqlite3"

    def __enter__(self) -> Export:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool, self._ahead = None, {}
        self._file = None
        if self._arrow:
            self._arrow.close()
        self.con.close()

    def _adbc(self):
        """The ADBC connection (opened once), or None where the driver cannot be loaded or is not wanted."""
        if self._arrow is None:
            self._arrow = False
            if os.environ.get("ROOFLENS_SQLITE", "").strip().lower() != "sqlite3":
                try:
                    from adbc_driver_sqlite import dbapi
                except ImportError:  # no wheel for this platform: sqlite3 reads the same tables, slower
                    return None
                try:
                    self._arrow = dbapi.connect(_uri(self.path))
                except dbapi.Error as e:
                    raise RooflensError(f"{self.path} is a damaged or truncated SQLite database ({e}).") from None
        return self._arrow or None

    def table(self, sql: str):
        """A query's rows as a ``pyarrow.Table`` (column types as SQLite's values have them)."""
        import pyarrow as pa

        fast = self._adbc()
        if fast is not None:
            from adbc_driver_sqlite import dbapi

            cur = fast.cursor()
            try:
                cur.execute(sql)
                return cur.fetch_arrow_table()
            except dbapi.Error as e:
                raise RooflensError(f"{self.path} is damaged or truncated, or an Nsight export this reader does "
                                    f"not know ({e}).") from None
            finally:
                cur.close()
        cur = self._run(sql)
        names = [d[0] for d in cur.description]
        try:
            rows = cur.fetchall()
        except (sqlite3.Error, UnicodeDecodeError) as e:  # a damaged schema words its error in bytes
            raise RooflensError(f"{self.path} is damaged or truncated ({e}).") from None
        cols = list(zip(*rows)) if rows else [()] * len(names)
        try:
            return pa.table([_arrow_column(c) for c in cols], names=names)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
            raise RooflensError(f"{self.path} holds a value this reader cannot read ({e}).") from None

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
        except (sqlite3.Error, UnicodeDecodeError) as e:  # a damaged schema words its error in bytes
            raise RooflensError(f"{self.path} is damaged or truncated, or an Nsight export this reader does not "
                                f"know ({e}).") from None

    def scan(self, table: str, cols: list[str], text: str | None = None, cut: tuple[str, ...] = ()) -> Scan:
        """Integer columns ``cols`` of a whole table (every row, in rowid order) with their NULL masks, and a text
        column coded (cut at the first of the literals ``cut`` it holds; codes in order of first appearance): from
        the file's pages (:mod:`.pages`) where that reader takes the table, else through SQL (:meth:`table`)."""
        fast = self.scan_pages(table, cols, text, cut)
        if fast is not None:
            return fast
        names = ", ".join(f'"{c}"' for c in cols) + (f', "{text}"' if text else "")
        got = self.table(f"SELECT {names} FROM {table}")
        import pyarrow as pa

        ints, nulls = {}, {}
        for i, c in enumerate(cols):
            col = got.column(i)
            if col.null_count == len(col) and len(col):
                col = col.cast(pa.int64())
            if len(col) and not pa.types.is_integer(col.type):
                raise RooflensError(f"{self.path} holds a value this reader cannot read as an integer (its {c!r} "
                                    f"values are {col.type}).")
            nulls[c] = col.is_null().to_numpy(zero_copy_only=False) if len(col) else np.zeros(0, bool)
            ints[c] = col.fill_null(0).to_numpy().astype(np.int64) if len(col) else np.zeros(0, np.int64)
        codes, words = coded(got.column(len(cols)), cut) if text else (None, [])
        return Scan(self.path, ints, nulls, codes, words)

    def scan_pages(self, table: str, cols: list[str], text: str | None, cut: tuple[str, ...]) -> Scan | None:
        """:meth:`scan` from the file's pages (:mod:`.pages`); None where that reader declines the table, or is not
        wanted (``ROOFLENS_SQLITE``; a small export while numba is not loaded)."""
        key = (table, tuple(cols), text, cut)
        if key in self._ahead:  # begun by prefetch
            return self._ahead.pop(key).result()
        read = self._page_reader(table, cols, text, cut)
        return read() if read is not None else None

    def prefetch(self, table: str, cols: list[str], text: str | None = None, cut: tuple[str, ...] = ()) -> None:
        """Begin :meth:`scan` of ``table`` from its pages on another thread (the compiled reader lets go of the GIL:
        the 1.5 M NVTX rows of a large export are read while the kernels and runtime calls are); the same call of
        :meth:`scan` later takes its result. Nothing is begun where the pages reader would not be used."""
        read = self._page_reader(table, cols, text, cut)
        if read is None:
            return
        from concurrent.futures import ThreadPoolExecutor

        from rooflens.trace.formats import compiled

        compiled.compile_kernels()  # loaded here, once: not by two threads at once
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="rooflens-pages")
        self._ahead[(table, tuple(cols), text, cut)] = self._pool.submit(read)

    def _page_reader(self, table: str, cols: list[str], text: str | None, cut: tuple[str, ...]):
        """What reads ``table`` from its pages, as a call that touches no SQLite connection (any thread may make
        it; its result is a :class:`Scan`, or None where the pages reader declines); None where it is not used."""
        how = os.environ.get("ROOFLENS_SQLITE", "").strip().lower()
        if how in ("sqlite3", "adbc"):
            return None
        from rooflens.trace.formats import compiled

        if how != "pages" and not compiled.loaded() and self.path.stat().st_size < PAGES_MIN_BYTES:
            return None  # a small export: SQL reads it before numba would have loaded
        info = self.rows(f"PRAGMA table_info({table})")
        order = {r[1]: r[0] for r in info}
        pk = [r[0] for r in info if r[5]]
        row = self.first(f"SELECT rootpage, sql FROM sqlite_master WHERE type = 'table' AND name = '{table}'")
        if row is None or not isinstance(row[0], int) or "WITHOUT ROWID" in str(row[1]).upper() or \
                any(c not in order for c in cols) or (text is not None and text not in order):
            return None
        pk_col = pk[0] if len(pk) == 1 and str(info[pk[0]][2]).upper() == "INTEGER" else -1
        from rooflens.trace.formats.nsys_sqlite import pages

        try:
            if self._file is None:
                self._file = pages.File(self.path)
        except (OSError, ValueError):
            return None
        file, root, ncols = self._file, int(row[0]), len(info)

        def read() -> Scan | None:
            try:
                got = file.scan(root, ncols, [order[c] for c in cols], pk_col, order[text] if text else -1, cut)
            except (OSError, ValueError, IndexError):  # a file that changed or is cut under us: SQL says what
                return None
            if got is None:
                return None
            ints, nulls, coded_text = got
            codes, words = coded_text if coded_text is not None else (None, [])
            return Scan(self.path, {c: ints[k] for k, c in enumerate(cols)},
                        {c: nulls[k] for k, c in enumerate(cols)}, codes, words)

        return read

    def rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        try:
            return self._run(sql, params).fetchall()
        except (sqlite3.Error, UnicodeDecodeError) as e:  # a damaged schema words its error in bytes
            raise RooflensError(f"{self.path} is damaged or truncated ({e}).") from None

    def strings(self, ids_sql: str) -> dict[int, str]:
        """``StringIds`` values for the ids a query selects (one column), or a list of ids."""
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
        except (sqlite3.Error, UnicodeDecodeError) as e:  # a damaged schema words its error in bytes
            raise RooflensError(f"{self.path} is damaged or truncated ({e}).") from None

    def first(self, sql: str):
        got = self.rows(sql)
        return got[0] if got else None
