"""Terminal views of memory: the model-state estimate and a run's memory section."""

from __future__ import annotations

from functools import partial

from rich.console import Console

from rooflens.report.tables import Col, print_fitted
from rooflens.report.text import e, ranked_programs
from rooflens.units import fmt_bytes, fmt_count, fmt_number, fmt_ratio

gb = partial(fmt_bytes, digits=3)


def render_estimate(console: Console, est) -> None:
    console.print(f"[bold]Model state for {fmt_count(est.params, 'parameters')}[/bold] ({est.optimizer}): "
                  f"{gb(est.total_bytes)} = {fmt_number(est.bytes_per_param)} bytes/parameter"
                  + (f", {gb(est.per_device_bytes)} per device over {est.shards}" if est.shards > 1 else ""))
    for name, value in (("weights", est.weights_bytes), ("gradients", est.gradients_bytes),
                        ("optimizer moments", est.optimizer_bytes), ("master weights", est.master_bytes)):
        console.print(f"  {name:18} {gb(value):>10}")
    fits = [k for k, v in est.fits_on.items() if v]
    no = [k for k, v in est.fits_on.items() if not v]
    console.print(f"fits (per device, before activations) on: {', '.join(fits) or 'none'}")
    if no:
        console.print(f"does not fit on: {', '.join(no)}")


def render_memory(console: Console, mem, source: str) -> None:
    """A MemorySummary: each program's compiled memory and peak buffers, then the live snapshots."""
    console.print(f"[bold]Memory[/bold] of {e(source)}")
    shown, _, small = ranked_programs(mem.programs, mem.main_program)
    for p in shown:
        console.print(f"{e(p.program)}: arguments {gb(p.argument_bytes)}, outputs {gb(p.output_bytes)}, "
                      f"aliased {gb(p.alias_bytes)}, XLA's temp buffer {gb(p.temp_bytes)} → peak {gb(p.peak_bytes)}"
                      + (f"; tiling padding wastes {gb(p.padding_waste_bytes)}" if p.padding_waste_bytes else ""))
        if p.peak_buffers:
            cols = [Col("value", "left", name=True), Col("shape", "left", 2), Col("bytes"), Col("padded", drop=3),
                    Col("scope", "left", 4)]
            rows = [(e(b.name), e(b.shape), gb(b.bytes), gb(b.padded_bytes) if b.shape else "", e(b.named_scope))
                    for b in p.peak_buffers]
            print_fitted(console, cols, rows, "Buffers live at the peak")
        if p.timeline is not None:
            render_timeline(console, p.timeline)
    if small:
        console.print(f"[dim]{e(small)}[/dim]")
    if mem.peak_over_state:
        console.print(f"peak / state held (inputs and outputs): {fmt_ratio(mem.peak_over_state)}")
    for s in mem.snapshots:
        console.print(f"live device memory at {e(s.label)}: {gb(s.total_bytes)}")


SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], width: int = 60) -> str:
    """Values as block characters, ``width`` wide (each character the highest value of its span)."""
    if not values:
        return ""
    step = max(len(values) / width, 1.0)
    cols = [max(values[int(i * step):max(int((i + 1) * step), int(i * step) + 1)])
            for i in range(min(width, len(values)))]
    top = max(cols) or 1.0
    return "".join(SPARK[min(int(v / top * (len(SPARK) - 1) + 0.5), len(SPARK) - 1)] for v in cols)


def render_timeline(console: Console, tl) -> None:
    """Live bytes over the program's schedule: a sparkline, the peak's position and what is live there."""
    console.print(f"live bytes over the schedule ({tl.positions:,} positions), peak {gb(tl.peak_bytes)} "
                  f"at position {tl.peak_position} ({e(tl.peak_instruction)}):")
    console.print(f"  {sparkline([p.live_bytes for p in tl.points])}", markup=False)
    at = next((p for p in tl.points if p.position == tl.peak_position), None)
    if at is not None:
        split = (("parameters", at.parameters_bytes), ("outputs", at.outputs_bytes),
                 ("activations", at.activations_bytes), ("temporaries", at.temporaries_bytes))
        kinds = ", ".join(f"{k} {gb(v)}" for k, v in split if v)
        console.print(f"  at the peak: {kinds}")
    if tl.state_bytes:
        console.print(f"  model state (arguments + outputs): {gb(tl.state_bytes)}")
    for m in tl.measured:
        console.print(f"  measured {e(m.label)}: {gb(m.live_bytes)} live on the busiest device")
