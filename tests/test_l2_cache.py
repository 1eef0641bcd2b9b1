"""The L2 replay (rooflens.cost.cache) on real compiled HLO: what the op just before wrote is still held."""

import jax
import jax.numpy as jnp
import pytest

import rooflens as rl
from rooflens.cost.cache import from_l2, l2_capacity_bytes, l2_resident_reads
from rooflens.cost.model import costs


def _residual_then_norm(x, y, w):
    h = x + jnp.tanh(y)  # written by one op …
    h = jax.lax.optimization_barrier(h)  # … kept apart from the next
    mu = jnp.mean(h, axis=-1, keepdims=True)
    return (h - mu) * w  # … and read back by the ones after it


@pytest.fixture(scope="module")
def module():
    args = [jnp.ones((512, 1024), jnp.float32), jnp.ones((512, 1024), jnp.float32), jnp.ones((1024,), jnp.float32)]
    return rl.hlo.parse(jax.jit(_residual_then_norm).lower(*args).compile().as_text())


def test_a_buffer_written_just_before_is_resident_when_it_fits(module):
    big = l2_resident_reads(module, 64 * 2**20)
    h_bytes = 512 * 1024 * 4
    readers = [ins for ins in module.schedule() if ins.name in big]
    assert readers, "the ops after the barrier read h from the cache"
    assert all(big[ins.name] >= h_bytes for ins in readers)
    # the program's parameters are read once, first: never resident
    first = next(i for i in module.schedule() if i.opcode not in ("parameter", "constant"))
    assert first.name not in big


def test_nothing_is_resident_in_a_cache_smaller_than_the_buffers(module):
    small = l2_resident_reads(module, 512 * 1024)  # 0.5 MiB < one 2 MiB array: only the small vectors stay
    assert small and all(v < 512 * 1024 for v in small.values())
    assert l2_resident_reads(module, 0) == {}


def test_from_l2_takes_the_held_reads_off_hbm_never_more_than_read(module):
    held = l2_resident_reads(module, 64 * 2**20)
    oc = next(c for c in costs(module, emulate_fusion=False) if c.name in held)
    cut = from_l2(oc, held[oc.name], 64 * 2**20)
    assert cut.written_bytes == oc.written_bytes
    assert cut.read_bytes == pytest.approx(max(oc.read_bytes - held[oc.name], 0.0))
    assert "L2 still holds" in cut.bytes_formula
    assert from_l2(oc, 10 * oc.read_bytes, 1.0).read_bytes == 0.0


def test_l2_capacity_is_the_catalogue_figure_on_gpus_only():
    assert l2_capacity_bytes(rl.chip("a100-sxm-40gb")) == 41943040
    assert l2_capacity_bytes(rl.chip("tpu-v5e")) == 0.0
