"""Sentences more than one view prints (terminal and HTML say them the same way)."""

from __future__ import annotations

import math
import re

from rooflens.units import fmt_bytes, fmt_percent, fmt_ratio, fmt_seconds


def saving_line(f) -> str:
    """What fixing a finding is worth: ``fixing this would save ~2.1 ms of a 9.8 ms step``."""
    if f.headroom_bytes is not None:
        return f"fixing this would save no device time; it frees up to {fmt_bytes(f.headroom_bytes)} of device memory"
    if not f.recoverable_s:
        return "fixing this would save no device time"
    if f.step_s:
        return (f"fixing this would save ~{fmt_seconds(f.recoverable_s)} of a {fmt_seconds(f.step_s)} {f.per} "
                f"({fmt_percent(f.recoverable_s / f.step_s)})")
    return f"fixing this would save ~{fmt_seconds(f.recoverable_s)} per {f.per}"


def mfu_text(step, roofs, chip_reason: str = "") -> str:
    """``MFU 34.6%``, or why it is unknown (never a zero for an unknown): no roofline, or no model FLOPs."""
    if step is not None and step.mfu is not None:
        note = getattr(step, "mfu_note", "")
        return f"MFU {fmt_percent(step.mfu)}" + (f" ({note})" if note else "")
    if step is not None and getattr(step, "mfu_note", ""):
        return f"MFU withheld ({step.mfu_note})"
    if roofs is None:
        return "MFU unknown (no roofline" + (f": {chip_reason})" if chip_reason else ")")
    if step is None:
        return "MFU unknown (no step measured)"
    return ("MFU unknown (the step's model FLOPs are unknown: no dot, convolution or priced matmul-like kernel "
            "in it)")


def memory_line(mem) -> str:
    """``jit_step: compiled peak 16.8 MB per device, holding 520 kB of inputs and outputs (the peak is 32× that)``."""
    main = mem.main
    ratio = mem.peak_over_state
    return (f"{main.program}: compiled peak {fmt_bytes(main.peak_bytes)} per device, holding "
            f"{fmt_bytes(main.state_bytes)} of inputs and outputs"
            + (f" (the peak is {fmt_ratio(ratio)} that)" if ratio else "")
            + (f"; live device memory {mem.live_peak_words} {fmt_bytes(mem.live_peak_bytes)}"
               if mem.live_peak_bytes else ""))


#: Programs whose compiled peak is under this share of the largest one are summed up in one line, not shown
#: in full (Flax's init and eager primitives compile dozens of small programs, from 8 B to a weight's size).
SMALL_PROGRAM_SHARE = 0.25
MAX_PROGRAMS_SHOWN = 3


def ranked_programs(programs, main: str = "") -> tuple[list, list, str]:
    """A run's compiled programs as the memory views show them: the few that matter in full (the step
    program ``main`` first, then by peak), and the rest summed up in one sentence (``""`` when none)."""
    ranked = sorted(programs, key=lambda p: (p.program != main, -p.peak_bytes))
    top = max((p.peak_bytes for p in programs), default=0)
    shown = [p for p in ranked if p.program == main or p.peak_bytes >= SMALL_PROGRAM_SHARE * top][:MAX_PROGRAMS_SHOWN]
    rest = sorted((p for p in ranked if p not in shown), key=lambda p: -p.peak_bytes)
    if not rest:
        return shown, rest, ""
    names = ", ".join(p.program for p in rest[:6]) + (", …" if len(rest) > 6 else "")
    lo, hi = fmt_bytes(rest[-1].peak_bytes), fmt_bytes(rest[0].peak_bytes)
    return shown, rest, (f"{len(rest)} more {'program' if len(rest) == 1 else 'programs'} not shown, with compiled "
                         f"peaks of {lo if lo == hi else f'{lo} to {hi}'} (under {SMALL_PROGRAM_SHARE:.0%} of the "
                         f"largest, or past the first {MAX_PROGRAMS_SHOWN}): {names}")


# What a terminal would act on rather than show: C0 controls (ESC starts colour, cursor and OSC title
# sequences; BEL ends OSC), DEL, the C1 controls (0x9b is a one-byte CSI), and the bidirectional
# overrides that reorder what follows them.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
_CONTROLS.update({c: f"\\u{c:04x}" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))})
_CONTROLS_KEEP_LINES = {c: v for c, v in _CONTROLS.items() if c not in (0x09, 0x0A)}
# the same characters as JSON escapes, for JSON text written as UTF-8 (the C0 controls are escaped
# by any JSON writer; DEL, C1 and the overrides are legal raw, so they are escaped here)
_JSON_CONTROLS = {c: f"\\u{c:04x}" for c in _CONTROLS if c >= 0x7F}
_JSON_CONTROL = re.compile("[" + "".join(chr(c) for c in _JSON_CONTROLS) + "]")


def escape_controls(text: str, keep_lines: bool = False) -> str:
    """``text`` with every control character written as its escape (``\\x1b``), so data shown on a
    terminal can neither style it, move its cursor, nor set its title. ``keep_lines``: newlines and
    tabs stay (for whole paragraphs; a name from data never needs them)."""
    return text.translate(_CONTROLS_KEEP_LINES if keep_lines else _CONTROLS)


def json_text(doc, indent: bool = True) -> str:
    """The JSON rooflens prints or writes: strict (NaN and ±inf as null: JSON has no such numbers, and
    "no figure" is what they mean), with DEL, the C1 controls and the bidirectional overrides as
    ``\\uXXXX`` escapes (the same string to a JSON reader, nothing a terminal would act on)."""
    import json

    import orjson

    option = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY | (orjson.OPT_INDENT_2 if indent else 0)
    try:
        text = orjson.dumps(doc, default=str, option=option).decode()
    except TypeError:  # what orjson cannot write (an integer past 64 bits, from a metadata file): the slow way
        text = json.dumps(finite_json(doc), indent=2 if indent else None, default=str, allow_nan=False,
                          ensure_ascii=False)
    # a search first: ``translate`` looks every character up (0.2 s for a large report), and most have none
    return text.translate(_JSON_CONTROLS) if _JSON_CONTROL.search(text) else text


def e(value) -> str:
    """A string from data (an op, scope, program or file name) for rich terminal output: control
    characters escaped, and rich's own markup characters escaped. Every view uses this one."""
    from rich.markup import escape  # here: a JSON report needs none of rich

    return escape(escape_controls(str(value)))


def terminal_console(**kwargs):
    """A rich Console whose every printed string has its control characters escaped (a second guard
    behind :func:`e`, for text a view forgot to pass through it); newlines and tabs stay."""
    from rich.console import Console

    class _SafeConsole(Console):
        def render_str(self, text: str, **kw):
            return super().render_str(escape_controls(text, keep_lines=True), **kw)

    return _SafeConsole(**kwargs)


def finite_json(doc):
    """``doc`` with every NaN or infinite float as null, for JSON: it has no such numbers (strict
    readers refuse ``NaN``/``Infinity``), and "no figure" is what they mean here."""
    if isinstance(doc, float):
        return doc if math.isfinite(doc) else None
    if isinstance(doc, dict):
        return {k: finite_json(v) for k, v in doc.items()}
    if isinstance(doc, list | tuple):
        return [finite_json(v) for v in doc]
    return doc
