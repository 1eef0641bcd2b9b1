"""How rooflens writes seconds and bytes for people (every layer may use it; it imports nothing of ours)."""


def fmt_seconds(seconds: float) -> str:
    """``0.0893`` → ``89.3 ms``: three significant digits in s, ms or µs."""
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} µs"


def fmt_bytes(n: float, digits: int = 4) -> str:
    """Decimal units (``67.11 MB``): the figures the arithmetic and the sources use."""
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= div:
            return f"{n / div:.{digits}g} {unit}"
    return f"{n:.0f} B"


def fmt_bytes_binary(n: int) -> str:
    """Binary units (``2.0 KiB``): what the HLO views print for a buffer (tiles are powers of two)."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,} B"


def fmt_si(value: float | None, unit: str = "", digits: int = 3) -> str:
    """``1.97e14, "FLOP/s"`` → ``197 TFLOP/s``: SI prefixes for rates and counts (``—`` for None)."""
    if value is None:
        return "—"
    for prefix, div in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= div:
            return f"{value / div:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}".rstrip()
