"""A training loop marked with StepTraceAnnotation; BLOCK=1 blocks every step."""
import os
import sys

import jax
import jax.numpy as jnp

BLOCK = os.environ.get("BLOCK") == "1" or "--block" in sys.argv


@jax.jit
def train_step(w, x):
    h = jnp.tanh(x @ w)
    loss = (h * h).mean()
    return w - 1e-3 * (x.T @ h) / x.shape[0], loss


w = jnp.full((512, 512), 0.01)
x = jnp.ones((512, 512))
for i in range(20):
    with jax.profiler.StepTraceAnnotation("train", step_num=i):
        w, loss = train_step(w, x)
        if BLOCK:
            loss.block_until_ready()
loss.block_until_ready()
print("loss", float(loss))
