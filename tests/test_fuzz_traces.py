"""Fuzzed traces: mutated real XSpace and Chrome JSON profiles (flipped, inserted and dropped bytes,
truncation, fields of the wrong type) give a Profile or a RooflensError, nothing else."""

from __future__ import annotations

import gzip
import itertools
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rooflens.errors import RooflensError
from rooflens.trace import load, op_stats
from rooflens.trace.profile import Profile
from tests.conftest import fixture_path

_XPLANE = ("gpu_amd", "tracelens_mi300x_jax08_gemm.xplane.pb")
_CHROME = ("gpu_amd", "tracelens_mi300x_jax08_gemm.DERIVED.trace.json.gz")
_COUNTER = itertools.count()
_SETTINGS = settings(max_examples=int(os.environ.get("ROOFLENS_FUZZ_EXAMPLES", "20")), deadline=None,
                     derandomize=not os.environ.get("ROOFLENS_FUZZ_EXAMPLES"),
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
_ODD_VALUES = ["abc", "", None, True, -1, 2**70, 1e308, -1e308, 1e20, [], {}, [1, [2]], {"a": {"b": 1}}, "\x1b[31m", "zz"]


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setenv("ROOFLENS_NO_CACHE", "1")  # every example read afresh, nothing written beside it


def _load_ok(path) -> None:
    try:
        prof = load(path)
    except RooflensError as e:
        text = str(e)
        assert text and "\n" not in text.strip(), text
        return
    assert isinstance(prof, Profile)
    stats = op_stats(prof)  # what was read must also be usable
    assert all(s.occurrences >= 1 for s in stats.op_stats)


@st.composite
def _byte_edits(draw, size: int):
    edits = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["flip", "insert", "delete", "ff", "truncate"]))
        pos = draw(st.integers(0, size - 1))
        edits.append((kind, pos, draw(st.binary(min_size=1, max_size=12))))
    return edits


def _apply(data: bytes, edits) -> bytes:
    b = bytearray(data)
    for kind, pos, blob in edits:
        pos = min(pos, max(len(b) - 1, 0))
        if kind == "flip" and b:
            b[pos] ^= blob[0] or 0xFF
        elif kind == "insert":
            b[pos:pos] = blob
        elif kind == "delete":
            del b[pos:pos + len(blob)]
        elif kind == "ff":  # a varint that never ends, or a length prefix far past the end
            b[pos:pos + len(blob)] = b"\xff" * len(blob)
        elif kind == "truncate":
            del b[pos:]
    return bytes(b)


@given(data=st.data())
@_SETTINGS
def test_mutated_xspace_is_a_profile_or_one_sentence(tmp_path, data):
    seed = fixture_path(*_XPLANE).read_bytes()
    damaged = _apply(seed, data.draw(_byte_edits(len(seed))))
    p = tmp_path / f"h{next(_COUNTER)}.xplane.pb"
    p.write_bytes(damaged)
    _load_ok(p)


def _events(doc) -> list:
    return doc["traceEvents"] if isinstance(doc, dict) else doc


@pytest.mark.filterwarnings("error::RuntimeWarning")  # an overflow in a time column is a wrong figure, not a note
@given(data=st.data())
@_SETTINGS
def test_chrome_json_with_wrong_types_is_a_profile_or_one_sentence(tmp_path, data):
    doc = json.loads(gzip.decompress(fixture_path(*_CHROME).read_bytes()))
    events = _events(doc)
    for _ in range(data.draw(st.integers(1, 6))):
        i = data.draw(st.integers(0, len(events) - 1))
        ev = events[i]
        if not isinstance(ev, dict):
            continue
        key = data.draw(st.sampled_from(["ts", "dur", "pid", "tid", "ph", "name", "args", "cat"]))
        value = data.draw(st.sampled_from(_ODD_VALUES))
        if key == "args" and isinstance(ev.get("args"), dict) and data.draw(st.booleans()):
            sub = data.draw(st.sampled_from(["hlo_op", "hlo_module", "device_ordinal", "long_name", "name",
                                             "program_id", "tf_op"]))
            ev["args"][sub] = value
        else:
            ev[key] = value
    if data.draw(st.booleans()):
        events[data.draw(st.integers(0, len(events) - 1))] = data.draw(st.sampled_from(_ODD_VALUES))
    raw = json.dumps(doc).encode()
    if data.draw(st.booleans()):
        raw = _apply(raw, data.draw(_byte_edits(len(raw))))
    p = tmp_path / f"h{next(_COUNTER)}.trace.json.gz"
    p.write_bytes(gzip.compress(raw, compresslevel=1))
    _load_ok(p)


@given(cut=st.floats(0.0, 1.0))
@settings(max_examples=10, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_truncated_gzip_of_a_chrome_trace(tmp_path, cut):
    gz = fixture_path(*_CHROME).read_bytes()
    p = tmp_path / f"t{next(_COUNTER)}.trace.json.gz"
    p.write_bytes(gz[:int(len(gz) * cut)])
    _load_ok(p)


def test_length_prefixes_that_overflow_int64(tmp_path):
    """A length prefix near 2^63 once wrapped the bounds check negative and the compiled walk read
    outside the file (a segmentation fault found by the fuzz test above)."""
    for body in (b"\x0a" + b"\xff" * 8 + b"\x7f" + b"\x00" * 32,  # XSpace.planes, length 2^63 - 1
                 b"\x0a\x20" + b"\x1a" + b"\xfe" * 8 + b"\x7f" + b"\x00" * 22):  # inside a plane: XPlane.lines
        p = tmp_path / f"o{next(_COUNTER)}.xplane.pb"
        p.write_bytes(body)
        with pytest.raises(RooflensError, match="damaged or truncated"):
            load(p)


@pytest.mark.parametrize("field, value", [("ts", 1e308), ("dur", 1e20), ("ts", -1e300)])
def test_chrome_times_beyond_any_trace_are_one_sentence(tmp_path, field, value):
    meta = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/host:CPU"}}]
    ok = {"ph": "X", "pid": 1, "tid": 2, "ts": 1.0, "dur": 2.0, "name": "dot.1",
          "args": {"hlo_op": "dot.1", "hlo_module": "jit_f", "device_ordinal": 0}}
    p = tmp_path / f"c{next(_COUNTER)}.trace.json.gz"
    p.write_bytes(gzip.compress(json.dumps({"traceEvents": meta + [ok, {**ok, field: value}]}).encode()))
    with pytest.raises(RooflensError, match="beyond any trace"):
        load(p)
