"""Fuzzed input: mutated real HLO and random bytes give a Module or HloParseError, nothing else."""

import contextlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rooflens as rl
from rooflens.cli.common import example_hlo_path
from rooflens.hlo import HloParseError

_REAL = example_hlo_path().read_text()
_CHIP = rl.chip("tpu-v5e")
# a slice of real HLO small enough to mutate quickly: the header, some computations and ENTRY
_LINES = _REAL.splitlines()
_SEED = "\n".join(_LINES[:400] + _LINES[-60:])
_PUNCT = list("{}()[],=%:'\"<>/*\\ \n") + ["ROOT ", "ENTRY ", "replica_groups=", "mesh[", "T(8,128)", "->", "<="]


def _parse_ok(text) -> None:
    try:
        m = rl.hlo.parse(text)
    except HloParseError as e:
        assert e.line >= 1 and e.column >= 1
        return
    assert m.entry is not None
    for ins in m.instructions():  # every query must also survive the damage
        assert isinstance(ins.category, str) and isinstance(ins.named_scope, str)
        m.collective(ins), m.true_shape(ins), m.implied_true_shapes(ins)
        assert ins.shape.padded_bytes >= 0
    # and the cost model prices whatever the reader kept, fused as written or grouped as XLA would
    for emulate in (False, True):
        pred = rl.cost.predict_module(m, _CHIP, emulate_fusion=emulate)
        assert pred.time_s >= 0 and all(o.t_pred_s >= 0 for o in pred.ops)


@st.composite
def mutated(draw):
    text = _SEED
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(["delete", "insert", "replace", "truncate", "swap_lines", "dup"]))
        i = draw(st.integers(0, len(text)))
        if op == "delete":
            text = text[:i] + text[i + draw(st.integers(1, 40)):]
        elif op == "insert":
            text = text[:i] + draw(st.sampled_from(_PUNCT)) + text[i:]
        elif op == "replace":
            text = text[:i] + draw(st.text(max_size=6)) + text[i + 3:]
        elif op == "truncate":
            text = text[:i]
        elif op == "swap_lines":
            lines = text.split("\n")
            a, b = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
            lines[a], lines[b] = lines[b], lines[a]
            text = "\n".join(lines)
        else:
            text = text[:i] + text[max(0, i - 200):i] + text[i:]
    return text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_real_hlo(text):
    _parse_ok(text)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000))
def test_random_bytes(data):
    _parse_ok(data)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PUNCT + list("abcdefsu0123456789[] .-")), max_size=200).map("".join))
def test_random_hlo_like_text(text):
    _parse_ok("HloModule fuzz\n" + text)
    _parse_ok(text)


def test_single_lines_and_shapes_never_crash_on_garbage():
    for junk in ["%a = f32[ add(", "x = (f32[2] y(z)", "a = f32[2]{0:T(} b()", "ROOT = f32[] c()",
                 "%p = f32[2]{0} parameter(x)", "%q = f32[2]{0} add(%a, ), foo", "a = f32[2] add(a), =b"]:
        with contextlib.suppress(HloParseError):
            rl.hlo.parse_instruction(junk)
    for junk in ["f32[", "f32[2,", "bf16[3,5]{1,0:T(8,128)(2,1", "(f32[2], s32[]", "f32[2]{0:T(}", "f32[-1]",
                 "f32[2]{0:S(}", "q77[2]", "f32[<=]", "f32[2]{1,0}", "((", "token[", "f32[2]{0:E(x)}", ""]:
        try:
            s = rl.hlo.parse_shape(junk)
        except HloParseError:
            continue
        assert s.dtype and s.bytes >= 0, junk  # what is read is a shape with a size


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(list("fbsu0123456789[](){},:<=?TSE.x") + ["f32", "bf16", "s4"]), max_size=40)
       .map("".join))
def test_random_shape_like_text(text):
    """parse_shape reads a shape or raises HloParseError: nothing else escapes."""
    try:
        s = rl.hlo.parse_shape(text)
    except HloParseError:
        return
    assert s.bytes >= 0 and s.padded_bytes >= 0
