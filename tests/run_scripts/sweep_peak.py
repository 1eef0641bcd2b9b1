"""The reliability sweep's program: its memory peak is one 64 MiB fusion output (named scope "big"),
and a second function compiles again for every new input length (a recompilation to locate)."""
import jax
import jax.numpy as jnp


@jax.jit
def step(x):
    with jax.named_scope("big"):
        h = jnp.tanh(x @ x.T)  # f32[4096,4096]: 64 MiB, live while both reductions read it
    with jax.named_scope("reduce"):
        return (h * 2).sum() + h.mean()


@jax.jit
def grow(x):
    return jnp.tanh(x @ x.T).sum()


x = jnp.ones((4096, 64)) * 0.01
for _ in range(3):
    y = step(x)
for n in range(64, 64 + 16 * 5, 16):
    grow(jnp.ones((n, 128))).block_until_ready()
print("done", float(y))
