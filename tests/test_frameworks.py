"""Traces as they are: kernels that name no HLO op are counted, and other frameworks' traces are read as theirs.

Expected values come from the raw events, read here without rooflens: jax's own ``ProfileData`` for the XSpace
files, ``json`` for the PyTorch (Kineto) trace, ``sqlite3`` for the Nsight export.
"""

import gzip
import json
import sqlite3

import numpy as np
import pytest
from click.testing import CliRunner

from rooflens import cli
from tests.conftest import fixture_path

JAX_API = ("jax.", "jit ", "jit the", "lax.", "io_callback", "XLA_FLAGS", "StepTraceAnnotation")


def _report(path, *args) -> dict:
    res = CliRunner().invoke(cli.cli, ["report", str(path), "--json", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _union_s(intervals) -> float:
    """Length of the union of [start, end) intervals (ns), in seconds."""
    total, reach = 0, None
    for s, e in sorted(intervals):
        if reach is None or s > reach:
            total += e - s
            reach = e
        elif e > reach:
            total += e - reach
            reach = e
    return total * 1e-9


def _xspace_kernels(path):
    """Per device: every kernel on a GPU kernel line (``Stream #…``, not a copy engine's ``(Memcpy…)``) as
    (name, start ns, end ns, its hlo_op or None), from jax's own reader."""
    from jax.profiler import ProfileData

    out = {}
    for plane in ProfileData.from_file(str(path)).planes:
        if not plane.name.startswith("/device:GPU:"):
            continue
        dev = int(plane.name.rsplit(":", 1)[1])
        for line in plane.lines:
            if line.name.startswith("Stream") and "Memcpy" not in line.name:
                for e in line.events:
                    out.setdefault(dev, []).append((e.name, e.start_ns, e.start_ns + e.duration_ns,
                                                    dict(e.stats).get("hlo_op")))
    return out


@pytest.mark.parametrize("name", ["tracelens_mi300x_jax08_gemm.xplane.pb",
                                  "tracelens_mi300x_jax08_gemm.DERIVED.trace.json.gz"])
def test_kernels_that_name_no_hlo_op_are_counted_shown_and_busy(name):
    """The real MI300X capture: GPU:0 runs 42 kernels of HLO ops and 12 ROCm runtime copy kernels
    (``__amd_rocclr_copyBuffer``, on a stream of their own) that name none. They are counted by name, said in a note
    with their count and time, and in the device's busy time, which is the union of all 54 kernels (XProf's kernel
    stats list them all); the Chrome twin says the same."""
    kernels = _xspace_kernels(fixture_path("gpu_amd", "tracelens_mi300x_jax08_gemm.xplane.pb"))[0]
    without = [k for k in kernels if k[3] is None]
    assert len(kernels) == 54 and len(without) == 12
    assert {k[0] for k in without} == {"__amd_rocclr_copyBuffer.kd"}
    doc = _report(fixture_path("gpu_amd", name))
    rows = [s for s in doc["op_stats"] if s["program"] == ""]
    assert [r["name"] for r in rows] == ["__amd_rocclr_copyBuffer.kd"]
    assert rows[0]["occurrences"] == 12
    assert rows[0]["total_time_s"] == pytest.approx(sum(e - s for _, s, e, _ in without) * 1e-9, rel=1e-6)
    (dev,) = doc["devices"]
    assert dev["events"] == 54
    assert dev["busy_s"] == pytest.approx(_union_s([(s, e) for _, s, e, _ in kernels]), rel=1e-6)
    assert dev["busy_s"] > _union_s([(s, e) for _, s, e, op in kernels if op is not None])  # more than the ops'
    note = next(n for n in doc["notes"] if "name no HLO op" in n)
    assert note.startswith("12 GPU kernels name no HLO op") and "12 × __amd_rocclr_copyBuffer.kd" in note
    assert doc["framework"] == "JAX"
    unpriced = next(c for c in doc["comparison"] if c["program"] == "")
    assert unpriced["predicted_s"] is None and unpriced["category"] == "copy/transpose"


def test_a_tensorflow_xspace_is_read_as_tensorflow():
    """TensorFlow's BERT on 8 × V100 (tensorflow/profiler's demo XSpace): no XLA op anywhere, so it used to be
    refused as 'no device op events'. Its kernels are read by name on the two GPUs that ran them, the report says it
    is a TensorFlow trace with no HLO (no --chip to give), and no finding gives JAX advice."""
    path = fixture_path("gpu_nvidia", "tfprof_GPU-multi-worker_34.83.195.179_6003.v100x8.xplane.pb")
    kernels = _xspace_kernels(path)
    doc = _report(path)
    assert doc["framework"] == "TensorFlow"
    ran = {d: k for d, k in kernels.items() if k}
    assert {d["device"]: d["events"] for d in doc["devices"]} == {d: len(k) for d, k in ran.items()}
    for d in doc["devices"]:
        assert d["busy_s"] == pytest.approx(_union_s([(s, e) for _, s, e, _ in ran[d["device"]]]), rel=1e-6)
    assert sum(s["total_time_s"] for s in doc["op_stats"]) == pytest.approx(
        sum(e - s for k in ran.values() for _, s, e, _ in k) * 1e-9, rel=1e-6)
    assert any(n.startswith("this is a TensorFlow trace, not a JAX program") for n in doc["notes"])
    assert not any("StepTraceAnnotation" in n for n in doc["notes"])
    assert "TensorFlow trace has no HLO" in doc["chip_reason"]
    # its V100s (80 SMs, 16 GB: no catalogue chip) are no H100: a chip given is a what-if
    said = _report(path, "--chip", "h100-sxm")["chip_mismatch"]
    assert "80 cores" in said and "15.78 GiB" in said and "not on h100-sxm" in said
    for f in doc["findings"]:
        assert not any(w in f["fix"] for w in JAX_API), f["fix"]


def test_a_pytorch_kineto_trace_is_read_as_pytorch():
    """A real PyTorch profiler trace (HTA's AlexNet on an A100): its events array follows other arrays
    (deviceProperties), which the reader used to take for the events. Its 79 kernels are read by name on GPU 0
    (the Memcpy/Memset engines and the cuda_sync waits on the same streams are not kernels), and the header and
    the advice are PyTorch's."""
    path = fixture_path("pytorch", "hta_alexnet_a100.pt.trace.json.gz")
    with gzip.open(path) as f:
        events = json.loads(f.read())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert len(kernels) == 79
    doc = _report(path)
    assert doc["framework"] == "PyTorch" and doc["platform"] == "gpu"
    (dev,) = doc["devices"]
    assert dev["device"] == 0 and dev["events"] == 79
    by_name: dict[str, float] = {}
    for k in kernels:
        by_name[k["name"]] = by_name.get(k["name"], 0.0) + k["dur"] * 1e-6
    assert {s["name"]: s["total_time_s"] for s in doc["op_stats"]} == pytest.approx(by_name, rel=1e-6)
    assert doc["comparison"] and all(c["predicted_s"] is None for c in doc["comparison"])
    assert doc["chip_reason"].startswith("a PyTorch trace has no HLO, so its kernels have no roofline; ")
    for f in doc["findings"]:
        assert not any(w in f["fix"] for w in JAX_API), f["fix"]
    text = CliRunner().invoke(cli.cli, ["report", str(path)]).stdout
    assert "PyTorch trace" in text.splitlines()[0] and "kernels by self time" in text and "HLO ops" not in text
    # its kernels belong to no XLA program: the unit is the capture, said so ("the execution of " named nothing), and
    # a demangled C++ kernel name (2,800 characters) is cut in sentences and cells, whole in the JSON
    assert "of  " not in text and "execution of (" not in text and "the unit is the whole capture" in text
    assert "Step (the capture)" in text and max(len(k["name"]) for k in kernels) > 2000
    (over,) = [f for f in doc["findings"] if f["rule"] == "overheads"]
    assert over["per"] == "capture" and all(len(e) < 400 for e in over["evidence"]), over["evidence"]
    assert max(len(s["name"]) for s in doc["op_stats"]) > 200  # the JSON's names whole
    assert max(len(line) for line in text.splitlines() if line.startswith("    evidence: gap")) < 400
    from rooflens.api import load_report
    from rooflens.report.html import page_data

    page = page_data(load_report(str(path)))  # the HTML page: titled by what the trace is, its table of kernels
    assert page["header"]["title"] == "rooflens: PyTorch trace" and page["ops_label"] == "Kernels"
    assert page["per_step_label"] == "per device, over the capture"


def test_a_pytorch_nsight_export_gets_no_jax_advice():
    """A real Nsight export of a PyTorch FSDP run (aten:: NVTX ranges, no XLA ranges): named PyTorch, and none of
    its findings tells it to remove jax.debug.print or to jit anything."""
    path = fixture_path("gpu_nvidia", "nsys_sqlite", "nsysai_pytorch_h100x2_1s.sqlite")
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        aten = db.execute("SELECT count(*) FROM NVTX_EVENTS WHERE text LIKE 'aten::%'").fetchone()[0]
    assert aten > 0
    doc = _report(path)
    assert doc["framework"] == "PyTorch"
    assert doc["findings"]
    for f in doc["findings"]:
        assert not any(w in f["fix"] for w in JAX_API), f["fix"]
    # its kernels belong to no program: named alone, not "/flash_fwd_kernel"
    text = CliRunner().invoke(cli.cli, ["report", str(path), "--chip", "h100-sxm"], env={"COLUMNS": "200"}).stdout
    assert "unpriced (" in text and " /" not in text.split("unpriced (", 1)[1].splitlines()[0], text


def test_a_jax_capture_is_named_jax(sharded_cpu_trace):
    doc = _report(sharded_cpu_trace, "--chip", "tpu-v5e")
    assert doc["framework"] == "JAX"
    assert not any(s["program"] == "" for s in doc["op_stats"])
    assert np.isclose(sum(s["total_time_s"] for s in doc["op_stats"]), sum(doc["by_program_s"].values()))


def test_one_statistic_named_with_the_other_beside_it(tmp_path):
    """The MI300X convolution capture: ``input_transpose_fusion.1`` runs once in each of 5 executions, 4.8 µs to
    33 µs (median 6.69 µs, mean 13.9 µs, from jax's own reader). The report's one statistic is the median, named
    in the JSON (report, diff, check) and the column header; the mean is shown beside it, as they are > 2× apart;
    a diff's ratio is the report's own."""
    path = fixture_path("gpu_amd", "tracelens_mi300x_jax_conv_minimal_legacy.xplane.pb")
    kernels = [k for ks in _xspace_kernels(path).values() for k in ks if k[3] == "input_transpose_fusion.1"]
    per_execution = np.asarray([e - s for _, s, e, _ in kernels]) * 1e-9
    assert len(per_execution) == 5 and np.mean(per_execution) > 2 * np.median(per_execution)
    doc = _report(path)
    assert doc["measured_statistic"] == "median per execution"
    c = next(c for c in doc["comparison"] if c["name"] == "input_transpose_fusion.1")
    assert c["measured_s"] == pytest.approx(np.median(per_execution), rel=1e-6)
    assert c["mean_s"] == pytest.approx(np.mean(per_execution), rel=1e-6)
    assert c["ratio"] == pytest.approx(c["measured_s"] / c["predicted_s"], rel=1e-9)
    text = CliRunner().invoke(cli.cli, ["report", str(path)], env={"COLUMNS": "250"}).stdout
    assert "measured (median)" in text
    assert any("input_transpose_fusion.1" in line and "(mean 13.9 µs)" in line for line in text.splitlines())
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps(doc))
    d = json.loads(CliRunner().invoke(cli.cli, ["diff", str(saved), str(saved), "--json"]).stdout)
    assert d["measured_statistic"] == "median per execution"
    row = next(o for o in d["ops"] if o["name_a"] == "input_transpose_fusion.1")
    assert row["ratio_a"] == pytest.approx(c["ratio"], rel=1e-9)
    budget = tmp_path / "rooflens.toml"
    budget.write_text("max_idle_fraction = 1.0\n")
    res = CliRunner().invoke(cli.cli, ["check", str(path), "--budget", str(budget), "--json"])
    assert json.loads(res.stdout)["measured_statistic"] == "median per execution"
