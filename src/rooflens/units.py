"""How rooflens writes quantities for people: the one place for time, bytes, rates, FLOPs, ratios,
percentages and counted nouns (every layer may use it; it imports nothing of ours).

Conventions, held by every view (terminal, HTML, notebook, JSON's prose) and every finding's text:

- **time**: three significant digits in the largest unit that keeps the figure at or above 1
  (``ps``, ``ns``, ``µs``, ``ms``, ``s``), then ``min``, ``h`` and ``d`` for long runs. The unit is
  chosen *after* rounding, so 999.981 µs reads ``1 ms``, never ``1e+03 µs``.
- **bytes**: decimal SI units (``kB``, ``MB``, ``GB``, ``TB``, ``PB``; 1 kB = 1000 B), the units the
  chip catalogue's sources and every bandwidth (``GB/s``) use, so a size and a rate read alike.
  Binary units are never printed.
- **rates and counts** (FLOP/s, B/s, FLOPs): SI prefixes up to ``E`` (exa), three significant digits.
- **ratios**: ``1.25×``; **percentages**: ``34.6%`` (a non-zero share never reads ``0%``).
- **unknown** (None, NaN) is ``—`` in a table cell, or the word the caller passes (``unknown``);
  no figure ever prints in scientific notation.
"""

from __future__ import annotations

import math

MISSING = "—"


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _sig(value: float, digits: int) -> str:
    """``value`` to ``digits`` significant digits without an exponent (``123``, ``1.5``, ``0.012``),
    trailing zeros dropped; ``value`` is below 10**digits in size (callers scale it first)."""
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _round_sig(value: float, digits: int) -> float:
    """``value`` rounded to ``digits`` significant digits (so a unit is chosen for what will be printed)."""
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, digits - 1 - math.floor(math.log10(abs(value))))


_SMALL_TIME_UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9), ("ps", 1e-12))


def fmt_seconds(seconds: float | None, missing: str = MISSING, digits: int = 3) -> str:
    """``0.0893`` → ``89.3 ms``; ``0.000999981`` → ``1 ms``; ``78.2`` → ``78.2 s``; ``5400`` → ``1.5 h``;
    None → ``missing``. Seconds up to 1000 s, then minutes, hours (from 2 h) and days (from 2 d)."""
    if _missing(seconds):
        return missing
    if math.isinf(seconds):
        return "∞" if seconds > 0 else "-∞"
    r = _round_sig(seconds, digits)
    if r == 0:
        return "0 s"
    sign = "-" if r < 0 else ""
    a = abs(r)
    if a >= 1000:
        unit, size = (("d", 86400.0) if a >= 2 * 86400 else ("h", 3600.0) if a >= 2 * 3600 else ("min", 60.0))
        v = _round_sig(a / size, digits)
        return f"{sign}{v:,.0f} {unit}" if v >= 10 ** digits else f"{sign}{_sig(v, digits)} {unit}"
    for unit, size in _SMALL_TIME_UNITS:
        if a >= size * (1 - 1e-12):
            return f"{sign}{_sig(_round_sig(a / size, digits), digits)} {unit}"
    return f"{sign}{_sig(a / 1e-12, digits)} ps"  # below 1 ps: a fraction of a picosecond, no exponent


_BYTE_UNITS = (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3))


def fmt_bytes(n: float | None, digits: int = 3, missing: str = MISSING) -> str:
    """``67108864`` → ``67.1 MB`` (decimal units; whole bytes below 1 kB: ``512 B``); None → ``missing``."""
    if _missing(n):
        return missing
    if math.isinf(n):
        return "∞ B"
    sign = "-" if n < 0 else ""
    scaled = _scaled(abs(_round_sig(float(n), digits)), _BYTE_UNITS, digits)
    return f"{sign}{scaled}" if scaled else f"{sign}{abs(float(n)):,.0f} B"


def _scaled(a: float, units: tuple[tuple[str, float], ...], digits: int, suffix: str = "") -> str:
    """``a`` (≥ 0, rounded) in the largest of ``units`` (largest first) it reaches, with ``digits`` significant
    digits and thousands separators past the largest unit: ``"67.1 MB"``; "" below the smallest."""
    for unit, size in units:
        if a >= size:
            v = _round_sig(a / size, digits)
            if size == units[0][1] and v >= 10 ** digits:
                return f"{v:,.0f} {unit}{suffix}"
            return f"{_sig(v, digits)} {unit}{suffix}"
    return ""


_SI_PREFIXES = (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3))


def fmt_si(value: float | None, unit: str = "", digits: int = 3, missing: str = MISSING) -> str:
    """``1.97e14, "FLOP/s"`` → ``197 TFLOP/s``: SI prefixes for rates and counts; None → ``missing``."""
    if _missing(value):
        return missing
    if math.isinf(value):
        return f"∞ {unit}".rstrip()
    r = _round_sig(float(value), digits)
    sign = "-" if r < 0 else ""
    a = abs(r)
    return f"{sign}{_scaled(a, _SI_PREFIXES, digits, unit) or f'{_sig(a, digits)} {unit}'.rstrip()}"


def fmt_rate(bytes_per_s: float | None, missing: str = MISSING) -> str:
    """A bandwidth: ``4.5e10`` → ``45 GB/s`` (the same decimal units as :func:`fmt_bytes`)."""
    return fmt_si(bytes_per_s, "B/s", missing=missing)


def fmt_flops(flops: float | None, missing: str = MISSING) -> str:
    """A count of floating-point operations: ``3.4e12`` → ``3.4 TFLOP``."""
    return fmt_si(flops, "FLOP", missing=missing)


def fmt_number(value: float | None, digits: int = 3, missing: str = MISSING) -> str:
    """A plain quantity with no unit: ``0.3412`` → ``0.341``; ``45000000000.0`` → ``45,000,000,000``; whole
    numbers with thousands separators, fractions to ``digits`` significant digits, never an exponent."""
    if _missing(value):
        return missing
    if isinstance(value, bool):
        return str(value)
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    if float(value).is_integer():
        return f"{int(value):,}"
    if abs(value) >= 10 ** digits:
        return f"{value:,.0f}"
    return _sig(_round_sig(float(value), digits), digits)


def fmt_ratio(x: float | None, missing: str = MISSING, digits: int = 3) -> str:
    """A ratio of two like quantities: ``1.2549`` → ``1.25×``; ``1974.7`` → ``1,975×``."""
    if _missing(x):
        return missing
    if math.isinf(x):
        return "∞×"
    if abs(x) >= 10 ** digits:
        return f"{x:,.0f}×"
    return f"{_sig(_round_sig(x, digits), digits)}×"


def fmt_ratio_range(lo: float, hi: float, digits: int = 3) -> str:
    """``19``–``19`` → ``19×`` (one value when both ends print the same); ``2.1``–``19`` → ``2.1–19×``."""
    a, b = fmt_ratio(lo, digits=digits), fmt_ratio(hi, digits=digits)
    return a if a == b else f"{a[:-1]}–{b}"


#: names (a PyTorch kernel's demangled C++ signature runs to thousands of characters) are cut to this in sentences
#: and terminal tables; the JSON keeps them whole
NAME_CHARS = 96


def fmt_name(name: str, limit: int = NAME_CHARS) -> str:
    """``name`` as a sentence or a table cell shows it: whole up to ``limit`` characters, else its start and "…"
    (``void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<…``)."""
    return name if len(name) <= limit else name[:limit - 1].rstrip() + "…"


def fmt_percent(x: float | None, missing: str = MISSING) -> str:
    """A share (a fraction of 1) as a percentage that never shows a non-zero share as ``0%``:
    ``0.346`` → ``34.6%``, ``0.0004`` → ``0.04%``, ``1e-6`` → ``<0.01%``, ``0`` → ``0%``."""
    if _missing(x):
        return missing
    v = 100 * x
    if v == 0:
        return "0%"
    if abs(v) >= 0.1:
        return f"{v:.1f}%"
    if abs(v) < 0.01:
        return "<0.01%" if v > 0 else ">-0.01%"
    return f"{_sig(_round_sig(v, 2), 2)}%"


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """``1, "collective"`` → ``1 collective``; ``9, "collective"`` → ``9 collectives`` (``nouns`` for an
    irregular plural). Counts take thousands separators."""
    return f"{n:,} {noun if n == 1 else (nouns or noun + 's')}"



def fmt_named(name: str, value, digits: int = 4) -> str:
    """A figure written in the unit its name carries (the ``_s``/``_bytes``/``_per_s`` convention), to
    ``digits`` significant digits: ``ici_link_bytes_per_s_oneway, 4.5e10`` → ``45 GB/s``;
    ``ici_hop_latency_s, 1e-6`` → ``1 µs``; ``peak_flops_per_s.bf16`` → ``197 TFLOP/s``;
    ``shared_memory_bytes_per_sm`` → ``233.5 kB per SM``; a topology list ``((2, 4), (4, 4))`` →
    ``2x4, 4x4``; other numbers plainly (never an exponent)."""
    if isinstance(value, bool | str):
        return str(value)
    if isinstance(value, list | tuple):
        if all(isinstance(v, list | tuple) for v in value):
            return ", ".join("x".join(str(d) for d in v) for v in value)
        return ", ".join(fmt_named(name, v, digits) for v in value)
    if not isinstance(value, int | float):
        return str(value)
    key = name.rsplit(".", 1)[0] if name.startswith("peak_flops_per_s.") else name.rsplit(".", 1)[-1]
    for per, words in (("_per_sm", "per SM"), ("_per_device", "per device"), ("_per_chip", "per chip")):
        if key.endswith("_bytes" + per):
            return f"{fmt_bytes(value, digits)} {words}"
    if "flops_per_s" in key:
        return fmt_si(value, "FLOP/s", digits)
    if "bytes_per_s" in key:
        return fmt_si(value, "B/s", digits)
    if key.endswith("_bytes"):
        return fmt_bytes(value, digits)
    if key.endswith("_flops"):
        return fmt_si(value, "FLOP", digits)
    if key.endswith("_hz"):
        return fmt_si(value, "Hz", digits)
    if key.endswith("_s"):
        return fmt_seconds(value, digits=digits)
    if key.endswith("_fraction"):
        return fmt_percent(value)
    return fmt_number(value, digits)


_WORDS = (("trillion", 1e12), ("billion", 1e9), ("million", 1e6))


def fmt_count(n: float | None, noun: str = "", missing: str = MISSING) -> str:
    """A large count in words: ``1.5e13, "tokens"`` → ``15 trillion tokens``; below a million, digits with
    separators (``15,625 tokens``)."""
    if _missing(n):
        return missing
    a = abs(_round_sig(float(n), 3))
    for word, size in _WORDS:
        if a >= size and a / size < 1000:
            return f"{_sig(_round_sig(n / size, 3), 3)} {word} {noun}".rstrip()
    return f"{fmt_number(n)} {noun}".rstrip()


def fmt_g(value: float | None, digits: int = 4, missing: str = MISSING) -> str:
    """A number in arithmetic shown step by step, as the scaling book writes it: ``digits`` significant
    digits, and for very large or small values the book's exponent (``4.17e11``, ``2.5e-5``), never
    Python's ``4.17e+11``."""
    if _missing(value):
        return missing
    text = f"{value:.{digits}g}"
    if "e" in text:
        mantissa, exp = text.split("e")
        text = f"{mantissa}e{int(exp)}"
    return text
