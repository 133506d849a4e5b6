"""Where the compiled build of the core is, for the tests that run against it.

``make compiled`` builds it (mypyc over the modules a fence runs through, see the Makefile and
docs/native.md) in a copy of the core's source under ``build/mypyc/src``; a process with that
folder first on ``PYTHONPATH`` imports the compiled modules in place of the editable install's
pure ones. The build is for the interpreter of ``.venv``: under another one, or when a module of
the core changed since it was made, :func:`compiled_env` skips the test with the reason.
"""

from __future__ import annotations

import importlib.machinery
import os
from typing import Final

import pytest
from emulated_driver import REPO_ROOT

__all__ = ["COMPILED_MODULES", "COMPILED_SRC", "compiled_env"]

COMPILED_SRC: Final = REPO_ROOT / "build" / "mypyc" / "src"

# The Makefile's MYPYC_MODULES, as module names.
COMPILED_MODULES: Final = (
    "eventapi._single_owner",
    "eventapi._fence",
    "eventapi.driverkit._handles",
    "eventapi.driverkit._backend",
)

_CORE_SRC: Final = REPO_ROOT / "eventapi-core" / "src" / "eventapi"


def _why_unusable() -> str | None:
    built = COMPILED_SRC / ".built"
    if not built.exists():
        return "the compiled core is not built here (`make compiled` builds it)"
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    fence = COMPILED_SRC / "eventapi" / f"_fence{suffix}"
    if not fence.exists():
        return f"the compiled core was built for another interpreter (no {fence.name})"
    newest = max(path.stat().st_mtime for path in _CORE_SRC.rglob("*.py"))
    if newest > built.stat().st_mtime:
        return "the compiled core is older than the core's source (`make compiled` rebuilds it)"
    return None


def compiled_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with the compiled core first on the path.

    Skips the calling test when the build is missing, stale or for another interpreter.
    """
    why = _why_unusable()
    if why is not None:
        pytest.skip(why)
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join([str(COMPILED_SRC), *filter(None, [env.get("PYTHONPATH")])])
    return env
