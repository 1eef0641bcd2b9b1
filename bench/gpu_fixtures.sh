#!/usr/bin/env bash
# The GPU fixtures of tests/fixtures/gpu, captured on a machine with an NVIDIA GPU (the device tool; CI has none):
# bench/gpu_mlp.py at 4096 × 4096 traced over a window of 6 steps with `rooflens run --steps 3:9`, twice: as XLA
# runs it (its thunks gathered into command buffers) and with command buffers off (--xla_gpu_enable_command_buffer=),
# whose kernels name their own HLO ops: the oracle for rooflens.trace.command_buffers. Each logdir lands in $OUT as a
# .tgz, with its report's JSON.
#     bash bench/gpu_fixtures.sh
OUT="${OUT:-/tmp/rooflens-gpu-fixtures}"
source "$(dirname "$0")/gpu_env.sh"
export WIDTH=4096 BATCH=4096
"$PY" -c "import jax, jaxlib; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, jax.devices())"
for name in command_buffers no_command_buffers; do
  logs="/tmp/$name"
  rm -rf "$logs"
  flags=""
  [ "$name" = no_command_buffers ] && flags="--xla_gpu_enable_command_buffer="
  echo "== $name"
  XLA_FLAGS="$flags" timeout 150 "$PY" -m rooflens run --logdir "$logs" --steps 3:9 bench/gpu_mlp.py 12
  timeout 100 "$PY" -m rooflens report "$logs" --json > "$OUT/$name.json"
  timeout 100 "$PY" -m rooflens report "$logs" | grep -E "^note|^Step|compute|MFU" | cut -c1-400
  tar czf "$OUT/$name.tgz" -C /tmp "$name"
done
ls -la "$OUT"
