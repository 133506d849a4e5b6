"""Running pytest, and the conformance kit in it, in a subprocess as a user runs it."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import child

KIT = ("--pyargs", "eventapi.testing")


@dataclass(frozen=True, slots=True)
class Run:
    """A finished pytest run: its exit status and everything it printed."""

    returncode: int
    output: str

    def count(self, outcome: str) -> int:
        """How many tests ended with ``outcome`` (passed, failed, skipped, error)."""
        lines = self.output.splitlines()
        found = re.findall(rf"(\d+) {outcome}s?\b", lines[-1]) if lines else []
        return int(found[0]) if found else 0

    def lines(self, prefix: str) -> list[str]:
        return [line for line in self.output.splitlines() if line.startswith(prefix)]


def run_pytest(*args: str, cwd: Path, env: dict[str, str], timeout: float) -> Run:
    """``python -m pytest -q -p no:cacheprovider -rsfE ARGS`` with exactly ``env``."""
    done = child.command(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rsfE", *args],
        cwd=cwd,
        env=env,
        timeout=timeout,
    )
    return Run(done.returncode, done.stdout + done.stderr)
