"""A script that samples a little before it trains, its training loop nested in an epoch loop: the
jitted ``sample_step`` 2 times from a loop at module level, then ``step`` EPOCHS × STEPS times from the
epoch loop's inner loop (one loop deeper than the sampler's, which has ended by then).

    python sample_then_train.py EPOCHS STEPS
"""

import sys

import jax
import jax.numpy as jnp

epochs, steps = int(sys.argv[1]), int(sys.argv[2])
key = jax.random.PRNGKey(0)
w = jax.random.normal(key, (128, 128)) * 0.05
x = jax.random.normal(key, (32, 128))


@jax.jit
def sample_step(w, h):
    return jnp.tanh(h @ w)


@jax.jit
def step(w, x):
    g = jax.grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)
    return w - 0.01 * g


h = x[:1]
for _ in range(2):
    h = sample_step(w, h)
print("sample", float(h.sum()))
for epoch in range(epochs):
    for _ in range(steps):
        w = step(w, x)  # the loop's step call
    print("epoch", epoch, float(jnp.mean(w)))
