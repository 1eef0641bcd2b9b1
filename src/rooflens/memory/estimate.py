"""The model-state estimate: how many bytes weights, gradients and optimizer state need.

Per parameter, with the usual mixed-precision recipe (seed 000's table): bf16 weights (2 B),
bf16 gradients (2 B), fp32 Adam first and second moments (4 + 4 B) and fp32 master weights (4 B)
make 16 bytes, so a 7B-parameter model needs 112 GB before a single activation.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from rooflens.errors import RooflensError
from rooflens.hlo.shape import element_bytes

#: optimizer → number of per-parameter state tensors (moments) it keeps
OPTIMIZER_MOMENTS = {"sgd": 0, "momentum": 1, "nesterov": 1, "rmsprop": 1, "adagrad": 1, "adam": 2, "adamw": 2,
                     "lamb": 2, "lion": 1}


@dataclass(frozen=True)
class MemoryEstimate:
    params: float
    optimizer: str
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float  # moments
    master_bytes: float  # fp32 master weights (0 when training in the parameter dtype)
    shards: int  # devices the state is split over (ZeRO-3 / FSDP style); 1 = replicated
    fits_on: dict  # chip → whether the per-device state fits in its HBM
    #: what is counted per parameter, each part with its dtype: "bf16 weights 2 B + 2 f32 adam moments 8 B"
    recipe: str = ""

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.gradients_bytes + self.optimizer_bytes + self.master_bytes

    @property
    def per_device_bytes(self) -> float:
        return self.total_bytes / self.shards

    @property
    def bytes_per_param(self) -> float:
        return self.total_bytes / self.params if self.params else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "total_bytes": self.total_bytes, "per_device_bytes": self.per_device_bytes,
                "bytes_per_param": self.bytes_per_param}


def _bytes(dtype, what: str) -> float:
    if dtype is None:
        return 0.0
    nbytes = element_bytes(str(getattr(dtype, "name", dtype)).lower())
    if not nbytes:
        raise RooflensError(f"unknown {what} dtype {dtype!r} (use one of bf16, f16, f32, f64, fp8, int8).")
    return float(nbytes)


def count_params(params) -> tuple[float, float]:
    """(parameter count, weight bytes) of a number or a pytree of arrays / ShapeDtypeStructs."""
    if isinstance(params, int | float):
        return float(params), 0.0
    import jax
    import numpy as np

    leaves = jax.tree_util.tree_leaves(params)
    if not leaves or not all(hasattr(x, "shape") and hasattr(x, "dtype") for x in leaves):
        raise RooflensError("params must be a parameter count or a pytree of arrays (or jax.ShapeDtypeStruct).")
    n = sum(float(np.prod(x.shape)) for x in leaves)
    nbytes = sum(float(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in leaves)
    return n, nbytes


def estimate(params, optimizer: str = "adam", param_dtype="bf16", grad_dtype="bf16", master_dtype="f32",
             moment_dtype="f32", shards: int = 1, chips: tuple[str, ...] | None = None) -> MemoryEstimate:
    """Bytes of the model state for ``params`` (a count, or a pytree: its own dtypes then price the weights).

    ``master_dtype=None`` trains in the parameter dtype (no master copy); ``shards`` splits the whole
    state over that many devices. ``fits_on`` checks the per-device state against each chip's HBM.
    """
    from rooflens.hardware import catalog

    opt = optimizer.lower()
    if opt not in OPTIMIZER_MOMENTS:
        raise RooflensError(f"unknown optimizer {optimizer!r} (known: {', '.join(sorted(OPTIMIZER_MOMENTS))}).")
    if shards < 1:
        raise RooflensError("shards must be at least 1.")
    n, tree_bytes = count_params(params)
    if n <= 0:
        raise RooflensError("the parameter count must be positive.")
    weights = tree_bytes if tree_bytes and not isinstance(params, int | float) else n * _bytes(param_dtype, "param")
    grads = n * _bytes(grad_dtype, "gradient")
    moments = n * OPTIMIZER_MOMENTS[opt] * _bytes(moment_dtype, "moment")
    master = n * _bytes(master_dtype, "master")
    per_device = (weights + grads + moments + master) / shards
    k = OPTIMIZER_MOMENTS[opt]
    tree = bool(tree_bytes) and not isinstance(params, int | float)
    parts = [("weights (in their own dtypes)" if tree else f"{_name(param_dtype)} weights", weights),
             (f"{_name(grad_dtype)} gradients", grads),
             (f"{k} {_name(moment_dtype)} {opt} moment{'s' if k != 1 else ''}", moments),
             (f"{_name(master_dtype)} master weights", master)]
    recipe = (" + ".join(f"{what} {b / n:.3g} B" for what, b in parts if b)
              + f" = {(weights + grads + moments + master) / n:.3g} B/parameter")
    if not grads and not master:
        recipe += " (no gradients or master copy counted)"
    known = catalog()
    names = chips if chips is not None else sorted(k for k, c in known.items() if c.kind != "cpu")
    fits = {name: per_device <= (known[name].hbm_bytes or 0) for name in names if name in known}
    return MemoryEstimate(n, opt, weights, grads, moments, master, shards, fits, recipe)


def _name(dtype) -> str:
    return str(getattr(dtype, "name", dtype)).lower() if dtype is not None else ""
