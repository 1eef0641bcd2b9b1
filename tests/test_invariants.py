"""What must hold on every real trace, whatever made it: the model's assumptions, stated and checked.

Every trace under ``tests/fixtures`` that a rooflens format owns (found by the formats' own registry, so a
fixture added later is checked with no change here) and a real CPU capture are loaded and analysed, and
each report is checked against the trace's own events, computed here independently of rooflens's stats:

- per device lane, the ops' self time fits in the lane's window; per device, no op's self time exceeds the
  device's window; no op's share of device time is above 100 %;
- the steps are consistent with the step program's executions: no more steps than any program ran on
  one device, every step holds device work, steps do not overlap;
- an op's measured time per execution is the sum of its events (kernels) in one execution of its program
  on one device (the median over executions), never one kernel's time;
- control ops (``while``, ``conditional``, ``call``) are not work of their own: their self time is a
  small part of the op time;
- every report has a roofline, or says why not.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import pytest

import rooflens as rl
from rooflens.errors import RooflensError
from rooflens.trace import formats
from rooflens.trace.stats import line_groups, self_times_ps
from tests.conftest import FIXTURES, IN_CI

CONTROL_OPCODES = ("while", "conditional", "call")
#: what is not a trace a format reads on its own: damaged on purpose, or Nsight's raw format (only `nsys export`)
NOT_READ_HERE = ("corrupt",)


def _every_fixture_trace() -> list[Path]:
    if not FIXTURES.exists():
        if IN_CI:
            raise RuntimeError(f"test fixtures are not present at {FIXTURES}")
        return []
    out = []
    for p in sorted(FIXTURES.rglob("*")):
        rel = p.relative_to(FIXTURES)
        if rel.parts[0] in NOT_READ_HERE or p.name.endswith(".nsys-rep"):
            continue
        if p.is_file() and formats.format_of(str(p), named=False) is not None:
            out.append(p)
    # a pod read as one: every directory that holds several hosts' traces of one format
    pods = {p.parent for p in out if sum(q.parent == p.parent for q in out) > 1
            and len({formats.format_of(str(q)).name for q in out if q.parent == p.parent}) == 1}
    return out + sorted(pods)


TRACES = _every_fixture_trace()


def _hlo_dir(trace: Path) -> Path | None:
    """The fixture's own HLO (the programs it ran), where the repository carries it beside the trace."""
    d = trace.parent / "hlo"
    return d if d.is_dir() and trace.is_file() else None


def _analyze(path: Path):
    try:
        prof = rl.load(str(path))
    except RooflensError as e:  # refused (no device op, not one run): in one sentence, never a traceback
        message = str(e).strip()
        assert message and "\n" not in message and "Traceback" not in message, message
        pytest.skip(f"refused in one sentence: {message}")
    try:
        rep = rl.analyze(prof)
    except RooflensError as e:  # the device is unknown to the catalogue: it must say so, and still be measured
        assert str(e).strip(), f"{path.name}: analyze failed without a reason"
        rep = None
    return prof, rep


CPU_CAPTURE = "cpu capture"  # a real capture made here: XLA:CPU, 8 virtual devices (conftest's sharded_cpu_trace)


@pytest.fixture(scope="module", params=[*TRACES, CPU_CAPTURE],
                ids=lambda p: p if isinstance(p, str) else str(p.relative_to(FIXTURES)))
def loaded(request):
    if request.param == CPU_CAPTURE:
        from rooflens.hardware import calibrate

        calibrate.save(calibrate.measure(repeats=3, sizes=(256, 512), copy_bytes=16 << 20))  # the CPU's chip 'local'
        return _analyze(request.getfixturevalue("sharded_cpu_trace"))
    return _analyze(request.param)


def _lanes(t):
    """(device, line group) of each event, and its self time in ps, computed from the events."""
    group = line_groups(t)
    return group, self_times_ps(t, group)


def test_self_time_fits_in_each_lane_and_device_window(loaded):
    prof, _ = loaded
    t = prof.table
    if not len(t):
        pytest.skip("no device op events")
    group, self_ps = _lanes(t)
    end = t.start_ps + t.dur_ps
    for g in np.unique(group):
        sel = group == g
        window = int(end[sel].max() - t.start_ps[sel].min())
        assert int(self_ps[sel].sum()) <= window, "a lane's ops' self time is longer than the lane's window"
    dev_key = t.host.astype(np.int64) * 1_000_000 + t.device
    op_key = t.program.astype(np.int64) * (len(t.names) + 1) + t.name
    for d in np.unique(dev_key):
        sel = dev_key == d
        window = int(end[sel].max() - t.start_ps[sel].min())
        per_op = np.bincount(np.unique(op_key[sel], return_inverse=True)[1], weights=self_ps[sel])
        assert per_op.max() <= window * (1 + 1e-9), "an op's self time on a device is longer than its window"


def test_no_op_share_above_100_percent(loaded):
    prof, rep = loaded
    stats = rep.stats if rep is not None else rl.trace.op_stats(prof)
    for s in stats.op_stats:
        assert s.pct_device_time <= 100.0 + 1e-6, (s.program, s.name, s.pct_device_time)
    for d in stats.devices:
        assert d.busy_s <= d.window_s * (1 + 1e-9) + 1e-12
        assert d.idle_s >= -1e-12


def _executions(t) -> np.ndarray:
    from rooflens.trace.warmup import execution_index

    return np.asarray(execution_index(t), np.int64)


def test_steps_agree_with_the_step_programs_executions(loaded):
    prof, rep = loaded
    t = prof.table
    if not prof.steps or not len(t):
        pytest.skip("no steps in this trace")
    if not any(t.programs[int(i)] for i in np.unique(t.program)):
        pytest.skip("no XLA program: another framework's kernels, whose steps are no program's executions")
    ex = _executions(t)
    # executions of each (host, device, program): the most any program ran on one device bounds the steps
    key = (t.host.astype(np.int64) << 42) + (t.device.astype(np.int64) + 1 << 21) + t.program
    most = max(int(ex[key == k].max()) + 1 for k in np.unique(key))
    assert len(prof.steps) <= most, f"{len(prof.steps)} steps but no program ran more than {most} times on a device"
    spans = sorted((s, e) for _, s, e in prof.steps)
    for (_, e0), (s1, _) in zip(spans, spans[1:]):
        assert e0 <= s1 + 1e-3, "steps overlap"
    start = t.start_ns
    for _, s, e in prof.steps:
        assert ((start >= s) & (start <= e)).any(), "a step holds no device work (a step that never ran)"
    if rep is not None and rep.stats.steps is not None:
        assert rep.stats.steps.count == len(prof.steps)


def test_measured_per_execution_is_the_sum_of_its_kernels(loaded):
    prof, rep = loaded
    if rep is None or prof.reduced is not None:
        pytest.skip("no comparison (chip unknown) or a pod merged from aggregates")
    t = prof.table
    ex = _executions(t)
    p_code = {p: i for i, p in enumerate(t.programs)}
    n_code = {n: i for i, n in enumerate(t.names)}
    checked = 0
    for r in rep.comparison:
        if r.measured_s is None or (r.program not in p_code) or (r.name not in n_code):
            continue
        sel = (t.program == p_code[r.program]) & (t.name == n_code[r.name])
        if not sel.any():
            continue
        runs = {}
        for h, d, x, dur in zip(t.host[sel].tolist(), t.device[sel].tolist(), ex[sel].tolist(), t.dur_ps[sel].tolist()):
            runs[(h, d, x)] = runs.get((h, d, x), 0) + dur
        expect_s = statistics.median(runs.values()) * 1e-12
        assert r.measured_s == pytest.approx(expect_s, rel=1e-6, abs=1e-12), (r.program, r.name)
        checked += 1
    assert checked or not rep.comparison


def test_control_ops_are_not_work_of_their_own(loaded):
    prof, rep = loaded
    stats = rep.stats if rep is not None else rl.trace.op_stats(prof)
    info = prof.op_info
    total = sum(s.self_time_s for s in stats.op_stats) or 1.0
    control = sum(s.self_time_s for s in stats.op_stats
                  if getattr(info.get((s.program, s.name)), "opcode", "") in CONTROL_OPCODES
                  or s.name.split(".")[0] in CONTROL_OPCODES)
    assert control <= 0.05 * total, f"control ops hold {100 * control / total:.1f} % of op self time"


def test_every_report_has_a_roofline_or_says_why(loaded):
    prof, rep = loaded
    if rep is None:
        return  # analyze said why in one sentence (checked in _analyze)
    priced = [r for r in rep.comparison if r.predicted_s is not None]
    if priced and rep.roofs is not None:
        return
    unpriced = [r for r in rep.comparison if r.predicted_s is None]
    assert rep.notes or all(r.unpriced_reason for r in unpriced), "no roofline, and no word why"


def test_the_invariants_see_every_kind_of_trace():
    """The sweep above covers every format rooflens reads from others (a new format's fixture joins it)."""
    names = {formats.format_of(str(p)).name for p in TRACES if p.is_file()}
    assert {"xspace", "chrome", "nsys-jax", "nsys-sqlite"} <= names, names


def _format_pairs() -> list[tuple[Path, Path]]:
    """Every Chrome trace in the fixtures exported from an XSpace beside it (``X.DERIVED.trace.json.gz``)."""
    out = []
    for p in TRACES:
        if p.is_file() and p.name.endswith(".DERIVED.trace.json.gz"):
            xspace = p.with_name(p.name.removesuffix(".DERIVED.trace.json.gz") + ".xplane.pb")
            if xspace.is_file():
                out.append((xspace, p))
    return out


@pytest.mark.parametrize("pair", _format_pairs(), ids=lambda pr: pr[0].name)
def test_one_capture_in_two_formats_is_one_measurement(pair):
    """An XSpace and the Chrome trace jaxlib exported from it give every op the same category (HLO text the
    Chrome trace prints inline, operand types included, decides it as the XSpace's HLO does)."""
    try:
        xspace = rl.load(str(pair[0]))
    except RooflensError:  # refused (no XLA op): the Chrome export is refused too
        with pytest.raises(RooflensError):
            rl.load(str(pair[1]))
        return
    chrome = rl.load(str(pair[1]))
    cats = {k: (i.category, i.opcode) for k, i in xspace.op_info.items()}
    other = {k: (i.category, i.opcode) for k, i in chrome.op_info.items()}
    common = cats.keys() & other.keys()
    assert common, "the two formats share no op"
    assert {k: cats[k] for k in common} == {k: other[k] for k in common}
