"""Findings an expert would sign (issue 34), on traces nobody here made and on real JAX runs.

* overhead is device time outside kernels, from the measured gaps: never a medium/high overheads
  finding where the device is idle under 5 % of the step;
* every finding says what fixing it gives back per step (``recoverable_s``), never more than the
  step, and the findings are ordered by it;
* ops are named by (program, name) in the comparison, the findings, the terminal table, the JSON;
* an unknown MFU or roofline stays unknown (null in the JSON, "unknown" and why in the views);
* a custom call with a matmul's signature (vLLM TPU's Pallas quantized matmul) is priced as one;
* a slow op's cause is named only when its HLO shows it (batch dims do not tile).

The quantized-matmul HLO line is the one issue 34 quotes from a real vLLM TPU trace's ``long_name``.
"""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

import rooflens as rl
from rooflens.analysis.budget import BudgetError, evaluate, parse_budget
from rooflens.analysis.compare import analyze
from rooflens.analysis.rules.common import excess_per_step, outside_kernels
from rooflens.analysis.rules.device_time import SLOW_RATIO, is_slow_op, tile_use
from rooflens.analysis.trust import price_from_text
from rooflens.cost.counts import matmul_dims
from rooflens.cost.kernels import instruction_module, kernel_cost, matmul_signature
from rooflens.cost.model import costs, price
from tests.conftest import fixture_path

FIXTURES = {
    "vllm": (("tpu", "vllm_tpu_qwen3_2026_01_11_21_26_41.trace.json.gz"), "tpu-v6e"),
    "xprof": (("tpu", "xprof_tpu_inference_2.v6e-4.xplane.pb"), None),
    "gemm": (("gpu_amd", "tracelens_mi300x_jax08_gemm.xplane.pb"), None),
    "conv": (("gpu_amd", "tracelens_mi300x_jax_conv_minimal_legacy.xplane.pb"), None),
    "pax": (("gpu_nvidia", "nsys_jax_pax_fsdp4_a100"), None),
}
_REPORTS: dict = {}

#: issue 34: one event's long_name in a vLLM TPU serving trace (fp4 weights, per-block f32 scales)
QMM = ("%quantized_matmul_kernel_.3 = bf16[1024,5120]{1,0:T(8,128)(2,1)} custom-call(bf16[1024,5120]{1,0:T(8,128)"
       "(2,1)} %x, f4e2m1fn[5120,5120]{1,0:T(8,128)(8,1)} %w, f32[10,1,5120]{2,1,0:T(1,128)} %s), "
       'custom_call_target="tpu_custom_call"')


def report_of(name: str):
    if name not in _REPORTS:
        parts, chip = FIXTURES[name]
        _REPORTS[name] = rl.analyze(rl.load(str(fixture_path(*parts))), chip=chip)
    return _REPORTS[name]


def terminal(rep) -> str:
    from rich.console import Console

    from rooflens.report.trace_view import render_report

    out = io.StringIO()
    render_report(Console(file=out, width=400, color_system=None), rep, "x", top=30)
    return out.getvalue()


def device_idle_share(rep) -> float:
    """The device's measured idle share: its gaps (window less the busy union) over its window, the
    largest over devices, and the step breakdown's own idle over the step."""
    devices = max((d.idle_s / d.window_s for d in rep.stats.devices if d.window_s > 0), default=0.0)
    step = rep.steps.idle_s / rep.steps.step_time_s if rep.steps and rep.steps.step_time_s else 0.0
    return max(devices, step)


# -- every finding priced, ordered by it, never above the step ------------------------------------

def check_findings(rep) -> None:
    assert [f.recoverable_s for f in rep.findings] == sorted((f.recoverable_s for f in rep.findings), reverse=True)
    for f in rep.findings:
        assert f.recoverable_s >= 0 and f.step_s >= 0, f
        if f.step_s:
            assert f.recoverable_s <= f.step_s + 1e-15, f
        assert all(o.program and o.name for o in f.ops), f  # (program, name)
        if f.rule == "overheads" and f.severity in ("high", "medium"):
            assert outside_kernels(rep).window_s and device_idle_share(rep) >= 0.05, f
    doc = json.loads(json.dumps(rep.to_json(), default=str))
    assert doc["schema_version"] == 2
    for f in doc["findings"]:
        assert {"recoverable_s", "step_s", "per", "program"} <= set(f)
        assert all(set(o) == {"program", "name"} for o in f["ops"])
    assert all(c["program"] for c in doc["comparison"])


@pytest.mark.parametrize("name", list(FIXTURES))
def test_real_traces_findings_priced_sorted_and_named_by_program(name):
    rep = report_of(name)
    check_findings(rep)
    assert all(c.program for c in rep.comparison)
    assert len({(c.program, c.name) for c in rep.comparison}) == len(rep.comparison)
    text = terminal(rep)
    header = next(line for line in text.splitlines() if " op " in line and " ratio " in line)
    assert " program " in header
    rows = [c for c in sorted(rep.comparison, key=lambda c: -c.total_time_s)[:5]]
    assert all(any(c.name in line and c.program in line for line in text.splitlines()) for c in rows)
    assert "MFU 0.0%" not in text and "MFU 0%" not in text
    assert text.count("fixing this would save") == len(rep.findings)


def test_a_busy_device_has_no_overheads_and_the_ops_own_their_excess():
    """vLLM decode on TPU: the device is idle 0.04 % of the step. The step's excess over its roofline sum is
    inside kernels (ops each moderately off their roofline), not overhead."""
    rep = report_of("vllm")
    assert device_idle_share(rep) < 0.01
    assert "overheads" not in {f.rule for f in rep.findings}
    f = next(f for f in rep.findings if f.rule == "kernel-inefficiency")
    st = rep.steps
    # every op of the step priced by a roofline it can be held to, bar collectives and the slow ops named apart
    mine = [c for c in rep.comparison if c.program == st.program and c.ratio is not None and c.roofline_reliable
            and c.roofline_bound != "lower" and c.category not in ("collective", "host transfer")
            and not c.opcode.endswith(("-start", "-done")) and not is_slow_op(rep, c)]
    assert f.recoverable_s == pytest.approx(sum(excess_per_step(rep, c) for c in mine), rel=1e-6)
    assert not any(f.rule == "slow-op" for f in rep.findings) or all(c.ratio <= SLOW_RATIO for c in mine)
    assert 0.10 * st.step_time_s <= f.recoverable_s < st.step_time_s - st.predicted_s
    assert f.per == f"execution of {st.program}" and f.step_s == st.step_time_s
    assert f.ops and all(o.program == st.program for o in f.ops)
    assert "largest contributors" in " ".join(f.evidence)


def test_gaps_inside_executions_are_the_overhead():
    """MI300X convolution: the device runs no op 43 % of each execution (gaps of ~100 µs between its kernels);
    the overhead is that measured time, as the step breakdown's own idle time says (within 10 %)."""
    rep = report_of("conv")
    f = next(f for f in rep.findings if f.rule == "overheads")
    st = rep.steps
    assert f.recoverable_s == pytest.approx(st.idle_s, rel=0.1)
    assert f.severity == "high" and f.recoverable_s / f.step_s >= 0.2
    assert "gap inside an execution" in " ".join(f.evidence)
    idle = next(f for f in rep.findings if f.rule == "idle")  # the gaps between executions: not counted twice
    assert idle.recoverable_s == pytest.approx(idle.step_s)  # more idle per execution than the execution: capped
    assert f.recoverable_s < idle.recoverable_s


def test_slow_op_saving_is_its_excess_times_its_runs():
    rep = report_of("gemm")
    f = next(f for f in rep.findings if f.rule == "slow-op")
    (op,) = f.ops
    c = next(c for c in rep.comparison if (c.program, c.name) == op)
    runs = c.runs / rep.num_devices / next(p for p in rep.programs if p.program == c.program).periods
    assert f.recoverable_s == pytest.approx((c.measured_s - c.predicted_s) * runs)
    assert str(op) in f.title and f.program == c.program


def test_memory_and_model_findings_save_no_time():
    rep = report_of("pax")
    trust = next(f for f in rep.findings if f.rule == "roofline-trust")
    assert trust.recoverable_s == 0 and trust.step_s == rep.steps.step_time_s
    assert rep.findings[-1].recoverable_s == 0


# -- unknown stays unknown ------------------------------------------------------------------------

def test_unknown_mfu_and_roofline_are_unknown_not_zero():
    rep = report_of("xprof")  # a roofline (v6e), but no dot or convolution in the step: no model FLOPs
    assert rep.roofs is not None and rep.steps.mfu is None
    text = terminal(rep)
    assert "MFU unknown (the step's model FLOPs are unknown" in text and "MFU 0" not in text
    assert json.loads(json.dumps(rep.to_json(), default=str))["steps"]["breakdown"]["mfu"] is None
    from rooflens.report.html import page_data

    assert ["MFU", "unknown (the step's model FLOPs are unknown: no dot, convolution or priced matmul-like kernel "
            "in it)"] in page_data(rep)["header"]["cards"]

    bare = analyze(rl.load(str(fixture_path(*FIXTURES["vllm"][0]))), require_roofline=False)  # no generation named
    assert bare.roofs is None
    br = json.loads(json.dumps(bare.to_json(), default=str))["steps"]["breakdown"]
    assert br["mfu"] is None and br["predicted_s"] is None and br["unpriced_s"] is None
    text = terminal(bare)
    assert "MFU unknown (no roofline)" in text and "roofline sum unknown" in text and "MFU 0" not in text
    cards = dict(map(tuple, page_data(bare)["header"]["cards"]))
    assert cards["roofline"].startswith("unknown: the trace names no TPU generation") and cards["MFU"].startswith(
        "unknown (no roofline")


def test_a_tiny_mfu_is_not_printed_as_zero():
    from rooflens.report.text import percent

    assert percent(0.00042) == "0.042%" and percent(0.346) == "34.6%" and percent(0.0) == "0%"


# -- matmul-shaped custom calls -------------------------------------------------------------------

def test_the_vllm_quantized_matmul_line_is_priced_as_a_matmul():
    m = instruction_module(QMM)
    ins = m.instructions()[0]
    mm = matmul_signature(m, ins)
    assert (mm.batch, mm.m, mm.n, mm.k, mm.dtype, mm.weight_dtype) == (1, 1024, 5120, 5120, "bf16", "f4e2m1fn")
    kc = kernel_cost(m, ins)
    assert kc.kernel == "matmul-shaped custom call" and kc.bound == "inferred" and "inferred from shapes" in kc.note
    assert kc.flops == kc.model_flops == 2 * 1024 * 5120 * 5120
    weights = rl.hlo.parse_shape("f4e2m1fn[5120,5120]{1,0:T(8,128)(8,1)}").padded_bytes
    assert kc.read_bytes == 1024 * 5120 * 2 + weights + 10 * 5120 * 4 and kc.written_bytes == 1024 * 5120 * 2
    op = next(c for c in costs(m, emulate_fusion=False) if c.name == ins.name)
    p = price(op, rl.chip("tpu-v6e"))
    assert p.peak_key == "bf16" and p.t_math_s == pytest.approx(kc.flops / 9.2e14) and p.bound == "compute"


def test_quantized_matmuls_of_a_trace_without_program_hlo_are_priced_from_their_lines():
    """The path a TPU Chrome trace takes: no program HLO, each op's own HLO line (``long_name``)."""
    table = rl.load(str(fixture_path(*FIXTURES["vllm"][0]))).table
    key = ("jit_step_fun", "quantized_matmul_kernel_.3")
    preds, kernels = price_from_text(dataclasses.replace(table, hlo_text={**table.hlo_text, key: QMM}), set(),
                                     rl.chip("tpu-v6e"), {})
    assert kernels[key].bound == "inferred" and preds[key].model_flops == 2 * 1024 * 5120 * 5120
    # the trace's own custom calls keep their kernels: ragged paged attention, no matmul inferred
    assert {k.kernel for name, k in kernels.items() if name != key} == {"ragged paged attention"}


@pytest.mark.parametrize("line, mnk, dtype", [
    # vLLM stores a weight [out, in] with per-channel scales; int8 weights and activations (w8a8)
    ("%q = bf16[256,4096]{1,0} custom-call(s8[256,5120]{1,0} %x, s8[4096,5120]{1,0} %w, f32[4096]{0} %s, "
     'f32[256,1]{1,0} %xs), custom_call_target="tpu_custom_call"', (1, 256, 4096, 5120), "s8"),
    # batch dims (experts), fp8 activation, per-expert per-channel scales
    ("%q = bf16[8,128,1024]{2,1,0} custom-call(f8e4m3fn[8,128,512]{2,1,0} %x, f8e4m3fn[8,512,1024]{2,1,0} %w, "
     'f32[8,1,1024]{2,1,0} %s), custom_call_target="tpu_custom_call"', (8, 128, 1024, 512), "f8e4m3fn"),
])
def test_matmul_signatures(line, mnk, dtype):
    m = instruction_module(line)
    mm = matmul_signature(m, m.instructions()[0])
    assert (mm.batch, mm.m, mm.n, mm.k) == mnk and mm.dtype == dtype
    assert matmul_dims(m, m.instructions()[0]) == type(matmul_dims(m, m.instructions()[0]))(*mnk)
    op = next(c for c in costs(m, emulate_fusion=False))
    assert price(op, rl.chip("tpu-v6e")).peak_key == ("int8" if dtype == "s8" else "fp8")  # the activation's rate


@pytest.mark.parametrize("line", [
    # a second operand as large as the weight is not a scale: no matmul's signature
    '%c = bf16[64,256]{1,0} custom-call(bf16[64,128]{1,0} %a, bf16[128,256]{1,0} %b, bf16[128,256]{1,0} %c), '
    'custom_call_target="tpu_custom_call"',
    # a host callback is Python on the host, not a kernel
    '%c = bf16[64,256]{1,0} custom-call(bf16[64,128]{1,0} %a, s8[128,256]{1,0} %b), '
    'custom_call_target="xla_ffi_python_cpu_callback"',
])
def test_not_a_matmul(line):
    m = instruction_module(line)
    kc = kernel_cost(m, m.instructions()[0])
    assert kc is None or kc.kernel != "matmul-shaped custom call"


# -- causes the HLO shows -------------------------------------------------------------------------

def test_batch_dims_do_not_tile():
    """A batched matmul with 4 tiny batch dims and large M, N, K fills the matrix unit: the old rule called its
    batch dim 4 a "small dimension" that pads; only M, N and K tile."""
    f = jax.jit(lambda a, b: jnp.einsum("bmk,bkn->bmn", a, b))
    text = f.lower(jax.ShapeDtypeStruct((4, 512, 256), jnp.bfloat16),
                   jax.ShapeDtypeStruct((4, 256, 384), jnp.bfloat16)).compile().as_text()
    m = rl.hlo.parse(text)
    dot = next(i for i in m.instructions() if i.opcode == "dot")
    mm = matmul_dims(m, dot)
    assert (mm.batch, mm.m, mm.n, mm.k) == (4, 512, 384, 256)
    assert tile_use(mm, 128) == 1.0 and tile_use(mm, 256) == pytest.approx(384 / 512)
    small = matmul_dims(m, dot).__class__(1, 8, 64, 40)  # decode-like: N and K a fraction of a tile
    assert tile_use(small, 128) == pytest.approx(64 / 128 * 40 / 128)


# -- budgets --------------------------------------------------------------------------------------

def test_recoverable_budgets(tmp_path):
    rep = report_of("conv")
    over = next(f for f in rep.findings if f.rule == "overheads")
    res = evaluate(rep, parse_budget(f"max_recoverable_share = 0.5\n[max_recoverable_s]\noverheads = "
                                     f"{over.recoverable_s * 0.5}\nslow-op = 1.0\n"))
    by = {c.budget: c for c in res.checks}
    assert not by["max_recoverable_s.overheads"].ok
    assert by["max_recoverable_s.overheads"].measured == pytest.approx(over.recoverable_s)
    assert by["max_recoverable_s.slow-op"].ok
    top = rep.findings[0]
    assert by["max_recoverable_share"].measured == pytest.approx(top.recoverable_s / top.step_s)
    assert not by["max_recoverable_share"].ok  # the idle finding gives back its whole execution
    prog = evaluate(rep, parse_budget(f'[program."{rep.steps.program}".max_recoverable_s]\noverheads = 1.0\n'))
    assert prog.ok and prog.checks[0].measured == pytest.approx(over.recoverable_s)
    with pytest.raises(BudgetError, match="names no finding"):
        parse_budget("[max_recoverable_s]\noverhead = 0.1\n")
    budget = tmp_path / "rooflens.toml"
    budget.write_text("[max_recoverable_s]\noverheads = 0.0001\n")
    r = subprocess.run([sys.executable, "-m", "rooflens.cli", "check", str(fixture_path(*FIXTURES["conv"][0])),
                        "--budget", str(budget)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "max_recoverable_s.overheads" in r.stderr + r.stdout


# -- the views ------------------------------------------------------------------------------------

def test_views_say_what_a_fix_is_worth():
    from rooflens.report.html import page_data, render_html
    from rooflens.report.notebook import report_cell
    from rooflens.report.text import saving_line

    rep = report_of("conv")
    f = rep.findings[0]
    line = saving_line(f)
    assert line.startswith("fixing this would save ~") and f"execution of {rep.steps.program}" in line
    data = page_data(rep)
    assert data["findings"][0]["saving"] == line and data["findings"][0]["ops"] == [
        {"program": o.program, "name": o.name} for o in f.ops]
    assert line in render_html(rep)
    assert "fixing this would save ~" in report_cell(rep)
    assert line in terminal(rep)


# -- a real JAX run on CPU ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def local_chip():
    """The CPU's roofline: the `local` chip calibrated (quick settings) into the test cache directory."""
    from rooflens.hardware import calibrate

    calibrate.save(calibrate.measure(repeats=3, sizes=(256, 512, 1024), copy_bytes=32 << 20))


def test_a_real_cpu_run(sharded_cpu_trace, local_chip):
    rep = rl.analyze(rl.load(sharded_cpu_trace))
    check_findings(rep)
    assert rep.steps.basis == "steps" and all(c.program for c in rep.comparison)
    text = terminal(rep)
    assert " program " in next(line for line in text.splitlines() if " op " in line and " ratio " in line)
    assert "MFU 0.0%" not in text


def test_host_round_trips_inside_a_step_are_priced_once(tmp_path, local_chip):
    """A step of two programs with host work between them: the device waits for the host between the two
    executions. That wait is counted once, by the idle finding (a large share) or as overhead (a moderate
    one), at the measured time."""
    import time

    a = jax.jit(lambda x: jnp.tanh(x @ x))
    b = jax.jit(lambda x: jnp.sin(x @ x.T))
    x = jnp.ones((768, 768))
    s = rl.trace.Session(tmp_path, warmup=1, steps=5)
    with s:
        for _ in range(6):
            with s.step():
                y = a(x).block_until_ready()
                time.sleep(0.006)
                b(y).block_until_ready()
    rep = rl.analyze(s.profile)
    check_findings(rep)
    names = {f.rule for f in rep.findings}
    waits = [f for f in rep.findings if f.rule in ("idle", "overheads")]
    assert len(waits) == 1, names
    (f,) = waits
    assert 0.006 <= f.recoverable_s <= f.step_s
    if f.rule == "overheads":
        assert "host round-trips" in f.cause and f.severity in ("medium", "high")
