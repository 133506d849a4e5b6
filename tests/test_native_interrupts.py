"""An interrupt that lands in a create or a destroy leaks nothing, on cuda and hip.

A signal's Python handler runs between bytecodes, and raises there. A create whose driver
handle came back to Python and was stored a bytecode later lost the handle to an interrupt
landing in between: neither the wrapper nor anything else held it, and the driver kept it.
The compiled creates of eventapi_cuda and eventapi_hip hand the handle to the wrapper from C
(driverkit's ``_raw_*_create_into``), so an interrupt lands before the create or after the
store, where the wrapper's cleanup destroys it. A destroy is the same in reverse: the wrapper,
counted gone, holds its driver handle until the compiled destroy takes it out and destroys it
in one C call (``_raw_*_destroy_from``), so an interrupt leaves it to the wrapper's finalizer.

The child process creates and destroys events, streams and profilers (which create a stream)
in a loop while a thread sends it signals at random moments; the handler raises. After each
interrupt, with the signal blocked, it compares the backend's live count with what it holds
(nothing) and the emulated driver's own count with its count before the loop. It runs until
at least MIN_CREATES interrupts landed inside a create (and MIN_PROFILERS inside a profiler's
construction), or gives up after BUDGET_S.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from compiled_core import compiled_env
from emulated_driver import REPO_ROOT, DriverName, build, preload_env

MIN_CREATES = 200
MIN_PROFILERS = 20
BUDGET_S = 120.0

_CHILD = """
import json, random, signal, sys, threading, time
sys.path.insert(0, {tests!r})
from emulated_driver import load
import eventapi
from eventapi import EventProfiler

SIG = signal.SIGUSR1
emu = load({kind!r})
api = eventapi.backend({kind!r})
live_events, live_streams = emu.lib.emu_live_events, emu.lib.emu_live_streams
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


CREATES = {{"event_create", "stream_create_non_blocking"}}
landed = {{"create": 0, "profiler": 0, "elsewhere": 0}}
mismatches = []
signal.signal(SIG, handler)
main = threading.main_thread().ident
stop = threading.Event()


def sender():
    rng = random.Random(1)
    while not stop.is_set():
        # Random moments: the sleep spreads the signals over the loop, it orders nothing.
        time.sleep(rng.uniform(0, 200e-6))
        signal.pthread_kill(main, SIG)


quiet()
threading.Thread(target=sender, daemon=True).start()
deadline = time.monotonic() + {budget!r}
ops = (event, stream, profiler)
i = 0
while (landed["create"] < {min_creates} or landed["profiler"] < {min_profilers}) and (
    time.monotonic() < deadline
):
    i += 1
    try:
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {{SIG}})
            ops[i % 3]()
        finally:
            quiet()
    except Interrupt as exc:
        names = set()
        tb = exc.__traceback__
        while tb is not None:
            names.add(tb.tb_frame.f_code.co_qualname)
            tb = tb.tb_next
        where = (
            "profiler" if "EventProfiler.__init__" in names
            else "create" if any(name.rsplit(".", 1)[-1] in CREATES for name in names)
            else "elsewhere"
        )
        landed[where] += 1
        del exc, tb
    # The wrapper an interrupt left behind was destroyed as its last reference went.
    held = (tuple(api.live_handles()), (live_events(), live_streams()))
    if held != ((0, 0), base):
        mismatches.append((i, held))
stop.set()
print(json.dumps({{"landed": landed, "mismatches": mismatches[:10], "loops": i}}))
"""


@pytest.mark.parametrize("core", ["pure", "compiled"])
@pytest.mark.parametrize("kind", ["cuda", "hip"])
def test_no_interrupt_in_a_create_leaks_a_handle(kind: DriverName, core: str) -> None:
    # The compiled core runs a pending handler only where it calls back into the interpreter,
    # so its interrupts land at other places than the pure core's; none may lose a handle.
    env = compiled_env() if core == "compiled" else None
    build()
    code = _CHILD.format(
        tests=str(REPO_ROOT / "tests"),
        kind=kind,
        budget=BUDGET_S,
        min_creates=MIN_CREATES,
        min_profilers=MIN_PROFILERS,
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=preload_env(kind, env),
        capture_output=True,
        text=True,
        timeout=BUDGET_S + 60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["mismatches"] == [], result
    assert result["landed"]["create"] >= MIN_CREATES, result
    assert result["landed"]["profiler"] >= MIN_PROFILERS, result
