#!/usr/bin/env bash
# The suite on the supported CPythons beside .venv's: what `make test-matrix` runs (Makefile).
#
# Each interpreter is found as pythonX.Y on PATH, else under pyenv, and gets a venv of its own,
# .venv-X.Y, where `make matrix-one` runs: the product's tests less those marked
# single_interpreter, the installs into fresh venvs, and the conformance kit. One interpreter
# after another, never two at once: the timing tests measure on a machine with nothing else
# of the suite running.
#
# Read from the environment (the Makefile passes them): MAKE, BIN (.venv's bin folder),
# MATRIX_VERSIONS, MATRIX_REQUIRED (non-empty: a missing interpreter fails), PYENV_ROOT.
set -euo pipefail

main=$("$BIN/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
failed=()
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
        REQUIREMENTS=requirements-test.txt PYTEST_FLAGS="-p no:cacheprovider" matrix-one \
        || failed+=("$v")
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "matrix: FAILED on CPython ${failed[*]}"
    exit 1
fi
