"""A GPT port that samples before it trains (as nanoGPT-style scripts do to show the untrained
model's text): ``generate`` calls a jitted ``step_fn`` once per new token (the sampler's step),
SAMPLES times, and only then the training loop calls ``train_step`` once per step. Flax linen,
``optax.adamw``, random token batches.

    python gpt_sampler.py SAMPLES STEPS
"""

import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state

VOCAB, SEQ, D, HEADS, LAYERS, BATCH = 64, 16, 32, 2, 1, 8


class Block(nn.Module):
    @nn.compact
    def __call__(self, x):
        mask = nn.make_causal_mask(jnp.ones(x.shape[:2], jnp.int32))
        h = nn.LayerNorm()(x)
        x = x + nn.MultiHeadDotProductAttention(num_heads=HEADS)(h, h, mask=mask)
        h = nn.LayerNorm()(x)
        return x + nn.Dense(D)(nn.gelu(nn.Dense(4 * D)(h)))


class GPT(nn.Module):
    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(VOCAB, D)(tokens) + self.param("pos", nn.initializers.normal(0.02), (SEQ, D))[:tokens.shape[1]]
        for _ in range(LAYERS):
            x = Block()(x)
        return nn.Dense(VOCAB)(nn.LayerNorm()(x))


model = GPT()


@jax.jit
def step_fn(params, tokens, position, key):
    """One token of the sampler: the logits at ``position``, a categorical draw, written at position + 1."""
    logits = model.apply({"params": params}, tokens)[:, position]
    nxt = jax.random.categorical(key, logits)
    return tokens.at[:, position + 1].set(nxt)


def generate(params, key, new_tokens):
    tokens = jnp.zeros((1, SEQ), jnp.int32)
    for i in range(new_tokens):
        key, sub = jax.random.split(key)
        tokens = step_fn(params, tokens, i % (SEQ - 1), sub)  # the sampler's call
    return tokens


@jax.jit
def train_step(state, batch):
    def loss_fn(params):
        logits = state.apply_fn({"params": params}, batch[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


def main():
    samples, steps = int(sys.argv[1]), int(sys.argv[2])
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, SEQ), jnp.int32))["params"]
    print("untrained sample:", generate(params, jax.random.PRNGKey(1), samples)[0, :8].tolist(), flush=True)
    state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.adamw(1e-3))
    rng = np.random.default_rng(0)
    for _ in range(steps):
        batch = rng.integers(0, VOCAB, (BATCH, SEQ + 1), dtype=np.int32)
        state, loss = train_step(state, batch)  # the loop's step call
    print("final loss", float(loss))


if __name__ == "__main__":
    main()
