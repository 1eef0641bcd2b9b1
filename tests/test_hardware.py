"""The chip catalogue: cited numbers, user chips, and the calibrated local chip."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import rooflens as rl
from rooflens.hardware import ChipError, catalog, read_catalog_file

REQUIRED = ["tpu-v2", "tpu-v3", "tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7",
            "a100-sxm", "h100-sxm", "h200-sxm", "b200"]


def run(*args, env=None):
    return subprocess.run([sys.executable, "-m", "rooflens.cli", *args], capture_output=True, text=True,
                          timeout=300, env=env)


def test_every_required_chip_is_there_with_a_source_per_number():
    cat = catalog()
    for name in REQUIRED:
        c = cat[name]
        assert c.peak_flops_per_s.get("bf16", 0) > 0 and c.hbm_bytes_per_s > 0 and c.hbm_bytes > 0
        for key, fig in c.figures.items():
            assert len(fig.source) > 15, f"{name}.{key} needs a document and section as its source"
        if c.kind == "tpu":
            assert c.ici_link_bytes_per_s_oneway > 0 and c.torus_dims in (2, 3)
        else:
            assert c.nvlink_bytes_per_s_oneway > 0 and c.nvlink_domain_devices == 8


def test_units_of_one_jax_device():
    """v2/v3 entries are one TensorCore (the profiling chapter's 23 TFLOP/s per core)."""
    assert rl.chip("tpu-v2").device_unit == "core"
    assert rl.chip("tpu-v2").peak_flops_per_s["bf16"] == 23e12
    assert rl.chip("tpu-v2").ici_link_bytes_per_s_oneway == 6e10
    assert rl.chip("tpu-v3").device_unit == "core"
    for name in ("tpu-v4", "tpu-v5p", "tpu-v5e", "tpu-v6e"):
        assert rl.chip(name).device_unit == "chip"
    assert rl.chip("h100-sxm").device_unit == "gpu"
    assert rl.chip("tpu-v5e").peak_flops_per_s["bf16"] == 1.97e14
    assert rl.chip("tpu-v5e").hbm_bytes_per_s == 8.1e11
    assert set(REQUIRED) <= set(rl.chips())


def test_device_kind_strings_find_the_chip():
    assert rl.chip("TPU v5 lite").name == "tpu-v5e"
    assert rl.chip("TPU v6 lite").name == "tpu-v6e"


def test_unknown_chip_names_the_choices():
    with pytest.raises(ChipError, match="unknown chip 'tpu-v9'; known chips: .*tpu-v5e"):
        rl.chip("tpu-v9")


def test_user_chip_file_adds_and_overrides(tmp_path, monkeypatch):
    f = tmp_path / "mine.toml"
    f.write_text(textwrap.dedent("""
        [chip.my-accel]
        kind = "gpu"
        description = "an in-house part"
        [chip.my-accel.peak_flops_per_s]
        bf16 = { value = 5e14, source = "our datasheet rev 3, table 2" }
        [chip.my-accel.memory]
        hbm_bytes_per_s = { value = 2e12, source = "our datasheet rev 3, table 4" }
        [chip.tpu-v5e]
        kind = "tpu"
        [chip.tpu-v5e.peak_flops_per_s]
        bf16 = { value = 2e14, source = "a user's correction" }
        [chip.tpu-v5e.memory]
        hbm_bytes_per_s = { value = 8.2e11, source = "a user's correction" }
    """))
    monkeypatch.setenv("ROOFLENS_CHIPS", str(f))
    assert rl.chip("my-accel").peak_flops_per_s["bf16"] == 5e14
    assert rl.chip("tpu-v5e").hbm_bytes_per_s == 8.2e11
    r = run("chips", "my-accel", "--json", env={**__import__("os").environ})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["figures"]["peak_flops_per_s.bf16"]["source"] == "our datasheet rev 3, table 2"


@pytest.mark.parametrize("body, message", [
    ("[chip.x]\nkind = \"tpu\"\n[chip.x.peak_flops_per_s]\nbf16 = 1e14\n", "must be an inline table"),
    ("[chip.x]\nkind = \"tpu\"\n[chip.x.peak_flops_per_s]\nbf16 = { value = 1e14, source = \"\" }\n",
     "empty source"),
    ("[chip.x]\nkind = \"tpu\"\n[chip.x.memory]\nhbm_bytes_per_s = { value = 1e12, source = \"d\" }\n",
     "no peak_flops_per_s"),
    ("[chip.x\n", "not valid TOML"),
    ("title = 'no chips'\n", r"no \[chip.<name>\] table"),
])
def test_malformed_chip_files_are_one_sentence(tmp_path, body, message):
    f = tmp_path / "bad.toml"
    f.write_text(body)
    with pytest.raises(ChipError, match=message):
        read_catalog_file(f)
    r = run("chips", "--chips", str(f))
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_chips_command_lists_and_shows_sources():
    r = run("chips")
    assert r.returncode == 0, r.stderr
    for name in REQUIRED:
        assert name in r.stdout
    assert "ONE JAX device" in r.stdout and "TensorCore" in r.stdout
    r = run("chips", "tpu-v5e")
    assert r.returncode == 0 and "How to Scale Your Model" in r.stdout and "197 TFLOP/s" in r.stdout
    r = run("chips", "tpu-v9")
    assert r.returncode == 2 and r.stderr.startswith("rooflens: unknown chip 'tpu-v9'")


def test_calibrate_writes_local_and_predict_uses_it(tmp_path):
    """`rooflens calibrate --quick` measures this CPU, reports the spread and saves chip 'local'."""
    import os

    env = {**os.environ, "ROOFLENS_CACHE_DIR": str(tmp_path)}
    r = run("chips", "local", env=env)
    assert r.returncode == 2 and "rooflens calibrate" in r.stderr
    r = run("calibrate", "--quick", "--json", env=env)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    rows = data["measurements"]
    assert any("matmul" in m["what"] for m in rows) and any("y + 1" in m["what"] for m in rows)
    assert all(m["min"] <= m["median"] <= m["max"] and len(m["times_s"]) == 3 for m in rows)
    local = read_catalog_file(tmp_path / "local.toml")["local"]
    assert local.kind == "cpu" and local.peak_flops_per_s["fp32"] > 1e8 and local.hbm_bytes_per_s > 1e8
    assert "median of 3 runs" in local.source("peak_flops_per_s.fp32")
    assert local.matmul_rate("fp32", 2e9, 1024) > 1e8
    # int8 × int8 → int32 matmuls are measured too: an int8 dot is priced at the CPU's own int8 rate (it was priced
    # at bf16's, which the quantized decoder's dots beat, and the calibration was blamed as too low)
    assert any(m["what"].startswith("s8 matmul") for m in rows)
    assert local.peak_flops_per_s["int8"] > 1e8 and "s8 matmul" in local.source("peak_flops_per_s.int8")
    from rooflens.cost.model import peak_for

    assert peak_for(local, "s8", True, "default")[:2] == (local.peak_flops_per_s["int8"], "int8")


def test_local_is_the_users_calibration_file_whatever_else_names_it(tmp_path, monkeypatch):
    """``chip('local')`` parses no shipped file (none is 'local' by name or device kind) and gives what the whole
    catalogue gives: the calibration file (read last, it wins) even where a ROOFLENS_CHIPS file also defines
    'local', that file's where there is no calibration, and the 'no calibrated chip' error where neither is."""
    import rooflens.hardware as H

    (tmp_path / "cache").mkdir()
    monkeypatch.setenv("ROOFLENS_CACHE_DIR", str(tmp_path / "cache"))  # no calibration yet: the shipped chips alone
    monkeypatch.delenv("ROOFLENS_CHIPS", raising=False)
    assert all("local" not in (c.name.lower(), *(k.lower() for k in c.device_kinds)) for c in catalog().values())
    shipped = (Path(H.__file__).parent / "data" / "h100-sxm.toml").read_text()
    (tmp_path / "cache" / "local.toml").write_text(shipped.replace("chip.h100-sxm", "chip.local"))
    (tmp_path / "mine.toml").write_text(shipped.replace("chip.h100-sxm", "chip.local").replace(
        "value = 6.7e13", "value = 1.0"))
    monkeypatch.setenv("ROOFLENS_CHIPS", str(tmp_path / "mine.toml"))
    assert H.chip("local") == catalog()["local"] and H.chip("local").peak_flops_per_s["fp32"] == 6.7e13
    assert H.chip("local").origin == str(tmp_path / "cache" / "local.toml")
    (tmp_path / "cache" / "local.toml").unlink()  # no calibration: the ROOFLENS_CHIPS file's 'local' is the one
    assert H.chip("local").peak_flops_per_s["fp32"] == 1.0
    monkeypatch.delenv("ROOFLENS_CHIPS")
    with pytest.raises(ChipError, match="no calibrated chip 'local' yet"):
        H.chip("local")
    assert H.chip("H100-SXM").name == "h100-sxm" and H.chip("NVIDIA H100 80GB HBM3").name == "h100-sxm"


@pytest.mark.parametrize("rate_flops, sizes", [
    (2e11, (256, 512, 1024, 2048)),  # a 2-core VM: 2048³ takes 86 ms, the first over the floor
    (2e12, (512, 1024, 2048, 4096)),  # ten times faster: 4096³ (69 ms) is the first
    (1e15, (1024, 2048, 4096, 8192)),  # never over the floor: stops at the largest size
])
def test_a_cpus_calibration_sizes_grow_until_one_matmul_takes_the_floor(rate_flops, sizes):
    """The CPU's square matmuls end at the first size whose one run takes CPU_SIZE_FLOOR_S, with the three below:
    a 2-core machine no longer spends 0.6 s a repeat on 4096³ (its calibration took 77 s), a fast one still
    reaches its plateau. A matmul here is a stand-in whose run takes 2n³ / rate."""
    from rooflens.hardware import calibrate

    class Run:
        def __init__(self, n):
            self.n = n

        def block_until_ready(self):
            import time
            time.sleep(2 * self.n ** 3 / rate_flops)

    assert calibrate.cpu_sizes(lambda a, b: Run(a), lambda n: n) == sizes
