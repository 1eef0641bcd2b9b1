"""Grouped GEMM (MoE experts, ``ragged_dot``) priced on real HLO: XLA's ``__cublas$lt$groupedMatmul``."""

import pytest

import rooflens as rl
from rooflens.cost.counts import custom_call_counts
from rooflens.cost.kernels import kernel_cost
from rooflens.cost.model import costs

# The instruction as openxla/xla prints it (xla/backends/gpu/runtime/thunk_proto_deserialization_test.cc,
# canonical_hlo of the grouped GEMM thunk): 101 token rows, 2 experts of 407 × 400, s32[2] group sizes.
GROUPED = r'''HloModule grouped

ENTRY main {
  p0 = f32[101,407]{1,0} parameter(0)
  p1 = f32[2,407,400]{2,1,0} parameter(1)
  p2 = s32[2]{0} parameter(2)
  ROOT gg = (f32[101,400]{1,0}, s8[33554432]{0}) custom-call(p0, p1, p2), custom_call_target="__cublas$lt$groupedMatmul", backend_config={"operation_queue_id":"0", "force_earliest_schedule":false,"reification_cost":[], "device_type":"DEVICE_TYPE_INVALID", "grouped_gemm_backend_config":{"gemm_backend_config":{"alpha_real":1,"beta":0,"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["1"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]},"alpha_imag":0,"epilogue":"DEFAULT","grad_x":false,"grad_y":false,"damax_output":false},"ragged_dot_dimension_numbers":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["1"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]},"lhs_ragged_dimensions":["0"],"rhs_group_dimensions":["0"]}}}
}
'''


def _call(text=GROUPED):
    m = rl.hlo.parse(text)
    return m, m.find("gg")


def test_grouped_gemm_flops_are_every_row_against_its_expert():
    m, ins = _call()
    kc = kernel_cost(m, ins)
    assert kc.kernel == "grouped gemm"
    assert kc.flops == kc.model_flops == 2 * 101 * 400 * 407  # not 2 × 2 experts × …: each row meets one
    assert custom_call_counts(m, ins).flops == kc.flops  # was 0: the dimension numbers sit one level down
    # operands read once (tokens, both experts, group sizes), the output written; not the 32 MiB workspace
    assert kc.read_bytes == 101 * 407 * 4 + 2 * 407 * 400 * 4 + 2 * 4
    assert kc.written_bytes == 101 * 400 * 4
    assert kc.bound == "estimate" and "group sizes are runtime data" in kc.note


def test_ragged_contracting_divides_by_the_groups():
    """The weight gradient: ragged in the contracted rows, one [K, N] block per group."""
    text = (GROUPED.replace("f32[101,407]{1,0} parameter(0)", "f32[101,407]{1,0} parameter(0)")
            .replace("p1 = f32[2,407,400]{2,1,0}", "p1 = f32[101,400]{1,0}")
            .replace("(f32[101,400]{1,0}, s8", "(f32[2,407,400]{2,1,0}, s8")
            .replace('"lhs_contracting_dimensions":["1"]', '"lhs_contracting_dimensions":["0"]')
            .replace('"rhs_contracting_dimensions":["1"]', '"rhs_contracting_dimensions":["0"]'))
    m, ins = _call(text)
    kc = kernel_cost(m, ins)
    assert kc.flops == pytest.approx(2 * 407 * 400 * 101)  # each of the 101 rows feeds one group's block
    assert "ragged contracting" in kc.flops_formula


def test_grouped_gemm_in_the_model_and_on_a_chip():
    m, _ = _call()
    (oc,) = [c for c in costs(m, emulate_fusion=False) if c.name == "gg"]
    assert oc.flops == 2 * 101 * 400 * 407 and oc.model_flops == oc.flops
    assert oc.bytes == 101 * 407 * 4 + 2 * 407 * 400 * 4 + 8 + 101 * 400 * 4
    pred = rl.cost.price(oc, rl.chip("h100-sxm"))
    # worked by hand from NVIDIA's H100 SXM datasheet: 3.35 TB/s HBM3, 494.7 TFLOP/s dense TF32 (what an f32
    # matmul runs in at default precision): T_mem = 1,628,436 B / 3.35e12 = 486 ns, T_math = 3.289e7 / 4.947e14
    # = 66.5 ns; both under the 1 µs a kernel launch takes, so the launch is the bound
    assert pred.t_mem_s == pytest.approx(1_628_436 / 3.35e12, rel=1e-3)
    assert pred.t_math_s == pytest.approx(2 * 101 * 400 * 407 / 494.7e12, rel=1e-3)
    assert pred.t_pred_s == pytest.approx(1e-6) and pred.bound == "overhead"
