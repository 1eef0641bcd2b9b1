"""The experiment: the only code that drives JAX's profiler.

``rl.capture`` (a function, warmed up outside a short window), ``Session`` (the loop you already
have), the trace window they share and its in-window recorder (compilations, cache misses, implicit
transfers), and ``rooflens run``'s launcher (stdlib-only, loaded by path before the user's script).
Reading what was captured is :mod:`rooflens.trace`.
"""

from rooflens.capture.capture import STEP_NAME, capture
from rooflens.capture.session import Session

__all__ = ["STEP_NAME", "Session", "capture"]
