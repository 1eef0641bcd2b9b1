"""Reading what was measured: trace files of one host or many into one table of device ops.

>>> import rooflens as rl
>>> prof = rl.capture(step, params, batch, steps=5)     # or rl.load("logdir")
>>> stats = rl.trace.op_stats(prof)
"""

from rooflens.trace.events import EventTable
from rooflens.trace.profile import OpInfo, Profile, load
from rooflens.trace.stats import DeviceTime, Gap, OpStat, OpStats, StepSummary, op_stats


def __getattr__(name: str):
    """``rl.trace.Session`` and ``rl.trace.capture``: the capture side lives in :mod:`rooflens.capture`."""
    if name in ("Session", "capture"):
        import importlib

        return getattr(importlib.import_module("rooflens.capture"), name)
    raise AttributeError(f"module 'rooflens.trace' has no attribute {name!r}")

__all__ = ["DeviceTime", "EventTable", "Gap", "OpInfo", "OpStat", "OpStats", "Profile", "Session", "StepSummary",
           "capture", "load", "op_stats"]
