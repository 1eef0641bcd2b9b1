"""A training loop whose evaluation does more work per call than its step (a forward pass over a
test batch 16 times the training batch): ``step`` once per iteration, and every 4 steps (step 0
included) an evaluation, written one of two ways:

* ``nested``: ``evaluate()`` loops over 4 test batches, calling the jitted ``eval_batch`` for each
  (a loop inside the training loop);
* ``inline``: the jitted ``eval_full`` called once, from the training loop's own body.

    python heavy_eval.py STEPS nested|inline
"""

import sys

import jax
import jax.numpy as jnp

steps, mode = int(sys.argv[1]), sys.argv[2]
key = jax.random.PRNGKey(0)
w = jax.random.normal(key, (256, 256)) * 0.05
x = jax.random.normal(key, (32, 256))
test = jax.random.normal(key, (4, 512, 256))


@jax.jit
def step(w, x):
    g = jax.grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)
    return w - 0.01 * g


@jax.jit
def eval_batch(w, xs):
    return jnp.mean(jnp.tanh(jnp.tanh(xs @ w) @ w) ** 2)


@jax.jit
def eval_full(w, test):
    return jnp.mean(jnp.tanh(jnp.tanh(test @ w) @ w) ** 2)


def evaluate(w):
    total = 0.0
    for xs in test:
        total += eval_batch(w, xs)
    return total / len(test)


for i in range(steps):
    w = step(w, x)  # the loop's step call
    if i % 4 == 0:
        loss = evaluate(w) if mode == "nested" else eval_full(w, test)
print("eval loss", float(loss))
