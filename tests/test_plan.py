"""rl.plan: exact parameter counts, the scaling book's worked answers, the CLI, and the built-in transformer."""

import json

import pytest

import rooflens as rl
from rooflens.cli import main

PUBLISHED = {  # exact counts from each checkpoint's model card / safetensors index
    "llama2-7b": 6_738_415_616, "llama2-13b": 13_015_864_320, "llama2-70b": 68_976_648_192,
    "llama3-8b": 8_030_261_248, "llama3-70b": 70_553_706_496, "llama3-405b": 405_853_388_800,
    "mistral-7b": 7_241_732_096, "mixtral-8x7b": 46_702_792_704,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_counts_are_exact(name):
    m = rl.plan.model(name)
    assert m.params == PUBLISHED[name] == m.params.total
    p = m.params
    assert p.ffw + p.attention + p.vocab + p.norms + p.router == p.total


def test_mixtral_active_params_and_flops():
    m = rl.plan.model("mixtral-8x7b")
    assert m.params.active == 12_879_925_248  # 2 of 8 experts: Mistral's "12.9B active parameters"
    assert m.flops_per_token(training=False) == 2 * m.matmul_params


def test_transformers_chapter_question_1():
    # transformers.md, Problem 1: D=4096, F=4D, V=32000, L=64, MHA with N·H = D, int8 KV: ~16e9 params, 512 kB/token.
    # The book's sum counts one norm per layer and no final norm ("L·(3DF + 4DNH + D) + 2DV").
    m = rl.plan.Transformer(64, 4096, 4 * 4096, 32, 32, 128, 32000, norms_per_layer=1, final_norm=False)
    assert m.params.total == 64 * (3 * 4096 * 16384 + 4 * 4096 * 4096 + 4096) + 2 * 4096 * 32000
    # the book's "16e9" plugs in 4e3 for 4096 and 16e3 for 16384 (16.6e9 with those); exact: 17.4e9
    assert m.params.total == pytest.approx(16e9, rel=0.1)
    assert m.params.attention / (m.params.attention + m.params.ffw) == pytest.approx(0.25)
    assert m.kv_bytes_per_token("int8") == 512 * 1024


def test_inference_chapter_shared_embeddings():
    # inference.md, worked problem 1: tied embeddings, ~18.4e9 params (no norms in the book's sum)
    m = rl.plan.Transformer(64, 4096, 16384, 32, 8, 256, 32128, tied_embeddings=True, norm_scale=False)
    assert m.params.total == 64 * 4096 * (3 * 16384 + 2 * 256 * (32 + 8)) + 4096 * 32128
    assert m.params.total == pytest.approx(18.4e9, rel=0.01)


def test_kv_cache_and_activation_memory():
    m = rl.plan.model("llama2-13b")
    # inference.md 'What about memory?': 8192 × 40 × 128 × 40 × 2 B × 2 = 6.7 GB per 8k sequence
    assert m.kv_bytes_per_token("bf16") * 8192 == pytest.approx(6.7e9, rel=0.01)
    # training.md Problem 2: 3 checkpoints (after the 3 big matmuls), 16M tokens, bf16: 2·L·B·(D + 2F) ≈ 42 TB
    assert m.activation_bytes(batch_tokens=16e6, checkpoints_per_layer=3, dtype="bf16") == pytest.approx(4.2e13, 0.01)
    # Problem 3: the same at 3M tokens, ~7.86e12
    assert m.activation_bytes(3e6, 3) == pytest.approx(7.86e12, rel=0.001)
    # applied-training.md: LLaMA 3-70B, 4M tokens, 4 checkpoints of D per layer: 2·8192·4e6·4·80 ≈ 20.9 TB
    assert rl.plan.model("llama3-70b").activation_bytes(4e6, 4) == pytest.approx(20.9e12, rel=0.01)
    assert rl.plan.model("llama3-70b").kv_bytes_per_token("int8") == 163_840  # applied-inference.md: 160 kB


def test_llama3_70b_training_on_a_v5p_pod():
    m = rl.plan.model("llama3-70b")
    p = rl.plan.train(m, chip="tpu-v5p", chips=8960, batch_tokens=4 * 1024 * 1024, mfu=0.4, tokens=15e12,
                      checkpoints_per_layer=4)
    # applied-training.md: 6·70e9 = 4.2e11 FLOPs/token (the book counts the input embedding too: within 1.5%)
    assert p.flops_per_token == pytest.approx(4.2e11, rel=0.015)
    assert p.days == pytest.approx(44, rel=0.02)  # "This is about 44 days!"
    assert p.critical_batch_per_chip_one_axis == pytest.approx(2550, rel=0.001)  # 4.59e14 / 1.8e11
    assert p.critical_batch_per_chip == pytest.approx(850, rel=0.001)
    assert p.critical_batch_per_chip_fsdp_tp == pytest.approx(453, rel=0.005)  # 2·2550²/F
    assert p.x_opt == pytest.approx(1618, rel=0.002)  # √(2·4.19e6·8960/28672)
    # the book's ~2.4 GB per chip (it takes 96 GB chips and 21.6 TB in all; ours: exact counts, 2**22 tokens)
    assert p.strategy("fsdp").memory_per_chip_bytes == pytest.approx(2.4e9, rel=0.08)
    assert not p.strategy("dp").fits and p.strategy("fsdp").fits
    assert not p.strategy("fsdp").compute_bound  # 468 per chip < 850: "solidly communication-bound"
    assert p.strategy("fsdp+tp").compute_bound  # 468 > 453
    # 'Scaling Between Pods': C/W_dcn ≈ 75,000 per pod (the book rounds 3.8e18 / 5e13 = 76,000; 4.59e14 / 6.25e9)
    assert p.critical_batch_per_pod_dcn == pytest.approx(75_000, rel=0.03)
    assert p.max_model_parallel == pytest.approx(3 * 28672 / 2550)


def test_llama2_13b_on_v5p_4096():
    p = rl.plan.train("llama2-13b", chip="tpu-v5p", chips=4096, batch_tokens=3e6, topology="16x16x16")
    # training.md Problem 3: 850 · 4096 = 3.48M > 3M, so FSDP alone is comms-bound; the FSDP+TP bound is ~940
    assert p.critical_batch_per_chip * 4096 == pytest.approx(3.48e6, rel=0.01)
    assert not p.strategy("fsdp").compute_bound
    assert p.critical_batch_per_chip_fsdp_tp == pytest.approx(940, rel=0.01)
    assert not p.strategy("dp").fits  # 130 GB of state on a 96 GB chip
    assert p.strategy("fsdp").t_math_s == pytest.approx(6 * 12_851_609_600 * 3e6 / (4096 * 4.59e14))


def test_decode_llama3_70b_on_v5e():
    # applied-inference.md: int8 weights and KVs, batch 32, 8k context on a 4x2: ~17 ms, ~1882 tokens/s
    d = rl.plan.decode("llama3-70b", chip="tpu-v5e", chips=8, batch=32, context=8192, kv_dtype="int8",
                       param_dtype="int8")
    assert d.step_time_s == pytest.approx(0.017, rel=0.03)
    assert d.tokens_per_s == pytest.approx(1882, rel=0.03)
    assert d.min_topology == "2x4" and d.bound == "memory"
    assert d.critical_batch == pytest.approx(120, rel=0.03)
    # "a prefill of length 8192 ... on 16 TPU v5e chips": 0.91 s at 40% MFU
    assert rl.plan.decode("llama3-70b", "tpu-v5e", 16, 1, 8192).prefill_s == pytest.approx(0.91, rel=0.02)
    # the smallest slice for bf16 / int8 / int4 weights: 4x4, 4x2, 2x2
    for dtype, chips in (("bf16", 16), ("int8", 8), ("int4", 4)):
        assert rl.plan.decode("llama3-70b", "tpu-v5e", 1, 1, 1, kv_dtype=dtype, param_dtype=dtype).min_chips == chips


def test_decode_llama2_13b_table():
    # inference.md 'Modeling throughput and latency for LLaMA 2-13B' on 8 v5e: the book takes 8.2e11 B/s per chip,
    # the catalogue 8.1e11 (Google's 819 GB/s): 1.3% apart
    for batch, step_ms in ((1, 4.98), (8, 12.13), (64, 69.33), (240, 249.09)):
        d = rl.plan.decode("llama2-13b", "tpu-v5e", 8, batch, 8192)
        assert d.step_time_s * 1e3 == pytest.approx(step_ms, rel=0.025)


def test_bad_input_is_one_sentence():
    with pytest.raises(rl.RooflensError, match="unknown model"):
        rl.plan.model("llama9-1t")
    with pytest.raises(rl.RooflensError, match="kv_heads"):
        rl.plan.Transformer(2, 64, 128, 4, 3, 16, 100)
    with pytest.raises(rl.RooflensError, match="mfu"):
        rl.plan.train("llama2-7b", "tpu-v5p", 8, 1e6, mfu=1.5)


def _cli(capsys, *argv):
    with pytest.raises(SystemExit) as e:
        main(list(argv))
        raise SystemExit(0)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def test_cli_plan_json_and_errors(capsys, tmp_path):
    code, out, _ = _cli(capsys, "plan", "--model", "llama2-13b", "--chip", "tpu-v5p", "--chips", "4096",
                        "--batch-tokens", "3e6", "--mfu", "0.4", "--tokens", "15e12", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["model"]["params"]["total"] == 13_015_864_320
    assert doc["train"]["step_time_s"] == pytest.approx(6 * 12_851_609_600 * 3e6 / (4096 * 4.59e14 * 0.4))
    code, out, _ = _cli(capsys, "plan", "--model", "llama3-70b", "--chip", "tpu-v5e", "--chips", "8", "--decode",
                        "--batch", "32", "--context", "8192", "--kv-dtype", "int8", "--param-dtype", "int8", "--json")
    assert code == 0 and json.loads(out)["decode"]["min_topology"] == "2x4"
    cfg = tmp_path / "tiny.toml"
    cfg.write_text("layers = 2\nd_model = 64\nd_ff = 256\nheads = 4\nhead_dim = 16\nvocab = 100\ngated_mlp = false\n")
    code, out, _ = _cli(capsys, "plan", "--config", str(cfg), "--chip", "h100-sxm", "--chips", "8",
                        "--batch-tokens", "1e5", "--json")
    assert code == 0
    assert json.loads(out)["model"]["params"]["total"] == 2 * (4 * 64 * 64 + 2 * 64 * 256 + 2 * 64) + 64 + 2 * 6400
    code, out, err = _cli(capsys, "plan", "--model", "nope", "--chip", "tpu-v5p", "--chips", "8", "--batch-tokens",
                          "1e6")
    assert code == 2 and out == ""
    assert err.startswith("rooflens: unknown model 'nope'") and err.count("\n") == 1 and "Traceback" not in err


def _plan_text(*argv, env_extra=None) -> str:
    import os
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "rooflens.cli", *argv], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "COLUMNS": "200", **(env_extra or {})})
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    return r.stdout


def _row(text: str, first_cell: str) -> list[str]:
    """The cells of the table row whose first cell is ``first_cell``."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if cells and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row {first_cell!r} in:\n{text}")


def test_cli_plan_terminal_shows_the_books_answers():
    """`rooflens plan` in the terminal: the numbers the scaling book works out, as a user reads them."""
    text = _plan_text("plan", "--model", "llama2-13b", "--chip", "tpu-v5p", "--chips", "4096", "--batch-tokens",
                      "3e6", "--mfu", "0.4", "--tokens", "15e12")
    assert "llama2-13b: 13,015,864,320 parameters" in text  # the checkpoint's own count
    assert "Training plan: llama2-13b on 4096 × tpu-v5p, 3,000,000 tokens per step" in text
    # training.md Problem 3: pure data parallelism holds 130 GB of state on a 96 GB chip; FSDP's critical batch
    # is 850 per chip and the mixed FSDP+TP bound ~940, the best of the four
    dp, fsdp, best = _row(text, "dp"), _row(text, "fsdp"), _row(text, "fsdp+tp *")
    assert dp[2:4] == ["130 GB", "no"] and fsdp[3] == "yes" and fsdp[5] == "850"
    assert abs(int(best[5]) - 940) <= 10 and best[1] == "1024 × 4"
    # at MFU 0.4: 6 · 12.85e9 (non-embedding) · 3e6 FLOPs over 4096 × 459 TFLOP/s × 0.4 = 308 ms, and 15e12
    # tokens are 5e6 steps of it: 17.8 days
    assert "step: 308 ms at MFU 0.4" in text and "in 17.8 days" in text
    decode = _plan_text("plan", "--model", "llama3-70b", "--chip", "tpu-v5e", "--chips", "8", "--decode", "--batch",
                        "32", "--context", "8192", "--kv-dtype", "int8", "--param-dtype", "int8")
    assert "Decode plan: llama3-70b on 8 × tpu-v5e, batch 32, context 8192 (weights int8, KV int8)" in decode
    header = next(line for line in decode.splitlines() if "tokens/s" in line)
    names = [c.strip() for c in header.strip().strip("┃").split("┃")]
    row = next(line for line in decode.splitlines() if " ms " in line and "│" in line)
    cells = dict(zip(names, (c.strip() for c in row.strip().strip("│").split("│")), strict=True))
    # applied-inference.md: int8 weights and KVs, batch 32, 8k context on a 4x2: ~17 ms, ~1882 tokens/s
    assert float(cells["step"].removesuffix(" ms")) == pytest.approx(17, rel=0.03)
    assert int(cells["tokens/s"].replace(",", "")) == pytest.approx(1882, rel=0.03)
    assert (cells["min topology"], cells["MLP bound"], cells["fits"]) == ("2x4", "memory", "yes")


def test_plan_and_memory_state_one_model_with_its_recipe_said(capsys):
    """`plan` counts the book's 10 B per parameter (bf16 weights + two f32 Adam moments) and says so, naming the
    16 B `rooflens memory --estimate` counts by default; asked for gradients and an f32 master copy, the plan's
    state is exactly what `memory --estimate` gives for the same parameters."""
    args = ("plan", "--model", "llama3-8b", "--chip", "tpu-v5p", "--chips", "256", "--batch-tokens", "1e6", "--json")
    code, out, _ = _cli(capsys, *args)
    assert code == 0
    doc = json.loads(out)
    n = doc["model"]["params"]["total"]
    train = doc["train"]
    assert train["state_bytes"] == (2 + 2 * 4) * n
    assert "10 B/parameter" in train["state_recipe"] and "16 B/parameter" in train["state_recipe"]
    assert any(train["state_recipe"] in line for line in train["explain"])
    code, out, _ = _cli(capsys, *args, "--grad-dtype", "bf16", "--master-dtype", "f32")
    full = json.loads(out)["train"]
    code, out, _ = _cli(capsys, "memory", "--estimate", "--params", str(n), "--json")
    est = json.loads(out)
    assert full["state_bytes"] == est["total_bytes"] == (2 + 2 + 2 * 4 + 4) * n
    assert est["recipe"].endswith("= 16 B/parameter") and full["state_recipe"] == est["recipe"]
    code, out, _ = _cli(capsys, *args[:-1])
    assert "state: 80.3 GB = bf16 weights 2 B + 2 f32 adam moments 8 B = 10 B/parameter" in out


def test_builtin_transformer_matches_real_jax():
    """The workload's Transformer: its exact parameter count is the pytree's, its training FLOPs the compiled
    step's dot FLOPs (rooflens's count, equal to XLA's cost analysis for dots)."""
    import jax
    import numpy as np

    from rooflens.workloads import TransformerConfig, init_params, make_train_step

    cfg = TransformerConfig()
    m = rl.plan.model("rooflens-demo")
    params = jax.eval_shape(lambda: init_params(cfg))
    assert m.params.total == sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))
    tokens = jax.ShapeDtypeStruct((cfg.batch, cfg.seq_len + 1), np.int32)
    pred = rl.predict(make_train_step(cfg), params, tokens, chip="tpu-v5e")
    planned = m.flops_per_token(training=True, seq_len=cfg.seq_len) * cfg.batch * cfg.seq_len
    assert pred.model_flops == planned


def test_plan_against_a_captured_run(tmp_path):
    """rl.analyze(plan=…) on a real capture of the built-in step (4×2 mesh on 8 CPU devices)."""
    import jax
    import jax.numpy as jnp

    from rooflens.hardware import calibrate
    from rooflens.lowering import make_mesh
    from rooflens.workloads import TransformerConfig, sharded_train_step

    calibrate.save(calibrate.measure(repeats=3, sizes=(256, 512), copy_bytes=16 << 20))
    cfg = TransformerConfig()
    step, (ap, at) = sharded_train_step(cfg, make_mesh("data=4,model=2"))
    params = jax.tree.map(lambda s: jax.device_put(jnp.zeros(s.shape, s.dtype), s.sharding), ap)
    tokens = jax.device_put(jnp.zeros(at.shape, at.dtype), at.sharding)
    prof = rl.capture(step, params, tokens, steps=3, logdir=tmp_path, feed=lambda o, a: (o[0], a[1]))
    rep = rl.analyze(prof, plan="rooflens-demo", plan_batch_tokens=cfg.batch * cfg.seq_len, plan_seq_len=cfg.seq_len)
    c = rep.plan
    assert c.chips == 8 and not c.batch_inferred
    # every dot runs once over the 8 devices except the unembedding, replicated over the 2 model shards
    # (param_specs: P(None, None)), which the devices compute twice: 14% of the step's dot FLOPs here
    m = rl.plan.model("rooflens-demo")
    redundant = 6 * m.vocab * m.d_model * cfg.batch * cfg.seq_len
    assert c.measured_flops == pytest.approx(c.planned_flops + redundant, rel=1e-9)
    # two MFUs of one step, both named: XLA's dots, which is the report's own MFU (computed by the analysis from
    # the step's dot FLOPs), and the plan's FLOPs (6·P·T) over the same step on the same chips: so they differ by
    # exactly the FLOPs' ratio checked above
    assert c.measured_step_s == rep.steps.step_time_s and c.report_mfu == rep.steps.mfu
    assert c.measured_mfu == pytest.approx(rep.steps.mfu * c.planned_flops / (c.planned_flops + redundant), rel=1e-9)
    assert "of the plan's FLOPs" in c.explain[1] and f"the report's MFU, {rep.steps.mfu:.1%}" in c.explain[1]
    doc = rep.to_json()
    assert doc["plan"]["model"] == "rooflens-demo"
    assert "plan" not in rl.analyze(prof).to_json()
    # the same check in the terminal (`rooflens report --plan-model`). The command takes no sequence length, so its
    # plan counts no attention FLOPs (the model's training FLOPs per token without one), against the same
    # measured FLOPs
    text = _plan_text("report", str(tmp_path), "--plan-model", "rooflens-demo", "--plan-batch-tokens",
                      str(cfg.batch * cfg.seq_len))
    assert f"Plan vs measured (rooflens-demo, {cfg.batch * cfg.seq_len:,} tokens per step)" in text
    no_attention = m.flops_per_token(training=True) * cfg.batch * cfg.seq_len
    assert no_attention < c.planned_flops
    flops = _row(text, "model FLOPs per step")
    assert flops[3] == f"{c.measured_flops / no_attention:.2f}×" != "1.00×"
    mfu = _row(text, "MFU of the plan's FLOPs")
    assert mfu[2] != "—" and mfu[1] != "—"
    xla = _row(text, "MFU of XLA's FLOPs (the report's)")
    assert xla[1] == "—" and xla[2] != "—"
