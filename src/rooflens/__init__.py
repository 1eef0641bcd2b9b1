"""rooflens: predict, measure and explain the performance of JAX programs.

>>> import rooflens as rl
>>> rl.chip("tpu-v5e")                                  # a catalogue chip, every number cited
>>> pred = rl.predict(fn, *args, chip="tpu-v5e")        # per-op roofline, without the chip
"""

from rooflens import analysis, cost, hlo, memory, plan, trace
from rooflens import hardware as _hardware
from rooflens.analysis import Finding, Report
from rooflens.api import analyze, check, diff
from rooflens.cost import OpCost, OpPrediction, Prediction
from rooflens.errors import RooflensError
from rooflens.hardware import Chip, ChipError, chip
from rooflens.lowering import predict
from rooflens.trace import Profile, capture, load

__version__ = "0.1.0"


def chips() -> list[str]:
    """Names of every known chip (shipped, ROOFLENS_CHIPS files, and the calibrated ``local``)."""
    return _hardware.chips()


__all__ = [
    "Chip", "ChipError", "Finding", "OpCost", "OpPrediction", "Prediction", "Profile", "Report", "RooflensError",
    "__version__", "analysis", "analyze", "capture", "check", "chip", "chips", "cost", "diff", "hlo", "load", "memory",
    "plan", "predict",
    "trace",
]
