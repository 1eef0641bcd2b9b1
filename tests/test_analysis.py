"""Findings on real JAX programs: each pathology fires its rule, and the healthy twins fire none.

Every program runs for real on the forced CPU devices; the `local` chip is calibrated once for the
module (quick settings) into the test cache directory. The healthy twins are judged against the machine as loaded while they run: the `local` chip is measured again just before and after
each of their captures (the slower saved), and host pauses are set from the step's time measured in the same run.
"""

import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import rooflens as rl
from rooflens.analysis import rules
from rooflens.hardware import calibrate
from rooflens.lowering import make_mesh
from rooflens.units import fmt_bytes


@pytest.fixture(scope="module", autouse=True)
def local_chip():
    cal = calibrate.measure(repeats=3, sizes=(256, 512, 1024), copy_bytes=32 << 20)
    calibrate.save(cal)


def _calibrated_around(capture):
    """``capture()``'s profile, with the `local` chip measured just before and just after it and the slower of the
    two saved: a healthy twin is judged against this machine as loaded while it ran (the same run), not against a
    calibration taken minutes earlier under another load."""
    def measure():
        return calibrate.measure(repeats=3, sizes=(512, 1024), copy_bytes=16 << 20)

    def matmul_s(cal) -> float:
        return sum(statistics.median(m.times_s) for ms in cal.matmul.values() for m in ms)

    before = measure()
    prof = capture()
    after = measure()
    calibrate.save(max((before, after), key=matmul_s))
    return prof  # judge it with chip="local": this calibration, not the one the capture recorded before it was made


def _matmul_s() -> float:
    """How long one MATMUL(X, W) takes on this machine now (median of 5, compiled and warm)."""
    MATMUL(X, W).block_until_ready()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        MATMUL(X, W).block_until_ready()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def fired(prof, chip=None):
    rep = rl.analyze(prof, chip=chip)
    return {f.rule for f in rep.findings}, rep


def cap(fn, *args, tmp, steps=5, **kw):
    return rl.capture(fn, *args, steps=steps, logdir=tmp, **kw)


def session(tmp, body, steps=5, between=None):
    s = rl.trace.Session(tmp, warmup=1, steps=steps)
    state = None
    with s:
        for i in range(steps + 1):
            with s.step():
                state = body(i)  # the loop keeps its state alive, so the step's end waits for it
            if between:
                between(i)
    del state
    return s.profile


MATMUL = jax.jit(lambda x, w: x @ w)
X = jnp.ones((1024, 1024))
W = jnp.ones((1024, 1024))


# -- healthy twins ------------------------------------------------------------------------------

def test_healthy_single_device_matmul_fires_nothing(tmp_path):
    # ten steps: the first few of a fresh process on a loaded machine wobble, and a quartile of five is one step.
    # A 2048² matmul (~90 ms a step here): the host's millisecond between blocked steps is 1 % of it; with 1024²
    # (11 ms) it was 10.1 % of the step in three captures in a row while another test file held the other core (CI)
    big = jnp.ones((2048, 2048))
    names, rep = _healthy(lambda logdir: cap(MATMUL, big, big, tmp=logdir, steps=10), tmp_path)
    # whether the calibration is questioned (a loaded machine measured below what the warm matmul then reaches) is
    # tested in test_calibration_trust: nothing about the run itself may fire
    assert names - {"roofline-trust"} == set(), [f.title for f in rep.findings]
    (dot,) = [c for c in rep.comparison if c.category == "matmul"]
    # the calibrated roofline holds for a big f32 matmul: within 2× of it; or at it within the calibration's own
    # spread, or past it where the calibration was made while the machine was busier than when the matmul ran (one CI
    # run: the slower of the two calibrations around the capture): then its ratio is withheld, as any figure above a
    # roof is, and the note says which
    note = dot.roofline_note
    assert (dot.ratio is None and (note.startswith("at the calibrated roof") or "the calibration is too low" in note)
            ) or 0.5 < dot.ratio < 2.0, (dot.ratio, note)


def _healthy(capture, tmp, tries: int = 3):
    """What fires on a healthy run (``capture(logdir)``) judged against this machine (:func:`_calibrated_around`),
    captured again, up to ``tries`` times in all, while anything but roofline-trust fires: steps of a millisecond
    matmul on a shared 2-core VM, with another test file running on the other core, are now and then uneven or
    waiting (IQR/median 0.5 once, 0.62 with the device idle 10 % of the step once). A rule that fires on a healthy
    run fires on every capture; noise does not come three times."""
    for k in range(tries):
        names, rep = fired(_calibrated_around(lambda k=k: capture(tmp / f"try{k}")), chip="local")
        if not names - {"roofline-trust"}:
            break
    return names, rep


def test_healthy_training_loop_fires_nothing(tmp_path):
    names, rep = _healthy(lambda logdir: session(logdir, lambda i: MATMUL(X, W)), tmp_path)
    # a loaded 2-core machine can measure its own calibration below what a warm loop then reaches: whether the
    # calibration is questioned is tested in test_calibration_trust; nothing about the run itself may fire
    assert names - {"roofline-trust"} == set(), [f.title for f in rep.findings]


def _dp(tmp, weights_spec):
    mesh = make_mesh("data=8")
    x = jax.device_put(jnp.ones((4096, 1024)), NamedSharding(mesh, P("data")))
    w = jax.device_put(jnp.ones((1024, 1024)), NamedSharding(mesh, weights_spec))
    return cap(jax.jit(lambda x, w: x @ w), x, w, tmp=tmp)


def test_healthy_data_parallel_fires_nothing(tmp_path):
    names, rep = _healthy(lambda logdir: _dp(logdir, P()), tmp_path)
    assert names - {"roofline-trust"} == set(), [f.title for f in rep.findings]  # as the single-device twin
    assert rep.steps.communication_s == 0


# -- pathologies --------------------------------------------------------------------------------

def test_weights_all_gathered_every_step(tmp_path):
    names, rep = fired(_dp(tmp_path, P("data", None)))  # FSDP on a model too small for it
    assert "weights-all-gathered" in names
    f = next(f for f in rep.findings if f.rule == "weights-all-gathered")
    assert f.ops and all("all-gather" in op for op in f.ops)
    assert "with_sharding_constraint" in f.fix
    assert "slow-collective" in names  # and on CPU the gather is far slower than a memory copy


def _until(capture, tmp, rule: str, tries: int = 3):
    """What fires on ``capture(logdir)``, captured again, up to ``tries`` times in all, until ``rule`` fires: eight
    forced CPU devices time their all-reduces against their matmuls on 2 shared cores, and with another test file
    running on one of them the collectives' share of a step fell below the rule's threshold once in CI. A rule
    that never fires on the workload built for it fails every capture; noise does not come three times."""
    for k in range(tries):
        names, rep = fired(capture(tmp / f"try{k}"))
        if rule in names:
            break
    return names, rep


def test_activation_all_reduces_take_the_step(tmp_path):
    mesh = make_mesh("model=8")
    x = jax.device_put(jnp.ones((256, 4096)), NamedSharding(mesh, P(None, "model")))
    w = jax.device_put(jnp.ones((4096, 256)), NamedSharding(mesh, P("model", None)))
    step = jax.jit(lambda x, w: x @ w, out_shardings=NamedSharding(mesh, P()))
    names, rep = _until(lambda logdir: cap(step, x, w, tmp=logdir), tmp_path, "communication-share")
    assert "communication-share" in names and "weights-all-gathered" not in names
    assert rep.steps.communication_s > 0.25 * rep.steps.step_time_s


def test_slow_dot_against_its_roofline(tmp_path):
    a = jnp.ones((32768, 4, 4))  # tens of thousands of 4×4 matmuls: XLA:CPU runs them ~70× below the roofline
    names, rep = fired(cap(jax.jit(lambda a: jnp.einsum("bij,bjk->bik", a, a)), a, tmp=tmp_path))
    assert "slow-op" in names
    f = next(f for f in rep.findings if f.rule == "slow-op")
    assert "slower than its roofline" in f.title and f.ops


def test_a_spectral_layers_ffts_are_compute_and_not_told_to_fill_matrix_units(tmp_path):
    """A Fourier layer (rfft, a spectral multiply, irfft, four times): its FFTs are category "fft" and compute in
    the step's breakdown (they were "other", the largest category of an FNO's step, and the step's "other" part).
    At 2.5·N·log2 N FLOPs a 1024-point real transform is memory-bound, and XLA:CPU runs them at 2-12× their
    rooflines; the time beyond them is in FFTs, and the finding's cause and fix are theirs (a pass per stage; fewer,
    smaller, batched transforms), not the elementwise ops' ("fuse neighbouring elementwise ops") or the matmuls'
    ("multiples of the matrix unit's tile")."""
    def spectral(x, w):
        for k in range(4):
            x = jnp.fft.irfft(jnp.fft.rfft(x, axis=-1) * w[k], n=x.shape[-1], axis=-1) + x
        return x

    x = jax.random.normal(jax.random.PRNGKey(0), (64, 32, 1024))
    w = jax.random.normal(jax.random.PRNGKey(1), (4, 513)).astype(jnp.complex64)
    rep = rl.analyze(cap(jax.jit(spectral), x, w, tmp=tmp_path), chip="local")
    ffts = [c for c in rep.comparison if c.opcode == "fft"]
    assert len(ffts) == 8 and {c.category for c in ffts} == {"fft"} and all(c.priced for c in ffts)
    assert all(c.flops == 2.5 * 64 * 32 * 1024 * 10 for c in ffts)  # per transform 2.5 · 1024 · log2 1024
    st = rep.steps
    assert st.other_s == 0 and st.compute_s > 0.5 * st.step_time_s, st
    f = next(f for f in rep.findings if f.rule == "kernel-inefficiency")
    # memory- or compute-bound by the machine's calibration (a 1024-point transform's 3 FLOP per byte sits near a
    # CPU's ridge): either way the part beyond the rooflines is the FFTs', and the advice is theirs
    assert any("part is in FFTs and sorts (fft ×" in e or "no matrix multiplication (fft ×" in e
               for e in f.evidence), f.evidence
    assert "once per stage" in f.cause and "elementwise" not in f.fix and "matrix unit's tile" not in f.fix
    assert "FFT" in f.fix


def test_a_conv_nets_time_beyond_its_rooflines_is_told_about_convolutions(tmp_path):
    """A small conv net's training gradient (four 3×3 convolutions of 64 channels): XLA:CPU runs its convolutions at
    a fraction of the matmul rate the roofline prices them at, and the time beyond the rooflines is mostly theirs.
    The finding said "give the matmuls larger dims … (batch, fuse projections)"; it names the convolutions and
    gives their own fix (channels, batch, the chip's fast dtype)."""
    def loss(ks, x):
        for k in ks:
            x = jax.nn.relu(jax.lax.conv_general_dilated(x, k, (1, 1), "SAME",
                                                         dimension_numbers=("NHWC", "HWIO", "NHWC")))
        return jnp.mean(x ** 2)

    ks = [jax.random.normal(jax.random.PRNGKey(i), (3, 3, 64, 64)) * 0.05 for i in range(4)]
    x = jax.random.normal(jax.random.PRNGKey(9), (16, 32, 32, 64))
    rep = rl.analyze(cap(jax.jit(jax.grad(loss)), ks, x, tmp=tmp_path), chip="local")
    f = next(f for f in rep.findings if f.rule == "kernel-inefficiency")
    assert any(e.endswith("of the compute-bound part is in convolutions") for e in f.evidence), f.evidence
    assert "convolutions" in f.cause and f.fix.startswith("give the convolutions more channels") \
        and "fuse projections" not in f.fix


def test_transpose_feeding_a_dot_makes_copies(tmp_path):
    x = jnp.ones((512, 256, 64))
    w = jnp.ones((512 * 64, 16))
    names, rep = fired(cap(jax.jit(lambda x, w: jnp.transpose(x, (1, 0, 2)).reshape(256, -1) @ w), x, w,
                           tmp=tmp_path))
    assert "copies" in names
    healthy, _ = fired(cap(jax.jit(lambda x, w: x @ w), jnp.ones((256, 512 * 64)), w, tmp=tmp_path / "h"))
    assert "copies" not in healthy


def test_an_update_of_an_undonated_argument_copies_it_and_the_fix_is_to_donate(tmp_path):
    """A sparse update of an embedding table (a scatter-add of a few rows into 51 MB) jitted without donation:
    XLA copies the whole table every execution so the scatter can write in place, 95 % of the device's time. The
    copies finding said to use AUTO layouts and change the einsum; it names the copy, the argument and the scatter,
    and says to donate. Donated, the copy is gone."""
    def update(table, ids):
        return table.at[ids].add(1.0)

    ids = jnp.arange(0, 200_000, 97)
    feed = lambda out, args: (out, args[1])  # noqa: E731 (the loop carries the table, as training does)
    names, rep = fired(cap(jax.jit(update), jnp.zeros((200_000, 64)), ids, tmp=tmp_path / "a", feed=feed))
    f = next(f for f in rep.findings if f.rule == "copies")
    (said,) = [e for e in f.evidence if "copies the argument" in e]
    assert "argument table (f32[200000,64], 51.2 MB)" in said and "not donated" in said and "scatter" in said, said
    assert "donate_argnums" in f.fix and "AUTO layouts" not in f.fix and "not donated" in f.cause
    _, rep = fired(cap(jax.jit(update, donate_argnums=0), jnp.zeros((200_000, 64)), ids, tmp=tmp_path / "b",
                       feed=feed))
    assert not [c for c in rep.comparison if c.opcode == "copy" and c.program == rep.steps.program]
    assert not [f for f in rep.findings if f.rule == "copies"]


def test_a_loop_of_tiny_jitted_ops(tmp_path):
    add1 = jax.jit(lambda v: v + 1)

    def body(i):
        v = jnp.ones(16)
        for _ in range(150):
            v = add1(v)
        return v

    names, rep = fired(session(tmp_path, body, steps=3))
    assert "tiny-ops" in names
    assert "slow-op" not in names  # sub-launch ops are the tiny-ops rule's business
    f = next(f for f in rep.findings if f.rule == "tiny-ops")
    assert "jit the whole step" in f.fix  # 150 calls a step: a Python loop of small jitted calls


def test_tiny_ops_of_a_step_jitted_whole_are_not_told_to_jit_it(tmp_path):
    """One jitted step a step, of 60 tiny layers (width 8): its ops are tiny, but the step is one program already
    (an FSDP step on 8 CPU devices read "jit the whole step (one program), turn Python loops into lax.scan")."""
    ws = [jnp.eye(8) * 0.5 for _ in range(60)]

    def loss(ws, x):
        for w in ws:
            x = jnp.tanh(x @ w)
        return x.sum()

    names, rep = fired(cap(jax.jit(jax.grad(loss)), ws, jnp.ones((4, 8)), tmp=tmp_path))
    f = next(f for f in rep.findings if f.rule == "tiny-ops")
    assert f.fix.startswith("the step is one program already") and "jit the whole step" not in f.fix, f.fix
    assert "inside the step's one program" in f.cause


def test_tiny_ops_inside_the_steps_own_scan_are_not_told_to_jit_the_step(tmp_path):
    """A jitted step whose ops run inside its own lax.scan (a recurrence over 200 time steps, an LSTM's shape):
    tiny ops, but the step is one program already and its loop is a scan. The advice was "jit the whole step (one
    program), turn Python loops into lax.scan"; it names the loop and its iterations and says to give each more
    work or unroll it."""
    w = jax.random.normal(jax.random.PRNGKey(0), (32, 32)) * 0.1

    def rnn(h0, xs):
        def cell(h, x):
            h = jnp.tanh(h @ w + x)
            return h, h
        return jax.lax.scan(cell, h0, xs)[1].sum()

    names, rep = fired(cap(jax.jit(jax.grad(rnn)), jnp.zeros((8, 32)), jnp.ones((200, 8, 32)), tmp=tmp_path))
    f = next(f for f in rep.findings if f.rule == "tiny-ops")
    assert "inside a loop of it (~200 times per execution" in f.fix and "unroll" in f.fix, f.fix
    assert "jit the whole step" not in f.fix and "each iteration of the step's loop" in f.cause
    # a slow op of the loop's body runs 200 times a step, not "once" (its program's executions)
    body = {c.name for c in rep.comparison if c.runs_per_execution == 200}
    slow = [f for f in rep.findings if f.rule == "slow-op" and f.ops[0].name in body]
    assert slow and all(any(e.startswith("runs 200 times per step") for e in f.evidence) for f in slow), \
        [f.evidence for f in rep.findings if f.rule == "slow-op"]


def test_a_new_shape_every_step_recompiles(tmp_path):
    sizes = iter([64, 128, 192, 256, 320, 384])
    names, rep = fired(cap(jax.jit(lambda x: jnp.tanh(x @ x.T)), jnp.ones((64, 64)), tmp=tmp_path,
                           feed=lambda out, args: (jnp.ones((next(sizes), 64)),)))
    assert "recompilation" in names
    f = next(f for f in rep.findings if f.rule == "recompilation")
    assert any("test_analysis.py" in e for e in f.evidence) and any("before" in e for e in f.evidence)


def test_a_debug_print_in_the_step_is_a_host_callback(tmp_path):
    """jax.debug.print inside the jitted step: a custom call into Python on the host, no kernel. It has no roofline
    and no share of one (it read "memory-bound, <0.01 % of HBM B/s": its 4 bytes), and its own finding names it
    with its time per step and the fix."""
    @jax.jit
    def step(x, w):  # (jaxlib 0.10.2's XLA:CPU fails to compile a print of tanh(x @ w).mean(): not this one)
        y = x @ w
        loss = jnp.mean(y * y)
        jax.debug.print("loss {loss}", loss=loss)
        return w - 1e-9 * (x.T @ y), loss

    names, rep = fired(cap(step, X, W, tmp=tmp_path))
    (c,) = [c for c in rep.comparison if c.host_callback]
    assert c.opcode == "custom-call" and c.name.startswith("debug_print")
    assert c.bound == "unpriced" and c.predicted_s is None and c.ratio is None
    assert c.flops_fraction_of_peak is None and c.bytes_fraction_of_peak is None and "host callback" in c.unpriced_reason
    assert "host-callback" in names
    (f,) = [f for f in rep.findings if f.rule == "host-callback"]
    assert [(o.program, o.name) for o in f.ops] == [(c.program, c.name)]
    assert f.recoverable_s == pytest.approx(c.total_time_s / rep.steps.periods, rel=1e-6) and f.step_s > 0
    assert "outside the jitted function" in f.fix
    # a matmul step without one has none
    assert not [c for c in rl.analyze(cap(MATMUL, X, W, tmp=tmp_path / "plain")).comparison if c.host_callback]


def test_numpy_inputs_every_step_are_host_transfers(tmp_path):
    names, _ = fired(cap(MATMUL, X, W, tmp=tmp_path, feed=lambda out, args: (np.ones((1024, 1024), np.float32), W)))
    assert "host-transfers" in names


def test_a_pmap_fed_one_devices_arrays_every_step_is_named_a_reshard(tmp_path):
    """pmap splits arrays that sit on one device over the 8 at every call: device-to-device copies, which the
    finding names as such (not NumPy inputs) with the sharding fix; the same step fed arrays already split over
    the devices (pmap's own output) moves nothing."""
    step = jax.pmap(lambda x, w: jnp.tanh(x @ w))
    x, w = jnp.ones((8, 128, 256)), jnp.ones((8, 256, 256))  # each on one device
    names, rep = fired(session(tmp_path / "one", lambda i: step(x, w)))
    (f,) = [f for f in rep.findings if f.rule == "host-transfers"]
    assert "device-to-device" in f.title and "host↔device" not in f.title, f.title
    assert f.evidence[0] == "16 per step"  # x and w, each split over 8 devices
    # JAX writes a line per device, each with the whole array's type: a line moves its device's eighth (1 MiB of x
    # and 2 MiB of w per step in all, not 8 times that)
    steps = len(rep.in_window.transfers) / 16
    assert f.evidence[1].startswith(f"{fmt_bytes(steps * 3 * 2**20)} in all"), f.evidence[1]
    assert "sharding" in f.fix and "NumPy" not in f.cause
    xs, ws = jax.pmap(lambda a: a)(x), jax.pmap(lambda a: a)(w)  # already split, device by device
    names, _ = fired(session(tmp_path / "split", lambda i: step(xs, ws)))
    assert "host-transfers" not in names


def test_a_sleeping_data_loader_leaves_the_device_idle(tmp_path):
    pause_s = max(0.05, 2 * _matmul_s())  # the host sleeps twice the step's device time, as measured in this run
    names, rep = fired(session(tmp_path, lambda i: MATMUL(X, W), between=lambda i: time.sleep(pause_s)))
    assert "idle" in names
    f = next(f for f in rep.findings if f.rule == "idle")
    assert any("gap of" in e and "the host was in time.sleep" in e for e in f.evidence)


def test_uneven_steps(tmp_path):
    def body(i):
        y = MATMUL(X, W)
        if i % 2:
            time.sleep(0.12)
        return y

    names, _ = fired(session(tmp_path, body, steps=6))
    assert "step-variance" in names


def test_host_work_inside_every_step_is_device_idle_priced_once(tmp_path):
    x = jnp.ones((512, 512))  # a few ms of matmul under 40 ms of host work: far above 2× on any load

    def body(i):
        y = MATMUL(x, x)
        time.sleep(0.04)
        return y

    names, rep = fired(session(tmp_path, body))
    assert "idle" in names and "step-variance" not in names
    # the device waits between executions for the host: the idle finding's time, not counted again as overhead
    assert "overheads" not in names
    idle = next(f for f in rep.findings if f.rule == "idle")
    # (the last step is its execution alone, so the mean step is below the 40 ms of host work: most of it is idle)
    assert 0.5 * idle.step_s < idle.recoverable_s <= idle.step_s == rep.steps.step_time_s
    assert rep.findings[0] is idle and idle.severity == "high"


def test_one_device_doing_all_the_work_is_a_straggler(tmp_path):
    from jax import shard_map

    mesh = make_mesh("data=8")

    def body(a):
        return jax.lax.cond(jax.lax.axis_index("data") == 0, lambda a: jnp.tanh(a @ a.T @ a), lambda a: a * 2, a)

    f = jax.jit(shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P("data")))
    names, _ = fired(cap(f, jnp.ones((8 * 256, 256)), tmp=tmp_path))
    assert "device-straggler" in names


# -- the report itself ----------------------------------------------------------------------------

def test_transformer_report_big_dots_and_communication(tmp_path):
    from rooflens.workloads import TransformerConfig, sharded_train_step

    step, (ap, at) = sharded_train_step(TransformerConfig(), make_mesh("data=4,model=2"))
    params = jax.tree.map(lambda s: jax.device_put(jnp.zeros(s.shape, s.dtype), s.sharding), ap)
    tokens = jax.device_put(jnp.zeros(at.shape, at.dtype), at.sharding)
    prof = rl.capture(step, params, tokens, steps=3, logdir=tmp_path, feed=lambda o, a: (o[0], a[1]))
    rep = rl.analyze(prof)
    dots = sorted((c for c in rep.comparison if c.category == "matmul" and c.priced), key=lambda c: -c.total_time_s)
    big = dots[:6]
    # the big dots come out within 2× of their roofline, or beat a calibration made too low (on a busy machine):
    # then their ratios are withheld and the calibration is questioned
    ratios = [c.ratio for c in big if c.ratio is not None]
    beaten = [c for c in big if c.ratio is None]
    at_roof = [c for c in beaten if c.roofline_note.startswith("at the calibrated roof")]  # within its own spread
    beyond = [c for c in beaten if c not in at_roof]
    assert all(not c.roofline_reliable for c in beaten)
    assert all("calibration is too low" in c.roofline_note for c in beyond)
    assert not beyond or any(f.rule == "roofline-trust" and "calibration" in f.title for f in rep.findings)
    assert not ratios or float(np.median(ratios)) < 2.0
    comm = [c for c in rep.comparison if c.category == "collective"]
    assert comm and rep.steps.communication_s > 0
    assert any(f.rule in ("communication-share", "slow-collective") for f in rep.findings)
    d = rep.to_json()
    assert {"op_stats", "comparison", "findings", "steps", "memory"} <= set(d)
    b = d["steps"]["breakdown"]
    assert (b["mfu"] is not None or "faster than local's peak" in b["mfu_note"]) and d["steps"]["count"] == 3


def test_unpriced_ops_are_listed_with_their_time(tmp_path):
    """A real program whose eigendecomposition runs as a LAPACK custom call: the cost model has no
    formula for it, so it is listed unpriced with its measured time, not dropped or counted as free."""
    from rooflens.analysis.compare import _unpriced_reason

    assert _unpriced_reason(None, "custom-call", "custom-call") == "no HLO for this op"
    f = jax.jit(lambda a: jnp.linalg.eigh(a @ a.T)[0].sum())
    rep = rl.analyze(cap(f, jnp.ones((256, 256)) + jnp.eye(256), tmp=tmp_path, steps=3))
    unpriced = [c for c in rep.comparison if not c.priced]
    assert [c.opcode for c in unpriced] == ["custom-call"]
    (eig,) = unpriced
    assert eig.category == "linear algebra"  # LAPACK's syevd: dense linear algebra, not "custom-call"
    assert eig.total_time_s > 0 and "no formula" in eig.unpriced_reason and eig.predicted_s is None
    assert eig.unpriced_reason.startswith("custom-call lapack_"), eig.unpriced_reason  # which call: its target
    assert len(rep.comparison) == len(rep.op_stats)  # nothing dropped
    assert rep.steps.unpriced_s > 0


def test_a_gaussian_process_factorizations_are_priced_by_lapacks_operation_counts(tmp_path):
    """A Gaussian process's marginal likelihood (Cholesky of a 512×512 kernel matrix, two triangular solves) and an
    LU and a QR beside it: XLA:CPU runs each as a LAPACK call (lapack_spotrf_ffi, lapack_strsm_ffi,
    lapack_sgetrf_ffi, lapack_sgeqrf_ffi). Each is priced by LAPACK Working Note 41's operation count (they were
    listed as having no formula); the eigendecomposition's syevd, which has none here, stays unpriced."""
    from rooflens.analysis.invariants import document_violations

    def nll(x, y):
        k = jnp.exp(-0.5 * jnp.sum((x[:, None] - x[None]) ** 2, -1)) + 1e-2 * jnp.eye(x.shape[0])
        chol = jnp.linalg.cholesky(k)
        alpha = jax.scipy.linalg.cho_solve((chol, True), y)
        lu, _ = jax.scipy.linalg.lu_factor(k)
        q, r = jnp.linalg.qr(k)
        return y @ alpha + jnp.log(jnp.diag(chol)).sum() + lu.sum() + (q * r).sum()

    x = jax.random.normal(jax.random.PRNGKey(0), (512, 4))
    y = jax.random.normal(jax.random.PRNGKey(1), (512,))
    rep = rl.analyze(cap(jax.jit(nll), x, y, tmp=tmp_path, steps=3), chip="local")
    assert not document_violations(rep.to_json())
    la = {c.name: c for c in rep.comparison if c.category == "linear algebra"}
    n = 512.0
    want = {"potrf": n ** 3 / 3 + n ** 2 / 2 + n / 6,  # LAWN 41: n³/6 + n²/2 + n/3 multiplications, n³/6 − n/6 adds
            "getrf": 2 * n ** 3 / 3 - n ** 2 / 2 + 5 * n / 6,
            "geqrf": 2 * n ** 3 - 2 * n ** 3 / 3 + n ** 2 + n ** 2 + 14 * n / 3}
    module = rep.modules[next(iter(la.values())).program]
    for c in la.values():
        target = module.find(c.name).custom_call_target
        routine = next((r for r in want if r in target), None)
        if routine is not None:
            assert c.priced and c.flops == pytest.approx(want[routine], rel=1e-9), (c.name, target, c.flops)
    targets = {module.find(c.name).custom_call_target for c in la.values() if c.priced}
    assert {"lapack_spotrf_ffi", "lapack_sgetrf_ffi", "lapack_sgeqrf_ffi", "lapack_strsm_ffi"} <= targets, targets
    assert all(c.unpriced_reason == "" for c in la.values())


def test_time_beyond_the_rooflines_of_ops_that_ran_side_by_side_is_counted_in_the_steps_time(tmp_path):
    """Four independent Cholesky and QR factorizations of 512×512 matrices: XLA:CPU runs them on its threads side
    by side, so their op time sums to more than the step (44 % of it ran alongside other ops here). The time beyond
    their rooflines is counted in the step's time (each op's excess at the share that ran alone), so the finding
    never claims more than the step; its evidence says so, and the excess is the factorizations' (panel steps,
    serial dependencies), not "ops that are no matrix multiplication" run on the vector units. Under load the sum
    taken as it was came to more than the step."""
    from rooflens.analysis.invariants import document_violations

    def f(a, b, c, d):
        out = 0.0
        for m in (a, b, c, d):
            k = m @ m.T + 512 * jnp.eye(512)
            out = out + jnp.linalg.cholesky(k).sum() + jnp.linalg.qr(k)[1].sum()
        return out

    ks = [jax.random.normal(jax.random.PRNGKey(i), (512, 512)) for i in range(4)]
    rep = rl.analyze(cap(jax.jit(f), *ks, tmp=tmp_path, steps=3), chip="local")
    assert not document_violations(rep.to_json())
    st = rep.steps
    assert st.concurrent_s > 0.1 * st.step_time_s, st  # they did run side by side
    f = next(f for f in rep.findings if f.rule == "kernel-inefficiency")
    (line,) = [e for e in f.evidence if e.startswith("counted in the step's time")]
    parts = st.compute_s + st.communication_s + st.layout_s + st.host_s + st.other_s
    assert f"taken at {100 * (parts - st.concurrent_s) / parts:.1f}%" in line, line
    assert f.time_s <= st.step_time_s
    assert any("in factorizations and triangular solves" in e for e in f.evidence), f.evidence
    assert "panel" in f.cause and "cho_solve" in f.fix


def test_an_ffts_flops_are_n_log2_n_per_transform_of_all_its_points():
    """A 2-D real FFT of 64×64 points and a 3-D complex one of 8×64×64 (a spectral solver's): 2.5·N·log2 N and
    5·N·log2 N per transform (FFTW's convention), N the transform's points; XLA's HloCostAnalysis multiplies the
    lengths' log2s (6·6 = 36 for 64×64, not log2 4096 = 12), three times the work of a 2-D one and 12× a 3-D one's."""
    from rooflens.cost.counts import instruction_counts
    from rooflens.hlo import parse

    def f(a, c):
        return jnp.fft.rfft2(a), jnp.fft.fftn(c)

    a = jnp.ones((16, 64, 64))
    text = jax.jit(f).lower(a, a[:8].astype(jnp.complex64)).compile().as_text()
    m = parse(text)
    got = {i.attrs["fft_type"]: instruction_counts(m, i).flops for i in m.instructions() if i.opcode == "fft"}
    assert got["RFFT"] == pytest.approx(2.5 * 16 * 4096 * 12)
    assert got["FFT"] == pytest.approx(5 * 8 * 64 * 64 * 15)


def test_every_rule_is_exercised():
    """Every finding name a rule can emit is asserted to fire by some test on a real program."""
    import inspect
    import re
    from pathlib import Path

    sources = "".join(inspect.getsource(inspect.getmodule(r.fn)) for r in rules.RULES)
    emitted = set(re.findall(r'Finding\(\s*"([a-z-]+)"', sources))
    assert emitted == set(rules.FINDING_IDS) and len(emitted) == 20 and len(rules.RULES) == 16
    tests = "".join(p.read_text() for p in Path(__file__).parent.glob("test_*.py"))
    for name in emitted:
        # an assertion that it fired (`assert …`, or `next(f … if f.rule == "…")`, which raises when none did), not a
        # condition: `if f.rule == "…"` filters findings and asserts nothing
        fired = [m for m in re.finditer(rf'"{name}" in (names|\{{f\.rule)|f\.rule == "{name}"|f\["rule"\] == "{name}"', tests)
                 if re.search(r"\bassert\b|\bnext\(", tests[tests.rfind("\n", 0, m.start()) + 1:m.start()])]
        assert fired, f"no test asserts that {name} fires"


def test_report_command_shows_expected_vs_observed_and_findings(tmp_path, monkeypatch):
    import json
    import os
    import subprocess
    import sys

    cap(MATMUL, X, W, tmp=tmp_path / "run", feed=lambda out, args: (np.ones((1024, 1024), np.float32), W))
    monkeypatch.setenv("ROOFLENS_CACHE_DIR", str(tmp_path / "no-calibration"))
    cap(MATMUL, X, W, tmp=tmp_path / "uncalibrated", steps=2)  # captured with no calibration to record
    monkeypatch.undo()

    def run(*args, logdir=tmp_path / "run", **env):
        return subprocess.run([sys.executable, "-m", "rooflens.cli", "report", str(logdir), *args],
                              capture_output=True, text=True, timeout=300, env={**os.environ, **env})

    r = run()
    assert r.returncode == 0, r.stderr
    assert "Expected vs observed on local" in r.stdout and "Findings" in r.stdout
    assert "host-transfers" in r.stdout and "fix:" in r.stdout
    data = json.loads(run("--json").stdout)
    assert data["chip"] == "local" and data["comparison"][0]["predicted_s"] > 0
    assert any(f["rule"] == "host-transfers" for f in data["findings"])
    r = run("--chip", "h100-sxm", "--json")
    assert json.loads(r.stdout)["chip"] == "h100-sxm"
    r = run("--no-calibrate", ROOFLENS_CACHE_DIR=str(tmp_path / "no-calibration"))  # the one the run recorded
    assert r.returncode == 0 and "recorded with the run" in r.stdout
    r = run("--no-calibrate", logdir=tmp_path / "uncalibrated", ROOFLENS_CACHE_DIR=str(tmp_path / "no-calibration"))
    assert r.returncode == 0 and "run `rooflens calibrate` first" in r.stdout
    r = run("--chip", "tpu-v9")
    assert r.returncode == 2 and "unknown chip" in r.stderr


def test_real_tpu_v6e_trace_analysis():
    """The v6e capture against tpu-v6e: async host-offload copies priced on their -done (where the trace
    shows the wait) and over PCIe, the HBM-bound fusions and the all-reduce near their rooflines, no false
    findings (its copies are host transfers, not retiling; no tiny-op storm): the one finding is the real one, the
    execution waiting on its host-offload copies (issue 35)."""
    from tests.conftest import fixture_path

    rep = rl.analyze(rl.load(fixture_path("tpu", "xprof_tpu_inference_2.v6e-4.xplane.pb")))
    assert rep.chip == "tpu-v6e" and rep.num_devices == 4
    by = {c.name: c for c in rep.comparison if c.program in ("jit_f", "jit__psum")}
    done = by["copy-done"]
    assert done.category == "host transfer" and done.bound == "host-transfer" and 1.0 <= done.ratio <= 1.5
    assert not by["copy-start"].priced and "priced on copy-done" in by["copy-start"].unpriced_reason
    assert 1.0 <= by["broadcast_add_fusion"].ratio <= 1.5 and 1.0 <= by["all-reduce"].ratio <= 1.5
    assert [f.rule for f in rep.findings] == ["host-transfers"]
    assert rep.steps.host_s > 0 and rep.steps.layout_s == 0


def test_tpu_trace_without_hlo_is_priced_from_xlas_own_counts():
    """The vLLM TPU trace carries no HLO module, but each XLA op has XLA's model_flops and
    bytes_accessed: the matmul fusions are priced from them (the trace does not say the generation;
    on tpu-v6e they run at ~1.1× the roofline) and Pallas kernels without counts stay unpriced."""
    from tests.conftest import fixture_path

    rep = rl.analyze(rl.load(fixture_path("tpu", "vllm_tpu_qwen3_2026_01_11_21_26_41.trace.json.gz")), chip="tpu-v6e")
    convs = [c for c in rep.comparison if c.category == "convolution"]
    assert convs and all(c.priced for c in convs)
    top = max(convs, key=lambda c: c.total_time_s)
    assert 1.0 <= top.ratio <= 1.5 and top.bound == "compute"
    assert any("model_flops" in line for line in top.explanation)
    assert any(not c.priced and c.unpriced_reason for c in rep.comparison)  # listed, with their time
