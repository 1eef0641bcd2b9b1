"""Per-step host transfers: every step a fresh NumPy batch is handed to the jitted step."""
import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def step(w, x):
    return w - 1e-3 * (x.T @ jnp.tanh(x @ w))


rng = np.random.default_rng(0)
w = jnp.full((256, 256), 0.01)
for _ in range(10):
    batch = rng.standard_normal((256, 256), dtype=np.float32)  # NumPy in: a host-to-device copy per step
    w = step(w, batch)
w.block_until_ready()
