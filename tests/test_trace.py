"""Capture and ingest: a real 8-device CPU transformer step, and the TPU/GPU fixtures."""

import gzip
import json
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rooflens as rl
from rooflens.trace import load, op_stats
from tests.conftest import fixture_path

STEPS = 3


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    from rooflens.workloads import TransformerConfig, make_mesh, sharded_train_step

    step, (ap, at) = sharded_train_step(TransformerConfig(), make_mesh())
    params = jax.tree.map(lambda s: jax.device_put(jnp.zeros(s.shape, s.dtype), s.sharding), ap)
    tokens = jax.device_put(jnp.zeros(at.shape, at.dtype), at.sharding)
    logdir = tmp_path_factory.mktemp("logdir")
    prof = rl.capture(step, params, tokens, steps=STEPS, logdir=logdir, feed=lambda out, args: (out[0], args[1]))
    return logdir, prof


def run(*args):
    return subprocess.run([sys.executable, "-m", "rooflens.cli", *args], capture_output=True, text=True, timeout=300)


def test_capture_writes_a_normal_logdir_with_hlo_and_metadata(captured):
    logdir, prof = captured
    (run_dir,) = list((logdir / "plugins" / "profile").iterdir())
    assert list(run_dir.glob("*.xplane.pb")) and list(run_dir.glob("*.trace.json.gz"))
    meta = json.loads((run_dir / "rooflens.json").read_text())
    assert meta["num_devices"] == 8 and meta["steps"] == STEPS and meta["programs"] == ["jit_step"]
    assert meta["jax_version"] == jax.__version__
    assert (run_dir / "hlo" / "jit_step.txt").read_text().startswith("HloModule jit_step")
    assert prof.platform == "cpu" and set(prof.table.device.tolist()) == set(range(8))


def test_top_ops_are_dots_all_reduces_and_fusions(captured):
    _, prof = captured
    stats = op_stats(prof)
    top = stats.op_stats[:15]
    main = sum(s.self_time_s for s in top if s.category in ("matmul", "collective", "fusion"))
    assert main >= 0.8 * sum(s.self_time_s for s in top)  # a noisy host may slip one small op in
    assert any(s.category == "matmul" for s in top) and any(s.name.startswith("all-reduce") for s in top)
    # every op of the step runs once per step on each of the 8 devices
    assert {s.occurrences for s in stats.op_stats} == {STEPS * 8}
    assert all(s.devices == 8 for s in stats.op_stats)
    assert sum(s.pct_device_time for s in stats.op_stats) == pytest.approx(
        100 * sum(d.op_time_s for d in stats.devices) / sum(d.busy_s for d in stats.devices), rel=1e-6)


def test_per_device_times_sum_to_busy_time(captured):
    _, prof = captured
    stats = op_stats(prof)
    t = prof.table
    for d in stats.devices:
        sel = t.device == d.device
        assert d.op_time_s == pytest.approx(t.dur_ns[sel].sum() * 1e-9)
        # XLA:CPU may run two independent thunks of one device at once: busy (the union) ≤ the sum
        assert 0.9 * d.op_time_s <= d.busy_s <= d.op_time_s + 1e-12
        assert d.busy_s + d.idle_s == pytest.approx(d.window_s)
        assert d.largest_gaps and d.largest_gaps[0].duration_s <= d.idle_s + 1e-12
    assert sum(s.total_time_s for s in stats.op_stats) == pytest.approx(sum(d.op_time_s for d in stats.devices))


def test_named_scopes_and_steps(captured):
    _, prof = captured
    stats = op_stats(prof)
    for scope in ("layer_0/attention", "layer_0/ffn", "layer_1/attention", "layer_1/ffn", "loss"):
        assert stats.by_scope_prefix_s.get(scope, 0) > 0, scope
    assert stats.steps.count == STEPS and stats.steps.steps == tuple(range(STEPS))
    assert stats.steps.min_s <= stats.steps.mean_s <= stats.steps.max_s
    assert (prof.table.step >= 0).mean() > 0.99  # the ops run inside the annotated steps


def _by_op(stats):
    """(program, op) → (occurrences, total time); programs by name (Chrome JSON drops program ids on GPU/CPU)."""
    out = {}
    for s in stats.op_stats:
        key = (re.sub(r"\(\d+\)$", "", s.program), s.name)
        n, t = out.get(key, (0, 0.0))
        out[key] = (n + s.occurrences, t + s.total_time_s)
    return out


def _assert_same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert a[k][0] == b[k][0], k
        assert a[k][1] == pytest.approx(b[k][1], rel=1e-6, abs=1e-9 * a[k][0]), k  # JSON keeps µs with 3 decimals


def test_xplane_and_chrome_json_of_one_capture_agree(captured):
    logdir, prof = captured
    run_dir = next((logdir / "plugins" / "profile").iterdir())
    a = op_stats(load(next(run_dir.glob("*.xplane.pb"))))
    b = op_stats(load(next(run_dir.glob("*.trace.json.gz"))))
    _assert_same(_by_op(a), _by_op(b))
    assert a.steps.times_s == pytest.approx(b.steps.times_s, abs=1e-9)


def test_feed_raising_stops_the_trace_keeps_the_logdir_and_propagates(tmp_path):
    class Boom(Exception):
        pass

    calls = []

    def feed(out, args):
        calls.append(1)
        if len(calls) == 3:  # warm-up is call 1; steps 0 and 1 follow
            raise Boom("user code failed")
        return args

    with pytest.raises(Boom, match="user code failed"):
        rl.capture(lambda x: x * 2, jnp.ones(8), steps=5, logdir=tmp_path, feed=feed)
    assert list((tmp_path / "plugins" / "profile").rglob("*.xplane.pb"))  # what was captured is kept
    jax.profiler.start_trace(str(tmp_path / "again"))  # the profiler was stopped
    jax.profiler.stop_trace()


def test_tpu_fixture_xplane_and_json():
    pb = fixture_path("tpu", "xprof_tpu_inference_2.v6e-4.xplane.pb")
    js = fixture_path("tpu", "xprof_tpu_inference_2.v6e-4.DERIVED.trace.json.gz")
    a, b = load(pb), load(js)
    assert a.platform == "tpu" and a.device_kind == "TPU v6 Lite"
    sa = op_stats(a)
    assert len(sa.devices) == 4 and sa.steps is None
    # one sentence on the steps: there are none, and which program is judged per execution
    (said,) = [n for n in a.notes if n.startswith("steps: ")]
    assert said.startswith("steps: there are none; the step program is jit_f ")
    ar = [s for s in sa.op_stats if s.name == "all-reduce" and s.program == "jit__psum"]
    assert ar and ar[0].category == "collective" and ar[0].devices == 4
    _assert_same(_by_op(sa), _by_op(op_stats(b)))


def test_tpu_chrome_trace_carries_categories_and_scopes():
    p = load(fixture_path("tpu", "vllm_tpu_qwen3_2026_01_11_21_26_41.trace.json.gz"))
    stats = op_stats(p)
    assert p.platform == "tpu" and len(stats.devices) == 2
    assert stats.by_category_s["convolution"] == max(stats.by_category_s.values())
    assert stats.by_scope_prefix_s["MergedColumnParallelLinear"] > 0


def test_gpu_fixture_kernels_with_hlo_from_a_dump():
    pb = fixture_path("gpu_amd", "tracelens_mi300x_jax08_gemm.xplane.pb")
    p = load(pb, hlo_dir=fixture_path("gpu_amd", "hlo"))
    stats = op_stats(p)
    assert p.platform == "gpu" and len(stats.devices) == 1
    gemm = stats.op_stats[0]
    assert gemm.program.startswith("jit_dot(") and gemm.category == "matmul"  # compiled 6 times: ids kept
    _assert_same(_by_op(stats), _by_op(op_stats(load(fixture_path(
        "gpu_amd", "tracelens_mi300x_jax08_gemm.DERIVED.trace.json.gz")))))


def test_tensorflow_gpu_trace_has_no_xla_ops():
    """No XLA op anywhere: its kernels are read by name, as a TensorFlow trace's (tests/test_frameworks.py)."""
    p = load(fixture_path("gpu_nvidia", "tfprof_GPU-multi-worker_34.83.195.179_6003.v100x8.xplane.pb"))
    assert p.framework == "TensorFlow" and p.platform == "gpu" and len(p.table)
    assert set(p.table.programs[int(i)] for i in set(p.table.program.tolist())) == {""}


def _bad_files(tmp_path):
    real = fixture_path("tpu", "xprof_tpu_inference_2.v6e-4.xplane.pb").read_bytes()
    real_json = fixture_path("tpu", "xprof_tpu_inference_2.v6e-4.DERIVED.trace.json.gz").read_bytes()
    files = {
        "empty.xplane.pb": (b"", "is empty"),
        "image.xplane.pb": (b"\x89PNG\r\n\x1a\n" + bytes(200), "is not an XSpace profile"),
        "cut.xplane.pb": (real[: len(real) // 3], "damaged or truncated XSpace"),
        "cut.trace.json.gz": (real_json[: len(real_json) // 2], "damaged or truncated gzip"),
        "text.trace.json.gz": (gzip.compress(b"{not json"), "is not a Chrome trace"),
    }
    out = []
    for name, (data, msg) in files.items():
        p = tmp_path / name
        p.write_bytes(data)
        out.append((p, msg))
    out.append((fixture_path("corrupt", "xprof_tpu_inference_2.HEAD_utf8_mangled.xplane.pb"), "damaged or truncated"))
    return out


def test_bad_trace_files_are_one_sentence(tmp_path):
    for path, msg in _bad_files(tmp_path):
        with pytest.raises(rl.RooflensError, match=msg):
            load(path)
        r = run("report", str(path))
        assert r.returncode == 2 and msg in r.stderr and len(r.stderr.strip().splitlines()) == 1, (path, r.stderr)
    r = run("report", str(tmp_path / "nothing-here"))
    assert r.returncode == 2 and "does not exist" in r.stderr
    (tmp_path / "emptydir").mkdir()
    r = run("report", str(tmp_path / "emptydir"))
    assert r.returncode == 2 and "holds no profile" in r.stderr


def test_report_command(captured):
    logdir, _ = captured
    r = run("report", str(logdir), "--top", "5")
    assert r.returncode == 0, r.stderr
    assert "Top 5 of" in r.stdout and "steps: 3" in r.stdout and "layer_0/ffn" in r.stdout
    data = json.loads(run("report", str(logdir), "--json").stdout)
    assert data["platform"] == "cpu" and len(data["devices"]) == 8 and data["steps"]["count"] == 3
    assert data["op_stats"][0]["self_time_s"] == max(s["self_time_s"] for s in data["op_stats"])
    assert np.isclose(sum(s["pct_device_time"] for s in data["op_stats"]),
                      100 * sum(d["op_time_s"] for d in data["devices"]) / sum(d["busy_s"] for d in data["devices"]))


def test_compilations_inside_the_window_are_recorded_with_their_reason(tmp_path):
    sizes = iter([8, 16, 32, 32])
    prof = rl.capture(lambda x: (x * 2).sum(), jnp.ones(8), steps=3, logdir=tmp_path,
                      feed=lambda out, args: (jnp.ones(next(sizes)),))
    window = prof.metadata["in_window"]
    assert len(window["compilations"]) >= 2
    assert any("test_trace.py" in c["where"] for c in window["compilations"])
    assert any("now f32[16] and before f32[8]" in m for m in window["cache_misses"])
    assert op_stats(prof).in_window == window
    assert not jax.config.jax_explain_cache_misses  # restored after the window
    r = run("report", str(tmp_path))
    assert re.search(r"\d compilations? inside the traced window", r.stdout) and "now f32[" in r.stdout


def test_hlo_from_the_xspace_metadata_plane_matches_jaxlibs_own_print():
    """The TPU fixture's programs, read by our wire decoder, print exactly as the DERIVED texts."""
    from rooflens.trace.formats.xspace.hlo_protos import hlo_texts

    pb = fixture_path("tpu", "xprof_tpu_inference_2.v6e-4.xplane.pb")
    texts = hlo_texts(pb.read_bytes())
    assert {k.split("(")[0] for k in texts} == {"jit__psum", "jit_broadcast_in_dim", "jit_f", "jit_convert_element_type"}
    derived = pb.parent / "hlo" / "v6e_from_xplane"
    for key, text in texts.items():
        name, pid = key[:-1].split("(")
        (want,) = derived.glob(f"{name}_{pid}_.after_optimizations.DERIVED.hlo.txt")
        assert text.strip() == want.read_text().strip()


def test_rooflens_run_profiles_an_unmodified_script(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import sys\nimport jax, jax.numpy as jnp\n"
        "@jax.jit\ndef f(x):\n    with jax.named_scope('block'):\n        return jnp.tanh(x @ x.T).sum()\n"
        "x = jnp.ones((int(sys.argv[1]),) * 2)\n"
        "for _ in range(3):\n    y = f(x).block_until_ready()\n"
        "if len(sys.argv) > 2:\n    raise ValueError('the script itself failed')\n")
    logs = tmp_path / "logs"
    r = run("run", "--logdir", str(logs), str(script), "128")
    assert r.returncode == 0, r.stderr
    assert "profile written to" in r.stderr
    prof = load(logs)
    stats = op_stats(prof)
    # jit_f's costliest op (jnp.ones's broadcast, run once, is analysed too: a program run once is no warm-up)
    top = next(s for s in stats.op_stats if s.program == "jit_f")
    assert top.named_scope == "block" and top.occurrences == 2  # the 1st is warm-up: f runs again
    assert any(s.program.startswith("jit_broadcast_in_dim") for s in stats.op_stats)
    assert json.loads(next(logs.rglob("rooflens.json")).read_text())["argv"] == ["128"]
    r = run("run", "--logdir", str(logs), str(script), "64", "fail")
    assert r.returncode == 1 and "ValueError: the script itself failed" in r.stderr
    assert len(list(logs.rglob("*.xplane.pb"))) == 2  # the failed run's trace is kept too
    r = run("run", str(tmp_path / "missing.py"))
    assert r.returncode == 2 and "does not exist" in r.stderr


def test_session_for_an_existing_training_loop(tmp_path):
    f = jax.jit(lambda x: jnp.tanh(x @ x.T))
    x = jnp.ones((64, 64))
    with rl.trace.Session(tmp_path / "a", warmup=2, steps=3) as session:
        for _ in range(8):  # 2 warm-up steps, 3 traced, 3 more after the window closed
            with session.step():
                y = f(x)
    prof = session.profile
    assert prof.metadata["steps"] == 3 and op_stats(prof).steps.count == 3
    assert {s.occurrences for s in op_stats(prof).op_stats if s.program == "jit__lambda"} == {3}
    assert not prof.metadata["in_window"]["compilations"]  # compiled during warm-up, outside the window

    session = rl.trace.Session(tmp_path / "b", warmup=1, steps=2)
    g = session.wrap(f)
    for _ in range(4):
        y = g(x)
    assert y.shape == (64, 64)
    assert op_stats(session.profile).steps.count == 2
    with rl.trace.Session(tmp_path / "c", warmup=5) as s, s.step():
        f(x)
    with pytest.raises(rl.RooflensError, match="nothing was traced"):
        _ = s.profile


def test_implicit_transfers_inside_the_window_are_counted(tmp_path, capfd):
    f = jax.jit(lambda x: x * 2)
    prof = rl.capture(f, jnp.ones(8), steps=3, logdir=tmp_path,
                      feed=lambda out, args: (np.ones(8, np.float32),))  # NumPy in: a host→device copy per step
    transfers = prof.metadata["in_window"]["transfers"]
    assert len(transfers) >= 3 and all(t.startswith("host-to-device") for t in transfers)
    assert "float32[8]" in transfers[0]
    assert "transfer:" not in capfd.readouterr().err  # counted, not echoed
    r = run("report", str(tmp_path))
    assert re.search(r"implicit host-to-device transfers? inside the traced window", r.stdout)


def test_several_hosts_in_one_run_directory(captured, tmp_path):
    logdir, prof = captured
    src = next((logdir / "plugins" / "profile").iterdir())
    run_dir = tmp_path / "plugins" / "profile" / "2026_01_01_00_00_00"
    run_dir.mkdir(parents=True)
    for host in ("worker0", "worker1"):
        (run_dir / f"{host}.xplane.pb").write_bytes(next(src.glob("*.xplane.pb")).read_bytes())
    two = load(tmp_path)
    stats = op_stats(two)
    assert sorted(two.hosts) == ["worker0", "worker1"]
    assert len(stats.devices) == 16 and {d.host for d in stats.devices} == {"worker0", "worker1"}
    one = {(s.program, s.name): s for s in op_stats(prof).op_stats}
    for s in stats.op_stats:
        assert s.occurrences == 2 * one[(s.program, s.name)].occurrences


def test_the_python_tracers_line_is_named_after_the_interpreter():
    """The profiler names the Python thread's line after the process: the interpreter's executable as started."""
    from rooflens.trace.formats.raw import is_python_line

    assert all(is_python_line(n) for n in ("python", "python3", "python3.11", "python3.13t"))
    assert not any(is_python_line(n) for n in ("pythonista", "XLA Ops", "tf_XLAEigen/123", "rooflens", ""))


def test_a_logdir_of_several_runs_is_read_at_its_newest_and_says_so(tmp_path):
    """A logdir the user profiled into twice: the newest run is read, and the report names it and the other."""
    import shutil
    from pathlib import Path

    src = fixture_path("tpu", "xprof_tpu_inference_2.v6e-4.xplane.pb")
    for run in ("2026_01_01_10_00_00", "2026_01_02_10_00_00"):
        d = tmp_path / "logs" / "plugins" / "profile" / run
        d.mkdir(parents=True)
        shutil.copy(src, d / "host0.xplane.pb")
    prof = rl.load(tmp_path / "logs")
    assert [Path(s).parent.name for s in prof.sources] == ["2026_01_02_10_00_00"]
    assert ("the logdir holds 2 runs: this is the newest, 2026_01_02_10_00_00; give a run directory to read another "
            "(2026_01_01_10_00_00)") in prof.notes
    assert not [n for n in rl.load(tmp_path / "logs" / "plugins" / "profile" / "2026_01_01_10_00_00").notes
                if "runs:" in n]
