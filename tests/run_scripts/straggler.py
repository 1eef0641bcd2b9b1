"""One process of a data-parallel job whose process SLOW is held up on the host before every step
(a slow input pipeline): python straggler.py PORT N INDEX SLOW [ROWS per device, default 64] [STEPS, default 8]."""
import sys
import time

import jax

port, n, i, slow = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rows = int(sys.argv[5]) if len(sys.argv) > 5 else 64
steps = int(sys.argv[6]) if len(sys.argv) > 6 else 8
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(f"127.0.0.1:{port}", n, i)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

mesh = Mesh(np.array(jax.devices()), ("data",))
data = NamedSharding(mesh, P("data"))
w = jax.device_put(jnp.full((128, 128), 0.01), NamedSharding(mesh, P()))


@jax.jit
def step(w, x):
    g = x.T @ jnp.tanh(x @ w)  # the gradient, summed over every process's batch: an all-reduce
    return w - 1e-4 * g


for _ in range(steps):
    if i == slow:
        time.sleep(0.15)  # this host's input pipeline is slow
    x = jax.make_array_from_callback((rows * jax.device_count(), 128), data, lambda idx: jnp.ones((rows, 128)))
    w = step(w, x)
w.block_until_ready()
print("process", jax.process_index(), "done", flush=True)
jax.distributed.shutdown()
