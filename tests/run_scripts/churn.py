"""Shape churn: every batch has a new length, so the step compiles again and again."""
import jax
import jax.numpy as jnp


@jax.jit
def step(x):
    return jnp.tanh(x @ x.T).sum()


for n in range(64, 64 + 8 * 16, 16):
    step(jnp.ones((n, 256))).block_until_ready()
