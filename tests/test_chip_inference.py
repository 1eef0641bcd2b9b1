"""Which chip a trace ran on: by device name, else by vendor, core count, memory and clock.

The AMD fixtures are real JAX-on-ROCm XSpace captures on MI300X (AMD-AGI/TraceLens): their device
planes carry no device name, only ``device_vendor`` "AMD" and the device's properties (304 compute
units, 192 GiB, 2.1 GHz), which is what the inference must work from.
"""

import pytest

import rooflens as rl
from rooflens.hardware import ChipError, infer_chip
from tests.conftest import fixture_path

# what a ROCm device plane reports for an MI300X (the fixtures' own stats)
MI300X_STATS = {"device_vendor": "AMD", "clock_rate": 2100000, "core_count": 304, "memory_bandwidth": 2662400000000,
                "memory_size": 206141652992, "compute_cap_major": 9, "compute_cap_minor": 4}


@pytest.mark.parametrize("kind, stats, want", [
    ("AMD", MI300X_STATS, "mi300x"),
    ("AMD", {**MI300X_STATS, "memory_size": 256 * 2**30}, "mi325x"),  # the same CUs with 256 GiB of HBM3E
    ("AMD", {"device_vendor": "AMD", "core_count": 256, "memory_size": 288 * 2**30, "clock_rate": 2400000}, "mi355x"),
    ("AMD", {"device_vendor": "AMD", "core_count": 256, "memory_size": 288 * 2**30, "clock_rate": 2200000}, "mi350x"),
    ("AMD", {"device_vendor": "AMD", "core_count": 256, "memory_size": 288 * 2**30}, "mi355x"),  # no clock: flagship
    ("GPU", {"device_vendor": "Nvidia", "core_count": 108, "memory_size": 42_505_273_344}, "a100-sxm-40gb"),
    ("GPU", {"device_vendor": "Nvidia", "core_count": 108, "memory_size": 85_031_714_816}, "a100-sxm"),
    ("GPU", {"device_vendor": "Nvidia", "core_count": 114, "memory_size": 85_031_714_816}, "h100-pcie"),
    ("AMD Instinct MI300X", {}, "mi300x"),
    ("AMD Instinct MI355X", {}, "mi355x"),
    ("AMD Instinct MI300X VF", {}, "mi300x"),  # a virtual function: the name with a suffix
    ("NVIDIA A100-SXM4-40GB", {}, "a100-sxm-40gb"),
    ("NVIDIA A100-SXM4-80GB", {}, "a100-sxm"),
    ("NVIDIA H100 PCIe", {}, "h100-pcie"),
    ("TPU v6 Lite", {}, "tpu-v6e"),
    ("TPU", {"peak_teraflops_per_second": 918, "peak_hbm_bw_gigabytes_per_second": 1640}, "tpu-v6e"),
])
def test_infer_chip_from_names_and_properties(kind, stats, want):
    chip, reason = infer_chip(kind, stats)
    assert chip.name == want, reason
    assert reason.startswith("the trace's")


def test_unknown_device_is_one_sentence_naming_what_the_trace_says():
    with pytest.raises(ChipError, match=r"'AMD' \(vendor amd, 80 cores, 192 GiB\), which matches no catalogue chip"):
        infer_chip("AMD", {"device_vendor": "AMD", "core_count": 80, "memory_size": 192 * 2**30})
    with pytest.raises(ChipError, match="give --chip"):
        infer_chip("Some Accelerator", {})


def test_amd_chips_carry_cited_peaks_memory_and_links():
    for name, bf16, hbm, bw, link in (("mi300x", 1.3074e15, 192, 5.3e12, 64e9), ("mi325x", 1.3074e15, 256, 6e12, 64e9),
                                      ("mi355x", 2.51658e15, 288, 8e12, 76.8e9)):
        c = rl.chip(name)
        assert c.vendor == "amd" and c.kind == "gpu" and c.scaleup_link == "Infinity Fabric"
        assert c.peak_flops_per_s["bf16"] == bf16 and c.peak_flops_per_s["fp8"] == pytest.approx(2 * bf16, rel=1e-4)
        assert c.hbm_bytes == hbm * 2**30 and c.hbm_bytes_per_s == bw
        assert c.value("interconnect.infinity_fabric_link_bytes_per_s_oneway") == link
        assert c.scaleup_bytes_per_s_oneway(8) == 7 * link
        for key, fig in c.figures.items():
            assert len(fig.source) > 30, f"{name}.{key} needs a document and section"
    # dense bf16 = CUs × peak clock × FLOPs per clock per CU (2048 on CDNA 3, 4096 on CDNA 4)
    assert rl.chip("mi300x").peak_flops_per_s["bf16"] == pytest.approx(304 * 2.1e9 * 2048, rel=1e-4)
    assert rl.chip("mi355x").peak_flops_per_s["bf16"] == pytest.approx(256 * 2.4e9 * 4096, rel=1e-4)
    assert rl.chip("a100-sxm-40gb").hbm_bytes_per_s == 1.555e12 and rl.chip("a100-sxm").hbm_bytes_per_s == 2.039e12


def test_f32_matmuls_run_in_tf32_on_nvidia_only():
    from rooflens.cost import peak_for

    assert peak_for(rl.chip("h100-sxm"), "f32", True, "default")[1] == "tf32"
    assert peak_for(rl.chip("mi300x"), "f32", True, "default")[1] == "fp32"


@pytest.mark.parametrize("name", ["tracelens_mi300x_jax08_gemm.xplane.pb",
                                  "tracelens_mi300x_jax_conv_minimal_legacy.xplane.pb"])
def test_amd_traces_are_recognised_and_compared_with_the_roofline(name):
    """rl.analyze(rl.load(…)) on the real MI300X captures: the chip is inferred and every kernel is priced."""
    rep = rl.analyze(rl.load(fixture_path("gpu_amd", name)))
    assert rep.chip == "mi300x" and "304 cores" in rep.chip_reason
    priced = [c for c in rep.comparison if c.priced]
    assert priced and all(c.ratio >= 1.0 for c in priced)  # a roofline is a lower bound
    big = max(priced, key=lambda c: c.total_time_s)
    assert big.category in ("matmul", "convolution", "copy/transpose")
    assert rep.steps is not None and rep.steps.model_flops > 0 and 0 < rep.steps.mfu < 1


def test_mi300x_gemm_runs_near_its_roofline():
    """JAX 0.8 bf16 GEMMs on MI300X (hipBLASLt): the largest, 2·16384·4096·4096 FLOP, at 1.40× its roofline."""
    rep = rl.analyze(rl.load(fixture_path("gpu_amd", "tracelens_mi300x_jax08_gemm.xplane.pb")))
    gemm = max((c for c in rep.comparison if c.category == "matmul"), key=lambda c: c.model_flops)
    assert gemm.model_flops == 2 * 16384 * 4096 * 4096 and gemm.bound == "compute"
    assert 1.0 <= gemm.ratio <= 2.0
    assert gemm.flops_fraction_of_peak == pytest.approx(1 / gemm.ratio, rel=1e-6)


@pytest.mark.parametrize("kind,stats,chip,why", [
    ("Instinct MI300X OAM", None, "mi300x", "model name"),  # a runtime's own wording around the model
    ("A100-SXM4-40GB", None, "a100-sxm-40gb", "model name"),
    ("gfx942:sramecc+:xnack-", None, "mi300x", "gfx942"),  # ROCm's arch name: the family, its first part
    ("gfx950", None, "mi355x", "highest-clocked"),
    ("AMD", {"device_vendor": "AMD", "compute_cap_major": 9, "compute_cap_minor": 5}, "mi355x", "gfx950"),
    ("AMD", {"device_vendor": "AMD", "compute_cap_major": 9, "compute_cap_minor": 5, "clock_rate": 2_200_000,
             "core_count": 256}, "mi350x", "2.2 GHz"),
])
def test_amd_and_partial_device_names(kind, stats, chip, why):
    from rooflens.hardware.infer import infer_chip

    c, reason = infer_chip(kind, stats)
    assert c.name == chip and why in reason, reason


def test_a_model_word_two_chips_share_is_no_match():
    from rooflens.hardware.catalog import ChipError
    from rooflens.hardware.infer import infer_chip

    with pytest.raises(ChipError, match="matches no catalogue chip"):
        infer_chip("NVIDIA H100")  # SXM or PCIe: nothing says which


def _report_json(*args):
    import json

    from click.testing import CliRunner

    from rooflens import cli

    res = CliRunner().invoke(cli.cli, ["report", *map(str, args), "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_a_chip_given_against_the_traces_own_device_is_a_what_if():
    """The real MI300X capture priced on an H100: the report says the trace ran on an MI300X (its plane's
    304 compute units, 192 GiB, gfx942 from compute capability 9.4) and that the comparison is a what-if;
    the slow-op findings, if any, are what-ifs too. The same chip given as the trace's own says nothing."""
    path = fixture_path("gpu_amd", "tracelens_mi300x_jax08_gemm.xplane.pb")
    doc = _report_json(path, "--chip", "h100-sxm")
    said = doc["chip_mismatch"]
    assert said and "mi300x" in said and "h100-sxm" in said and "what-if" in said
    assert "gfx942" in said and "304 cores" in said and "192 GiB" in said
    assert all(f["what_if"] == (f["rule"] in ("slow-op", "kernel-inefficiency", "slow-collective"))
               for f in doc["findings"])
    assert _report_json(path, "--chip", "mi300x")["chip_mismatch"] is None
    import tempfile
    from pathlib import Path

    from click.testing import CliRunner

    from rooflens import cli

    with tempfile.TemporaryDirectory() as d:  # the page's header says it too
        page = Path(d) / "r.html"
        assert CliRunner().invoke(cli.cli, ["report", str(path), "--chip", "h100-sxm", "--html", str(page)]).exit_code == 0
        assert "what-if" in page.read_text() and "which is mi300x, not h100-sxm" in page.read_text()
    text = CliRunner().invoke(cli.cli, ["report", str(path), "--chip", "h100-sxm"], env={"COLUMNS": "200"}).stdout
    assert text.splitlines()[1].startswith("what-if: the trace ran on AMD GPUs (gfx942")
    assert _report_json(path)["chip_mismatch"] is None  # inferred: the trace's own


def test_a_tpu_given_for_a_cpu_run_makes_its_slow_ops_what_ifs(sharded_cpu_trace):
    """A real 8-device CPU capture priced on a TPU v5e: every op is hundreds of times off the TPU's roofline;
    the report says the trace ran on CPUs, and no roofline finding is HIGH or listed before the findings
    about the run itself."""
    doc = _report_json(sharded_cpu_trace, "--chip", "tpu-v5e")
    assert "ran on CPUs" in doc["chip_mismatch"] and "tpu-v5e" in doc["chip_mismatch"]
    slow = [f for f in doc["findings"] if f["rule"] == "slow-op"]
    assert slow, "a CPU matmul is far off a TPU's roofline: the rule must still report the what-if"
    priced = {(c["program"], c["name"]): c["ratio"] for c in doc["comparison"] if c["ratio"]}
    assert max(priced.values()) > 100  # what the what-if is about: the CPU's times against the TPU's roof
    for f in slow:
        assert f["what_if"] and f["severity"] == "low" and f["title"].startswith("What-if on tpu-v5e")
        assert f["evidence"][0].startswith("what-if")
    # every finding that judges the CPU's times against the TPU's roofline is a what-if, and only those
    assert all(f["what_if"] == (f["rule"] in ("slow-op", "kernel-inefficiency", "slow-collective"))
               for f in doc["findings"])
    flags = [f["what_if"] for f in doc["findings"]]
    assert flags == sorted(flags)  # the run's own findings first
