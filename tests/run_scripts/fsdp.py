"""Weights sharded over the data axis of a small model: every step all-gathers them."""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

mesh = jax.make_mesh((8,), ("data",))
x = jax.device_put(jnp.ones((4096, 1024)), NamedSharding(mesh, P("data")))
w = jax.device_put(jnp.ones((1024, 1024)), NamedSharding(mesh, P("data", None)))
step = jax.jit(lambda x, w: x @ w)
for _ in range(10):
    y = step(x, w)
    y.block_until_ready()
