"""The small GPT of ``linen_gpt.py`` in Flax NNX: blocks made with ``nnx.vmap`` and run under
``nnx.scan`` of ``nnx.remat``, ``nnx.Optimizer`` with ``optax.adamw``, an ``nnx.jit`` train step,
numpy batches; eager module construction (eager primitives) before the first step.

    python nnx_gpt.py STEPS [--log-every K] [--block]
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

VOCAB, SEQ, D, HEADS, LAYERS, BATCH = 256, 32, 64, 4, 3, 8


class Block(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.ln1 = nnx.LayerNorm(D, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(num_heads=HEADS, in_features=D, decode=False, rngs=rngs)
        self.ln2 = nnx.LayerNorm(D, rngs=rngs)
        self.up = nnx.Linear(D, 4 * D, rngs=rngs)
        self.down = nnx.Linear(4 * D, D, rngs=rngs)

    def __call__(self, x):
        mask = nnx.make_causal_mask(jnp.ones(x.shape[:2], jnp.int32))
        x = x + self.attn(self.ln1(x), mask=mask)
        return x + self.down(nnx.gelu(self.up(self.ln2(x))))


class GPT(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.embed = nnx.Embed(VOCAB, D, rngs=rngs)
        self.pos = nnx.Param(jax.random.normal(rngs.params(), (SEQ, D)) * 0.02)

        @nnx.split_rngs(splits=LAYERS)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def make_blocks(rngs):
            return Block(rngs)

        self.blocks = make_blocks(rngs)
        self.ln = nnx.LayerNorm(D, rngs=rngs)
        self.head = nnx.Linear(D, VOCAB, rngs=rngs)

    def __call__(self, tokens):
        x = self.embed(tokens) + self.pos[...]

        @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
        @nnx.remat
        def through(x, block):
            return block(x)

        return self.head(self.ln(through(x, self.blocks)))


@nnx.jit
def train_step(model, optimizer, batch):
    def loss_fn(model):
        logits = model(batch[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("steps", type=int)
    ap.add_argument("--log-every", type=int, default=0)
    ap.add_argument("--block", action="store_true")
    args = ap.parse_args()
    model = GPT(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(3e-4, weight_decay=0.1), wrt=nnx.Param)
    rng = np.random.default_rng(0)
    for i in range(args.steps):
        loss = train_step(model, optimizer, rng.integers(0, VOCAB, (BATCH, SEQ + 1), dtype=np.int32))  # the loop's step call
        if args.log_every and i % args.log_every == 0:
            print(f"step {i} loss {float(loss):.4f}", flush=True)
    if args.block:
        print("final loss", float(loss))
    print(f"dispatched {args.steps} steps")


if __name__ == "__main__":
    main()
