"""rooflens: predict, measure and explain the performance of JAX programs.

>>> import rooflens as rl
>>> rl.chip("tpu-v5e")                                  # a catalogue chip, every number cited
>>> pred = rl.predict(fn, *args, chip="tpu-v5e")        # per-op roofline, without the chip
"""

import importlib as _importlib
import sys as _sys
from typing import TYPE_CHECKING

from rooflens.capture import capture  # bound here: the function, not the package of the same name
from rooflens.errors import RooflensError

if TYPE_CHECKING:
    from rooflens import analysis, cost, hlo, memory, plan, trace
    from rooflens.analysis import Finding, Report
    from rooflens.api import analyze, check, diff
    from rooflens.cost import OpCost, OpPrediction, Prediction
    from rooflens.hardware import Chip, ChipError, chip
    from rooflens.lowering import predict
    from rooflens.trace import Profile, load

#: public names served on first use (module ``__getattr__``): ``import rooflens`` imports neither numpy
#: nor jax, so ``rooflens --help`` and a small report start at once. Name → (module, attribute or None).
_LAZY = {
    "analysis": ("rooflens.analysis", None), "cost": ("rooflens.cost", None), "hlo": ("rooflens.hlo", None),
    "memory": ("rooflens.memory", None), "plan": ("rooflens.plan", None), "trace": ("rooflens.trace", None),
    "Finding": ("rooflens.analysis", "Finding"), "Report": ("rooflens.analysis", "Report"),
    "analyze": ("rooflens.api", "analyze"), "check": ("rooflens.api", "check"), "diff": ("rooflens.api", "diff"),
    "OpCost": ("rooflens.cost", "OpCost"), "OpPrediction": ("rooflens.cost", "OpPrediction"),
    "Prediction": ("rooflens.cost", "Prediction"), "Chip": ("rooflens.hardware", "Chip"),
    "ChipError": ("rooflens.hardware", "ChipError"), "chip": ("rooflens.hardware", "chip"),
    "predict": ("rooflens.lowering", "predict"), "Profile": ("rooflens.trace", "Profile"),
    "load": ("rooflens.trace", "load"),
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'rooflens' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = _importlib.import_module(module)
    if attr is not None:
        value = getattr(value, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"


def chips() -> list[str]:
    """Names of every known chip (shipped, ROOFLENS_CHIPS files, and the calibrated ``local``)."""
    from rooflens.hardware import chips as known

    return known()


def to_html(obj, path=None, overwrite: bool = False, prediction: "Prediction | None" = None, title: str = "") -> str:
    """The single-file HTML page of a Report, Diff, Prediction, CheckResult or MemorySummary; with
    ``path``, also written there (an existing file only with ``overwrite=True``). A Report may take
    the ``prediction`` of the same step on another chip."""
    from rooflens.report.pages import to_html as write

    return write(obj, path, overwrite=overwrite, prediction=prediction, title=title)


def load_ipython_extension(shell) -> None:
    """``%load_ext rooflens``: results display as rich HTML in this IPython shell."""
    from rooflens.report.notebook import register

    register(shell)


def _display_in_notebooks() -> None:
    """In Jupyter, Colab or IPython already running: register the HTML display (cheap check first)."""
    ipython = _sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    if shell is not None:
        load_ipython_extension(shell)


_display_in_notebooks()


__all__ = [
    "Chip", "ChipError", "Finding", "OpCost", "OpPrediction", "Prediction", "Profile", "Report", "RooflensError",
    "__version__", "analysis", "analyze", "capture", "check", "chip", "chips", "cost", "diff", "hlo", "load", "memory",
    "plan", "predict", "to_html", "trace",
]
