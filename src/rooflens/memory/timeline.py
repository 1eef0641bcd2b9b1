"""Memory over the program: live bytes at every position of XLA's schedule.

XLA's live-range dump (``*-live-range.txt``, or the ``HloLiveRange`` section of a buffer-assignment
dump) lists the program's schedule (``InstructionSequence``: position → instruction) and, for every
buffer, the positions it is live (``BufferLiveRange``: ``name{index}:start-end``). The buffer
assignment gives each value's size. Summing the sizes of the buffers live at each position gives the
curve XProf's Memory Profile draws; each buffer is put in one of four kinds:

* ``parameters``: the program's arguments (live from the start, in a parameter allocation);
* ``outputs``: what the program hands back (live to the end);
* ``activations``: values the forward pass computes (``jvp(`` in their ``op_name``, not ``transpose(``)
  that an instruction of the backward pass (``transpose(`` in its ``op_name``) reads, directly or
  through a tuple, bitcast or copy: what the forward pass keeps for the backward pass, and what
  rematerialisation would drop. Read from the uses, not from the schedule's order: XLA interleaves
  the two passes (a backward broadcast may run before the forward ``tanh`` whose output it needs);
* ``temporaries``: everything else.

Pure: text in, :class:`MemoryTimeline` out.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

KINDS = ("parameters", "outputs", "activations", "temporaries")
MAX_POINTS = 2000  # longer schedules keep, per bucket of positions, the position with the most live bytes

_SEQ_HEAD = re.compile(r"^\s*InstructionSequence:\s*$")
_SEQ_LINE = re.compile(r"^\s+(\d+):(\S+)\s*$")
_RANGE_HEAD = re.compile(r"^\s*BufferLiveRange:\s*$")
_RANGE_LINE = re.compile(r"^\s+(\S+?):(\d+)-(\d+)\s*$")
_ALLOC = re.compile(r"^allocation \d+: size (\d+),?\s*(.*)$")
_VALUE = re.compile(r"^\s*value:\s*<\d+\s+(\S+)\s+@\d+>\s*\(size=(\d+),offset=(\d+)\)")


@dataclass(frozen=True)
class TimelinePoint:
    position: int  # in the program's schedule (XLA's HloLiveRange)
    instruction: str  # scheduled at this position
    live_bytes: float
    parameters_bytes: float
    outputs_bytes: float
    activations_bytes: float
    temporaries_bytes: float


@dataclass(frozen=True)
class LiveBuffer:
    name: str
    bytes: float
    kind: str  # one of KINDS
    start: int
    end: int  # inclusive
    named_scope: str = ""


@dataclass(frozen=True)
class MeasuredPoint:
    """Live device memory measured (a device snapshot), placed where it was taken in the schedule."""

    label: str
    position: int
    live_bytes: float


@dataclass
class MemoryTimeline:
    program: str
    positions: int  # length of the schedule
    points: list[TimelinePoint]  # every position, or MAX_POINTS of them (note says so)
    peak_position: int
    peak_bytes: float
    peak_instruction: str
    peak_buffers: list[LiveBuffer]  # live at the peak, largest first
    state_bytes: float = 0.0  # the reference line: the model state passed in and handed back (0: unknown)
    measured: list[MeasuredPoint] = field(default_factory=list)
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def parse_sequence(text: str) -> list[str]:
    """The schedule: instruction names by position."""
    seq, inside = [], False
    for line in text.splitlines():
        if _SEQ_HEAD.match(line):
            inside = True
            continue
        if inside:
            m = _SEQ_LINE.match(line)
            if not m:
                break
            seq.append(m.group(2))
    return seq


def parse_ranges(text: str) -> list[tuple[str, int, int]]:
    """(buffer, first position, last position) for every buffer of the live-range dump."""
    out, inside = [], False
    for line in text.splitlines():
        if _RANGE_HEAD.match(line):
            inside = True
            continue
        if inside:
            m = _RANGE_LINE.match(line)
            if not m:
                break
            out.append((_norm(m.group(1)), int(m.group(2)), int(m.group(3))))
    return out


@dataclass
class Allocation:
    size_bytes: float
    parameter: bool
    live_out: bool
    values: list[tuple[str, float, int]] = field(default_factory=list)  # (value, bytes, offset)


def parse_allocations(buffer_assignment: str) -> list[Allocation]:
    """The buffer assignment's allocations with their values (thread-local ones are left out: they
    live on a thread's stack, not in device memory)."""
    out: list[Allocation] = []
    cur: Allocation | None = None
    for line in buffer_assignment.splitlines():
        a = _ALLOC.match(line)
        if a:
            flags = a.group(2)
            cur = None if "thread-local" in flags else Allocation(
                float(a.group(1)), bool(re.search(r"(?:^|, )parameter \d+", flags)), "maybe-live-out" in flags)
            if cur is not None:
                out.append(cur)
            continue
        m = _VALUE.match(line)
        if m and cur is not None:
            cur.values.append((_norm(m.group(1)), float(m.group(2)), int(m.group(3))))
    return out


def compiled_sizes(buffer_assignment: str) -> dict[str, float]:
    """What ``compiled.memory_analysis()`` would say, from the buffer assignment alone (an XLA dump has
    no memory_analysis): arguments are the parameter allocations, outputs the live-out ones, aliased
    bytes those that are both (a donated buffer handed back), temporaries every other allocation that
    lives in device memory (not a constant, not thread-local). The keys are memory_analysis's own."""
    arg = out = alias = temp = 0.0
    for line in buffer_assignment.splitlines():
        a = _ALLOC.match(line)
        if not a:
            continue
        size, flags = float(a.group(1)), a.group(2)
        if "thread-local" in flags or re.search(r"(?:^|, )constant(?:,|:|$)", flags):
            continue
        parameter = bool(re.search(r"(?:^|, )parameter \d+", flags))
        live_out = "maybe-live-out" in flags or "output shape is" in flags
        arg += size if parameter else 0.0
        out += size if live_out else 0.0
        alias += size if parameter and live_out else 0.0
        temp += size if not parameter and not live_out else 0.0
    return {"argument_size_in_bytes": arg, "output_size_in_bytes": out, "alias_size_in_bytes": alias,
            "temp_size_in_bytes": temp}


def _norm(name: str) -> str:
    return name[:-2] if name.endswith("{}") else name


def memory_timeline(program: str, live_range: str, buffer_assignment: str, module=None,
                    state_bytes: float = 0.0, top: int = 12) -> MemoryTimeline | None:
    """The curve of live bytes over the schedule; None when the dumps hold no live ranges."""
    seq = parse_sequence(live_range) or parse_sequence(buffer_assignment)
    ranges = parse_ranges(live_range) or parse_ranges(buffer_assignment)
    if not seq or not ranges:
        return None
    allocations = parse_allocations(buffer_assignment)
    rng = {name: (a, b) for name, a, b in ranges}
    n = max(len(seq), max(e for _, _, e in ranges) + 1)
    last = n - 1

    def ins_of(name: str):
        return module.find(name.split("{")[0]) if module is not None else None

    def kind_of(name: str, start: int, end: int, parameter: bool) -> str:
        ins = ins_of(name)
        op_name = getattr(ins, "op_name", "")
        if parameter and start == 0:
            return "parameters"
        if end >= last:
            return "outputs"
        if "jvp(" in op_name and "transpose(" not in op_name and _read_by_backward(module, ins):
            return "activations"
        return "temporaries"

    # Bytes held at each position, by kind, as difference arrays: O(positions + values).
    # A plain allocation (every value at offset 0: a parameter, an output, a reused buffer) is held
    # from its first value's first position to its last value's last; a block of slices (values at
    # several offsets: XLA's preallocated temporaries) holds, at each position, the slices live there
    # (values sharing a slice, updated in place, count once).
    delta = {k: [0.0] * (n + 1) for k in KINDS}

    def hold(kind: str, nbytes: float, a: int, b: int) -> None:
        delta[kind][a] += nbytes
        delta[kind][min(b, last) + 1] -= nbytes

    buffers = []
    for alloc in allocations:
        live = [(v, nbytes, off, *rng[v]) for v, nbytes, off in alloc.values if v in rng and nbytes]
        if not live:
            continue
        for v, nbytes, _, a, b in live:
            ins = ins_of(v)
            buffers.append(LiveBuffer(v, nbytes, kind_of(v, a, b, alloc.parameter), a, b,
                                      ins.named_scope if ins is not None else ""))
        kinds = {v: kind_of(v, a, b, alloc.parameter) for v, _, _, a, b in live}
        if len({off for _, _, off, _, _ in live}) > 1:  # a block of slices
            by_slice: dict[int, list] = {}
            for item in live:
                by_slice.setdefault(item[2], []).append(item)
            for items in by_slice.values():
                items.sort(key=lambda x: (x[3], x[4]))
                for i, (v, nbytes, _, a, b) in enumerate(items):
                    nxt = items[i + 1][3] if i + 1 < len(items) else None
                    # in place: the next value of the slice starts where this one ends
                    hold(kinds[v], nbytes, a, b - 1 if nxt is not None and nxt <= b else b)
            continue
        live.sort(key=lambda x: (x[3], x[4]))
        first, end_all = live[0][3], max(x[4] for x in live)
        size = alloc.size_bytes or max(x[1] for x in live)
        cursor = first
        for i, (v, _, _, _a, b) in enumerate(live):  # each stretch counted as the value that holds it
            until = min(b, live[i + 1][3] - 1) if i + 1 < len(live) else end_all
            if until >= cursor:
                hold(kinds[v], size, cursor, until)
                cursor = until + 1
    run = dict.fromkeys(KINDS, 0.0)
    full = []
    for pos in range(n):
        for k in KINDS:
            run[k] += delta[k][pos]
        full.append(TimelinePoint(pos, seq[pos] if pos < len(seq) else "", sum(run.values()),
                                  run["parameters"], run["outputs"], run["activations"], run["temporaries"]))
    peak = max(full, key=lambda p: p.live_bytes)
    live = sorted((b for b in buffers if b.start <= peak.position <= b.end), key=lambda b: (-b.bytes, b.name))
    points, note = full, ""
    if n > MAX_POINTS:
        step = n / MAX_POINTS
        points = [max(full[int(i * step):max(int((i + 1) * step), int(i * step) + 1)], key=lambda p: p.live_bytes)
                  for i in range(MAX_POINTS)]
        note = f"{n:,} positions drawn as {MAX_POINTS:,} (each the highest of its span)"
    return MemoryTimeline(program, n, points, peak.position, peak.live_bytes, peak.instruction, live[:top],
                          state_bytes=state_bytes, note=note)


_PASS_THROUGH = frozenset({"get-tuple-element", "tuple", "bitcast", "copy"})


def _read_by_backward(module, ins) -> bool:
    """Whether an instruction of the backward pass reads ``ins``'s value (through tuples, bitcasts, copies)."""
    seen, todo = {ins.name}, list(module.users(ins))
    while todo:
        user = todo.pop()
        if user.name in seen:
            continue
        seen.add(user.name)
        if "transpose(" in user.op_name:
            return True
        if user.opcode in _PASS_THROUGH:
            todo.extend(module.users(user))
    return False


def place_snapshots(timeline: MemoryTimeline, snapshots) -> MemoryTimeline:
    """Live device snapshots as measured points: "before" at the start, after a step at the end.
    A snapshot sums every device; the point is the busiest device's bytes (one program runs per device)."""
    measured = []
    for s in snapshots:
        per_device = max(s.by_device.values(), default=s.total_bytes)
        pos = 0 if s.label == "before" else timeline.positions - 1
        measured.append(MeasuredPoint(s.label, pos, float(per_device)))
    timeline.measured = measured
    return timeline
