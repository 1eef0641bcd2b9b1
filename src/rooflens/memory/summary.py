"""The memory section of a run (or of an XLA dump directory): compiled peaks, peak buffers, snapshots."""

from __future__ import annotations

import re
from pathlib import Path

from rooflens import hlo as H
from rooflens.memory.compiled import compiled_memory, parse_peak
from rooflens.memory.pprof import parse_snapshot

PEAK_OVER_STATE = 1.3  # peak above the state held by this much: activations, temporaries or padding dominate


def memory_of_run(run_dir: Path, metadata: dict, module_for) -> dict:
    """From what ``rl.capture`` saved: memory_analysis per program, XLA's memory dumps, device snapshots."""
    mem_dir = run_dir / "memory"
    programs = []
    for program, stats in (metadata.get("memory") or {}).items():
        def read(kind: str, program=program) -> str:
            p = mem_dir / f"{program}.{kind}.txt"
            return p.read_text() if p.is_file() else ""

        cm = compiled_memory(program, stats, read("live-range"), read("buffer-assignment"), module_for(program))
        programs.append(cm.to_dict())
    snapshots = []
    if mem_dir.is_dir():
        def order(p: Path):
            m = re.search(r"step_(\d+)", p.name)
            return (1, int(m.group(1))) if m else (0, 0)

        for p in sorted(mem_dir.glob("*.pb.gz"), key=order):
            s = parse_snapshot(p.read_bytes(), p.name.removesuffix(".pb.gz"))
            snapshots.append({"label": s.label, "total_bytes": s.total_bytes, "by_device": s.by_device,
                              "by_kind": s.by_kind, "by_site": dict(list(s.by_site.items())[:8])})
    return _summary(programs, snapshots)


def memory_of_dump(directory: Path) -> dict:
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
                module = H.parse(hlo_path.read_text())
            except H.HloParseError:
                module = None
        lr = directory / f"{stem}-live-range.txt"
        text = ba.read_text()
        name = module.name if module is not None else stem
        cm = compiled_memory(name, {}, lr.read_text() if lr.is_file() else "", text, module)
        if not cm.peak_buffers and not parse_peak(text) and not cm.padded_bytes:
            continue
        programs.append(cm.to_dict())
    return _summary(programs, [])


def _summary(programs: list[dict], snapshots: list[dict]) -> dict:
    main = max(programs, key=lambda p: p["peak_bytes"], default=None)
    return {
        "programs": programs, "snapshots": snapshots,
        "peak_bytes": main["peak_bytes"] if main else 0.0, "state_bytes": main["state_bytes"] if main else 0.0,
        "peak_over_state": (main["peak_bytes"] / main["state_bytes"]) if main and main["state_bytes"] else None,
        "padding_waste_bytes": sum(p["padding_waste_bytes"] for p in programs),
        "live_peak_bytes": max((s["total_bytes"] for s in snapshots), default=0.0),
    }
