"""A training loop whose evaluation is first called late: ``step`` once per iteration, ``evaluate`` at
iteration EVAL and every 10 after it (compiled at its first call, inside the loop); with ``annotated``,
each iteration is a jax.profiler.StepTraceAnnotation step.

    python first_eval.py STEPS EVAL [annotated]
"""

import contextlib
import sys

import jax
import jax.numpy as jnp

steps, first_eval = int(sys.argv[1]), int(sys.argv[2])
annotated = len(sys.argv) > 3 and sys.argv[3] == "annotated"
key = jax.random.PRNGKey(0)
w = jax.random.normal(key, (256, 256)) * 0.05
x = jax.random.normal(key, (64, 256))


@jax.jit
def step(w, x):
    g = jax.grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)
    return w - 0.01 * g


@jax.jit
def evaluate(w, x):
    return jnp.mean(jnp.tanh(jnp.tanh(x @ w) @ w.T) ** 2)


for i in range(steps):
    with jax.profiler.StepTraceAnnotation("train", step_num=i) if annotated else contextlib.nullcontext():
        w = step(w, x)
        if i >= first_eval and (i - first_eval) % 10 == 0:
            print("eval", float(evaluate(w, x)))
print("done", flush=True)
