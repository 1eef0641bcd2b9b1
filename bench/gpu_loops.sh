#!/usr/bin/env bash
# On a GPU (the device tool): (1) the Flax linen GPT (nn.scan + remat: while loops on the device) windowed with
# command buffers off, the oracle for rooflens.trace.command_buffers on loop bodies (bench/gpu_scripts.sh captured it
# with them on); (2) a triage of the Equinox GPT traced whole, whose first step failed on an H100 under
# `rooflens run` (CUDA_ERROR_LAUNCH_FAILED): the script plain, under a bare jax.profiler trace, and under rooflens
# run with command buffers off.
#     bash bench/gpu_loops.sh
OUT="${OUT:-/tmp/rooflens-gpu-loops}"
source "$(dirname "$0")/gpu_env.sh"
echo "== linen_window_no_cb"
rm -rf /tmp/linen_window_no_cb
XLA_FLAGS=--xla_gpu_enable_command_buffer= timeout 150 "$PY" -m rooflens run --logdir /tmp/linen_window_no_cb \
  --steps 5:15 tests/window_scripts/linen_gpt.py 30 --annotate | tail -n 1
tar czf "$OUT/linen_window_no_cb.tgz" -C /tmp linen_window_no_cb
S=tests/window_scripts/eqx_gpt.py
echo "== eqx plain"; timeout 120 "$PY" "$S" 30 --block 2>&1 | grep -v "^E1126" | tail -n 3; echo "exit $?"
echo "== eqx under a bare jax.profiler trace of the whole run"
timeout 150 "$PY" -c "
import sys, runpy, jax
sys.argv = ['$S', '30', '--block']
jax.profiler.start_trace('/tmp/bare')
try:
    runpy.run_path('$S', run_name='__main__')
finally:
    jax.profiler.stop_trace()
" 2>&1 | grep -E "Error|error|loss|step" | grep -v "^E1126" | tail -n 4
echo "== eqx under rooflens run, command buffers off"
rm -rf /tmp/eqx_whole_no_cb
XLA_FLAGS=--xla_gpu_enable_command_buffer= timeout 150 "$PY" -m rooflens run --logdir /tmp/eqx_whole_no_cb "$S" 30 --block \
  2>&1 | grep -v "^E1126" | tail -n 3
echo "== eqx under rooflens run again, as it was"
rm -rf /tmp/eqx_whole
timeout 150 "$PY" -m rooflens run --logdir /tmp/eqx_whole "$S" 30 --block 2>&1 | grep -v "^E1126" | grep -E "Error|rooflens:" | tail -n 3
ls -la "$OUT"
