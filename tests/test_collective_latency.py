"""Collective latency and multi-axis groups: the scaling book's worked problems, NCCL's and RCCL's model.

The book ("How to Scale Your Model", Sharding chapter) prices every ICI hop at T_min ≈ 1 µs and a ring
collective at max(hops × T_min, V / W); groups that span several torus axes use every axis's links.
Problems on more devices than the tests' 8 CPU devices are priced from HLO text (64-device modules
with their replica groups) or through the cost functions directly.
"""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import rooflens as rl
from rooflens.cost import collective_cost, place_group, predict_module
from rooflens.lowering import make_mesh

S = jax.ShapeDtypeStruct
US = 1e-6


def _gather_hlo(n_devices: int, groups: str, shard: tuple[int, ...], gathered: tuple[int, ...], dim: int) -> str:
    """A real-form HLO module: one bf16 all-gather over ``groups`` (iota replica groups)."""
    s = ",".join(map(str, shard))
    g = ",".join(map(str, gathered))
    layout = ",".join(str(i) for i in reversed(range(len(shard))))
    return (f"HloModule gather, num_partitions={n_devices}\n\nENTRY main {{\n"
            f"  p = bf16[{s}]{{{layout}}} parameter(0)\n"
            f"  ROOT ag = bf16[{g}]{{{layout}}} all-gather(p), channel_id=1, replica_groups={groups}, "
            f"dimensions={{{dim}}}, use_global_device_ids=true\n}}\n")


def _only_collective(pred):
    (op,) = [o for o in pred.ops if o.category == "collective"]
    return op


# -- the book's worked problems -------------------------------------------------------------------------

def test_book_q2_allgather_over_one_axis_then_two_axes_on_v4p_4x4x4():
    """Sharding, Question 2: B=1024, D=4096 bf16 on a TPU v4p 4x4x4, mesh X=4, Y=4, Z=4.

    AllGather_X([B_X, D_Y]) takes 2BD/(W_bidi·Y) = 23 µs; AllGather_XY([B_X, D_Y]) twice the bandwidth for
    four times the bytes, 2BD/(2·W_bidi) = 46 µs, "far from the latency bound of 4 µs (1 µs per hop)".
    """
    b, d = 1024, 4096
    # groups along X: 4 consecutive device ids (X is the fastest axis of the 4x4x4 slice)
    one = _gather_hlo(64, "[16,4]<=[64]", (b // 4, d // 4), (b, d // 4), 0)
    # groups along X and Y: 16 consecutive ids; each device ends with [B, D_Y] gathered over X then [B, D] over Y
    two = _gather_hlo(64, "[4,16]<=[64]", (b * d // 16,), (b * d,), 0)
    v4 = rl.chip("tpu-v4")
    ag_x = _only_collective(predict_module(rl.hlo.parse(one), v4, topology="4x4x4"))
    ag_xy = _only_collective(predict_module(rl.hlo.parse(two), v4, topology="4x4x4"))
    assert round(ag_x.t_pred_s / US) == 23 and ag_x.bound == "communication"
    assert round(ag_xy.t_pred_s / US) == 47  # the book rounds 2·1024·4096 / 1.8e11 = 46.6 µs down to 46
    assert ag_xy.t_pred_s == pytest.approx(2 * b * d / (2 * 9e10))
    assert ag_xy.hops == 4 and ag_xy.t_latency_s == pytest.approx(4 * US)  # 2 hops on each wrapped axis of 4
    # the same gathered bytes over one axis take twice as long as over X and Y
    same_bytes_one_axis = collective_cost(v4, "all-gather", 4, 2 * b * d / 4, 2 * b * d, place_group(v4, 4, (4, 4, 4)))
    assert same_bytes_one_axis.t_comm_s == pytest.approx(2 * ag_xy.t_pred_s)
    # without --topology the same 64-device program runs on v4's published 4x4x4 slice: the same answer
    default = _only_collective(predict_module(rl.hlo.parse(two), v4))
    assert default.t_pred_s == pytest.approx(ag_xy.t_pred_s)


def test_book_q3_latency_bound_allgather_on_v4p():
    """Sharding, Question 3: AllGather_X([B_X]) with B=128 bf16 on a v4p 4x4x4: 256 bytes, 2 hops → ≈ 2 µs."""
    text = _gather_hlo(64, "[16,4]<=[64]", (32,), (128,), 0)
    ag = _only_collective(predict_module(rl.hlo.parse(text), rl.chip("tpu-v4"), topology="4x4x4"))
    assert ag.hops == 2  # an axis of 4 with its wraparound: ⌈3/2⌉ hops
    assert ag.t_pred_s == pytest.approx(2 * US) and ag.bound == "latency"
    assert any("max(hops × T_min, T_bw)" in line for line in ag.explanation)


@pytest.mark.parametrize("e, f, want_us, bound", [(2048, 8192, 560, "communication"), (256, 256, 3, "latency")])
def test_book_pop_quiz_2_allgather_on_v5e_8x4(e, f, want_us, bound):
    """Sharding, Pop Quiz 2: AllGather_Y([E_Y, F]) on a v5e with mesh X=8, Y=4 (32 chips, the 4x8 slice).

    v5e axes shorter than 16 have no wraparound, so the 4-chip axis is a line: 3 hops. E=2048, F=8192:
    3 × 8.4 MB / 4.5e10 = 560 µs (the profile shows 680 µs). E=F=256: each shard is 32 kB, 0.7 µs of
    bandwidth per hop, so the 3 hops cost ≈ 3 µs: latency-bound (v5e is below ~45 kB per hop).
    """
    text = _gather_hlo(32, "[8,4]<=[32]", (e // 4, f), (e, f), 0)
    ag = _only_collective(predict_module(rl.hlo.parse(text), rl.chip("tpu-v5e")))
    assert ag.hops == 3
    assert ag.t_pred_s / US == pytest.approx(want_us, rel=0.01)
    assert ag.bound == bound


def test_v5e_latency_bound_below_45_kB_per_hop():
    """The book's v5e threshold: a hop of 4.5e10 B/s × 1 µs = 45 kB. Below it latency decides, above it bandwidth."""
    v5e = rl.chip("tpu-v5e")
    line = place_group(v5e, 4, (4, 8))  # a line of 4: each hop carries one shard
    below = collective_cost(v5e, "all-gather", 4, 40e3, 4 * 40e3, line)
    above = collective_cost(v5e, "all-gather", 4, 50e3, 4 * 50e3, line)
    assert below.latency_bound and below.t_comm_s == pytest.approx(3 * US)
    assert not above.latency_bound and above.t_comm_s == pytest.approx(3 * 50e3 / 4.5e10)


def test_point_to_point_adds_latency_and_bandwidth():
    """How to Think About TPUs, Question 5's rule: a transfer's first byte arrives after its hops, then streams."""
    v5e = rl.chip("tpu-v5e")
    cp = collective_cost(v5e, "collective-permute", 8, 1.7e7, 1.7e7)
    assert cp.combine == "sum" and cp.t_comm_s == pytest.approx(1 * US + 1.7e7 / 4.5e10)


# -- through rl.predict: a tiny all-reduce on a slice, on NVLink, on Infinity Fabric -------------------------

def _psum(mesh):
    return jax.shard_map(lambda a: jax.lax.psum(a, "x"), mesh=mesh, in_specs=P("x"), out_specs=P())


def test_tiny_allreduce_costs_at_least_one_hop_on_tpu_and_nccls_latency_on_gpu():
    """A 128-byte all-reduce over 8 devices: bandwidth says nanoseconds; latency says microseconds.

    v5e (the 2x4 slice): reduce-scatter then all-gather, (3 + 1) hops each, 1 µs per hop → 8 µs.
    H100 (NCCL ring, LL): 6.6 µs + 2·7 steps × 0.6 µs = 15 µs, inside the 12–17 µs measured on 8-GPU nodes.
    MI300X (RCCL ring, LL): 12 µs + 14 × 0.8 µs = 23.2 µs.
    """
    mesh = make_mesh("x=8")
    arg = S((8 * 32,), jnp.float32, sharding=NamedSharding(mesh, P("x")))
    want = {"tpu-v5e": (8 * US, 8), "h100-sxm": (15 * US, 14), "mi300x": (23.2 * US, 14)}
    for chip, (t, hops) in want.items():
        ar = _only_collective(rl.predict(_psum(mesh), arg, chip=chip, mesh=mesh))
        assert ar.t_pred_s >= rl.chip(chip).value("interconnect.ici_hop_latency_s", 0.0)
        assert ar.t_pred_s == pytest.approx(t, rel=1e-3), chip
        assert ar.bound == "latency" and ar.hops == hops
        assert ar.t_latency_s == pytest.approx(t, rel=1e-3)


def test_infinity_fabric_bandwidth_grows_with_the_group():
    """A fully connected MI300X board: a GPU reaches k others over k links (64 GB/s each way per link)."""
    mi = rl.chip("mi300x")
    mb = 1 << 26
    two = collective_cost(mi, "all-gather", 2, mb, 2 * mb)
    eight = collective_cost(mi, "all-gather", 8, mb, 8 * mb)
    assert two.link_bytes_per_s == 64e9 and eight.link_bytes_per_s == 7 * 64e9
    assert two.link == eight.link == "Infinity Fabric"
    assert eight.t_bandwidth_s == pytest.approx(7 * mb / (7 * 64e9))  # Simple protocol at this size


def test_gpu_kernel_launch_floor_and_none_on_tpu():
    """A tiny elementwise op: XLA's 1 µs launch figure on GPUs; TPUs publish none, so none is added."""
    x = S((16,), jnp.float32)
    gpu = rl.predict(lambda a: a * 2 + 1, x, chip="h100-sxm")
    tpu = rl.predict(lambda a: a * 2 + 1, x, chip="tpu-v5e")
    (g,), (t,) = gpu.ops, tpu.ops
    assert g.t_pred_s == pytest.approx(1e-6) and g.bound == "overhead"
    assert t.t_pred_s < 1e-8 and t.bound == "memory"
    assert any("no per-op launch cost is published for TPUs" in a for a in tpu.assumptions)
    assert any("kernel launch: a non-collective op takes at least 1 µs" in a for a in gpu.assumptions)
