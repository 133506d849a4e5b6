#!/usr/bin/env bash
# The suite on every supported CPython: what `make matrix` and `make test` run (see Makefile).
#
#   tests/interpreters.sh          the interpreters beside .venv's, one after another
#   tests/interpreters.sh --main   .venv's as well, at the same time as the others
#
# Each interpreter beside .venv's is found as pythonX.Y on PATH, else under pyenv, and gets a
# venv of its own, .venv-X.Y, where `make pytest conformance` runs less the tests marked
# single_interpreter. Every venv is set up before any test runs, one after another: an editable
# install rewrites the checkout's src/*.egg-info and the backends' _native.abi3.so, which a
# running test loads.
#
# With --main, .venv's own `pytest conformance` runs in one lane, its output to the terminal as
# it comes, and the other interpreters run one after another in a second lane at the same time,
# each one's output kept in build/matrix/X.Y.log and printed whole once both lanes finished.
# The suite spends most of its time waiting (subprocesses, held streams, timeouts), so two
# lanes take about the time of the longer one.
#
# Read from the environment (the Makefile passes them): MAKE, BIN (.venv's bin folder),
# MATRIX_VERSIONS, MATRIX_REQUIRED (non-empty: a missing interpreter fails), PYENV_ROOT.
set -euo pipefail

logs=build/matrix
main_lane=false
if [ "${1:-}" = "--main" ]; then main_lane=true; fi

main=$("$BIN/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
versions=()
pythons=()
for v in $MATRIX_VERSIONS; do
    if [ "$v" = "$main" ]; then continue; fi
    py=""
    for c in "python$v" "$PYENV_ROOT"/versions/"$v".*/bin/"python$v"; do
        if "$c" -c 'import sys' >/dev/null 2>&1; then py=$c; break; fi
    done
    if [ -z "$py" ]; then
        echo "matrix: SKIPPED CPython $v: no working python$v on PATH or under $PYENV_ROOT/versions"
        if [ -n "$MATRIX_REQUIRED" ]; then exit 1; fi
        continue
    fi
    echo "matrix: CPython $v ($py) in .venv-$v"
    "$MAKE" --no-print-directory VENV=".venv-$v" PYTHON="$py" \
        REQUIREMENTS=requirements-test.txt ".venv-$v/.installed"
    versions+=("$v")
    pythons+=("$py")
done

# One interpreter's `make pytest conformance`, less the single_interpreter tests. The pytest
# cache is left off: the runs share the checkout.
suite() {
    "$MAKE" --no-print-directory VENV=".venv-$1" PYTHON="$2" \
        REQUIREMENTS=requirements-test.txt PYTEST_MARKERS="not single_interpreter" \
        PYTEST_FLAGS="-p no:cacheprovider" pytest conformance
}

if ! $main_lane; then
    for i in "${!versions[@]}"; do
        echo "matrix: testing CPython ${versions[$i]}"
        suite "${versions[$i]}" "${pythons[$i]}"
    done
    exit 0
fi

rm -rf "$logs"
mkdir -p "$logs"
others() {
    local failed=0
    for i in "${!versions[@]}"; do
        suite "${versions[$i]}" "${pythons[$i]}" >"$logs/${versions[$i]}.log" 2>&1 \
            || { echo "${versions[$i]}" >>"$logs/failed"; failed=1; }
    done
    return $failed
}
if [ ${#versions[@]} -gt 0 ]; then
    echo "matrix: testing CPython ${versions[*]} beside CPython $main; their output follows it"
    others &
    others_pid=$!
fi
main_status=0
"$MAKE" --no-print-directory pytest conformance || main_status=$?
others_status=0
if [ ${#versions[@]} -gt 0 ]; then
    wait "$others_pid" || others_status=$?
    for v in "${versions[@]}"; do
        echo
        echo "matrix: CPython $v ($logs/$v.log)"
        cat "$logs/$v.log"
    done
fi
if [ "$main_status" -ne 0 ]; then echo "FAILED on CPython $main (.venv)"; fi
if [ "$others_status" -ne 0 ]; then
    echo "matrix: FAILED on CPython $(cat "$logs/failed" 2>/dev/null | tr '\n' ' ')"
fi
[ "$main_status" -eq 0 ] && [ "$others_status" -eq 0 ]
