"""The backends' abi3 extension, built with a newer CPython's headers, runs on 3.11.

An abi3 build need not be compiled with the headers of the interpreter that loads it: a
``cp311-abi3`` wheel built on 3.12 installs on 3.11, and ``make matrix`` rebuilds the in-place
extension with each interpreter in turn. The headers of 3.12, and of 3.13 before CPython
gh-134989 was fixed, treat ``None``, ``True`` and ``False`` as immortal even under
``Py_LIMITED_API`` 3.11: their ``Py_RETURN_*`` macros return them without a reference. On 3.11
each such return gives away a reference that was never taken, until the count reaches zero and
the interpreter aborts. ``_native.c`` counts through ``Py_IncRef`` and ``Py_DecRef`` instead.

One test reads the source for the headers' counting macros, whatever headers are at hand; the
other builds it with each CPython 3.12 or later found and runs calls that return each of the
three objects, many times, on the interpreter of the test run.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from child import run_json
from emulated_driver import REPO_ROOT, build, preload_env

SOURCE = REPO_ROOT / "eventapi-cuda" / "src" / "eventapi_cuda" / "_native.c"

# The headers' macros that count references inline, with that header's idea of immortality.
COUNTING_MACROS = re.compile(
    r"\bPy_(?:RETURN_(?:NONE|TRUE|FALSE|NOTIMPLEMENTED)|X?INCREF|X?DECREF|X?NewRef|X?SETREF|CLEAR)\b"
)

# Enough returns of each object to take its whole count on 3.11 (a few thousand at start) many
# times over, were one reference missing from each.
CALLS = 20_000

_CHILD = """
import importlib.util, json, sys, threading
spec = importlib.util.spec_from_file_location("eventapi_cuda._native", {path!r})
native = importlib.util.module_from_spec(spec)
sys.modules["eventapi_cuda._native"] = native
spec.loader.exec_module(native)
import eventapi
import eventapi_cuda._backend
assert eventapi_cuda._backend._native is native

api = eventapi.backend("cuda")
stream = api.stream_create_non_blocking()
event, pending = api.event_create(), api.event_create()
api.event_record(event, stream)
api.stream_synchronize(stream)
counts = lambda: [sys.getrefcount(o) for o in (None, True, False)]
before = counts()
for _ in range({calls}):
    assert api.event_record_unless_capturing(event, stream) is True  # True
    api.event_wait(event)  # None
    assert api.event_query(event) is True  # True
    api.event_record(event, stream)  # None
api.stream_synchronize(stream)
# False: a query of an event behind a host function that holds the stream.
gate = threading.Event()
api.stream_launch_host_func(stream, gate.wait)
api.event_record(pending, stream)
for _ in range({calls}):
    assert api.event_query(pending) is False  # False
gate.set()
api.stream_synchronize(stream)
after = counts()
api.event_destroy(event)
api.event_destroy(pending)
api.stream_destroy(stream)
print(json.dumps({{"before": before, "after": after}}))
"""


def _newer_interpreters() -> list[Path]:
    """One CPython of each version from 3.12 on PATH or under pyenv, as the Makefile finds them."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    found: list[Path] = []
    for minor in range(12, 20):
        on_path = shutil.which(f"python3.{minor}")
        candidates = [on_path] if on_path else []
        candidates += sorted(glob.glob(str(pyenv / f"versions/3.{minor}.*/bin/python3.{minor}")))
        for candidate in candidates:
            if subprocess.run([candidate, "-c", "import sys"], check=False).returncode == 0:
                found.append(Path(candidate))
                break
    return found


def _headers(python: Path) -> Path | None:
    include = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('include'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return Path(include) if (Path(include) / "Python.h").is_file() else None


def test_the_source_counts_no_reference_through_the_headers_macros() -> None:
    code = re.sub(r"/\*.*?\*/|//[^\n]*", "", SOURCE.read_text(), flags=re.S)
    assert not COUNTING_MACROS.findall(code), "use Py_IncRef / Py_DecRef (see the file's header)"


def test_a_build_with_newer_headers_keeps_the_counts_of_none_and_the_bools(
    tmp_path: Path,
) -> None:
    if sys.version_info >= (3, 12):
        pytest.skip("None, True and False are immortal here: a missing reference cannot show")
    builds = [(python, _headers(python)) for python in _newer_interpreters()]
    builds = [(python, include) for python, include in builds if include is not None]
    if not builds:
        pytest.skip("no CPython 3.12 or later with its headers on PATH or under pyenv")
    build()
    cc = os.environ.get("CC", "cc")
    for python, include in builds:
        built = tmp_path / python.name / "_native.abi3.so"
        built.parent.mkdir()
        flags = ["-shared", "-fPIC", "-O2", "-std=c11", f"-I{include}"]
        subprocess.run([cc, *flags, str(SOURCE), "-lm", "-o", str(built)], check=True)
        result = run_json(_CHILD.format(path=str(built), calls=CALLS), preload_env("cuda"))
        # A missing reference per return would move a count by CALLS or more (if the
        # interpreter survived it); what else the loops touch moves it by a few at most.
        for name, before, after in zip(("None", "True", "False"), *result.values(), strict=True):
            assert abs(after - before) < 100, (python, name, before, after)
