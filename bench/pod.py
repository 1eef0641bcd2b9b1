"""A pod's trace set on one machine: wall time against workers, peak memory per worker.

    python bench/pod.py [--hosts 64] [--steps 5] [--layers 2] [--repeat 2] [--ray] [--driver-hosts 256]
                        [--host-file FILE]

Builds (once, under bench/.cache/) a real per-process trace (a transformer training step on 8
virtual CPU devices, captured with ``rl.capture``) and an N-host run directory of it replicated,
one ``hostNN.xplane.pb`` per host. Then, each in a fresh process with the trace cache off:

* ``rooflens report RUN --json`` with ``--workers 1`` and ``--workers 2`` (and ``--engine ray`` with
  ``--ray``, when Ray is installed): wall time, the driver's peak RSS, the largest worker's peak RSS;
* ``rl.load`` alone with 1 and 2 workers (the map and the merge, no analysis).

Prints the times, their ratio to one worker, and the per-host cost that docs/pod-scale.md projects
from. ``--driver-hosts N`` then builds an N-host run of the same trace and gives the driver's own peak
RSS for ``rl.load`` on 2 workers, for N/4 and N hosts, with every host's events merged and with the hosts'
aggregates merged (``merge="aggregates"``; the budget of issue 24: 256 hosts within 1.5 GB, flat in the hosts).
``--host-file FILE`` makes those runs of FILE instead (e.g. a 1 GB trace), each host a symbolic link to it: the
columnar cache (on for these runs) then decodes it once and serves every host after the first.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

CACHE = Path(__file__).resolve().parent / ".cache"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest import MAKE  # noqa: E402  (the same real capture, smaller)

LOAD = textwrap.dedent("""
    import json, resource, sys, time
    import rooflens as rl
    t0 = time.perf_counter()
    prof = rl.load(sys.argv[1], workers=int(sys.argv[2]), engine=sys.argv[3], merge=sys.argv[4])
    dt = time.perf_counter() - t0
    print(json.dumps({"seconds": dt, "hosts": len(prof.hosts), "events": len(prof.table),
                      "driver_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "worker_rss": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}))
""")


def run(argv: list[str], env: dict) -> dict | None:
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out, err = p.communicate()
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        print(err.decode(errors="replace")[-800:], file=sys.stderr)
        return None
    last = out.decode(errors="replace").strip().splitlines()[-1] if out.strip() else "{}"
    info = json.loads(last) if last.startswith("{") else {}
    return {"wall": wall, **info}


def build(args) -> Path:
    if getattr(args, "host_file", None):
        return linked(Path(args.host_file).resolve(), args.hosts)
    logdir = CACHE / f"pod_src_{args.layers}l_{args.steps}s"
    found = sorted(logdir.rglob("*.xplane.pb"))
    if not found:
        print(f"capturing a per-process trace: {args.steps} steps of a {args.layers}-layer transformer …", flush=True)
        subprocess.run([sys.executable, "-c", MAKE, str(args.steps), str(args.layers), str(logdir)], check=True,
                       env={**os.environ, "PYTHONWARNINGS": "ignore"})
        found = sorted(logdir.rglob("*.xplane.pb"))
    src = found[-1]
    run_dir = CACHE / f"pod_{args.hosts}h_{args.layers}l_{args.steps}s" / "plugins" / "profile" / "run"
    if not run_dir.is_dir() or len(list(run_dir.glob("*.xplane.pb"))) != args.hosts:
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        for i in range(args.hosts):
            shutil.copy(src, run_dir / f"host{i:02d}.xplane.pb")
        shutil.copy(src.parent / "rooflens.json", run_dir / "rooflens.json")
    return run_dir


def linked(src: Path, hosts: int) -> Path:
    """A run directory of ``hosts`` symbolic links to one trace file."""
    run_dir = CACHE / f"linked_{hosts}h_{src.stem.split('.')[0]}" / "plugins" / "profile" / "run"
    if not run_dir.is_dir() or len(list(run_dir.glob("*.xplane.pb"))) != hosts:
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        for i in range(hosts):
            (run_dir / f"host{i:03d}.xplane.pb").symlink_to(src)
    return run_dir


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=64)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--ray", action="store_true", help="also time --engine ray on a local Ray cluster")
    ap.add_argument("--driver-hosts", type=int, default=0, help="also measure the driver's peak RSS on this many hosts")
    ap.add_argument("--host-file", help="for --driver-hosts: each host a symbolic link to this trace file")
    ap.add_argument("--merges", default="events,aggregates", help="for --driver-hosts: the merges measured")
    args = ap.parse_args()
    run_dir = build(args)
    size = sum(f.stat().st_size for f in run_dir.glob("*.xplane.pb"))
    env = {**os.environ, "ROOFLENS_NO_CACHE": "1"}
    print(f"{run_dir}: {args.hosts} hosts, {size / 1e6:,.0f} MB\n")
    rows = []
    engines = [("local", 1), ("local", 2)] + ([("ray", 2)] if args.ray else [])
    for what in ("report --json", "rl.load"):
        for engine, workers in engines:
            best = None
            for _ in range(args.repeat):
                if what == "rl.load":
                    r = run([sys.executable, "-c", LOAD, str(run_dir), str(workers), engine, "events"], env)
                else:
                    r = run([sys.executable, "-m", "rooflens.cli", "report", str(run_dir), "--json", "--no-calibrate",
                             "--workers", str(workers), "--engine", engine], env)
                if r is None:
                    break
                best = r if best is None or r["wall"] < best["wall"] else best
            rows.append((what, engine, workers, best))
    print(f"{'measure':16} {'engine':7} {'workers':>7} {'wall s':>8} {'vs 1':>6} {'driver RSS':>11} {'worker RSS':>11}")
    base: dict[str, float] = {}
    for what, engine, workers, r in rows:
        if r is None:
            print(f"{what:16} {engine:7} {workers:7} {'failed':>8}")
            continue
        base.setdefault(what, r["wall"])
        drv = f"{r['driver_rss'] / 1e6:.0f} MB" if "driver_rss" in r else ""
        wrk = f"{r['worker_rss'] / 1e6:.0f} MB" if r.get("worker_rss") else ""
        print(f"{what:16} {engine:7} {workers:7} {r['wall']:8.2f} {r['wall'] / base[what]:5.2f}x {drv:>11} {wrk:>11}")
    one = next((r for w, e, n, r in rows if w == "rl.load" and n == 1 and r), None)
    if one:
        print(f"\nper host: {one['seconds'] / args.hosts * 1e3:.0f} ms to read and merge "
              f"{size / args.hosts / 1e6:.1f} MB ({one['events'] / args.hosts:,.0f} op events) on one worker")
    if args.driver_hosts:
        driver_memory(args, env)
    return 0


def driver_memory(args, env: dict) -> None:
    """The driver's peak RSS against the number of hosts, for each merge: flat is the aim."""
    if args.host_file:
        env = {k: v for k, v in env.items() if k != "ROOFLENS_NO_CACHE"}  # one decode serves every link
        warm = linked(Path(args.host_file).resolve(), 1)
        print(f"\nfilling the columnar cache from {args.host_file} …", flush=True)
        run([sys.executable, "-c", LOAD, str(warm), "1", "local", "events"], env)
    counts = sorted({max(1, args.driver_hosts // 4), args.driver_hosts})
    print(f"\n{'merge':11} {'hosts':>6} {'wall s':>8} {'kept events':>12} {'driver RSS':>11} {'vs fewest':>9} "
          f"{'worker RSS':>11}")
    for merge in args.merges.split(","):
        first = None
        for n in counts:
            big = build(argparse.Namespace(**{**vars(args), "hosts": n}))
            r = run([sys.executable, "-c", LOAD, str(big), "2", "local", merge], env)
            if r is None:
                print(f"{merge:11} {n:6} {'failed':>8}")
                continue
            first = first or r["driver_rss"]
            print(f"{merge:11} {n:6} {r['wall']:8.1f} {r['events']:12,} {r['driver_rss'] / 1e6:9,.0f} MB "
                  f"{r['driver_rss'] / first:8.2f}x {r['worker_rss'] / 1e6:9,.0f} MB", flush=True)
    print("(budget of issue 24: 256 hosts of a 1 GB trace within 1,500 MB in the driver)")


if __name__ == "__main__":
    sys.exit(main())
