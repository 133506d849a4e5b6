"""Python code run in a fresh interpreter, for tests that need a process of their own.

A test that preloads an emulated driver, forks, or changes what a process imports runs its
scenario as a child: the code prints one JSON value as its last line of output, and the test
reads it back. A child that fails shows its stderr in the assertion. Every child process of the
suite is started through :func:`command`, which bounds it by :data:`TIMEOUT_S`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# A child that hangs fails the test instead of the run; generous, for an interpreter starting on
# a busy two-core machine.
TIMEOUT_S = 60.0


def command(
    argv: Sequence[str | Path],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = TIMEOUT_S,
    preexec_fn: Callable[[], object] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` with ``env`` in ``cwd``, its output captured as text; what it did, unchecked.

    A child still running after ``timeout`` seconds is killed and the test fails with
    :class:`subprocess.TimeoutExpired`.
    """
    return subprocess.run(
        [str(arg) for arg in argv],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=preexec_fn,
        check=False,
    )


def run(
    code: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with ``env`` (and in ``cwd``); what it did, unchecked."""
    return command([sys.executable, "-c", code], env=env, cwd=cwd)


def run_json(code: str, env: dict[str, str] | None = None) -> Any:
    """Run ``code`` with ``env``; assert it exited 0 and return its last line of output, parsed."""
    result, _ = run_json_and_stderr(code, env)
    return result


def run_json_and_stderr(code: str, env: dict[str, str] | None = None) -> tuple[Any, str]:
    """As :func:`run_json`, and what the child wrote to stderr."""
    done = run(code, env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr
