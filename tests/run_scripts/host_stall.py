"""The host stalls between steps (a slow data loader), and the device waits."""
import time

import jax
import jax.numpy as jnp


@jax.jit
def step(w, x):
    return w + 1e-3 * jnp.tanh(x @ w)


w = jnp.full((256, 256), 0.01)
x = jnp.ones((256, 256))
for _ in range(10):
    time.sleep(0.05)  # "loading the next batch"
    w = step(w, x)
    w.block_until_ready()
