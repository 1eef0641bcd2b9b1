"""A TPU trace that names no generation gets one from what its ops achieved (issue 27).

The vLLM Chrome trace (tpu-inference, Qwen3 on 2 TPU devices) carries no device name and no peak
stats, only XLA's per-op ``model_flops`` / ``bytes_accessed`` and each op's HLO line. Its fastest
matmul fusion runs at 841 TFLOP/s and its fastest loop fusion moves 1.57 TB/s of HBM: no chip slower
than that can have run it, which leaves tpu-v6e and tpu-v7 of the catalogue.
"""

from __future__ import annotations

import pytest

import rooflens as rl
from rooflens.analysis.chip_rates import op_rates, peak_keys
from rooflens.analysis.trust import trace_hbm_bytes
from rooflens.errors import RooflensError
from rooflens.hardware import ChipError, catalog
from rooflens.hardware.infer import MeasuredRate, chips_fitting, infer_chip_from_rates
from tests.conftest import fixture_path

VLLM = ("tpu", "vllm_tpu_qwen3_2026_01_11_21_26_41.trace.json.gz")
V6E = ("tpu", "xprof_tpu_inference_2.v6e-4.xplane.pb")


@pytest.fixture(scope="module")
def vllm():
    return rl.load(str(fixture_path(*VLLM)))


@pytest.fixture(scope="module")
def vllm_rates(vllm):
    return op_rates(vllm)


def test_vllm_rates_bound_the_chip_from_below(vllm_rates):
    flops = max(vllm_rates, key=lambda r: r.flops_per_s)
    nbytes = max(vllm_rates, key=lambda r: r.hbm_bytes_per_s)
    assert flops.op.startswith("convolution_bitcast_fusion") and flops.peak_keys == ("bf16",)
    assert 8.3e14 < flops.flops_per_s < 8.5e14  # 91 % of v6e's 920 TFLOP/s, 4.3× a v5e
    assert nbytes.op.startswith("multiply_reduce_fusion") and 1.5e12 < nbytes.hbm_bytes_per_s < 1.6e12
    # no async op, collective or custom call among them (their counts bound nothing)
    assert not any(r.op.startswith(("copy-start", "copy-done", "all-reduce", "RPA")) for r in vllm_rates)
    assert [c.name for c in chips_fitting(vllm_rates, "tpu")] == ["tpu-v6e", "tpu-v7"]


def test_vllm_without_chip_names_the_candidates(vllm):
    with pytest.raises(RooflensError, match=r"names no TPU generation.*fit tpu-v6e, tpu-v7 .*give --chip") as e:
        rl.analyze(vllm)
    assert "91% of tpu-v6e" in str(e.value) and "tpu-v5e" not in str(e.value)
    # the CLI's pipeline keeps the report, with the candidates as the reason there is no roofline
    rep = rl.analysis.analyze(vllm, require_roofline=False)
    assert rep.roofs is None and "tpu-v6e, tpu-v7" in rep.chip_reason


def test_a_unique_candidate_is_picked_and_said(vllm_rates):
    without_v7 = {n: c for n, c in catalog().items() if n != "tpu-v7"}
    chip, reason = infer_chip_from_rates(vllm_rates, "tpu", without_v7)
    assert chip.name == "tpu-v6e" and "fit only tpu-v6e" in reason and "names no TPU generation" in reason
    too_fast = [*vllm_rates, MeasuredRate("imaginary", 0.0, ("bf16",), 1e13)]  # 10 TB/s: beyond every TPU
    with pytest.raises(ChipError, match="fit no catalogue chip"):
        infer_chip_from_rates(too_fast, "tpu")


def test_a_real_v6e_fits_its_own_rates():
    """The method never excludes the chip that ran the trace: the real v6e capture's ops fit tpu-v6e."""
    prof = rl.load(str(fixture_path(*V6E)))
    rates = op_rates(prof)
    assert rates and "tpu-v6e" in [c.name for c in chips_fitting(rates, "tpu")]


def test_slice_into_vmem_counts_only_the_hbm_read(vllm):
    """fusion.1537 slices two bf16[1024,1,512] out of an HBM bf16[1024,1,3584] into VMEM (S(1)): XLA's
    bytes_accessed (4 MiB) counts the VMEM writes; the HBM side is the 2 MiB read."""
    key = next(k for k in vllm.table.hlo_text if k[1] == "fusion.1537")
    nbytes, how = trace_hbm_bytes(vllm.table.hlo_text[key], vllm.table.op_meta[key]["bytes"])
    assert vllm.table.op_meta[key]["bytes"] == 4 * 2**20 and nbytes == 2 * 2**20
    assert "on-chip or host memory" in how


def test_given_slower_chip_is_beaten_and_the_fitting_chips_named(vllm):
    rep = rl.analyze(vllm, chip="tpu-v5e")
    trust = next(f for f in rep.findings if f.rule == "roofline-trust")
    assert trust.title.startswith("The trace beats tpu-v5e")
    assert "catalogue chips those rates fit: tpu-v6e, tpu-v7" in trust.evidence
    assert all((c.flops_fraction_of_peak or 0) <= 1 and (c.bytes_fraction_of_peak or 0) <= 1 for c in rep.comparison)


@pytest.mark.parametrize("dtypes, keys", [({"bf16"}, ("bf16",)), ({"bf16", "f32"}, ("bf16",)),
                                          ({"s8"}, ("int8",)), ({"s8", "bf16"}, ("int8", "bf16")),
                                          ({"f8e4m3fn", "bf16"}, ("fp8", "bf16")), ({"f8e5m2"}, ("fp8",))])
def test_peak_keys_by_operand_types(dtypes, keys):
    assert peak_keys(dtypes) == keys
