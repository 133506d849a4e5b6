"""The pages a newcomer reads first run as written: each ``python`` block, in order, on host.

The fenced ``python`` blocks of ``docs/getting-started.md`` (and the README's tour) are run in
one fresh interpreter, one after another in one namespace, as a reader pasting them into a
session would, with ``EVENTAPI_BACKEND=host`` and a scratch working directory. A failure names
the page and the line in it, since each block is compiled under its own line numbers.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import child

ROOT = Path(__file__).resolve().parent.parent

WORK_NS = 2_000_000
"""The page's stand-in for work sleeps 2 ms (``launch_work``'s default); a window around it
reads at least that, less the host timer's resolution (1 us at most on Linux)."""

_FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```$", re.DOTALL | re.MULTILINE)

# Runs the blocks it is given in one namespace; each compiled with its page and line numbers.
_RUNNER = """
import json, sys
namespace = {"__name__": "__main__"}
for page, line, code in json.load(open(sys.argv[1])):
    exec(compile("\\n" * (line - 1) + code, page, "exec"), namespace)
"""


def python_blocks(page: Path) -> list[tuple[str, int, str]]:
    """(page, first line of code, code) of each fenced ``python`` block of ``page``."""
    text = page.read_text()
    name = str(page.relative_to(ROOT))
    return [
        (name, text.count("\n", 0, match.start(1)) + 1, match.group(1))
        for match in _FENCE.finditer(text)
    ]


def run_blocks(blocks: list[tuple[str, int, str]], cwd: Path) -> str:
    """Run ``blocks`` in a fresh interpreter on host in ``cwd``; its output."""
    program = cwd / "blocks.json"
    program.write_text(json.dumps(blocks))
    env = {key: value for key, value in os.environ.items() if not key.startswith("EVENTAPI_")}
    env["EVENTAPI_BACKEND"] = "host"
    done = child.command([sys.executable, "-c", _RUNNER, program], cwd=cwd, env=env)
    assert done.returncode == 0, f"exited {done.returncode}\n{done.stdout}{done.stderr}"
    return done.stdout


def test_getting_started_runs_as_written(tmp_path: Path) -> None:
    blocks = python_blocks(ROOT / "docs" / "getting-started.md")
    assert len(blocks) >= 4, "the page's python blocks were not found"
    lines = run_blocks(blocks, tmp_path).splitlines()
    assert lines[0] == "host"
    assert lines[1] == "reached: True"
    # The first window's span: name, duration_ns, start_ns, uncertainty_ns.
    name, duration_ns, _, _ = lines[2].split()
    assert name == "matmul"
    assert int(duration_ns) >= WORK_NS - 1_000, lines[2]
    # The summary, read after the profiler closed, counts the second window too.
    assert lines[3].startswith("Stats(count=2,"), lines[3]
    # The trace: ten steps, each around the stand-in's known work.
    trace = json.loads((tmp_path / "train.json").read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    steps = [event for event in events if event.get("ph") == "X" and event["name"] == "step"]
    assert len(steps) == 10
    assert min(step["dur"] for step in steps) >= (WORK_NS - 1_000) / 1_000  # microseconds


def test_the_readme_tour_runs_as_written(tmp_path: Path) -> None:
    readme = python_blocks(ROOT / "README.md")
    tour = [block for block in readme if "EventProfiler" in block[2]]
    assert len(tour) == 1, "the README's tour block was not found"
    output = run_blocks(tour, tmp_path)
    assert output.split()[0] == "matmul", output
