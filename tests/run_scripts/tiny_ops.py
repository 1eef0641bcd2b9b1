"""Tiny ops: a Python loop of small NumPy-style operations, each dispatched on its own."""
import jax.numpy as jnp

x = jnp.ones((8,))
for _step in range(6):
    for _ in range(60):
        x = x * 1.0001 + 0.5
        x = jnp.sin(x)
    x.block_until_ready()
