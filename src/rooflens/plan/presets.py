"""Well-known models, from their published config.json (each preset names its file).

Every preset's ``params.total`` is the checkpoint's exact published parameter count (tests/test_plan.py
checks each against the figure its model card or safetensors index gives).
"""

from __future__ import annotations

from pathlib import Path

from rooflens.errors import RooflensError
from rooflens.plan.model import Transformer, from_mapping

_HF = "Hugging Face config.json of "

PRESETS: dict[str, Transformer] = {m.name: m for m in (
    # LLaMA 2 (RMSNorm scales, SwiGLU, untied embeddings); the scaling book's training.md and inference.md tables
    # use llama2-13b with the same figures (ffw multiplier 2.7 ≈ 13824 / 5120).
    Transformer(32, 4096, 11008, 32, 32, 128, 32000, name="llama2-7b",
                source=_HF + "meta-llama/Llama-2-7b-hf: 32 layers, hidden 4096, intermediate 11008, 32 heads, "
                             "32 KV heads, vocab 32000; 6,738,415,616 parameters"),
    Transformer(40, 5120, 13824, 40, 40, 128, 32000, name="llama2-13b",
                source=_HF + "meta-llama/Llama-2-13b-hf: 40 layers, hidden 5120, intermediate 13824, 40 heads, "
                             "40 KV heads, vocab 32000; 13,015,864,320 parameters"),
    Transformer(80, 8192, 28672, 64, 8, 128, 32000, name="llama2-70b",
                source=_HF + "meta-llama/Llama-2-70b-hf: 80 layers, hidden 8192, intermediate 28672, 64 heads, "
                             "8 KV heads, vocab 32000; 68,976,648,192 parameters"),
    # LLaMA 3 / 3.1 (same shapes; 3.1 only extends the context)
    Transformer(32, 4096, 14336, 32, 8, 128, 128256, name="llama3-8b",
                source=_HF + "meta-llama/Meta-Llama-3-8B: 32 layers, hidden 4096, intermediate 14336, 32 heads, "
                             "8 KV heads, vocab 128256; 8,030,261,248 parameters"),
    Transformer(80, 8192, 28672, 64, 8, 128, 128256, name="llama3-70b",
                source=_HF + "meta-llama/Meta-Llama-3-70B (the scaling book's applied-training.md table): 80 "
                             "layers, hidden 8192, intermediate 28672, 64 heads, 8 KV heads, vocab 128256; "
                             "70,553,706,496 parameters"),
    Transformer(126, 16384, 53248, 128, 8, 128, 128256, name="llama3-405b",
                source=_HF + "meta-llama/Llama-3.1-405B: 126 layers, hidden 16384, intermediate 53248, 128 heads, "
                             "8 KV heads, vocab 128256; 405,853,388,800 parameters"),
    # Mistral (LLaMA's architecture with GQA) and its mixture of experts
    Transformer(32, 4096, 14336, 32, 8, 128, 32000, name="mistral-7b",
                source=_HF + "mistralai/Mistral-7B-v0.1: 32 layers, hidden 4096, intermediate 14336, 32 heads, "
                             "8 KV heads, vocab 32000; 7,241,732,096 parameters"),
    Transformer(32, 4096, 14336, 32, 8, 128, 32000, experts=8, active_experts=2, name="mixtral-8x7b",
                source=_HF + "mistralai/Mixtral-8x7B-v0.1: 32 layers, hidden 4096, intermediate 14336, 32 heads, "
                             "8 KV heads, vocab 32000, 8 local experts, 2 per token; 46,702,792,704 parameters"),
)}

PRESETS["llama3.1-8b"] = PRESETS["llama3-8b"]
PRESETS["llama3.1-70b"] = PRESETS["llama3-70b"]
PRESETS["llama3.1-405b"] = PRESETS["llama3-405b"]


def workload_transformer(cfg=None) -> Transformer:
    """The built-in workload (``rooflens.workloads``, what ``rooflens demo`` runs) as a Transformer: MHA, a
    two-matrix GELU MLP, RMSNorm without learned scales, no biases, untied embeddings."""
    from rooflens.workloads import TransformerConfig

    cfg = cfg or TransformerConfig()
    return Transformer(cfg.n_layers, cfg.d_model, cfg.d_ff, cfg.n_heads, cfg.n_heads, cfg.d_head, cfg.vocab,
                       gated_mlp=False, norm_scale=False, name="rooflens-demo",
                       source="rooflens.workloads.TransformerConfig (the built-in training step)")


def model(name: str) -> Transformer:
    """A preset by name (``llama2-13b``…, ``rooflens-demo``), or a TOML file describing a custom Transformer."""
    key = str(name).strip().lower()
    if key in PRESETS:
        return PRESETS[key]
    if key == "rooflens-demo":
        return workload_transformer()
    if key.endswith(".toml"):
        return load_config(name)
    raise RooflensError(f"unknown model {name!r} (known: {', '.join(names())}; or give a FILE.toml).")


def names() -> list[str]:
    return sorted([*PRESETS, "rooflens-demo"])


def load_config(path: str) -> Transformer:
    """A Transformer from a TOML file: its field names at the top level or in a ``[model]`` table."""
    import tomllib

    p = Path(path)
    if not p.is_file():
        raise RooflensError(f"model config {path} does not exist (or is not a file).")
    try:
        table = tomllib.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise RooflensError(f"cannot read model config {path} ({e}).") from None
    table = table.get("model", table)
    if not isinstance(table, dict):
        raise RooflensError(f"model config {path}: [model] must be a table of Transformer fields.")
    return from_mapping({"name": p.stem, **table}, str(path))
