"""Real GPU captures made by this project on one H100 with jax/jaxlib 0.11.2 (bench/gpu_fixtures.sh, bench/gpu_check.sh;
tests/fixtures/SOURCES.md), read on this machine.

- A Flax/Optax MLP's step windowed twice: as XLA runs it, its thunks gathered into a command buffer whose kernels
  the trace labels ``command_buffer_1``, and with command buffers off, where each kernel names its own HLO op. The
  second is the oracle for the first's attribution (rooflens.trace.command_buffers).
- A loop traced from its start: XLA's autotuner times candidate kernels on the GPU while compiling.
"""

import re

import pytest

import rooflens as rl
from rooflens.hlo import parse
from rooflens.trace.stats import own_frames
from tests.conftest import fixture_path

H100 = ("gpu_nvidia", "h100_jax0112")


@pytest.fixture(scope="module")
def windows():
    return {k: rl.analyze(rl.load(fixture_path(*H100, k))) for k in ("window_command_buffers",
                                                                       "window_no_command_buffers")}


def _step_ops(rep):
    return {c.name: c for c in rep.comparison if c.program == "jit_train_step"}


def test_kernels_in_a_command_buffer_get_their_own_ops(windows):
    rep = windows["window_command_buffers"]
    (said,) = [n for n in rep.notes if "command buffers" in n]
    n = int(re.match(r"([\d,]+) GPU kernels", said).group(1).replace(",", ""))
    assert n > 100 and f"{n:,} were given back" in said and "could not be" not in said
    ops = _step_ops(rep)
    module = parse(next(fixture_path(*H100, "window_command_buffers", "hlo").glob("*jit_train_step.txt")).read_text())
    assert set(ops) <= {i.name for i in module.entry.instructions}  # every op an instruction, none a buffer's name
    matmuls = [c for c in ops.values() if c.category == "matmul"]
    assert len(matmuls) == 8 and all(c.occurrences == 2 * c.executions for c in matmuls)  # a memset, then the GEMM
    assert all(1.0 < c.ratio < 1.6 for c in matmuls)  # 2·4096³ bf16 FLOPs in ~172 µs against 139 µs at 989 TFLOP/s
    assert rep.steps.mfu is not None and 0.3 < rep.steps.mfu < 0.6


def test_the_chrome_copy_is_attributed_alike(windows):
    """The same capture's Chrome JSON (jaxlib's own export, beside the XSpace) carries the same labels: its kernels
    are given back to the same ops, as often."""
    chrome = rl.analyze(rl.load(fixture_path(*H100, "window_command_buffers", "vm.trace.json.gz")), chip="h100-sxm")
    a, b = _step_ops(windows["window_command_buffers"]), _step_ops(chrome)
    assert set(a) == set(b) and all(a[n].occurrences == b[n].occurrences for n in a)
    assert any("were given back" in n for n in chrome.notes)


def test_the_attribution_matches_the_run_without_command_buffers(windows):
    """The same program compiled without command buffers names each kernel's op: the ops both compilations share
    (the matmuls that stay cuBLAS calls, the optimizer's and the loss's fusions) take the same time per execution
    and run as often."""
    a, b = (_step_ops(windows[k]) for k in ("window_command_buffers", "window_no_command_buffers"))
    shared = sorted(set(a) & set(b))
    assert len(shared) >= 25
    assert all(a[n].occurrences == b[n].occurrences for n in shared)
    timed = [n for n in shared if b[n].measured_s > 10e-6]
    assert len(timed) >= 15
    off = {n: (a[n].measured_s, b[n].measured_s) for n in timed if abs(a[n].measured_s / b[n].measured_s - 1) > 0.1}
    assert not off, off
    sa, sb = (windows[k].steps for k in ("window_command_buffers", "window_no_command_buffers"))
    assert sa.compute_s == pytest.approx(sb.compute_s, rel=0.1)


def test_loop_bodies_in_a_command_buffer_get_their_own_ops():
    """A Flax GPT whose layers run under nn.scan: the kernels of the loops' bodies, in the command buffer, are given
    back to the body's ops. Against the same script without command buffers: the same ops, each over 5 µs within 15 %
    per execution, as often. A kernel that two fusions share, one inside a loop and one after it, is told apart by
    order alone and goes to the loop's (the loop runs it each trip, the rest once): 1 op of 156 here."""
    a, b = (_step_ops(rl.analyze(rl.load(fixture_path(*H100, k)))) for k in ("linen_gpt_window_command_buffers",
                                                                           "linen_gpt_window_no_command_buffers"))
    assert set(a) <= set(b) and len(b) > 150 and len(set(b) - set(a)) <= 0.02 * len(b), sorted(set(b) - set(a))
    assert not [n for n in a if n.startswith(("while", "command_buffer"))]
    off = {n: (a[n].measured_s, b[n].measured_s) for n in a
           if b[n].measured_s > 5e-6 and abs(a[n].measured_s / b[n].measured_s - 1) > 0.15}
    assert not off, off
    recounted = sorted(n for n in a if a[n].occurrences != b[n].occurrences)
    assert len(recounted) <= 0.02 * len(a), recounted


def test_launches_inside_command_buffers_are_said_to_be_the_profilers():
    """Under a profiler XLA runs a command buffer one launch at a time: the trace's gaps between its kernels are not
    the unprofiled run's. The overheads finding says so, and tiny-ops leaves those kernels out (one graph launch
    each, unprofiled); the same script compiled without command buffers pays every launch, and is told so."""
    with_buffers, without = (rl.analyze(rl.load(fixture_path(*H100, k))) for k in (
        "linen_gpt_window_command_buffers", "linen_gpt_window_no_command_buffers"))
    (f,) = [f for f in with_buffers.findings if f.rule == "overheads"]
    assert any("command buffers" in e and "one launch at a time" in e for e in f.evidence) and "unprofiled" in f.fix
    assert "tiny-ops" not in {f.rule for f in with_buffers.findings}
    assert "tiny-ops" in {f.rule for f in without.findings}
    (g,) = [f for f in without.findings if f.rule == "overheads"]
    assert not any("command buffers" in e for e in g.evidence)


def test_a_whole_run_traces_with_command_buffers_off(tmp_path):
    """rooflens run traces a whole run with XLA's command buffers off (an Equinox GPT's first step failed under a
    whole-run trace with them on, on this H100, with a bare jax.profiler trace too), unless the script's flags choose;
    a GPU report of such a run says so."""
    import json
    import shutil

    from rooflens.capture.launch import COMMAND_BUFFERS_OFF, whole_run_flags

    env = {"XLA_FLAGS": "--xla_dump_to=/tmp/d"}
    assert whole_run_flags(env) == [COMMAND_BUFFERS_OFF] and env["XLA_FLAGS"] == f"--xla_dump_to=/tmp/d {COMMAND_BUFFERS_OFF}"
    mine = {"XLA_FLAGS": "--xla_gpu_enable_command_buffer=FUSION,CUBLAS"}
    assert whole_run_flags(mine) == [] and mine["XLA_FLAGS"] == "--xla_gpu_enable_command_buffer=FUSION,CUBLAS"
    run = tmp_path / "run"
    shutil.copytree(fixture_path(*H100, "annotated_whole_run"), run)
    meta = json.loads((run / "rooflens.json").read_text())
    assert "xla_flags_added" not in meta  # captured before rooflens added it
    (run / "rooflens.json").write_text(json.dumps({**meta, "xla_flags_added": [COMMAND_BUFFERS_OFF]}))
    said = [n for n in rl.load(run).notes if "command buffers off" in n]
    assert len(said) == 1 and COMMAND_BUFFERS_OFF in said[0]
    assert not [n for n in rl.load(fixture_path(*H100, "annotated_whole_run")).notes if "command buffers off" in n]
    # the launch findings' evidence: an unprofiled run launches its command buffers as graphs
    from rooflens.analysis.rules.device_time import profiled_launches

    assert "command buffers off" in profiled_launches(rl.analyze(rl.load(run)))
    assert profiled_launches(rl.analyze(rl.load(fixture_path(*H100, "annotated_whole_run")))) == ""


def test_the_autotuner_is_compilation_not_a_program():
    rep = rl.analyze(rl.load(fixture_path(*H100, "annotated_whole_run")))
    (said,) = [n for n in rep.notes if n.startswith("XLA's autotuner")]
    assert "gemm_fusion_dot.1" in said and "left out" in said
    programs = {c.program for c in rep.comparison} | {s.program for s in rep.op_stats}
    assert not [p for p in programs if p.startswith(("gemm_fusion", "input_reduce_fusion"))], programs
    assert rep.steps.program.startswith("jit_train_step") and rep.steps.steps == 18
    # the same capture's Chrome JSON, read alone, finds the same autotuning
    chrome = rl.load(fixture_path(*H100, "annotated_whole_run", "vm.trace.json.gz"))
    assert [n for n in chrome.notes if n.startswith("XLA's autotuner")] == [said]
    assert not [p for p in chrome.table.programs if p.startswith(("gemm_fusion", "input_reduce_fusion"))
                and (chrome.table.program == chrome.table.programs.index(p)).any()]
    assert "RedzoneAllocator" not in " ".join(rep.notes) and ";  first run" not in " ".join(rep.notes)


def test_tuple_element_operands_are_read(windows):
    """jaxlib 0.11 writes an element of a tuple result as ``%fusion#1``: each cuBLAS matmul's operands are found,
    so it is priced as 2·4096³ FLOPs (an operand not found had priced it by its bytes alone)."""
    text = next(fixture_path(*H100, "window_command_buffers", "hlo").glob("*jit_train_step.txt")).read_text()
    assert re.search(r"custom-call\([^)]*#\d", text)
    module = parse(text)
    gemms = [i for i in module.entry.instructions if "cublas" in i.raw_attrs.get("custom_call_target", "")]
    assert len(gemms) == 8
    for g in gemms:
        shapes = [module.operand_shape(o) for o in g.operands]
        assert all(s is not None and s.is_array and s.dims == (4096, 4096) for s in shapes), (g.name, shapes)
    matmuls = [c for c in _step_ops(windows["window_command_buffers"]).values() if c.category == "matmul"]
    assert all(c.flops == 2 * 4096**3 for c in matmuls), [(c.name, c.flops) for c in matmuls]


def test_gaps_name_the_programs_python_frame_not_the_captures(windows):
    """The H100 window was traced by an interpreter the profiler names ``python3``: JAX's Python tracer frames are
    on that line (they were dropped as no "python" line's, so no gap named what the host was doing). The host's
    frame in a gap is the program's (its ``time.sleep``, a value read back in ``array.py``), never one of
    rooflens's own in the program (``stepwindow.py`` counting a jitted call, ``common.py`` draining the devices)."""
    prof = rl.load(fixture_path(*H100, "window_command_buffers"))
    assert "python3" in prof.table.lines and prof.host_events
    hosts = [g.host for d in windows["window_command_buffers"].stats.devices for g in d.largest_gaps]
    assert "time sleep" in hosts and "array.py:629 _value" in hosts
    assert not [h for h in hosts if h.split(":")[0] in ("stepwindow.py", "common.py", "launch.py", "pyrun.py")]
    for name in ("stepwindow.py:211 call", "common.py:199 _wait", "pyrun.py:10 run_path"):
        assert name.split(":")[0] in {f for f, _ in own_frames()}
