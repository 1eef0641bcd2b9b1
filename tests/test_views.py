"""The two views of issue 18: memory over the program (live bytes over XLA's schedule) and op graphs."""

import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

import rooflens as rl
from rooflens.cli.common import example_hlo_path
from rooflens.hlo.graph import op_graph
from rooflens.report.graph_view import render_graph_svg
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
    # at the peak (inside the backward pass) the forward tanh's output, 512×1024 f32, is held for the backward
    # dots: it is the one activation there (XLA schedules a backward broadcast before it: uses decide, not order)
    held = [b for b in tl.peak_buffers if b.kind == "activations"]
    assert [(b.named_scope, b.bytes) for b in held] == [("forward", 512 * 1024 * 4)], tl.peak_buffers
    assert peak.activations_bytes == 512 * 1024 * 4
    assert max(p.activations_bytes for p in tl.points) == 512 * 1024 * 4
    assert tl.state_bytes == prog.state_bytes > 0
    assert [m.label for m in tl.measured] == ["before", "step_0", "step_1"]
    doc = rep.to_json()["memory"]["programs"][0]["timeline"]
    assert doc["points"][tl.peak_position]["position"] == tl.peak_position
    assert doc["points"][tl.peak_position]["live_bytes"] == tl.peak_bytes
    json.dumps(doc)
    r = run("memory", str(logdir))
    assert r.returncode == 0, r.stderr
    assert f"at position {tl.peak_position}" in r.stdout and "█" in r.stdout


def test_html_holds_the_memory_chart_and_the_graphs(captured):
    _, _, rep = captured
    html = render_html(rep)
    assert "memoryChart" in html and '"peak_position"' in html and '"timelines"' in html
    top = max(rep.comparison, key=lambda c: c.total_time_s)
    assert f"{top.program}/{top.name}" in rep.graphs
    assert set(rep.to_json()["graphs"]) == set(rep.graphs)


@pytest.fixture(scope="module")
def example():
    return rl.hlo.parse(example_hlo_path().read_text())


def _uses(body):
    """(producer, consumer, operand index) for every operand use inside a body."""
    names = {b.name for b in body}
    return {(op.name, b.name, k) for b in body for k, op in enumerate(b.operands) if op.name in names}


def test_fusion_graph_names_every_instruction_and_an_edge_per_operand_use(example):
    fusions = [i for i in example.top_level_instructions() if i.opcode == "fusion"]
    biggest = max(fusions, key=lambda i: len(example.called(i)[0].instructions))
    for ins in [biggest, *fusions[:25]]:
        g = op_graph(example, ins.name)
        body = example.called(ins)[0].instructions
        assert {b.name for b in body} <= {n.name for n in g.nodes}, ins.name
        edges = {(e.source, e.target, e.operand) for e in g.edges}
        assert _uses(body) <= edges, ins.name  # one edge per operand use (x*x: two)
        for b in body:
            n = g.node(b.name)
            assert n.opcode == b.opcode and n.shape == b.shape.dims_str() if b.shape.is_array else True
            if b.opcode == "parameter":  # joined to the fusion's operand
                src = ins.operands[b.parameter_number].name
                assert n.role == "parameter" and (f"outer:{src}", b.name, b.parameter_number) in edges
                assert f"← {src}" in n.detail
            if b.opcode in ("dot", "convolution"):
                assert n.role == "dot"
        for u in example.users(ins):  # the neighbourhood: users clickable
            assert g.node(f"outer:{u.name}").target == u.name
        assert all(len(e.points) >= 2 for e in g.edges) and g.width > 0 and g.cluster is not None
    dots = [i for i in fusions if any(b.opcode == "dot" for b in example.fusion_body(i))]
    g = op_graph(example, dots[0].name)
    assert [n.role for n in g.nodes if n.opcode == "dot"] == ["dot"]


def test_collective_graph_has_group_size_and_long_bodies_collapse(example):
    g = op_graph(example, "all-reduce.29")
    (me,) = [n for n in g.nodes if n.role == "op"]
    assert "groups of 4" in me.detail and g.notes  # 15 operands, more users than drawn
    # a long elementwise chain collapses into one node that lists its members
    text = """HloModule chain
fused {
  p0 = f32[8,128]{1,0} parameter(0)
""" + "".join(f"  e{i} = f32[8,128]{{1,0}} {'exponential' if i % 2 else 'tanh'}({'p0' if i == 0 else f'e{i - 1}'})\n"
              for i in range(50)) + """  ROOT r = f32[8,128]{1,0} add(e49, p0)
}
ENTRY main {
  a = f32[8,128]{1,0} parameter(0)
  ROOT f = f32[8,128]{1,0} fusion(a), kind=kLoop, calls=fused
}
"""
    m = rl.hlo.parse(text)
    g = op_graph(m, "f")
    chains = [n for n in g.nodes if n.role == "chain"]
    assert len(chains) == 1 and len(chains[0].members) == 50 and len(g.nodes) == 4  # a, p0, chain, r
    assert any("chains" in note for note in g.notes)


def test_hlo_graph_command_writes_an_svg_and_refuses_to_overwrite(example, tmp_path):
    out = tmp_path / "g.svg"
    fusion = next(i for i in example.top_level_instructions() if i.opcode == "fusion")
    r = run("hlo", "--example", "--op", fusion.name, "--graph", str(out))
    assert r.returncode == 0, r.stderr
    svg = out.read_text()
    assert svg.startswith("<svg") and svg.count('class="node') == len(op_graph(example, fusion.name).nodes)
    r = run("hlo", "--example", "--op", fusion.name, "--graph", str(out))
    assert r.returncode == 2 and "already exists" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert run("hlo", "--example", "--op", fusion.name, "--graph", str(out), "--force").returncode == 0
    r = run("hlo", "--example", "--op", "no-such-op", "--graph", str(tmp_path / "h.svg"))
    assert r.returncode == 2 and "no instruction named" in r.stderr and not (tmp_path / "h.svg").exists()


def test_graph_svg_keeps_markup_in_names_as_text():
    text = """HloModule m
ENTRY main {
  p = f32[4]{0} parameter(0), metadata={op_name="<script>alert(1)</script>"}
  ROOT n = f32[4]{0} negate(p)
}
"""
    svg = render_graph_svg(op_graph(rl.hlo.parse(text), "n"))
    assert "<script>" not in svg


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
    # an op opened (as a click does, through the page's #op= link): its graph drawn inline, neighbours clickable
    key = next(iter(rep.graphs))
    dom = subprocess.run([exe, *flags, "--dump-dom", page.as_uri() + "#op=" + key], capture_output=True, text=True,
                         timeout=120).stdout
    graph = dom[dom.index('class="op-graph"'):]
    graph = graph[:graph.index("</svg>")]
    for n in rep.graphs[key].nodes:
        assert f"{n.opcode} {n.name}" in graph
    assert graph.count('class="edge"') == sum(1 for e in rep.graphs[key].edges if len(e.points) >= 2)


def test_a_graphs_layout_is_the_same_every_time():
    """The H100 GPT step's ``loop_convert_multiply_fusion`` (29 nodes, 33 edges, several roots) was laid out two ways
    at random: grandalf gathers a component's edges in a set, ordered by the objects' addresses. Laid out eight
    times, with objects made and held between (addresses differ), it comes out the same."""
    from tests.conftest import fixture_path

    hlo = fixture_path("gpu_nvidia", "h100_jax0112", "window_no_command_buffers", "hlo", "module_35094.jit_train_step.txt")
    module = rl.hlo.parse(hlo.read_text())
    held, layouts = [], set()
    for k in range(8):
        held.append([object() for _ in range(37 * k + 1)])
        g = op_graph(module, "loop_convert_multiply_fusion")
        layouts.add(json.dumps([[(n.id, n.x, n.y) for n in g.nodes], [(e.source, e.target, e.points) for e in g.edges]]))
    (only,) = layouts
    nodes, edges = json.loads(only)
    assert len(nodes) == 29 and len(edges) == 33 and len({(x, y) for _, x, y in nodes}) == 29
