"""The core's Python per window and per fence at a git revision, beside the working tree's.

Usage::

    python benchmarks/compare.py [REV] [--pairs N] [--repeat N] [--mypyc MODULE ...]

``REV`` (default ``HEAD``) is any revision git knows. Its ``eventapi-core/src`` is exported
into a temporary folder, and ``benchmarks/floor.py`` (the working tree's, so both sides run the
same workload) runs in a fresh process over each source in turn, REV then the working tree, for
``--pairs`` pairs; each process takes its best of ``--repeat`` rounds. Every driver call is a
no-op, so the figures are the core's own Python (see ``floor.py``). The ratio is read pair by
pair, working tree over REV: a machine whose speed drifts between pairs moves both sides of a
pair alike, where it would move two separate runs apart. Prints each figure's median over the
pairs and the median and range of the per-pair ratios.

``--instructions`` compares instructions per operation instead of times (``floor.py
--instructions``, under valgrind): one pair, since a count does not drift with the machine, and
a difference of a percent is real. It is how a small step is judged on a noisy machine.

``--mypyc`` compiles the named modules of the working tree's core (paths under
``eventapi-core/src``, such as ``eventapi/_profiling/_sketch.py``) with mypyc, in a copy, and
runs that copy as the working tree's side: ``compare.py HEAD --mypyc ...`` on a clean checkout
measures a compiled build against the pure one from the same source (docs/benchmarks.md, the
compile trials). It needs mypy, which ``.venv`` has.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FLOOR = REPO / "benchmarks" / "floor.py"
CORE = "eventapi-core/src"


def export(rev: str, into: Path) -> Path:
    """``rev``'s core source, unpacked under ``into``; the folder to put on ``sys.path``."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", rev, CORE],
        capture_output=True,
        check=True,
    ).stdout
    path = into / "archive.tar"
    path.write_bytes(archive)
    with tarfile.open(path) as tar:
        tar.extractall(into, filter="data")
    return into / CORE


def compiled(modules: list[str], into: Path) -> Path:
    """The working tree's core copied under ``into``, ``modules`` compiled there by mypyc."""
    copy = into / "compiled"
    shutil.copytree(
        REPO / CORE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info")
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypyc", *modules],
        cwd=copy,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        sys.exit(f"mypyc failed:\n{done.stdout}{done.stderr}")
    return copy


def figures(source: Path, repeat: int, out: Path, counted: bool) -> dict[str, dict[str, float]]:
    """floor.py's figures with ``source`` first on the path, in a fresh process."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(source), str(FLOOR.parent)]))
    how = ["--instructions"] if counted else ["--repeat", str(repeat)]
    subprocess.run(
        [sys.executable, str(FLOOR), *how, "--json", str(out)],
        env=env,
        check=True,
        capture_output=True,
    )
    result: dict[str, dict[str, float]] = json.loads(out.read_text())
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev", nargs="?", default="HEAD", help="the revision (default HEAD)")
    parser.add_argument("--pairs", type=int, default=5, help="process pairs (default 5)")
    parser.add_argument("--repeat", type=int, default=5, help="rounds per process (default 5)")
    parser.add_argument(
        "--mypyc", nargs="+", metavar="MODULE", default=[], help="compile these modules' copy"
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="compare instructions per operation (floor.py --instructions, valgrind), one pair",
    )
    args = parser.parse_args()
    pairs = 1 if args.instructions else args.pairs  # a count is the same in every pair
    units = ("window_instructions", "fence_instructions") if args.instructions else None
    with tempfile.TemporaryDirectory() as tmp:
        base = export(args.rev, Path(tmp))
        tree = compiled(args.mypyc, Path(tmp)) if args.mypyc else REPO / CORE
        sides = {args.rev: base, "working tree": tree}
        runs: dict[str, list[dict[str, dict[str, float]]]] = {side: [] for side in sides}
        for _ in range(pairs):
            for side, source in sides.items():
                out = Path(tmp) / "figures.json"
                runs[side].append(figures(source, args.repeat, out, args.instructions))
    what = "instructions per operation" if args.instructions else f"median of {pairs} process pairs"
    print(f"the core's Python, every driver call a no-op: {what}")
    print(f"{'':38}{args.rev:>14}{'working tree':>14}   ratio per pair: median (range)")
    old, new = runs[args.rev], runs["working tree"]
    kinds = units or ("window_us", "fence_us")
    unit = "" if units else " us"
    for kind, label in zip(kinds, ("window", "fence"), strict=True):
        for name in old[0][kind]:
            if name == "floor":
                continue
            before = [run[kind][name] for run in old]
            after = [run[kind][name] for run in new]
            ratios = sorted(a / b for a, b in zip(after, before, strict=True))
            print(
                f"{label + ', ' + name:38}{statistics.median(before):>11.2f}{unit}"
                f"{statistics.median(after):>11.2f}{unit}   {statistics.median(ratios):.3f}x "
                f"({ratios[0]:.2f}-{ratios[-1]:.2f})"
            )


if __name__ == "__main__":
    main()
