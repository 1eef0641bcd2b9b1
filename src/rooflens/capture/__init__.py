"""The experiment: the only code that drives JAX's profiler.

``rl.capture`` (a function, warmed up outside a short window), ``Session`` (the loop you already
have), the trace window they share and its in-window recorder (compilations, cache misses, implicit
transfers), and ``rooflens run``'s launcher (stdlib-only, loaded by path before the user's script).
Reading what was captured is :mod:`rooflens.trace`.
"""

from rooflens.capture.capture import STEP_NAME, capture


def __getattr__(name: str):
    """``Session`` on first use: ``import rooflens`` (which binds ``rl.capture``) stays light."""
    if name == "Session":
        from rooflens.capture.session import Session

        return Session
    raise AttributeError(f"module 'rooflens.capture' has no attribute {name!r}")


__all__ = ["STEP_NAME", "Session", "capture"]
