"""The experiment: capture traces the right way and read them into one table of device ops.

>>> import rooflens as rl
>>> prof = rl.capture(step, params, batch, steps=5)     # or rl.load("logdir")
>>> stats = rl.trace.op_stats(prof)
"""

from rooflens.trace.capture import capture
from rooflens.trace.events import EventTable
from rooflens.trace.profile import OpInfo, Profile, load
from rooflens.trace.session import Session
from rooflens.trace.stats import DeviceTime, Gap, OpStat, OpStats, StepSummary, op_stats

__all__ = ["DeviceTime", "EventTable", "Gap", "OpInfo", "OpStat", "OpStats", "Profile", "Session", "StepSummary",
           "capture", "load", "op_stats"]
