"""Real HLO from JAX on CPU (1 and 8 devices) and from TPU/GPU fixtures parses with no
warnings, and agrees instruction by instruction with XLA's own parser."""

import gzip
import json
import re

import pytest

import rooflens as rl
from rooflens.hlo import HloParseError, parse_shape
from tests.conftest import FIXTURES, fixture_hlo_files, fixture_path

_XLA_LINE = re.compile(r"^\s*(?:ROOT\s+)?%?(\S+)\s*=\s*(.*?)\s([a-z][a-z0-9\-_]*)\(")


def _xla_view(text: str) -> dict[str, dict[str, tuple]]:
    """Per computation: instruction name → (opcode, operand names, printed shape), as XLA's
    C++ parser (in jaxlib) understands the same text."""
    from jax._src.lib import hlo as xla_hlo

    module = xla_hlo.hlo_module_from_text(text)
    out = {}
    for comp in module.computations():
        rows = {}
        for ins in comp.instructions():
            printed = ins.to_string()
            m = _XLA_LINE.match(printed)
            assert m, printed
            rows[ins.name] = (m.group(3), tuple(o.name for o in ins.operands()), m.group(2))
        out[comp.name] = rows
    return out


def check_against_xla(text: str) -> int:
    """Round trip: each instruction's opcode, operands and shape agree with XLA's parse."""
    ours = rl.hlo.parse(text)
    theirs = _xla_view(text)
    n = 0
    for comp_name, rows in theirs.items():
        comp = ours.computation(comp_name)
        assert comp is not None, comp_name
        # an operand ``%call.8#0`` (jaxlib 0.11's shorthand for an element of a tuple result): XLA's parser makes it
        # a get-tuple-element instruction of its own, ``call.8_0``; ours keeps it as the operand (call.8, index 0)
        implied = {f"{o.name}_{o.index}" for i in comp.instructions for o in i.operands if o.index is not None}
        assert all(rows[n][0] == "get-tuple-element" for n in implied), comp_name
        assert sorted(i.name for i in comp.instructions) == sorted(set(rows) - implied), comp_name
        for ins in comp.instructions:
            opcode, operand_names, shape_text = rows[ins.name]
            # an async wrapper is printed by what it wraps (fusion-start) and is an async-start: one side may say either
            a, b = sorted((ins.opcode, opcode))
            sugar = a.startswith("async-") and b.endswith(a.removeprefix("async"))
            assert ins.opcode == opcode or sugar, (ins.name, ins.opcode, opcode)
            assert tuple(o.name if o.index is None else f"{o.name}_{o.index}" for o in ins.operands) == \
                operand_names, ins.name
            xs = parse_shape(shape_text)
            assert (xs.dtype, xs.dims) == (ins.shape.dtype, ins.shape.dims), ins.name
            assert [(s.dtype, s.dims) for s in xs.leaves()] == [(s.dtype, s.dims) for s in ins.shape.leaves()]
            n += 1
    return n


def test_real_jax_modules_parse_without_warnings(hlo_corpus):
    assert len(hlo_corpus) >= 20
    for name, text in hlo_corpus.items():
        m = rl.hlo.parse(text)
        assert m.warnings == [], (name, [str(w) for w in m.warnings])
        assert m.entry is not None and m.entry.root is not None


def test_real_modules_hold_every_collective_kind(hlo_corpus):
    kinds = set()
    for text in hlo_corpus.values():
        kinds |= {i.collective_kind for i in rl.hlo.parse(text).instructions() if i.collective_kind}
    assert {"all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute"} <= kinds


def test_round_trip_against_xla_parser_on_real_jax(hlo_corpus):
    total = sum(check_against_xla(text) for text in hlo_corpus.values())
    assert total > 3000


@pytest.mark.parametrize("path", fixture_hlo_files(), ids=lambda p: p.name[:60])
def test_every_fixture_hlo_parses_and_round_trips(path):
    text = path.read_text()
    m = rl.hlo.parse(text)
    assert m.warnings == [], [str(w) for w in m.warnings]
    if _NEWER_SYNTAX.search(text) and not _jaxlib_at_least(0, 11):
        # printed by jaxlib 0.11 (operands written fusion#1), which this jaxlib's own parser cannot read: every
        # instruction line is one instruction, and every operand one the module defines
        lines = [ln for ln in text.splitlines() if re.match(r"\s*(?:ROOT\s+)?%?[\w.-]+ = ", ln)]
        assert len(m.instructions()) == len(lines)
        names = {i.name for i in m.instructions()}
        assert all(o.name in names for i in m.instructions() for o in i.operands)
        return
    assert check_against_xla(text) == len(m.instructions())


_NEWER_SYNTAX = re.compile(r"[(,] ?%?[\w.-]+#\d+[,)]")


def _jaxlib_at_least(major: int, minor: int) -> bool:
    import jaxlib

    return tuple(int(p) for p in jaxlib.__version__.split(".")[:2]) >= (major, minor)


def test_fixture_dirs_hold_the_hlo_files():
    assert FIXTURES.is_dir(), f"test fixtures not present at {FIXTURES}"
    assert len(fixture_hlo_files()) >= 10


def test_buffer_assignment_dump_is_not_hlo():
    path = fixture_path("tpu", "hlo", "tpu_megacore_xla_dump", "module_0002.jit_f.after_optimizations-buffer-assignment.txt")
    with pytest.raises(HloParseError) as e:
        rl.hlo.parse(path.read_text())
    assert (e.value.line, e.value.column) == (1, 1)


def test_tpu_fixture_details():
    m = rl.hlo.parse(fixture_path("tpu", "hlo", "v6e_from_xplane",
                                  "jit__psum_9646411105960254074_.after_optimizations.DERIVED.hlo.txt").read_text())
    ar = m.find("all-reduce")
    assert ar.replica_groups == (tuple(range(8)),)  # replica_groups={} over the 8 devices of its sharding
    assert ar.backend_config_json()["collective_algorithm_config"]["strategy"] == "UniDirection1DRingStrategy"
    assert m.find("param").sharding.data_tile_dims() == (2, 1, 1, 1, 1)
    assert m.true_shape("param").true_dims == (2, 5, 1024, 1024, 256)
    frames = m.source_stack(ar)
    assert frames[0].line == 38 and frames[0].function == "main"
    assert [f.function for f in frames] == [
        "main", "_run_main", "run", "<module>", "_run_code_in_main", "run_filename_as_main"]

    f = rl.hlo.parse(fixture_path("tpu", "hlo", "v6e_from_xplane",
                                  "jit_f_12190760917235803885_.after_optimizations.DERIVED.hlo.txt").read_text())
    cs = f.find("copy-start")
    assert [s.memory_space for s in cs.shape.leaves()] == [0, 5, 2]
    assert f.find("broadcast_add_fusion.2").category == "fusion"
    assert m.attrs["is_scheduled"] is True


def test_gpu_fixture_custom_calls():
    gemm = rl.hlo.parse(fixture_path("gpu_amd", "hlo", "mi300x_jax08_gemm.jit_dot_79.after_optimizations.DERIVED.hlo.txt").read_text())
    cc = gemm.find("custom-call.1")
    assert cc.custom_call_target == "__cublas$gemm" and cc.category == "matmul"
    assert cc.backend_config_json()["gemm_backend_config"]["dot_dimension_numbers"]["lhs_contracting_dimensions"] == ["1"]
    conv = rl.hlo.parse(fixture_path(
        "gpu_amd", "hlo", "mi300x_jax_conv_minimal_legacy.jit_forward_3d_conv_15.after_optimizations.DERIVED.hlo.txt"
    ).read_text())
    c = conv.find("cudnn-conv.1.0")
    assert c.category == "convolution"
    assert c.attrs["window"] == {"size": (1, 2, 2), "stride": (1, 2, 2), "pad": ((1, 1), (1, 1), (1, 1))}
    assert c.attrs["dim_labels"] == ("bf012", "oi012", "bf012")
    assert conv.find("input_transpose_fusion").category == "copy/transpose"


def test_tpu_trace_long_names_parse_as_instructions():
    """The vLLM TPU trace carries the full HLO text of every op; each is one instruction."""
    data = json.loads(gzip.decompress(fixture_path("tpu", "vllm_tpu_qwen3_2026_01_11_21_26_41.trace.json.gz").read_bytes()))
    events = data["traceEvents"] if isinstance(data, dict) else data
    texts = {e["args"]["long_name"]: e["name"] for e in events if "long_name" in (e.get("args") or {})}
    assert len(texts) > 3000
    cats = set()
    for text, name in texts.items():
        ins = rl.hlo.parse_instruction(text)
        assert ins.name == name.lstrip("%")
        cats.add(ins.opcode)
        for s in ins.shape.leaves():
            assert s.padded_bytes >= s.bytes
    assert {"fusion", "copy-start", "all-reduce", "all-gather", "async-start", "custom-call"} <= cats


def test_unknown_syntax_is_kept_and_reported():
    text = """HloModule m, new_header_thing=42

ENTRY e {
  p = f32[8]{0} parameter(0)
  q = f32[8]{0} frobnicate(p), brand_new_attr={1,2}, replica_groups=quantum{0}
  r = f32[8]{0} add(p, q), metadata={op_name="a/b" source_line=3}
  this line is junk
  ROOT t = (f32[8]{0}) tuple(r)
}
"""
    m = rl.hlo.parse(text)
    kinds = sorted(w.kind for w in m.warnings)
    assert kinds == ["bad-attribute", "unknown-attribute", "unknown-header-attribute", "unknown-opcode",
                     "unparsed-line"]
    q = m.find("q")
    assert q.opcode == "frobnicate" and q.category == "unknown"
    assert q.unparsed == {"replica_groups": "quantum{0}"} and q.raw_attrs["brand_new_attr"] == "{1,2}"
    assert m.find("r").metadata == {"op_name": "a/b", "source_line": 3}
    assert [w.line for w in m.warnings if w.kind == "unparsed-line"] == [7]


@pytest.mark.parametrize("text,line,col", [
    ("hello world", 1, 1),
    ("\n\n  {\"traceEvents\": []}", 3, 3),
    ("HloModule m\n", 2, 1),
    ("", 1, 1),
])
def test_not_hlo_raises_with_line_and_column(text, line, col):
    with pytest.raises(HloParseError) as e:
        rl.hlo.parse(text)
    assert (e.value.line, e.value.column) == (line, col)


def test_bytes_input_and_binary():
    assert rl.hlo.parse(b"HloModule m\nENTRY e {\n ROOT p = f32[] parameter(0)\n}\n").entry.name == "e"
    with pytest.raises(HloParseError):
        rl.hlo.parse(b"\xff\xfe\x00garbage")


def test_a_missing_closing_brace_is_recovered():
    text = """HloModule m
ENTRY e {
  p = f32[2]{0} parameter(0)
  ROOT q = f32[2]{0} negate(p)
other {
  a = f32[] parameter(0)
  ROOT b = f32[] negate(a)
}
"""
    m = rl.hlo.parse(text)
    assert m.entry.name == "e" and m.entry.root.name == "q" and m.computation("other") is not None
    assert [w.kind for w in m.warnings] == ["unclosed-computation"]
