"""Hosts' clocks aligned on their collectives, where each host's trace keeps a clock of its own.

An Nsight Systems capture times everything from its own session (an nsys-jax archive from the session's start,
an SQLite export from the session's start on the host's clock), one session per process: the processes of one
job do not share a time axis, and on the real 4-process Pax pod (``tests/fixtures/gpu_nvidia/
nsys_jax_pax_fsdp4_a100``) they are up to half a second apart, so the job's steps overlap and every comparison
across hosts (stragglers, step times) measures the clocks. XSpace and Chrome traces take the host's wall
clock (``RawTrace.session_clock`` is False): they are left as they are.

A collective over every device ends at the same instant on all of them (none can finish before the last
one's data arrived; the first to arrive waits inside it), so its end is a mark on every host's clock at
once. For each collective op execution that ran on every host (same program, same op, same execution of
the program, same occurrence within it: a loop runs one collective several times), the end on each host
(the latest of its devices'); a host's offset is the median over those of its end less the reference
host's (the first host that ran any), which a few late or early ends do not move. This is how NVIDIA's
nsys-jax aligns the processes of one job (``align_profiler_data_timestamps`` in NVIDIA/JAX-Toolbox
``nsys_jax/analysis.py``: the median skew of the collectives involving every profiled device). The
offset is taken off the host's origin, which moves all of its times together: op events, steps, host
events, dispatches and where its trace ends.

Only the collectives of XLA programs that ran as many times on every host are used (their k-th executions
are the same one; a trace that began an execution later on one host would pair the wrong ones, and kernels
of no program, such as PyTorch's NCCL calls, have no execution to pair them by). Where none ran on every
host, the hosts stay on their own clocks and a note says so. Pure functions over event tables, vectorised:
no Python object per event.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass

import numpy as np

from rooflens.hlo.opcodes import COLLECTIVE_KINDS
from rooflens.trace.events import EventTable, Vocab, unique_rows
from rooflens.trace.formats.raw import RawTrace
from rooflens.trace.groupby import median, unique_values

#: the collectives whose end is one instant on every device of the group: all of them wait for the last
#: device's data (a collective-permute or send/recv pairs devices, each pair on its own time)
SYNCHRONISING = frozenset({"all-gather", "all-reduce", "reduce-scatter", "all-to-all"})
#: XLA names an instruction after its opcode, then ``.N`` and copies' suffixes (``all-gather-start.3.0``)
_OPCODE = re.compile(r"^[a-z]+(?:-[a-z]+)*")
#: the collective executions a host hands on (the first ones in a fixed order): a median needs few, and a
#: pod's driver keeps every host's
MAX_COLLECTIVES = 4096


@dataclass(frozen=True)
class CollectiveEnds:
    """One host's synchronising collective executions: which (program, op, execution, occurrence) and when
    each ended, in ps from ``origin_ns`` (the latest end over the host's devices)."""

    origin_ns: int
    ops: tuple[tuple[str, str], ...]  # (program, op) of each code in ``op``
    op: np.ndarray  # int32
    run: np.ndarray  # int32: the execution of its program (rooflens.trace.warmup.execution_index)
    occ: np.ndarray  # int32: its occurrence within that execution
    end_ps: np.ndarray  # int64
    runs: tuple[tuple[str, int], ...]  # per program with a collective: its executions on the host (most on a device)

    def __len__(self) -> int:
        return len(self.end_ps)


@dataclass(frozen=True)
class ClockAlignment:
    """Each host's clock against the reference host's, from the collectives that ran on all of them."""

    offset_ns: tuple[float, ...]  # per host: how far its clock reads ahead of the reference's (0: not aligned)
    reference: int  # the host the others are aligned to (-1: none)
    collectives: int  # the collective executions that ran on every aligned host
    aligned: tuple[bool, ...]  # per host: aligned on them
    unmatched: tuple[int, ...] = ()  # the hosts asked about that ran no such collective (left as they are)
    spread_max_ns: float = 0.0  # aligned, the most two hosts' ends of one collective differ
    spread_median_ns: float = 0.0  # and the median over the collectives


def is_synchronising(name: str) -> bool:
    """Whether an HLO op's name is a collective that ends at once on every device of its group."""
    m = _OPCODE.match(name)
    return m is not None and COLLECTIVE_KINDS.get(m.group(0)) in SYNCHRONISING


def collective_ends(t: EventTable, limit: int = MAX_COLLECTIVES) -> CollectiveEnds:
    """A host's table → its synchronising collective executions and their ends (the first ``limit`` by
    execution, then program, op and occurrence)."""
    from rooflens.trace.warmup import execution_index

    empty = CollectiveEnds(t.origin_ns, (), np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32),
                           np.zeros(0, np.int64), ())
    if not len(t):
        return empty
    # of an XLA program: its executions pair the hosts' collectives (kernels outside any program, PyTorch's
    # NCCL calls, have no execution to pair them by: the k-th of a windowed export is not another's k-th)
    named = np.asarray([bool(p) for p in t.programs] or [False])
    coll = np.fromiter((is_synchronising(n) for n in t.names), bool, len(t.names))[t.name] & named[t.program]
    if not coll.any():
        return empty
    ex = execution_index(t)
    rows = np.flatnonzero(coll)  # in time order (a table is sorted by start)
    # its occurrence within its execution on its device: rank among the same (device, program, op, execution)
    _, grp = unique_rows(t.device[rows], t.program[rows], t.name[rows], ex[rows])
    by = np.argsort(grp, kind="stable")
    g = grp[by]
    first = np.concatenate([[True], g[1:] != g[:-1]])
    start_of = np.maximum.accumulate(np.where(first, np.arange(len(g)), 0))
    occ = np.empty(len(rows), np.int64)
    occ[by] = np.arange(len(g)) - start_of
    # one end per host: the latest of its devices'
    keys, inv = unique_rows(t.program[rows], t.name[rows], ex[rows], occ)
    end = np.full(len(keys), np.iinfo(np.int64).min, np.int64)
    np.maximum.at(end, inv, t.start_ps[rows] + t.dur_ps[rows])
    pairs, op = unique_rows(keys[:, 0], keys[:, 1])
    ops = tuple((t.programs[p], t.names[n]) for p, n in pairs.tolist())
    rank = np.empty(len(ops), np.int64)
    rank[np.asarray(sorted(range(len(ops)), key=ops.__getitem__), np.int64)] = np.arange(len(ops))
    keep = np.lexsort((keys[:, 3], rank[op], keys[:, 2]))[:limit]
    # each program's executions on the host: the most on one of its devices (an index counts them from 0 there)
    most = np.full(len(t.programs), -1, np.int64)
    np.maximum.at(most, t.program, ex)
    runs = tuple((t.programs[p], int(most[p]) + 1) for p in unique_values(keys[:, 0]).tolist())
    return CollectiveEnds(t.origin_ns, ops, op[keep].astype(np.int32), keys[keep, 2].astype(np.int32),
                          keys[keep, 3].astype(np.int32), end[keep], runs)


def clock_offsets(ends: list[CollectiveEnds | None]) -> ClockAlignment:
    """Each host's clock offset from the reference host's (the first that ran a collective): the median over
    the collective executions that ran on every host that ran any (of programs run as many times on each)
    of its end less the reference's end. ``None``: a host not to align (its clock is shared, or it has no
    event)."""
    n = len(ends)
    have = [k for k, e in enumerate(ends) if e is not None and len(e)]
    unmatched = tuple(k for k, e in enumerate(ends) if e is not None and not len(e))
    none = ClockAlignment((0.0,) * n, have[0] if have else -1, 0, (False,) * n, unmatched)
    if len(have) < 2:
        return none
    runs = [dict(ends[k].runs) for k in have]
    same = {p for p, r in runs[0].items() if all(other.get(p) == r for other in runs[1:])}
    vocab = Vocab()
    cols: dict[str, list[np.ndarray]] = {c: [] for c in ("host", "op", "run", "occ", "end")}
    ref_origin = ends[have[0]].origin_ns
    for h, k in enumerate(have):
        e = ends[k]
        code = np.asarray([vocab.code(f"{p}\0{o}") if p in same else -1 for p, o in e.ops] or [-1], np.int64)
        keep = code[e.op] >= 0
        cols["host"].append(np.full(int(keep.sum()), h, np.int64))
        cols["op"].append(code[e.op][keep])
        cols["run"].append(e.run[keep].astype(np.int64))
        cols["occ"].append(e.occ[keep].astype(np.int64))
        # ns on the reference's axis (float: origins a day apart keep ns precision)
        cols["end"].append((e.origin_ns - ref_origin) + e.end_ps[keep] * 1e-3)
    host, end = np.concatenate(cols["host"]), np.concatenate(cols["end"])
    if not len(host):
        return none
    keys, inv = unique_rows(np.concatenate(cols["op"]), np.concatenate(cols["run"]), np.concatenate(cols["occ"]))
    on_all = np.bincount(inv, minlength=len(keys)) == len(have)  # a key appears once per host at most
    if not on_all.any():
        return none
    col = np.cumsum(on_all) - 1
    sel = on_all[inv]
    m = np.full((len(have), int(on_all.sum())), np.nan)
    m[host[sel], col[inv[sel]]] = end[sel]
    offset = np.median(m - m[0], axis=1)
    aligned = m - offset[:, None]
    spread = aligned.max(axis=0) - aligned.min(axis=0)
    out = [0.0] * n
    for h, k in enumerate(have):
        out[k] = float(offset[h])
    return ClockAlignment(tuple(out), have[0], int(on_all.sum()), tuple(k in have for k in range(n)), unmatched,
                          float(spread.max()), float(median(spread)))


def _ms(ns: float) -> str:
    return f"{ns * 1e-6:+.3g} ms"


def clock_note(hosts: list[str], a: ClockAlignment) -> str:
    """What the alignment did, in one sentence."""
    why = "each Nsight Systems session times its process on a clock of its own"
    if not a.collectives:
        return (f"the hosts' clocks could not be aligned ({why}): no all-reduce, all-gather, reduce-scatter or "
                "all-to-all ran on all of them in the same execution of a program, so times across hosts (steps, "
                "stragglers) are each session's own")
    moved = ", ".join(f"{hosts[k]} {_ms(-off)}" for k, off in enumerate(a.offset_ns)
                      if a.aligned[k] and k != a.reference)
    left = [hosts[k] for k in a.unmatched]
    return (f"the hosts' clocks were aligned on the ends of {a.collectives} collective executions that ran on "
            f"{'every host' if not left else 'each aligned host'} ({why}; a collective over every device ends at "
            f"once on all of them): moved against {hosts[a.reference]}'s clock by {moved}; aligned, each of those "
            f"collectives ends within {a.spread_max_ns * 1e-6:.3g} ms on every host (median "
            f"{a.spread_median_ns * 1e-6:.3g} ms)"
            + (f"; not aligned (no such collective): {', '.join(left[:5])}" if left else ""))


def align_clocks(ends: list[CollectiveEnds | None], hosts: list[str]) -> tuple[list[int], list[str]]:
    """Per host, the ns to take off its origin (0 where its clock is shared or could not be aligned), and a
    note; ``ends``: each host's collectives where its trace keeps a clock of its own, else None."""
    if sum(e is not None for e in ends) < 2:
        return [0] * len(ends), []
    a = clock_offsets(ends)
    return [math.floor(off + 0.5) for off in a.offset_ns], [clock_note(hosts, a)]  # half a ns: always up


def moved(raw: RawTrace, offset_ns: int) -> RawTrace:
    """A host's trace with its clock moved back by ``offset_ns``: its origin, and so every time in it."""
    if not offset_ns:
        return raw
    return dataclasses.replace(raw, table=dataclasses.replace(raw.table, origin_ns=raw.table.origin_ns - offset_ns))


def aligned_hosts(raws: list[RawTrace]) -> tuple[list[RawTrace], list[str]]:
    """The hosts read, their clocks aligned on their collectives where their traces keep clocks of their own
    (:attr:`RawTrace.session_clock`), and a note saying by how much."""
    if len(raws) < 2 or not any(r.session_clock for r in raws):
        return raws, []
    offsets, notes = align_clocks([collective_ends(r.table) if r.session_clock and len(r.table) else None
                                   for r in raws], [r.host for r in raws])
    return [moved(r, off) for r, off in zip(raws, offsets)], notes
