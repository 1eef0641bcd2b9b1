#!/usr/bin/env bash
# On a GPU (the device tool): a large real GPU trace, and its report on two cores. A loop of N tiny jitted steps
# (bench/capture_overhead.py's long loop) traced whole by `rooflens run`; then `rooflens report --json` of it
# restricted to two cores (taskset), first with no cache and then from the cache, each with its wall time and peak
# RSS, and once more on every core. What issue 40 asks of a 1 GB trace on a 2-core machine (≥ 10 M events/s,
# ≤ 1 GB), checked on a GPU trace instead of the CPU captures bench/ingest.py repeats.
#     bash bench/gpu_big.sh [STEPS]
OUT="${OUT:-/tmp/rooflens-gpu-big}"
source "$(dirname "$0")/gpu_env.sh"
N="${1:-200000}"
"$PY" -c "import jax, jaxlib; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, jax.devices())"
"$PY" - "$OUT/loop.py" <<'PYEOF'
import re, sys
src = open("bench/capture_overhead.py").read()
open(sys.argv[1], "w").write(re.search(r"LONG_LOOP = '''(.*?)'''", src, re.S).group(1))
PYEOF
cat > "$OUT/timed.py" <<'PYEOF'
import resource, subprocess, sys, time
label, argv = sys.argv[1], sys.argv[2:]
t = time.perf_counter()
r = subprocess.run(argv, stdout=subprocess.PIPE)
if not label.startswith("report"):
    sys.stdout.buffer.write(r.stdout[-300:])
else:
    sys.stdout.buffer.write(r.stdout)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(f"{label}: {time.perf_counter() - t:.2f} s, peak {peak:.0f} MiB, exit {r.returncode}", file=sys.stderr)
PYEOF
logs=/tmp/rl-gpu-big
rm -rf "$logs"
echo "== python, $N steps"
"$PY" "$OUT/timed.py" python timeout 200 "$PY" "$OUT/loop.py" "$N"
echo "== rooflens run (whole run), $N steps"
"$PY" "$OUT/timed.py" "rooflens run" timeout 300 "$PY" -m rooflens run --logdir "$logs" "$OUT/loop.py" "$N"
trace="$(ls "$logs"/plugins/profile/*/*.xplane.pb | head -1)"
ls -la "$trace"
export ROOFLENS_CACHE_DIR=/tmp/rl-gpu-big-cache
for what in "first, 2 cores:taskset -c 0,1" "cached, 2 cores:taskset -c 0,1" "first, every core:"; do
  label="${what%%:*}"
  pin="${what#*:}"
  [ "${label%%,*}" = first ] && rm -rf "$ROOFLENS_CACHE_DIR"
  echo "== report --json, $label"
  $pin "$PY" "$OUT/timed.py" "report ($label)" "$PY" -m rooflens report "$trace" --json --no-calibrate \
    > "$OUT/report.json"
done
"$PY" - "$OUT/report.json" "$trace" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
print("devices", d["num_devices"], "op events", sum(s["occurrences"] for s in d["op_stats"]),
      "steps", (d.get("steps") or {}).get("count"), "findings", [f["rule"] for f in d["findings"]])
from rooflens.trace.formats.xspace.decode import decode
x = decode(sys.argv[2])
print("events in the file", f"{x.events_total:,}", "kept", f"{len(x):,}")
PYEOF
