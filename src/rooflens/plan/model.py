"""A transformer described by its shape, and the scaling book's arithmetic on it.

Conventions (jax-ml/scaling-book, "All the Transformer Math You Need to Know", written "transformers.md" below):
D = d_model, F = d_ff, N = query heads, K = KV heads, H = head dimension, L = layers, V = vocabulary.
Parameter counts are exact (every weight matrix, norm scale and bias the switches describe), so a preset's
``params.total`` equals the published count of the checkpoint it names.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from rooflens.errors import RooflensError
from rooflens.hlo.shape import element_bytes

#: dtype names the plan accepts beyond the HLO aliases (int4 weights are common in serving)
_PLAN_DTYPES = {"int4": "s4", "uint4": "u4", "float8": "f8e4m3fn"}
#: the book's per-layer count of intermediate activations a backward pass without rematerialisation keeps
#: (transformers.md, "Gradient checkpointing": "roughly 2 * 20 * B * T * D * L ... 20 comes from counting every
#: intermediate node in the Transformer diagram")
NO_REMAT_ARRAYS_PER_LAYER = 20


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of ``dtype`` (bf16, f32, int8, int4, fp8, …); one sentence when unknown."""
    name = str(getattr(dtype, "name", dtype)).lower()
    nbytes = element_bytes(_PLAN_DTYPES.get(name, name))
    if not nbytes:
        raise RooflensError(f"unknown dtype {dtype!r} (use one of bf16, f16, f32, fp8, int8, int4).")
    return float(nbytes)


class ParamCount(int):
    """An exact parameter count (an ``int``: the total) with its parts.

    ``ffw`` (all experts), ``attention`` (Q, K, V, O and their biases), ``norms`` (every norm's scale and bias,
    the final one included), ``embedding`` (the input table), ``unembedding`` (0 when tied to the input table),
    ``router`` (MoE gates) and ``active`` (what one token uses: the active experts only).
    """

    def __new__(cls, *, ffw: int, attention: int, norms: int, embedding: int, unembedding: int, router: int,
                active: int) -> ParamCount:
        self = super().__new__(cls, ffw + attention + norms + embedding + unembedding + router)
        for k, v in (("ffw", ffw), ("attention", attention), ("norms", norms), ("embedding", embedding),
                     ("unembedding", unembedding), ("router", router), ("active", active)):
            object.__setattr__(self, k, v)
        return self

    def __setattr__(self, name, value):
        raise AttributeError("a ParamCount is immutable")

    @property
    def total(self) -> int:
        return int(self)

    @property
    def vocab(self) -> int:
        """Embedding and unembedding parameters together (transformers.md's 'Vocab' row: 2DV untied)."""
        return self.embedding + self.unembedding

    def to_dict(self) -> dict:
        return {"total": self.total, "ffw": self.ffw, "attention": self.attention, "vocab": self.vocab,
                "embedding": self.embedding, "unembedding": self.unembedding, "norms": self.norms,
                "router": self.router, "active": self.active}


@dataclass(frozen=True)
class Transformer:
    """A decoder-only transformer. Defaults describe LLaMA: gated MLP (SwiGLU), RMSNorm scales before attention
    and MLP and at the end, no biases, untied embeddings. ``experts``/``active_experts`` make the MLP a
    mixture of experts (with a D × experts router per layer)."""

    layers: int
    d_model: int
    d_ff: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    gated_mlp: bool = True  # three FFW matrices (W_in1, W_in2, W_out) instead of two
    tied_embeddings: bool = False  # the unembedding reuses the input table
    norms_per_layer: int = 2
    final_norm: bool = True
    norm_scale: bool = True  # each norm has a learned scale of D (RMSNorm, LayerNorm)
    norm_bias: bool = False  # and a bias of D (LayerNorm)
    qkv_bias: bool = False
    mlp_bias: bool = False
    out_bias: bool = False  # attention output projection bias
    experts: int = 1
    active_experts: int = 1
    name: str = "custom"
    source: str = ""  # where the figures come from

    def __post_init__(self) -> None:
        for f in ("layers", "d_model", "d_ff", "heads", "kv_heads", "head_dim", "vocab", "experts", "active_experts"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise RooflensError(f"Transformer {f} must be a positive integer, not {v!r}.")
        if self.heads % self.kv_heads:
            raise RooflensError(f"kv_heads ({self.kv_heads}) must divide heads ({self.heads}).")
        if self.active_experts > self.experts:
            raise RooflensError(f"active_experts ({self.active_experts}) cannot exceed experts ({self.experts}).")
        if self.norms_per_layer < 0:
            raise RooflensError("norms_per_layer cannot be negative.")

    # -- parameters ---------------------------------------------------------------------------------------

    @property
    def ffw_matrices(self) -> int:
        """Big FFW matrices per expert: 3 with a gating einsum, else 2 (transformers.md, 'Note [gating einsum]')."""
        return 3 if self.gated_mlp else 2

    def _expert_params(self) -> int:
        bias = (self.ffw_matrices - 1) * self.d_ff + self.d_model if self.mlp_bias else 0
        return self.ffw_matrices * self.d_model * self.d_ff + bias

    def _attention_params(self) -> int:
        """Per layer: W_Q and W_O are D·N·H each, W_K and W_V D·K·H each (applied-training.md's formula)."""
        q_o = 2 * self.d_model * self.heads * self.head_dim
        k_v = 2 * self.d_model * self.kv_heads * self.head_dim
        bias = ((self.heads + 2 * self.kv_heads) * self.head_dim if self.qkv_bias else 0) + \
            (self.d_model if self.out_bias else 0)
        return q_o + k_v + bias

    @property
    def params(self) -> ParamCount:
        L, D = self.layers, self.d_model
        per_norm = D * (int(self.norm_scale) + int(self.norm_bias))
        router = L * D * self.experts if self.experts > 1 else 0
        embedding = self.vocab * D
        unembedding = 0 if self.tied_embeddings else self.vocab * D
        ffw = L * self.experts * self._expert_params()
        attention = L * self._attention_params()
        norms = per_norm * (L * self.norms_per_layer + int(self.final_norm))
        active = (attention + L * self.active_experts * self._expert_params() + norms + embedding + unembedding
                  + router)
        return ParamCount(ffw=ffw, attention=attention, norms=norms, embedding=embedding, unembedding=unembedding,
                          router=router, active=active)

    @property
    def matmul_params(self) -> int:
        """Weights one token multiplies (active experts only): every matrix but the input embedding, which is a
        gather (no FLOPs). The unembedding is a D × V matmul, tied or not. Biases and norms are not matmuls."""
        attn = self.layers * 2 * self.d_model * (self.heads + self.kv_heads) * self.head_dim
        ffw = self.layers * self.active_experts * self.ffw_matrices * self.d_model * self.d_ff
        router = self.layers * self.d_model * self.experts if self.experts > 1 else 0
        return attn + ffw + router + self.vocab * self.d_model

    @property
    def layer_matmul_params(self) -> int:
        """One layer's matmul weights (the active experts'): what FSDP gathers and a layer's matmuls use."""
        return (self.matmul_params - self.vocab * self.d_model) // self.layers

    # -- FLOPs, KV cache, activations ----------------------------------------------------------------------

    def attention_flops_per_token(self, seq_len: int, training: bool = True) -> float:
        """Q·K and attention·V over a context of ``seq_len``: 4·T·N·H per layer forward, 12·T·N·H training
        (transformers.md, 'Attention': 12BT²NH per layer, i.e. 12·T·N·H per token; no causal halving)."""
        per_layer = (12 if training else 4) * seq_len * self.heads * self.head_dim
        return float(per_layer * self.layers)

    def flops_per_token(self, training: bool = True, seq_len: int | None = None) -> float:
        """Matmul FLOPs per token: 6 × matmul params training (2 forward + 4 backward), 2 × inference
        (transformers.md, 'Forward and reverse FLOPs'), plus dot-product attention when ``seq_len`` is given."""
        dense = (6 if training else 2) * float(self.matmul_params)
        return dense + (self.attention_flops_per_token(seq_len, training) if seq_len else 0.0)

    def kv_bytes_per_token(self, dtype: str = "bf16") -> float:
        """2 (keys and values) · L · K · H · bytes (transformers.md, 'Key-Value (KV) caching'; inference.md)."""
        return 2.0 * self.layers * self.kv_heads * self.head_dim * dtype_bytes(dtype)

    def checkpoint_elements_per_token(self, checkpoints_per_layer: int | str) -> tuple[float, str]:
        """Elements saved per token and layer for the backward pass, and the convention used.

        The book counts checkpoints in two ways. training.md (Problem 2: "checkpoint activations three times
        per layer (after the three big matmuls)") saves the FFW matmul outputs, D + 2F with a gated MLP
        (D + F without); applied-training.md ("checkpoint gradients 4 times per layer": 2 · 8192 · 4e6 · 4 · 80)
        and block remat (transformers.md: "only saves 1 checkpoint per layer", the layer input) count k arrays of
        D. So k equal to the FFW matrix count means those outputs; any other k means k arrays of D. Named
        policies: ``"block"`` (1 × D), ``"ffw"`` (the FFW outputs), ``"matmuls"`` (all seven matmul outputs:
        N·H + 2·K·H + D for Q, K, V, O, then the FFW's), ``"none"`` (no remat: ~20 × D, transformers.md).
        """
        D, F, H = self.d_model, self.d_ff, self.head_dim
        ffw = D + (self.ffw_matrices - 1) * F
        if isinstance(checkpoints_per_layer, str):
            policy = checkpoints_per_layer.lower()
            table = {"block": (D, "block remat: the layer input, D"),
                     "ffw": (ffw, f"the FFW matmul outputs, D + {self.ffw_matrices - 1}F"),
                     "matmuls": ((self.heads + 2 * self.kv_heads) * H + D + ffw,
                                 "every matmul output: N·H + 2·K·H (Q, K, V) + D (O) + the FFW's"),
                     "none": (NO_REMAT_ARRAYS_PER_LAYER * D, f"no remat: ~{NO_REMAT_ARRAYS_PER_LAYER} arrays of D")}
            if policy not in table:
                raise RooflensError(f"unknown checkpoint policy {checkpoints_per_layer!r} (a count, or one of "
                                    f"{', '.join(table)}).")
            n, what = table[policy]
            return float(n), what
        k = int(checkpoints_per_layer)
        if k < 0 or k != checkpoints_per_layer:
            raise RooflensError(f"checkpoints_per_layer must be a count (0 or more), not {checkpoints_per_layer!r}.")
        if k == self.ffw_matrices:
            return float(ffw), f"{k} checkpoints after the {k} big FFW matmuls: D + {k - 1}F (training.md, Problem 2)"
        return float(k * D), f"{k} checkpoint(s) of D per layer (applied-training.md; block remat for 1)"

    def activation_bytes(self, batch_tokens: float, checkpoints_per_layer: int | str = 1,
                         dtype: str = "bf16") -> float:
        """Bytes of the saved activations of one step: bytes · L · batch_tokens · (elements per token per layer)."""
        per_token, _ = self.checkpoint_elements_per_token(checkpoints_per_layer)
        return dtype_bytes(dtype) * self.layers * float(batch_tokens) * per_token

    def state(self, optimizer: str = "adam", param_dtype: str = "bf16", grad_dtype: str | None = None,
              master_dtype: str | None = None, moment_dtype: str = "f32", shards: int = 1):
        """Model-state bytes through ``rl.memory.estimate``. The defaults are the book's training recipe: bf16
        weights and fp32 Adam moments, "2 + 8 = 10 bytes per parameter" (training.md, 'Data Parallelism')."""
        from rooflens.memory import estimate

        return estimate(self.params.total, optimizer=optimizer, param_dtype=param_dtype, grad_dtype=grad_dtype,
                        master_dtype=master_dtype, moment_dtype=moment_dtype, shards=shards, chips=())

    def to_dict(self) -> dict:
        return {**asdict(self), "params": self.params.to_dict(), "matmul_params": self.matmul_params,
                "flops_per_token_training": self.flops_per_token(True),
                "kv_bytes_per_token_bf16": self.kv_bytes_per_token("bf16")}


FIELDS = tuple(f.name for f in fields(Transformer))


def from_mapping(table: dict, where: str) -> Transformer:
    """A Transformer from a mapping of its field names (a TOML file's table); one sentence on a bad key."""
    unknown = sorted(set(table) - set(FIELDS))
    if unknown:
        raise RooflensError(f"{where}: unknown Transformer field(s) {', '.join(unknown)} "
                            f"(known: {', '.join(FIELDS)}).")
    missing = [f for f in ("layers", "d_model", "d_ff", "heads", "head_dim", "vocab") if f not in table]
    if missing:
        raise RooflensError(f"{where}: missing Transformer field(s) {', '.join(missing)}.")
    return Transformer(**{"kv_heads": table["heads"], "name": where, **table})


