"""How many instructions a Python command executes, counted by valgrind's callgrind.

A timed figure on a shared two-core machine moves by tens of percent between runs; the
instructions a loop executes move by a percent at most, loaded machine or not. The
benchmarks that count (``floor.py --instructions``, ``fence_window.py --instructions``) run a
loop in a fresh process twice, at two sizes after the same warm-up, and read the difference of
the two totals over the difference of the sizes: the cost of one operation, start-up and
imports cancelled as far as they repeat. They repeat to about 1 % of a process's total (974 to
985 million instructions in three identical runs of a raw fence loop), which the difference
does not cancel: over a few thousand operations that is several percent of one, so a small
step needs more operations, or repeated counts, to show. An instruction is not a nanosecond
(the interpreter's dispatch runs many cheap ones; a cache miss or a lock's atomic costs none):
counts compare code with code that does the same work, timed figures compare anything else.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Final

_TOTALS: Final = re.compile(r"^totals:\s+(\d+)", re.MULTILINE)


def require_valgrind() -> None:
    """Exit with what to install when valgrind is missing."""
    if shutil.which("valgrind") is None:
        sys.exit("--instructions needs valgrind (Debian: apt-get install valgrind)")


def total(args: list[str]) -> int:
    """Instructions ``python ARGS...`` executes, in a fresh process under callgrind.

    The environment is this process's (a preloaded emulated driver comes along), with a fixed
    ``PYTHONHASHSEED`` so that every run lays out its dicts alike.
    """
    with tempfile.TemporaryDirectory(prefix="eventapi-callgrind-") as tmp:
        out = Path(tmp) / "callgrind.out"
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                sys.executable,
                *args,
            ],
            env=dict(os.environ, PYTHONHASHSEED="0"),
            capture_output=True,
            check=True,
        )
        found = _TOTALS.search(out.read_text(encoding="utf-8"))
    if found is None:
        raise RuntimeError(f"callgrind wrote no totals for {args}")
    return int(found.group(1))


def per_operation(args: list[str], small: int, large: int) -> float:
    """Instructions per operation of ``python ARGS... N``, from runs at N = small and large."""
    return (total([*args, str(large)]) - total([*args, str(small)])) / (large - small)
