#!/usr/bin/env bash
# eventapi on a real NVIDIA GPU: one script, no downloads; its steps' limits add up to 14 minutes.
#
# Expects cuda-bindings, cuda-core, pluggy, pytest, setuptools (and optionally torch, cupy,
# triton) installed for $PYTHON (default python3). Installs eventapi-core and eventapi-cuda from
# this checkout in editable mode without touching the network (or, if pip cannot, puts their
# sources on PYTHONPATH with the package metadata discovery reads), then runs, each under its own
# timeout: the build of eventapi-cuda's C extension, `eventapi backends`, the conformance kit
# on the real cuda backend (by name, then from the class, which adds the second-object
# checks), `eventapi check cuda`,
# benchmarks/fence_window.py cuda, benchmarks/wait_cpu.py cuda (what a thread waiting on a fence
# costs in CPU, and how fast a short wait wakes) and benchmarks/gpu/measure.py (the window and
# fence against the raw binding, cuda.core, torch.cuda.Event and cupy.cuda.Event, and the
# anchor's true error), benchmarks/gpu/kernel_bench.py (eventapi.bench's figures for three
# PyTorch kernels, cache cold, warm and from a graph, beside Triton's do_bench and
# do_bench_cudagraph and a torch.cuda.Event loop), then the PyTorch, CuPy and trace examples in
# examples/. A failing step is recorded and the next one runs. Everything is written under $OUT
# (default ./gpu-results): one log per step, status.tsv (step, exit status, seconds),
# fence_window.json, wait_cpu.json, measure.json and kernel_bench.json. The exit status is the
# number of failed steps (0: all passed).
#
# Without a GPU it runs on the emulated driver, to check the script itself:
# `make emulated && LD_PRELOAD=$PWD/build/emulated/libcuda.so.1 PYTHON=.venv/bin/python
# bash benchmarks/gpu/run.sh` (the environment step then fails on nvidia-smi, and the
# frameworks that are not installed are reported skipped).
set -u

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${OUT:-./gpu-results}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
PYTHON="${PYTHON:-python3}"
cd "$ROOT" || exit 1

printf 'step\tstatus\tseconds\n' > "$OUT/status.tsv"
FAILED=0

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
    if [ "$status" -ne 0 ]; then
        FAILED=$((FAILED + 1))
    fi
    return 0
}

# True when eventapi and eventapi_cuda import, and discovery sees the cuda entry point and the
# kit's pytest plugin.
discoverable() {
    "$PYTHON" - <<'EOF' > /dev/null 2>&1
import sys
from importlib.metadata import entry_points

import eventapi, eventapi_cuda
sys.exit(0 if "cuda" in entry_points(group="eventapi.backends").names
         and "eventapi.testing" in entry_points(group="pytest11").names else 1)
EOF
}

# Without a working editable install (no pip, or a setuptools too old to build one without the
# wheel package): the sources on PYTHONPATH, and one .dist-info per distribution holding what
# importlib.metadata reads, its name, version and entry points.
use_checkout_directly() {
    local site version
    site="$(mktemp -d)"
    version="$(sed -n 's/^version = "\(.*\)"$/\1/p' eventapi-core/pyproject.toml)"
    mkdir -p "$site/eventapi_core-$version.dist-info" "$site/eventapi_cuda-$version.dist-info"
    printf 'Metadata-Version: 2.1\nName: eventapi-core\nVersion: %s\n' "$version" \
        > "$site/eventapi_core-$version.dist-info/METADATA"
    printf '[eventapi.backends]\nhost = eventapi._plugins._host\n\n[pytest11]\neventapi.testing = eventapi.testing.plugin\n' \
        > "$site/eventapi_core-$version.dist-info/entry_points.txt"
    printf 'Metadata-Version: 2.1\nName: eventapi-cuda\nVersion: %s\n' "$version" \
        > "$site/eventapi_cuda-$version.dist-info/METADATA"
    printf '[eventapi.backends]\ncuda = eventapi_cuda._plugin\n' \
        > "$site/eventapi_cuda-$version.dist-info/entry_points.txt"
    PYTHONPATH="$ROOT/eventapi-core/src:$ROOT/eventapi-cuda/src:$site${PYTHONPATH:+:$PYTHONPATH}"
    export PYTHONPATH
    echo "using the checkout through PYTHONPATH=$PYTHONPATH"
}

# shellcheck disable=SC2016  # $0 is expanded by the inner sh: it is "$PYTHON"
step environment 15 sh -c 'nvidia-smi; found=$?; "$0" -c "import sys; print(sys.version)"; "$0" -m pip list 2>/dev/null | grep -i -E "^(cuda|pluggy|pytest|setuptools|torch|cupy)"; exit $found' "$PYTHON"
# The compiled calls (eventapi-cuda/_native.c, docs/native.md), built in place with this
# machine's C compiler whatever the install below does: the editable install builds them too,
# and the fallback to the checkout's sources needs them there. The log names the file loaded.
# shellcheck disable=SC2016  # $0 and $1 are expanded by the inner sh
step native 120 sh -c 'cd eventapi-cuda && "$0" setup.py -q build_ext --inplace --build-temp "$1" && cd src && "$0" -c "import eventapi_cuda._native as n; print(n.__file__)"' "$PYTHON" "$(mktemp -d)"
step install 60 "$PYTHON" -m pip install --no-deps --no-build-isolation --no-index \
    -e eventapi-core -e eventapi-cuda
if ! discoverable; then
    use_checkout_directly
    discoverable || echo "!! discovery still does not see the cuda entry point; the steps below will say why"
fi
step backends 15 "$PYTHON" -m eventapi backends
step conformance 75 "$PYTHON" -m pytest -q -p no:cacheprovider --pyargs eventapi.testing \
    --eventapi-backend=cuda
step conformance_factory 45 "$PYTHON" -m pytest -q -p no:cacheprovider --pyargs eventapi.testing \
    --eventapi-backend=eventapi_cuda:CudaBackend
step check 40 "$PYTHON" -m eventapi check cuda
step fence_window 40 "$PYTHON" benchmarks/fence_window.py cuda --json "$OUT/fence_window.json"
step wait_cpu 30 "$PYTHON" benchmarks/wait_cpu.py cuda --json "$OUT/wait_cpu.json"
step measure 90 "$PYTHON" benchmarks/gpu/measure.py --backend cuda --out "$OUT"
# Real kernels through PyTorch; 77 (no torch, or no device torch sees) is skipped, as for the
# examples below. A figure that cannot be had (a graph capture, no triton) is in the JSON.
step kernel_bench 120 sh -c '"$0" "$1" --out "$2"; s=$?; [ "$s" -eq 77 ] && s=0; exit "$s"' \
    "$PYTHON" benchmarks/gpu/kernel_bench.py "$OUT"
# The framework examples on the real stream types; 77 is an example's "skipped" (no torch, no
# cupy here), which the log says, and is not a failure.
for example in torch_stream cupy_stream training_profile; do
    step "example_$example" 60 sh -c '"$0" "$1" "$2"; s=$?; [ "$s" -eq 77 ] && s=0; exit "$s"' \
        "$PYTHON" "examples/$example.py" "$OUT/$example.json"
done

echo "== status (also in $OUT/status.tsv): $FAILED step(s) failed"
cat "$OUT/status.tsv"
exit "$FAILED"
