"""Commands run outside this checkout's environment, for tests that build and install packages.

The packaging tests and the OpenCL example's test build wheels from copies of the sources and
install them into fresh venvs: nothing of the developer's environment may steer what those
commands do or what the installed code imports. Nor does any of them reach a package index:
pip (and the builds' isolated environments, which pip fills) finds packages only in
build/wheelhouse, which `make wheelhouse` fills once (tests/wheelhouse.sh).
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["WHEELHOUSE", "clean_env", "copy_source", "require_wheels", "run", "sources_hash"]

WHEELHOUSE = Path(__file__).resolve().parent.parent / "build" / "wheelhouse"
"""What `make wheelhouse` downloaded: the only place pip looks in these commands."""

# Build outputs, never sources: what copy_source leaves out, and the extensions built in place.
_OUTPUTS = ("build", "*.egg-info", "__pycache__", ".pytest_cache", "*.so")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without anything that would steer eventapi or the import system."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("EVENTAPI_", "EMU_"))
        and key not in {"PYTHONPATH", "PYTHONHOME", "LD_PRELOAD", "LD_LIBRARY_PATH", "VIRTUAL_ENV"}
    }
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PIP_NO_INDEX"] = "1"
    env["PIP_FIND_LINKS"] = str(WHEELHOUSE)
    env.update(extra)
    return env


def require_wheels(*patterns: str) -> Path:
    """:data:`WHEELHOUSE`, after checking it holds a wheel for each glob pattern.

    Fails the test naming what is missing and the command that downloads it: a test never
    downloads.
    """
    missing = [pattern for pattern in patterns if not any(WHEELHOUSE.glob(pattern))]
    assert not missing, (
        f"{WHEELHOUSE} has no {', '.join(missing)}: run `make wheelhouse` (or "
        "`tests/wheelhouse.sh PYTHON` for another interpreter) once, before the install tests"
    )
    return WHEELHOUSE


def run(
    *args: str | Path,
    timeout: float,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """Run a command in :func:`clean_env` (or ``env``); its stdout. Fails the test, with the
    command's output, when it exits non-zero."""
    done = subprocess.run(
        [str(arg) for arg in args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=clean_env() if env is None else env,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, (
        f"{' '.join(map(str, args))} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    )
    return done.stdout


def copy_source(source: Path, target: Path) -> Path:
    """Copy a source folder without its build outputs; returns ``target``."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(*_OUTPUTS))
    return target


def sources_hash(*folders: Path, salt: bytes = b"") -> str:
    """A hash of every source file under ``folders`` (paths and contents) and of ``salt``.

    A cache of what was built from the folders is valid while it is unchanged.
    """
    digest = hashlib.sha256(salt)
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            parts = path.relative_to(folder).parts
            if path.is_file() and not any(
                fnmatch.fnmatch(part, pattern) for part in parts for pattern in _OUTPUTS
            ):
                digest.update(str(path.relative_to(folder.parent)).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()
