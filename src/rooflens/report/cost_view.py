"""Terminal views of chips, calibrations and predictions. They format; they never compute."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from rooflens.report.tables import Col, print_fitted
from rooflens.report.text import e
from rooflens.units import fmt_bytes, fmt_named, fmt_number, fmt_si, plural
from rooflens.units import fmt_seconds as ms

UNITS = {"core": "one TensorCore", "chip": "one chip", "gpu": "one GPU", "cpu": "this CPU"}


si = fmt_si


def render_chip_list(console: Console, rows) -> None:
    table = Table(title="Known chips (each entry describes ONE JAX device)", title_justify="left")
    for col in ("name", "one device is", "bf16 peak", "HBM", "HBM bandwidth", "link (one way)", "from"):
        table.add_column(col)
    for r in rows:
        link = si(r.link_bytes_per_s_oneway, "B/s") + (f" {r.link}" if r.link and r.link_bytes_per_s_oneway else "")
        table.add_row(e(r.name), UNITS.get(r.device_unit, r.device_unit), si(r.bf16_flops_per_s, "FLOP/s"),
                      si(r.hbm_bytes, "B"), si(r.hbm_bytes_per_s, "B/s"), e(link), e(r.origin.rsplit("/", 1)[-1]))
    console.print(table)
    console.print("TPU v2/v3 entries are one TensorCore (JAX shows each core as a device); v4/v5p are "
                  "megacore chips, v5e/v6e/v7 chips, NVIDIA and AMD entries one GPU. Links: one ICI link (TPU), a "
                  "GPU's whole NVLink, or all 7 Infinity Fabric links of an AMD GPU, one way. `rooflens chips NAME` "
                  "shows sources.")


def render_chip(console: Console, chip) -> None:
    console.print(f"[bold]{e(chip.name)}[/bold]: {e(chip.description)}")
    console.print(f"one JAX device = {UNITS.get(chip.device_unit, chip.device_unit)}; kind {e(chip.kind)}; "
                  f"device_kind strings: {e(', '.join(chip.device_kinds) or '—')}; from {e(chip.origin)}")
    if chip.calibration:
        console.print(f"calibration: {e(chip.calibration)}")
    table = Table(show_lines=False)
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("source")
    for key, fig in chip.figures.items():
        table.add_row(e(key), e(fmt_named(key, fig.value)), e(fig.source))
    console.print(table)


def render_calibration(console: Console, cal, path) -> None:
    table = Table(title=e(f"Calibration of {cal.device_kind} ({cal.backend}) on {cal.host}"), title_justify="left")
    for col in ("kernel", "runs", "min", "q1", "median", "q3", "max", "± (IQR/2)"):
        table.add_column(col, justify="right" if col != "kernel" else "left")
    for m in [m for ms_ in cal.matmul.values() for m in ms_] + list(cal.copy):
        s = m.spread
        table.add_row(e(m.what), str(len(m.times_s)), *(si(s[k], m.unit) for k in ("min", "q1", "median", "q3", "max")),
                      f"{m.relative_spread * 50:.1f}%")
    console.print(table)
    console.print(f"saved as chip 'local' in {e(str(path))}")


def render_prediction(console: Console, pred, top: int = 15, explain: bool = False) -> None:
    console.print(f"[bold]{e(pred.module)}[/bold] on [bold]{e(pred.chip)}[/bold] (per device, one device = "
                  f"{UNITS.get(pred.device_unit, pred.device_unit)}; {plural(pred.num_devices, 'device')} in the "
                  "program)")
    console.print(f"predicted time {ms(pred.time_s)}; {si(pred.flops, 'FLOP')} ({si(pred.model_flops, 'FLOP')} in "
                  f"dots and convolutions), {fmt_bytes(pred.bytes)} HBM traffic, {fmt_bytes(pred.comm_bytes)} sent "
                  "over links")
    console.print(f"priced: {e(pred.source)}")
    lat = any(o.t_latency_s for o in pred.ops)
    cols = [Col("op", "left", name=True), Col("category", "left", 3), Col("scope", "left", 5), Col("×", drop=6),
            Col("FLOPs", drop=2), Col("bytes", drop=2), Col("comm", drop=2), Col("T_math", drop=4),
            Col("T_mem", drop=4), Col("T_comm", drop=4), *((Col("T_lat (hops)", drop=4),) if lat else ()),
            Col("t_pred"), Col("bound", "left", 1)]
    rows = [(e(o.name), o.category, e(o.named_scope or ""), fmt_number(o.count), si(o.flops, "FLOP"),
             fmt_bytes(o.bytes),
             fmt_bytes(o.comm_bytes) if o.comm_bytes else "", ms(o.t_math_s), ms(o.t_mem_s),
             ms(o.t_comm_s) if o.comm_bytes else "",
             *((f"{ms(o.t_latency_s)} ({o.hops})" if o.t_latency_s else "",) if lat else ()),
             ms(o.t_pred_s), o.bound) for o in pred.top(top)]
    print_fitted(console, cols, rows, f"Top {min(top, len(pred.ops))} of {len(pred.ops)} ops by predicted time")
    for title, totals in (("by category", pred.time_by_category_s), ("by bound", pred.time_by_bound_s),
                          ("by named scope", pred.time_by_scope_s)):
        items = list(totals.items())[:12]
        console.print(f"{title}: " + ", ".join(f"{e(k)} {ms(v)}" for k, v in items))
    if explain:
        for o in pred.top(top):
            scope = f", {e(o.named_scope)}" if o.named_scope else ""
            console.print(f"\n[bold]{e(o.name)}[/bold] ({e(o.opcode)}{scope})")
            if len(o.members) > 1:
                console.print(f"  grouped ops: {e(', '.join(o.members))}")
            for line in o.explanation:
                console.print(f"  {e(line)}")
    for a in pred.assumptions:
        console.print(f"[dim]assumption: {e(a)}[/dim]")
