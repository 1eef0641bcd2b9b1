"""One columnar table of device op events, whatever the trace came from.

Strings (hosts, lines, op names, programs) are stored once in a vocabulary and referenced by
integer codes, so a million events are a handful of numpy arrays, and grouping by op or device
is a vectorised ``np.unique``/``bincount`` away.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from rooflens.errors import RooflensError


class Vocab:
    """Interns strings to dense integer codes."""

    def __init__(self, words: list[str] | None = None) -> None:
        self.words: list[str] = []
        self.index: dict[str, int] = {}
        for w in words or ():
            self.index.setdefault(w, len(self.words))
            self.words.append(w)

    def code(self, word: str) -> int:
        c = self.index.get(word)
        if c is None:
            c = self.index[word] = len(self.words)
            self.words.append(word)
        return c


@dataclass
class EventTable:
    """Device op events: one row per op execution (per kernel on GPU). Times are integer picoseconds
    from ``origin_ns`` (the trace's own clock, ns since the epoch where it says so); ``step`` is -1
    outside any step."""

    host: np.ndarray  # int32 codes into hosts
    device: np.ndarray  # int32: device id (TPU/GPU plane N, CPU device ordinal); -1 when unknown
    line: np.ndarray  # int32 codes into lines (thread or stream)
    name: np.ndarray  # int32 codes into names (HLO instruction name)
    program: np.ndarray  # int32 codes into programs (HLO module)
    start_ps: np.ndarray  # int64
    dur_ps: np.ndarray  # int64
    step: np.ndarray  # int32
    hosts: list[str]
    lines: list[str]
    names: list[str]
    programs: list[str]
    hlo_text: dict[tuple[str, str], str] = field(default_factory=dict)  # (program, op) → instruction text
    op_meta: dict[tuple[str, str], dict] = field(default_factory=dict)  # (program, op) → the trace's own stats
    program_keys: dict[str, str] = field(default_factory=dict)  # shown name → "name(program_id)" when known
    origin_ns: int = 0
    #: per event, what a host↔device copy moved (bytes; -1: not a copy or not said) and whether its host memory was
    #: page-locked (1 pinned, 0 pageable, -1 not said), where the trace records them per copy (Nsight's memcpy
    #: rows); None: the trace says neither. Not an op's memory traffic: the roofline prices ops from their HLO
    copy_bytes: np.ndarray | None = None
    host_pinned: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.start_ps)

    @cached_property
    def start_ns(self) -> np.ndarray:
        """Start times in ns (float64) from the origin: for arithmetic that needs no picoseconds."""
        return self.start_ps * 1e-3

    @cached_property
    def dur_ns(self) -> np.ndarray:
        return self.dur_ps * 1e-3

    @property
    def end_ns(self) -> np.ndarray:
        """End times in ns (float64), made anew on each call and not held (a 6 M-event table's are 50 MB, most
        of it at the op stats' peak): for a pass over every event; some events' through :meth:`end_ns_at`."""
        return (self.start_ps + self.dur_ps) * 1e-3

    def end_ns_at(self, rows) -> np.ndarray:
        """The end times in ns of the events ``rows`` (indices, a mask or a slice), as :attr:`end_ns` has them."""
        return (self.start_ps[rows] + self.dur_ps[rows]) * 1e-3

    @cached_property
    def extent_ns(self) -> tuple[float, float]:
        """The first event's start and the last event's end (ns from the origin, as ``start_ns.min()`` and
        ``end_ns.max()`` give them; (0, 0) without events), without making a column of end times: a pass in
        blocks (a 6 M-event table's end times took 0.1 s to make, for their maximum alone)."""
        if not len(self):
            return 0.0, 0.0
        last = last_end_ps(self.start_ps, self.dur_ps)
        return float(np.float64(self.start_ps.min()) * 1e-3), float(np.float64(last) * 1e-3)

    @cached_property
    def program_busy_ns(self) -> np.ndarray:
        """Each program code's summed op time (ns, every device; read-only): the step model and the memory view ask
        for it several times, each a pass over the events; a large table's is remembered (:mod:`.memo`)."""
        from rooflens.trace import memo

        return memo.remembered("program_busy", (memo.table_digest(self, steps=False),), len(self),
                               lambda: np.bincount(self.program, weights=self.dur_ns, minlength=len(self.programs)))

    def select(self, rows: np.ndarray) -> EventTable:
        """The events ``rows`` (indices or a mask), with the same vocabularies."""
        return replace(self, host=self.host[rows], device=self.device[rows], line=self.line[rows],
                       name=self.name[rows], program=self.program[rows], start_ps=self.start_ps[rows],
                       dur_ps=self.dur_ps[rows], step=self.step[rows],
                       copy_bytes=None if self.copy_bytes is None else self.copy_bytes[rows],
                       host_pinned=None if self.host_pinned is None else self.host_pinned[rows])

    def pairs(self) -> np.ndarray:
        """The distinct (program code, name code) pairs, as rows (read-only: made once per table, which the HLO's
        printing and the ops' categories both ask for)."""
        return self._pairs

    @cached_property
    def _pairs(self) -> np.ndarray:
        if not len(self):
            return np.zeros((0, 2), np.int64)
        from rooflens.trace import memo

        return memo.remembered("pairs", (memo.table_digest(self, steps=False),), len(self), self._distinct_pairs)

    def _distinct_pairs(self) -> np.ndarray:
        from rooflens.trace.groupby import unique_values

        key = unique_values(self.program.astype(np.int64) * (len(self.names) + 1) + self.name)
        return np.stack([key // (len(self.names) + 1), key % (len(self.names) + 1)], axis=1)


def last_end_ps(start_ps: np.ndarray, dur_ps: np.ndarray) -> int:
    """The latest ``start + dur`` of the events (0 without events), a million at a time: no event-sized temporary
    while the columns are held."""
    block = 1 << 20
    return max((int((start_ps[k:k + block] + dur_ps[k:k + block]).max()) for k in range(0, len(start_ps), block)),
               default=0)


def unique_rows(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of integer columns (as an [n, k] array, in lexicographic order) and each row's
    index in them: ``np.unique(..., axis=0)`` without its slow sort of structured rows."""
    n = len(cols[0])
    if not n:
        return np.zeros((0, len(cols)), np.int64), np.zeros(0, np.int64)
    from rooflens.trace.groupby import any_index, unique_inverse

    cols = tuple(np.asarray(c) for c in cols)
    radix = _radix(cols)
    if radix is not None:  # one key per row; the distinct rows are its digits
        key, spans = radix
        u, inv = unique_inverse(key)
        rows = np.empty((len(u), len(cols)), np.int64)
        rest = u.copy()
        for j in range(len(cols) - 1, -1, -1):
            lo, span = spans[j]
            rows[:, j] = rest % span + lo
            rest //= span
        return rows, inv
    key = np.zeros(n, np.int64)  # the columns' ranges multiply past int64: rank each column first
    for c in cols:
        u, inv = unique_inverse(c)
        key = key * len(u) + inv
    u, inv = unique_inverse(key)
    first = any_index(inv, len(u))  # any row of a group holds its values
    return np.stack([c[first] for c in cols], axis=1).astype(np.int64), inv


def row_key(*cols: np.ndarray) -> tuple[np.ndarray | None, int]:
    """One int64 per row that orders rows as the integer columns do (each column less its minimum, times
    the product of the later columns' ranges), made in one pass per column, and how many keys are
    possible (the product of the ranges); ``(None, 0)`` when that would overflow."""
    radix = _radix(tuple(np.asarray(c) for c in cols))
    if radix is None:
        return None, 0
    key, spans = radix
    total = 1
    for _, span in spans:
        total *= span
    return key, total


def _radix(cols: tuple) -> tuple[np.ndarray, list[tuple[int, int]]] | None:
    """:func:`row_key`'s key and each column's (minimum, range)."""
    spans = []
    for c in cols:
        if c.dtype.kind not in "iu" or c.dtype == np.uint64:
            return None
        lo, hi = (int(c.min()), int(c.max())) if len(c) else (0, 0)
        spans.append((lo, hi - lo + 1))
    total = 1
    for _, span in spans:
        total *= span
    if total >= 1 << 62:
        return None
    from rooflens.trace.groupby import radix_step

    key = np.zeros(len(cols[0]), np.int64)
    for c, (lo, span) in zip(cols, spans):
        if c.dtype.kind == "u":  # (the compiled step would mix unsigned and signed arithmetic)
            c = c.astype(np.int64)
        radix_step(key, c, span, lo)
    return key, spans


def vocab(codes: np.ndarray, words: list[str]) -> tuple[np.ndarray, list[str]]:
    """Re-code ``codes`` (indices into ``words``, which may repeat a word) to a vocabulary of
    distinct words, in first-seen order of the vocabulary."""
    index: dict[str, int] = {}
    remap = np.empty(max(len(words), 1), np.int32)
    for k, w in enumerate(words):
        remap[k] = index.setdefault(w, len(index))
    return (remap[codes] if len(codes) else codes.astype(np.int32)), list(index)


def build(host: np.ndarray, device: np.ndarray, line: np.ndarray, name: np.ndarray, program: np.ndarray,
          start_ps: np.ndarray, dur_ps: np.ndarray, hosts: list[str], lines: list[str], names: list[str],
          programs: list[str], origin_ns: int = 0, hlo_text: dict | None = None, op_meta: dict | None = None,
          copy_bytes: np.ndarray | None = None, host_pinned: np.ndarray | None = None) -> EventTable:
    """An EventTable sorted by start, with program names made plain where that is unambiguous."""
    line, lines = vocab(np.asarray(line), lines)
    name, names = vocab(np.asarray(name), names)
    rename = _plain_program_names_of(programs)
    program, programs = vocab(np.asarray(program), [rename.get(w, w) for w in programs])
    keys = {plain: raw for raw, plain in rename.items() if raw != plain}
    from rooflens.trace.groupby import is_sorted

    start_ps = np.asarray(start_ps, np.int64)
    n = len(start_ps)
    in_order = is_sorted(start_ps)  # a reader that sorted already
    order = slice(None) if in_order else np.argsort(start_ps, kind="stable")

    def col(a, dtype) -> np.ndarray:
        a = np.asarray(a, dtype)
        return a if in_order else a[order]

    return EventTable(
        host=col(host, np.int32), device=col(device, np.int32), line=col(line, np.int32),
        name=col(name, np.int32), program=col(program, np.int32), start_ps=col(start_ps, np.int64),
        dur_ps=col(dur_ps, np.int64), step=np.full(n, -1, np.int32), hosts=list(hosts),
        lines=lines, names=names, programs=programs, origin_ns=origin_ns,
        hlo_text={(rename.get(p, p), k): v for (p, k), v in (hlo_text or {}).items()},
        op_meta={(rename.get(p, p), k): v for (p, k), v in (op_meta or {}).items()}, program_keys=keys,
        copy_bytes=None if copy_bytes is None else col(copy_bytes, np.int64),
        host_pinned=None if host_pinned is None else col(host_pinned, np.int8))


_ID_RE = re.compile(r"^(.*)\((\d+)\)$")


def _plain_program_names_of(words: list[str]) -> dict[str, str]:
    """``jit_f(12)`` → ``jit_f`` where the trace ran only one program of that name."""
    bases: dict[str, set[str]] = {}
    for w in words:
        m = _ID_RE.match(w)
        bases.setdefault(m.group(1) if m else w, set()).add(w)
    return {w: base for base, ws in bases.items() if len(ws) == 1 for w in ws}


def concat(tables: list[EventTable]) -> EventTable:
    """Several hosts' tables as one: codes remapped into merged vocabularies, times onto the
    earliest origin."""
    if len(tables) == 1:
        return tables[0]
    merged = {k: Vocab() for k in ("hosts", "lines", "names", "programs")}
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("host", "line", "name", "program")}
    origin = min(t.origin_ns for t in tables)
    for t in tables:
        for col, voc in (("host", "hosts"), ("line", "lines"), ("name", "names"), ("program", "programs")):
            remap = np.asarray([merged[voc].code(w) for w in getattr(t, voc)] or [0], dtype=np.int32)
            parts[col].append(remap[getattr(t, col)] if len(t) else np.zeros(0, np.int32))
    shift_ps = [(t.origin_ns - origin) * 1000 for t in tables]
    last_ps = max(s + (int(t.start_ps.max()) if len(t) else 0) for s, t in zip(shift_ps, tables))
    if last_ps > np.iinfo(np.int64).max:  # int64 picoseconds span ~106 days: these are not one run
        raise RooflensError(f"the traces given start {last_ps / 86400e12:,.0f} days apart (or one has no wall-clock "
                            "time), so they are not one run; report each run on its own.")
    start = np.concatenate([t.start_ps + s for s, t in zip(shift_ps, tables)])
    order = np.argsort(start, kind="stable")
    copies = {}
    for c, dtype in (("copy_bytes", np.int64), ("host_pinned", np.int8)):
        if any(getattr(t, c) is not None for t in tables):  # a table without the column: -1, not said
            copies[c] = np.concatenate([getattr(t, c) if getattr(t, c) is not None else np.full(len(t), -1, dtype)
                                        for t in tables]).astype(dtype, copy=False)[order]
    hlo_text, op_meta, keys = {}, {}, {}
    for t in tables:
        hlo_text.update(t.hlo_text)
        op_meta.update(t.op_meta)
        keys.update(t.program_keys)
    return EventTable(
        host=np.concatenate(parts["host"])[order], device=np.concatenate([t.device for t in tables])[order],
        line=np.concatenate(parts["line"])[order], name=np.concatenate(parts["name"])[order],
        program=np.concatenate(parts["program"])[order], start_ps=start[order],
        dur_ps=np.concatenate([t.dur_ps for t in tables])[order], step=np.concatenate([t.step for t in tables])[order],
        hosts=merged["hosts"].words, lines=merged["lines"].words, names=merged["names"].words,
        programs=merged["programs"].words, hlo_text=hlo_text, op_meta=op_meta, program_keys=keys, origin_ns=origin,
        **copies,
    )
