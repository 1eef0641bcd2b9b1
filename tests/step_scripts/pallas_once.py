"""The Pallas quickstart's shape: a few kernels, each run once (interpret mode on CPU)."""
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def scale_kernel(x_ref, o_ref):
    o_ref[...] = jnp.tanh(x_ref[...]) * 2.0


@jax.jit
def add(x, y):
    return pl.pallas_call(add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x, y)


@jax.jit
def scale(x):
    return pl.pallas_call(scale_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x)


x = jnp.arange(256 * 256, dtype=jnp.float32).reshape(256, 256) / 1e4
print(float(add(x, x).sum()))
print(float(scale(x).sum()))
