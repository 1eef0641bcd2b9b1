"""The two views of issue 18: memory over the program (live bytes over XLA's schedule) and op graphs."""

import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

import rooflens as rl
from rooflens.report.html import render_html


def run(*args):
    return subprocess.run([sys.executable, "-m", "rooflens.cli", *args], capture_output=True, text=True, timeout=300)


def _mlp_train_step(p, x):
    def loss(p):
        with jax.named_scope("forward"):
            h = jnp.tanh(x @ p["w1"])  # the activation the backward pass needs
            return jnp.mean(h @ p["w2"])

    g = jax.grad(loss)(p)
    return jax.tree.map(lambda a, b: a - 1e-3 * b, p, g)


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("views") / "logs"
    params = {"w1": jnp.ones((256, 1024)), "w2": jnp.ones((1024, 256))}
    prof = rl.capture(_mlp_train_step, params, jnp.ones((512, 256)), steps=2, logdir=logdir)
    return logdir, prof, rl.analyze(prof, chip="h100-sxm")


def test_memory_timeline_peaks_at_the_compiled_peak(captured):
    logdir, prof, rep = captured
    (prog,) = rep.memory.programs
    tl = prog.timeline
    assert tl is not None and tl.positions == len(tl.points) > 10
    assert abs(tl.peak_bytes - prog.peak_bytes) <= 0.05 * prog.peak_bytes
    assert max(p.live_bytes for p in tl.points) == tl.peak_bytes
    peak = next(p for p in tl.points if p.position == tl.peak_position)
    assert peak.live_bytes == pytest.approx(peak.parameters_bytes + peak.outputs_bytes + peak.activations_bytes
                                            + peak.temporaries_bytes)
    # parameters flat over the whole program; the forward activation (512×1024 f32) held into the backward pass
    assert all(p.parameters_bytes == (256 * 1024 + 1024 * 256 + 512 * 256) * 4 for p in tl.points)
    assert max(p.activations_bytes for p in tl.points) >= 512 * 1024 * 4
    assert any(b.kind == "activations" and b.named_scope == "forward" for b in
               [b for b in tl.peak_buffers] + []) or any(p.activations_bytes for p in tl.points)
    assert tl.state_bytes == prog.state_bytes > 0
    assert [m.label for m in tl.measured] == ["before", "step_0", "step_1"]
    doc = rep.to_json()["memory"]["programs"][0]["timeline"]
    assert doc["points"][tl.peak_position]["position"] == tl.peak_position
    assert doc["points"][tl.peak_position]["live_bytes"] == tl.peak_bytes
    json.dumps(doc)
    r = run("memory", str(logdir))
    assert r.returncode == 0, r.stderr
    assert f"at position {tl.peak_position}" in r.stdout and "█" in r.stdout


def test_html_holds_the_memory_chart(captured):
    _, _, rep = captured
    html = render_html(rep)
    assert "memoryChart" in html and '"peak_position"' in html and '"timelines"' in html


def test_views_render_in_headless_chromium(captured, tmp_path):
    from tests.test_html import chromium

    exe = chromium()
    _, _, rep = captured
    page = tmp_path / "report.html"
    page.write_text(render_html(rep))
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=8000", "--window-size=1400,2600"]
    r = subprocess.run([exe, *flags, "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri()],
                       capture_output=True, text=True, timeout=120)
    console = [line for line in r.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not [c for c in console if "Uncaught" in c or "Error" in c], console
    dom = r.stdout
    assert 'data-rendered="yes"' in dom
    chart = dom[dom.index('class="memory-chart"'):]
    chart = chart[:chart.index("</svg>")]
    assert 'class="live-bytes"' in chart and 'class="peak"' in chart and 'class="state-line"' in chart
    assert 'class="kind-parameters"' in chart and 'class="measured"' in chart
