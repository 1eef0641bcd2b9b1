"""Graph queries: operands/users, fusion bodies, called computations, schedule, collectives,
true (unsharded) shapes, named scopes and explanations."""

import pytest

import rooflens as rl
from rooflens.hlo.explain import explain, summarize

SEED_PROBLEM = """HloModule seed_problem, num_partitions=128

%fused_computation.1 (param_0: bf16[4096,8192], param_1: bf16[8192]) -> bf16[4096] {
  %param_0 = bf16[4096,8192]{1,0:T(8,128)(2,1)} parameter(0)
  %param_1 = bf16[8192]{0:T(1024)(128)(2,1)} parameter(1)
  ROOT %dot.1 = bf16[4096]{0:T(1024)(128)(2,1)} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%add (a: bf16[], b: bf16[]) -> bf16[] {
  %a = bf16[] parameter(0)
  %b = bf16[] parameter(1)
  ROOT %c = bf16[] add(%a, %b)
}

ENTRY %main (param.1: bf16[4096,8192], param.2: bf16[8,8192]) -> bf16[4096] {
  %param.1 = bf16[4096,8192]{1,0:T(8,128)(2,1)} parameter(0)
  %param.2 = bf16[8,8192]{1,0:T(8,128)(2,1)} parameter(1)
  %zero = bf16[] constant(0)
  %reduce.6 = bf16[8192]{0:T(1024)(128)(2,1)} reduce(%param.2, %zero), dimensions={0}, to_apply=%add
  %fusion.1 = bf16[4096]{0:T(1024)(128)(2,1)} fusion(bf16[4096,8192]{1,0:T(8,128)(2,1)} %param.1, bf16[8192]{0:T(1024)(128)(2,1)} %reduce.6), kind=kLoop, calls=%fused_computation.1
  ROOT %all-reduce.1 = bf16[4096]{0:T(1024)(128)(2,1)} all-reduce(%fusion.1), channel_id=1, replica_groups=SEED_GROUPS, use_global_device_ids=true, to_apply=%add
}
"""


@pytest.fixture(scope="module")
def seed_module():
    groups = "{" + ",".join("{" + ",".join(str(g + 16 * i) for i in range(8)) + "}" for g in range(16)) + "}"
    return rl.hlo.parse(SEED_PROBLEM.replace("SEED_GROUPS", groups))


def test_seed_worked_problem_parallelism_and_true_shapes(seed_module):
    m = seed_module
    assert m.warnings == []
    info = m.collective("all-reduce.1")
    assert (info.group_size, info.num_groups, info.stride, info.parallelism) == (8, 16, 16, 8)
    assert "8-way parallelism" in info.describe() and "stride 16" in info.describe()
    fusion = m.find("fusion.1")
    assert fusion.category == "matmul"
    true = {t.name: t for t in m.implied_true_shapes(fusion)}
    # the contracted 8192 dimension is what the 8 devices split: true operands are 8× larger there
    assert true["param.1"].true_dims == (4096, 65536) and true["param.1"].sharded_dims == (1,)
    assert true["reduce.6"].true_dims == (65536,)
    assert all(t.degree == 8 for t in true.values())
    e = explain(m, "fusion.1")
    assert any("65536" in line for line in e.sharding)
    assert "dot.1 inside: contracted size K = 8,192; output bf16[4096] (4,096 elements, each a K-long dot product)" \
        in e.details
    assert any("T(1024,)" in line or "T(1024)" in line for line in e.layout)


def test_operands_users_and_fusion_body(seed_module):
    m = seed_module
    fusion = m.find("fusion.1")
    assert [i.name for i in m.operands_of(fusion)] == ["param.1", "reduce.6"]
    assert [o.shape.dims for o in fusion.operands] == [(4096, 8192), (8192,)]
    assert [u.name for u in m.users("reduce.6")] == ["fusion.1"]
    assert [i.opcode for i in m.fusion_body(fusion)] == ["parameter", "parameter", "dot"]
    assert m.computation("fused_computation.1").kind == "fusion"
    assert m.computation("add").kind == "applied"
    assert [i.name for i in m.schedule()][-1] == "all-reduce.1" and m.entry.root.name == "all-reduce.1"


def test_while_and_conditional_called_computations(hlo_corpus):
    m = rl.hlo.parse(hlo_corpus["while_cond.compiled"])
    w = next(i for i in m.instructions() if i.opcode == "while")
    kinds = {c.kind for c in m.called(w)}
    assert kinds == {"while body", "while condition"}
    assert explain(m, w.name).details[-1] == "known trip count: 3"
    cond = next(i for i in m.instructions() if i.opcode == "conditional")
    assert [c.kind for c in m.called(cond)] == ["branch", "branch"]
    body = next(c for c in m.called(w) if c.kind == "while body")
    assert any(i.category == "matmul" for i in body.instructions)


def test_transformer_collectives_shardings_and_scopes(hlo_corpus):
    m = rl.hlo.parse(hlo_corpus["transformer_4x2.compiled"])
    assert m.num_devices == 8 and m.num_partitions == 8
    infos = [m.collective(i) for i in m.top_level_instructions() if i.collective_kind]
    assert infos and {(x.group_size, x.stride) for x in infos} <= {(2, 1), (4, 2)}
    # parameters carry shardings: w_up [128,512] split on 'model' is [128,256] per device
    params = [i for i in m.entry.instructions if i.opcode == "parameter" and i.sharding is not None]
    shapes = {(i.shape.dims, m.true_shape(i).true_dims) for i in params if m.true_shape(i)}
    assert ((128, 256), (128, 512)) in shapes
    assert ((256, 128), (512, 128)) in shapes
    scopes = {i.named_scope for i in m.instructions() if i.named_scope}
    assert {"layer_0/attention", "layer_1/ffn", "logits"} <= scopes
    dots = [i for i in m.top_level_instructions() if i.category == "matmul"]
    assert any(f.file.endswith("workloads.py") for d in dots for f in m.source_stack(d))


def test_shard_map_collectives_explained(hlo_corpus):
    m = rl.hlo.parse(hlo_corpus["shard_map_collectives.compiled"])
    by_kind = {i.collective_kind: i for i in m.instructions() if i.collective_kind}
    permute = m.collective(by_kind["collective-permute"])
    assert len(permute.pairs) == 8
    assert permute.describe().endswith("2 ring(s) of 4 devices, each device sends to the next: 0→2→4→6→0, 1→3→5→7→1")
    ag = by_kind["all-gather"]
    true = m.true_shape(by_kind["reduce-scatter"])
    assert true is not None and true.degree == 2 and true.evidence.startswith(ag.name)
    assert m.collective(by_kind["all-to-all"]).group_size == 4
    e = explain(m, ag.name)
    assert e.collective[0].startswith("4 groups of 2 devices")
    assert "devices 0 ↔ 1 exchange data" in e.collective


def test_summary_of_real_modules(hlo_corpus):
    after_spmd = next(v for k, v in hlo_corpus.items() if k.startswith("fsdp_matmul.dump") and "after_spmd" in k)
    s = summarize(rl.hlo.parse(after_spmd))
    assert s.ops_by_category.get("collective", 0) >= 1
    assert [c.kind for c in s.collectives] == ["all-gather"]  # FSDP gathers the weight every step
    assert s.collectives[0].bytes == 64 * 512 * 2 and s.collectives[0].group_size == 4  # a bf16 shard
    # XLA:CPU widens bf16 collectives to f32 after partitioning (DESIGN.md): twice the bytes
    compiled = summarize(rl.hlo.parse(hlo_corpus["fsdp_matmul.compiled"]))
    assert compiled.collectives[0].bytes == 64 * 512 * 4
    t = summarize(rl.hlo.parse(hlo_corpus["transformer_4x2.compiled"]))
    assert t.warnings == [] and t.ops_by_category["matmul"] > 10
    assert t.largest_buffers[0].padded_bytes >= t.largest_buffers[-1].padded_bytes


def test_explain_a_tiled_tpu_shape():
    m = rl.hlo.parse("""HloModule t
ENTRY e {
  %p = bf16[3,5]{1,0:T(8,128)(2,1)S(1)} parameter(0)
  ROOT %c = bf16[3,5]{1,0:T(8,128)(2,1)} copy(%p)
}""")
    e = explain(m, "p")
    assert e.padded_bytes == 2048 and e.bytes == 30
    assert e.layout[0].startswith("{1,0} read right to left: dim 0 is most major, dim 1 most minor")
    assert any("3×5 is padded to 8×128" in line and "98.5% waste" in line for line in e.layout)
    assert any("pairs of 16-bit values" in line for line in e.layout)
    assert e.memory_space.startswith("S(1) = VMEM")
    assert explain(m, "c").category == "copy/transpose"
    with pytest.raises(KeyError):
        explain(m, "nope")


def test_named_scope_extraction():
    f = rl.hlo.named_scope_of
    assert f("jit(train)/jit(main)/layer_0/attention/dot_general") == "layer_0/attention"
    assert f("jit(f)/transpose(jvp(ffn))/dot_general") == "ffn"
    assert f("jit(f)/jit(main)/add") == ""
    assert f("x") == ""
