"""An Equinox MLP trained with optax.adamw through eqx.filter_jit: a loader thread reads "files" (a 15 ms sleep
each, as slow storage would) and queues NumPy batches; the main loop takes one, puts it on the device and runs an
annotated async step.

    python eqx_loader.py STEPS
"""

import queue
import sys
import threading
import time

import equinox as eqx
import jax
import numpy as np
import optax

model = eqx.nn.MLP(256, 10, 512, 3, key=jax.random.PRNGKey(0))
opt = optax.adamw(1e-3)
state = opt.init(eqx.filter(model, eqx.is_array))


@eqx.filter_jit
def step(model, state, x, y):
    def loss(m):
        return optax.softmax_cross_entropy_with_integer_labels(jax.vmap(m)(x), y).mean()

    value, grads = eqx.filter_value_and_grad(loss)(model)
    updates, state = opt.update(grads, state, eqx.filter(model, eqx.is_array))
    return eqx.apply_updates(model, updates), state, value


batches = queue.Queue(maxsize=4)


def loader():
    rng = np.random.default_rng(0)
    while True:
        time.sleep(0.015)
        batches.put((rng.standard_normal((512, 256), dtype=np.float32), rng.integers(0, 10, 512)))


threading.Thread(target=loader, daemon=True).start()
for i in range(int(sys.argv[1])):
    x, y = batches.get()
    x, y = jax.device_put(x), jax.device_put(y)
    with jax.profiler.StepTraceAnnotation("train", step_num=i):
        model, state, value = step(model, state, x, y)
print(float(value))
