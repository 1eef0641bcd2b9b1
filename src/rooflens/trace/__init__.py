"""Reading what was measured: trace files of one host or many into one table of device ops.

>>> import rooflens as rl
>>> prof = rl.capture(step, params, batch, steps=5)     # or rl.load("logdir")
>>> stats = rl.trace.op_stats(prof)
"""

import importlib as _importlib

#: public names served on first use, so that the stdlib-only modules here (the run manifest) import
#: without numpy; ``rl.trace.Session`` and ``rl.trace.capture`` live in :mod:`rooflens.capture`
_LAZY = {"EventTable": "rooflens.trace.events", "OpInfo": "rooflens.trace.profile",
         "Profile": "rooflens.trace.profile", "load": "rooflens.trace.loading",
         **{n: "rooflens.trace.stats" for n in ("DeviceTime", "Gap", "OpStat", "OpStats", "StepSummary", "op_stats")},
         "Session": "rooflens.capture", "capture": "rooflens.capture"}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'rooflens.trace' has no attribute {name!r}")
    value = getattr(_importlib.import_module(_LAZY[name]), name)
    if not _LAZY[name].startswith("rooflens.capture"):
        globals()[name] = value
    return value


__all__ = ["DeviceTime", "EventTable", "Gap", "OpInfo", "OpStat", "OpStats", "Profile", "Session", "StepSummary",
           "capture", "load", "op_stats"]
