"""Ends the way its first argument says, after running a jitted program (and changing directory); ``early``: at an
exception once JAX is up, before any program ran."""
import os
import sys

import jax
import jax.numpy as jnp

if sys.argv[1] == "early":
    jax.devices()
    raise RuntimeError("the config has no model section")

print("argv", sys.argv, "path0", sys.path[0], "main", __name__, "file", __file__, "cwd", os.getcwd(), flush=True)
print("stdin", sys.stdin.readline().strip(), flush=True)
(jnp.ones(4) * 2).block_until_ready()
os.chdir("/")
how = sys.argv[1]
if how == "three":
    sys.exit(3)
if how == "message":
    sys.exit("fatal: config missing")
if how == "raise":
    raise ValueError("the script itself failed")
if how == "sleep":
    import time

    print("sleeping", flush=True)
    time.sleep(60)
