#!/usr/bin/env bash
# Fill build/wheelhouse with what the install tests install, for the interpreter given:
#
#   tests/wheelhouse.sh PYTHON
#
# One `pip download` per requirement line of tests/wheelhouse.txt, with PYTHON's pip, so the
# wheels fit that interpreter. Done once per interpreter and state of the list (a stamp
# .filled-X.Y beside the wheels); the only step of the test tiers that reaches a package index.
set -euo pipefail
cd "$(dirname "$0")/.."
python=$1
list=tests/wheelhouse.txt
house=build/wheelhouse
version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
stamp=$house/.filled-$version
if [ -f "$stamp" ] && [ "$stamp" -nt "$list" ]; then exit 0; fi
mkdir -p "$house"
grep -Ev '^[[:space:]]*(#|$)' "$list" | while read -r line; do
    # shellcheck disable=SC2086  # one line, several requirements
    "$python" -m pip download -q -d "$house" $line
done
touch "$stamp"
