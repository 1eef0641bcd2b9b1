"""The run manifest (rooflens.json): typed, tolerant, and the same document back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rooflens.trace.manifest import Compilation, InWindowRecord, RunManifest

SRC = Path(__file__).resolve().parent.parent / "src"

# the shape `rooflens run` writes (key order as its launcher writes them), values from a real run
RUN_DOC = {
    "captured_by": "rooflens run", "warmup_in_window": True, "script": "/w/train.py", "module": None,
    "argv": ["128"], "cwd": "/w", "exit": {"status": "ok"}, "when_unix_s": 1767225600.25, "wall_s": 3.5,
    "trace_start_unix_ns": 1767225600250000000, "trace_stop_unix_ns": 1767225603750000000,
    "process_index": 0, "process_count": 1, "host_label": "h", "python": "3.12.3", "notes": [],
    "in_window": {
        "compilations": [{"module": "jit_step", "start_unix_s": 1767225601.0, "end_unix_s": 1767225601.5,
                          "duration_s": 0.5, "where": "train.py:40", "explanation": "TRACING CACHE MISS",
                          "reason": "* at x, now f32[16] and before f32[8]"}],
        "first_compilations": [{"module": "jit_step", "start_unix_s": 1767225600.5, "end_unix_s": 1767225600.9,
                                "duration_s": 0.4, "where": "train.py:40", "memory": {"temp_size_in_bytes": 64},
                                "explanation": ""}],
        "cache_misses": ["TRACING CACHE MISS"], "all_cache_misses": [{"t_unix_s": 1767225601.0, "text": "x"}],
        "transfers": [], "transfer_times_unix_s": [], "compile_spans": [], "transfer_guard": "log"},
    "jax_version": "0.10.2", "backend": "cpu", "device_kind": "cpu", "num_devices": 8, "num_local_devices": 8,
    "devices": [{"id": 0, "kind": "cpu", "platform": "cpu", "process_index": 0}], "memory": {"jit_step": {}},
}


def test_a_run_document_reads_typed_and_writes_back_unchanged():
    m = RunManifest.from_dict(json.loads(json.dumps(RUN_DOC)))
    assert not m.problems and not m.extra
    assert m.warmup_in_window is True and m.num_devices == 8 and m.trace_start_unix_ns == 1767225600250000000
    (again,) = m.window.compilations
    assert isinstance(again, Compilation) and again.reason.startswith("* at x") and again.duration_s == 0.5
    assert [c.module for c in m.window.every_compilation] == ["jit_step", "jit_step"]
    assert json.dumps(m.to_dict()) == json.dumps(RUN_DOC)  # keys, values and their order


def test_unknown_keys_are_kept_and_wrong_types_noted():
    doc = {"captured_by": "someone", "seed": 9 ** 40, "num_devices": "eight",
           "in_window": {"compilations": [{"duration_s": "slow", "where": "a.py:1", "tag": 1}], "transfers": 3}}
    m = RunManifest.from_dict(doc, "run/rooflens.json")
    assert m.extra == {"seed": 9 ** 40, "num_devices": "eight"} and m.num_devices is None
    (c,) = m.window.compilations
    assert c.duration_s is None and c.where == "a.py:1" and c.extra == {"duration_s": "slow", "tag": 1}
    assert m.window.transfers is None
    assert len(m.problems) == 3 and all(p.startswith("run/rooflens.json") for p in m.problems), m.problems
    assert "num_devices is str, not int" in " ".join(m.problems)
    assert m.to_dict() == doc  # nothing lost
    assert RunManifest.from_dict([1, 2]).problems == ["rooflens.json is not an object (list); ignored"]


def test_a_capture_writes_only_what_it_set():
    rec = InWindowRecord(compilations=[Compilation(0.25, "step.py:3")], cache_misses=[], transfers=["t"])
    m = RunManifest.of(captured_by="rooflens.capture", in_window=rec, steps=3, seed=7)
    assert m.to_dict() == {"captured_by": "rooflens.capture", "in_window": {
        "compilations": [{"duration_s": 0.25, "where": "step.py:3"}], "cache_misses": [], "transfers": ["t"]},
        "steps": 3, "seed": 7}


def test_the_launcher_loads_it_by_path_without_numpy():
    """`rooflens run`'s launcher runs in the script's interpreter before JAX: it loads its stdlib-only
    siblings (capture/common.py, trace/manifest.py) by path, importing neither rooflens nor numpy."""
    code = ("import importlib.util, sys; p = sys.argv[1]; "
            "spec = importlib.util.spec_from_file_location('launcher', p); m = importlib.util.module_from_spec(spec); "
            "spec.loader.exec_module(m); "
            "doc = m.manifest.RunManifest.of(captured_by='rooflens run', argv=['1']).to_dict(); "
            "print(doc, 'numpy' in sys.modules, any(k == 'rooflens' or k.startswith('rooflens.') for k in sys.modules))")
    out = subprocess.run([sys.executable, "-I", "-c", code, str(SRC / "rooflens" / "capture" / "launch.py")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["{'captured_by':", "'rooflens", "run',", "'argv':", "['1']}", "False", "False"]
