"""Replica groups in all three printed forms, checked against what real collectives do."""

import numpy as np
import pytest

import rooflens as rl
from rooflens.hlo.attrs import AttributeSyntaxError, parse_replica_groups, parse_sharding

SEED_GROUPS = "{" + ",".join("{" + ",".join(str(g + 16 * i) for i in range(8)) + "}" for g in range(16)) + "}"


def test_explicit_seed_groups_imply_8_way_parallelism():
    rg = parse_replica_groups(SEED_GROUPS)
    assert rg.form == "explicit" and len(rg.groups) == 16
    assert rg.groups[0] == (0, 16, 32, 48, 64, 80, 96, 112)


@pytest.mark.parametrize("text,groups", [
    ("[4,2]<=[8]", ((0, 1), (2, 3), (4, 5), (6, 7))),
    ("[2,4]<=[4,2]T(1,0)", ((0, 2, 4, 6), (1, 3, 5, 7))),
    ("[1,8]<=[8]", ((0, 1, 2, 3, 4, 5, 6, 7),)),
    ("[2,4]<=[2,2,2]T(2,1,0)", ((0, 4, 2, 6), (1, 5, 3, 7))),
])
def test_iota_form(text, groups):
    rg = parse_replica_groups(text)
    assert rg.form == "iota" and rg.groups == groups


@pytest.mark.parametrize("text,groups", [
    ("mesh['axis_0'=4,'axis_1'=2] {'axis_1'}", ((0, 1), (2, 3), (4, 5), (6, 7))),
    ("mesh['axis_0'=4,'axis_1'=2] {'axis_0'}", ((0, 2, 4, 6), (1, 3, 5, 7))),
    ("mesh['axis_0'=4,'axis_1'=2] {'axis_0','axis_1'}", ((0, 1, 2, 3, 4, 5, 6, 7),)),
    ("mesh['axis_0'=4,'axis_1'=2] {'axis_1','axis_0'}", ((0, 2, 4, 6, 1, 3, 5, 7),)),
    ("mesh['stage'=2,'local'=4] {'local'}", ((0, 1, 2, 3), (4, 5, 6, 7))),
    ("mesh['x'=8] {'x':(1)2}", ((0, 4), (1, 5), (2, 6), (3, 7))),
    ("mesh['x'=8] {'x':(4)2}", ((0, 1), (2, 3), (4, 5), (6, 7))),
    ("mesh['a'=2,'b'=2], device_ids=(3,2,1,0) {'b'}", ((3, 2), (1, 0))),
    ("mesh['axis_0'=1,'axis_1'=8] {'axis_1'}", ((0, 1, 2, 3, 4, 5, 6, 7),)),
])
def test_mesh_form(text, groups):
    rg = parse_replica_groups(text)
    assert rg.form == "mesh" and rg.groups == groups


@pytest.mark.parametrize("bad", [
    "{{0,1},{2,x}}", "[3,3]<=[8]", "mesh['a'=2] {'b'}", "mesh['a'=4] {'a':(3)2}", "[2,4]<=[4,2]T(0,0)",
    "somethingelse", "mesh['a'=2",
])
def test_bad_groups_raise_attribute_errors(bad):
    with pytest.raises(AttributeSyntaxError):
        parse_replica_groups(bad)


def _groups_by_execution(fn_axis: str):
    """Run a real psum over ``fn_axis`` of device ids on a 4×2 mesh; the sum each device
    sees is the sum of its group's ids."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    from rooflens.workloads import make_mesh

    mesh = make_mesh((4, 2))
    f = jax.jit(jax.shard_map(lambda x: jax.lax.psum(x, fn_axis), mesh=mesh,
                              in_specs=P(("data", "model")), out_specs=P(("data", "model"))))
    ids = jnp.array([d.id for d in mesh.devices.flat], jnp.float32)
    sums = np.asarray(f(ids))
    return f.lower(ids).compile().as_text(), {int(d): float(s) for d, s in zip(ids, sums, strict=True)}


@pytest.mark.parametrize("axis", ["data", "model"])
def test_resolved_groups_match_what_the_collective_really_sums(axis):
    text, seen = _groups_by_execution(axis)
    module = rl.hlo.parse(text)
    reductions = [i for i in module.instructions() if i.opcode in ("all-reduce", "all-reduce-start")]
    assert len(reductions) == 1
    groups = reductions[0].replica_groups
    assert groups
    for g in groups:
        for d in g:
            assert seen[d] == sum(g), (axis, g)
    info = module.collective(reductions[0])
    assert info.group_size == (4 if axis == "data" else 2)


def test_real_jax_prints_all_three_forms_and_they_agree(hlo_corpus):
    """Real JAX/XLA output holds explicit (jaxlib 0.10; 0.11 prints none), iota and mesh replica groups; on the 4×2
    mesh every one of them must resolve to the 'model' pairs or the 'data' quartets."""
    forms = set()
    for name, text in hlo_corpus.items():
        m = rl.hlo.parse(text)
        for ins in m.instructions():
            spec = ins.replica_groups_spec
            if spec is None:
                continue
            forms.add(spec.form)
            assert set(ins.replica_groups) in (
                {(0, 1), (2, 3), (4, 5), (6, 7)}, {(0, 2, 4, 6), (1, 3, 5, 7)}), (name, ins.name, spec.text)
    import jax

    new_jax = tuple(int(p) for p in jax.__version__.split(".")[:2]) >= (0, 11)
    assert forms == ({"iota", "mesh"} if new_jax else {"explicit", "iota", "mesh"})


def test_empty_groups_span_every_device_of_the_module():
    # replica_groups={} with global device ids means every device of the module (here: 4
    # partitions from the header); the TPU fixture covers the case with no device count.
    text = """HloModule m, num_partitions=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}

ENTRY e {
  p = f32[8] parameter(0)
  ROOT r = f32[8] all-reduce(p), channel_id=1, replica_groups={}, use_global_device_ids=true, to_apply=add
}
"""
    m = rl.hlo.parse(text)
    assert m.find("r").replica_groups == ((0, 1, 2, 3),)
    assert not m.warnings


def test_shardings():
    s = parse_sharding("{devices=[2,1,1,1,1,4]<=[8] last_tile_dim_replicate}")
    assert s.kind == "tiled" and s.data_tile_dims() == (2, 1, 1, 1, 1) and s.num_devices == 8
    assert s.true_dims((1, 5, 1024, 1024, 256)) == (2, 5, 1024, 1024, 256)
    e = parse_sharding("{devices=[4,2]0,2,4,6,1,3,5,7}")
    assert e.devices == (0, 2, 4, 6, 1, 3, 5, 7) and e.true_dims((16, 32)) == (64, 64)
    t = parse_sharding("{{replicated}, {maximal device=3}, {devices=[2,2]<=[4] last_tile_dims={manual}}}")
    assert [x.kind for x in t.elements] == ["replicated", "maximal", "tiled"]
    assert t.elements[1].device == 3 and t.elements[2].subgroup_types == ("manual",)
    assert t.elements[2].data_tile_dims() == (2,)
    with pytest.raises(AttributeSyntaxError):
        parse_sharding("{devices=[2,2]0,1,2}")
