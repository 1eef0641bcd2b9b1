"""Measure this machine's default JAX device and save it as the chip ``local``.

What is measured, each with warm-up (compile + one run) and several timed repeats, every run
ending in ``block_until_ready()``:

* dense matmul throughput per dtype: square matmuls at a few sizes (growing until one run takes
  long enough to time well), FLOPs = 2·n³;
* memory bandwidth: ``y = x + 1`` over a large array, bytes = read + write.

The figure kept for each is the median over repeats of the best size; the spread (min, quartiles,
max over repeats, and the rate at every size) goes into the source text and the report, because a
single number hides how noisy a shared machine is.
"""

from __future__ import annotations

import platform
import statistics
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from rooflens.chips.catalog import LOCAL_CHIP, local_chip_path


@dataclass(frozen=True)
class Measurement:
    """Repeated timings of one kernel and the rate they imply."""

    what: str  # e.g. "f32 matmul 2048x2048x2048"
    work: float  # FLOPs or bytes per run
    unit: str  # "FLOP/s" or "B/s"
    times_s: tuple[float, ...]

    @property
    def rates(self) -> list[float]:
        return sorted(self.work / t for t in self.times_s if t > 0)

    @property
    def median(self) -> float:
        return statistics.median(self.rates)

    @property
    def spread(self) -> dict[str, float]:
        r = self.rates
        q = statistics.quantiles(r, n=4) if len(r) >= 2 else [r[0]] * 3
        return {"min": r[0], "q1": q[0], "median": statistics.median(r), "q3": q[2], "max": r[-1]}

    @property
    def relative_spread(self) -> float:
        """(q3 − q1) / median: how much the machine wobbled."""
        s = self.spread
        return (s["q3"] - s["q1"]) / s["median"] if s["median"] else 0.0


@dataclass(frozen=True)
class Calibration:
    backend: str
    device_kind: str
    host: str
    when: str
    matmul: dict[str, list[Measurement]] = field(default_factory=dict)  # dtype → one per size
    copy: list[Measurement] = field(default_factory=list)

    def best(self, dtype: str) -> Measurement:
        return max(self.matmul[dtype], key=lambda m: m.median)

    def best_copy(self) -> Measurement:
        return max(self.copy, key=lambda m: m.median)


def _time(fn, *args, repeats: int) -> tuple[float, ...]:
    fn(*args).block_until_ready()  # warm-up: compile and first run, outside the timings
    fn(*args).block_until_ready()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*args).block_until_ready()
        out.append(time.perf_counter() - t0)
    return tuple(out)


def measure(dtypes: tuple[str, ...] | None = None, repeats: int = 7, min_time_s: float = 0.05,
            max_n: int | None = None, copy_bytes: int | None = None, progress=None) -> Calibration:
    """Run the measurements on JAX's default device (slow-ish: a few seconds to a minute)."""
    import jax
    import jax.numpy as jnp

    dev = jax.devices()[0]
    backend = jax.default_backend()
    if dtypes is None:
        dtypes = ("f32", "bf16") if backend == "cpu" else ("f32", "bf16", "f16")
    if max_n is None:
        max_n = 4096 if backend == "cpu" else 16384
    if copy_bytes is None:
        copy_bytes = (256 << 20) if backend == "cpu" else (2 << 30)
    names = {"f32": jnp.float32, "bf16": jnp.bfloat16, "f16": jnp.float16}
    matmul: dict[str, list[Measurement]] = {}
    mm = jax.jit(lambda a, b: a @ b)
    for dt in dtypes:
        results = []
        n = 512
        while n <= max_n:
            a = jnp.ones((n, n), names[dt])
            times = _time(mm, a, a, repeats=repeats)
            results.append(Measurement(f"{dt} matmul {n}x{n}x{n}", 2.0 * n ** 3, "FLOP/s", times))
            if progress:
                progress(results[-1])
            del a
            if min(times) >= min_time_s and n >= 1024:
                break
            n *= 2
        matmul[dt] = results
    add = jax.jit(lambda x: x + 1)
    copies = []
    for nbytes in (copy_bytes // 4, copy_bytes):
        x = jnp.zeros((nbytes // 4,), jnp.float32)
        times = _time(add, x, repeats=repeats)
        copies.append(Measurement(f"f32 x + 1 over {nbytes / 1e6:.0f} MB", 2.0 * nbytes, "B/s", times))
        if progress:
            progress(copies[-1])
        del x
    return Calibration(backend=backend, device_kind=str(getattr(dev, "device_kind", backend)),
                       host=platform.node() or "this machine", when=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
                       matmul=matmul, copy=copies)


def _source(cal: Calibration, m: Measurement, extra: str = "") -> str:
    s = m.spread
    return (f"measured by rooflens calibrate on {cal.host} ({cal.device_kind}, {cal.backend}) at {cal.when}: "
            f"{m.what}, median of {len(m.times_s)} runs; spread min {s['min']:.3g} / q1 {s['q1']:.3g} / "
            f"q3 {s['q3']:.3g} / max {s['max']:.3g} {m.unit}{extra}")


PEAK_KEY = {"f32": "fp32", "bf16": "bf16", "f16": "fp16"}


def to_toml(cal: Calibration) -> str:
    """The calibration as a catalogue file defining the chip ``local``."""
    kind = "cpu" if cal.backend == "cpu" else "gpu"
    lines = [
        "# Written by `rooflens calibrate`; run it again to refresh. Same format as the shipped catalogue.",
        f"[chip.{LOCAL_CHIP}]",
        f'description = "this machine\'s default JAX device ({_esc(cal.device_kind)}, {cal.backend}), as measured"',
        'vendor = "local"',
        f'kind = "{kind}"',
        f'device_unit = "{kind}"',
        f'device_kinds = ["{_esc(cal.device_kind)}"]',
        f'calibration = "{_esc(summary(cal))}"',
        "",
        f"[chip.{LOCAL_CHIP}.peak_flops_per_s]",
    ]
    for dt, ms in cal.matmul.items():
        best = cal.best(dt)
        sizes = ", ".join(f"{m.what.split()[-1]}: {m.median:.3g}" for m in ms)
        source = _esc(_source(cal, best, "; per size " + sizes))
        lines.append(f'{PEAK_KEY[dt]} = {{ value = {best.median:.6g}, source = "{source}" }}')
    copy = cal.best_copy()
    lines += ["", f"[chip.{LOCAL_CHIP}.memory]",
              f'hbm_bytes_per_s = {{ value = {copy.median:.6g}, source = "{_esc(_source(cal, copy))}" }}', ""]
    return "\n".join(lines)


def _esc(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"')


def summary(cal: Calibration) -> str:
    parts = [f"{dt} matmul {cal.best(dt).median / 1e9:.1f} GFLOP/s (±{cal.best(dt).relative_spread * 50:.0f}%)"
             for dt in cal.matmul]
    c = cal.best_copy()
    parts.append(f"memory {c.median / 1e9:.1f} GB/s (±{c.relative_spread * 50:.0f}%)")
    return f"{cal.when}: " + ", ".join(parts)


def save(cal: Calibration, path: Path | None = None) -> Path:
    """Write the ``local`` chip file (replacing an older calibration, which is what it is for)."""
    path = path or local_chip_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".toml.tmp")
    tmp.write_text(to_toml(cal))
    tmp.replace(path)
    return path
