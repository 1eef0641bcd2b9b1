"""What no report may say: a number that cannot be true (issue 42, "no impossible number").

:func:`violations` checks a :class:`~rooflens.analysis.report.Report` through its one JSON document
(:func:`document_violations`, which also reads a saved ``--json`` / ``--out`` file), and
:func:`text_violations` checks what the terminal view printed. Each returns one sentence per broken
rule, naming the figure and where it is, and an empty list for a sound report:

- a share, a fraction or a utilisation lies in [0, 1]: an op's share of device time, its fraction of
  peak FLOP/s or of HBM bandwidth, MFU ("% of peak" above 100 % only where the ratio is withheld and
  its reason is given: then no fraction is printed at all);
- a part is never larger than its whole: a device is busy no longer than its window, an op's self time
  is within its total, a step's parts (compute, communication, layout, host, other, idle; unpriced and
  the time beyond lower bounds inside its busy time) each within the step (an op-time part past it by no more
  than the op time the breakdown says ran at once), and a finding's saving
  within the step it is part of;
- the step's breakdown sums to the step (busy parts + other programs + idle − op time at once = step time,
  within rounding), and the time it says the device runs no op bounds the overheads finding;
- an op is no faster than its compute or memory roofline (its ratio is at least 1) unless the roofline is
  withheld as unreliable;
- a rounding is not a measurement: op time "at once" is zero, or more than a billionth of the step (below
  that it is what float sums of many op times leave: "at once: 0.0000278 ps");
- a buffer at a program's memory peak is no larger than its shape in memory;
- a statistic has its name (no bare "±") and its order: min ≤ median/mean ≤ max, a count that matches its values.

Pure functions over data (no file read, no printing): the tests run them over every fixture's report
and every real script's, and a debugging session can call ``violations(rep)`` on its own report.
"""

from __future__ import annotations

import math
import re

from rooflens.analysis.compare import ROUNDING_REL
from rooflens.analysis.trust import WITHHELD

#: a fraction measured above 1 by timer rounding alone (rooflens.analysis.trust.MAX_FRACTION holds none)
FRACTION_SLACK = 1e-6
#: the step's parts sum to the step within this share of it (floating sums of many op times)
SUM_REL = 0.01
SUM_ABS_S = 1e-9
#: an op's roofline under these bounds is a floor: measured below it, the roofline (the chip, its calibration or the
#: cost model) is what is wrong, and the ratio is withheld (an overhead-bound op is priced at the chip's launch
#: time, which a kernel's own time may undercut)
ROOF_BOUNDS = ("compute", "memory")
#: what XLA may round a buffer's allocation up to beyond its shape's bytes
BUFFER_ALIGN_BYTES = 64
#: findings whose saving is time the device runs no op in the step: never more than the step's measured idle
NO_OP_RULES = ("overheads",)
#: findings whose time is the host's, not the device's (a recompilation may take longer than a step)
HOST_TIME_RULES = ("recompilation",)
#: what the breakdown's parts are called in the JSON and in the terminal's Step line
PARTS = ("compute_s", "communication_s", "layout_s", "host_s", "other_s", "idle_s")


def violations(report) -> list[str]:
    """Every impossible number in a Report (see the module's list)."""
    return document_violations(report.to_json())


def _bad_fraction(x, slack: float = FRACTION_SLACK) -> bool:
    return x is not None and (not math.isfinite(x) or x < -slack or x > 1 + slack)


def _over(part: float | None, whole: float | None, rel: float = 1e-9, abs_s: float = 1e-12) -> bool:
    return part is not None and whole is not None and part > whole * (1 + rel) + abs_s


def document_violations(doc: dict) -> list[str]:
    """Every impossible number in a report's JSON document (``Report.to_json()``, ``rooflens report --json``)."""
    out: list[str] = []
    out += _op_stats(doc.get("op_stats") or [])
    out += _devices(doc.get("devices") or [])
    out += _comparison(doc.get("comparison") or [])
    steps = doc.get("steps") or {}
    out += _step_stats(steps, "steps")
    if doc.get("host_steps"):
        out += _step_stats(doc["host_steps"], "host_steps")
    main = steps.get("breakdown")
    if main:
        out += _breakdown(main, "the step")
    for b in doc.get("programs") or []:
        out += _breakdown(b, f"program {b.get('program')!r}'s step")
    for f in doc.get("findings") or []:
        out += _finding(f)
        if f.get("rule") in NO_OP_RULES and main and main.get("basis") in ("steps", "executions") \
                and _over(f.get("recoverable_s"), main.get("idle_s") or 0.0, 1e-3, SUM_ABS_S):
            out.append(f"finding {f['rule']}: the device runs no op {f['recoverable_s']:.6g} s of the step, but the "
                       f"step's breakdown measures {main.get('idle_s') or 0.0:.6g} s idle")
    out += _memory(doc.get("memory") or {})
    out += [f"{path}: {v:.6g} (a share or fraction outside [0, 1])" for path, v in _shares(doc, "") if _bad_fraction(v)]
    for note in doc.get("notes") or []:
        out += [f"note {note!r}: {v}" for v in sentence_violations(note)]
    return out


def _shares(x, path: str):
    """Every number in the document whose key names it a share or a fraction (``…_share``, ``…fraction…``)."""
    if isinstance(x, dict):
        for k, v in x.items():
            p = f"{path}.{k}" if path else str(k)
            key = str(k).lower()
            if isinstance(v, int | float) and not isinstance(v, bool) and ("fraction" in key or key == "share"
                                                                            or key.endswith("_share")
                                                                            or key.startswith("share_")):
                yield p, float(v)
            else:
                yield from _shares(v, p)
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _shares(v, f"{path}[{i}]")


def _op_stats(rows: list[dict]) -> list[str]:
    out = []
    for s in rows:
        where = f"op {s.get('program')}/{s.get('name')}"
        pct = s.get("pct_device_time")
        if pct is not None and (pct < -1e-9 or pct > 100 + 1e-6):
            out.append(f"{where}: {pct:.4g} % of device time (a share above 100 % or below 0)")
        if _over(s.get("self_time_s"), s.get("total_time_s")):
            out.append(f"{where}: self time {s['self_time_s']:.6g} s is larger than its total time "
                       f"{s['total_time_s']:.6g} s")
        lo, mid, hi = s.get("min_time_s"), s.get("median_time_s"), s.get("max_time_s")
        if None not in (lo, mid, hi) and not lo - 1e-12 <= mid <= hi + 1e-12:
            out.append(f"{where}: min {lo:.6g} s, median {mid:.6g} s, max {hi:.6g} s are out of order")
    return out


def _devices(rows: list[dict]) -> list[str]:
    out = []
    for d in rows:
        where = f"device {d.get('host')}:{d.get('device')}"
        busy, window, idle = d.get("busy_s"), d.get("window_s"), d.get("idle_s")
        if _over(busy, window):
            out.append(f"{where}: busy {busy:.6g} s is longer than its window {window:.6g} s")
        if idle is not None and idle < -1e-12:
            out.append(f"{where}: idle {idle:.6g} s is negative")
        if None not in (busy, idle, window) and abs(busy + idle - window) > 1e-6 * max(window, 1e-3):
            out.append(f"{where}: busy {busy:.6g} s + idle {idle:.6g} s is not its window {window:.6g} s")
        credited = sum(e[1] for e in d.get("host_in_gaps") or [])
        if idle is not None and _over(credited, idle):
            out.append(f"{where}: the host's frames cover {credited:.6g} s of its gaps, more than its idle "
                       f"{idle:.6g} s")
    return out


def _comparison(rows: list[dict]) -> list[str]:
    out = []
    for c in rows:
        where = f"op {c.get('program')}/{c.get('name')}"
        for key, what in (("flops_fraction_of_peak", "of peak FLOP/s"), ("bytes_fraction_of_peak", "of HBM bandwidth")):
            f = c.get(key)
            if _bad_fraction(f):
                out.append(f"{where}: {100 * f:.4g} % {what}")
        if not c.get("roofline_reliable", True):
            if c.get("ratio") is not None or c.get("flops_fraction_of_peak") is not None \
                    or c.get("bytes_fraction_of_peak") is not None:
                out.append(f"{where}: its roofline is unreliable, yet a ratio or fraction of peak is given")
            if not (c.get("roofline_note") or "").strip():
                out.append(f"{where}: its ratio is withheld with no reason given")
        r = c.get("ratio")
        if r is not None and r < 0:
            out.append(f"{where}: negative ratio {r:.4g}")
        elif r is not None and r < 1 - FRACTION_SLACK and c.get("roofline_reliable", True) \
                and c.get("bound") in ROOF_BOUNDS and c.get("roofline_bound", "exact") == "exact":
            out.append(f"{where}: ratio {r:.3g}, faster than its {c['bound']} roofline, yet the roofline is judged "
                       "reliable")
    return out


def _step_stats(s: dict, where: str) -> list[str]:
    out = []
    times = s.get("times_s")
    if times is not None and s.get("count") is not None and len(times) != s["count"]:
        out.append(f"{where}: count {s['count']} but {len(times)} step times")
    lo, mean, hi = s.get("min_s"), s.get("mean_s"), s.get("max_s")
    if None not in (lo, mean, hi) and s.get("count") and not lo * (1 - 1e-9) <= mean <= hi * (1 + 1e-9):
        out.append(f"{where}: mean {mean:.6g} s is outside [min {lo:.6g} s, max {hi:.6g} s]")
    if (s.get("std_s") or 0.0) < 0:
        out.append(f"{where}: negative standard deviation")
    return out


def _breakdown(b: dict, where: str) -> list[str]:
    out = []
    step = b.get("step_time_s")
    mfu = b.get("mfu")
    if _bad_fraction(mfu):
        out.append(f"{where}: MFU {100 * mfu:.4g} % (above 100 % or below 0)")
    if step is None or step < 0 or not math.isfinite(step):
        return [*out, f"{where}: step time {step!r} is not a time"]
    # ops that ran at once (XLA:CPU's threads, several streams) make the op-time parts exceed the step by the op time
    # at once, which the breakdown names (concurrent_s): a part may be longer than the step by that, not more
    at_once = max(b.get("concurrent_s") or 0.0, 0.0)
    for key in (*PARTS, "unpriced_s", "bound_excess_s"):
        v = b.get(key)
        if v is None:
            continue
        if v < -1e-12:
            out.append(f"{where}: {key.removesuffix('_s')} {v:.6g} s is negative")
        elif _over(v, step + (at_once if key != "idle_s" else 0.0), 1e-6, SUM_ABS_S):
            out.append(f"{where}: {key.removesuffix('_s')} {v:.6g} s is longer than the step {step:.6g} s "
                       f"({v / step:.0%} of the step)" if step else
                       f"{where}: {key.removesuffix('_s')} {v:.6g} s in a step of no time")
    busy = sum(b.get(k) or 0.0 for k in PARTS[:-1])
    others = sum(s for _, s in b.get("other_programs") or ())  # other programs' time in the step: not idle
    concurrent = b.get("concurrent_s") or 0.0  # op time that ran alongside other ops: in the parts, once too many
    if concurrent < -1e-12 or _over(concurrent, busy + others, 1e-6, SUM_ABS_S):
        out.append(f"{where}: {concurrent:.6g} s of op time at once, of {busy + others:.6g} s of op time")
    elif 0 < concurrent <= ROUNDING_REL * step:
        out.append(f"{where}: {concurrent:.3g} s of op time at once, a rounding of the sums (a billionth of the "
                   f"{step:.6g} s step or less) given as a measurement")
    total = busy + others + (b.get("idle_s") or 0.0) - concurrent
    if abs(total - step) > SUM_REL * step + SUM_ABS_S:
        out.append(f"{where}: its parts sum to {total:.6g} s, not to the step {step:.6g} s "
                   f"({', '.join(f'{k.removesuffix(chr(95) + chr(115))} {b.get(k) or 0.0:.4g}' for k in PARTS)})")
    for key in ("unpriced_s", "bound_excess_s"):
        if _over(b.get(key), busy, 1e-6, SUM_ABS_S):
            out.append(f"{where}: {key.removesuffix('_s')} {b[key]:.6g} s is more than the device's busy time in "
                       f"it, {busy:.6g} s")
    return out


def _finding(f: dict) -> list[str]:
    out = []
    where = f"finding {f.get('rule')} ({f.get('title')!r})"
    rec, step = f.get("recoverable_s") or 0.0, f.get("step_s") or 0.0
    if rec < -1e-12:
        out.append(f"{where}: negative saving {rec:.6g} s")
    if step and _over(rec, step, 1e-6, SUM_ABS_S):
        out.append(f"{where}: saves {rec:.6g} s of a {step:.6g} s {f.get('per') or 'step'}")
    if (f.get("time_s") or 0.0) < -1e-12:
        out.append(f"{where}: negative time {f['time_s']:.6g} s")
    if step and f.get("per") == "step" and f.get("rule") not in HOST_TIME_RULES \
            and _over(f.get("time_s"), step, 1e-3, SUM_ABS_S):
        # the time it involves is per device per step where there are steps (rooflens.analysis.findings.Finding)
        out.append(f"the step: finding {f.get('rule')} involves {f['time_s']:.6g} s per device per step, more than "
                   f"the step {step:.6g} s")
    for text in (f.get("title") or "", *(f.get("evidence") or ())):
        out += [f"{where}: {v}" for v in sentence_violations(text)]
    return out


def _memory(m: dict) -> list[str]:
    out = []
    for p in m.get("programs") or []:
        peak, state = p.get("peak_bytes"), p.get("state_bytes")
        if peak is not None and peak < 0 or state is not None and state < 0:
            out.append(f"memory of {p.get('program')}: a negative size")
        # a buffer holds its value, no more than the value's shape in memory (padded by its layout's tiles; a few
        # bytes of alignment): more is another compilation's buffer under the same name
        for b in p.get("peak_buffers") or []:
            size, padded = b.get("bytes"), b.get("padded_bytes")
            if size and padded and size > padded * 1.01 + BUFFER_ALIGN_BYTES:
                out.append(f"memory of {p.get('program')}: buffer {b.get('name')} of {size:.6g} B, larger than its "
                           f"shape {b.get('shape')} ({padded:.6g} B)")
    return out


# -- the terminal's text --------------------------------------------------------------------------

_UNIT_S = {"ps": 1e-12, "ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0}
_TIME = r"(\d+(?:\.\d+)?(?:e[+-]?\d+)?)\s?(ps|ns|µs|us|ms|s|min|h)\b"
_PCT = re.compile(r"(\d+(?:\.\d+)?(?:e[+-]?\d+)?)\s?%")
#: words before or after a percentage that make it a change or a spread, not a share of a whole
_NOT_A_SHARE = re.compile(r"\b(more|less|slower|faster|longer|shorter|larger|smaller|higher|lower|above|over|"
                          r"beyond|increase[sd]?|grew|grows|rose|drop(?:ped|s)?|change[sd]?|vary|varies|variation|"
                          r"coefficient|spread|skew|deviation|worse|better)\b", re.I)


_NAMED_SPREAD = re.compile(r"\b(std|standard deviation|IQR|interquartile|quartiles?|spread|half the)\b|±inf", re.I)


def seconds(number: str, unit: str) -> float:
    """``"1.2", "ms"`` → 0.0012 (what :func:`rooflens.units.fmt_seconds` writes, read back)."""
    return float(number) * _UNIT_S[unit]


def sentence_violations(text: str) -> list[str]:
    """Impossible shares in one sentence: a percentage of a whole ("of the step", "of device time",
    "of peak", MFU) above 100 %, and "X of a Y step" with X larger than Y."""
    out = []
    withheld = WITHHELD in text  # a roof beaten, said as the reason its figures are not given
    for m in _PCT.finditer(text):
        v = float(m.group(1))
        if v <= 100 + 1e-9:
            continue
        before, after = text[max(0, m.start() - 40):m.start()], text[m.end():m.end() + 40]
        share = re.match(r"\s*(of\b|device\b|MFU\b)", after) or re.search(r"\bMFU\s*$", before)
        if share and not withheld and not _NOT_A_SHARE.search(before[-25:]):
            out.append(f"{m.group(0).strip()} in {text.strip()[:160]!r} (a share above 100 %)")
    for m in re.finditer("±", text):  # a spread says which statistic it is
        near = text[max(0, m.start() - 30):m.end() + 30]
        if not _NAMED_SPREAD.search(near):
            out.append(f"an unnamed ± in {text.strip()[:160]!r} (say which statistic: standard deviation, IQR, …)")
    for m in re.finditer(_TIME + r"\s+of\s+(?:a|an|the)\s+" + _TIME, text):
        part, whole = seconds(m.group(1), m.group(2)), seconds(m.group(3), m.group(4))
        if part > whole * 1.005 + 1e-9:
            out.append(f"{m.group(0)!r}: a part larger than its whole")
    return out


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"[│┃]", line)[1:-1]]


def text_violations(text: str) -> list[str]:
    """Every impossible number in ``rooflens report``'s terminal text: each sentence's shares
    (:func:`sentence_violations`), the op table's "% device" column, the Devices table (busy within the
    window), and the Step line's breakdown (each part within the step, the parts summing to it)."""
    out: list[str] = []
    lines = text.splitlines()
    header: list[str] | None = None
    for line in lines:
        if "┃" in line:
            header = _cells(line)
            continue
        if "│" not in line:
            out += [f"line {line.strip()[:160]!r}: {v}" for v in sentence_violations(line)]
            if not line.strip():
                header = None
            continue
        cells = _cells(line)
        if header and len(cells) == len(header):
            row = dict(zip(header, cells))
            out += _row(row, line)
    out += _step_lines(lines)
    return out


def _row(row: dict, line: str) -> list[str]:
    out = []
    pct = row.get("% device")
    if pct and (m := _PCT.match(pct)) and float(m.group(1)) > 100 + 1e-6:
        out.append(f"op table: {pct} of device time ({line.strip()[:120]!r})")
    achieved = row.get("achieved") or ""
    if (m := _PCT.match(achieved)) and float(m.group(1)) > 100:
        out.append(f"comparison table: {achieved} for {row.get('op')} (above 100 % of a roof, not withheld)")
    ratio = re.fullmatch(r"([0-9.]+)×", row.get("ratio") or "")
    if ratio and float(ratio.group(1)) < 1 - FRACTION_SLACK and row.get("bound") in ROOF_BOUNDS:
        out.append(f"comparison table: {row['ratio']} for {row.get('op')}, faster than its {row['bound']} roofline "
                   "and not withheld")
    if "busy" in row and "window" in row:
        b, w = re.fullmatch(_TIME, row["busy"]), re.fullmatch(_TIME, row["window"])
        if b and w and seconds(*b.groups()) > seconds(*w.groups()) * 1.005 + 1e-9:
            out.append(f"devices table: busy {row['busy']} longer than the window {row['window']}")
    return out


_STEP = re.compile(r"^Step \((?P<what>.*)\): measured " + _TIME)
_PART = re.compile(r"(compute|communication|copies/layout|host transfers|other|idle|unpriced)\s+" + _TIME)
_BESIDE = re.compile(r"(other programs in the step|at once): " + _TIME)  # the lines under the parts


def _step_lines(lines: list[str]) -> list[str]:
    out = []
    for k, line in enumerate(lines):
        m = _STEP.match(line.strip())
        if not m or k + 1 >= len(lines):
            continue
        step = seconds(m.group(2), m.group(3))
        block = lines[k + 1:]  # the lines under it, to the next blank one (a narrow terminal wraps them)
        text = re.sub(r"\s+", " ", " ".join(block[:next((j for j, ln in enumerate(block) if not ln.strip()),
                                                          len(block))]))
        parts = {p.group(1): seconds(p.group(2), p.group(3)) for p in _PART.finditer(text)}
        if not parts:
            continue
        extra = {p.group(1): seconds(p.group(2), p.group(3)) for p in _BESIDE.finditer(text)}
        # three significant digits each: every printed figure is within 0.5 % of its value
        slack = 0.005 * (step + sum(parts.values()) + sum(extra.values())) + 1e-9
        for name, v in parts.items():  # (op time at once, named under the parts, may take a part past the step)
            if v > step + (extra.get("at once", 0.0) if name != "idle" else 0.0) + slack:
                out.append(f"Step line: {name} {v:.4g} s is longer than the step {step:.4g} s")
        total = (sum(v for name, v in parts.items() if name != "unpriced")
                 + extra.get("other programs in the step", 0.0) - extra.get("at once", 0.0))
        at_once = extra.get("at once", 0.0)
        if 0 < at_once <= ROUNDING_REL * step:
            out.append(f"Step line: {at_once:.3g} s at once, a rounding of sums given as a measurement")
        if abs(total - step) > SUM_REL * step + slack:
            out.append(f"Step line: the parts sum to {total:.4g} s, not to the step {step:.4g} s ({text[:200]!r})")
        busy = sum(v for name, v in parts.items() if name not in ("unpriced", "idle"))  # the op time, at once or not
        if parts.get("unpriced", 0.0) > busy + slack:
            out.append(f"Step line: unpriced {parts['unpriced']:.4g} s is more than the busy time {busy:.4g} s")
    return out

