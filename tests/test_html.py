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
    assert 'id="roof"' in dom and 'class="point' in dom  # the roofline with its ops (ringed: "point above-roof")
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
    env["COLUMNS"] = "100"  # a 100-column terminal: the op names must stay whole (issue 38)
    t0 = time.time()
    r = subprocess.run([sys.executable, "-m", "rooflens.cli", "demo", "--out", str(tmp_path / "demo")],
                       capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert time.time() - t0 < 120
    html = tmp_path / "demo" / "report.html"
    assert html.is_file() and "rooflens-data" in html.read_text()
    assert "8 devices" in r.stdout and "On tpu-v5e" in r.stdout and str(html) in r.stdout
    assert (tmp_path / "cache" / "local.toml").is_file()
    # no terminal: the progress (its last line too) goes to stderr, stdout carries the report alone
    rows = [line for line in r.stdout.splitlines() if line.startswith("│")]
    assert rows and all(len(line) <= 100 for line in r.stdout.splitlines() if line[:1] in "│┃┏┡└")
    ops = {line.split("│")[1].strip() for line in rows if line.split("│")[1].strip().startswith("all-")}
    # the all-reduces in the tables (nine, of which a loaded machine's timings may push one or two below the top
    # rows), each by its whole name
    assert len(ops) >= 6 and all(re.fullmatch(r"all-reduce(\.\d+)?", o) for o in ops), ops
    bar_lines = ("starting JAX", "calibrating", "compiling", "capturing", "comparing", "predicting", "done")
    assert any(line.startswith("done") for line in r.stderr.splitlines())
    assert not any(line.startswith(bar_lines) for line in r.stdout.splitlines())
    assert r.stdout.lstrip().startswith(str(tmp_path / "demo" / "logs"))
    first_run = {p.name for p in (tmp_path / "demo" / "logs" / "plugins" / "profile").iterdir()}
    r2 = subprocess.run([sys.executable, "-m", "rooflens.cli", "demo", "--out", str(tmp_path / "demo")],
                        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    # a second demo replaces its own previous output in place, and says so (never a silent demo-2)
    assert r2.returncode == 0 and str(html) in r2.stdout, r2.stderr[-2000:]
    assert "replacing the previous demo's output" in r2.stderr
    assert not (tmp_path / "demo-2").exists()
    runs = {p.name for p in (tmp_path / "demo" / "logs" / "plugins" / "profile").iterdir()}
    assert len(runs) == 1 and runs != first_run  # one trace, the new one: `rooflens report demo/logs` reads it


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
    assert "my-accelerator: peak" in text and "1.5 TB/s" in text


# -- the pages as a person sees them: boxes measured in Chromium ----------------------------------------

# Run in the page after it is drawn: the page's width against the window's, every element that reaches past
# the right edge outside a scrolling box, and the boxes and texts of the parts the tests name.
PROBE = """<script>
window.addEventListener("load", () => setTimeout(() => {
  const W = document.documentElement.clientWidth, box = e => { const r = e.getBoundingClientRect();
    return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, text: e.textContent, hidden: !e.offsetParent && e.tagName !== "svg" && !(e instanceof SVGElement) || getComputedStyle(e).display === "none"}; };
  const scrolls = e => { for (let p = e.parentElement; p && p !== document.body; p = p.parentElement) {
    const o = getComputedStyle(p).overflowX; if (o === "auto" || o === "scroll" || o === "hidden") return true; } return false; };
  const out = {scrollWidth: document.documentElement.scrollWidth, clientWidth: W, past: [], parts: {}};
  for (const e of document.querySelectorAll("body *")) { const r = e.getBoundingClientRect();
    if (r.width > 0 && r.right > W + 1 && !scrolls(e)) out.past.push(e.tagName + "#" + e.id); }
  for (const sel of SELECTORS) out.parts[sel] = [...document.querySelectorAll(sel)].map(box);
  const pre = document.createElement("pre"); pre.id = "rooflens-probe"; pre.textContent = JSON.stringify(out);
  document.body.append(pre);
}, 300));
</script>"""


def probe_page(page_html: str, tmp_path, selectors, fragment: str = "", width: int = 1300) -> dict:
    """The page loaded in headless Chromium at ``width`` pixels: what PROBE measured, as a dict."""
    import html as html_lib
    import json
    import re

    exe = chromium()
    script = PROBE.replace("SELECTORS", json.dumps(list(selectors)))
    path = tmp_path / "probed.html"
    path.write_text(page_html.replace("</body>", script + "</body>"))
    dom = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=8000",
                          f"--window-size={width},1200", "--dump-dom", path.as_uri() + fragment],
                         capture_output=True, text=True, timeout=120).stdout
    m = re.search(r'<pre id="rooflens-probe">(.*?)</pre>', dom, re.S)
    assert m, dom[-2000:]
    return json.loads(html_lib.unescape(m.group(1)))


def overlap(a: dict, b: dict) -> bool:
    return a["left"] < b["right"] - 0.5 and b["left"] < a["right"] - 0.5 and a["top"] < b["bottom"] - 0.5 \
        and b["top"] < a["bottom"] - 0.5


def test_report_page_is_per_step_with_legends_and_stays_inside_the_window(report_html, tmp_path):
    """What issue 38 found on the page: charts summed over devices × steps under a footer saying per device,
    no legend or axis on expected vs observed and its ratio labels over the bars, points above the roof not
    flagged, few ticks, a graph and tables wider than the window."""
    from rooflens.units import fmt_seconds

    rep = rl.analyze(rl.load(report_html.parent / "logs"))
    heaviest = max(rep.comparison, key=lambda c: c.total_time_s)
    got = probe_page(render_html(rep), tmp_path, [
        "#categories text", ".per-step", "#expected-legend span", "#expected .ratio-label", "#expected .bar-measured",
        "#expected .bar-roofline", "#expected .axis-label", "#roofline .x-tick", "#roofline .y-tick",
        "#roofline .point", "#roofline .above-roof", "#roofline-note", "#graph svg", "#footer"],
        fragment=f"#op={heaviest.program}/{heaviest.name}")
    p = got["parts"]
    assert got["scrollWidth"] <= got["clientWidth"] and not got["past"], got["past"][:10]
    # per device per step, computed here from the op table: self time by category ÷ (devices × steps)
    assert rep.steps is not None and rep.steps.basis == "steps"
    per = {}
    for s in rep.op_stats:
        per[s.category] = per.get(s.category, 0.0) + s.self_time_s / (rep.num_devices * rep.stats.steps.count)
    texts = [t["text"] for t in p["#categories text"]]
    for category, seconds in per.items():
        if seconds > 0:
            assert texts[texts.index(category) + 1] == fmt_seconds(seconds), (category, texts)
    assert all(s["text"] == "(per device per step)" for s in p[".per-step"]) and len(p[".per-step"]) == 2
    assert "per device per step" in p["#footer"][0]["text"]
    # expected vs observed: a legend, a time axis, and each ratio label clear of every bar
    assert [s["text"] for s in p["#expected-legend span"]][:2] == ["measured", "roofline (expected)"]
    assert len(p["#expected .axis-label"]) >= 3 and p["#expected .axis-label"][0]["text"] == "0 s"
    bars = p["#expected .bar-measured"] + p["#expected .bar-roofline"]
    assert p["#expected .ratio-label"] and bars
    assert not [(lab["text"], bar) for lab in p["#expected .ratio-label"] for bar in bars if overlap(lab, bar)]
    # an op whose ratio is withheld (faster than its roofline) is "unreliable", as in the op table, not "unpriced"
    ordered = sorted(rep.comparison, key=lambda c: -c.total_time_s)[:15]
    labels = [lab["text"] for lab in p["#expected .ratio-label"]]
    assert len(labels) == len(ordered)
    for c, label in zip(ordered, labels):
        if c.ratio is None:
            assert label == ("unreliable" if not c.roofline_reliable else "unpriced"), (c.name, label)
    # the roofline: at least four labelled ticks per axis, and every point above the roof ringed and counted
    assert len(p["#roofline .x-tick"]) >= 4 and len(p["#roofline .y-tick"]) >= 4
    assert all("e" not in t["text"].replace("FLOP", "") for t in p["#roofline .y-tick"])  # 1 GFLOP/s, not 1e9
    above = len(p["#roofline .above-roof"])
    assert (f"{above} above the roof" in p["#roofline-note"][0]["text"]) == (above > 0)
    # the op's HLO graph is drawn inside its box, within the window
    if p["#graph svg"]:
        assert p["#graph svg"][0]["right"] <= got["clientWidth"] + 1


def test_report_page_hides_an_empty_scope_panel(tmp_path):
    """A trace whose ops carry no named scope (XProf's TPU v6e inference capture): no blank panel; expected
    vs observed takes the row."""
    from tests.conftest import fixture_path

    rep = rl.analyze(rl.load(fixture_path("tpu", "xprof_tpu_inference_2.v6e-4.xplane.pb")))
    assert not rep.by_scope_per_step_s
    got = probe_page(render_html(rep), tmp_path, ["#scopes-box", "#expected-box", "#expected .ratio-label"])
    assert got["parts"]["#scopes-box"][0]["hidden"]
    box = got["parts"]["#expected-box"][0]
    assert box["right"] - box["left"] > 0.8 * got["clientWidth"] - 80  # the whole row, not half of it
    assert got["scrollWidth"] <= got["clientWidth"] and not got["past"]


def test_diff_page_has_a_legend_for_its_stacked_bars(report_html, tmp_path):
    from rooflens.report.html import render_diff_html

    rep = rl.analyze(rl.load(report_html.parent / "logs"))
    d = rl.diff(rep, rep)
    got = probe_page(render_diff_html(d), tmp_path, ["#shares rect.share", "#shares-legend span", "#shares text"])
    p = got["parts"]
    shown = [c for c in d.categories if c.share_a > 0]
    assert len(p["#shares-legend span"]) == len(d.categories) and len(p["#shares rect.share"]) >= 2 * len(shown)
    assert [t["text"] for t in p["#shares text"]] == ["A", "B"]
    assert all(s["text"].startswith(c.category) for s, c in zip(p["#shares-legend span"], d.categories, strict=True))
    assert got["scrollWidth"] <= got["clientWidth"] and not got["past"]


def test_pages_write_quantities_as_rooflens_units_does(tmp_path):
    """The pages' formatter (templates/units.js) and rooflens.units agree on the boundaries: the unit is
    chosen after rounding (999.981 µs is 1 ms), zero, unknown, huge and tiny values."""
    import json
    from importlib import resources

    from rooflens.units import fmt_bytes, fmt_percent, fmt_ratio, fmt_seconds, fmt_si

    seconds = [0.000999981, 0.0009994, 0, None, 1e-13, 5e-10, 0.9999996, 59.99, 999.7, 7200, 1e6, -0.002, 3.4e-5]
    sizes = [0, 512, 999.6, 2048, 4.19e6, 67108864, 1e15, 1e20, None]
    rates = [1.97e14, 4.5e10, 999.95, 0.5, 1e25, None]
    shares = [0.346, 0.0004, 0.00042, 1e-6, 0, 1, None]
    ratios = [1.2549, 232.67, 1974.7, 0.0944, None]
    units_js = (resources.files("rooflens.report") / "templates" / "units.js").read_text()
    page = ("<html><body><script>" + units_js + f"""
const out = {{t: {json.dumps(seconds)}.map(t), b: {json.dumps(sizes)}.map(bytes), s: {json.dumps(rates)}.map(v => si(v, "B/s")),
             p: {json.dumps(shares)}.map(pct), r: {json.dumps(ratios)}.map(ratio)}};
const pre = document.createElement("pre"); pre.id = "units"; pre.textContent = JSON.stringify(out); document.body.append(pre);
</script></body></html>""")
    got = probe_page(page, tmp_path, ["#units"])["parts"]["#units"][0]["text"]
    js = json.loads(got)
    assert js["t"] == [fmt_seconds(v) for v in seconds] and fmt_seconds(0.000999981) == "1 ms"
    assert js["b"] == [fmt_bytes(v) for v in sizes]
    assert js["s"] == [fmt_si(v, "B/s") for v in rates]
    assert js["p"] == [fmt_percent(v) for v in shares]
    assert js["r"] == [fmt_ratio(v) for v in ratios]


def test_op_detail_source_stack_is_the_users_code(report_html):
    """Issue 38: the op detail's Python stack listed rooflens's capture and click frames; it lists the
    user's (here this test file, which defined the step) and says how many others it left out."""
    import re

    rep = rl.analyze(rl.load(report_html.parent / "logs"))
    lines = [line.strip() for c in rep.comparison for line in c.hlo]
    frames = [line for line in lines if re.match(r".+\.py:\d+", line)]  # a checkout's path may hold a space
    assert any("test_html.py" in f for f in frames), lines[:40]
    assert not [f for f in frames if re.search(r"/src/rooflens/|-packages/(rooflens|click|_pytest|pluggy)/", f)]
    assert any(re.fullmatch(r"\(\d+ frames of rooflens, click, runpy or a test runner left out\)", line)
               for line in lines)


def test_a_gpu_report_with_long_op_names_stays_inside_the_window(tmp_path):
    """The MaxText archive's findings name ops such as loop_dynamic_update_slice_fusion.2.double_buffer_clone, one
    unbreakable link after another: they wrap inside the finding, the page no wider than the window."""
    from rooflens.api import load_report
    from tests.conftest import fixture_path

    rep = load_report(str(fixture_path("gpu_nvidia", "maxtext_fsdp4_h100.nsys-jax.zip")))
    assert any(len(str(o)) > 60 for f in rep.findings for o in f.ops)
    got = probe_page(render_html(rep), tmp_path, ["#findings"])
    assert got["scrollWidth"] <= got["clientWidth"] and not got["past"], got["past"][:10]
