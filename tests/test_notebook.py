"""Results in notebooks: a real Jupyter kernel runs the workflow and each result displays as HTML;
``rl.to_html`` writes the pages; the display is registered on a real IPython shell."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import pytest

import rooflens as rl
from rooflens.errors import RooflensError
from rooflens.hardware import calibrate
from rooflens.report.notebook import cell_html, register

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

XSS = "<script>alert(1)</script>"

CELLS = [
    # 0: a step with a user's scope name that is also HTML
    """import json, time, jax, jax.numpy as jnp, rooflens as rl
def step(x, w):
    with jax.named_scope(%(xss)r):
        h = x @ w
    with jax.named_scope("ffn"):
        return h, jnp.tanh(h) @ w.T
x, w = jnp.ones((256, 256)), jnp.ones((256, 256))""",
    # 1: capture and analyze, the report inline
    """first = rl.analyze(rl.capture(step, x, w, steps=3, logdir=%(logdir_a)r))
first""",
    # 2: the same step on a chip we do not have
    """pred = rl.predict(step, x, w, chip="tpu-v5e")
pred""",
    # 3: a loop of one's own, with a slow data loader between the steps
    """with rl.trace.Session(%(logdir_b)r, warmup=1, steps=3) as session:
    for i in range(4):
        with session.step():
            out = step(x * i, w)
        time.sleep(0.05)
rep = rl.analyze(session.profile)
print(json.dumps([f.title for f in rep.findings]))
rep""",
    # 4: what changed
    """rl.diff(first, rep)""",
    # 5, 6: budgets and memory
    """rl.check(rep, {"max_recompiles": 1000})""",
    """first.memory""",
    """print(len(rl.to_html(rep, %(page)r)))""",
]


@pytest.fixture(scope="module")
def calibrated():
    if not rl.hardware.local_chip_path().is_file():
        calibrate.save(calibrate.measure(repeats=3, sizes=(256, 512), copy_bytes=16 << 20))


@pytest.fixture(scope="module")
def executed(calibrated, tmp_path_factory):
    """The notebook, run top to bottom in a real kernel with this checkout's rooflens."""
    tmp = tmp_path_factory.mktemp("nb")
    values = {"xss": XSS, "logdir_a": str(tmp / "a"), "logdir_b": str(tmp / "b"), "page": str(tmp / "page.html")}
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c % values) for c in CELLS])
    src = str(Path(rl.__file__).resolve().parents[1])
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([src, *([old] if old else [])])  # the kernel imports this rooflens
    try:
        nbclient.NotebookClient(nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(tmp)}}) \
            .execute()
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
    return nb, tmp


def _display(cell) -> dict:
    outs = [o for o in cell.outputs if o.output_type == "execute_result"]
    assert len(outs) == 1, cell.outputs
    return outs[0].data


def _outside_frames(html: str) -> str:
    return re.sub(r'srcdoc="[^"]*"', 'srcdoc=""', html)


def test_each_result_displays_as_html_in_a_real_kernel(executed):
    nb, tmp = executed
    cells = nb.cells
    titles = json.loads(next(o.text for o in cells[3].outputs if o.output_type == "stream"))
    assert any("idle" in t for t in titles), titles  # the loader's sleep leaves the device idle
    report = _display(cells[3])
    for title in titles:  # the findings, readable in the cell itself (outside the frame)
        assert title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in _outside_frames(
            report["text/html"])
    assert len(report["text/plain"]) < 300 and "Report" in report["text/plain"]  # not a megabyte repr
    for i, kind in ((1, "Report"), (2, "Prediction"), (4, "Diff"), (5, "CheckResult"), (6, "MemorySummary")):
        data = _display(cells[i])
        assert "text/html" in data and kind in data["text/plain"], (kind, data.keys())
    assert "tpu-v5e" in _display(cells[2])["text/html"]
    assert "every budget met" in _display(cells[5])["text/html"]
    assert "compiled peak" in _display(cells[6])["text/html"]
    assert (tmp / "page.html").is_file()


def test_cells_are_self_contained_and_scoped(executed):
    nb, _ = executed
    shown = [_display(nb.cells[i])["text/html"] for i in (3, 1, 2, 4)]
    for html in shown:
        outside = _outside_frames(html)
        # nothing that could restyle the notebook or collide with another cell's ids
        assert "<style" not in outside and "<script" not in outside and ' id="' not in outside
        assert 'sandbox="allow-scripts"' in outside  # the page runs in a frame of its own
        text = html.replace("http://www.w3.org/2000/svg", "")
        assert "http://" not in text and "https://" not in text  # no network
        assert XSS not in html  # the user's scope name is text, never markup
    assert "id=&quot;roofline&quot;" in shown[0] and "dataset.rendered" in shown[0]  # the whole page, escaped


def test_cells_render_in_headless_chromium(executed, tmp_path):
    """Two reports and a prediction on one page: drawn, with no script error in any frame."""
    from tests.test_html import chromium

    exe = chromium()
    nb, _ = executed
    shown = [_display(nb.cells[i])["text/html"] for i in (1, 3, 2, 4)]
    page = tmp_path / "cells.html"
    page.write_text("<!doctype html><html><head><meta charset='utf-8'></head><body>" + "".join(shown)
                    + "</body></html>")
    shot = tmp_path / "cells.png"
    r = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=8000",
                        "--window-size=1200,3200", "--enable-logging=stderr", "--v=0", f"--screenshot={shot}",
                        page.as_uri()], capture_output=True, text=True, timeout=120)
    assert shot.is_file() and shot.stat().st_size > 20_000
    console = [line for line in r.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not [c for c in console if "Uncaught" in c or "Error" in c], console


@pytest.fixture(scope="module")
def report(calibrated, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("to_html")
    prof = rl.capture(lambda x: jnp.tanh(x @ x), jnp.ones((128, 128)), steps=2, logdir=tmp / "logs")
    return rl.analyze(prof)


def test_to_html_writes_each_page_and_keeps_existing_files(report, tmp_path):
    out = tmp_path / "r.html"
    page = rl.to_html(report, out)
    assert out.read_text() == page and 'dataset.rendered' in page and "<!doctype html>" in page.lower()
    with pytest.raises(RooflensError, match="exists"):
        rl.to_html(report, out)
    assert rl.to_html(rl.diff(report, report), out, overwrite=True).count("rooflens diff") >= 1
    assert "rooflens diff" in out.read_text()
    pred = rl.predict(lambda x: x @ x, jnp.ones((128, 128)), chip="tpu-v5e")
    assert "tpu-v5e" in rl.to_html(pred) and "prediction" in rl.to_html(report, prediction=pred)
    with pytest.raises(RooflensError, match="directory"):
        rl.to_html(report, tmp_path)
    with pytest.raises(RooflensError, match="no HTML page"):
        rl.to_html(object())


def test_register_on_a_real_ipython_shell(report):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        assert register(shell)
        data, _ = shell.display_formatter.format(report)
        assert data["text/html"] == cell_html(report)
        assert data["text/plain"].startswith("<rooflens Report")
    finally:
        InteractiveShell.clear_instance()
    assert not register(object())  # no display formatter: nothing to register on


def test_analysis_never_imports_the_report_layer():
    """Displays are registered from above; the typed results never import their renderers."""
    root = Path(rl.__file__).parent
    checked = []
    for layer in ("analysis", "cost", "memory"):
        for f in (root / layer).rglob("*.py"):  # sub-packages too: analysis/rules/*.py
            text = f.read_text()
            assert not re.search(r"^\s*(from|import)\s+rooflens\.report\b", text, re.M), f
            assert not re.search(r"^\s*from\s+\.+report\b", text, re.M), f  # nor relatively
            checked.append(f.relative_to(root).as_posix())
    assert any(c.startswith("analysis/rules/") for c in checked), checked


def test_import_registers_the_display_when_ipython_runs():
    """``import rooflens`` inside a running IPython registers the HTML display by itself."""
    code = ("from IPython.core.interactiveshell import InteractiveShell; s = InteractiveShell.instance(); "
            "import rooflens; from rooflens.analysis import Report; "
            "print(Report in s.display_formatter.formatters['text/html'].type_printers)")
    src = str(Path(rl.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.stdout.strip() == "True", r.stderr
