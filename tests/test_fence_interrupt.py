"""Ctrl-C interrupts ``EventFence.wait()`` without a timeout, on every backend.

A driver's event wait blocks in native code, where a signal only sets a flag that Python reads
when the call returns. These tests run a real process on an emulated driver whose stream is
held by a host function, interrupt its untimed wait with SIGINT, and require
KeyboardInterrupt while the stream is still held and no handle left at exit.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from emulated_driver import REPO_ROOT, DriverName, build, preload_env

# The child: a stream held by a host function (released only through the child's own gate,
# after the interrupt), a fence behind it, and a thread that sends SIGINT once the wait has
# reached the driver's synchronize call. The hold has no time limit: a wait that ignored the
# signal could never return, and the child's timeout fails the test (no bound on how fast the
# interrupt came is needed to tell the two apart).
_CHILD = """
import os, signal, sys, threading, time
sys.path.insert(0, {tests!r})
from emulated_driver import load
import eventapi

emu = load({kind!r})
api = eventapi.backend({kind!r})
stream = api.stream_create_non_blocking()
gate = threading.Event()
api.stream_launch_host_func(stream, gate.wait)
fence = eventapi.EventFence.record(api, stream)
sync_call = {sync!r}
calls_before = emu.calls(sync_call)

def interrupt():
    # Poll the driver's call counter: the signal must land while the wait is in the driver.
    while emu.calls(sync_call) == calls_before:
        time.sleep(0.001)
    os.kill(os.getpid(), signal.SIGINT)

threading.Thread(target=interrupt, daemon=True).start()
try:
    fence.wait()
except KeyboardInterrupt:
    print("interrupted")
else:
    print("not interrupted")
fence.close()
gate.set()
api.stream_synchronize(stream)
api.stream_destroy(stream)
# The thread left waiting destroys the closed fence's event when its wait returns.
deadline = time.monotonic() + 10
while emu.live_handles().events and time.monotonic() < deadline:
    time.sleep(0.001)
print("live", emu.live_handles().events, emu.live_handles().streams, api.live_handles())
"""

_SYNC = {"cuda": "cuEventSynchronize", "hip": "hipEventSynchronize"}


@pytest.mark.parametrize("kind", ["cuda", "hip"])
def test_ctrl_c_interrupts_an_untimed_wait_and_leaks_nothing(kind: DriverName) -> None:
    build()
    child = _CHILD.format(tests=str(REPO_ROOT / "tests"), kind=kind, sync=_SYNC[kind])
    done = subprocess.run(
        [sys.executable, "-c", child],
        env=preload_env(kind),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "interrupted", done.stdout + done.stderr
    assert lines[1] == "live 0 0 LiveHandles(events=0, streams=0)", done.stdout
    assert done.stderr == "", done.stderr
