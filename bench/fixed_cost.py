"""What every rooflens command pays before it does anything: its fixed cost, against ``import jax``.

    python bench/fixed_cost.py [--runs 3] [--trace FILE.xplane.pb] [--src OTHER_CHECKOUT/src] [--no-compile]

Each command runs in a fresh process, the commands interleaved round by round (a busy machine slows
them all alike), and each row is the median of ``--runs``:

* ``python -c "import jax"``: the yardstick;
* ``rooflens --help`` and ``rooflens chips``: neither should import jax, numba or numpy's users;
* ``rooflens report TRACE --json``: the whole report of a small trace (default: the 0.86 MB TPU
  fixture ``tpu/xprof_tpu_inference_2.v6e-4.xplane.pb``), copied fresh to a new directory each time,
  with ``ROOFLENS_CACHE_DIR`` an empty directory: no cache of any run helps it.

rooflens's own modules are byte-compiled first (``compileall``; ``--no-compile`` skips it), as a pip
install does: with ``PYTHONDONTWRITEBYTECODE=1`` and an editable checkout, every command would otherwise
compile ~80 modules from source on each run (about 0.3 s of CPU on a 2-core machine), which neither
jax (installed with its bytecode) nor an installed rooflens pays.

Prints wall seconds and CPU seconds (user + system, from ``wait4``: steadier than wall time on a shared
machine), each with its ratio to ``import jax``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(os.environ.get("ROOFLENS_FIXTURES", (REPO / "../shared/fixtures").resolve()))
DEFAULT_TRACE = FIXTURES / "tpu" / "xprof_tpu_inference_2.v6e-4.xplane.pb"


def run(argv: list[str], env: dict, work: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one fresh process; it must succeed."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{err}")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--src", type=Path, default=REPO / "src", help="the rooflens sources to time (default: this "
                    "checkout's; give another checkout's src/ to compare before and after)")
    ap.add_argument("--no-compile", action="store_true", help="time rooflens's sources as they are (no bytecode "
                    "written first)")
    args = ap.parse_args()
    if not args.trace.is_file():
        raise SystemExit(f"{args.trace} is not there (set ROOFLENS_FIXTURES or give --trace).")
    py = sys.executable
    if not args.no_compile:
        subprocess.run([py, "-m", "compileall", "-q", str(args.src / "rooflens")], check=True,
                       stdout=subprocess.DEVNULL)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(args.src), os.environ.get("PYTHONPATH")]))}
    rooflens = [py, "-m", "rooflens.cli"]
    rows = {
        'python -c "import jax"': lambda d: [py, "-c", "import jax"],
        "rooflens --help": lambda d: [*rooflens, "--help"],
        "rooflens chips": lambda d: [*rooflens, "chips"],
        f"rooflens report {args.trace.name} --json":
            lambda d: [*rooflens, "report", str(d / args.trace.name), "--json"],
    }
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in rows}
    for _ in range(args.runs):
        for name, argv in rows.items():
            with tempfile.TemporaryDirectory() as tmp:
                d = Path(tmp)
                shutil.copy(args.trace, d / args.trace.name)  # a fresh copy: nothing of it in the page cache's name
                (d / "cache").mkdir()
                times[name].append(run(argv(d), {**env, "ROOFLENS_CACHE_DIR": str(d / "cache")}, d))
    jax_wall = statistics.median(w for w, _ in times['python -c "import jax"'])
    jax_cpu = statistics.median(c for _, c in times['python -c "import jax"'])
    print(f"median of {args.runs} fresh processes each, interleaved; trace {args.trace} "
          f"({args.trace.stat().st_size / 1e6:.2f} MB), no cache; rooflens bytecode "
          f"{'as found' if args.no_compile else 'compiled first'}")
    print(f"{'command':<58} {'wall s':>7} {'× jax':>6} {'cpu s':>7} {'× jax':>6}")
    for name, ts in times.items():
        wall = statistics.median(w for w, _ in ts)
        cpu = statistics.median(c for _, c in ts)
        print(f"{name:<58} {wall:7.2f} {wall / jax_wall:6.2f} {cpu:7.2f} {cpu / jax_cpu:6.2f}")


if __name__ == "__main__":
    main()
