"""Real data-parallel training steps on the 8 forced CPU devices, captured once per test process
and shared by tests/test_diff.py and tests/test_check.py.

One step function (an MLP layer's loss, its gradient, an SGD update) run as:
- ``dp64`` / ``dp4096``: data parallelism at global batch 64 and 4096 (weights replicated: one
  gradient all-reduce per step, whose size does not depend on the batch);
- ``dp64_2dev`` / ``dp4096_2dev``: the same over two devices (``DP_MESH``), for the collective's share: eight
  CPU devices on a 2-core machine take turns on the cores, and an all-reduce's time becomes its
  participants waiting for each other, which grows with the batch as the compute does (measured: the
  share fell only from 0.41 to 0.37 at 8 devices; at 2 it falls from about 0.33 to 0.07, as on a chip).
  Their MFU is not compared: each of the two devices has a core of its own, and a calibration made on
  a loaded machine can put them past its peak (MFU withheld);
- ``fsdp``: the weights sharded over the data axis, so every step all-gathers them;
- ``churn``: a new batch size every step, so the step recompiles again and again.
"""

from __future__ import annotations

import tempfile
from functools import cache
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import rooflens as rl
from rooflens.hardware import calibrate
from rooflens.lowering import make_mesh

WIDTH = 512
DP_MESH = "data=2"


def make_step(mesh, w_spec):
    def step(w, x):
        def loss(w):
            with jax.named_scope("mlp"):
                return jnp.mean(jnp.tanh(x @ w) ** 2)

        return w - 0.1 * jax.grad(loss)(w)

    return jax.jit(step, out_shardings=NamedSharding(mesh, w_spec))


def ensure_local_chip() -> None:
    if not rl.hardware.local_chip_path().is_file():
        calibrate.save(calibrate.measure(repeats=3, sizes=(256, 512, 1024), copy_bytes=32 << 20))


def _capture(root: Path, name: str, w_spec, batch: int, feed=None, mesh_spec: str = "data=8"):
    mesh = make_mesh(mesh_spec)
    w = jax.device_put(jnp.ones((WIDTH, WIDTH)), NamedSharding(mesh, w_spec))
    x = jax.device_put(jnp.ones((batch, WIDTH)), NamedSharding(mesh, P("data")))
    logdir = root / name
    rl.capture(make_step(mesh, w_spec), w, x, steps=4, logdir=logdir, feed=feed or (lambda out, args: (out, args[1])))
    return logdir


@cache
def runs() -> dict[str, Path]:
    """name → logdir of each captured run."""
    ensure_local_chip()
    root = Path(tempfile.mkdtemp(prefix="rooflens-dp-runs-"))
    mesh = make_mesh("data=8")
    sizes = iter([64 * k for k in range(2, 12)])

    def new_batch(out, args):
        return out, jax.device_put(jnp.ones((next(sizes), WIDTH)), NamedSharding(mesh, P("data")))

    return {"dp64": _capture(root, "dp64", P(), 64), "dp4096": _capture(root, "dp4096", P(), 4096),
            "dp64_2dev": _capture(root, "dp64_2dev", P(), 64, mesh_spec=DP_MESH),
            "dp4096_2dev": _capture(root, "dp4096_2dev", P(), 4096, mesh_spec=DP_MESH),
            "fsdp": _capture(root, "fsdp", P("data", None), 1024),
            "churn": _capture(root, "churn", P(), 64, feed=new_batch)}


@cache
def report(name: str):
    return rl.analyze(rl.load(runs()[name]))


def two_device_reports_again() -> tuple:
    """``dp64_2dev`` and ``dp4096_2dev`` captured again (a test's second look at the collective's share, when the
    other test file running on the other core skewed the first pair), and reported."""
    ensure_local_chip()
    root = Path(tempfile.mkdtemp(prefix="rooflens-dp-runs-again-"))
    return tuple(rl.analyze(rl.load(_capture(root, name, P(), batch, mesh_spec=DP_MESH)))
                 for name, batch in (("dp64_2dev", 64), ("dp4096_2dev", 4096)))

