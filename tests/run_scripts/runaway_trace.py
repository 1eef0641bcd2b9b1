"""A loop whose whole-run trace grows without bound: tiny jitted calls for SECONDS of wall time (each call adds its
dispatch and op events to the profiler's memory, ~2 kB each on CPU); prints how many calls ran and when it ended."""

import json
import sys
import time

import jax
import jax.numpy as jnp

seconds = float(sys.argv[1])
step = jax.jit(lambda x: x * 1.0001 + 1.0)
x = jnp.ones((8,))
calls = 0
t0 = time.time()
while time.time() - t0 < seconds:
    for _ in range(100):
        x = step(x)
    calls += 100
x.block_until_ready()
print("RUNAWAY " + json.dumps({"calls": calls, "end_unix_ns": time.time_ns()}))
