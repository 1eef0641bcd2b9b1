"""A small GPT trained with Flax linen, written as people write them: the layers under
``nn.scan(nn.remat(Block))``, ``optax.adamw`` in a ``TrainState``, an un-jitted ``model.init``
(dozens of eager primitives before the first step), numpy batches, an optional Orbax checkpoint.

    python linen_gpt.py STEPS [--log-every K] [--ckpt DIR --ckpt-every K] [--annotate] [--block]

By default the loop never reads a result back: it dispatches STEPS steps asynchronously and
returns (the device may still be working when the script exits). ``--block`` waits for the last
step; ``--annotate`` marks each step with ``jax.profiler.StepTraceAnnotation``.
"""

import argparse

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state

VOCAB, SEQ, D, HEADS, LAYERS, BATCH = 256, 32, 64, 4, 3, 8


class Block(nn.Module):
    d: int
    heads: int

    @nn.compact
    def __call__(self, x, _):
        mask = nn.make_causal_mask(jnp.ones(x.shape[:2], jnp.int32))
        h = nn.LayerNorm()(x)
        x = x + nn.MultiHeadDotProductAttention(num_heads=self.heads)(h, h, mask=mask)
        h = nn.LayerNorm()(x)
        h = nn.Dense(self.d)(nn.gelu(nn.Dense(4 * self.d)(h)))
        return x + h, None


class GPT(nn.Module):
    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(VOCAB, D)(tokens)
        x = x + self.param("pos", nn.initializers.normal(0.02), (SEQ, D))
        Stack = nn.scan(nn.remat(Block), variable_axes={"params": 0}, split_rngs={"params": True},
                        length=LAYERS)
        x, _ = Stack(D, HEADS)(x, None)
        return nn.Dense(VOCAB)(nn.LayerNorm()(x))


@jax.jit
def train_step(state, batch):
    def loss_fn(params):
        logits = state.apply_fn({"params": params}, batch[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


def batches(seed=0):
    rng = np.random.default_rng(seed)
    while True:
        yield rng.integers(0, VOCAB, (BATCH, SEQ + 1), dtype=np.int32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("steps", type=int)
    ap.add_argument("--log-every", type=int, default=0)
    ap.add_argument("--ckpt", default=None)
    ap.add_argument("--ckpt-every", type=int, default=10)
    ap.add_argument("--annotate", action="store_true")
    ap.add_argument("--block", action="store_true")
    args = ap.parse_args()

    model = GPT()
    params = model.init(jax.random.PRNGKey(0), np.zeros((BATCH, SEQ), np.int32))["params"]
    state = train_state.TrainState.create(apply_fn=model.apply, params=params,
                                          tx=optax.adamw(3e-4, weight_decay=0.1))
    ckptr = None
    if args.ckpt:
        import orbax.checkpoint as ocp

        ckptr = ocp.StandardCheckpointer()
    data = batches()
    for i in range(args.steps):
        batch = next(data)
        if args.annotate:
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                state, loss = train_step(state, batch)
        else:
            state, loss = train_step(state, batch)  # the loop's step call
        if args.log_every and i % args.log_every == 0:
            print(f"step {i} loss {float(loss):.4f}", flush=True)
        if ckptr is not None and (i + 1) % args.ckpt_every == 0:
            ckptr.save(f"{args.ckpt}/step_{i + 1}", state.params)
    if ckptr is not None:
        ckptr.wait_until_finished()
    if args.block:
        print("final loss", float(loss))
    print(f"dispatched {args.steps} steps")


if __name__ == "__main__":
    main()
