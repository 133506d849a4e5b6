"""The backends' abi3 extension, built with a newer CPython's headers, runs on the oldest one.

An abi3 build need not be compiled with the headers of the interpreter that loads it: pip
builds the sdist with whichever interpreter installs it, and its wheel cache offers that
``cp311-abi3`` wheel to every other. From 3.12 the headers treat ``None``, ``True`` and
``False`` as immortal, and their ``Py_RETURN_*`` macros return them without a reference even
under ``Py_LIMITED_API`` 3.11. On 3.11 each such return gives away a reference that was never
taken, until the count reaches zero and the interpreter aborts. ``_native.c`` counts through
``Py_IncRef`` and ``Py_DecRef`` instead; this builds it with the newest headers found and runs
every call that returns one of the three, many times, on the interpreter of the test run.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from child import run_json
from emulated_driver import REPO_ROOT, build, preload_env

SOURCE = REPO_ROOT / "eventapi-cuda" / "src" / "eventapi_cuda" / "_native.c"

# Enough returns of each object to take its whole count on 3.11 (a few thousand at start) many
# times over, were one reference missing from each.
CALLS = 20_000

_CHILD = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("eventapi_cuda._native", {path!r})
native = importlib.util.module_from_spec(spec)
sys.modules["eventapi_cuda._native"] = native
spec.loader.exec_module(native)
import eventapi
import eventapi_cuda._backend
assert eventapi_cuda._backend._native is native

api = eventapi.backend("cuda")
stream = api.stream_create_non_blocking()
event = api.event_create()
api.event_record(event, stream)
api.stream_synchronize(stream)
counts = lambda: [sys.getrefcount(o) for o in (None, True, False)]
before = counts()
for _ in range({calls}):
    assert api.event_record_unless_capturing(event, stream) is True  # True
    api.event_wait(event)  # None
    assert api.event_query(event) is True  # True
    assert api.stream_is_capturing(stream) is False  # False
    api.event_record(event, stream)  # None
api.stream_synchronize(stream)
after = counts()
api.event_destroy(event)
api.stream_destroy(stream)
print(json.dumps({{"before": before, "after": after}}))
"""


def _newer_interpreter() -> Path | None:
    """The newest CPython 3.12 or later on PATH or under pyenv, as the Makefile finds them."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    for minor in (13, 12):
        found = shutil.which(f"python3.{minor}")
        candidates = [found] if found else []
        candidates += sorted(glob.glob(str(pyenv / f"versions/3.{minor}.*/bin/python3.{minor}")))
        for candidate in candidates:
            if subprocess.run([candidate, "-c", "import sys"], check=False).returncode == 0:
                return Path(candidate)
    return None


def test_an_abi3_build_with_newer_headers_keeps_the_counts_of_none_and_the_bools(
    tmp_path: Path,
) -> None:
    if sys.version_info >= (3, 12):
        pytest.skip("None, True and False are immortal here: a missing reference cannot show")
    newer = _newer_interpreter()
    if newer is None:
        pytest.skip("no CPython 3.12 or later on PATH or under pyenv to take headers from")
    include = subprocess.run(
        [newer, "-c", "import sysconfig; print(sysconfig.get_path('include'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not (Path(include) / "Python.h").is_file():
        pytest.skip(f"{newer} has no headers ({include}/Python.h)")
    built = tmp_path / "_native.abi3.so"
    cc = os.environ.get("CC", "cc")
    flags = ["-shared", "-fPIC", "-O2", "-std=c11", f"-I{include}"]
    subprocess.run([cc, *flags, str(SOURCE), "-lm", "-o", str(built)], check=True)
    build()
    result = run_json(_CHILD.format(path=str(built), calls=CALLS), preload_env("cuda"))
    # A missing reference per return would move a count by CALLS or more (if the interpreter
    # survived it); what else the loop touches moves it by a few at most.
    for name, before, after in zip(("None", "True", "False"), *result.values(), strict=True):
        assert abs(after - before) < 100, (name, before, after, newer)
