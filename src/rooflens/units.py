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
