"""`rooflens predict FILE.py:fn --chip … --arg …`: tables, JSON, the arithmetic, and bad input."""

import json
import os
import subprocess
import sys
import textwrap

import pytest


def run(*args):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # the command sets the device count
    return subprocess.run([sys.executable, "-m", "rooflens.cli", *args], capture_output=True, text=True,
                          timeout=300, env=env)


@pytest.fixture(scope="module")
def model_py(tmp_path_factory):
    p = tmp_path_factory.mktemp("user") / "model.py"
    p.write_text(textwrap.dedent("""
        import jax
        import jax.numpy as jnp
        from jax.sharding import PartitionSpec as P

        def matmul(x, w):
            return x @ w

        def ffn(x, win, wout):
            with jax.named_scope("ffn"):
                h = jax.nn.relu(jnp.einsum("btd,df->btf", x, win))
                out = jnp.einsum("btf,fd->btd", h, wout)
            return jax.lax.with_sharding_constraint(out, P("data", None, "model"))

        NOT_A_FUNCTION = 3
    """))
    return p


def test_seed_matmul_on_v5e(model_py):
    r = run("predict", f"{model_py}:matmul", "--chip", "tpu-v5e", "--arg", "bf16[32,1024,8192]",
            "--arg", "bf16[8192,32768]")
    assert r.returncode == 0, r.stderr
    assert "predicted time 89.3 ms" in r.stdout and "17.6 TFLOP" in r.stdout and "compute" in r.stdout
    r = run("predict", f"{model_py}:matmul", "--chip", "tpu-v5e", "--arg", "bf16[32,1024,8192]",
            "--arg", "bf16[8192,32768]", "--json")
    data = json.loads(r.stdout)
    assert data["time_s"] == pytest.approx(0.0893, abs=5e-5) and data["chip"] == "tpu-v5e"
    assert data["ops"][0]["bound"] == "compute"


def test_mesh_sharded_args_and_explain(model_py):
    r = run("predict", f"{model_py}:ffn", "--chip", "tpu-v2", "--mesh", "data=4,model=2",
            "--arg", "bf16[32,1024,8192]@data,_,_", "--arg", "bf16[8192,32768]@_,model",
            "--arg", "bf16[32768,8192]@model,_", "--explain")
    assert r.returncode == 0, r.stderr
    assert "8 devices in the program" in r.stdout
    assert "reduce-scatter over N=2" in r.stdout and "T_math = 2.199e12 FLOP / 2.3e13 FLOP/s" in r.stdout
    assert "ffn" in r.stdout  # the named scope


@pytest.mark.parametrize("args, message", [
    (["--chip", "tpu-v9", "--arg", "f32[4]"], "unknown chip 'tpu-v9'"),
    (["--chip", "tpu-v5e", "--arg", "bf16[32,x]"], "bad --arg 'bf16[32,x]'"),
    (["--chip", "tpu-v5e", "--arg", "float[4,4]"], "bad --arg 'float[4,4]'"),
    (["--chip", "tpu-v5e", "--arg", "f32[4,4]@data,_"], "give --mesh too"),
    (["--chip", "tpu-v5e", "--mesh", "data=0", "--arg", "f32[4]"], "bad mesh 'data=0'"),
    (["--chip", "tpu-v5e", "--mesh", "data=2", "--arg", "f32[4,4]@model,_"], "mesh has no axis 'model'"),
    (["--chip", "tpu-v5e", "--arg", "f32[3,4]", "--arg", "f32[5,6]"], "matmul failed to lower"),
])
def test_bad_input_is_one_sentence(model_py, args, message):
    r = run("predict", f"{model_py}:matmul", *args)
    assert r.returncode == 2, r.stdout
    assert message in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("target, message", [
    ("{model}:nope", "has no function 'nope'"),
    ("{model}:NOT_A_FUNCTION", "is not a function"),
    ("{model}", "give the function as FILE.py:NAME"),
    ("/does/not/exist.py:f", "does not exist"),
])
def test_bad_target_is_one_sentence(model_py, target, message):
    r = run("predict", target.format(model=model_py), "--chip", "tpu-v5e", "--arg", "f32[4,4]")
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_predict_an_hlo_file():
    from tests.conftest import fixture_path

    path = fixture_path("tpu", "hlo", "v6e_from_xplane", "jit__psum_9646411105960254074_.after_optimizations.DERIVED.hlo.txt")
    r = run("predict", str(path), "--chip", "tpu-v6e", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    (ar,) = [o for o in data["ops"] if o["name"] == "all-reduce"]
    assert ar["bound"] == "communication" and ar["comm_bytes"] == pytest.approx(2 * 7 / 8 * 5 * 1024 * 1024 * 256 * 4)  # 8 devices in its sharding
    r = run("predict", str(path), "--chip", "tpu-v6e", "--arg", "f32[4]")
    assert r.returncode == 2 and "an HLO file already has its shapes" in r.stderr


FUSED_FFN = """HloModule jit_ffn, entry_computation_layout={(bf16[128,256]{1,0}, bf16[256,512]{1,0}, bf16[512]{0})->bf16[128,512]{1,0}}

%fused_computation (param_0: bf16[128,256], param_1: bf16[256,512], param_2: bf16[512]) -> bf16[128,512] {
  %param_0 = bf16[128,256]{1,0} parameter(0)
  %param_1 = bf16[256,512]{1,0} parameter(1)
  %dot.1 = bf16[128,512]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %param_2 = bf16[512]{0} parameter(2)
  %broadcast.1 = bf16[128,512]{1,0} broadcast(%param_2), dimensions={1}
  %add.1 = bf16[128,512]{1,0} add(%dot.1, %broadcast.1)
  %constant.1 = bf16[] constant(0)
  %broadcast.2 = bf16[128,512]{1,0} broadcast(%constant.1), dimensions={}
  ROOT %maximum.1 = bf16[128,512]{1,0} maximum(%add.1, %broadcast.2)
}

ENTRY %main (x: bf16[128,256], w: bf16[256,512], b: bf16[512]) -> bf16[128,512] {
  %x = bf16[128,256]{1,0} parameter(0)
  %w = bf16[256,512]{1,0} parameter(1)
  %b = bf16[512]{0} parameter(2)
  ROOT %fusion = bf16[128,512]{1,0} fusion(%x, %w, %b), kind=kOutput, calls=%fused_computation
}
"""


def test_hlo_op_shows_a_fusions_dot_flops(tmp_path):
    """`rooflens hlo --op` on a matmul fused with its bias and ReLU (as TPU/GPU compilers fuse them)."""
    path = tmp_path / "ffn.hlo.txt"
    path.write_text(FUSED_FFN)
    dot = 2 * 128 * 512 * 256
    r = run("hlo", str(path), "--op", "fusion", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["model_flops"] == dot and data["flops"] == dot + 2 * 128 * 512  # + the add and the max
    assert f"dot.1 inside: FLOPs = 2 × 65,536 × 256 = {dot:,}" in data["details"]
    r = run("hlo", str(path), "--op", "fusion")
    assert f"model FLOPs): {dot:,} of its {dot + 2 * 128 * 512:,} FLOPs" in r.stdout.replace("\n", " ")
    r = run("predict", str(path), "--chip", "h100-sxm", "--json")
    (op,) = json.loads(r.stdout)["ops"]
    assert op["model_flops"] == dot and op["flops"] > dot and json.loads(r.stdout)["model_flops"] == dot


def test_predict_explain_states_the_latency_rule(tmp_path):
    src = tmp_path / "allsum.py"
    src.write_text(textwrap.dedent("""
        import jax
        from jax.sharding import PartitionSpec as P

        def allsum(a):
            return jax.lax.with_sharding_constraint(a.sum(0, keepdims=True) * 2, P())
    """))
    r = run("predict", f"{src}:allsum", "--chip", "tpu-v5e", "--arg", "f32[8,64]@x,_", "--mesh", "x=8", "--explain")
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())
    assert "T_lat (hops)" in out and "latency-bound" in out
    assert "T = max(hops × T_min, T_bw)" in out and "every ICI hop costs T_min = 1 µs" in out
    assert "the published 2x4 slice of 8 devices" in out
