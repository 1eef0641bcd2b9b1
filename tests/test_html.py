"""The HTML report in a real headless browser: charts drawn, no JavaScript error, user strings inert."""

import re
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

import rooflens as rl
from rooflens.hardware import calibrate
from rooflens.report.html import render_html
from tests.conftest import IN_CI

XSS = "<script>alert(1)</script>"


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    message = "no headless Chromium here (.ci/run installs Debian's chromium package)"
    if IN_CI:
        pytest.fail(message)  # CI must draw the page: a missing browser is a red build, not a quiet skip
    pytest.skip(message)


@pytest.fixture(scope="module")
def report_html(tmp_path_factory):
    if not rl.hardware.local_chip_path().is_file():
        calibrate.save(calibrate.measure(repeats=3, sizes=(256, 512), copy_bytes=16 << 20))

    def step(x, w):
        with jax.named_scope(XSS):  # a user's scope name that is also HTML
            h = x @ w
        with jax.named_scope("ffn"):
            return h, jnp.tanh(h) @ w.T

    tmp = tmp_path_factory.mktemp("html")
    prof = rl.capture(step, jnp.ones((512, 512)), jnp.ones((512, 512)), steps=3, logdir=tmp / "logs")
    rep = rl.analyze(prof)
    path = tmp / "report.html"
    path.write_text(render_html(rep))
    return path


def test_report_renders_in_headless_chromium(report_html, tmp_path):
    exe = chromium()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=8000", "--window-size=1400,2600"]
    shot = tmp_path / "report.png"
    r = subprocess.run([exe, *flags, "--enable-logging=stderr", "--v=0", f"--screenshot={shot}",
                        report_html.as_uri()], capture_output=True, text=True, timeout=120)
    assert shot.is_file() and shot.stat().st_size > 10_000  # a screenshot of the drawn page
    console = [line for line in r.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not [c for c in console if "Uncaught" in c or "Error" in c], console
    dom = subprocess.run([exe, *flags, "--dump-dom", report_html.as_uri()], capture_output=True, text=True,
                         timeout=120).stdout
    assert 'data-rendered="yes"' in dom  # the script ran to its end
    assert 'id="roof"' in dom and 'class="point"' in dom  # the roofline with its ops
    timeline = dom[dom.index('id="timeline"'):]
    assert "<rect" in timeline[:timeline.index("</svg>")]  # the step's ops drawn on their device lane
    categories = dom[dom.index('id="categories"'):]
    assert "<rect" in categories[:categories.index("</svg>")]
    # one box per finding of the same report (read again here), each under its rule's id, or the all-clear line
    findings = rl.analyze(rl.load(report_html.parent / "logs")).findings
    boxes = re.findall(r'<div class="finding (high|medium|low)" id="finding-([\w-]+)"', dom)
    assert sorted(boxes) == sorted((f.severity, f.rule) for f in findings), boxes
    assert ('<div class="muted">No findings: every rule passed.</div>' in dom) == (not findings)
    # the scope name is shown as text, never run: no element came out of it
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert XSS not in dom


def test_html_is_one_offline_file(report_html):
    text = report_html.read_text()
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text
    assert report_html.stat().st_size < 3_000_000
    assert XSS not in text  # the embedded JSON escapes < and >


def test_report_command_writes_html_and_keeps_existing_files(report_html, tmp_path):
    logs = report_html.parent / "logs"
    out = tmp_path / "r.html"
    r = subprocess.run([sys.executable, "-m", "rooflens.cli", "report", str(logs), "--html", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and out.is_file() and "rooflens-data" in out.read_text()
    r = subprocess.run([sys.executable, "-m", "rooflens.cli", "report", str(logs), "--html", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "--force" in r.stderr


def test_demo_runs_the_whole_loop(tmp_path):
    """`rooflens demo`, as the README's first line runs it: a fresh process, nothing but the package."""
    import os
    import time

    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    env["ROOFLENS_CACHE_DIR"] = str(tmp_path / "cache")  # no calibration yet: the demo makes one
    t0 = time.time()
    r = subprocess.run([sys.executable, "-m", "rooflens.cli", "demo", "--out", str(tmp_path / "demo")],
                       capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert time.time() - t0 < 120
    html = tmp_path / "demo" / "report.html"
    assert html.is_file() and "rooflens-data" in html.read_text()
    assert "8 device(s)" in r.stdout and "On tpu-v5e" in r.stdout and str(html) in r.stdout
    assert (tmp_path / "cache" / "local.toml").is_file()
    r2 = subprocess.run([sys.executable, "-m", "rooflens.cli", "demo", "--out", str(tmp_path / "demo")],
                        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert r2.returncode == 0 and str(tmp_path / "demo-2" / "report.html") in r2.stdout  # the first is kept


def test_json_out_and_perfetto(report_html, tmp_path):
    import gzip
    import json

    logs = report_html.parent / "logs"
    out, perf = tmp_path / "r.json", tmp_path / "trace.json.gz"
    r = subprocess.run([sys.executable, "-m", "rooflens.cli", "report", str(logs), "--out", str(out), "--perfetto",
                        str(perf)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["schema_version"] == 2 and {"op_stats", "comparison", "findings", "steps", "memory"} <= set(doc)
    assert all({"program", "name"} <= set(o) for f in doc["findings"] for o in f["ops"])
    trace = json.loads(gzip.decompress(perf.read_bytes()))
    ops = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert ops and all("predicted_us" in e["args"] and "ratio" in e["args"] for e in ops if e["args"].get("bound")
                       in ("compute", "memory"))
    assert any(e["ph"] == "M" and e["name"] == "process_name" for e in trace["traceEvents"])
    back = rl.trace.op_stats(rl.load(perf))  # our own reader takes it back: same ops, same times
    orig = rl.trace.op_stats(rl.load(logs))
    assert {(s.name, s.occurrences) for s in back.op_stats} == {(s.name, s.occurrences) for s in orig.op_stats}
    assert sum(s.total_time_s for s in back.op_stats) == pytest.approx(sum(s.total_time_s for s in orig.op_stats))


def test_a_users_own_chip_renders_to_html(report_html, tmp_path):
    """A Chip made by the user (in no catalogue) is the report's roofline and its page renders."""
    import dataclasses

    from rooflens.hardware import Figure

    base = rl.chip("h100-sxm")
    mine = dataclasses.replace(base, name="my-accelerator", description="a user's own chip", figures={
        **base.figures, "memory.hbm_bytes_per_s": Figure(1.5e12, "my datasheet, table 2")})
    rep = rl.analyze(rl.load(report_html.parent / "logs"), chip=mine)
    assert rep.chip == "my-accelerator" and rep.roofs.hbm_bytes_per_s == 1.5e12
    text = render_html(rep)
    assert "my-accelerator: peak" in text and "1.5e+12 B/s" in text
