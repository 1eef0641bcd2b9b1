"""A small training loop: N steps of one jitted step, a recompilation at step 5 (a batch of a new
shape, once), then the exit status given as the second argument."""

import sys

import jax
import jax.numpy as jnp

n = int(sys.argv[1])
key = jax.random.PRNGKey(0)
w = jax.random.normal(key, (64, 64))
x = jax.random.normal(key, (32, 64))


@jax.jit
def step(w, x):
    g = jax.grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)
    return w - 0.01 * g


for i in range(n):
    w = step(w, x)
    if i == 5:
        w = step(w, x[:16])
print("loss", float(jnp.mean(w)))
sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
