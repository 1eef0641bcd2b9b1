"""What XLA allocated for a program: ``compiled.memory_analysis()`` and the buffers live at its peak.

The peak list comes from XLA's own live-range dump (``*-live-range.txt``, or the ``HloLiveRange``
section a TPU buffer-assignment dump ends with): ``Live ranges at N (peak):`` then one line per
buffer. Each is joined with the program's HLO for its shape, logical vs padded size and the named
scope that produced it. Padding waste sums, over every value in the buffer assignment, the bytes a
tiled layout adds.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from rooflens import hlo as H
from rooflens.memory.timeline import MemoryTimeline, memory_timeline

_PEAK_HEAD = re.compile(r"Live ranges at \d+ \(peak\):")
_PEAK_LINE = re.compile(r"^\s+([^\s{:]+)(?:\{[^}]*\})?:\s*(\d+)\s*bytes")
_VALUE = re.compile(r"value:\s*<\d+\s+(\S+)\s+@\d+>\s*\(size=(\d+),offset=\d+\):\s*(.+?)\s*$")


@dataclass(frozen=True)
class PeakBuffer:
    name: str  # the HLO value (instruction) that owns the buffer
    bytes: float
    shape: str
    logical_bytes: float
    padded_bytes: float
    named_scope: str
    opcode: str


@dataclass
class CompiledMemory:
    program: str
    argument_bytes: float
    output_bytes: float
    alias_bytes: float
    temp_bytes: float
    generated_code_bytes: float
    peak_buffers: list[PeakBuffer] = field(default_factory=list)
    logical_bytes: float = 0.0  # over all values in the buffer assignment
    padded_bytes: float = 0.0
    timeline: MemoryTimeline | None = None  # live bytes over the schedule (None: no live-range dump)

    @property
    def peak_bytes(self) -> float:
        """Arguments, outputs not aliased to them, and temporaries: what the program holds at once."""
        return self.argument_bytes + self.output_bytes - self.alias_bytes + self.temp_bytes

    @property
    def state_bytes(self) -> float:
        """The theory: the state passed in and handed back (weights, optimizer state, batch, results)."""
        return self.argument_bytes + self.output_bytes - self.alias_bytes

    @property
    def padding_waste_bytes(self) -> float:
        return max(self.padded_bytes - self.logical_bytes, 0.0)

    def to_dict(self) -> dict:
        return {**asdict(self), "peak_bytes": self.peak_bytes, "state_bytes": self.state_bytes,
                "padding_waste_bytes": self.padding_waste_bytes}


def parse_peak(text: str) -> list[tuple[str, float]]:
    """(buffer name, bytes) of the values live at the peak, as XLA lists them."""
    out, inside = [], False
    for line in text.splitlines():
        if _PEAK_HEAD.search(line):
            inside = True
            continue
        if inside:
            m = _PEAK_LINE.match(line)
            if not m:
                break
            out.append((m.group(1), float(m.group(2))))
    return out


def matching_module(buffer_assignment: str, modules: list) -> H.Module | None:
    """Of several compilations of one program name (``jit__normal`` for a 200000×64 table and a 4096×64 one), the
    module a buffer assignment is of: the one whose instructions have the shapes its values have (the other's
    instruction of the same name gave a 1 MB buffer 51 MB of bytes). The first when none matches better."""
    if len(modules) <= 1:
        return modules[0] if modules else None
    values = [(m.group(1), m.group(3).split("{")[0]) for line in buffer_assignment.splitlines()
              if (m := _VALUE.search(line))]

    def agree(module) -> int:
        return sum(1 for name, shape in values if (ins := module.find(name)) is not None
                   and ins.shape.text.split("{")[0] == shape)
    return max(modules, key=agree)


def value_sizes(buffer_assignment: str) -> tuple[float, float]:
    """(logical, padded) bytes over every value of a buffer assignment (shapes carry their layouts)."""
    logical = padded = 0.0
    for line in buffer_assignment.splitlines():
        m = _VALUE.search(line)
        if not m:
            continue
        try:
            shape = H.parse_shape(m.group(3))
        except (H.HloParseError, ValueError):
            continue
        leaves = [s for s in shape.leaves() if s.is_array]
        logical += sum(s.bytes for s in leaves)
        padded += sum(s.padded_bytes for s in leaves)
    return logical, padded


def compiled_memory(program: str, stats: dict, live_range: str = "", buffer_assignment: str = "",
                    module: H.Module | None = None, top: int = 10) -> CompiledMemory:
    cm = CompiledMemory(
        program=program, argument_bytes=float(stats.get("argument_size_in_bytes", 0)),
        output_bytes=float(stats.get("output_size_in_bytes", 0)),
        alias_bytes=float(stats.get("alias_size_in_bytes", 0)),
        temp_bytes=float(stats.get("temp_size_in_bytes", 0)),
        generated_code_bytes=float(stats.get("generated_code_size_in_bytes", 0)),
    )
    if buffer_assignment:
        cm.logical_bytes, cm.padded_bytes = value_sizes(buffer_assignment)
        cm.timeline = memory_timeline(program, live_range, buffer_assignment, module, state_bytes=cm.state_bytes,
                                      top=top)
    # One source for the buffers at the peak: the timeline's, when the dumps give one (so the table and
    # the JSON's timeline agree); XLA's own peak list only when there is no schedule to build it from.
    if cm.timeline is not None:
        peak = [(b.name, b.bytes) for b in cm.timeline.peak_buffers]
    else:
        peak = sorted(parse_peak(live_range) or parse_peak(buffer_assignment), key=lambda p: -p[1])[:top]
    for name, nbytes in peak:
        ins = module.find(name.split("{")[0]) if module is not None else None
        shape = ins.shape if ins is not None else None
        leaves = [s for s in shape.leaves() if s.is_array] if shape is not None else []
        cm.peak_buffers.append(PeakBuffer(
            name=name, bytes=nbytes, shape=shape.text if shape is not None else "",
            logical_bytes=float(sum(s.bytes for s in leaves)), padded_bytes=float(sum(s.padded_bytes for s in leaves)),
            named_scope=ins.named_scope if ins is not None else "", opcode=ins.opcode if ins is not None else ""))
    return cm
