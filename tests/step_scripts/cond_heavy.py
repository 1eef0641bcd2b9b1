"""An annotated loop whose step takes a heavy lax.cond branch every fifth call (eight updates against one), as
schedules that evaluate, log or accumulate every N steps inside the jitted step do: its last op on the device is
in a branch, the light one most of the time."""
import jax
import jax.numpy as jnp


@jax.jit
def step(w, x, heavy):
    def light(w):
        return w - 0.01 * jnp.tanh(x @ w)

    def big(w):
        for _ in range(8):
            w = w - 0.01 * jnp.tanh(x @ w)
        return w

    return jax.lax.cond(heavy, big, light, w)


w, x = jnp.ones((256, 256)) * 0.01, jnp.ones((256, 256))
for i in range(30):
    with jax.profiler.StepTraceAnnotation("train", step_num=i):
        w = step(w, x, i % 5 == 4)
print(float(w.sum()))
