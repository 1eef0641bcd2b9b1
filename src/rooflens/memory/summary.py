"""A run's memory, as typed data: compiled peaks and peak buffers per program, live device snapshots.

``read_run_memory(profile)`` and ``read_dump_memory(directory)`` read the files (what ``rl.capture`` /
``rooflens run`` saved, or an XLA dump directory); ``summarize`` is the pure part. The analysis
takes the :class:`MemorySummary` as an argument and never reads a file itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from rooflens import hlo as H
from rooflens.errors import RooflensError
from rooflens.memory.compiled import CompiledMemory, compiled_memory, matching_module, parse_peak
from rooflens.memory.pprof import parse_snapshot
from rooflens.memory.timeline import compiled_sizes, place_snapshots


def read_text_file(path: Path) -> str:
    """A memory text file of XLA's, or one sentence saying why it cannot be read."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise RooflensError(f"cannot read {path}: {e.strerror or e}.") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RooflensError(f"{path} is not UTF-8 text (bad byte at offset {e.start}), so it is not one of "
                            "XLA's memory files.") from None


PEAK_OVER_STATE = 1.3  # peak above the state held by this much: activations, temporaries or padding dominate
GROWTH = 0.10  # live memory up this share over the captured steps, every step above the last: it grows
TOP_SITES = 8


@dataclass(frozen=True)
class SnapshotSummary:
    """Live device memory at one moment (a ``device_memory_profile()`` snapshot)."""

    label: str
    total_bytes: float
    by_device: dict[str, float]
    by_kind: dict[str, float]
    by_site: dict[str, float]  # the largest allocating sites only

    def to_dict(self) -> dict:
        return {"label": self.label, "total_bytes": self.total_bytes, "by_device": dict(self.by_device),
                "by_kind": dict(self.by_kind), "by_site": dict(self.by_site)}


@dataclass(frozen=True)
class MemorySummary:
    programs: list[CompiledMemory] = field(default_factory=list)
    snapshots: list[SnapshotSummary] = field(default_factory=list)
    main_program: str = ""  # the program that holds the device (most device time in the trace), where known
    device_bytes: float | None = None  # one device's memory, where the capture recorded it

    @property
    def main(self) -> CompiledMemory | None:
        """The program that holds the device (a run's step, not its initialisation or RNG seeding),
        else the one with the highest compiled peak."""
        step = next((p for p in self.programs if p.program == self.main_program), None)
        return step or max(self.programs, key=lambda p: p.peak_bytes, default=None)

    @property
    def peak_over_device(self) -> float | None:
        """The main program's compiled peak as a share of one device's memory (None: unknown)."""
        return self.peak_bytes / self.device_bytes if self.device_bytes and self.main else None

    @property
    def growing(self) -> bool:
        """Live device memory grows from step to step (every step snapshot above the one before,
        by GROWTH in all): state or caches that accumulate."""
        live = [s.total_bytes for s in self.snapshots if s.label.startswith("step_")]
        return (len(live) >= 3 and all(b > a for a, b in zip(live, live[1:]))
                and live[-1] - live[0] > GROWTH * max(live[0], 1.0))

    @property
    def peak_bytes(self) -> float:
        return self.main.peak_bytes if self.main else 0.0

    @property
    def state_bytes(self) -> float:
        return self.main.state_bytes if self.main else 0.0

    @property
    def peak_over_state(self) -> float | None:
        main = self.main
        return (main.peak_bytes / main.state_bytes) if main and main.state_bytes else None

    @property
    def padding_waste_bytes(self) -> float:
        return sum(p.padding_waste_bytes for p in self.programs)

    @property
    def live_peak_bytes(self) -> float:
        return max((s.total_bytes for s in self.snapshots), default=0.0)

    @property
    def live_peak_words(self) -> str:
        """What :attr:`live_peak_bytes` is: the most of several snapshots ("up to"), or the one taken as the trace
        stopped (``rooflens run``: after the script's work, so what it still held, not a peak)."""
        return "up to" if any(s.label != "end" for s in self.snapshots) else "when the trace stopped"

    def __bool__(self) -> bool:
        return bool(self.programs or self.snapshots)

    def to_dict(self) -> dict:
        return {"programs": [p.to_dict() for p in self.programs], "snapshots": [s.to_dict() for s in self.snapshots],
                "peak_bytes": self.peak_bytes, "state_bytes": self.state_bytes,
                "peak_over_state": self.peak_over_state, "padding_waste_bytes": self.padding_waste_bytes,
                "live_peak_bytes": self.live_peak_bytes, "main_program": self.main.program if self.main else "",
                "device_bytes": self.device_bytes, "peak_over_device": self.peak_over_device,
                "growing": self.growing}


def summarize(programs: list[CompiledMemory], snapshots: list[SnapshotSummary] = (), main_program: str = "",
              device_bytes: float | None = None) -> MemorySummary:
    summary = MemorySummary(list(programs), list(snapshots), main_program, device_bytes)
    main = summary.main
    if main is not None and main.timeline is not None and snapshots:
        place_snapshots(main.timeline, snapshots)  # measured points beside the compiled curve
    return summary


def read_run_memory(profile) -> MemorySummary | None:
    """What ``rl.capture`` / ``rooflens run`` saved beside a profile (``memory/`` of its run
    directory): memory_analysis per program, XLA's memory dumps, device snapshots. None when the
    profile has no memory data."""
    memory = profile.manifest.memory
    if not memory or not profile.sources:
        return None
    from rooflens.trace.steps import base_name

    def modules_named(program: str) -> list:
        """Every compilation of ``program`` the run kept (``jit__normal(6)``, ``jit__normal(10)``): its memory
        files are one of them, which :func:`matching_module` tells apart."""
        found = [m for k, m in profile.modules.items() if m is not None and base_name(k) == program]
        return found or [m for m in [profile.module_for(program)] if m is not None]

    return read_memory_dir(Path(profile.sources[0]).parent / "memory", memory, modules_named,
                           main_program=busiest_program(profile), device_bytes=device_capacity_bytes(profile.metadata))


def busiest_program(profile) -> str:
    """The program with the most device time in the trace (``jit_step``, without its id): the one that
    holds the device, as against initialisation, RNG seeding and one-off conversions."""
    import numpy as np

    from rooflens.trace.steps import base_name

    t = profile.table
    if not len(t):
        return ""
    busy = t.program_busy_ns
    return base_name(t.programs[int(np.argmax(busy))])


def device_capacity_bytes(metadata: dict) -> float | None:
    """One device's memory as the capture recorded it (``device_memory_bytes``). For CPU devices
    that is the machine's memory, shared by the process's devices (forced host devices): each gets
    its share."""
    total = metadata.get("device_memory_bytes")
    if not total:
        return None
    if metadata.get("backend") == "cpu":
        return float(total) / max(int(metadata.get("num_local_devices") or metadata.get("num_devices") or 1), 1)
    return float(total)


def read_memory_dir(mem_dir: Path, stats_by_program: dict, module_for, main_program: str = "",
                    device_bytes: float | None = None) -> MemorySummary:
    programs = []
    for program, stats in (stats_by_program or {}).items():
        def read(kind: str, program=program) -> str:
            p = mem_dir / f"{program}.{kind}.txt"
            return read_text_file(p) if p.is_file() else ""

        assignment = read("buffer-assignment")
        module = module_for(program)
        if isinstance(module, list):  # several compilations of one name: the one these files are of
            module = matching_module(assignment, module)
        programs.append(compiled_memory(program, stats, read("live-range"), assignment, module))
    snapshots = []
    if mem_dir.is_dir():
        def order(p: Path):
            m = re.search(r"step_(\d+)", p.name)
            return (1, int(m.group(1))) if m else (0, 0)

        for p in sorted(mem_dir.glob("*.pb.gz"), key=order):
            s = parse_snapshot(p.read_bytes(), p.name.removesuffix(".pb.gz"))
            snapshots.append(SnapshotSummary(s.label, s.total_bytes, dict(s.by_device), dict(s.by_kind),
                                             dict(list(s.by_site.items())[:TOP_SITES])))
    return summarize(programs, snapshots, main_program, device_bytes)


def read_dump_memory(directory: Path) -> MemorySummary:
    """From an XLA dump directory: every module's peak buffers and padding waste (no run needed)."""
    programs = []
    for ba in sorted(directory.glob("*buffer-assignment.txt")):
        if "buffer-assignment-values" in ba.name:
            continue
        stem = ba.name.replace("-buffer-assignment.txt", "")
        hlo_path = directory / f"{stem}.txt"
        module = None
        if hlo_path.is_file():
            try:
                module = H.parse(read_text_file(hlo_path))
            except H.HloParseError:
                module = None
        lr = directory / f"{stem}-live-range.txt"
        text = read_text_file(ba)
        name = module.name if module is not None else stem
        # no memory_analysis in a dump: its sizes come from the same buffer assignment the table lists
        cm = compiled_memory(name, compiled_sizes(text), read_text_file(lr) if lr.is_file() else "", text, module)
        if not cm.peak_buffers and not parse_peak(text) and not cm.padded_bytes:
            continue
        programs.append(cm)
    return summarize(programs)
