"""`rooflens run` without a window watches the process's memory while the trace is open (capture/memwatch.py):
a script whose trace grows without bound has its trace stopped early and written, runs to its end, and the run's
output, rooflens.json and the report say why. Sizes are checked against numbers computed here."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rooflens.capture import memwatch

SCRIPTS = Path(__file__).parent / "run_scripts"
# the runaway run's --max-trace-memory, in MB: a sixth (memwatch.TRACE_SHARE) is the trace's budget. jaxlib 0.11's process grows by
# ~32 MB in the first 50 ms of a trace whatever it runs, which a 150 MB limit (25-30 MB budget) did not leave room for
LIMIT_MB = 360


@pytest.mark.parametrize("text,size", [("4GB", 4 * 10**9), ("300MB", 300 * 10**6), ("1.5G", 1_500_000_000),
                                       ("512MiB", 512 * 2**20), ("1000000", 10**6), (" 2 gb ", 2 * 10**9)])
def test_sizes_read_as_bytes(text, size):
    assert memwatch.parse_size(text) == size


@pytest.mark.parametrize("text", ["", "four GB", "4XB", "-1GB", "0MB", "1e9"])
def test_a_size_that_is_not_one_is_refused_with_a_sentence(text):
    with pytest.raises(ValueError, match="size|more than 0"):
        memwatch.parse_size(text)


def test_the_default_limit_is_half_the_memory_this_process_may_use():
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        cgroup = int(Path("/sys/fs/cgroup/memory.max").read_text().strip())
    except (OSError, ValueError):
        cgroup = total
    assert memwatch.default_limit_bytes() == min(total, cgroup if cgroup > 0 else total) // 2
    with open("/proc/self/statm") as fh:  # the RSS read: statm's resident pages × the page size
        resident = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    assert abs(memwatch.rss_bytes() - resident) < 16 * 2**20


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    e["ROOFLENS_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    e["JAX_PLATFORMS"] = "cpu"
    return e


def _rooflens(env, *args, timeout=300):
    return subprocess.run([sys.executable, "-m", "rooflens.cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def test_a_runaway_whole_run_trace_is_stopped_written_and_said(env, tmp_path):
    """6 s of tiny jitted calls under a LIMIT_MB limit: traced whole, the trace would grow by ~0.5 GB and take
    ~30 s to write (measured); the watch stops it once the process has grown by its share of it, the script runs on to its
    end, and what was traced is a readable profile whose report says why it is short."""
    logs = tmp_path / "logs"
    # the run measured from a small parent (Linux keeps a process's peak RSS across exec: rooflens run execs the
    # script's interpreter, so the parent's RUSAGE_CHILDREN peak is the capture's own)
    peak = [sys.executable, "-c", "import resource, subprocess, sys; rc = subprocess.call(sys.argv[1:]); "
            "print('PEAK', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024); sys.exit(rc)"]
    r = subprocess.run([*peak, sys.executable, "-m", "rooflens.cli", "run", "--logdir", str(logs),
                        "--max-trace-memory", f"{LIMIT_MB}MB", str(SCRIPTS / "runaway_trace.py"), "6"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    peak_bytes = int(next(ln for ln in r.stdout.splitlines() if ln.startswith("PEAK ")).split()[1])
    ran = json.loads(next(ln for ln in r.stdout.splitlines() if ln.startswith("RUNAWAY ")).split(" ", 1)[1])
    assert "rooflens: the trace was stopped early" in r.stderr and "--steps" in r.stderr
    (manifest,) = logs.rglob("rooflens.json")
    meta = json.loads(manifest.read_text())
    stopped = meta["trace_stopped"]
    assert stopped["reason"] == "memory" and stopped["limit_bytes"] == LIMIT_MB * 10**6
    grew = stopped["rss_at_stop_bytes"] - stopped["rss_at_start_bytes"]
    assert LIMIT_MB * 10**6 * memwatch.TRACE_SHARE <= grew < LIMIT_MB * 10**6 / 2  # past its share, read within an interval
    # the trace and its writing together stayed within the limit
    assert peak_bytes - stopped["rss_at_start_bytes"] < LIMIT_MB * 10**6, (peak_bytes, stopped)
    assert meta["exit"]["status"] == 0
    # the watch stopped the trace before the script's end: the script ran on, untraced
    assert meta["trace_start_unix_ns"] < stopped["at_unix_s"] * 1e9 < ran["end_unix_ns"]
    rep = _rooflens(env, "report", str(logs), "--json", "--no-calibrate")
    assert rep.returncode == 0, rep.stderr[-3000:]
    data = json.loads(rep.stdout)
    notes = [n for n in data["notes"] if n.startswith("the trace was stopped early")]
    assert len(notes) == 1 and f"--max-trace-memory {LIMIT_MB} MB" in notes[0] and "--duration" in notes[0]
    # the loop's program, its executions by far the most (jaxlib 0.10 names it jit__lambda, 0.11 otherwise)
    traced = max(o["executions"] for o in data["op_stats"])
    assert 1000 < traced < ran["calls"] / 2  # some of the calls, not all


def test_a_bad_size_is_one_sentence_and_exit_2(env, tmp_path):
    r = _rooflens(env, "run", "--logdir", str(tmp_path / "logs"), "--max-trace-memory", "lots",
                  str(SCRIPTS / "runaway_trace.py"), "1")
    assert r.returncode == 2 and "--max-trace-memory" in r.stderr and "is not a size" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "logs").exists()


def test_a_run_within_its_limit_is_traced_whole_and_says_nothing(env, tmp_path):
    """The watch runs on every whole run (here with the default limit, half of this machine's memory): a run that
    stays within it keeps its whole trace, with no trace_stopped record and no note."""
    logs = tmp_path / "logs"
    r = _rooflens(env, "run", "--logdir", str(logs), str(SCRIPTS / "runaway_trace.py"), "0.2")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "stopped early" not in r.stderr
    (manifest,) = logs.rglob("rooflens.json")
    meta = json.loads(manifest.read_text())
    assert "trace_stopped" not in meta and meta["exit"]["status"] == 0
    rep = _rooflens(env, "report", str(logs), "--json", "--no-calibrate")
    assert rep.returncode == 0, rep.stderr[-3000:]
    assert not any("stopped early" in n for n in json.loads(rep.stdout)["notes"])
