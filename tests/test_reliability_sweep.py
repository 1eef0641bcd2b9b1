"""The trouble real users meet, through the command line as they meet it (issue 21).

Every case runs ``rooflens`` in a subprocess: exit status 0, 1, 2 or 130, never a traceback, one
sentence on stderr for bad input, nothing written into the user's trace directories. The program
profiled once for the module lives in a folder named ``rooflens/jax ü`` (the names the old
user-frame filter hid), its logdir and outputs have spaces and non-ASCII letters in their paths.
"""

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rooflens.trace.cache import identity, location
from tests.conftest import interruptible

SCRIPTS = Path(__file__).parent / "run_scripts"
SRC = Path(__file__).resolve().parents[1] / "src"
CHIP = ("--chip", "h100-sxm")  # a catalogue chip: no calibration of this machine in these tests
MIB = 1 << 20


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """The user's environment: this checkout's code, no XLA_FLAGS of ours, a cache of its own."""
    e = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    e["PYTHONPATH"] = os.pathsep.join([str(SRC), *filter(None, [e.get("PYTHONPATH")])])
    e["ROOFLENS_CACHE_DIR"] = str(tmp_path_factory.mktemp("user-cache"))
    e["JAX_PLATFORMS"] = "cpu"
    return e


def rooflens(env, *args, cwd=None, timeout=300, **kw):
    return subprocess.run([sys.executable, "-m", "rooflens.cli", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=timeout, **kw)


def start(env, *args, cwd=None):
    return subprocess.Popen(interruptible([sys.executable, "-m", "rooflens.cli", *args]), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)


def one_sentence(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("rooflens: "), stderr[-2000:]
    assert "Traceback" not in stderr
    return lines[0]


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under root with its size and modification time: what a report must leave alone."""
    return {str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in root.rglob("*")}


@pytest.fixture(scope="module")
def captured(env, tmp_path_factory):
    """``rooflens run`` of the sweep's program, from a folder whose path a user might well have."""
    home = tmp_path_factory.mktemp("home") / "rooflens" / "jax ü"
    home.mkdir(parents=True)
    script = home / "my script é.py"
    shutil.copyfile(SCRIPTS / "sweep_peak.py", script)
    r = rooflens(env, "run", "--logdir", "logs ä b", script.name, cwd=home)
    assert r.returncode == 0 and r.stdout.startswith("done"), r.stderr[-3000:]
    return home / "logs ä b", script


def fresh_copy(logdir: Path, where: Path) -> Path:
    """The logdir copied (a trace the cache has not seen: new path, new inode)."""
    dst = where / "copy of logs"
    shutil.copytree(logdir, dst, symlinks=True)
    return dst


# ---- item 1: the buffers at the peak, one computation -------------------------------------------


def test_peak_buffers_table_and_json_are_one_computation_with_the_64_mib_fusion_on_top(env, captured):
    logdir, _ = captured
    j = rooflens(env, "memory", str(logdir), "--json")
    assert j.returncode == 0, j.stderr
    main = max(json.loads(j.stdout)["programs"], key=lambda p: p["peak_bytes"])
    names = [b["name"] for b in main["peak_buffers"]]
    assert names == [b["name"] for b in main["timeline"]["peak_buffers"]]
    top = main["peak_buffers"][0]
    assert top["bytes"] == 64 * MIB and top["named_scope"] == "big" and top["shape"].startswith("f32[4096,4096]")
    t = rooflens({**env, "COLUMNS": "200"}, "memory", str(logdir))
    assert t.returncode == 0, t.stderr
    section = t.stdout.split(f"{main['program']}: arguments", 1)[1].split("live bytes over", 1)[0]
    rows = [ln.split("│")[1].strip() for ln in section.splitlines() if ln.startswith("│")]
    assert rows == names


# ---- item 2: the sweep ---------------------------------------------------------------------------


def test_the_recompilation_finding_names_the_users_file_in_a_folder_named_rooflens(env, captured, tmp_path):
    logdir, script = captured
    out = tmp_path / "ré port" / "out ü.json"
    out.parent.mkdir()
    r = rooflens(env, "report", str(logdir), *CHIP, "--out", str(out), "--html", str(out.with_suffix(".html")),
                 "--perfetto", str(out.with_suffix(".json.gz")))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    data = json.loads(out.read_text(encoding="utf-8"))
    f = next(f for f in data["findings"] if f["rule"] == "recompilation")
    assert any(f"{script}:" in e for e in f["evidence"]), f["evidence"]
    assert sorted(p.name for p in out.parent.iterdir()) == ["out ü.html", "out ü.json", "out ü.json.gz"]


def test_a_read_only_trace_directory_is_read_and_left_as_it_was(env, captured, tmp_path):
    logdir = fresh_copy(captured[0], tmp_path)
    for p in [logdir, *logdir.rglob("*")]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    before = tree(logdir)
    try:
        r = rooflens(env, "report", str(logdir), *CHIP, "--json")
    finally:
        for p in [logdir, *logdir.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["op_stats"]
    assert tree(logdir) == before


def test_several_reports_of_one_fresh_logdir_at_once_agree_and_write_nothing_there(env, captured, tmp_path):
    """A writable directory that is not the user's to change: three reports at once add nothing to it."""
    logdir = fresh_copy(captured[0], tmp_path)
    own = {**env, "ROOFLENS_CACHE_DIR": str(tmp_path / "cache")}
    before = tree(logdir)
    procs = [start(own, "report", str(logdir), *CHIP, "--json") for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [e[-1500:] for _, e in outs]
    docs = [json.loads(o) for o, _ in outs]
    assert docs[0]["op_stats"] and all(d["op_stats"] == docs[0]["op_stats"] for d in docs)
    assert all(d["findings"] == docs[0]["findings"] for d in docs)
    assert tree(logdir) == before
    entries = list((tmp_path / "cache" / "traces").iterdir())
    assert len(entries) == 1 and entries[0].suffix == ".arrow", entries  # one entry, no temporary left


@pytest.mark.parametrize("damage", ["flip", "older-reader"])
def test_a_damaged_or_older_cache_entry_is_decoded_again_with_the_same_op_stats(env, captured, tmp_path, damage):
    logdir = fresh_copy(captured[0], tmp_path)
    own = {**env, "ROOFLENS_CACHE_DIR": str(tmp_path / "cache")}
    first = rooflens(own, "report", str(logdir), *CHIP, "--json")
    assert first.returncode == 0, first.stderr[-2000:]
    (trace,) = logdir.rglob("*.xplane.pb")
    key = identity(trace)
    (entry,) = (tmp_path / "cache" / "traces").glob("*.arrow")
    assert entry.name == location(key).name
    good = entry.read_bytes()
    if damage == "flip":  # inside the columns: only the checksums notice
        bad = bytearray(good)
        bad[len(bad) // 2] ^= 0xFF
    else:  # an entry written by other reader code (an older rooflens) under the same name
        assert key["readers"].encode() in good
        bad = good.replace(key["readers"].encode(), b"0" * len(key["readers"]))
    entry.write_bytes(bytes(bad))
    again = rooflens(own, "report", str(logdir), *CHIP, "--json")
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads(again.stdout)["op_stats"] == json.loads(first.stdout)["op_stats"]
    assert entry.read_bytes() != bytes(bad)  # replaced by a good one


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_run_stopped_by_a_signal_keeps_its_profile_and_it_reports(env, tmp_path, sig):
    script = tmp_path / "long lööp.py"
    script.write_text(
        "import time\nimport jax\nimport jax.numpy as jnp\n\n"
        "step = jax.jit(lambda x: jnp.tanh(x @ x) * 0.5)\nx = jnp.ones((128, 128)) * 0.01\n"
        "for i in range(10**6):\n    x = step(x)\n    if i == 20:\n        x.block_until_ready()\n"
        "        print('steady', flush=True)\n    time.sleep(0.001)\n", encoding="utf-8")
    p = start(env, "run", "--logdir", str(tmp_path / "lögs"), str(script), cwd=tmp_path)
    assert p.stdout.readline() == "steady\n"
    time.sleep(0.5)
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    assert p.returncode == (-signal.SIGTERM if sig == signal.SIGTERM else 130), err[-2000:]
    assert "profile written to" in err
    r = rooflens(env, "report", str(tmp_path / "lögs"), *CHIP, "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["op_stats"][0]["occurrences"] > 20


def _mapped(pid: int, name: str) -> bool:
    try:
        return name in Path(f"/proc/{pid}/maps").read_text(errors="replace")
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc to see when the report reads")
def test_ctrl_c_during_a_long_report_exits_130_in_one_line_and_spoils_nothing(env, captured, tmp_path):
    (trace,) = captured[0].rglob("*.xplane.pb")
    hosts = tmp_path / "eight hosts"
    hosts.mkdir()
    for i in range(8):  # eight hosts read one after the other: long enough to interrupt half way
        shutil.copyfile(trace, hosts / f"host{i}.xplane.pb")
    out = tmp_path / "out"
    out.mkdir()
    (out / "r.json").write_text("the previous report\n")
    own = {**env, "ROOFLENS_CACHE_DIR": str(tmp_path / "cache")}
    args = ("report", str(hosts), *CHIP, "--workers", "1", "--force", "--out", str(out / "r.json"),
            "--html", str(out / "r.html"))
    p = start(own, *args)
    deadline = time.monotonic() + 120
    while p.poll() is None and not _mapped(p.pid, "host0.xplane.pb") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert p.poll() is None, "the report ended before it could be interrupted"
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130 and one_sentence(err) == "rooflens: interrupted."
    assert sorted(x.name for x in out.iterdir()) == ["r.json"]  # no partial file beside it
    assert (out / "r.json").read_text() == "the previous report\n"
    cache = tmp_path / "cache" / "traces"
    assert not cache.exists() or all(x.suffix == ".arrow" and not x.name.startswith(".") for x in cache.iterdir())
    r = rooflens(own, *args)
    assert r.returncode == 0, r.stderr[-2000:]
    assert len(json.loads((out / "r.json").read_text())["op_stats"]) > 0


def test_symlink_loops_and_deep_trees_in_a_logdir(env, captured, tmp_path):
    (trace,) = captured[0].rglob("*.xplane.pb")
    root = tmp_path / "trée"
    run = root / "jobs" / "wörker 1" / "run"
    run.mkdir(parents=True)
    shutil.copyfile(trace, run / "host_a.xplane.pb")
    (root / "jobs" / "a loop").symlink_to("..")  # back to the root, found before the real directory
    (run / "back").symlink_to(root)
    (root / "self").symlink_to("self")  # a link to itself
    before = tree(root)
    r = rooflens(env, "report", str(root), *CHIP, "--json", timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["sources"] == [str(run / "host_a.xplane.pb")]
    assert tree(root) == before
    deep = tmp_path / "deep"
    d = deep.joinpath(*[f"level {i}" for i in range(30)])
    d.mkdir(parents=True)
    shutil.copyfile(trace, d / "h.xplane.pb")
    r = rooflens(env, "report", str(deep), *CHIP, timeout=120)
    assert r.returncode == 2 and "holds no profile" in one_sentence(r.stderr)


def _file_size_limit(limit_bytes: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    return apply


def test_a_disk_that_fills_while_writing_a_report_or_a_capture(env, captured, tmp_path):
    """A file-size limit stands for a full disk (the same failed write): one sentence, no partial file,
    and under ``rooflens run`` the user's program runs and exits as it would."""
    out = tmp_path / "full disk"
    out.mkdir()
    r = rooflens(env, "report", str(captured[0]), *CHIP, "--out", str(out / "r.json"),
                 preexec_fn=_file_size_limit(16 << 10))
    assert r.returncode == 2 and "cannot write" in one_sentence(r.stderr) and "r.json" in r.stderr
    assert list(out.iterdir()) == []
    r = rooflens(env, "run", "--logdir", str(out / "lögs"), str(SCRIPTS / "healthy_loop.py"),
                 preexec_fn=_file_size_limit(64 << 10))
    assert r.returncode == 0 and r.stdout.startswith("loss"), r.stderr[-2000:]
    line = one_sentence(r.stderr)
    assert "failed to write its trace" in line and "no profile was kept" in line
    assert not list((out / "lögs").rglob("*.xplane.pb"))
    r = rooflens(env, "report", str(out / "lögs"), *CHIP)
    assert r.returncode == 2 and "holds no profile" in one_sentence(r.stderr)


@pytest.mark.parametrize("kept", [0.0, 0.5])
def test_a_trace_still_being_written_is_refused_in_one_sentence(env, captured, tmp_path, kept):
    """The reader does not guess at a partial XSpace: the file is refused until it is whole (none of it written,
    or half: inside its plane of events, whatever the trace's size)."""
    (trace,) = captured[0].rglob("*.xplane.pb")
    run = tmp_path / "plugins" / "profile" / "2026_01_01_00_00_00"
    run.mkdir(parents=True)
    data = trace.read_bytes()
    (run / "host.xplane.pb").write_bytes(data[:int(len(data) * kept)])
    r = rooflens(env, "report", str(tmp_path), *CHIP)
    assert r.returncode == 2, r.stderr[-2000:]
    line = one_sentence(r.stderr)
    assert ("is empty" in line) if kept == 0 else ("damaged or truncated" in line)
