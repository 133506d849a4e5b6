"""A Ctrl-C storm on the main thread leaves no driver event or stream alive, on cuda and hip.

For 20 s a second process sends the child a SIGINT 0 to 1 ms after the last, at random, while
two threads record fences and profiler windows and the main thread makes events, streams,
fences and profilers and drops them to their finalizers, catching each KeyboardInterrupt
wherever it lands (``tests/native_storm.py``). Afterwards the backend object counts nothing
live, and once it is dropped the driver holds what it held before. ``EVENTAPI_STORM_SECONDS``
shortens the storm.

A build of ``_native.c`` whose handle finalizer skipped the driver's destroy failed this test,
every dropped event and stream left in the driver.
"""

from __future__ import annotations

import json
import sys

import pytest
from child import command
from emulated_driver import REPO_ROOT, DriverName, build, preload_env
from native_storm import SECONDS

SCRIPT = REPO_ROOT / "tests" / "native_storm.py"
# Bounds a hang beyond the storm (the script prints every thread's stack at 60 s past it).
RUN_TIMEOUT_S = SECONDS + 90.0

pytestmark = [pytest.mark.storm, pytest.mark.timeout(RUN_TIMEOUT_S + 30)]


@pytest.mark.parametrize("kind", ["cuda", "hip"])
def test_a_ctrl_c_storm_leaves_no_driver_handle(kind: DriverName) -> None:
    build()
    done = command([sys.executable, SCRIPT, kind], env=preload_env(kind), timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, (
        f"exit {done.returncode}\n{done.stdout[-6000:]}{done.stderr[-6000:]}"
    )
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["failures"] == []
    assert result["driver_after"] == result["driver_before"]
    # The storm reached the library: interrupts in its code and in finalizers it runs.
    assert result["made"]["in eventapi"] > 0
    assert result["unraisable"]["KeyboardInterrupt"] > 0
