"""An interrupt that lands in a create or a destroy leaks nothing, on cuda and hip.

A signal's Python handler runs between bytecodes, and raises there. A create whose driver
handle came back to Python and was stored a bytecode later lost the handle to an interrupt
landing in between: neither the wrapper nor anything else held it, and the driver kept it.
The compiled creates of eventapi_cuda and eventapi_hip write the driver's handle into their own
handle's struct, so a signal that arrives during the create is handled as the call returns:
the new handle, held only by the interpreter's stack, is dropped there and destroys what it
holds. A destroy swaps the handle out of the struct before the driver call, in the same C call.

The child process creates and destroys events and streams while the emulated driver raises a
signal inside every create (emu_signal_calls), whose handler raises: MIN_CREATES of each kind,
then MIN_PROFILERS profilers, each interrupted inside its stream's create (the interrupt lands
in the profiler's constructor). After each, with the signal blocked, it compares the backend's
live count with what it holds (nothing) and the emulated driver's own count with its count
before.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from emulated_driver import REPO_ROOT, DriverName, build, preload_env

MIN_CREATES = 200
# The driver's creates, by the names the emulated drivers count them under.
CREATES = {
    "cuda": ("cuEventCreate", "cuStreamCreate"),
    "hip": ("hipEventCreateWithFlags", "hipStreamCreateWithFlags"),
}
MIN_PROFILERS = 20
RUN_TIMEOUT_S = 120.0  # bounds a hang; the run takes a second or two

_CHILD = """
import json, signal, sys
sys.path.insert(0, {tests!r})
from emulated_driver import load
import eventapi
from eventapi import EventProfiler

SIG = signal.SIGUSR1
emu = load({kind!r})
api = eventapi.backend({kind!r})
live_events, live_streams = emu.lib.emu_live_events, emu.lib.emu_live_streams
CREATE_EVENT, CREATE_STREAM = {creates!r}
base = (live_events(), live_streams())


class Interrupt(Exception):
    pass


def handler(signum, frame):
    raise Interrupt


def pending_handlers_run():
    pass  # a Python call: a handler still pending runs here


def quiet():
    # Blocks the signal, however many interrupts it takes, and lets any pending handler run.
    while True:
        try:
            signal.pthread_sigmask(signal.SIG_BLOCK, {{SIG}})
            pending_handlers_run()
            return
        except Interrupt:
            pass


def event():
    api.event_destroy(api.event_create())


def stream():
    api.stream_destroy(api.stream_create_non_blocking())


def profiler():
    EventProfiler(api).close()


landed = {{"create": 0, "profiler": 0, "elsewhere": 0}}
mismatches = []
signal.signal(SIG, handler)


def attempt(op):
    # Runs op with the signal unblocked; where its interrupt landed, if one did.
    try:
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {{SIG}})
            op()
        finally:
            quiet()
    except Interrupt as exc:
        names = set()
        tb = exc.__traceback__
        while tb is not None:
            names.add(tb.tb_frame.f_code.co_qualname)
            tb = tb.tb_next
        del exc, tb
        return "profiler" if "EventProfiler.__init__" in names else "elsewhere"
    finally:
        # The wrapper an interrupt left behind was destroyed as its last reference went.
        held = (tuple(api.live_handles()), (live_events(), live_streams()))
        if held != ((0, 0), base):
            mismatches.append((op.__name__, held))
    return None


quiet()
# Every create interrupted from inside the driver's create call.
for i in range(2 * {min_creates}):
    op, call = (event, CREATE_EVENT) if i % 2 else (stream, CREATE_STREAM)
    emu.signal_calls(call, SIG)
    if attempt(op) is not None:
        landed["create"] += 1

# Profilers, each interrupted inside the create of its stream.
for i in range({min_profilers}):
    emu.signal_calls(CREATE_STREAM, SIG)
    where = attempt(profiler)
    if where is not None:
        landed[where] += 1
print(json.dumps({{"landed": landed, "mismatches": mismatches[:10]}}))
"""


@pytest.mark.parametrize("kind", ["cuda", "hip"])
def test_no_interrupt_in_a_create_leaks_a_handle(kind: DriverName) -> None:
    build()
    code = _CHILD.format(
        tests=str(REPO_ROOT / "tests"),
        kind=kind,
        min_creates=MIN_CREATES,
        min_profilers=MIN_PROFILERS,
        creates=CREATES[kind],
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=preload_env(kind),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["mismatches"] == [], result
    assert result["landed"]["create"] == 2 * MIN_CREATES, result
    assert result["landed"]["profiler"] == MIN_PROFILERS, result
