"""A small Flax linen language model sampled greedily, one token per jitted step: each step's position is made with
jnp.full outside jit and its token read back with int() to test for an end token (as chat demos do); every step a
jax.profiler.StepTraceAnnotation.

    python greedy_decode.py
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

V, D, L = 512, 256, 128


class LM(nn.Module):
    @nn.compact
    def __call__(self, tok, pos):
        x = nn.Embed(V, D)(tok) + nn.Embed(L, D)(pos)
        for _ in range(4):
            x = x + nn.Dense(D)(nn.gelu(nn.Dense(4 * D)(nn.LayerNorm()(x))))
        return nn.Dense(V)(x)


model = LM()
params = model.init(jax.random.PRNGKey(0), jnp.zeros((1,), jnp.int32), jnp.zeros((1,), jnp.int32))


@jax.jit
def step(params, tok, pos):
    return jnp.argmax(model.apply(params, tok, pos), -1).astype(jnp.int32)


tok = jnp.zeros((1,), jnp.int32)
out = []
for i in range(100):
    with jax.profiler.StepTraceAnnotation("decode", step_num=i):
        tok = step(params, tok, jnp.full((1,), i % L, jnp.int32))
    t = int(tok[0])
    out.append(t)
    if t == 3:
        break
print(len(out))
