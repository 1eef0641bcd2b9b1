"""Hosts on clocks of their own, aligned on their collectives: the real 4-process Pax pod (nsys-jax archives, one
Nsight session per process, up to half a second apart) read as one job on one time axis.

The offsets are recomputed here from the raw events, without rooflens's execution index: per host, the k-th
end of each all-gather / all-reduce / reduce-scatter in time order, against the first host's."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from rooflens.trace import discover
from rooflens.trace.align import aligned_hosts, clock_offsets, collective_ends
from rooflens.trace.assemble import assemble
from rooflens.trace.cache import from_ipc, to_ipc
from rooflens.trace.hosts import read_hosts
from tests.conftest import fixture_path

#: aligned, a collective over every device ends within this on every host (the pod's largest is 0.108 ms: an
#: NCCL kernel's end is seen by each GPU a few µs to 0.1 ms apart; before alignment they are up to 480 ms apart)
END_TOLERANCE_NS = 200_000
SYNCHRONISING = re.compile(r"^(?:all-gather|all-reduce|reduce-scatter|all-to-all)(?:-start)?(?:\.\d+)*$")


@pytest.fixture(scope="module")
def pod():
    path = fixture_path("gpu_nvidia", "nsys_jax_pax_fsdp4_a100")
    runs, files = discover.find([str(path)])
    raws = read_hosts(files, workers=1)
    return str(path), runs, raws, [f.path for f in files]


@pytest.fixture(scope="module")
def aligned(pod):
    path, runs, raws, files = pod
    return assemble([path], runs, raws, files)


@pytest.fixture(scope="module")
def as_recorded(pod):
    """The same pod with each host on its own session's clock, as it was read before alignment."""
    path, runs, raws, files = pod
    return assemble([path], runs, [dataclasses.replace(r, session_clock=False) for r in raws], files)


def _ends_by_key(t, rows) -> dict[tuple[str, str, int], int]:
    """(program, op, k) → end (ps from the table's origin) of the k-th execution of each collective op of
    ``rows`` (one host's events), in time order."""
    out, seen = {}, {}
    order = rows[np.argsort(t.start_ps[rows], kind="stable")]
    for i in order.tolist():
        name = t.names[t.name[i]]
        if not SYNCHRONISING.match(name):
            continue
        op = (t.programs[t.program[i]], name)
        k = seen.get(op, 0)
        seen[op] = k + 1
        out[(*op, k)] = int(t.start_ps[i] + t.dur_ps[i])
    return out


def _host_ends(t) -> list[dict]:
    return [_ends_by_key(t, np.flatnonzero(t.host == h)) for h in range(len(t.hosts))]


def _spread_ns(ends: list[dict]) -> np.ndarray:
    keys = set.intersection(*(set(e) for e in ends))
    m = np.asarray([[e[k] for k in sorted(keys)] for e in ends], np.float64) * 1e-3
    return m.max(axis=0) - m.min(axis=0)


def _own_step_share(prof) -> list[float]:
    """Per host: the share of its events of step k (its own k-th execution) that start inside the job's step k."""
    t, st = prof.table, np.asarray(prof.steps, np.float64)
    out = []
    for h in range(len(t.hosts)):
        rows = np.flatnonzero((t.host == h) & (t.step >= 0))
        at = t.start_ns[rows]
        k = np.clip(np.searchsorted(st[:, 1], at, side="right") - 1, 0, None)
        out.append(float(((at >= st[k, 1]) & (at <= st[k, 2]) & (st[k, 0] == t.step[rows])).mean()))
    return out


def test_the_pods_steps_do_not_overlap_and_hold_every_hosts_own_step(aligned, as_recorded):
    spans = sorted((s, e) for _, s, e in aligned.steps)
    assert len(spans) == 5 and all(e0 <= s1 for (_, e0), (s1, _) in zip(spans, spans[1:])), aligned.steps
    # each host's k-th execution runs in the job's step k (but the few ms by which the hosts launch it apart)
    assert min(_own_step_share(aligned)) > 0.98, _own_step_share(aligned)
    # on the sessions' own clocks the job's steps hold one host's steps, and the others' in the wrong ones
    assert sorted(_own_step_share(as_recorded))[:3] == pytest.approx([0.2] * 3, abs=0.05)
    times_s = sorted((e - s) * 1e-9 for _, s, e in aligned.steps)
    # a step of the FSDP program takes ~0.13 s on each host (its own executions' spans), and the job's too; the
    # first is ~6 s: every host waits inside its first collective for process 0, which compiled longer
    assert times_s[:4] == pytest.approx([0.1258, 0.1304, 0.1319, 0.1445], abs=2e-3)
    assert times_s[4] > 5.0


def test_every_collective_ends_together_on_every_host(aligned, as_recorded):
    spread = _spread_ns(_host_ends(aligned.table))
    assert len(spread) == 120  # the step program's 23 collectives × 5 steps, and 5 all-reduces of jit__psum
    assert spread.max() <= END_TOLERANCE_NS, spread.max()
    assert np.median(spread) <= 10_000
    assert _spread_ns(_host_ends(as_recorded.table)).max() > 400e6  # not so before: each host's own clock


def test_the_offsets_are_the_medians_of_the_collectives_ends(pod, aligned):
    _, _, raws, _ = pod
    ends = [_ends_by_key(r.table, np.arange(len(r.table))) for r in raws]
    keys = sorted(set.intersection(*(set(e) for e in ends)))
    ref = np.asarray([ends[0][k] for k in keys], np.float64)
    expect_ns = [float(np.median(np.asarray([e[k] for k in keys], np.float64) - ref)) * 1e-3 for e in ends]
    assert expect_ns[0] == 0 and max(map(abs, expect_ns)) > 0.25e9  # the sessions are far apart: the check bites
    # the profile's times: each host's events moved by its offset (ns; offsets are whole ns)
    t = aligned.table
    for h, r in enumerate(raws):
        rows = np.flatnonzero(t.host == t.hosts.index(r.host))
        moved_ns = (int(t.start_ps[rows].min()) - int(r.table.start_ps.min())) * 1e-3 + t.origin_ns - r.table.origin_ns
        assert -moved_ns == pytest.approx(expect_ns[h], abs=1.0), r.host
    (note,) = [n for n in aligned.notes if "clocks were aligned" in n]
    assert f"on the ends of {len(keys)} collective executions" in note
    for r, off in zip(raws[1:], expect_ns[1:]):
        assert f"{r.host} {-off * 1e-6:+.3g} ms" in note


def test_a_clock_moved_by_a_known_amount_is_found_exactly(pod):
    _, _, raws, _ = pod
    r = raws[1]
    late = dataclasses.replace(r, table=dataclasses.replace(r.table, origin_ns=r.table.origin_ns + 123_456_789))
    a = clock_offsets([collective_ends(r.table), collective_ends(late.table)])
    assert a.offset_ns == (0.0, 123_456_789.0) and a.spread_max_ns == 0.0 and a.collectives == 120
    # in a pod: the offset found for that host grows by the same amount, the others' stay
    base = [x.table.origin_ns for x in aligned_hosts(raws)[0]]
    again = [x.table.origin_ns for x in aligned_hosts([raws[0], late, *raws[2:]])[0]]
    assert again == base


def test_an_nsight_sqlite_export_is_aligned_with_an_archive_of_the_same_job(pod):
    """The SQLite export of process 0 (the archive's own ranges and clock) against process 1's archive."""
    _, _, raws, _ = pod
    sqlite = fixture_path("gpu_nvidia", "nsys_sqlite", "pax_fsdp4_proc0.DERIVED.sqlite")
    runs, files = discover.find([str(sqlite)])
    (raw0,) = read_hosts(files, workers=1)
    assert raw0.session_clock
    moved, notes = aligned_hosts([raw0, raws[1]])
    by_archive = aligned_hosts(raws[:2])[0]
    assert moved[1].table.origin_ns - moved[0].table.origin_ns == pytest.approx(
        by_archive[1].table.origin_ns - by_archive[0].table.origin_ns, abs=50_000)  # its collectives, its median
    assert len(notes) == 1 and "clocks were aligned" in notes[0]


def test_traces_on_the_wall_clock_are_left_as_they_are():
    paths = [fixture_path("gpu_amd", "tracelens_mi300x_jax08_gemm.xplane.pb"),
             fixture_path("gpu_amd", "tracelens_mi300x_jax_conv_minimal_legacy.DERIVED.trace.json.gz")]
    _, files = discover.find([str(p) for p in paths])
    raws = read_hosts(files, workers=1)
    assert len(raws) == 2 and not any(r.session_clock for r in raws)
    out, notes = aligned_hosts(raws)
    assert out is raws and notes == []


def test_the_flag_survives_the_cache_and_ray(pod):
    _, _, raws, _ = pod
    assert raws[0].session_clock and from_ipc(to_ipc(raws[0])).session_clock
