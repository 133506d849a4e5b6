"""Every script in examples/ runs, on host and on cuda over the emulated driver, or says why not.

A script that needs what this machine lacks (a framework, a GPU) exits with status 77 and prints
its reason, which becomes the skip reason here (the framework examples' profiling code runs in
tests/test_example_frameworks.py instead, on the emulated driver). tests/test_example_opencl.py
runs the same scripts on ``opencl`` in the example backend's own environment.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import child
import pytest
from emulated_driver import build, library_path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted((ROOT / "examples").glob("*.py"))
SKIP = 77  # what an example exits with when it cannot run here


def run_example(python: Path | str, script: Path, env: dict[str, str], cwd: Path) -> str:
    """Run ``script``; its output when it passed, a pytest skip when it exited SKIP."""
    done = child.command([python, script, cwd / "out.json"], env=env, cwd=cwd)
    if done.returncode == SKIP:
        pytest.skip(f"{script.name}: {done.stdout.strip().splitlines()[-1]}")
    assert done.returncode == 0, (
        f"{script.name} exited {done.returncode}\n{done.stdout}{done.stderr}"
    )
    return done.stdout


def environment(backend: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("EVENTAPI_")}
    env["EVENTAPI_BACKEND"] = backend
    if backend == "cuda":
        build()
        env["LD_PRELOAD"] = str(library_path("cuda"))
    return env


def test_there_are_examples() -> None:
    assert {script.name for script in SCRIPTS} >= {"fence_handoff.py", "training_profile.py"}


@pytest.mark.parametrize("backend", ["host", "cuda"])
@pytest.mark.parametrize("script", SCRIPTS, ids=[script.stem for script in SCRIPTS])
def test_example_runs(script: Path, backend: str, tmp_path: Path) -> None:
    output = run_example(sys.executable, script, environment(backend), tmp_path)
    assert output.strip(), f"{script.name} printed nothing"
