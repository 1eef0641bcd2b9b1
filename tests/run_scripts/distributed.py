"""One process of a multi-process JAX job on this machine: python distributed.py PORT N INDEX."""
import sys

import jax

port, n, i = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(f"127.0.0.1:{port}", n, i)

import jax.numpy as jnp  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

mesh = jax.make_mesh((jax.device_count(),), ("data",))
x = jax.make_array_from_callback((4 * jax.device_count(), 64), NamedSharding(mesh, P("data")),
                                 lambda idx: jnp.ones((4, 64)))
total = jax.jit(lambda x: jnp.sum(x * 2), out_shardings=NamedSharding(mesh, P()))
for _ in range(3):
    s = total(x)
print("process", jax.process_index(), "of", jax.process_count(), "sum", float(s), flush=True)
jax.distributed.shutdown()
