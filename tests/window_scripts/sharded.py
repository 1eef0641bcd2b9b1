"""A data-parallel MLP trained on 8 CPU devices (asked for by the script itself), with its step
written one of two ways, and eager sharded set-up (primitives dispatched on 8 devices) first:

* ``shard_map``: per-device loss and grads, ``jax.lax.pmean`` over the data axis, a
  ``jax.lax.scan`` over the layers with ``jax.checkpoint`` (remat) around the body, under ``jax.jit``;
* ``pjit``: the same step through ``jax.experimental.pjit.pjit`` with explicit in/out shardings;
* ``pmap``: the per-device step through ``jax.pmap`` (which jax ≥ 0.8 runs as a jit of a shard_map of a function
  of its own, ``_fun``: every pmapped function's program is ``jit__fun``), the batch split by its leading axis.

    python sharded.py STEPS shard_map|pjit|pmap [annotate]

``annotate``: each step in a ``jax.profiler.StepTraceAnnotation`` (with an eager op inside it too).
"""

import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"

import sys  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental.pjit import pjit  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

LAYERS, D, BATCH = 4, 128, 256
steps, mode, annotate = int(sys.argv[1]), sys.argv[2], sys.argv[3:] == ["annotate"]
mesh = jax.make_mesh((8,), ("data",))
data, replicated = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())


def loss_fn(ws, x, y):
    @jax.checkpoint
    def layer(h, w):
        return jnp.tanh(h @ w), None

    h, _ = jax.lax.scan(layer, x, ws)
    return jnp.mean((h - y) ** 2)


def local_step(ws, x, y):
    loss, g = jax.value_and_grad(loss_fn)(ws, x, y)
    g, loss = jax.lax.pmean(g, "data"), jax.lax.pmean(loss, "data")
    return ws - 0.1 * g, loss


if mode == "shard_map":
    train_step = jax.jit(jax.shard_map(local_step, mesh=mesh, in_specs=(P(), P("data"), P("data")),
                                       out_specs=(P(), P())))
elif mode == "pmap":
    train_step = jax.pmap(local_step, axis_name="data", in_axes=(None, 0, 0), out_axes=(None, None))
else:
    def global_step(ws, x, y):
        loss, g = jax.value_and_grad(loss_fn)(ws, x, y)
        return ws - 0.1 * g, loss

    train_step = pjit(global_step, in_shardings=(replicated, data, data), out_shardings=(replicated, replicated))

rng = np.random.default_rng(0)
ws = jax.device_put(rng.normal(size=(LAYERS, D, D)).astype(np.float32) * 0.05, replicated)
ws = ws * jnp.float32(1.0) + jnp.zeros_like(ws)  # eager set-up on the 8 devices
for i in range(steps):
    x = jax.device_put(rng.normal(size=(BATCH, D)).astype(np.float32), data)
    y = jax.device_put(rng.normal(size=(BATCH, D)).astype(np.float32), data)
    if mode == "pmap":  # split by the leading axis, one slice per device
        x, y = x.reshape(8, BATCH // 8, D), y.reshape(8, BATCH // 8, D)
    if annotate:
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            ws, loss = train_step(ws, x, y)
            ws = ws * jnp.float32(1.0)
    else:
        ws, loss = train_step(ws, x, y)  # the loop's step call
print("loss", float(loss))
