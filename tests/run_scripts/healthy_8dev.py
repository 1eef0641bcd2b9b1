"""Data parallelism on 8 CPU devices that the script asks for itself, before importing JAX."""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

mesh = jax.make_mesh((8,), ("data",))
x = jax.device_put(jnp.ones((2048, 512)), NamedSharding(mesh, P("data")))
w = jax.device_put(jnp.full((512, 512), 0.01), NamedSharding(mesh, P()))  # weights replicated
step = jax.jit(lambda x, w: jnp.tanh(x @ w) @ w.T)
for _ in range(12):
    y = step(x, w)
y.block_until_ready()
print("devices", len(jax.devices()))
