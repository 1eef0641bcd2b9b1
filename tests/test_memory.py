"""Memory: the model-state estimate, compiled peaks and peak buffers, snapshots, and the CLI."""

import json
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import rooflens as rl
from rooflens.memory import estimate, parse_snapshot
from tests.conftest import fixture_path


def run(*args):
    return subprocess.run([sys.executable, "-m", "rooflens.cli", *args], capture_output=True, text=True, timeout=300)


def test_seed_7b_adam_is_112_gb_and_does_not_fit_one_h100():
    est = rl.memory.estimate(7e9, optimizer="adam", param_dtype="bf16", grad_dtype="bf16", master_dtype="f32")
    assert est.total_bytes == 112e9 and est.bytes_per_param == 16
    assert (est.weights_bytes, est.gradients_bytes, est.optimizer_bytes, est.master_bytes) == (14e9, 14e9, 56e9, 28e9)
    assert est.fits_on["h100-sxm"] is False and est.fits_on["h200-sxm"] is True
    assert estimate(7e9, shards=8).per_device_bytes == 14e9
    with pytest.raises(rl.RooflensError, match="unknown optimizer"):
        estimate(1e6, optimizer="adamax-pro")


def _adam_step():
    def loss(p, x):
        return jnp.mean(jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"])

    def step(p, m, v, x):
        g = jax.grad(loss)(p, x)
        m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, m, g)
        v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, v, g)
        p = jax.tree.map(lambda p, m, v: p - 1e-3 * m / (jnp.sqrt(v) + 1e-8), p, m, v)
        return p, m, v

    params = {"w1": jnp.ones((256, 512)), "b1": jnp.zeros((512,)), "w2": jnp.ones((512, 8))}
    return step, params


def test_estimate_of_a_real_training_step_matches_the_hand_count_and_xlas_arguments():
    step, params = _adam_step()
    n = 256 * 512 + 512 + 512 * 8  # by hand
    est = estimate(params, optimizer="adam", grad_dtype="f32", master_dtype=None, moment_dtype="f32")
    assert est.params == n and est.weights_bytes == 4 * n and est.optimizer_bytes == 8 * n
    x = jnp.ones((64, 256))
    zeros = jax.tree.map(jnp.zeros_like, params)
    compiled = jax.jit(step).lower(params, zeros, zeros, x).compile()
    args = compiled.memory_analysis().argument_size_in_bytes
    assert args == est.weights_bytes + est.optimizer_bytes + x.size * 4  # params + Adam moments + the batch


def _keeps_big(x):
    with jax.named_scope("big"):
        h = jnp.tanh(x @ x.T)  # 2048×2048 f32 = 16.8 MB, alive while both reductions read it
    with jax.named_scope("reduce"):
        return (h * 2).sum() + h.mean()


def test_a_large_intermediate_tops_the_peak_list_named_by_its_scope(tmp_path):
    prof = rl.capture(_keeps_big, jnp.ones((2048, 64)), steps=2, logdir=tmp_path)
    rep = rl.analyze(prof, chip="h100-sxm")
    (prog,) = rep.memory.programs
    top = prog.peak_buffers[0]
    assert top.named_scope == "big" and top.bytes == 2048 * 2048 * 4 and top.shape.startswith("f32[2048,2048]")
    assert prog.argument_bytes == 2048 * 64 * 4
    assert rep.memory.peak_over_state > 1.3
    # 16.8 MB over the state on a device of gigabytes does not matter: no finding
    assert rep.memory.peak_over_device < 0.01 and "memory-peak" not in {f.rule for f in rep.findings}
    # the same program on a device its peak fills to 60 %: the finding names the ops at the peak (not the
    # argument), and, with no backward pass in the program, no training advice
    from dataclasses import replace

    from rooflens.analysis.rules.memory import rule_memory_peak

    tight = replace(rep, memory=replace(rep.memory, device_bytes=rep.memory.peak_bytes / 0.6))
    (f,) = rule_memory_peak(tight)
    assert any("from big" in e for e in f.evidence) and "remat" not in f.fix and "donate" in f.fix
    names = {o.name for o in f.ops}
    params = {i.name for i in rep.modules[prog.program].entry.instructions if i.opcode == "parameter"}
    assert any(b.name in params for b in prog.peak_buffers)  # the argument is live at the peak …
    assert names and not names & params and top.name in names  # … and is no op of the finding
    labels = [s.label for s in rep.memory.snapshots]
    assert labels == ["before", "step_0", "step_1"]
    assert all(s.total_bytes >= 2048 * 64 * 4 for s in rep.memory.snapshots)
    r = run("memory", str(tmp_path))
    assert r.returncode == 0 and "Buffers live at the peak" in r.stdout and "big" in r.stdout


def test_a_matmul_holds_no_surprising_peak(tmp_path):
    prof = rl.capture(jax.jit(lambda x, w: x @ w), jnp.ones((512, 512)), jnp.ones((512, 512)), steps=2, logdir=tmp_path)
    rep = rl.analyze(prof, chip="h100-sxm")
    assert rep.memory.peak_over_state <= 1.3
    assert "memory-peak" not in {f.rule for f in rep.findings}


def test_snapshot_names_the_allocating_function():
    def allocate_here():
        return [jnp.ones((300, 300)) for _ in range(3)]

    kept = allocate_here()
    snap = parse_snapshot(jax.profiler.device_memory_profile(), "now")
    assert snap.total_bytes >= 3 * 300 * 300 * 4
    assert snap.by_kind.get("buffer", 0) >= 3 * 300 * 300 * 4
    assert any("allocate_here" in site or "<listcomp>" in site for site in snap.by_site)
    del kept
    with pytest.raises(rl.RooflensError, match="not a pprof profile"):
        parse_snapshot(b"\x00\x01garbage\xff", "junk")


def test_the_captures_drain_byte_is_left_out_wherever_rooflens_was_installed(monkeypatch, tmp_path):
    """The H100 whole-run capture's end snapshot holds the script's two 1 MiB arrays and its scalar loss, and the
    capture's own one-byte drain buffer (allocated in rooflens/capture/common.py of the rooflens that captured it).
    That byte is not the program's memory, and the arrays are the script's (its module made them, through jax's
    frames in the GPU machine's site-packages), whichever path this rooflens runs from (a clone elsewhere counted
    the byte, and named jax's ``__call__`` as the site), and wherever the user's project lives: jax in a venv of a
    project folder named ``rooflens`` (the README's own quick start in a clone) is still jax, not rooflens, also where
    the drain's byte is recorded under jax's dispatch frame (the old substring test then stopped at jax's frame and
    counted the byte)."""
    import gzip
    import shutil

    from rooflens.memory import pprof

    def parsed(data: bytes):
        pprof._rooflens_file.cache_clear(), pprof._library_frame.cache_clear()
        return parse_snapshot(data, "end")

    data = fixture_path("gpu_nvidia", "h100_jax0112", "annotated_whole_run", "memory", "end.pb.gz").read_bytes()
    here = parsed(data)
    elsewhere_dir = tmp_path / "site-packages" / "rooflens"  # this rooflens, installed at another path
    shutil.copytree(pprof.ROOFLENS_DIR, elsewhere_dir, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(pprof, "ROOFLENS_DIR", str(elsewhere_dir))
    elsewhere = parsed(data)
    monkeypatch.undo()
    msg = pprof.profile_class()()
    msg.ParseFromString(gzip.decompress(data))
    venv = "/opt/torch/.venv/lib/python3.12/site-packages/"
    assert any(venv in t for t in msg.string_table)
    # the drain's byte as a jax that records its own Python frames would show it: jax's dispatch frame innermost
    names = list(msg.string_table)
    file_of = {f.id: names[f.filename] for f in msg.function}
    files_at = {loc.id: [file_of[line.function_id] for line in loc.line] for loc in msg.location}
    jax_call = next(k for k, fs in files_at.items() if fs and fs[0].endswith("jax/_src/interpreters/pxla.py"))
    (drain,) = [smp for smp in msg.sample if files_at[smp.location_id[0]][0].endswith("rooflens/capture/common.py")
                and smp.value[-1] == 1]
    drain.location_id.insert(0, jax_call)
    moved = [t.replace(venv, "/home/user/rooflens/.venv/lib/python3.12/site-packages/") for t in msg.string_table]
    del msg.string_table[:]
    msg.string_table.extend(moved)
    in_a_folder_named_rooflens = parsed(msg.SerializeToString())
    for snap in (here, elsewhere, in_a_folder_named_rooflens):
        assert snap.total_bytes == 2 * 1024 * 1024 + 4  # and the scalar loss
        assert snap.by_site == here.by_site and snap.by_site["<module>"] == 2 * 1024 * 1024 + 4
    assert pprof._rooflens_file("/home/user/rooflens/train.py") is None
    assert pprof._rooflens_file("/srv/x/site-packages/rooflens/capture/common.py") == pprof.DRAIN_FILE


def test_memory_files_are_read_with_the_compilation_they_are_of():
    """jax.random.normal compiled twice under one name (a 200000×64 table, 4096×64 items): the run kept one buffer
    assignment for the name, the larger compilation's, and both HLO modules. Read with the other module, the peak
    table said "broadcast_add_fusion u32[4096,64] 51.2 MB, padded 1.05 MB" (a buffer larger than its shape); the
    buffer assignment is read with the module whose shapes it has."""
    from rooflens.analysis.invariants import document_violations
    from rooflens.hlo import parse
    from rooflens.memory.compiled import compiled_memory, matching_module

    d = Path(__file__).parent / "fixtures" / "cpu_runs" / "two_normals"
    table, items = (parse((d / f"module_{n}.jit__normal.txt").read_text()) for n in ("0006", "0010"))
    assignment = (d / "jit__normal.buffer-assignment.txt").read_text()
    assert matching_module(assignment, [items, table]) is table and matching_module(assignment, [table, items]) \
        is table
    cm = compiled_memory("jit__normal", {}, (d / "jit__normal.live-range.txt").read_text(), assignment, table)
    fusion = next(b for b in cm.peak_buffers if b.name == "broadcast_add_fusion")
    assert fusion.shape.startswith("u32[200000,64]") and fusion.bytes == fusion.padded_bytes == 51_200_000
    # the other module's shapes: the invariant names the impossible buffer
    wrong = compiled_memory("jit__normal", {}, (d / "jit__normal.live-range.txt").read_text(), assignment, items)
    doc = {"memory": {"programs": [wrong.to_dict()]}}
    assert any("broadcast_add_fusion" in v and "larger than its shape" in v for v in document_violations(doc))
    assert not document_violations({"memory": {"programs": [cm.to_dict()]}})


def test_tpu_dump_padding_waste():
    dump = fixture_path("tpu", "hlo", "tpu_megacore_xla_dump")
    r = run("memory", str(dump), "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    (prog,) = data["programs"]
    assert prog["logical_bytes"] == 36 + 36 and prog["padded_bytes"] == 512 + 512
    assert data["padding_waste_bytes"] == 1024 - 72
    assert [b["name"] for b in prog["peak_buffers"]] == ["Arg_0.1", "fusion"]
    # a dump has no memory_analysis: the sizes come from its allocations, so the peak is the table's, not 0 B
    total = int(re.search(r"Total bytes used: (\d+)", next(dump.glob("*buffer-assignment.txt")).read_text())[1])
    assert prog["peak_bytes"] == data["peak_bytes"] == total == sum(b["bytes"] for b in prog["peak_buffers"])
    assert "peak 0 B" not in run("memory", str(dump)).stdout


def test_a_dumps_sizes_are_what_memory_analysis_says(tmp_path):
    """A Flax + Optax (adam) train step with donated state, compiled here with --xla_dump_to: `rooflens memory DUMP`
    reads arguments, outputs, aliased and temporary bytes equal to jax's own compiled.memory_analysis(), and its
    peak is the peak of the live-bytes curve it draws, never 0 B."""
    import flax.linen as nn
    import optax

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(10)(nn.relu(nn.Dense(512)(x)))

    model, tx = MLP(), optax.adam(1e-3)
    x, y = jnp.ones((64, 256)), jnp.zeros((64,), jnp.int32)
    params = model.init(jax.random.PRNGKey(0), x)

    def step(params, opt, x, y):
        def loss(p):
            return optax.softmax_cross_entropy_with_integer_labels(model.apply(p, x), y).mean()

        value, grads = jax.value_and_grad(loss)(params)
        updates, opt = tx.update(grads, opt, params)
        return optax.apply_updates(params, updates), opt, value

    dump = tmp_path / "xla dump"
    compiled = jax.jit(step, donate_argnums=(0, 1)).lower(params, tx.init(params), x, y).compile(
        compiler_options={"xla_dump_to": str(dump)})
    ma = compiled.memory_analysis()
    r = run("memory", str(dump), "--json")
    assert r.returncode == 0, r.stderr
    (prog,) = [p for p in json.loads(r.stdout)["programs"] if p["program"] == "jit_step"]
    for key in ("argument", "output", "alias", "temp"):
        assert prog[f"{key}_bytes"] == getattr(ma, f"{key}_size_in_bytes"), key
    assert ma.alias_size_in_bytes > 0.9 * ma.output_size_in_bytes  # the donated state comes back in place
    assert prog["peak_bytes"] == ma.argument_size_in_bytes + ma.output_size_in_bytes - ma.alias_size_in_bytes \
        + ma.temp_size_in_bytes
    assert prog["timeline"]["peak_bytes"] <= prog["peak_bytes"] and prog["peak_bytes"] > 0


def test_memory_command_estimate_and_errors(tmp_path):
    r = run("memory", "--estimate", "--params", "7e9", "--optimizer", "adam", "--chip", "h100-sxm", "--json")
    data = json.loads(r.stdout)
    assert data["total_bytes"] == 112e9 and data["fits_on"] == {"h100-sxm": False}
    r = run("memory", "--estimate", "--params", "7e9", "--chip", "h100-sxm")
    assert "112 GB = 16 bytes/parameter" in r.stdout and "does not fit on: h100-sxm" in r.stdout
    for args, msg in ((["memory"], "give a logdir"), (["memory", "--estimate"], "needs --params"),
                      (["memory", "--estimate", "--params", "1e6", "--optimizer", "nope"], "unknown optimizer"),
                      (["memory", str(tmp_path / "missing")], "does not exist")):
        r = run(*args)
        assert r.returncode == 2 and msg in r.stderr and len(r.stderr.strip().splitlines()) == 1
