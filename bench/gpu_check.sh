#!/usr/bin/env bash
# The GPU checks, as one short script for a machine with an NVIDIA GPU (CI has none):
#   1. two real JAX programs captured with `rooflens run` and reported: tests/step_scripts/annotated.py
#      (small, launch-bound) and bench/gpu_mlp.py (a bf16 Flax/Optax MLP whose matmuls should sit near
#      the chip's roof): the chip inferred from the trace, the steps, MFU, each matmul against its roofline;
#   2. the CPU test suite under this machine's JAX (0.11 on the GPU machines; 0.10 where CI runs);
#   3. an Nsight Systems SQLite export of the small program, where nsys is installed.
# Everything lands in $OUT (default /tmp/rooflens-gpu-check): each logdir as a .tgz, each report as JSON, logs.
#     bash bench/gpu_check.sh [PYTEST_SECONDS]
OUT="${OUT:-/tmp/rooflens-gpu-check}"
source "$(dirname "$0")/gpu_env.sh"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
"$PY" -c "import jax, jaxlib; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, jax.devices())"
for script in tests/step_scripts/annotated.py bench/gpu_mlp.py; do
  name="$(basename "$script" .py)"
  logs="/tmp/rl-gpu-$name"
  rm -rf "$logs"
  echo "== $name"
  timeout 180 "$PY" -m rooflens run --logdir "$logs" "$script"
  timeout 120 "$PY" -m rooflens report "$logs" --json > "$OUT/$name.json"
  timeout 120 "$PY" -m rooflens report "$logs" | tail -n 60
  tar czf "$OUT/${name}_logdir.tgz" -C /tmp "rl-gpu-$name"
done
echo "== the CPU suite under this JAX"
JAX_PLATFORMS=cpu CUDA_VISIBLE_DEVICES="" timeout "${1:-240}" "$PY" -m pytest -p no:cacheprovider -n 14 -v \
  --continue-on-collection-errors -o addopts="" tests > "$OUT/pytest.txt" 2>&1
echo "pytest exit $?"; grep -E "FAILED|ERROR" "$OUT/pytest.txt" | head -40; tail -n 3 "$OUT/pytest.txt"
NSYS="$(command -v nsys || ls /opt/nvidia/nsight-systems*/bin/nsys /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | head -1)"
if [ -n "$NSYS" ]; then
  echo "== nsys: $NSYS"
  timeout 90 "$NSYS" profile --trace cuda,nvtx -o /tmp/rl-nsys --force-overwrite true "$PY" tests/step_scripts/annotated.py \
    && timeout 60 "$NSYS" export --type sqlite -o "$OUT/annotated.nsys.sqlite" /tmp/rl-nsys.nsys-rep
  ls -la /tmp/rl-nsys* "$OUT" 2>/dev/null
fi
