#!/usr/bin/env bash
# rooflens on the repository's user-shaped scripts on a GPU (the device tool; CI has none): a Flax linen GPT whose
# layers run under nn.scan + remat (a while loop on the device), annotated and windowed; the Equinox GPT (lax.scan +
# checkpoint, filter_jit), windowed by its step function and traced whole. Reports' heads and each logdir in $OUT.
#     bash bench/gpu_scripts.sh
OUT="${OUT:-/tmp/rooflens-gpu-scripts}"
source "$(dirname "$0")/gpu_env.sh"
run() {  # name, rooflens run's arguments…
  local name="$1"; shift
  echo "== $name: rooflens run $*"
  rm -rf "/tmp/$name"
  timeout 150 "$PY" -m rooflens run --logdir "/tmp/$name" "$@" | tail -n 2
  timeout 100 "$PY" -m rooflens report "/tmp/$name" --json > "$OUT/$name.json"
  timeout 100 "$PY" -m rooflens report "/tmp/$name" | grep -vE "^[│┃┏┡└]" | head -n 40 | cut -c1-330
  tar czf "$OUT/$name.tgz" -C /tmp "$name"
}
run linen_window --steps 5:15 tests/window_scripts/linen_gpt.py 30 --annotate
run eqx_window --steps 5:15 tests/window_scripts/eqx_gpt.py 30
run eqx_whole tests/window_scripts/eqx_gpt.py 30 --block
ls -la "$OUT"
