"""A learning-rate schedule passed to the step as a static argument: a new program every 4 steps."""
import functools

import jax
import jax.numpy as jnp


@functools.partial(jax.jit, static_argnums=(2,))
def step(w, x, lr):
    return w - lr * jnp.tanh(x @ w)


w, x = jnp.ones((256, 256)) * 0.01, jnp.ones((256, 256))
for i in range(20):
    w = step(w, x, 0.01 * 0.9 ** (i // 4))
w.block_until_ready()
