"""A Flax linen classifier trained with optax, each step four micro-batches through a jitted gradient, summed by a
jitted add, then a jitted update; every step a jax.profiler.StepTraceAnnotation, never blocked on.

    python input_bound.py STEPS host       # each micro-batch made on the host with numpy (the input pipeline is
                                           # on the step's critical path), the loss printed every 5 steps
    python input_bound.py STEPS readback   # four batches made once, the loss and a gradient sum printed every
                                           # step (each a value read back from the device)
"""

import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

steps, mode = int(sys.argv[1]), sys.argv[2]


class Net(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.gelu(nn.Dense(512)(x))
        x = nn.gelu(nn.Dense(512)(x))
        return nn.Dense(10)(x)


model = Net()
params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 256)))
tx = optax.adam(1e-3)
opt_state = tx.init(params)
rng = np.random.default_rng(0)


def batch():
    x = rng.standard_normal((256, 256)).astype(np.float32)
    x = np.tanh(x @ rng.standard_normal((256, 256)).astype(np.float32))  # host-side preprocessing
    return x, rng.integers(0, 10, 256)


@jax.jit
def grad_fn(params, x, y):
    def loss(p):
        return optax.softmax_cross_entropy_with_integer_labels(model.apply(p, x), y).mean()
    return jax.value_and_grad(loss)(params)


@jax.jit
def add(a, b):
    return jax.tree_util.tree_map(jnp.add, a, b)


@jax.jit
def update(params, opt_state, grads):
    updates, opt_state = tx.update(jax.tree_util.tree_map(lambda g: g / 4, grads), opt_state, params)
    return optax.apply_updates(params, updates), opt_state


fixed = [batch() for _ in range(4)]
for step in range(steps):
    with jax.profiler.StepTraceAnnotation("train", step_num=step):
        acc = None
        for k in range(4):
            x, y = batch() if mode == "host" else fixed[k]
            loss, g = grad_fn(params, x, y)
            acc = g if acc is None else add(acc, g)
        params, opt_state = update(params, opt_state, acc)
    if mode == "readback":
        print(step, float(loss), float(jnp.sum(acc["params"]["Dense_0"]["kernel"])))
    elif step % 5 == 4:
        print(step, float(loss))
