"""A pod merged from its hosts' aggregates (``merge="aggregates"``) against the same pod merged from every
event: what must be exact is, the medians are within the sketch's 1 %, and the driver keeps one sampled step."""

import json
import subprocess
import sys

import numpy as np
import pytest

import rooflens as rl
from rooflens.analysis import analyze
from rooflens.trace import discover, op_stats
from rooflens.trace.reduce import GAMMA, SAMPLE_EVENTS, Merge, bucket_of, bucket_value, reduce_host, reduce_profile
from tests.conftest import fixture_path

#: the sketch's bound: a bucket's representative against any duration in it
SKETCH_REL = (GAMMA - 1) / (GAMMA + 1)
EXACT = ("total_time_s", "self_time_s", "min_time_s", "max_time_s", "avg_time_s", "pct_device_time",
         "min_execution_s", "max_execution_s", "mean_execution_s")


def _same_stats(events, merged) -> None:
    a = {(s.program, s.name): s for s in merged.op_stats}
    assert a.keys() == {(s.program, s.name) for s in events.op_stats}
    for s in events.op_stats:
        t = a[(s.program, s.name)]
        assert (t.occurrences, t.executions, t.devices, t.category, t.named_scope) == (
            s.occurrences, s.executions, s.devices, s.category, s.named_scope), s.name
        for f in EXACT:
            assert getattr(t, f) == pytest.approx(getattr(s, f), rel=1e-9, abs=1e-15), (s.name, f)
        assert t.median_time_s == pytest.approx(s.median_time_s, rel=SKETCH_REL * 1.0001), s.name
        assert t.median_execution_s == pytest.approx(s.median_execution_s, rel=SKETCH_REL * 1.0001), s.name
    assert [(d.host, d.device, d.events) for d in merged.devices] == [(d.host, d.device, d.events)
                                                                    for d in events.devices]
    for x, y in zip(events.devices + events.hosts, merged.devices + merged.hosts, strict=True):
        assert (y.busy_s, y.window_s, y.idle_s, y.op_time_s) == pytest.approx((x.busy_s, x.window_s, x.idle_s,
                                                                                x.op_time_s), rel=1e-9)
        assert [(g.before, g.after, g.host) for g in y.largest_gaps] == [(g.before, g.after, g.host)
                                                                         for g in x.largest_gaps]
        assert [v for g in y.largest_gaps for v in (g.start_s, g.duration_s)] == pytest.approx(
            [v for g in x.largest_gaps for v in (g.start_s, g.duration_s)], rel=1e-9, abs=1e-9)
    assert merged.by_category_s == pytest.approx(events.by_category_s, rel=1e-9)
    assert merged.steps == events.steps
    assert merged.unran == events.unran


@pytest.mark.parametrize("parts", [("tpu", "xprof_tpu_inference_2.v6e-4.xplane.pb"),
                                   ("gpu_amd", "tracelens_mi300x_jax08_gemm.xplane.pb"),
                                   ("gpu_amd", "tracelens_mi300x_jax_conv_minimal_legacy.xplane.pb"),
                                   ("tpu", "vllm_tpu_qwen3_2026_01_11_21_26_41.trace.json.gz")])
def test_one_host_reduced_equals_its_events(parts):
    prof = rl.load(fixture_path(*parts))
    merge = Merge()
    merge.add(0, reduce_profile(prof, SAMPLE_EVENTS))
    merged = merge.profile([str(prof.path)], [], prof.sources, None)
    _same_stats(op_stats(prof), op_stats(merged))


def test_the_sketch_holds_every_real_duration_within_its_bound():
    prof = rl.load(fixture_path("tpu", "xprof_tpu_inference_2.v6e-4.xplane.pb"))
    d = prof.table.dur_ps[prof.table.dur_ps > 0]
    rel = np.abs(bucket_value(bucket_of(d)) - d) / d
    assert len(d) > 1000 and rel.max() <= SKETCH_REL * 1.0001
    assert rel.max() > SKETCH_REL * 0.5  # the bound is met, not vacuous: some durations sit near a bucket's edge
    assert (bucket_of(np.array([0, 1, 2])) == [0, 1, 1 + int(np.log(2) / np.log(GAMMA))]).all()


@pytest.fixture(scope="module")
def pod():
    """A real 4-process JAX job on A100s (nsys-jax archives, one per process) read both ways."""
    path = fixture_path("gpu_nvidia", "nsys_jax_pax_fsdp4_a100")
    return path, rl.load(path, workers=2, merge="events"), rl.load(path, workers=2, merge="aggregates")


def test_a_pod_merged_from_aggregates_equals_its_events(pod):
    _, events, merged = pod
    assert merged.reduced is not None and events.reduced is None
    assert merged.hosts == events.hosts and merged.steps == events.steps
    se, sm = op_stats(events), op_stats(merged)
    _same_stats(se, sm)
    he, hm = se.host_steps, sm.host_steps
    assert (hm.hosts, hm.steps, hm.devices) == (he.hosts, he.steps, he.devices)
    assert hm.times_s == he.times_s and hm.skew_s == pytest.approx(he.skew_s)
    assert hm.collective_s == pytest.approx(he.collective_s, rel=1e-9)
    assert hm.other_s == pytest.approx(he.other_s, rel=1e-9)
    assert [o[:3] for o in hm.op_outliers] == [o[:3] for o in he.op_outliers]
    # the driver holds the sampled step's events only
    assert len(merged.table) < len(events.table) / 3
    assert set(np.unique(merged.table.step).tolist()) == {merged.reduced.sampled_step}


def test_a_pod_merged_from_aggregates_finds_what_its_events_find(pod):
    _, events, merged = pod
    a, b = analyze(events, require_roofline=False), analyze(merged, require_roofline=False)
    assert [f.rule for f in b.findings] == [f.rule for f in a.findings]
    assert "straggler" in {f.rule for f in b.findings}
    assert [(u.unit.host, u.unit.device) for u in b.steady.idle] == [(u.unit.host, u.unit.device) for u in a.steady.idle]
    assert [u.idle_s for u in b.steady.idle] == pytest.approx([u.idle_s for u in a.steady.idle], rel=1e-9)
    assert b.steps.step_time_s == pytest.approx(a.steps.step_time_s)
    assert b.steps.compute_s == pytest.approx(a.steps.compute_s, rel=1e-9)
    # the idle time measured in the steps (each host's busy union per device and step) and the op time at once
    assert b.stats.in_steps_busy_s == pytest.approx(a.stats.in_steps_busy_s, rel=1e-9) and a.stats.in_steps_busy_s
    assert (b.steps.idle_s, b.steps.concurrent_s) == pytest.approx((a.steps.idle_s, a.steps.concurrent_s), rel=1e-9)
    assert b.stats.in_steps_by_program_s == pytest.approx(a.stats.in_steps_by_program_s, rel=1e-9)
    assert "middle step" in b.timeline.note and len(b.timeline.ops) > 0


def test_the_merge_does_not_depend_on_the_order_hosts_arrive(pod):
    path, _, merged = pod
    runs, files = discover.find([str(path)])
    parts = [reduce_host(f, runs, None, False, 1000, len(files)) for f in files]
    backwards = Merge()
    for i in reversed(range(len(parts))):
        backwards.add(i, parts[i])
    again = backwards.profile([str(path)], runs, [f.path for f in files], None)
    assert op_stats(again).to_dict() == op_stats(merged).to_dict()


def test_report_takes_merge_from_the_command_line(pod, tmp_path):
    path = pod[0]
    run = [sys.executable, "-m", "rooflens.cli", "report", str(path), "--json", "--workers", "2"]
    r = subprocess.run([*run, "--merge", "aggregates"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    data = json.loads(r.stdout)
    assert len(data["hosts"]) == 4 and any("merged from aggregates" in n for n in data["notes"]), data["notes"]
    bad = subprocess.run([*run, "--merge", "sampled"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    # --step-fn reaches every host's worker (it was refused for a merge of aggregates)
    r = subprocess.run([*run, "--merge", "aggregates", "--step-fn", "wrapped_step_fn"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    (said,) = [n for n in json.loads(r.stdout)["notes"] if n.startswith("steps: ")]  # one sentence, not one a host
    assert "pjit__wrapped_step_fn" in said and "chosen by --step-fn wrapped_step_fn" in said, said
    bad = subprocess.run([*run, "--merge", "aggregates", "--step-fn", "no_such_fn"], capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 2 and "no_such_fn" in bad.stderr and "pjit__wrapped_step_fn" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_a_host_with_no_op_event_is_left_out_and_named(tmp_path):
    import shutil

    import jax

    tpu = fixture_path("tpu", "xprof_tpu_inference_2.v6e-4.xplane.pb")
    with jax.profiler.trace(str(tmp_path / "idle")):  # a real trace of a host that ran nothing: no op, no kernel
        pass
    (empty,) = (tmp_path / "idle").rglob("*.xplane.pb")
    for name, src in (("a", tpu), ("b", tpu), ("c", empty)):
        shutil.copy(src, tmp_path / f"{name}.xplane.pb")
    merged = rl.load(tmp_path, workers=1, merge="aggregates")
    assert merged.hosts == ["a", "b"]
    assert any("left out: c" in n for n in merged.notes), merged.notes
    one = {(s.program, s.name): s.occurrences for s in op_stats(rl.load(tpu)).op_stats}
    assert {(s.program, s.name): s.occurrences for s in op_stats(merged).op_stats} == {k: 2 * c for k, c in one.items()}
