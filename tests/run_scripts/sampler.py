"""A sampler jitted whole, as diffusion and ODE users write it: ``sample`` runs the denoiser 200 times in a
``lax.fori_loop`` inside one program, called once per batch of samples and blocked on, no step annotation.

    python sampler.py [BATCHES]
"""

import sys

import jax
import jax.numpy as jnp

W = jax.random.normal(jax.random.key(0), (256, 256)) * 0.06


def denoise(x, t):
    return jnp.tanh(x @ W + t)


@jax.jit
def sample(key):
    x = jax.random.normal(key, (128, 256))
    return jax.lax.fori_loop(0, 200, lambda i, x: x - 0.01 * denoise(x, i / 200.0), x)


for k in range(int(sys.argv[1]) if len(sys.argv) > 1 else 4):
    out = sample(jax.random.key(k)).block_until_ready()
print(float(out.mean()))
