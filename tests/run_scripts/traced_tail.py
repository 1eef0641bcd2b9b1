"""A training-like loop traced by its own ``jax.profiler.trace``: STEPS steps dispatched asynchronously (each
adds a host batch, then a few 512×512 matmuls), then the trace closes — without waiting for the device,
unless ``--block`` (``block_until_ready`` on the last output before leaving the trace block). Without it
the trace ends while most steps are still queued on the device: the async tail. ``--annotate``: each step's
dispatch inside a ``StepTraceAnnotation``."""

import sys

import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def train_step(x, w):
    for _ in range(6):
        x = jnp.tanh(x @ w)
    return x


def main(logdir: str, steps: int, block: bool, annotate: bool) -> None:
    x, w = jnp.ones((512, 512)), jnp.full((512, 512), 1e-3)
    train_step(x, w).block_until_ready()  # compiled before the trace
    batches = [np.random.default_rng(i).random((512, 512), np.float32) for i in range(steps)]
    with jax.profiler.trace(logdir):
        for i in range(steps):
            if annotate:  # a step annotation around each dispatch (host side: it ends as soon as the step is queued)
                with jax.profiler.StepTraceAnnotation("train", step_num=i):
                    x = train_step(x + batches[i], w)
            else:
                x = train_step(x + batches[i], w)
        if block:
            x.block_until_ready()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), "--block" in sys.argv[3:], "--annotate" in sys.argv[3:])
