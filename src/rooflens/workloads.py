"""Built-in JAX workloads: a small decoder-only transformer training step.

Used by the demo, the shipped example HLO and the tests. Data parallel on the ``data`` mesh
axis and Megatron-style tensor parallel on ``model`` (attention heads and the FFN hidden
dimension split), with named scopes per layer, attention and FFN so that profiles and HLO
metadata read like the model.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TransformerConfig:
    vocab: int = 512
    d_model: int = 128
    n_heads: int = 4
    d_ff: int = 512
    n_layers: int = 2
    seq_len: int = 64
    batch: int = 16

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads


def init_params(cfg: TransformerConfig, seed: int = 0, dtype=None):
    """A parameter pytree of the transformer (float32 unless ``dtype`` says otherwise)."""
    import jax
    import jax.numpy as jnp

    dtype = dtype or jnp.float32
    keys = iter(jax.random.split(jax.random.key(seed), 4 + 6 * cfg.n_layers))

    def dense(shape, fan_in):
        return (jax.random.normal(next(keys), shape, jnp.float32) / jnp.sqrt(fan_in)).astype(dtype)

    params = {"embed": dense((cfg.vocab, cfg.d_model), 1.0), "layers": []}
    for _ in range(cfg.n_layers):
        params["layers"].append({
            "wq": dense((cfg.d_model, cfg.n_heads, cfg.d_head), cfg.d_model),
            "wk": dense((cfg.d_model, cfg.n_heads, cfg.d_head), cfg.d_model),
            "wv": dense((cfg.d_model, cfg.n_heads, cfg.d_head), cfg.d_model),
            "wo": dense((cfg.n_heads, cfg.d_head, cfg.d_model), cfg.d_model),
            "w_up": dense((cfg.d_model, cfg.d_ff), cfg.d_model),
            "w_down": dense((cfg.d_ff, cfg.d_model), cfg.d_ff),
        })
    params["unembed"] = dense((cfg.d_model, cfg.vocab), cfg.d_model)
    return params


def param_specs(cfg: TransformerConfig):
    """PartitionSpecs of the parameters: heads and FFN hidden split over ``model``."""
    from jax.sharding import PartitionSpec as P

    layer = {
        "wq": P(None, "model", None), "wk": P(None, "model", None), "wv": P(None, "model", None),
        "wo": P("model", None, None), "w_up": P(None, "model"), "w_down": P("model", None),
    }
    return {"embed": P(None, None), "layers": [dict(layer) for _ in range(cfg.n_layers)],
            "unembed": P(None, None)}


def _rms_norm(x):
    import jax.numpy as jnp

    return x * (1.0 / jnp.sqrt(jnp.mean(x.astype(jnp.float32) ** 2, axis=-1, keepdims=True) + 1e-6)).astype(x.dtype)


def loss_fn(params, tokens, cfg: TransformerConfig):
    """Next-token cross-entropy of a causal transformer on ``tokens`` [batch, seq]."""
    import jax
    import jax.numpy as jnp

    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    with jax.named_scope("embed"):
        x = params["embed"][inputs]
    seq = inputs.shape[1]
    mask = jnp.tril(jnp.ones((seq, seq), bool))
    for i, layer in enumerate(params["layers"]):
        with jax.named_scope(f"layer_{i}"):
            with jax.named_scope("attention"):
                h = _rms_norm(x)
                q = jnp.einsum("bsd,dhk->bshk", h, layer["wq"])
                k = jnp.einsum("bsd,dhk->bshk", h, layer["wk"])
                v = jnp.einsum("bsd,dhk->bshk", h, layer["wv"])
                scores = jnp.einsum("bshk,bthk->bhst", q, k) / jnp.sqrt(cfg.d_head).astype(q.dtype)
                scores = jnp.where(mask, scores, jnp.finfo(scores.dtype).min)
                attn = jax.nn.softmax(scores.astype(jnp.float32), axis=-1).astype(v.dtype)
                ctx = jnp.einsum("bhst,bthk->bshk", attn, v)
                x = x + jnp.einsum("bshk,hkd->bsd", ctx, layer["wo"])
            with jax.named_scope("ffn"):
                h = _rms_norm(x)
                x = x + jax.nn.gelu(h @ layer["w_up"]) @ layer["w_down"]
    with jax.named_scope("logits"):
        logits = (_rms_norm(x) @ params["unembed"]).astype(jnp.float32)
    with jax.named_scope("loss"):
        logp = jax.nn.log_softmax(logits, axis=-1)
        nll = -jnp.take_along_axis(logp, targets[..., None], axis=-1)
        return nll.mean()


def make_train_step(cfg: TransformerConfig, learning_rate: float = 1e-2):
    """``step(params, tokens) -> (params, loss)``: one SGD step (jit it yourself)."""
    import jax

    def step(params, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens, cfg)
        with jax.named_scope("sgd_update"):
            params = jax.tree.map(lambda p, g: p - learning_rate * g.astype(p.dtype), params, grads)
        return params, loss

    return step


def make_mesh(shape=(4, 2), axes=("data", "model")):
    """A mesh of the available devices with automatic (GSPMD/Shardy) axes."""
    from rooflens.lowering import make_mesh as mesh_of

    return mesh_of(dict(zip(axes, shape)))


def sharded_train_step(cfg: TransformerConfig, mesh, learning_rate: float = 1e-2):
    """The jitted training step with parameter and batch shardings on ``mesh``, and its
    abstract arguments (``jax.ShapeDtypeStruct`` with shardings: nothing is allocated)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    specs = param_specs(cfg)
    abstract = jax.eval_shape(lambda: init_params(cfg))
    p_shard = jax.tree.map(lambda s: NamedSharding(mesh, s), specs,
                           is_leaf=lambda x: isinstance(x, P))
    abs_params = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, p_shard)
    tok_shard = NamedSharding(mesh, P("data", None))
    abs_tokens = jax.ShapeDtypeStruct((cfg.batch, cfg.seq_len + 1), jnp.int32, sharding=tok_shard)
    step = jax.jit(make_train_step(cfg, learning_rate), in_shardings=(p_shard, tok_shard),
                   out_shardings=(p_shard, NamedSharding(mesh, P())), donate_argnums=(0,))
    return step, (abs_params, abs_tokens)
