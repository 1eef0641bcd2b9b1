"""A healthy training-style loop with no warm-up and no step annotations (one CPU device)."""
import jax
import jax.numpy as jnp


@jax.jit
def step(w, x):
    h = jnp.tanh(x @ w)
    loss = (h * h).mean()
    return w - 1e-3 * (x.T @ h) / x.shape[0], loss


w = jnp.full((1024, 1024), 0.01)
x = jnp.ones((1024, 1024))
for _ in range(12):
    w, loss = step(w, x)
loss.block_until_ready()
print("loss", float(loss))
