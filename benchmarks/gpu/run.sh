#!/usr/bin/env bash
# eventapi on a real NVIDIA GPU: one script, no downloads, about six minutes at most.
#
# Expects cuda-bindings, cuda-core, pluggy, pytest, setuptools (and optionally torch, cupy)
# installed for $PYTHON (default python3). Installs eventapi-core and eventapi-cuda from this
# checkout in editable mode without touching the network, then runs, each under its own
# timeout: the conformance kit on the real cuda backend, `eventapi check cuda`,
# benchmarks/fence_window.py cuda and benchmarks/gpu/measure.py. A failing step is recorded
# and the next one runs. Everything is written under $OUT (default ./gpu-results): one log per
# step, status.tsv (step, exit status, seconds), fence_window.json and measure.json.
set -u

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${OUT:-./gpu-results}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
PYTHON="${PYTHON:-python3}"
cd "$ROOT" || exit 1

printf 'step\tstatus\tseconds\n' > "$OUT/status.tsv"

# step NAME SECONDS COMMAND...: run under a timeout, log to $OUT/NAME.log, record the status.
step() {
    local name="$1" limit="$2"
    shift 2
    local began=$SECONDS
    echo "== $name (limit ${limit}s)"
    timeout --kill-after=5 "$limit" "$@" > "$OUT/$name.log" 2>&1
    local status=$?
    printf '%s\t%s\t%s\n' "$name" "$status" "$((SECONDS - began))" >> "$OUT/status.tsv"
    tail -n 25 "$OUT/$name.log"
    echo "-- $name: exit $status"
}

step environment 20 sh -c "nvidia-smi; '$PYTHON' -c 'import sys, cuda.bindings; print(sys.version); print(\"cuda-bindings\", cuda.bindings.__version__)'"
step install 90 "$PYTHON" -m pip install --no-deps --no-build-isolation --no-index \
    -e eventapi-core -e eventapi-cuda
step backends 20 "$PYTHON" -m eventapi backends
step conformance 100 "$PYTHON" -m pytest -q -p no:cacheprovider --pyargs eventapi.testing \
    --eventapi-backend=cuda
step check 45 "$PYTHON" -m eventapi check cuda
step fence_window 45 "$PYTHON" benchmarks/fence_window.py cuda --json "$OUT/fence_window.json"
step measure 90 "$PYTHON" benchmarks/gpu/measure.py --backend cuda --out "$OUT"

echo "== status (also in $OUT/status.tsv)"
cat "$OUT/status.tsv"
