"""Where the compiled handles refuse to load: a second interpreter, and a CPython without the GIL.

The extension's configuration (the driver's function addresses) is the process's, as the driver
library is, so a second interpreter of the process is refused at import, naming why. Its rules
rely on the GIL (docs/native.md), so the packages refuse a free-threaded CPython at import.
Each case runs in a fresh process.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from child import run_json

# A legacy interpreter, which shares the GIL: the one kind every supported CPython can make and
# that may import any extension, so the refusal seen is the extension's own.
_SECOND_INTERPRETER = """
import json
try:
    import _interpreters as sub
    interp = sub.create("legacy")
except ImportError:
    import _xxsubinterpreters as sub
    try:
        interp = sub.create(isolated=False)
    except TypeError:  # 3.11: every interpreter shares the GIL
        interp = sub.create()
import eventapi_{kind}._native  # the first interpreter's
sub.run_string(interp, '''
try:
    import eventapi_{kind}._native
except ImportError as exc:
    result = str(exc)
else:
    result = "imported"
open({out!r}, "w").write(result)
''')
sub.destroy(interp)
print(json.dumps({{"second": open({out!r}).read()}}))
"""


@pytest.mark.parametrize("kind", ["cuda", "hip"])
def test_a_second_interpreter_is_refused_with_the_reason(kind: str, tmp_path: Path) -> None:
    out = str(tmp_path / "second.txt")
    result = run_json(_SECOND_INTERPRETER.format(kind=kind, out=out))
    assert result["second"].startswith(
        f"eventapi_{kind}._native cannot be imported in a second interpreter of this process"
    ), result


# The build flag a free-threaded CPython reports, reported here by this CPython, which has the
# GIL: what the import reads is the only difference the check sees.
_FREE_THREADED = """
import sysconfig
flag = sysconfig.get_config_var
sysconfig.get_config_var = lambda name: 1 if name == "Py_GIL_DISABLED" else flag(name)
import eventapi_{kind}._backend
"""


@pytest.mark.parametrize("kind", ["cuda", "hip"])
def test_a_free_threaded_cpython_is_refused_at_import(kind: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _FREE_THREADED.format(kind=kind)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"ImportError: eventapi-{kind} needs the GIL"), done.stderr
    assert "free-threaded" in last
