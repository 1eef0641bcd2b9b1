"""The small GPT of ``linen_gpt.py`` in Equinox: blocks stacked with ``eqx.filter_vmap`` and run by
``jax.lax.scan`` over their arrays with ``jax.checkpoint`` (remat) around the body, ``optax.adamw``,
an ``eqx.filter_jit`` train step, numpy batches.

    python eqx_gpt.py STEPS [--log-every K] [--block]
"""

import argparse

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

VOCAB, SEQ, D, HEADS, LAYERS, BATCH = 256, 32, 64, 4, 3, 8


class Block(eqx.Module):
    ln1: eqx.nn.LayerNorm
    attn: eqx.nn.MultiheadAttention
    ln2: eqx.nn.LayerNorm
    up: eqx.nn.Linear
    down: eqx.nn.Linear

    def __init__(self, key):
        k1, k2, k3 = jax.random.split(key, 3)
        self.ln1, self.ln2 = eqx.nn.LayerNorm(D), eqx.nn.LayerNorm(D)
        self.attn = eqx.nn.MultiheadAttention(HEADS, D, key=k1)
        self.up, self.down = eqx.nn.Linear(D, 4 * D, key=k2), eqx.nn.Linear(4 * D, D, key=k3)

    def __call__(self, x):  # x: [SEQ, D], one sequence
        mask = jnp.tril(jnp.ones((SEQ, SEQ), bool))
        h = jax.vmap(self.ln1)(x)
        x = x + self.attn(h, h, h, mask=mask)
        h = jax.vmap(self.ln2)(x)
        return x + jax.vmap(lambda v: self.down(jax.nn.gelu(self.up(v))))(h)


class GPT(eqx.Module):
    embed: eqx.nn.Embedding
    pos: jax.Array
    blocks: Block  # LAYERS blocks, their arrays stacked on a leading axis
    ln: eqx.nn.LayerNorm
    head: eqx.nn.Linear

    def __init__(self, key):
        ke, kp, kb, kh = jax.random.split(key, 4)
        self.embed = eqx.nn.Embedding(VOCAB, D, key=ke)
        self.pos = jax.random.normal(kp, (SEQ, D)) * 0.02
        self.blocks = eqx.filter_vmap(Block)(jax.random.split(kb, LAYERS))
        self.ln = eqx.nn.LayerNorm(D)
        self.head = eqx.nn.Linear(D, VOCAB, key=kh)

    def __call__(self, tokens):  # tokens: [SEQ]
        x = jax.vmap(self.embed)(tokens) + self.pos
        arrays, static = eqx.partition(self.blocks, eqx.is_array)

        @jax.checkpoint
        def body(x, layer):
            return eqx.combine(layer, static)(x), None

        x, _ = jax.lax.scan(body, x, arrays)
        return jax.vmap(lambda v: self.head(self.ln(v)))(x)


@eqx.filter_jit
def train_step(model, opt_state, batch, optimizer):
    def loss_fn(model):
        logits = jax.vmap(model)(batch[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()

    loss, grads = eqx.filter_value_and_grad(loss_fn)(model)
    updates, opt_state = optimizer.update(grads, opt_state, eqx.filter(model, eqx.is_array))
    return eqx.apply_updates(model, updates), opt_state, loss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("steps", type=int)
    ap.add_argument("--log-every", type=int, default=0)
    ap.add_argument("--block", action="store_true")
    args = ap.parse_args()
    model = GPT(jax.random.PRNGKey(0))
    optimizer = optax.adamw(3e-4, weight_decay=0.1)
    opt_state = optimizer.init(eqx.filter(model, eqx.is_array))
    rng = np.random.default_rng(0)
    for i in range(args.steps):
        batch = rng.integers(0, VOCAB, (BATCH, SEQ + 1), dtype=np.int32)
        model, opt_state, loss = train_step(model, opt_state, batch, optimizer)  # the loop's step call
        if args.log_every and i % args.log_every == 0:
            print(f"step {i} loss {float(loss):.4f}", flush=True)
    if args.block:
        print("final loss", float(loss))
    print(f"dispatched {args.steps} steps")


if __name__ == "__main__":
    main()
