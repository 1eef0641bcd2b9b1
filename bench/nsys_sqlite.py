"""How fast rooflens reads an Nsight Systems SQLite export, against a bare ``sqlite3`` fetchall of the rows it needs.

    python bench/nsys_sqlite.py [--rounds 3] [--times 80] [--export FILE.sqlite]

The input: the real 2 × H100 PyTorch export of tests/fixtures (kernels, memcpy, memset, CUDA runtime calls, NVTX
ranges) ``--times`` times over, each copy later in time and in correlation ids (built once by bench/ingest.py's
``_repeat_sqlite``, cached under bench/.cache/big/), or any export given with ``--export``.

Each round runs, each in a fresh process and in turn (a machine that slows down weighs on all alike):

* ``sqlite3 fetchall`` (the baseline): ``import sqlite3``, then ``fetchall()`` of every row and column the reader
  needs: the kernels, memcpy and memset (times, device, stream, correlation id, process, name or kind, bytes,
  memory kinds), the runtime calls that launched them, and the NVTX push/pop ranges of the launching threads;
* ``adbc fetch``: the same queries through the ADBC SQLite driver into Arrow tables (what the reader uses);
* ``report, first``: the whole ``rooflens report FILE --json``, imports included, with an empty cache;
* ``report, cached``: the same command again, reading the columnar cache the first one wrote;
* ``report, before`` (with ``--before SRC``): the first report by another checkout's sources.

Prints each row's best and median wall seconds, its rows (or events)/s, and its best against the baseline's best
(goal: the first report ≤ 0.75×).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from ingest import CACHE, ROOT, _repeat_sqlite  # noqa: E402

QUERIES = [
    'SELECT start, "end", deviceId, streamId, correlationId, globalPid, shortName FROM CUPTI_ACTIVITY_KIND_KERNEL',
    'SELECT start, "end", deviceId, streamId, correlationId, globalPid, copyKind, bytes, srcKind, dstKind '
    "FROM CUPTI_ACTIVITY_KIND_MEMCPY",
    'SELECT start, "end", deviceId, streamId, correlationId, globalPid, bytes, memKind FROM CUPTI_ACTIVITY_KIND_MEMSET',
    "SELECT correlationId, globalTid, start FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId IN "
    "(SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL UNION SELECT correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY "
    "UNION SELECT correlationId FROM CUPTI_ACTIVITY_KIND_MEMSET)",
    'SELECT start, "end", globalTid, textId, text FROM NVTX_EVENTS WHERE eventType = 59 AND globalTid IN '
    "(SELECT DISTINCT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME)",
]

FETCHALL = textwrap.dedent("""
    import json, sqlite3, sys
    con = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro&immutable=1", uri=True)
    n = sum(len(con.execute(q).fetchall()) for q in json.loads(sys.argv[2]))
    print(n)
""")

ADBC = textwrap.dedent("""
    import json, sys
    from adbc_driver_sqlite import dbapi
    con = dbapi.connect(f"file:{sys.argv[1]}?mode=ro&immutable=1")
    n = 0
    for q in json.loads(sys.argv[2]):
        cur = con.cursor()
        cur.execute(q)
        n += cur.fetch_arrow_table().num_rows
        cur.close()
    print(n)
""")


def timed(argv: list[str], env: dict) -> tuple[float, str]:
    t0 = time.perf_counter()
    p = subprocess.run(argv, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} … failed:\n{p.stderr[-2000:]}")
    return wall, p.stdout


def main() -> int:
    import json

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--times", type=int, default=80, help="copies of the real export (default 80: 2.4 M events)")
    ap.add_argument("--export", type=Path, help="an export to read instead of the repeated fixture")
    ap.add_argument("--before", type=Path, metavar="SRC", help="also time the report of another checkout's src/ "
                    "(e.g. `git archive COMMIT src | tar -x -C /tmp/base`), interleaved in the same rounds")
    args = ap.parse_args()
    path = args.export
    if path is None:
        src = ROOT / "tests" / "fixtures" / "gpu_nvidia" / "nsys_sqlite" / "nsysai_pytorch_h100x2_mfu_before.sqlite"
        path = CACHE / "big" / f"x{args.times}.sqlite"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            print(f"making {path.name}: the real export {args.times} times over …", flush=True)
            _repeat_sqlite(src, path, args.times)
    py = sys.executable
    cache = Path(tempfile.mkdtemp(prefix="rooflens-bench-"))
    env = {**os.environ, "ROOFLENS_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT / "src")}
    before_env = {**env, "PYTHONPATH": str(args.before), "ROOFLENS_NO_CACHE": "1"} if args.before else None
    report = [py, "-m", "rooflens.cli", "report", str(path), "--json", "--no-calibrate"]
    qs = json.dumps(QUERIES)
    walls: dict[str, list[float]] = {k: [] for k in ("sqlite3 fetchall", "adbc fetch", "report, first",
                                                     "report, cached")}
    if before_env:
        walls["report, before"] = []
    rows = 0
    try:
        for _ in range(args.rounds):
            wall, out = timed([py, "-c", FETCHALL, str(path), qs], env)
            walls["sqlite3 fetchall"].append(wall)
            rows = int(out.strip())
            walls["adbc fetch"].append(timed([py, "-c", ADBC, str(path), qs], env)[0])
            for kept in ("traces", "analysis"):  # the first report: neither the trace nor its aggregates cached
                shutil.rmtree(cache / kept, ignore_errors=True)
            walls["report, first"].append(timed(report, env)[0])
            walls["report, cached"].append(timed(report, env)[0])
            if before_env:
                walls["report, before"].append(timed(report, before_env)[0])
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    base = min(walls["sqlite3 fetchall"])
    print(f"{path.name}: {path.stat().st_size / 1e6:,.0f} MB, {rows:,} rows the reader needs; "
          f"best and median of {args.rounds}, interleaved")
    print(f"{'':18} {'best s':>7} {'median s':>9} {'rows/s':>11} {'vs fetchall':>12}")
    for what, w in walls.items():
        print(f"{what:18} {min(w):7.2f} {statistics.median(w):9.2f} {rows / min(w):11,.0f} {min(w) / base:11.2f}x")
    print("\nvs fetchall: the row's best wall time over the bare sqlite3 fetchall's best, same run "
          "(goal: report, first ≤ 0.75x).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
