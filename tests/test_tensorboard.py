"""The TensorBoard tab for real: a TensorBoard server with the rooflens plugin lists it, lists the
profile runs of a logdir made here, serves each run's report (drawn in headless Chromium with no
console error under TensorBoard's Content-Security-Policy), gives a bad run one sentence, and
never writes into the logdir."""

import json
import os
import socket
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from importlib import metadata
from pathlib import Path

import jax.numpy as jnp
import pytest

import rooflens as rl
from rooflens.hardware import calibrate

pytest.importorskip("tensorboard")

from rooflens.tensorboard.runs import ReportCache, find_runs, run_identity  # noqa: E402
from rooflens.userdirs import cache_dir  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SRC = Path(rl.__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 120) -> tuple[int, dict, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read().decode("utf-8")
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode("utf-8")


def _files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")}


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    """A logdir with a run at its top, a run of a subdirectory run, and a run whose trace is garbage."""
    if not rl.hardware.local_chip_path().is_file():
        calibrate.save(calibrate.measure(repeats=3, sizes=(256, 512), copy_bytes=16 << 20))
    root = tmp_path_factory.mktemp("tb") / "logs"
    x = jnp.ones((256, 256))
    rl.capture(lambda a: jnp.tanh(a @ a) @ a, x, steps=2, logdir=root)
    rl.capture(lambda a: (a @ a.T).sum(0), x, steps=2, logdir=root / "sub")
    broken = root / "plugins" / "profile" / "zz_broken"
    broken.mkdir(parents=True)
    (broken / "host.xplane.pb").write_bytes(b"\x0a\xff\xff\xff\xff this is not an XSpace")
    return root


def _entry_point_path(tmp: Path) -> str:
    """Where TensorBoard finds the plugin's entry point: the installed rooflens's own, else (a checkout
    used through PYTHONPATH, not installed) the same declaration from pyproject.toml in a dist-info."""
    if any(e.name == "rooflens" for e in metadata.entry_points(group="tensorboard_plugins")):
        return ""
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]["tensorboard_plugins"]
    info = tmp / "ep" / "rooflens_tb_checkout-0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rooflens-tb-checkout\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text("[tensorboard_plugins]\n" + "".join(f"{k} = {v}\n" for k, v in
                                                                              declared.items()))
    return str(tmp / "ep")


@pytest.fixture(scope="module")
def server(logdir, tmp_path_factory):
    port = _free_port()
    paths = [str(SRC), _entry_point_path(tmp_path_factory.mktemp("tbenv")), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    log = tmp_path_factory.mktemp("tblog") / "tensorboard.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir),
                                 "--load_fast=false", "--host", "127.0.0.1", "--port", str(port)],
                                stdout=out, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if _get(base + "/data/plugins_listing", timeout=5)[0] == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.3)
        before = _files(logdir)
        yield base
        assert _files(logdir) == before  # nothing written into the logdir
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_tensorboard_lists_the_plugin_and_its_runs(server, logdir):
    status, _, body = _get(server + "/data/plugins_listing")
    entry = json.loads(body)["rooflens"]
    assert status == 200 and entry["enabled"] and entry["tab_name"] == "rooflens"
    assert entry["loading_mechanism"] == {"type": "IFRAME", "module_path": "/data/plugin/rooflens/index.js"}
    runs = [r["run"] for r in json.loads(_get(server + "/data/plugin/rooflens/runs")[2])]
    top = sorted(p.name for p in (logdir / "plugins" / "profile").iterdir())
    nested = [f"sub/{p.name}" for p in (logdir / "sub" / "plugins" / "profile").iterdir()]
    assert sorted(runs) == sorted(top + nested) and "zz_broken" in runs
    status, headers, js = _get(server + "/data/plugin/rooflens/index.js")
    assert status == 200 and "javascript" in headers["Content-Type"] and "export async function render" in js


def test_a_runs_report_is_served_cached_and_drawn(server, logdir, tmp_path):
    from tests.test_html import chromium

    run = sorted(p.name for p in (logdir / "sub" / "plugins" / "profile").iterdir())[0]
    url = f"{server}/data/plugin/rooflens/report?run=sub/{run}"
    pages = cache_dir() / "tensorboard"  # the server's: it runs with this process's environment

    def built() -> dict:
        return {p.name: p.stat().st_mtime_ns for p in pages.glob("*.html")} if pages.is_dir() else {}

    before = built()
    status, headers, page = _get(url)
    assert status == 200 and headers["Content-Type"].startswith("text/html"), page[:500]
    assert "'sha256-" in headers["Content-Security-Policy"]  # the page's inline script, allowed by its hash
    first = built()
    assert len(first) == len(before) + 1  # the run read, analysed and its page kept in the cache directory
    assert _get(url)[2] == page
    assert built() == first  # the second view is the cached page: nothing built or written again
    exe = chromium()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=8000", "--window-size=1400,2000",
             "--enable-logging=stderr", "--v=0"]
    r = subprocess.run([exe, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    if 'data-rendered="yes"' not in r.stdout:  # a loaded machine: the script ran past the virtual-time budget
        slow = [f.replace("=8000", "=30000") for f in flags]
        r = subprocess.run([exe, *slow, "--dump-dom", url], capture_output=True, text=True, timeout=240)
    drawn = {m: m in r.stdout for m in ('data-rendered="yes"', 'id="roof"', 'class="point')}  # "point above-roof" too
    assert all(drawn.values()), (drawn, r.stderr[-2000:])
    console = [line for line in r.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not console, console  # no script error, no Content-Security-Policy refusal
    # the tab itself, as TensorBoard loads it: the runs listed, the newest opened
    r = subprocess.run([exe, *flags, "--dump-dom", f"{server}/data/plugin_entry.html?name=rooflens"],
                       capture_output=True, text=True, timeout=120)
    assert 'class="rl-run' in r.stdout and f"sub/{run}" in r.stdout and "<iframe" in r.stdout
    assert not [c for c in r.stderr.splitlines() if "CONSOLE" in c or "Uncaught" in c]


def test_a_bad_run_is_one_sentence(server):
    for query, codes in (("run=zz_broken", range(400, 500)), ("run=../../../etc", (404,)), ("", (400,))):
        status, headers, page = _get(f"{server}/data/plugin/rooflens/report?{query}")
        assert status in codes and headers["Content-Type"].startswith("text/html"), (query, status)
        text = page.split('class="rooflens-error">', 1)[1].split("</p>", 1)[0]
        assert "Traceback" not in page and text.count(". ") == 0 and text.endswith("."), text


def test_runs_of_a_bucket_logdir_through_fsspec(logdir):
    """A bucket logdir (fsspec's in-memory bucket here, as gs:// would be) lists the same runs, by URL."""
    fsspec = pytest.importorskip("fsspec")
    mem = fsspec.filesystem("memory")
    for p in logdir.rglob("*"):
        if p.is_file():
            mem.pipe(f"/bucket-tb/logs/{p.relative_to(logdir).as_posix()}", p.read_bytes())
    runs = find_runs("memory://bucket-tb/logs")
    assert set(runs) == set(find_runs(str(logdir))) and all(d.startswith("memory://") for d in runs.values())
    run_dir = runs["zz_broken"]
    first = run_identity(run_dir)
    assert first == (("host.xplane.pb", (logdir / "plugins/profile/zz_broken/host.xplane.pb").stat().st_size,
                      first[0][2]),)
    mem.pipe("/bucket-tb/logs/plugins/profile/zz_broken/host.xplane.pb", b"changed")
    assert run_identity(run_dir) != first  # a rewritten file is a new report


def test_the_report_cache_builds_once_and_keeps_errors_short(logdir, tmp_path):
    runs = find_runs(str(logdir))
    cache = ReportCache(tmp_path / "cache")
    run_dir = runs[next(n for n in runs if n.startswith("sub/"))]
    built = cache.get(run_dir)
    assert not built.error and "rooflens-data" in built.html
    assert cache.get(run_dir) is built and cache.builds == 1
    again = ReportCache(tmp_path / "cache")
    assert again.get(run_dir).html == built.html and again.builds == 0  # from the cache directory
    bad = cache.get(runs["zz_broken"])
    assert bad.error and 400 <= bad.status < 500 and "\n" not in bad.error and "Traceback" not in bad.error


def test_a_changed_run_is_rebuilt(tmp_path, logdir):
    import shutil

    run = next((logdir / "plugins" / "profile").iterdir())
    copy = tmp_path / "logs" / "plugins" / "profile" / run.name
    shutil.copytree(run, copy)
    first = run_identity(str(copy))
    trace = next(copy.glob("*.xplane.pb"))
    os.utime(trace, ns=(time.time_ns(), time.time_ns() + 10**9))  # the same bytes, written again later
    assert run_identity(str(copy)) != first
    assert find_runs(str(tmp_path / "nothing-here")) == {}
