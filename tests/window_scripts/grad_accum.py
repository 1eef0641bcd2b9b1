"""Gradient accumulation as Equinox + Optax users write it: a jitted gradient of MICRO micro-batches per step,
summed on the host side of the loop, then one jitted optimizer update; STEPS steps, no annotations.

    python grad_accum.py STEPS MICRO
"""

import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import optax

steps, micro = int(sys.argv[1]), int(sys.argv[2])
key = jax.random.PRNGKey(0)
model = eqx.nn.MLP(64, 10, 128, 2, key=key)
opt = optax.adamw(1e-3)
state = opt.init(eqx.filter(model, eqx.is_array))


@eqx.filter_jit
def grads_of(model, x, y):
    def loss(m):
        return optax.softmax_cross_entropy_with_integer_labels(jax.vmap(m)(x), y).mean()
    return eqx.filter_grad(loss)(model)


@eqx.filter_jit
def apply(model, state, grads):
    updates, state = opt.update(grads, state, eqx.filter(model, eqx.is_array))
    return eqx.apply_updates(model, updates), state


x = jax.random.normal(key, (32, 64))
y = jax.random.randint(key, (32,), 0, 10)
for _ in range(steps):
    total = None
    for _ in range(micro):
        g = grads_of(model, x, y)
        total = g if total is None else jax.tree.map(jnp.add, total, g)
    model, state = apply(model, state, total)
print("done", flush=True)
