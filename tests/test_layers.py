"""The core's layers hold: `make lint` runs the import contracts, and they refuse an upward import.

The contracts are in the workspace's ``pyproject.toml`` (``[tool.importlinter]``). This test
runs the same checker on a copy of the core's source into which it writes one import that runs
upward (the handle layer importing the fence), and once on a copy with a cycle between two
modules of a package, to show that each contract can fail, and names the import that broke it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# A test of the test support (the lint tooling's contracts): its own tier (docs/testing.md).
# What it checks does not depend on the interpreter.
pytestmark = [pytest.mark.support, pytest.mark.single_interpreter]

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "eventapi-core" / "src" / "eventapi"
LINT = Path(sys.executable).with_name("lint-imports")


def lint(source: Path, config: Path) -> subprocess.CompletedProcess[str]:
    """Run the import checker on the package under ``source`` with ``config``."""
    return subprocess.run(
        [str(LINT), "--config", str(config), "--no-cache"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=source,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(source)},
        check=False,
    )


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    if not LINT.exists():
        pytest.skip(f"lint-imports is not installed beside {sys.executable}")
    shutil.copytree(SOURCE, tmp_path / "eventapi", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_contracts_hold_on_the_source(copy: Path) -> None:
    done = lint(copy, copy / "pyproject.toml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 kept, 0 broken" in done.stdout


def test_an_upward_import_breaks_the_layers(copy: Path) -> None:
    handles = copy / "eventapi" / "driverkit" / "_handles.py"
    handles.write_text(handles.read_text() + "\nfrom .._fence import EventFence  # noqa\n")
    done = lint(copy, copy / "pyproject.toml")
    assert done.returncode != 0
    assert "The core's layers BROKEN" in done.stdout
    assert "eventapi.driverkit is not allowed to import eventapi._fence" in done.stdout


def test_a_cycle_between_sibling_modules_breaks_the_other_contract(copy: Path) -> None:
    # Both modules in one layer's package, so only the cycle contract can see it.
    anchor = copy / "eventapi" / "_profiling" / "_anchor.py"
    anchor.write_text(anchor.read_text() + "\nfrom . import _table  # noqa\n")
    table = copy / "eventapi" / "_profiling" / "_table.py"
    table.write_text(table.read_text() + "\nfrom . import _anchor  # noqa\n")
    done = lint(copy, copy / "pyproject.toml")
    assert done.returncode != 0
    assert "No cycles between the modules of a package BROKEN" in done.stdout
