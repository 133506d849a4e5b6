"""The third-party example, examples/eventapi-opencl, installed and tested as its author would.

It goes into a virtual environment of its own, beside a wheel of eventapi-core freshly built
from this checkout: installed in the main one, a usable ``opencl`` backend (priority 50) would
become every other test's default. There the ``opencl`` backend runs on PoCL's CPU device,
discovery lists it usable, and the conformance kit passes on it by name and by class, as do the
example's own tests (a fence around a kernel, windows around a copy and a kernel).

The environment is kept in build/opencl-venv-3.X and rebuilt only when eventapi-core's or the
example's sources change (a hash of them is stored beside it), so a warm run installs nothing.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import isolated
import pytest
from isolated import clean_env, copy_source, sources_hash
from kit_run import KIT
from test_examples import SCRIPTS, run_example

# Installs into a venv of its own (docs/testing.md: the installs tier); what it checks does not
# depend on the interpreter.
pytestmark = [pytest.mark.installs, pytest.mark.single_interpreter]

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "eventapi-opencl"
CORE = ROOT / "eventapi-core"
# Their pins constrain the example's dependencies.
REQUIREMENTS = (ROOT / "requirements-test.txt", ROOT / "requirements-dev.txt")
VENV = ROOT / "build" / f"opencl-venv-{sys.version_info.major}.{sys.version_info.minor}"
# Generous: a cold build downloads pyopencl and numpy; a warm run takes seconds.
INSTALL_TIMEOUT_S = 600
RUN_TIMEOUT_S = 120


def run(*args: str | Path, cwd: Path, timeout: float = RUN_TIMEOUT_S) -> str:
    return isolated.run(*args, cwd=cwd, timeout=timeout)


@pytest.fixture(scope="module")
def python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a venv holding a fresh eventapi-core wheel and the example, with [pocl]."""
    # This interpreter's venv, from these sources, under these pins.
    salt = sys.version.encode() + b"".join(path.read_bytes() for path in REQUIREMENTS)
    key = sources_hash(CORE, EXAMPLE, salt=salt)
    stamp = VENV / "sources.sha256"
    interpreter = VENV / "bin" / "python"
    if stamp.is_file() and stamp.read_text() == key and interpreter.exists():
        return interpreter
    shutil.rmtree(VENV, ignore_errors=True)
    base = tmp_path_factory.mktemp("opencl")
    core = copy_source(CORE, base / "src" / "eventapi-core")
    example = copy_source(EXAMPLE, base / "src" / "eventapi-opencl")
    wheels = base / "wheels"
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", wheels, core, cwd=base,
        timeout=INSTALL_TIMEOUT_S)  # fmt: skip
    (wheel,) = wheels.glob("eventapi_core-*.whl")
    run(sys.executable, "-m", "venv", "--without-pip", VENV, cwd=base)
    # This interpreter's pip installs into it (--python): the venv needs none of its own.
    constraints = [arg for requirements in REQUIREMENTS for arg in ("-c", requirements)]
    run(sys.executable, "-m", "pip", "--python", interpreter, "install", "-q", *constraints,
        wheel, f"{example}[pocl,test]", cwd=base, timeout=INSTALL_TIMEOUT_S)  # fmt: skip
    stamp.write_text(key)
    return interpreter


def test_discovery_lists_opencl_as_usable(python: Path) -> None:
    rows = json.loads(run(python.parent / "eventapi", "backends", "--json", cwd=VENV))
    by_name = {row["name"]: row for row in rows}
    assert by_name["opencl"]["status"] == "ok", by_name["opencl"]
    assert by_name["opencl"]["distribution"] == "eventapi-opencl"
    assert by_name["opencl"]["priority"] == 50
    assert by_name["host"]["status"] == "ok"


@pytest.mark.parametrize("selection", ["opencl", "eventapi_opencl:OpenCLBackend"])
def test_the_conformance_kit_passes(python: Path, selection: str) -> None:
    output = run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *KIT,
                 f"--eventapi-backend={selection}", cwd=VENV)  # fmt: skip
    assert " passed" in output.splitlines()[-1]


def test_eventapi_check_passes_on_opencl(python: Path) -> None:
    rows = json.loads(run(python.parent / "eventapi", "check", "opencl", "--json", cwd=VENV))
    results = {row["check"]: row["result"] for row in rows}
    assert set(results.values()) == {"PASS"}, results
    # Host functions make the held-stream checks run rather than skip.
    assert {"stream_dependency", "window_delay"} <= set(results)


def test_the_examples_own_tests_pass(python: Path) -> None:
    tests = copy_source(EXAMPLE / "tests", VENV / "example-tests")
    try:
        output = run(python, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", tests,
                     cwd=VENV)  # fmt: skip
    finally:
        shutil.rmtree(tests, ignore_errors=True)
    assert " passed" in output.splitlines()[-1]


def test_the_readme_program_runs(python: Path) -> None:
    readme = (EXAMPLE / "README.md").read_text()
    program = readme.split("```python\n", 1)[1].split("```", 1)[0]
    assert len(program.strip().splitlines()) <= 11, "the README promises a ten-line program"
    output = run(python, "-c", program, cwd=VENV)
    name, duration, unit = output.split()
    assert (name, unit) == ("copy", "ns")
    assert int(duration) > 0


@pytest.mark.parametrize("script", SCRIPTS, ids=[script.stem for script in SCRIPTS])
def test_the_examples_run_on_opencl(python: Path, script: Path, tmp_path: Path) -> None:
    env = clean_env()
    env["EVENTAPI_BACKEND"] = "opencl"
    output = run_example(python, script, env, tmp_path)
    assert output.startswith("opencl") or "opencl:" in output
