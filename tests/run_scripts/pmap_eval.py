"""A jax.pmap training step and a pmapped evaluation every 10 steps, on 4 CPU devices (asked for here), as older
Flax examples and Brax write them: since jax 0.8 both are jits of a shard_map of jax's own ``_fun``."""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

n = jax.local_device_count()


@jax.pmap
def train_step(w, x):
    return w - 0.01 * jax.grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)


@jax.pmap
def evaluate(w, x):
    return jnp.mean(jnp.tanh(x @ w) ** 2)


w, x = jnp.ones((n, 256, 256)) * 0.01, jnp.ones((n, 64, 256))
for i in range(30):
    w = train_step(w, x)
    if i % 10 == 9:
        print("eval", float(evaluate(w, x)[0]))
