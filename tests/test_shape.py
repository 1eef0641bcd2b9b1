"""Shapes, layouts, tiling and padding."""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

import rooflens as rl
from rooflens.hlo import HloParseError, parse_shape
from rooflens.hlo.shape import ELEMENT_BITS
from tests.conftest import fixture_path


def test_seed_padding_example_bf16_3x5_tiled():
    # Scaling book: bf16[3,5] with T(8,128)(2,1) is padded to 8×128 bf16 = 2 KiB for 30 bytes of data.
    s = parse_shape("bf16[3,5]{1,0:T(8,128)(2,1)}")
    assert (s.dtype, s.dims, s.bytes, s.padded_bytes) == ("bf16", (3, 5), 30, 2048)
    assert s.layout.tiles == ((8, 128), (2, 1))
    assert s.padded_physical_dims() == (8, 128)


def test_seed_simple_tiling_f32_3x5_t2x2():
    s = parse_shape("f32[3,5]{1,0:T(2,2)}")
    assert s.padded_bytes == 4 * 6 * 4  # 3→4, 5→6
    assert s.layout.minor_to_major == (1, 0) and s.layout.major_to_minor == (0, 1)


def test_seed_fusion3_shape_and_vmem():
    s = parse_shape("bf16[32,32,4096]{2,1,0:T(8,128)(2,1)S(1)}")
    assert s.memory_space == 1
    assert s.bytes == 2 * 32 * 32 * 4096 == s.padded_bytes  # already multiples of the tiles


def test_rank1_tpu_tiling_and_scalar_tiles():
    assert parse_shape("bf16[4096]{0:T(1024)(128)(2,1)}").padded_bytes == 8192
    assert parse_shape("bf16[1000]{0:T(1024)(128)(2,1)}").padded_bytes == 2048
    assert parse_shape("f32[]{:T(128)}").padded_bytes == 512
    assert parse_shape("u32[]{:S(2)}").memory_space == 2


def test_padded_bytes_match_a_real_tpu_buffer_assignment():
    # XLA's own buffer assignment on a TPU: s32[9]{0:T(128)} and f32[9]{0:T(128)} get 512 bytes
    # while their live size is 36 bytes.
    text = fixture_path("tpu", "hlo", "tpu_megacore_xla_dump",
                        "module_0002.jit_f.after_optimizations-buffer-assignment.txt").read_text()
    allocs = re.findall(r"allocation \d+: size (\d+),.*?\n value: <\d+ \S+ @0> \(size=\d+,offset=0\): (\S+)", text)
    assert len(allocs) == 2
    for size, shape in allocs:
        s = parse_shape(shape)
        assert s.padded_bytes == int(size) == 512
        assert s.bytes == 36
    assert re.findall(r"(\w[\w.]*): (\d+) bytes", text.split("Live ranges at")[1]) == [
        ("Arg_0.1", "36"), ("fusion", "36")]


def _bits_by_definition(hlo_type: str) -> int:
    """An HLO element type's width from the NumPy / ml_dtypes type of the same name (s4 → ml_dtypes.int4,
    f8e4m3fn → float8_e4m3fn, bf16 → bfloat16, c64 → complex64): the dtype's own definition, not rooflens's table."""
    import ml_dtypes
    import numpy as np

    if hlo_type == "pred":
        return np.dtype(np.bool_).itemsize * 8
    m = re.fullmatch(r"(bf|s|u|f|c)(\d+)(e\d+m\d+\w*)?", hlo_type)
    assert m, hlo_type
    kind, width, fmt = m.groups()
    if fmt:  # a narrow float: float8_e4m3fn, float6_e2m3fn, float4_e2m1fn, …
        return ml_dtypes.finfo(getattr(ml_dtypes, f"float{width}_{fmt}")).bits
    name = {"bf": "bfloat", "s": "int", "u": "uint", "f": "float", "c": "complex"}[kind] + width
    if hasattr(ml_dtypes, name):  # bfloat16 and the sub-byte integers int1…uint4
        t = getattr(ml_dtypes, name)
        return ml_dtypes.iinfo(t).bits if kind in "su" else ml_dtypes.finfo(t).bits
    return np.dtype(name).itemsize * 8


@pytest.mark.parametrize("dtype", sorted(t for t in ELEMENT_BITS if t not in ("token", "opaque")))
def test_every_element_type(dtype):
    s = parse_shape(f"{dtype}[16,3]{{1,0}}")
    bits = _bits_by_definition(dtype)
    assert s.dtype == dtype and s.num_elements == 48
    assert s.bytes == (48 * bits + 7) // 8


def test_sub_byte_types_packed_only_with_element_size():
    assert parse_shape("s4[1024]{0}").bytes == 512
    assert parse_shape("s4[1024]{0}").padded_bytes == 1024  # one byte each, as XLA stores it
    assert parse_shape("s4[1024]{0:E(4)}").padded_bytes == 512
    assert parse_shape("f4e2m1fn[64]{0:E(4)}").padded_bytes == 32
    assert parse_shape("pred[10]").bytes == 10


def test_tuples_tokens_and_dynamic_dims():
    s = parse_shape("(f32[4,32]{1,0}, (s32[], bf16[2]{0}), token[])")
    assert s.is_tuple and len(s.tuple_shapes) == 3
    assert [x.dtype for x in s.leaves()] == ["f32", "s32", "bf16", "token"]
    assert s.bytes == 4 * 4 * 32 + 4 + 4
    d = parse_shape("s32[<=8,4]{1,0}")
    assert d.dims == (8, 4) and d.dynamic == (True, False) and d.dims_str() == "s32[<=8,4]"
    u = parse_shape("f32[?,4]")
    assert u.dims[0] == -1 and u.num_elements == 0
    assert parse_shape("()").is_tuple and parse_shape("()").bytes == 0


def test_unrecognised_layout_fields_are_kept():
    s = parse_shape("f32[8,8]{1,0:T(8,128)L(2)SC(0:16)}")
    assert s.layout.tail_padding_alignment == 2
    assert s.layout.extra == ("SC(0:16)",)


@pytest.mark.parametrize("bad", ["f33[2]", "bf16[3,5]{1,0", "bf16[3,5]{2,1,0}", "f32[a]", "f32[2] x", "", "(f32[2]"])
def test_malformed_shapes_raise(bad):
    with pytest.raises(HloParseError):
        parse_shape(bad)


def test_public_name():
    assert rl.hlo.parse_shape("f32[2]{0}").bytes == 8


@given(
    dims=st.lists(st.integers(1, 300), min_size=1, max_size=4),
    tile=st.lists(st.sampled_from([1, 2, 4, 8, 128]), min_size=1, max_size=2),
    dtype=st.sampled_from(["f32", "bf16", "s8", "f64"]),
)
def test_padding_never_shrinks_and_is_exact_without_padding(dims, tile, dtype):
    m2m = ",".join(str(i) for i in reversed(range(len(dims))))
    t = ",".join(map(str, tile))
    s = parse_shape(f"{dtype}[{','.join(map(str, dims))}]{{{m2m}:T({t})}}")
    assert s.padded_bytes >= s.bytes
    covered = dims[-len(tile):] if len(tile) <= len(dims) else dims
    if all(d % x == 0 for d, x in zip(covered[::-1], tile[::-1])) and len(tile) <= len(dims):
        assert s.padded_bytes == s.bytes
