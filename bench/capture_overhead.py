"""How much `rooflens run` slows the program it measures: the demo's training step (a 4×2-mesh
transformer on 8 CPU devices), timed by the script itself, with and without the profiler.

Each round runs the same script twice, once under plain ``python`` and once under
``rooflens run``, in alternating order (so a machine that speeds up or slows down during the
benchmark weighs on both); each run times its own steps (``block_until_ready`` after each, the
first ``--skip`` left out as warm-up). The figure is the median step time under capture over the
median without, minus one. Goal: ≤ 5 %.

    python bench/capture_overhead.py [--rounds 5] [--steps 20] [--skip 3] [--json]

``--long N`` measures a long run instead: a small training loop of N tiny steps, the whole
process timed from outside (start-up, import, compilation and every step), under plain
``python``, under ``rooflens run --steps A:A+5`` (a window: untraced outside it) and under
``rooflens run`` (the whole run traced), interleaved; it prints the ratios to python and the size
of each trace. Goal: the window ≤ 1.05× python, its trace the same size whatever N.

    python bench/capture_overhead.py --long 3000 [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKLOAD = '''
import json, os, sys, time
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax, jax.numpy as jnp
from rooflens.workloads import TransformerConfig, make_mesh, sharded_train_step

steps = int(sys.argv[1])
step, (ap, at) = sharded_train_step(TransformerConfig(), make_mesh())
params = jax.tree.map(lambda s: jax.device_put(jnp.zeros(s.shape, s.dtype), s.sharding), ap)
tokens = jax.device_put(jnp.zeros(at.shape, at.dtype), at.sharding)
times = []
for _ in range(steps):
    t0 = time.perf_counter()
    params = jax.block_until_ready(step(params, tokens)[0])
    times.append(time.perf_counter() - t0)
print("STEP_TIMES_S " + json.dumps(times))
'''


LONG_LOOP = '''
import sys
import jax, jax.numpy as jnp

n = int(sys.argv[1])
key = jax.random.PRNGKey(0)
w = jax.random.normal(key, (128, 128)) * 0.05
x = jax.random.normal(key, (64, 128))


@jax.jit
def step(w, x):
    g = jax.grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)
    return w - 0.01 * g


for _ in range(n):
    w = step(w, x)
print("final", float(w.sum()))
'''


def timed_process(cmd: list[str]) -> float:
    """Whole-process wall time of ``cmd`` (start-up, imports, compilation, every step)."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.setdefault("JAX_PLATFORMS", "cpu")
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:5])} failed:\n{r.stderr[-3000:]}")
    return dt


def trace_bytes(logdir: Path) -> int:
    return sum(p.stat().st_size for p in logdir.rglob("*.xplane.pb"))


def long_loop(n: int, rounds: int, as_json: bool) -> None:
    start = min(n // 2, 1000)
    modes = {"python": [], f"rooflens run --steps {start}:{start + 5}": [], "rooflens run": []}
    sizes: dict[str, list[int]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="rooflens-long-") as tmp:
        script = Path(tmp) / "train.py"
        script.write_text(LONG_LOOP)
        for r in range(rounds):
            order = list(modes) if r % 2 == 0 else list(reversed(modes))
            for k, mode in enumerate(order):
                logdir = Path(tmp) / f"logs-{r}-{k}"
                window = ["--steps", f"{start}:{start + 5}"] if "--steps" in mode else []
                cmd = [sys.executable, str(script), str(n)] if mode == "python" else \
                    [sys.executable, "-m", "rooflens.cli", "run", "--logdir", str(logdir), *window, str(script), str(n)]
                modes[mode].append(timed_process(cmd))
                sizes[mode].append(trace_bytes(logdir) if logdir.exists() else 0)
            if not as_json:
                print(f"round {r + 1}: " + ", ".join(f"{m} {v[-1]:.2f} s" for m, v in modes.items()), file=sys.stderr)
    base = statistics.median(modes["python"])
    result = {"steps": n, "rounds": rounds, "median_process_s": {m: statistics.median(v) for m, v in modes.items()},
              "ratio_to_python": {m: statistics.median(v) / base for m, v in modes.items()},
              "trace_bytes": {m: statistics.median(v) for m, v in sizes.items()}}
    if as_json:
        print(json.dumps(result, indent=2))
        return
    for m in modes:
        print(f"{m:32s} {result['median_process_s'][m]:7.2f} s  {result['ratio_to_python'][m]:.3f}× python  "
              f"trace {result['trace_bytes'][m] / 1e6:.2f} MB")


def one(mode: str, script: Path, steps: int, logdir: Path) -> list[float]:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.setdefault("JAX_PLATFORMS", "cpu")
    cmd = [sys.executable, str(script), str(steps)] if mode == "python" else \
        [sys.executable, "-m", "rooflens.cli", "run", "--logdir", str(logdir), str(script), str(steps)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if r.returncode != 0:
        raise SystemExit(f"{mode} run failed:\n{r.stderr[-3000:]}")
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("STEP_TIMES_S "))
    return json.loads(line.split(" ", 1)[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--skip", type=int, default=3, help="first steps of each run left out (compilation, first run)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--long", type=int, default=0, metavar="N",
                    help="whole-process time of an N-step loop: python vs rooflens run --steps vs rooflens run")
    args = ap.parse_args()
    if args.long:
        long_loop(args.long, args.rounds, args.json)
        return
    with tempfile.TemporaryDirectory(prefix="rooflens-overhead-") as tmp:
        script = Path(tmp) / "demo_step.py"
        script.write_text(WORKLOAD)
        runs: dict[str, list[float]] = {"python": [], "rooflens run": []}
        medians: dict[str, list[float]] = {"python": [], "rooflens run": []}
        for r in range(args.rounds):
            order = ("python", "rooflens run") if r % 2 == 0 else ("rooflens run", "python")
            for mode in order:
                times = one(mode, script, args.steps, Path(tmp) / "logs")[args.skip:]
                runs[mode] += times
                medians[mode].append(statistics.median(times))
            if not args.json:
                print(f"round {r + 1}: python {medians['python'][-1] * 1e3:.1f} ms, "
                      f"rooflens run {medians['rooflens run'][-1] * 1e3:.1f} ms per step", file=sys.stderr)
    base, cap = statistics.median(runs["python"]), statistics.median(runs["rooflens run"])
    result = {"rounds": args.rounds, "steps_per_run": args.steps - args.skip, "median_step_s_python": base,
              "median_step_s_rooflens_run": cap, "inflation": cap / base - 1,
              "per_round_median_step_s": medians}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"median step: python {base * 1e3:.2f} ms, under rooflens run {cap * 1e3:.2f} ms → "
              f"{(cap / base - 1) * 100:+.1f} % ({args.rounds} interleaved rounds × {args.steps - args.skip} steps)")


if __name__ == "__main__":
    main()
