"""Does the calibrated ``local`` chip predict real matmuls on this CPU? Predicted vs measured.

    python bench/bench_predict_local.py [--repeats 7]

1. Calibrates this machine as `rooflens calibrate` does, into a temporary cache directory (your
   own saved calibration is neither used nor overwritten), and times several f32 matmuls of at
   least 1 GFLOP (square and not) **in the same interleaved rounds** as the calibration kernels:
   this machine's speed drifts by up to 2× over tens of seconds (a shared VM), and a drift
   between calibrating and measuring would otherwise be counted as a prediction error.
2. Asks ``rl.predict(matmul, a, b, chip="local")`` for each matmul's time.
3. Prints each ratio predicted/measured (medians over the rounds) and how many fall within ±25 %.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

SHAPES = [  # (m, k, n): FLOPs = 2·m·k·n, all ≥ 1 GFLOP
    (1024, 1024, 1024), (2048, 2048, 2048), (3000, 3000, 3000), (4096, 1024, 512), (1024, 4096, 2048),
    (2048, 512, 4096), (8192, 512, 1024), (1536, 1536, 6144),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    os.environ["ROOFLENS_CACHE_DIR"] = tempfile.mkdtemp(prefix="rooflens-bench-")
    import jax
    import jax.numpy as jnp

    import rooflens as rl
    from rooflens.hardware import calibrate

    mm = jax.jit(lambda a, b: a @ b)
    arrays = {s: (jnp.ones(s[:2], jnp.float32), jnp.ones(s[1:], jnp.float32)) for s in SHAPES}
    extra = tuple((f"{m}×{k}×{n}", mm, arrays[(m, k, n)]) for m, k, n in SHAPES)
    t0 = time.perf_counter()
    cal = calibrate.measure(repeats=args.repeats, extra=extra)
    calibrate.save(cal)
    print(f"calibrated and measured in {time.perf_counter() - t0:.1f} s: {calibrate.summary(cal)}\n")
    print(f"{'m×k×n':>18} {'GFLOP':>7} {'measured':>10} {'IQR':>6} {'predicted':>10} {'pred/meas':>9}")
    ratios = []
    for (m, k, n), (label, _, (a, b)) in zip(SHAPES, extra):
        ts = cal.extra_times_s[label]
        measured = statistics.median(ts)
        q = statistics.quantiles(ts, n=4)
        pred = rl.predict(mm, a, b, chip="local").time_s
        ratios.append(pred / measured)
        print(f"{label:>18} {2 * m * k * n / 1e9:7.1f} {measured * 1e3:8.2f}ms {(q[2] - q[0]) / measured * 100:5.0f}% "
              f"{pred * 1e3:8.2f}ms {pred / measured:9.2f}")
    within = sum(0.75 <= r <= 1.25 for r in ratios)
    print(f"\nwithin ±25 %: {within} of {len(ratios)}; median ratio {statistics.median(ratios):.2f} "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
