"""Shared test set-up: 8 virtual CPU devices, the fixtures in tests/fixtures, and a corpus of real HLO.

The environment must be set before jax is imported anywhere, hence at the top of conftest.
"""

import os
import sys

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "").replace("--xla_force_host_platform_device_count=8", "")
    + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Never read or write the user's own calibration or chip files from tests.
import tempfile  # noqa: E402

os.environ["ROOFLENS_CACHE_DIR"] = tempfile.mkdtemp(prefix="rooflens-test-cache-")
os.environ.pop("ROOFLENS_CHIPS", None)

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# The real traces and HLO the tests read travel with the repository (tests/fixtures/SOURCES.md says
# where each comes from and under which licence); ROOFLENS_FIXTURES points elsewhere when asked.
FIXTURES = Path(os.environ.get("ROOFLENS_FIXTURES", REPO / "tests" / "fixtures"))
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
#: most workers ``-n auto`` starts (pyproject's addopts): each holds JAX and its tests start JAX processes of their
#: own (1-2 GB each), so a large machine gets no more than this
MAX_WORKERS = 8


def pytest_xdist_auto_num_workers(config) -> int:
    """One worker per core this process may use, at most :data:`MAX_WORKERS` (``-n N`` on the command line
    overrides it; ``-n 0`` runs in this process)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, MAX_WORKERS))


def interruptible(argv: list[str]) -> list[str]:
    """``argv`` run with SIGINT at its default, as Ctrl-C in a terminal finds it: a suite started in the background
    of a shell without job control inherits SIGINT ignored, and a Python started so installs no KeyboardInterrupt
    handler (the Ctrl-C tests then see nothing happen). A trampoline resets it and execs ``argv``."""
    reset = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])"
    return [sys.executable, "-c", reset, *argv]


def fixture_path(*parts: str) -> Path:
    """A fixture file; a missing one skips locally but fails under CI (CI=true), where every test must run."""
    p = FIXTURES.joinpath(*parts)
    if not p.exists():
        message = f"test fixture {p} is not present (the repository carries them in tests/fixtures)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return p


def self_times_from_events(t):
    """Each event's self time in ps, from the events alone: on each lane (host, device, line), each stretch of
    time belongs to the innermost event open over it (the one started last). Not rooflens's algorithm (it
    subtracts nested children); the two agree where events nest, and differ only by the overlap where one
    event starts inside another and ends after it."""
    start, dur = t.start_ps.tolist(), t.dur_ps.tolist()
    end = [a + d for a, d in zip(start, dur)]
    lane = list(zip(t.host.tolist(), t.device.tolist(), t.line.tolist()))
    out = [0] * len(start)
    stack: list[int] = []
    clock = 0

    def close_until(until: float) -> None:
        nonlocal clock
        while stack and end[stack[-1]] <= until:
            top = stack.pop()
            out[top] += max(0, end[top] - clock)
            clock = max(clock, end[top])

    current = None
    for i in sorted(range(len(start)), key=lambda i: (lane[i], start[i], -dur[i])):
        if lane[i] != current:
            close_until(float("inf"))
            current, clock = lane[i], start[i]
        close_until(start[i])
        if stack and start[i] > clock:
            out[stack[-1]] += start[i] - clock
        clock = max(clock, start[i])
        stack.append(i)
    close_until(float("inf"))
    import numpy as np

    return np.asarray(out, np.int64)


def fixture_hlo_files() -> list[Path]:
    """Every HLO module text file among the shared fixtures (buffer assignments excluded)."""
    if not FIXTURES.exists():
        if IN_CI:
            raise RuntimeError(f"test fixtures are not present at {FIXTURES}")
        return []
    return sorted(
        p for p in FIXTURES.rglob("*.txt")
        if "buffer-assignment" not in p.name and "memory-usage" not in p.name and "live-range" not in p.name
    )


def _compile_corpus(dump_root: Path) -> dict[str, str]:
    """Real HLO texts from real JAX programs: compiled, lowered and XLA-dumped modules."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from rooflens.workloads import TransformerConfig, make_mesh, sharded_train_step

    assert len(jax.devices()) == 8, "tests need 8 virtual CPU devices"
    corpus: dict[str, str] = {}

    def add(name, jitted, *args, dump=False):
        lowered = jitted.lower(*args)
        corpus[f"{name}.lowered"] = lowered.as_text(dialect="hlo")
        opts = {}
        if dump:
            opts = {"xla_dump_to": str(dump_root / name), "xla_dump_hlo_pass_re": "spmd-partitioning"}
        corpus[f"{name}.compiled"] = lowered.compile(compiler_options=opts).as_text()
        if dump:
            for f in sorted((dump_root / name).glob("*.txt")):
                if "buffer-assignment" in f.name or "memory-usage" in f.name or "live-range" in f.name:
                    continue
                corpus[f"{name}.dump.{f.name}"] = f.read_text()

    # the seed's matmul, with its bf16→f32 convert
    add("seed_matmul", jax.jit(lambda x, y: jnp.einsum("bf,fd->db", x, y)),
        jnp.ones((128, 256)), jnp.ones((256, 16), jnp.bfloat16))

    def loop(x):
        y = jax.lax.fori_loop(0, 3, lambda i, c: jnp.sin(c) @ c, x)
        return jax.lax.cond(y.sum() > 0, lambda a: a + 1, lambda a: a - 1, y)

    add("while_cond", jax.jit(loop), jnp.ones((16, 16)))

    def conv_pool(x, k):
        y = jax.lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        y = jax.lax.reduce_window(y, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        return jnp.sort(y.reshape(-1))[:10], jnp.fft.rfft(y[0, 0, :, 0])

    add("conv_pool_sort_fft", jax.jit(conv_pool), jnp.ones((2, 16, 16, 3)), jnp.ones((3, 3, 3, 8)))

    def gather_scatter(table, idx, upd):
        rows = table[idx]
        return table.at[idx].add(upd), rows.astype(jnp.int8), jax.lax.top_k(rows[0], 3)

    add("gather_scatter", jax.jit(gather_scatter), jnp.ones((64, 32)), jnp.arange(8), jnp.ones((8, 32)))

    mesh = make_mesh((4, 2))
    cfg = TransformerConfig()
    step, args = sharded_train_step(cfg, mesh)
    add("transformer_4x2", step, *args, dump=True)

    def collectives(x):
        a = jax.lax.all_to_all(x, "data", 0, 0, tiled=True)
        b = jax.lax.ppermute(a, "data", [(i, (i + 1) % 4) for i in range(4)])
        c = jax.lax.psum_scatter(b, "model", scatter_dimension=0, tiled=True)
        d = jax.lax.all_gather(c, "model", tiled=True)
        return jax.lax.psum(d, "data")

    sm = jax.jit(jax.shard_map(collectives, mesh=mesh, in_specs=P("data", "model"), out_specs=P(None, "model")))
    add("shard_map_collectives", sm, jax.ShapeDtypeStruct((64, 64), jnp.float32), dump=True)

    # FSDP on a small model: weights sharded on 'data' must be all-gathered every step (seed 001)
    w_spec = NamedSharding(mesh, P("data", None))
    x_spec = NamedSharding(mesh, P("data", None))
    fsdp = jax.jit(lambda x, w: jnp.tanh(x @ w), in_shardings=(x_spec, w_spec), out_shardings=x_spec)
    add("fsdp_matmul", fsdp, jax.ShapeDtypeStruct((64, 256), jnp.bfloat16),
        jax.ShapeDtypeStruct((256, 512), jnp.bfloat16), dump=True)
    return corpus


@pytest.fixture(scope="session")
def hlo_corpus(tmp_path_factory) -> dict[str, str]:
    return _compile_corpus(tmp_path_factory.mktemp("xla_dump"))


@pytest.fixture(scope="session")
def example_hlo() -> str:
    from rooflens.cli.common import example_hlo_path

    return example_hlo_path().read_text()


@pytest.fixture(scope="session")
def sharded_cpu_trace(tmp_path_factory) -> Path:
    """A real capture on 8 CPU devices: a sharded matmul chain with a psum, 4 steps (one XSpace file)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import rooflens as rl

    mesh = Mesh(np.array(jax.devices()).reshape(8), ("d",))

    @jax.jit
    def step(w, x):
        h = jnp.tanh(x @ w)
        return w - 1e-3 * jax.lax.with_sharding_constraint(h.T @ x, NamedSharding(mesh, P())), x

    w = jax.device_put(jnp.ones((256, 256)), NamedSharding(mesh, P()))
    x = jax.device_put(jnp.ones((512, 256)), NamedSharding(mesh, P("d")))
    logdir = tmp_path_factory.mktemp("sharded-capture")
    prof = rl.capture(step, w, x, steps=4, logdir=logdir, feed=lambda out, args: out)
    return Path(prof.sources[0])
