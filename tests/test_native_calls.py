"""What the compiled calls (``_native.c``) do when Python code runs under them.

Two ways Python code can run while a compiled call is under way: a garbage collection, which an
allocation in the call can start (on CPython 3.11) and whose finalizers may change the lists the
call reads; and a host function, which a driver runs on its own thread and which needs the GIL.
Each case runs in a fresh process on an emulated driver: a crash or a hang there fails the test,
not the run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from child import run_json
from emulated_driver import DriverName, build, preload_env

TESTS = Path(__file__).resolve().parent

# A finalizer in a reference cycle empties both lists; a collection at every allocation makes
# the call's own allocations run it, after the call was given the lists. The call copies each
# list before it checks anything, so it reads what it copied (both lists whole, or emptied) or
# refuses copies of two lengths, and never reads an event it did not check.
_SHRINKING_LISTS = """
import gc, json
import eventapi

api = eventapi.backend({kind!r})
stream = api.stream_create_non_blocking()
starts = [api.event_create() for _ in range(3)]
ends = [api.event_create() for _ in range(3)]
for start, end in zip(starts, ends):
    api.event_record(start, stream)
    api.event_record(end, stream)
api.stream_synchronize(stream)
keep = list(starts + ends)

class EmptiesThem:
    def __del__(self):
        starts.clear()
        ends.clear()

read = api.event_elapsed_many  # bound now: nothing allocates between enabling gc and the call
gc.disable()
garbage = [[] for _ in range(300)]
cycle = EmptiesThem()
cycle.self = cycle
del cycle
gc.set_threshold(1)
gc.enable()
try:
    readings = read(starts, ends)
except ValueError as exc:
    outcome = ["ValueError", str(exc)]
else:
    outcome = ["returned", len(readings)]
gc.set_threshold(700)
for event in keep:
    api.event_destroy(event)
api.stream_destroy(stream)
print(json.dumps({{"outcome": outcome, "emptied": starts == ends == [],
                  "live": list(api.live_handles())}}))
"""


@pytest.mark.skipif(
    sys.version_info >= (3, 12),
    reason="CPython 3.12 and later collect garbage only between bytecodes, never inside the "
    "call's allocation, so no finalizer runs under it",
)
@pytest.mark.parametrize("kind", ["cuda", "hip"])
def test_lists_a_finalizer_shrinks_during_a_batched_reading_are_read_as_copied(
    kind: DriverName,
) -> None:
    build()
    result = run_json(_SHRINKING_LISTS.format(kind=kind), preload_env(kind))
    assert result["emptied"], "the finalizer never ran: the case was not exercised"
    assert result["outcome"] in (
        ["returned", 0],
        ["returned", 3],
        ["ValueError", "event_elapsed_many: 3 starts but 0 ends"],
    ), result
    assert result["live"] == [0, 0]


# A stream destroy with a host function still queued behind a gate, on a driver whose stream
# destroy waits for the stream's work as ROCm's does (EMU_STREAM_DESTROY_WAITS=1). The gate is
# opened by another Python thread once the destroy reached the driver: the destroy returns only
# if the call let go of the GIL, which that thread and the host function both need.
_DESTROY_WAITS = """
import json, threading, time
import eventapi
from emulated_driver import load

emu = load({kind!r})
api = eventapi.backend({kind!r})
stream = api.stream_create_non_blocking()
gate = threading.Event()
ran = []
api.stream_launch_host_func(stream, lambda: gate.wait(30))
api.stream_launch_host_func(stream, lambda: ran.append(True))
destroy = {destroy!r}
calls_before = emu.calls(destroy)

def open_the_gate():
    while emu.calls(destroy) == calls_before:  # once the destroy is in the driver
        time.sleep(0.001)
    gate.set()

threading.Thread(target=open_the_gate, daemon=True).start()
api.stream_destroy(stream)
print(json.dumps({{"ran": ran, "live": list(api.live_handles())}}))
"""

_STREAM_DESTROY = {"cuda": "cuStreamDestroy", "hip": "hipStreamDestroy"}


@pytest.mark.parametrize("kind", ["cuda", "hip"])
def test_a_stream_destroy_that_waits_for_host_functions_lets_them_run(kind: DriverName) -> None:
    build()
    env = preload_env(kind)
    env["EMU_STREAM_DESTROY_WAITS"] = "1"
    env["PYTHONPATH"] = str(TESTS)
    result = run_json(_DESTROY_WAITS.format(kind=kind, destroy=_STREAM_DESTROY[kind]), env)
    assert result == {"ran": [True], "live": [0, 0]}


# CUDA's cuStreamDestroy returns at once with work still queued, and the stream goes once that
# work is done (the kit allows a destroy that waits too, as ROCm's may): the cuda backend's
# destroy returns while a host function still holds the stream, and the work behind it runs.
_DESTROY_RETURNS = """
import json, threading
import eventapi

api = eventapi.backend("cuda")
stream = api.stream_create_non_blocking()
gate, released, done = threading.Event(), threading.Event(), threading.Event()
api.stream_launch_host_func(stream, lambda: (gate.wait(5), released.set()))
api.stream_launch_host_func(stream, done.set)
api.stream_destroy(stream)
held = not released.is_set() and not done.is_set()
live = list(api.live_handles())
gate.set()
print(json.dumps({"returned_while_held": held, "live": live, "ran": done.wait(30)}))
"""


def test_a_cuda_stream_destroy_returns_while_its_work_is_held() -> None:
    build()
    result = run_json(_DESTROY_RETURNS, preload_env("cuda"))
    assert result == {"returned_while_held": True, "live": [0, 0], "ran": True}


# Integers the compiled calls take are range-checked: one that does not fit the C type the
# driver takes raises instead of being cut down to one that does (2**32 | 1 to 1).
_OUT_OF_RANGE = """
import json
import eventapi
from eventapi_{kind} import _native

api = eventapi.backend({kind!r})  # configures the compiled calls
outcomes = {{}}
for what, call in {{
    "stream beyond 64 bits": lambda: api.stream_is_capturing(2**64 | 1),
    "negative stream": lambda: api.stream_is_capturing(-1),
    "lost status": lambda: _native.lose(2**32 | 1),
    "lost success": lambda: _native.lose(0),
}}.items():
    try:
        call()
    except Exception as exc:
        outcomes[what] = type(exc).__name__
    else:
        outcomes[what] = "returned"
print(json.dumps({{"outcomes": outcomes, "live": list(api.live_handles())}}))
"""


@pytest.mark.parametrize("kind", ["cuda", "hip"])
def test_an_integer_the_driver_cannot_take_is_refused_not_cut_down(kind: DriverName) -> None:
    build()
    result = run_json(_OUT_OF_RANGE.format(kind=kind), preload_env(kind))
    assert result["outcomes"] == {
        "stream beyond 64 bits": "EventStateError",
        "negative stream": "EventStateError",
        "lost status": "OverflowError",
        "lost success": "ValueError",
    }
    assert result["live"] == [0, 0]


# A destroy on a thread the driver cannot give the context to fails before the driver destroys
# anything; the handle is closed for the caller, and its driver event is kept for the object's
# own finalizer to destroy, on a thread that can (the main one here).
_DESTROY_WITHOUT_A_CONTEXT = f"""
import gc, json, sys, threading
from pathlib import Path
sys.path.insert(0, {str(TESTS)!r})
import eventapi
from emulated_driver import EmulatedDriver

api = eventapi.backend("cuda")
emu = EmulatedDriver("cuda", Path("libcuda.so.1"))
event = api.event_create()
before = emu.live_handles().events
refused = []

def destroy():
    emu.inject_fault("cuCtxSetCurrent", code=201)  # CUDA_ERROR_INVALID_CONTEXT
    try:
        api.event_destroy(event)
    except eventapi.DriverError as exc:
        refused.append(exc.call)
    emu.clear_faults()

thread = threading.Thread(target=destroy)
thread.start()
thread.join()
closed = list(api.live_handles())
kept = emu.live_handles().events
del event
gc.collect()
print(json.dumps({{"refused": refused, "closed": closed, "before": before, "kept": kept,
                  "after": emu.live_handles().events}}))
"""


def test_a_destroy_that_cannot_bind_the_context_leaves_the_driver_event_to_the_finalizer() -> None:
    build()
    result = run_json(_DESTROY_WITHOUT_A_CONTEXT, preload_env("cuda"))
    assert result["refused"] == ["cuCtxSetCurrent"], result
    assert result["closed"][:2] == [0, 0], result  # closed for the caller
    assert result["kept"] == result["before"], result  # the driver's event is not lost ...
    assert result["after"] == result["before"] - 1, result  # ... the finalizer destroyed it
