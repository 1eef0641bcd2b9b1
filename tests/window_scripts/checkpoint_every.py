"""A Flax linen MLP trained with optax.adam in a loop of annotated async steps, its parameters and optimizer state
saved every 4 steps with NumPy (jax.device_get, then np.savez to a temporary directory), as a quick script does.

    python checkpoint_every.py STEPS
"""

import os
import sys
import tempfile

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax


class Net(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(10)(nn.relu(nn.Dense(1024)(nn.relu(nn.Dense(1024)(x)))))


model = Net()
params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 512)))
tx = optax.adam(1e-3)
opt_state = tx.init(params)
x = jax.random.normal(jax.random.PRNGKey(1), (256, 512))
y = jax.random.randint(jax.random.PRNGKey(2), (256,), 0, 10)


@jax.jit
def step(params, opt_state):
    def loss(p):
        return optax.softmax_cross_entropy_with_integer_labels(model.apply(p, x), y).mean()

    value, grads = jax.value_and_grad(loss)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, value


where = tempfile.mkdtemp()


def save_checkpoint(i, params, opt_state):
    leaves = jax.tree_util.tree_leaves(jax.device_get((params, opt_state)))
    np.savez(os.path.join(where, f"ckpt_{i}.npz"), *leaves)


for i in range(int(sys.argv[1])):
    with jax.profiler.StepTraceAnnotation("train", step_num=i):
        params, opt_state, value = step(params, opt_state)
    if i % 4 == 3:
        save_checkpoint(i, params, opt_state)
print(float(value))
