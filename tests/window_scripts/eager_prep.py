"""A loop that prepares each batch eagerly between its annotated steps: a NumPy batch put on the device
(an implicit transfer every step) and normalised with jnp outside the jitted step (small programs of their own
inside each step), as scripts without a data pipeline do.

    python eager_prep.py STEPS
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def step(w, x):
    return w - 0.01 * (x.T @ jnp.tanh(x @ w)) / x.shape[0]


rng = np.random.default_rng(0)
w = jnp.ones((512, 512)) * 0.01
for i in range(int(sys.argv[1])):
    with jax.profiler.StepTraceAnnotation("train", step_num=i):
        x = jnp.asarray(rng.normal(size=(256, 512)).astype(np.float32))
        x = jnp.clip((x - x.mean(0)) / (x.std(0) + 1e-6), -3, 3)
        w = step(w, x)
print(float(w.sum()))
