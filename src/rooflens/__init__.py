"""rooflens: predict, measure and explain the performance of JAX programs."""

from rooflens import hlo

__version__ = "0.1.0"

__all__ = ["hlo", "__version__"]
