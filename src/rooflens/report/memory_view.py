"""Terminal views of memory: the model-state estimate and a run's memory section."""

from __future__ import annotations

from functools import partial

from rich.console import Console
from rich.markup import escape as e
from rich.table import Table

from rooflens.units import fmt_bytes

gb = partial(fmt_bytes, digits=3)


def render_estimate(console: Console, est) -> None:
    console.print(f"[bold]Model state for {est.params:.3g} parameters[/bold] ({est.optimizer}): "
                  f"{gb(est.total_bytes)} = {est.bytes_per_param:.3g} bytes/parameter"
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
    for p in mem.programs:
        console.print(f"{e(p.program)}: arguments {gb(p.argument_bytes)}, outputs {gb(p.output_bytes)}, "
                      f"aliased {gb(p.alias_bytes)}, temporaries {gb(p.temp_bytes)} → peak {gb(p.peak_bytes)}"
                      + (f"; tiling padding wastes {gb(p.padding_waste_bytes)}" if p.padding_waste_bytes else ""))
        if p.peak_buffers:
            t = Table(title="Buffers live at the peak", title_justify="left")
            for col in ("value", "shape", "bytes", "padded", "scope"):
                t.add_column(col, justify="right" if col in ("bytes", "padded") else "left")
            for b in p.peak_buffers:
                t.add_row(e(b.name), e(b.shape), gb(b.bytes), gb(b.padded_bytes) if b.shape else "", e(b.named_scope))
            console.print(t)
    if mem.peak_over_state:
        console.print(f"peak / state held (inputs and outputs): {mem.peak_over_state:.2f}×")
    for s in mem.snapshots:
        console.print(f"live device memory at {e(s.label)}: {gb(s.total_bytes)}")
