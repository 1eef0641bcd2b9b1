"""The `rooflens hlo` command: summaries, explanations, JSON, and one-sentence errors."""

import gzip
import json
import subprocess
import sys

import pytest

from tests.conftest import fixture_path


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "rooflens.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


def test_example_summary_and_op():
    r = run("hlo", "--example")
    assert r.returncode == 0, r.stderr
    assert "Ops by category" in r.stdout and "Collectives" in r.stdout and "No warnings" in r.stdout
    r = run("hlo", "--example", "--json")
    data = json.loads(r.stdout)
    assert data["num_devices"] == 8 and data["warnings"] == []
    assert {c["group_size"] for c in data["collectives"]} == {2, 4}
    assert data["opcodes"]["fusion"] > 0 and data["ops_by_category"]["matmul"] > 0


def test_op_explanation_text_and_json(tmp_path):
    path = fixture_path("tpu", "hlo", "v6e_from_xplane", "jit__psum_9646411105960254074_.after_optimizations.DERIVED.hlo.txt")
    r = run("hlo", str(path), "--op", "all-reduce")
    assert r.returncode == 0, r.stderr
    assert "all 8 devices take part" in r.stdout
    assert "host_offload_stress_test.py:38" in r.stdout
    r = run("hlo", str(path), "--op", "%param", "--json")
    e = json.loads(r.stdout)
    assert e["name"] == "param" and e["padded_bytes"] == e["bytes"] == 4 * 5 * 1024 * 1024 * 256
    assert any("true (unsharded) shape f32[2,5,1024,1024,256]" in s for s in e["sharding"])
    gz = tmp_path / "m.hlo.txt.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert run("hlo", str(gz), "--json").returncode == 0


def _bad(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "bin.pb").write_bytes(fixture_path("tpu", "xprof_tpu_inference_2.v6e-4.xplane.pb").read_bytes())
    (tmp_path / "notes.txt").write_text("these are my notes\nnot HLO\n")
    (tmp_path / "latin1.txt").write_bytes("HloModule caf\xe9".encode("latin-1"))
    return {
        "missing": ([str(tmp_path / "nope.txt")], "does not exist"),
        "directory": ([str(tmp_path)], "is a directory"),
        "empty": ([str(tmp_path / "empty.txt")], "is empty"),
        "binary": ([str(tmp_path / "bin.pb")], "binary file"),
        "not hlo": ([str(tmp_path / "notes.txt")], "is not HLO text: line 1, column 1"),
        "not utf8": ([str(tmp_path / "latin1.txt")], "not UTF-8"),
        "no file": ([], "give one HLO file"),
        "unknown op": (["--example", "--op", "fusion.99999"], "no instruction named"),
    }


@pytest.mark.parametrize("case", ["missing", "directory", "empty", "binary", "not hlo", "not utf8", "no file",
                                  "unknown op"])
def test_bad_input_is_one_sentence_and_nonzero(tmp_path, case):
    args, needle = _bad(tmp_path)[case]
    r = run("hlo", *args)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and r.stdout == ""
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], r.stderr


def test_a_dump_directory_points_at_its_modules():
    d = fixture_path("tpu", "hlo", "tpu_megacore_xla_dump")
    r = run("hlo", str(d))
    assert r.returncode == 2 and "is a directory; give one HLO text file, e.g." in r.stderr
    assert "module_0000.jit_iota.after_optimizations.txt" in r.stderr


def test_corrupt_fixture_is_refused_cleanly():
    r = run("hlo", str(fixture_path("corrupt", "xprof_tpu_inference_2.HEAD_utf8_mangled.xplane.pb")))
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("fails", [OSError("no such library"), TypeError("no library by that name"), None])
def test_the_allocator_setting_never_stops_the_command(monkeypatch, fails):
    """The rooflens process asks glibc to hand large frees back; where there is no C library to load (Windows:
    ``CDLL(None)`` is a TypeError), or one without ``mallopt`` (macOS), the command goes on as before."""
    import ctypes

    import rooflens.cli as cli

    class NoMallopt:  # a C library without the call
        pass

    def load(name):
        if fails is not None:
            raise fails
        return NoMallopt()

    monkeypatch.setattr(ctypes, "CDLL", load)
    cli._large_frees_go_back()  # raises nothing
