# Sourced by the bench/gpu_*.sh checks, from the repository's root on a GPU machine (the device tool): $OUT (named
# by the caller, created), $PY, the wheels of what the machine lacks (orjson, grandalf, the ADBC driver: carried
# in .whl/) installed aside, this checkout's src first on the path, and the output copied to $OUT/log.txt.
set -u
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
if [ -d .whl ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/rl-site .whl/*.whl \
    && export PYTHONPATH="/tmp/rl-site"
fi
export PYTHONPATH="$PWD/src:$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
exec > >(tee "$OUT/log.txt") 2>&1
