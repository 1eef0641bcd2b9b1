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

import re
import statistics
from pathlib import Path

import numpy as np
import pytest

import rooflens as rl
from rooflens.errors import RooflensError
from rooflens.trace import formats
from tests.conftest import FIXTURES, IN_CI, self_times_from_events

CONTROL_OPCODES = ("while", "conditional", "call")
#: what is not a trace a format reads on its own: damaged on purpose, or Nsight's raw format (only `nsys export`)
NOT_READ_HERE = ("corrupt",)
#: fixtures rooflens refuses to read, each with the words its one-sentence refusal must hold: a refused trace is a
#: case of its own (test_a_refused_trace_says_why_in_one_sentence), never a skip of the invariants. A fixture that
#: starts to read moves from here into the sweep, where every invariant then holds of it.
REFUSED = {
    # three unrelated exports side by side (two PyTorch runs and a JAX one, years apart): not one pod
    "gpu_nvidia/nsys_sqlite": "are not one run",
}
#: the chip a fixture ran on, as its provenance (tests/fixtures/SOURCES.md) says, for traces that do not name it
#: themselves: analyze refuses those in one sentence asking for --chip, then is given this one
CHIP_FROM_SOURCES = {
    "gpu_amd/tracelens_mi300x_jax08_gemm.DERIVED.trace.json.gz": "mi300x",  # MI300X, 304 CUs
    "gpu_amd/tracelens_mi300x_jax_conv_minimal_legacy.DERIVED.trace.json.gz": "mi300x",
    "gpu_amd/tracelens_mi355x_te_fused_attn.DERIVED.trace.json.gz": "mi355x",  # MI355X, 256 CUs, 288 GiB
    "gpu_nvidia/nsys_sqlite/nsysai_pytorch_h100x2_1s.sqlite": "h100-sxm",  # 2 × H100 (SXM, as test_findings reads)
    "gpu_nvidia/nsys_sqlite/nsysai_pytorch_h100x2_mfu_before.sqlite": "h100-sxm",
    "gpu_nvidia/h100_jax0112/window_command_buffers/vm.trace.json.gz": "h100-sxm",  # the XSpace beside it: H100 80GB
    "gpu_nvidia/h100_jax0112/annotated_whole_run/vm.trace.json.gz": "h100-sxm",
    "tpu/vllm_tpu_qwen3_2026_01_11_21_26_41.trace.json.gz": "tpu-v6e",  # the rates fit v6e or v7; tpu-inference: v6e
    "tpu/xprof_tpu_inference_2.v6e-4.DERIVED.trace.json.gz": "tpu-v6e",  # the XSpace beside it says 'TPU v6 Lite'
}


def _rel(p: Path) -> str:
    return p.relative_to(FIXTURES).as_posix()


def _one_run(files: list[Path]) -> bool:
    """Host files of one run: the same name but for their numbers (``…_proc0.zip`` … ``…_proc3.zip``)."""
    return len({re.sub(r"\d+", "#", f.name) for f in files}) == 1


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
    # a pod read as one: every directory holding several hosts' traces of one run (one format, one name but for
    # the host's number); a directory of unrelated traces is no pod
    by_dir: dict[Path, list[Path]] = {}
    for p in out:
        by_dir.setdefault(p.parent, []).append(p)
    pods = [d for d, files in by_dir.items() if len(files) > 1 and _one_run(files)
            and len({formats.format_of(str(q)).name for q in files}) == 1]
    return out + sorted(pods)


ALL_TRACES = _every_fixture_trace()
TRACES = [p for p in ALL_TRACES if _rel(p) not in REFUSED]


def _hlo_dir(trace: Path) -> Path | None:
    """The fixture's own HLO (the programs it ran), where the repository carries it beside the trace."""
    d = trace.parent / "hlo"
    return d if d.is_dir() and trace.is_file() else None


def _one_sentence(message: str) -> bool:
    return bool(message) and "\n" not in message and "Traceback" not in message


def _analyze(path: Path):
    """The trace loaded and analysed; a load error fails (refusals are declared in REFUSED). An analysis that
    needs the chip asks for it in one sentence, then gets the one the fixture's provenance names."""
    try:
        prof = rl.load(str(path))
    except RooflensError as e:
        pytest.fail(f"{path.name} is refused ({e}); a fixture rooflens refuses on purpose is listed in REFUSED")
    try:
        return prof, rl.analyze(prof), ""
    except RooflensError as e:
        why = str(e).strip()
        assert _one_sentence(why), why
        chip = CHIP_FROM_SOURCES.get(_rel(path)) if path.is_relative_to(FIXTURES) else None
        assert chip is not None, f"{path.name}: analyze refused ({why}) and SOURCES.md names no chip for it"
        assert "--chip" in why, why
        return prof, rl.analyze(prof, chip=chip), why


CPU_CAPTURE = "cpu capture"  # a real capture made here: XLA:CPU, 8 virtual devices (conftest's sharded_cpu_trace)


@pytest.fixture(scope="module", params=[*TRACES, CPU_CAPTURE],
                ids=lambda p: p if isinstance(p, str) else _rel(p))
def loaded(request):
    if request.param == CPU_CAPTURE:
        from rooflens.hardware import calibrate

        calibrate.save(calibrate.measure(repeats=3, sizes=(256, 512), copy_bytes=16 << 20))  # the CPU's chip 'local'
        return _analyze(request.getfixturevalue("sharded_cpu_trace"))
    return _analyze(request.param)


@pytest.mark.parametrize("rel", sorted(REFUSED))
def test_a_refused_trace_says_why_in_one_sentence(rel):
    path = FIXTURES / rel
    if not path.exists():
        pytest.fail(f"{rel} is listed in REFUSED but is not among the fixtures")
    assert path in ALL_TRACES or path.is_dir(), f"{rel} is no trace a format reads"
    with pytest.raises(RooflensError) as e:
        rl.load(str(path))
    message = str(e.value).strip()
    assert _one_sentence(message) and REFUSED[rel] in message, message


def test_a_folder_of_unrelated_exports_is_not_a_pod():
    """gpu_nvidia/nsys_sqlite holds two PyTorch runs and one JAX run: not one job's hosts. The sweep does not take
    it for a pod, and rooflens, given it as one, refuses it (test_a_refused_trace_says_why_in_one_sentence)."""
    folder = FIXTURES / "gpu_nvidia" / "nsys_sqlite"
    if not folder.is_dir():
        pytest.fail(f"{folder} is not present") if IN_CI else pytest.skip(f"{folder} is not present")
    assert folder not in TRACES and len([p for p in ALL_TRACES if p.parent == folder]) == 3
    pods = [p for p in TRACES if p.is_dir()]
    assert [_rel(p) for p in pods] == ["gpu_nvidia/nsys_jax_pax_fsdp4_a100"]  # the 4 processes of one Pax job


def _is_control(prof, program: str, name: str) -> bool:
    return (getattr(prof.op_info.get((program, name)), "opcode", "") in CONTROL_OPCODES
            or name.split(".")[0] in CONTROL_OPCODES)


def test_self_time_fits_in_each_lane_and_device_window(loaded):
    prof, rep, _ = loaded
    t = prof.table
    assert len(t), "a trace that loads has device op events"
    self_ps = self_times_from_events(t)
    end = t.start_ps + t.dur_ps
    lanes = np.unique(np.column_stack([t.host, t.device, t.line]), axis=0, return_inverse=True)[1].ravel()
    for g in np.unique(lanes):
        sel = lanes == g
        window = int(end[sel].max() - t.start_ps[sel].min())
        assert int(self_ps[sel].sum()) <= window, "a lane's ops' self time is longer than the lane's window"
    dev_key = t.host.astype(np.int64) * 1_000_000 + t.device
    op_key = t.program.astype(np.int64) * (len(t.names) + 1) + t.name
    for d in np.unique(dev_key):
        sel = dev_key == d
        window = int(end[sel].max() - t.start_ps[sel].min())
        per_op = np.bincount(np.unique(op_key[sel], return_inverse=True)[1], weights=self_ps[sel])
        assert per_op.max() <= window * (1 + 1e-9), "an op's self time on a device is longer than its window"
    # the report's self time of each op (control ops aside: theirs is their body's) is the events' own
    stats = rep.stats
    if prof.reduced is not None:
        return  # a pod merged from aggregates holds one sampled step's events, not all the stats were made from
    expect: dict[tuple[str, str], float] = {}
    for p, n, v in zip(t.program.tolist(), t.name.tolist(), self_ps.tolist()):
        key = (t.programs[p], t.names[n])
        expect[key] = expect.get(key, 0) + v
    # events that overlap another on their lane without holding it (a GPU kernel started while the one before it
    # ends: Hopper's programmatic dependent launch) are concurrent, not nested: rooflens keeps each one's whole
    # time as its own, where the reference gives the overlap to the later one; their ops are held to the bounds
    crossed = np.zeros(len(t), bool)
    order = np.lexsort((t.start_ps, t.line, t.device, t.host))
    same = (np.diff(t.host[order]) == 0) & (np.diff(t.device[order]) == 0) & (np.diff(t.line[order]) == 0)
    nxt = order[1:]
    cross = same & (t.start_ps[nxt] < end[order[:-1]]) & (end[nxt] > end[order[:-1]])
    crossed[order[:-1][cross]] = True
    crossed[nxt[cross]] = True
    partial = {(t.programs[p], t.names[n]) for p, n in zip(t.program[crossed].tolist(), t.name[crossed].tolist())}
    checked = 0
    for st in stats.op_stats:
        if _is_control(prof, st.program, st.name) or (st.program, st.name) not in expect:
            continue
        total = expect[(st.program, st.name)] * 1e-12
        if (st.program, st.name) in partial:
            assert total * (1 - 1e-3) - 1e-9 <= st.self_time_s <= st.total_time_s * (1 + 1e-9), (st.program, st.name)
        else:
            assert st.self_time_s == pytest.approx(total, rel=1e-3, abs=1e-9), (st.program, st.name)
        checked += 1
    assert checked


def test_no_op_share_above_100_percent(loaded):
    prof, rep, _ = loaded
    stats = rep.stats
    for s in stats.op_stats:
        assert s.pct_device_time <= 100.0 + 1e-6, (s.program, s.name, s.pct_device_time)
    for d in stats.devices:
        assert d.busy_s <= d.window_s * (1 + 1e-9) + 1e-12
        assert d.idle_s >= -1e-12


def _executions(t) -> np.ndarray:
    """Each event's execution of its program on its device, from the events alone: on each (host, device,
    program), a new execution begins with each event of the op that ran first (the program's first op runs once per
    execution). An op with as many events as that one runs once in each execution: its k-th event is in the k-th,
    even where XLA:CPU ran it before that execution's first op (independent thunks run concurrently, in no fixed
    order)."""
    out = np.zeros(len(t), np.int64)
    key = list(zip(t.host.tolist(), t.device.tolist(), t.program.tolist()))
    start, name = t.start_ps.tolist(), t.name.tolist()
    groups: dict[tuple, list[int]] = {}
    for i in sorted(range(len(start)), key=lambda i: (key[i], start[i])):
        groups.setdefault(key[i], []).append(i)
    for idx in groups.values():
        first, x = name[idx[0]], -1
        runs = sum(name[i] == first for i in idx)
        counts: dict[int, int] = {}
        for i in idx:
            counts[name[i]] = counts.get(name[i], 0) + 1
        nth: dict[int, int] = {}
        for i in idx:
            x += name[i] == first
            if counts[name[i]] == runs:
                out[i] = nth.get(name[i], 0)
                nth[name[i]] = out[i] + 1
            else:
                out[i] = x
    return out


def test_steps_agree_with_the_step_programs_executions(loaded):
    prof, rep, _ = loaded
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
    if rep.stats.steps is not None:
        assert rep.stats.steps.count == len(prof.steps)


def test_measured_per_execution_is_the_sum_of_its_kernels(loaded):
    prof, rep, _ = loaded
    if prof.reduced is not None:
        pytest.skip("a pod merged from aggregates: its table holds one sampled step, not every execution")
    t = prof.table
    ex = _executions(t)
    p_code = {p: i for i, p in enumerate(t.programs)}
    n_code = {n: i for i, n in enumerate(t.names)}
    checked = 0
    for r in rep.comparison:
        if r.measured_s is None or not r.program or (r.program not in p_code) or (r.name not in n_code):
            continue  # a kernel of no program (PyTorch) has no program execution to sum over
        sel = (t.program == p_code[r.program]) & (t.name == n_code[r.name])
        if not sel.any():
            continue
        runs = {}
        for h, d, x, dur in zip(t.host[sel].tolist(), t.device[sel].tolist(), ex[sel].tolist(), t.dur_ps[sel].tolist()):
            runs[(h, d, x)] = runs.get((h, d, x), 0) + dur
        expect_s = statistics.median(runs.values()) * 1e-12
        assert r.measured_s == pytest.approx(expect_s, rel=1e-6, abs=1e-12), (r.program, r.name)
        checked += 1
    assert checked or not [r for r in rep.comparison if r.program]


def test_control_ops_are_not_work_of_their_own(loaded):
    prof, rep, _ = loaded
    stats = rep.stats
    info = prof.op_info
    total = sum(s.self_time_s for s in stats.op_stats) or 1.0
    control = sum(s.self_time_s for s in stats.op_stats
                  if getattr(info.get((s.program, s.name)), "opcode", "") in CONTROL_OPCODES
                  or s.name.split(".")[0] in CONTROL_OPCODES)
    assert control <= 0.05 * total, f"control ops hold {100 * control / total:.1f} % of op self time"


def test_every_report_has_a_roofline_or_says_why(loaded):
    prof, rep, asked = loaded
    if asked:  # the trace did not name its chip: analyze asked for one, and the provenance's gave a roofline
        assert rep.chip is not None and rep.roofs is not None, asked
    priced = [r for r in rep.comparison if r.predicted_s is not None]
    if priced and rep.roofs is not None:
        return
    unpriced = [r for r in rep.comparison if r.predicted_s is None]
    assert rep.notes or all(r.unpriced_reason for r in unpriced), "no roofline, and no word why"


def test_the_invariants_see_every_kind_of_trace():
    """The sweep above covers every format rooflens reads from others (a new format's fixture joins it)."""
    names = {formats.format_of(str(p)).name for p in TRACES if p.is_file()}
    assert not [p for p in TRACES if _rel(p) in REFUSED]
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
