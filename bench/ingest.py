"""How fast, and in how much memory, does rooflens read large traces? Against jax's ProfileData.

    python bench/ingest.py [--repeat 3] [--gb 1.0] [--no-gb] [--floor-on-gb] [--xprof-python PY] [--xprof-on-gb]
                           [--no-compile]

Inputs (made once, cached under bench/.cache/):

* a real ~0.5 M-event CPU trace: 30 steps of an 8-layer transformer on 8 virtual CPU devices
  (``rl.capture``), its ``.xplane.pb`` and ``.trace.json.gz``;
* a ≥ 2 M-event XSpace: that file five times over (a concatenated XSpace is valid protobuf: its
  planes repeat, and rooflens merges them), and a ≥ 2 M-event Chrome JSON (the trace's events
  four times over, shifted in time);
* a ~2.3 M-event Nsight Systems SQLite export: the real PyTorch export of tests/fixtures (kernels, memcpy,
  memset, CUDA runtime calls, NVTX ranges) 80 times over, each copy later in time (its baseline: a bare
  ``sqlite3`` fetchall of the rows the reader needs, as bench/nsys_sqlite.py runs it);
* a ≥ 1 GB XSpace, the same way (``--gb``; ``--no-gb`` skips it);
* a long GPU run's XSpace (~365 MB, 18 M events): the real H100 whole-run capture of tests/fixtures
  (jax 0.11.2) with every line's events 250 times over, each copy later by the line's span, and its metadata
  (HLO protos) once, as a long capture has. Its host thread is one line of hundreds of megabytes, which no
  concatenated file has (``--no-gb`` skips it too).

Each measurement runs in a fresh process (wall time and peak RSS are its own: see ``LAUNCH``):

* ``report --json``: the whole ``rooflens report FILE --json`` command, imports included, no cache;
* ``report, cached``: the same command again, reading the columnar cache the first one wrote;
* ``decode``: the reader alone (events/s over every event in the file), imports excluded;
* ``ProfileData walk``: a bare Python loop over jax's ``ProfileData`` events and stats, the floor of
  any reader built on it (whole process, and the loop alone); skipped on files over 200 MB (the 1 GB file,
  the long GPU run) unless ``--floor-on-gb`` (it needs ~11 bytes of RAM per byte of file, and minutes);
* ``xprof hlo_stats``: XProf's own converter on the same file, when ``--xprof-python`` names a Python
  with xprof (never a dependency of rooflens: ``python -m venv /tmp/xp && /tmp/xp/bin/pip install
  xprof``); on files over 200 MB only with ``--xprof-on-gb`` (tensorboard#6132: 20–30 GB of RAM). A
  skipped row says why.

rooflens's own modules are byte-compiled first (``compileall``, as ``bench/fixed_cost.py`` does; ``--no-compile``
skips it), as a pip install does and as jax, the baseline, is installed: with ``PYTHONDONTWRITEBYTECODE=1`` and an
editable checkout each report would otherwise compile ~100 modules from source (about 0.3 s on a 2-core machine, a
fifth of the 0.5 M-event report).

Prints seconds, events/s, peak RSS, and each row's time against the ProfileData walk's.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

CACHE = Path(__file__).resolve().parent / ".cache"
ROOT = Path(__file__).resolve().parents[1]

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

# Each prints one JSON line: {"seconds": inner time, "events": n}
DECODE = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from rooflens.trace.formats import reader_for
    path = Path(sys.argv[1])
    reader = reader_for(str(path)).read  # the format's own reader: XSpace, Chrome JSON, Nsight SQLite
    t0 = time.perf_counter()
    raw = reader(path)
    print(json.dumps({"seconds": time.perf_counter() - t0, "events": raw.events_total}))
""")

WALK = textwrap.dedent("""
    import json, sys, time
    from jax.profiler import ProfileData
    t0 = time.perf_counter()
    n = 0
    for plane in ProfileData.from_file(sys.argv[1]).planes:
        for line in plane.lines:
            for e in line.events:
                e.name, e.start_ns, e.duration_ns, list(e.stats)
                n += 1
    print(json.dumps({"seconds": time.perf_counter() - t0, "events": n}))
""")

XPROF = textwrap.dedent("""
    import json, os, shutil, sys, tempfile, time
    from xprof.convert import raw_to_tool_data
    tmp = tempfile.mkdtemp()  # xprof writes a cache file beside the trace: give it a copy
    copy = os.path.join(tmp, os.path.basename(sys.argv[1]))
    shutil.copy(sys.argv[1], copy)
    t0 = time.perf_counter()
    data, _ = raw_to_tool_data.xspace_to_tool_data([copy], "hlo_stats", {"use_saved_result": False})
    dt = time.perf_counter() - t0
    shutil.rmtree(tmp)
    rows = json.loads(data).get("rows", []) if data else []
    print(json.dumps({"seconds": dt, "events": len(rows)}))
""")


# Runs the measured command as its own child and reports that child's peak RSS. Two levels, because
# Linux carries a process's memory high-water mark across fork and exec: a command forked straight from
# this (large) bench process would report our peak as its own. This launcher is small when it forks.
LAUNCH = textwrap.dedent("""
    import json, resource, subprocess, sys, time
    t0 = time.perf_counter()
    rc = subprocess.call(sys.argv[1:])
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    print("ROOFLENS-BENCH-RSS " + json.dumps({"rc": rc, "rss": peak, "wall": wall}), file=sys.stderr)
""")


def child(argv: list[str], env: dict | None = None) -> dict | None:
    """Run a process; its own wall time and peak RSS (see LAUNCH) and the JSON it printed last, if any."""
    p = subprocess.run([sys.executable, "-c", LAUNCH, *argv], capture_output=True,
                       env={**os.environ, **(env or {})})
    mark = [ln for ln in p.stderr.decode(errors="replace").splitlines() if ln.startswith("ROOFLENS-BENCH-RSS ")]
    if p.returncode != 0 or not mark:
        return None
    own = json.loads(mark[-1].split(" ", 1)[1])
    if own["rc"] != 0:
        return None
    inner = {}
    lines = p.stdout.decode(errors="replace").strip().splitlines()
    if lines and lines[-1].startswith("{") and lines[-1].endswith("}"):
        try:
            inner = json.loads(lines[-1])
        except ValueError:
            inner = {}
    return {"wall": own["wall"], "rss": own["rss"], **inner}


def best(argv: list[str], repeat: int, env: dict | None = None, before=None) -> dict | None:
    """The run of median wall time of ``repeat`` (a shared machine: the median, not the luckiest run)."""
    runs = []
    for _ in range(repeat):
        if before:
            before()
        r = child(argv, env)
        if r is None:
            return None
        runs.append(r)
    return sorted(runs, key=lambda r: r["wall"])[(len(runs) - 1) // 2]


def make_inputs(args) -> dict[str, Path]:
    logdir = CACHE / "transformer_8l_30s"
    found = sorted(logdir.rglob("*.xplane.pb"))
    if not found:
        print("making a trace: 30 steps of an 8-layer transformer on 8 CPU devices …", flush=True)
        subprocess.run([sys.executable, "-c", MAKE, "30", "8", str(logdir)], check=True,
                       env={**os.environ, "PYTHONWARNINGS": "ignore"})
        found = sorted(logdir.rglob("*.xplane.pb"))
    xplane = found[-1]
    inputs = {"0.5M xplane": xplane, "0.5M trace.json.gz": xplane.with_name(xplane.name.replace(".xplane.pb",
                                                                                                 ".trace.json.gz"))}
    big = CACHE / "big"
    big.mkdir(exist_ok=True)
    x5 = big / "x5.xplane.pb"
    if not x5.exists():
        _repeat_file(xplane, x5, 5)
    inputs["2.5M xplane (x5)"] = x5
    j4 = big / "x4.trace.json.gz"
    if not j4.exists():
        _repeat_json(inputs["0.5M trace.json.gz"], j4, 4)
    inputs["2M trace.json.gz (x4)"] = j4
    nsys = ROOT / "tests" / "fixtures" / "gpu_nvidia" / "nsys_sqlite" / "nsysai_pytorch_h100x2_mfu_before.sqlite"
    if nsys.is_file():
        s80 = big / "x80.sqlite"
        if not s80.exists():
            _repeat_sqlite(nsys, s80, 80)
        inputs["2.3M nsys sqlite (x80)"] = s80
    h100 = ROOT / "tests" / "fixtures" / "gpu_nvidia" / "h100_jax0112" / "annotated_whole_run" / "vm.xplane.pb"
    if not args.no_gb and h100.is_file():
        long_gpu = big / "h100_whole_run_x250.xplane.pb"
        if not long_gpu.exists():
            print("making a long GPU run: the H100 whole-run capture's lines 250 times over …", flush=True)
            _stretch_lines(h100, long_gpu, 250)
        inputs[f"{long_gpu.stat().st_size / 1e6:.0f} MB GPU long run (x250)"] = long_gpu
    if not args.no_gb:
        n = max(1, int(args.gb * 1e9 / xplane.stat().st_size + 0.999))
        gb = big / f"x{n}.xplane.pb"
        if not gb.exists():
            _repeat_file(xplane, gb, n)
        inputs[f"{gb.stat().st_size / 1e9:.2f} GB xplane (x{n})"] = gb
    return inputs


def _repeat_file(src: Path, dst: Path, n: int) -> None:
    data = src.read_bytes()
    with dst.open("wb") as fh:
        for _ in range(n):
            fh.write(data)


def _stretch_lines(src: Path, dst: Path, n: int) -> None:
    """A run ``n`` times as long as a real one: each XLine's events (XLine field 4; XEvent offset_ps is field 2)
    ``n`` times over, copy k later by k times the line's extent, the line's duration_ps (field 9) stretched alike;
    the planes' metadata and stats once. Field numbers: tsl/profiler/protobuf/xplane.proto."""
    from rooflens.trace.formats.protowire import bytes_field, field_spans, varint_field

    buf = src.read_bytes()

    def rewritten(span, num: int, rewrite) -> bytes:
        """The message at ``span``, each of its fields ``num`` (a message) rewritten, the others as they are."""
        return b"".join(bytes_field(f, rewrite(v)) if (f, wt) == (num, 2) else buf[s:e]
                        for f, wt, s, v, e in field_spans(buf, *span))

    def line(span) -> bytes:
        head, events, line_ps = bytearray(), [], 0
        for f, wt, s, v, e in field_spans(buf, *span):
            if (f, wt) == (4, 2):  # an event: its offset, its duration and the rest of its fields
                fields = list(field_spans(buf, *v))
                at = {(g, gwt): gv for g, gwt, _, gv, _ in fields}
                events.append((at.get((2, 0), 0), at.get((3, 0), 0),
                               b"".join(buf[gs:ge] for g, gwt, gs, _, ge in fields if (g, gwt) != (2, 0))))
            elif (f, wt) == (9, 0):
                line_ps = v
            else:
                head += buf[s:e]
        span_ps = max((o + d for o, d, _ in events), default=0) + 1000
        return b"".join([bytes(head), varint_field(9, max(line_ps, span_ps) + span_ps * (n - 1)),
                         *(bytes_field(4, varint_field(2, o + k * span_ps) + rest)
                           for k in range(n) for o, _, rest in events)])

    dst.write_bytes(rewritten((0, len(buf)), 1, lambda plane: rewritten(plane, 3, line)))


def _repeat_sqlite(src: Path, dst: Path, n: int) -> None:
    """A real Nsight Systems export's GPU work, runtime calls and NVTX ranges ``n`` times over, each copy shifted
    past the last in time and in correlation ids (an export of a run ``n`` times as long)."""
    import sqlite3

    dst.unlink(missing_ok=True)
    with sqlite3.connect(f"file:{src}?mode=ro", uri=True) as a, sqlite3.connect(dst) as b:
        a.backup(b)
    db = sqlite3.connect(dst)
    tables = ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
              "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"]
    lo, hi = db.execute('SELECT min(start), max("end") FROM CUPTI_ACTIVITY_KIND_RUNTIME').fetchone()
    corr = db.execute("SELECT max(correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0] + 1
    span = hi - lo + 1
    for t in tables:
        cols = [r[1] for r in db.execute(f"PRAGMA table_info({t})")]
        db.execute(f"CREATE TEMP TABLE one AS SELECT * FROM {t}")
        for k in range(1, n):
            shift = {"start": f"start + {k * span}", "end": f'"end" + {k * span}',
                     "correlationId": f"correlationId + {k * corr}"}
            exprs = ", ".join(shift.get(c, f'"{c}"') for c in cols)
            db.execute(f"INSERT INTO {t} ({', '.join(f'{chr(34)}{c}{chr(34)}' for c in cols)}) SELECT {exprs} FROM one")
        db.execute("DROP TABLE one")
    db.commit()
    db.execute("UPDATE ANALYSIS_DETAILS SET stopTime = stopTime + ?", ((n - 1) * span,))
    db.commit()
    db.close()


def _repeat_json(src: Path, dst: Path, n: int) -> None:
    import orjson

    doc = orjson.loads(gzip.decompress(src.read_bytes()))
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    meta = [e for e in doc["traceEvents"] if e.get("ph") != "X"]
    span = max(e["ts"] + e.get("dur", 0) for e in events) - min(e["ts"] for e in events)
    out = list(meta)
    for k in range(n):
        out += [{**e, "ts": e["ts"] + k * span} for e in events]
    dst.write_bytes(gzip.compress(orjson.dumps({**doc, "traceEvents": out}), compresslevel=1))


def count_events(path: Path) -> int:
    r = child([sys.executable, "-c", DECODE, str(path)])
    return r["events"] if r else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--gb", type=float, default=1.0, help="size of the large XSpace, in GB")
    ap.add_argument("--no-gb", action="store_true", help="skip the large XSpace")
    ap.add_argument("--floor-on-gb", action="store_true", help="also walk the large XSpace with ProfileData")
    ap.add_argument("--xprof-python", help="a Python that has xprof installed (e.g. a separate venv)")
    ap.add_argument("--xprof-on-gb", action="store_true", help="also run XProf on the large XSpace (20-30 GB of RAM)")
    ap.add_argument("--no-compile", action="store_true", help="time rooflens's sources as they are (no bytecode "
                    "written first)")
    args = ap.parse_args()
    if not args.no_compile:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "src" / "rooflens")], check=True,
                       stdout=subprocess.DEVNULL)
    inputs = make_inputs(args)
    rooflens = [sys.executable, "-m", "rooflens.cli", "report"]
    nocache = {"ROOFLENS_NO_CACHE": "1"}
    print(f"rooflens's modules: {'as found' if args.no_compile else 'byte-compiled first'}")
    print(f"{'input':26} {'reader':22} {'seconds':>8} {'events/s':>12} {'peak RSS':>9} {'vs base':>8}")
    for label, path in inputs.items():
        n = count_events(path)
        gb = path.stat().st_size > 2e8  # the ProfileData walk needs ~11 bytes of RAM per byte, and minutes
        rows = {}
        rows["report --json"] = best([*rooflens, str(path), "--json", "--no-calibrate"], args.repeat, nocache)

        def fresh_cache():
            shutil.rmtree(Path(os.environ["ROOFLENS_CACHE_DIR"]) / "traces", ignore_errors=True)

        fresh_cache()
        child([*rooflens, str(path), "--json", "--no-calibrate"])  # writes the cache
        rows["report, cached"] = best([*rooflens, str(path), "--json", "--no-calibrate"], args.repeat)
        rows["decode alone"] = best([sys.executable, "-c", DECODE, str(path)], args.repeat)
        if path.name.endswith(".xplane.pb") and (not gb or args.floor_on_gb):
            rows["ProfileData walk"] = best([sys.executable, "-c", WALK, str(path)], args.repeat)
        if path.name.endswith(".sqlite"):  # an export's floor: Python's sqlite3 fetching the rows the reader needs
            from nsys_sqlite import FETCHALL, QUERIES

            rows["sqlite3 fetchall"] = best([sys.executable, "-c", FETCHALL, str(path), json.dumps(QUERIES)],
                                            args.repeat)
        skipped = {}
        if path.name.endswith(".xplane.pb"):
            if not args.xprof_python:
                skipped["xprof hlo_stats"] = "skipped: no --xprof-python given"
            elif gb and not args.xprof_on_gb:
                skipped["xprof hlo_stats"] = "skipped on the large file: --xprof-on-gb (needs 20-30 GB of RAM)"
            else:
                rows["xprof hlo_stats"] = best([args.xprof_python, "-c", XPROF, str(path)], 1)
        walk = rows.get("ProfileData walk") or rows.get("sqlite3 fetchall")
        print(f"{label}: {path.stat().st_size / 1e6:,.0f} MB, {n:,} events")
        for what, why in skipped.items():
            print(f"{'':26} {what:22} {why}")
        for what, r in rows.items():
            if r is None:
                print(f"{'':26} {what:22} {'failed / not available':>30}")
                continue
            secs = r.get("seconds", r["wall"]) if what in ("decode alone", "xprof hlo_stats") else r["wall"]
            ratio = f"{secs / walk['wall']:.2f}x" if walk else ""
            extra = ""
            if what == "ProfileData walk":
                extra = f"   (loop alone {r['seconds']:.2f} s)"
            if what == "xprof hlo_stats":
                extra = f"   ({r['events']} HLO op rows)"
            print(f"{'':26} {what:22} {secs:8.2f} {n / secs:12,.0f} {r['rss'] / 1e6:7.0f} MB {ratio:>8}{extra}")
        fresh_cache()
    print("\n'vs base': the row's seconds over the baseline's whole process, same file, same run: jax's ProfileData "
          "walk for an XSpace (its figure includes jax's import), a bare sqlite3 fetchall of the rows the reader "
          "needs for an Nsight export (bench/nsys_sqlite.py); decode alone excludes its imports.")
    return 0


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("ROOFLENS_CACHE_DIR", tmp)  # the user's own cache is neither read nor written
        sys.exit(main())
