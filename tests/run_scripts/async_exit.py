"""A loop that dispatches STEPS steps asynchronously inside main() and returns without reading a
result back: when the script exits, most of the steps are still queued on the device, and their
outputs no longer exist (main's locals are gone)."""

import sys

import jax
import jax.numpy as jnp


@jax.jit
def step(w):
    for _ in range(4):
        w = jnp.tanh(w @ w) * 0.5
    return w


def main(n: int) -> None:
    w = step(jnp.ones((384, 384))).block_until_ready()  # compiled and run once before the loop
    for _ in range(n):
        w = step(w)
    print(f"dispatched {n} steps")


if __name__ == "__main__":
    main(int(sys.argv[1]))
