"""How fast does rooflens read a large trace? Events per second and peak memory.

    python bench/ingest.py [--steps 20] [--layers 8] [--trace FILE] [--repeat 3]

Makes (once, cached under bench/.cache/) a real trace of a transformer training step on 8
virtual CPU devices — 20 steps of an 8-layer model is well over 500k events — or reads the
``--trace`` you give. Then, each in a fresh process so peak memory is its own:

* ``rooflens``: ``rl.load`` + ``op_stats`` of the ``.xplane.pb`` and of the ``.trace.json.gz``;
* baseline 1: jax's ``ProfileData`` walking every event and its stats (the floor for any reader
  built on it);
* baseline 2: ``xprof``'s HLO op stats on the same file, when xprof is installed (it is never a
  dependency of rooflens).

Prints events/s, ratios against the baselines, and peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

CACHE = Path(__file__).resolve().parent / ".cache"

MAKE = textwrap.dedent("""
    import os, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax, jax.numpy as jnp
    import rooflens as rl
    from rooflens.workloads import TransformerConfig, make_mesh, sharded_train_step
    steps, layers, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    step, (ap, at) = sharded_train_step(TransformerConfig(n_layers=layers), make_mesh())
    params = jax.tree.map(lambda s: jax.device_put(jnp.zeros(s.shape, s.dtype), s.sharding), ap)
    tokens = jax.device_put(jnp.zeros(at.shape, at.dtype), at.sharding)
    prof = rl.capture(step, params, tokens, steps=steps, logdir=out, feed=lambda o, a: (o[0], a[1]))
    print(prof.sources[0])
""")

MEASURE = textwrap.dedent("""
    import json, resource, sys, time
    what, path = sys.argv[1], sys.argv[2]
    t0 = time.perf_counter()
    if what == "rooflens":
        import rooflens as rl
        t0 = time.perf_counter()
        prof = rl.load(path)
        stats = rl.trace.op_stats(prof)
        n_ops = len(prof.table)
    elif what == "profiledata":
        from jax.profiler import ProfileData
        t0 = time.perf_counter()
        pd = ProfileData.from_file(path)
        n_ops = 0
        for plane in pd.planes:
            for line in plane.lines:
                for e in line.events:
                    e.name, e.start_ns, e.duration_ns, list(e.stats)
                    n_ops += 1
    elif what == "xprof":
        import os, shutil, tempfile
        from xprof.convert import raw_to_tool_data
        # xprof writes a cache file (ALL_HOSTS.op_stats_v2.pb) beside the trace: give it a copy
        tmp = tempfile.mkdtemp()
        copy = os.path.join(tmp, os.path.basename(path))
        shutil.copy(path, copy)
        t0 = time.perf_counter()
        data, _ = raw_to_tool_data.xspace_to_tool_data([copy], "hlo_stats", {"use_saved_result": False})
        dt = time.perf_counter() - t0
        shutil.rmtree(tmp)
        rows = json.loads(data).get("rows", []) if data else []
        n_ops = len(rows)  # HLO ops in xprof's table (0 on CPU traces: NO_DATA)
        print(json.dumps({"seconds": dt, "op_events": n_ops,
                          "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
        sys.exit(0)
    dt = time.perf_counter() - t0
    print(json.dumps({"seconds": dt, "op_events": n_ops,
                      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
""")


def count_events(xplane: Path) -> int:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import sys
        from jax.profiler import ProfileData
        pd = ProfileData.from_file(sys.argv[1])
        print(sum(sum(1 for _ in l.events) for p in pd.planes for l in p.lines))
    """), str(xplane)], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def measure(what: str, path: Path, python: str = sys.executable) -> dict | None:
    r = subprocess.run([python, "-c", MEASURE, what, str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--trace", type=Path, help="an existing *.xplane.pb to read instead")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--xprof-python", default=sys.executable,
                    help="a Python that has xprof installed (e.g. a separate venv), for the baseline")
    args = ap.parse_args()
    if args.trace:
        xplane = args.trace
    else:
        logdir = CACHE / f"transformer_{args.layers}l_{args.steps}s"
        found = sorted(logdir.rglob("*.xplane.pb"))
        if not found:
            print(f"making a trace: {args.steps} steps of a {args.layers}-layer transformer on 8 CPU devices …")
            subprocess.run([sys.executable, "-c", MAKE, str(args.steps), str(args.layers), str(logdir)], check=True,
                           env={**os.environ, "PYTHONWARNINGS": "ignore"})
            found = sorted(logdir.rglob("*.xplane.pb"))
        xplane = found[-1]
    chrome = Path(str(xplane).replace(".xplane.pb", ".trace.json.gz"))
    n = count_events(xplane)
    print(f"{xplane} ({xplane.stat().st_size / 1e6:.1f} MB, {n:,} events in all)\n")
    rows = [("rooflens, xplane.pb", "rooflens", xplane), ("rooflens, trace.json.gz", "rooflens", chrome),
            ("ProfileData walk (floor)", "profiledata", xplane), ("xprof hlo_stats (baseline)", "xprof", xplane)]
    results = {}
    what_of = {label: what for label, what, _ in rows}
    for label, what, path in rows:
        if not path.exists():
            continue
        best = None
        for _ in range(args.repeat):
            r = measure(what, path, args.xprof_python if what == "xprof" else sys.executable)
            if r is None:
                break
            best = r if best is None or r["seconds"] < best["seconds"] else best
        results[label] = best
    base = results.get("ProfileData walk (floor)")
    print(f"{'reader':28} {'seconds':>8} {'events/s':>12} {'vs floor':>9} {'peak RSS':>10}")
    for label, r in results.items():
        if r is None:
            print(f"{label:28} {'not available':>8}")
            continue
        ratio = f"{base['seconds'] / r['seconds']:.2f}×" if base else ""
        rows = f"   ({r['op_events']:,} HLO op rows)" if what_of[label] == "xprof" else ""
        print(f"{label:28} {r['seconds']:8.2f} {n / r['seconds']:12,.0f} {ratio:>9} {r['peak_rss_bytes'] / 1e6:8.0f} MB"
              f"{rows}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
