"""A step function that recompiles, as Diffrax's neural ODE does: once for a weak-type change, once for a new
shape; its solver is a while_loop whose trip count depends on the data."""
import jax
import jax.numpy as jnp


@jax.jit
def make_step(w, x, tol):
    def cond(c):
        y, n = c
        return (jnp.abs(y).max() > tol) & (n < 200)

    def body(c):
        y, n = c
        return jnp.tanh(y @ w) * 0.9, n + 1

    y, n = jax.lax.while_loop(cond, body, (x, 0))
    return w - 1e-3 * (x.T @ y) / x.shape[0], n


w = jnp.eye(256) * 0.99
x = jnp.ones((256, 256))
for i in range(8):  # a Python float tolerance: weakly typed
    w, n = make_step(w, x * (1 + i), 1e-2)
for i in range(8):  # the same tolerance as an array: strongly typed, compiled again
    w, n = make_step(w, x * (1 + i), jnp.float32(1e-2 * (1 + i)))
x2 = jnp.ones((512, 256))
for i in range(8):  # a new batch size: compiled again
    w, n = make_step(w, x2 * (1 + i), jnp.float32(1e-2 * (1 + i)))
print("iterations", int(n))
