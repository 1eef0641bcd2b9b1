"""One columnar table of device op events, whatever the trace came from.

Strings (hosts, lines, op names, programs) are stored once in a vocabulary and referenced by
integer codes, so a million events are a handful of numpy arrays, and grouping by op or device
is a vectorised ``np.unique``/``bincount`` away.
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass, field

import numpy as np


class Vocab:
    """Interns strings to dense integer codes."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.words: list[str] = []

    def code(self, word: str) -> int:
        c = self.index.get(word)
        if c is None:
            c = self.index[word] = len(self.words)
            self.words.append(word)
        return c


@dataclass
class EventTable:
    """Device op events: one row per op execution (per kernel on GPU). Times in ns from the
    start of the capture; ``step`` is -1 outside any step."""

    host: np.ndarray  # int32 codes into hosts
    device: np.ndarray  # int32: device id (TPU/GPU plane N, CPU device ordinal); -1 when unknown
    line: np.ndarray  # int32 codes into lines (thread or stream)
    name: np.ndarray  # int32 codes into names (HLO instruction name)
    program: np.ndarray  # int32 codes into programs (HLO module)
    start_ns: np.ndarray  # float64
    dur_ns: np.ndarray  # float64
    step: np.ndarray  # int32
    hosts: list[str]
    lines: list[str]
    names: list[str]
    programs: list[str]
    hlo_text: dict[tuple[str, str], str] = field(default_factory=dict)  # (program, op) → instruction text
    op_meta: dict[tuple[str, str], dict] = field(default_factory=dict)  # (program, op) → the trace's own stats
    program_keys: dict[str, str] = field(default_factory=dict)  # shown name → "name(program_id)" when known

    def __len__(self) -> int:
        return len(self.start_ns)

    @property
    def end_ns(self) -> np.ndarray:
        return self.start_ns + self.dur_ns


class TableBuilder:
    """Collects rows (in Python lists, then one conversion to numpy)."""

    def __init__(self) -> None:
        self.hosts, self.lines, self.names, self.programs = Vocab(), Vocab(), Vocab(), Vocab()
        # compact typed buffers (4 or 8 bytes a value), not lists of Python objects: a trace of tens of
        # millions of events must fit in memory next to the parsed XSpace
        self.cols: dict[str, array] = {k: array("i") for k in ("host", "device", "line", "name", "program")}
        self.cols.update(start=array("d"), dur=array("d"))
        self.hlo_text: dict[tuple[str, str], str] = {}
        self.op_meta: dict[tuple[str, str], dict] = {}
        self.program_keys: dict[str, str] = {}

    def _plain_program_names(self) -> None:
        """Programs are recorded as ``name(program_id)``; keep the id only where one name was
        compiled more than once (a recompilation), so one trace's names match across formats."""
        rename = _plain_program_names_of(self.programs.words)
        self.program_keys = {plain: raw for raw, plain in rename.items() if raw != plain}
        words = [rename.get(w, w) for w in self.programs.words]
        self.hlo_text = {(rename.get(p, p), n): v for (p, n), v in self.hlo_text.items()}
        self.op_meta = {(rename.get(p, p), n): v for (p, n), v in self.op_meta.items()}
        self.programs.words = words
        self.programs.index = {w: i for i, w in enumerate(words)}

    def add(self, host: str, device: int, line: str, name: str, program: str, start_ns: float, dur_ns: float) -> None:
        c = self.cols
        c["host"].append(self.hosts.code(host))
        c["device"].append(device)
        c["line"].append(self.lines.code(line))
        c["name"].append(self.names.code(name))
        c["program"].append(self.programs.code(program))
        c["start"].append(start_ns)
        c["dur"].append(dur_ns)

    def build(self) -> EventTable:
        self._plain_program_names()
        c = {k: np.frombuffer(v, dtype=np.float64 if v.typecode == "d" else np.intc) for k, v in self.cols.items()}
        start = c["start"]
        order = np.argsort(start, kind="stable")
        return EventTable(
            host=c["host"][order].astype(np.int32),
            device=c["device"][order].astype(np.int32),
            line=c["line"][order].astype(np.int32),
            name=c["name"][order].astype(np.int32),
            program=c["program"][order].astype(np.int32),
            start_ns=start[order],
            dur_ns=c["dur"][order],
            step=np.full(len(start), -1, dtype=np.int32),
            hosts=self.hosts.words, lines=self.lines.words, names=self.names.words, programs=self.programs.words,
            hlo_text=self.hlo_text, op_meta=self.op_meta, program_keys=self.program_keys,
        )


_ID_RE = re.compile(r"^(.*)\((\d+)\)$")


def _plain_program_names_of(words: list[str]) -> dict[str, str]:
    """``jit_f(12)`` → ``jit_f`` where the trace ran only one program of that name."""
    bases: dict[str, set[str]] = {}
    for w in words:
        m = _ID_RE.match(w)
        bases.setdefault(m.group(1) if m else w, set()).add(w)
    return {w: base for base, ws in bases.items() if len(ws) == 1 for w in ws}


def concat(tables: list[EventTable]) -> EventTable:
    """Several hosts' tables as one (codes remapped into merged vocabularies)."""
    if len(tables) == 1:
        return tables[0]
    merged = {k: Vocab() for k in ("hosts", "lines", "names", "programs")}
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("host", "line", "name", "program")}
    for t in tables:
        for col, voc in (("host", "hosts"), ("line", "lines"), ("name", "names"), ("program", "programs")):
            remap = np.asarray([merged[voc].code(w) for w in getattr(t, voc)] or [0], dtype=np.int32)
            parts[col].append(remap[getattr(t, col)] if len(t) else np.zeros(0, np.int32))
    start = np.concatenate([t.start_ns for t in tables])
    order = np.argsort(start, kind="stable")
    hlo_text, op_meta, keys = {}, {}, {}
    for t in tables:
        hlo_text.update(t.hlo_text)
        op_meta.update(t.op_meta)
        keys.update(t.program_keys)
    return EventTable(
        host=np.concatenate(parts["host"])[order], device=np.concatenate([t.device for t in tables])[order],
        line=np.concatenate(parts["line"])[order], name=np.concatenate(parts["name"])[order],
        program=np.concatenate(parts["program"])[order], start_ns=start[order],
        dur_ns=np.concatenate([t.dur_ns for t in tables])[order], step=np.concatenate([t.step for t in tables])[order],
        hosts=merged["hosts"].words, lines=merged["lines"].words, names=merged["names"].words,
        programs=merged["programs"].words, hlo_text=hlo_text, op_meta=op_meta, program_keys=keys,
    )
