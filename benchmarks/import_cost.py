"""What ``import eventapi`` and ``eventapi.backends()`` cost, against a bare interpreter start.

Each case is a fresh interpreter (``python -c CODE``), because import cost is paid once per
process. The cases run interleaved, one of each per round, so that a machine that slows down
or speeds up part way through shifts every case alike; medians over the rounds are reported,
with ratios against ``python -c pass`` and against ``import pluggy`` (the one dependency).

Every case runs with its bytecode cached, as an installed wheel has it (pip compiles the
modules it installs): the unmeasured first round writes eventapi's ``__pycache__`` even where
``PYTHONDONTWRITEBYTECODE`` is set, since otherwise an editable checkout would be measured
compiling its sources in every process while pluggy's come precompiled.

``import eventapi`` imports its names on first use, so a process that uses eventapi pays when it
reads them; the ``from eventapi import EventProfiler`` case shows what that costs.

    python benchmarks/import_cost.py [--repeat N] [--markdown] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Final

CASES: Final = (
    ("python -c pass", "pass"),
    ("import pluggy", "import pluggy"),
    (
        "pluggy + entry-point scan",
        "import pluggy; from importlib.metadata import entry_points; "
        "entry_points(group='eventapi.backends')",
    ),
    ("import eventapi", "import eventapi"),
    ("from eventapi import EventProfiler", "from eventapi import EventProfiler"),
    ("eventapi.backends()", "import eventapi; eventapi.backends()"),
    ("eventapi.backend()", "import eventapi; eventapi.backend()"),
)


def _environment() -> dict[str, str]:
    # Discovery reads the EVENTAPI_ variables; a benchmark of the default path must not inherit
    # a choice. Bytecode is written (the module docstring says why).
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("EVENTAPI_") and k != "PYTHONDONTWRITEBYTECODE"
    }


def _once(code: str, env: dict[str, str]) -> int:
    start = time.perf_counter_ns()
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    return time.perf_counter_ns() - start


def measure(repeat: int) -> dict[str, list[int]]:
    """Wall-clock nanoseconds of each case, ``repeat`` rounds, cases interleaved per round."""
    env = _environment()
    samples: dict[str, list[int]] = {label: [] for label, _ in CASES}
    for _label, code in CASES:  # warm the file cache and write bytecode once, unmeasured
        _once(code, env)
    for _ in range(repeat):
        for label, code in CASES:
            samples[label].append(_once(code, env))
    return samples


def report(samples: dict[str, list[int]], *, markdown: bool) -> str:
    medians = {label: statistics.median(values) for label, values in samples.items()}
    bare = medians["python -c pass"]
    pluggy = medians["import pluggy"]
    header = ("case", "median ms", "above bare ms", "x bare start", "x import pluggy")
    rows = [
        (
            label,
            f"{median / 1e6:.1f}",
            f"{(median - bare) / 1e6:.1f}",
            f"{median / bare:.2f}",
            f"{median / pluggy:.2f}",
        )
        for label, median in medians.items()
    ]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in [header, *rows]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=30, help="rounds (default: 30)")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    parser.add_argument("--json", metavar="FILE", help="also write the median ns per case")
    args = parser.parse_args()
    samples = measure(args.repeat)
    print(f"{sys.executable} ({sys.version.split()[0]}), {args.repeat} rounds, interleaved")
    print(report(samples, markdown=args.markdown))
    if args.json:
        medians = {label: statistics.median(values) for label, values in samples.items()}
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"repeat": args.repeat, "median_ns": medians}, out, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
