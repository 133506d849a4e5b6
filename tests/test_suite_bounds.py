"""Every test of this suite has a time bound, so a hang fails with a traceback instead of hanging.

The bound is pytest-timeout's ``timeout`` in the workspace's ``pyproject.toml`` (a development
requirement only: the conformance kit does not need it). This test runs a deliberately hanging
test under the same plugin in a child pytest and checks that it fails within its bound, naming
where it hung.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

# A test of the test support (the suite's own time bound): its own tier (docs/testing.md).
# What it checks does not depend on the interpreter.
pytestmark = [pytest.mark.support, pytest.mark.single_interpreter]

ROOT = Path(__file__).resolve().parent.parent


def test_the_suite_has_a_time_bound_per_test() -> None:
    pytest.importorskip("pytest_timeout", reason="pytest-timeout is a development requirement")
    text = (ROOT / "pyproject.toml").read_text()
    assert "\ntimeout = " in text, "pyproject.toml sets no per-test timeout"


def test_a_hanging_test_fails_within_its_bound(tmp_path: Path) -> None:
    pytest.importorskip("pytest_timeout", reason="pytest-timeout is a development requirement")
    (tmp_path / "test_hangs.py").write_text(
        "import threading\n\n\ndef test_waits_forever():\n    threading.Event().wait()\n"
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--timeout=2"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    took = time.monotonic() - started
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Timeout" in done.stdout
    assert "test_waits_forever" in done.stdout
    assert "threading.Event().wait()" in done.stdout  # the traceback shows where it hung
    # Two seconds of bound plus an interpreter and pytest starting: generous on a loaded host.
    assert took < 30, f"the hanging test took {took:.1f} s to fail"
