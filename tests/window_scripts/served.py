"""A job serving jax.profiler on PORT: prints "ready" once its step runs, then runs SECONDS more."""

import sys
import time

import jax
import jax.numpy as jnp

port, seconds = int(sys.argv[1]), float(sys.argv[2])
jax.profiler.start_server(port)
w = jnp.ones((128, 128))
step = jax.jit(lambda w: jnp.tanh(w @ w) * 0.5)
w = step(w).block_until_ready()
print("ready", flush=True)
t0 = time.time()
while time.time() - t0 < seconds:
    w = step(w).block_until_ready()
    time.sleep(0.001)
