"""The emulated CUDA and HIP drivers, called directly through ctypes.

These prove the test double itself: the backend tests trust it to refuse what the real
drivers refuse, with the real codes, and to count what they leak. Most tests run on both
libraries through one small adapter, since the emulation core is shared and the two drivers
use the same numbers for every code checked here; the last ones run the real bindings in a
subprocess to prove they accept the libraries.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, final

import pytest
from emulated_driver import DriverName, EmulatedDriver, build, load, preload_env

# A test of the test support (the emulated drivers themselves), in its own tier
# (docs/testing.md): the product's tests run on these drivers, and this proves they behave as
# the real ones do.
pytestmark = pytest.mark.support

# Codes shared by CUDA and HIP (CUresult and hipError_t agree on all of these).
SUCCESS = 0
INVALID_VALUE = 1
NO_DEVICE = 100
INVALID_DEVICE = 101
INVALID_CONTEXT = 201
INVALID_HANDLE = 400
ILLEGAL_STATE = 401
NOT_READY = 600
ILLEGAL_ADDRESS = 700
CAPTURE_UNSUPPORTED = 900
CAPTURE_INVALIDATED = 901
CAPTURED_EVENT = 907
CAPTURE_WRONG_THREAD = 908

CAPTURE_NONE, CAPTURE_ACTIVE = 0, 1
MODE_GLOBAL, MODE_THREAD_LOCAL, MODE_RELAXED = 0, 1, 2

HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
# Bound on every wait for a worker thread: generous, since a failure here is a hang.
WAIT_S = 10.0

_VP = ctypes.c_void_p
_P = ctypes.POINTER


@final
class Api:
    """The driver calls under test, named once for both drivers; each returns the raw code."""

    __slots__ = ("drv", "lib", "name")

    def __init__(self, drv: EmulatedDriver) -> None:
        self.drv = drv
        self.lib = drv.lib
        self.name: DriverName = drv.name
        cu = self.name == "cuda"
        self._sig("cuEventCreate" if cu else "hipEventCreateWithFlags", [_P(_VP), ctypes.c_uint])
        for fn in ("EventDestroy", "EventSynchronize", "EventQuery", "StreamDestroy"):
            self._sig(self.full_name(fn), [_VP])
        self._sig(self.full_name("StreamSynchronize"), [_VP])
        self._sig(self.full_name("StreamQuery"), [_VP])
        self._sig(self.full_name("GraphDestroy"), [_VP])
        self._sig(self.full_name("EventRecord"), [_VP, _VP])
        self._sig(self.full_name("EventElapsedTime"), [_P(ctypes.c_float), _VP, _VP])
        self._sig(
            self.full_name("StreamCreate") if cu else "hipStreamCreateWithFlags",
            [_P(_VP), ctypes.c_uint],
        )
        self._sig(self.full_name("StreamWaitEvent"), [_VP, _VP, ctypes.c_uint])
        self._sig(self.full_name("StreamIsCapturing"), [_VP, _P(ctypes.c_int)])
        self._sig(self.full_name("StreamBeginCapture"), [_VP, ctypes.c_int])
        self._sig(self.full_name("StreamEndCapture"), [_VP, _P(_VP)])
        self._sig(self.full_name("LaunchHostFunc"), [_VP, HOST_FN, _VP])
        self._sig(self.full_name("EventRecordWithFlags"), [_VP, _VP, ctypes.c_uint])
        self._sig(self.full_name("GraphInstantiateWithFlags"), [_P(_VP), _VP, ctypes.c_ulonglong])
        self._sig(self.full_name("GraphLaunch"), [_VP, _VP])
        self._sig(self.full_name("GraphExecDestroy"), [_VP])

    def full_name(self, fn: str) -> str:
        """The driver's name for ``fn``: cuEventRecord or hipEventRecord."""
        return ("cu" if self.name == "cuda" else "hip") + fn

    def _sig(self, fn: str, argtypes: list[Any]) -> None:
        f = getattr(self.lib, fn)
        f.restype = ctypes.c_int
        f.argtypes = argtypes

    def call(self, fn: str, *args: object) -> int:
        """Call driver function ``fn`` (base name without the cu/hip prefix)."""
        return int(getattr(self.lib, self.full_name(fn))(*args))

    def event_create(self, *, timing: bool = True, blocking: bool = False) -> tuple[int, int]:
        h = _VP()
        fn = "cuEventCreate" if self.name == "cuda" else "hipEventCreateWithFlags"
        # The flag values agree: BLOCKING_SYNC 1, DISABLE_TIMING 2 in both drivers.
        flags = (0 if timing else 2) | (1 if blocking else 0)
        rc = int(getattr(self.lib, fn)(ctypes.byref(h), flags))
        return rc, h.value or 0

    def set_blocking_sync(self, on: bool) -> int:
        """Set device 0's scheduling flag: blocking sync (True) or the default, automatic."""
        flags = 4 if on else 0  # CU_CTX_SCHED_BLOCKING_SYNC, hipDeviceScheduleBlockingSync
        if self.name == "cuda":
            return int(self.lib.cuDevicePrimaryCtxSetFlags(0, flags))
        return int(self.lib.hipSetDeviceFlags(flags))

    def blocking_sync(self) -> bool:
        flags = ctypes.c_uint(99)
        if self.name == "cuda":
            active = ctypes.c_int(-1)
            rc = self.lib.cuDevicePrimaryCtxGetState(0, ctypes.byref(flags), ctypes.byref(active))
        else:
            rc = self.lib.hipGetDeviceFlags(ctypes.byref(flags))
        assert rc == SUCCESS
        return flags.value == 4

    def stream_create(self) -> tuple[int, int]:
        h = _VP()
        fn = "cuStreamCreate" if self.name == "cuda" else "hipStreamCreateWithFlags"
        rc = int(getattr(self.lib, fn)(ctypes.byref(h), 1))  # non-blocking in both drivers
        return rc, h.value or 0

    def elapsed(self, start: int, end: int) -> tuple[int, float]:
        ms = ctypes.c_float(-1.0)
        rc = self.call("EventElapsedTime", ctypes.byref(ms), start, end)
        return rc, ms.value

    def is_capturing(self, stream: int) -> tuple[int, int]:
        status = ctypes.c_int(-1)
        return self.call("StreamIsCapturing", stream, ctypes.byref(status)), status.value

    def end_capture(self, stream: int) -> tuple[int, int]:
        graph = _VP(1)
        rc = self.call("StreamEndCapture", stream, ctypes.byref(graph))
        return rc, graph.value or 0

    def instantiate(self, graph: int) -> tuple[int, int]:
        executable = _VP()
        rc = self.call("GraphInstantiateWithFlags", ctypes.byref(executable), graph, 0)
        return rc, executable.value or 0


@final
class Gate:
    """A host function that holds a stream until the test opens the gate.

    ``started`` is set once the stream reached the function; ``ran`` once it returned.
    """

    __slots__ = ("callback", "opened", "ran", "started")

    def __init__(self) -> None:
        self.started = threading.Event()
        self.opened = threading.Event()
        self.ran = threading.Event()

        def hold(_: int | None) -> None:
            self.started.set()
            self.opened.wait(WAIT_S)
            self.ran.set()

        # Kept on the object: ctypes must not collect the trampoline while a worker calls it.
        self.callback = HOST_FN(hold)

    def open(self) -> None:
        self.opened.set()


def _bind_cuda_thread(lib: ctypes.CDLL, device: int = 0) -> int:
    """Make device's primary context current on the calling thread; returns the context."""
    ctx = _VP()
    assert lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device) == SUCCESS
    assert lib.cuCtxSetCurrent(ctx) == SUCCESS
    return ctx.value or 0


@pytest.fixture(scope="session")
def emulated_libs() -> dict[DriverName, EmulatedDriver]:
    build()
    libs: dict[DriverName, EmulatedDriver] = {"cuda": load("cuda"), "hip": load("hip")}
    cu = libs["cuda"].lib
    cu.cuInit.argtypes = [ctypes.c_uint]
    cu.cuDevicePrimaryCtxRetain.argtypes = [_P(_VP), ctypes.c_int]
    cu.cuDevicePrimaryCtxRelease.argtypes = [ctypes.c_int]
    cu.cuCtxSetCurrent.argtypes = [_VP]
    cu.cuCtxGetCurrent.argtypes = [_P(_VP)]
    cu.cuCtxPushCurrent.argtypes = [_VP]
    cu.cuCtxPopCurrent.argtypes = [_P(_VP)]
    cu.cuCtxGetDevice.argtypes = [_P(ctypes.c_int)]
    cu.cuGetErrorName.argtypes = [ctypes.c_int, _P(ctypes.c_char_p)]
    cu.cuGetErrorString.argtypes = [ctypes.c_int, _P(ctypes.c_char_p)]
    cu.cuDriverGetVersion.argtypes = [_P(ctypes.c_int)]
    cu.cuDeviceGetCount.argtypes = [_P(ctypes.c_int)]
    cu.cuDeviceGet.argtypes = [_P(ctypes.c_int), ctypes.c_int]
    cu.cuDevicePrimaryCtxSetFlags.argtypes = [ctypes.c_int, ctypes.c_uint]
    cu.cuDevicePrimaryCtxGetState.argtypes = [ctypes.c_int, _P(ctypes.c_uint), _P(ctypes.c_int)]
    cu.cuGetProcAddress_v2.argtypes = [
        ctypes.c_char_p,
        _P(_VP),
        ctypes.c_int,
        ctypes.c_uint64,
        _P(ctypes.c_int),
    ]
    assert cu.cuInit(0) == SUCCESS
    hip = libs["hip"].lib
    hip.hipGetErrorName.restype = ctypes.c_char_p
    hip.hipGetErrorName.argtypes = [ctypes.c_int]
    hip.hipGetErrorString.restype = ctypes.c_char_p
    hip.hipGetErrorString.argtypes = [ctypes.c_int]
    hip.hipSetDevice.argtypes = [ctypes.c_int]
    hip.hipGetDevice.argtypes = [_P(ctypes.c_int)]
    hip.hipGetDeviceCount.argtypes = [_P(ctypes.c_int)]
    hip.hipSetDeviceFlags.argtypes = [ctypes.c_uint]
    hip.hipGetDeviceFlags.argtypes = [_P(ctypes.c_uint)]
    return libs


@pytest.fixture(params=["cuda", "hip"])
def api(
    request: pytest.FixtureRequest, emulated_libs: dict[DriverName, EmulatedDriver]
) -> Iterator[Api]:
    name: DriverName = request.param
    drv = emulated_libs[name]
    if name == "cuda":
        _bind_cuda_thread(drv.lib)
    before = drv.live_handles()
    yield Api(drv)
    drv.clear_faults()
    drv.set_negative_elapsed(0)
    # Every test releases what it made: the handle counts are back where they started.
    assert drv.live_handles() == before
    if name == "cuda":
        assert drv.lib.cuDevicePrimaryCtxRelease(0) == SUCCESS


@pytest.fixture
def cuda(emulated_libs: dict[DriverName, EmulatedDriver]) -> Iterator[EmulatedDriver]:
    drv = emulated_libs["cuda"]
    before = drv.live_handles()
    yield drv
    drv.clear_faults()
    assert drv.live_handles() == before


def _run_in_thread(fn: Callable[[], None]) -> None:
    """Run fn on a fresh thread (no current context / device) and re-raise its failure."""
    errors: list[BaseException] = []

    def body() -> None:
        try:
            fn()
        except BaseException as exc:  # reported on the caller's thread
            errors.append(exc)

    t = threading.Thread(target=body)
    t.start()
    t.join(WAIT_S)
    assert not t.is_alive()
    if errors:
        raise errors[0]


# -- handle table ---------------------------------------------------------------------------


def test_stale_unknown_and_wrong_kind_handles_are_refused(api: Api) -> None:
    rc, ev = api.event_create()
    assert rc == SUCCESS
    rc, st = api.stream_create()
    assert rc == SUCCESS
    assert api.call("EventDestroy", ev) == SUCCESS
    # The slot is reused by the next event, under a new generation: the stale handle stays dead.
    rc, ev2 = api.event_create()
    assert rc == SUCCESS
    assert ev2 != ev
    for stale in (ev, 0x1234, 0xDEADBEEF00, st):  # destroyed, unknown, unknown, a stream
        assert api.call("EventQuery", stale) == INVALID_HANDLE
        assert api.call("EventSynchronize", stale) == INVALID_HANDLE
        assert api.call("EventRecord", stale, st) == INVALID_HANDLE
        assert api.call("EventDestroy", stale) == INVALID_HANDLE
    assert api.call("StreamSynchronize", ev2) == INVALID_HANDLE  # an event is no stream
    assert api.call("EventQuery", ev2) == SUCCESS
    assert api.call("StreamDestroy", st) == SUCCESS
    assert api.call("StreamDestroy", st) == INVALID_HANDLE
    assert api.call("StreamSynchronize", st) == INVALID_HANDLE
    assert api.call("EventRecord", ev2, st) == INVALID_HANDLE
    assert api.call("EventDestroy", ev2) == SUCCESS


def test_null_out_pointers_are_invalid_values(api: Api) -> None:
    create = "cuEventCreate" if api.name == "cuda" else "hipEventCreateWithFlags"
    assert getattr(api.lib, create)(None, 0) == INVALID_VALUE
    _, ev = api.event_create()
    assert api.call("EventElapsedTime", None, ev, ev) == INVALID_VALUE
    _, st = api.stream_create()
    assert api.call("StreamIsCapturing", st, None) == INVALID_VALUE
    assert api.call("StreamEndCapture", st, None) == INVALID_VALUE
    assert api.call("LaunchHostFunc", st, HOST_FN(), None) == INVALID_VALUE  # NULL function
    assert api.call("StreamDestroy", st) == SUCCESS
    assert api.call("EventDestroy", ev) == SUCCESS


# -- streams, events, timing ----------------------------------------------------------------


def test_host_function_holds_the_stream_until_released(api: Api) -> None:
    _, st = api.stream_create()
    _, start = api.event_create()
    _, end = api.event_create()
    gate = Gate()
    host_before = time.perf_counter_ns()
    assert api.call("EventRecord", start, st) == SUCCESS
    assert api.call("LaunchHostFunc", st, gate.callback, None) == SUCCESS
    assert api.call("EventRecord", end, st) == SUCCESS
    assert gate.started.wait(WAIT_S)

    assert api.call("StreamQuery", st) == NOT_READY
    assert api.call("EventQuery", end) == NOT_READY
    assert api.call("EventQuery", start) == SUCCESS  # reached before the host function
    assert api.elapsed(start, end)[0] == NOT_READY

    # Hold the stream for at least 2 ms of host time (a busy wait measures, it does not
    # synchronize), so the reading has a lower bound set by causality alone.
    held_from = time.perf_counter_ns()
    while time.perf_counter_ns() - held_from < 2_000_000:
        pass
    gate.open()
    assert api.call("EventSynchronize", end) == SUCCESS
    host_after = time.perf_counter_ns()
    assert gate.ran.is_set()
    assert api.call("StreamQuery", st) == SUCCESS
    rc, ms = api.elapsed(start, end)
    assert rc == SUCCESS
    # Bounds: start was stamped before held_from and end after the gate opened, and both lie
    # between host_before and host_after; 1e-3 ms absorbs float32 rounding.
    assert 2.0 - 1e-3 <= ms <= (host_after - host_before) / 1e6 + 1e-3
    for h in (start, end):
        assert api.call("EventDestroy", h) == SUCCESS
    assert api.call("StreamDestroy", st) == SUCCESS


def test_stream_waits_for_the_record_current_at_enqueue(api: Api) -> None:
    _, a = api.stream_create()
    _, b = api.stream_create()
    _, e = api.event_create()
    _, f = api.event_create()
    gate = Gate()
    assert api.call("LaunchHostFunc", a, gate.callback, None) == SUCCESS
    assert api.call("EventRecord", e, a) == SUCCESS
    assert api.call("StreamWaitEvent", b, e, 0) == SUCCESS
    assert api.call("EventRecord", f, b) == SUCCESS
    # Re-recording e on a free stream must not release b: its wait binds the first record.
    assert api.call("EventRecord", e, 0) == SUCCESS
    assert api.call("EventSynchronize", e) == SUCCESS
    assert gate.started.wait(WAIT_S)
    assert api.call("EventQuery", f) == NOT_READY
    assert api.call("StreamQuery", b) == NOT_READY
    gate.open()
    assert api.call("StreamSynchronize", b) == SUCCESS
    assert api.call("EventQuery", f) == SUCCESS
    assert api.call("StreamSynchronize", a) == SUCCESS
    for ev in (e, f):
        assert api.call("EventDestroy", ev) == SUCCESS
    for st in (a, b):
        assert api.call("StreamDestroy", st) == SUCCESS


def test_never_recorded_and_untimed_events(api: Api) -> None:
    _, new = api.event_create()
    _, untimed = api.event_create(timing=False)
    _, timed = api.event_create()
    # Never recorded: complete for query and synchronize, but there is no time to read.
    assert api.call("EventQuery", new) == SUCCESS
    assert api.call("EventSynchronize", new) == SUCCESS
    assert api.elapsed(new, new)[0] == INVALID_HANDLE
    assert api.call("StreamWaitEvent", 0, new, 0) == SUCCESS  # waits on nothing
    for ev in (untimed, timed):
        assert api.call("EventRecord", ev, 0) == SUCCESS
        assert api.call("EventSynchronize", ev) == SUCCESS
    assert api.elapsed(untimed, timed)[0] == INVALID_HANDLE
    assert api.elapsed(timed, untimed)[0] == INVALID_HANDLE
    rc, ms = api.elapsed(timed, timed)
    assert (rc, ms) == (SUCCESS, 0.0)
    for ev in (new, untimed, timed):
        assert api.call("EventDestroy", ev) == SUCCESS


def test_negative_elapsed_on_demand(api: Api) -> None:
    _, ev = api.event_create()
    assert api.call("EventRecord", ev, 0) == SUCCESS
    assert api.call("EventSynchronize", ev) == SUCCESS
    api.drv.set_negative_elapsed(1)
    rc, ms = api.elapsed(ev, ev)
    assert rc == SUCCESS
    assert ms < 0
    assert api.elapsed(ev, ev) == (SUCCESS, 0.0)  # only the next reading was affected
    assert api.call("EventDestroy", ev) == SUCCESS


def test_destroy_with_work_queued_is_deferred_safely(api: Api) -> None:
    before = api.drv.live_handles()
    _, st = api.stream_create()
    _, ev = api.event_create()
    gate = Gate()
    assert api.call("LaunchHostFunc", st, gate.callback, None) == SUCCESS
    assert api.call("EventRecord", ev, st) == SUCCESS
    assert gate.started.wait(WAIT_S)
    # Both handles die at once, while the worker still holds the queued record.
    assert api.call("EventDestroy", ev) == SUCCESS
    assert api.call("StreamDestroy", st) == SUCCESS
    assert api.drv.live_handles() == before
    assert api.call("EventQuery", ev) == INVALID_HANDLE
    assert api.call("StreamQuery", st) == INVALID_HANDLE
    gate.open()
    assert gate.ran.wait(WAIT_S)  # the queued work still ran after the destroy


def test_counters_follow_creation_and_destruction(api: Api) -> None:
    before = api.drv.live_handles()
    events = [api.event_create()[1] for _ in range(5)]
    streams = [api.stream_create()[1] for _ in range(3)]
    now = api.drv.live_handles()
    assert (now.events, now.streams) == (before.events + 5, before.streams + 3)
    assert api.call("StreamBeginCapture", streams[0], MODE_GLOBAL) == SUCCESS
    rc, graph = api.end_capture(streams[0])
    assert rc == SUCCESS
    assert graph != 0
    assert api.drv.live_handles().graphs == before.graphs + 1
    assert api.call("GraphDestroy", graph) == SUCCESS
    assert api.call("GraphDestroy", graph) == INVALID_HANDLE
    for ev in events:
        assert api.call("EventDestroy", ev) == SUCCESS
    for st in streams:
        assert api.call("StreamDestroy", st) == SUCCESS
    assert api.drv.live_handles() == before


def test_threads_hammering_one_driver(api: Api) -> None:
    """Many threads create, record, wait and destroy at once; nothing is lost or leaked."""
    before = api.drv.live_handles()

    def work() -> None:
        if api.name == "cuda":
            _bind_cuda_thread(api.lib)
        _, st = api.stream_create()
        for _ in range(30):
            _, a = api.event_create()
            _, b = api.event_create()
            assert api.call("EventRecord", a, st) == SUCCESS
            assert api.call("StreamWaitEvent", 0, a, 0) == SUCCESS
            assert api.call("EventRecord", b, st) == SUCCESS
            assert api.call("EventSynchronize", b) == SUCCESS
            rc, ms = api.elapsed(a, b)
            assert rc == SUCCESS
            assert ms >= 0
            assert api.call("EventDestroy", a) == SUCCESS
            assert api.call("EventDestroy", b) == SUCCESS
        assert api.call("StreamDestroy", st) == SUCCESS
        if api.name == "cuda":
            assert api.lib.cuDevicePrimaryCtxRelease(0) == SUCCESS

    errors: list[BaseException] = []

    def body() -> None:
        try:
            work()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=body) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert api.drv.live_handles() == before


# -- how a host thread waits -----------------------------------------------------------------

# How long the stream stays held once the waiter is inside the driver's wait. What the test
# reads is which wait the driver chose, which the emulator counts (emu_spin_looks, emu_spin_yields)
# and no hold or machine load can change: a spinning wait looks at the held work at least once
# (it is held when the wait begins), a sleeping one never does. The hold gives a spin many looks.
HOLD_S = 0.01


class Waited(NamedTuple):
    """How one thread waited: the looks its spin made at the held work, and its yields."""

    looks: int
    yields: int


def assert_spun(waited: Waited) -> None:
    assert waited.looks > 0, waited


def assert_slept(waited: Waited) -> None:
    assert waited == Waited(0, 0), waited


def _measure_a_wait(api: Api, sync: str, handle: int, held: Gate, device_blocking: bool) -> Waited:
    """How one thread's ``sync(handle)`` waited while ``held`` held its stream.

    The stream is released HOLD_S after the waiter is inside the driver's wait (the emulator's
    gauge of host waits reads one), so the wait began on unfinished work. The counters are the
    process's, and only the waiter waits meanwhile: the held stream's host function runs on the
    emulated device's worker, which never makes a host wait.
    """
    looks, spin_yields, host_waits = (
        api.lib.emu_spin_looks,
        api.lib.emu_spin_yields,
        api.lib.emu_host_waits,
    )
    for counter in (looks, spin_yields, host_waits):
        counter.restype = ctypes.c_long
    results: list[int] = []

    def wait() -> None:
        if api.name == "cuda":
            _bind_cuda_thread(api.lib)
        results.append(api.call(sync, handle))
        if api.name == "cuda":
            assert api.lib.cuDevicePrimaryCtxRelease(0) == SUCCESS

    assert host_waits() == 0
    assert api.set_blocking_sync(device_blocking) == SUCCESS
    try:
        looked, yielded = looks(), spin_yields()
        waiter = threading.Thread(target=wait)
        waiter.start()
        deadline = time.monotonic() + WAIT_S
        while host_waits() == 0 and time.monotonic() < deadline:
            time.sleep(0.0005)  # polls a gauge; the wait under test is the driver's
        in_the_wait = host_waits() == 1
        time.sleep(HOLD_S)  # the device's work, not synchronization
        held.open()
        waiter.join(WAIT_S)
        assert not waiter.is_alive()
        waited = Waited(looks() - looked, spin_yields() - yielded)
    finally:
        held.open()
        assert api.set_blocking_sync(False) == SUCCESS
    assert in_the_wait, "the waiter never reached the driver's wait"
    assert results == [SUCCESS], "the waiting thread failed"
    return waited


@pytest.mark.parametrize(
    ("blocking_event", "device_blocking", "spins"),
    [(False, False, True), (True, False, False), (False, True, False)],
    ids=["default-event-spins", "blocking-sync-event-sleeps", "blocking-sync-device-sleeps"],
)
def test_event_synchronize_spins_unless_blocking_sync(
    api: Api, blocking_event: bool, device_blocking: bool, spins: bool
) -> None:
    """As CUDA documents for cuEventSynchronize (and HIP for hipEventSynchronize)."""
    _, st = api.stream_create()
    _, ev = api.event_create(blocking=blocking_event)
    gate = Gate()
    assert api.call("LaunchHostFunc", st, gate.callback, None) == SUCCESS
    assert api.call("EventRecord", ev, st) == SUCCESS
    waited = _measure_a_wait(api, "EventSynchronize", ev, gate, device_blocking)
    if spins:
        assert_spun(waited)
    else:
        assert_slept(waited)
    assert api.call("EventDestroy", ev) == SUCCESS
    assert api.call("StreamDestroy", st) == SUCCESS


@pytest.mark.parametrize("device_blocking", [False, True], ids=["default-spins", "blocking-sleeps"])
def test_stream_synchronize_follows_the_device_scheduling_flag(
    api: Api, device_blocking: bool
) -> None:
    _, st = api.stream_create()
    gate = Gate()
    assert api.call("LaunchHostFunc", st, gate.callback, None) == SUCCESS
    waited = _measure_a_wait(api, "StreamSynchronize", st, gate, device_blocking)
    if device_blocking:
        assert_slept(waited)
    else:
        assert_spun(waited)
    assert api.call("StreamDestroy", st) == SUCCESS


def test_scheduling_flags_are_checked_and_read_back(api: Api) -> None:
    assert not api.blocking_sync()
    assert api.set_blocking_sync(True) == SUCCESS
    try:
        assert api.blocking_sync()
    finally:
        assert api.set_blocking_sync(False) == SUCCESS
    assert not api.blocking_sync()
    set_flags = "cuDevicePrimaryCtxSetFlags" if api.name == "cuda" else "hipSetDeviceFlags"
    for bad in (3, 5, 7):  # not one scheduling mode
        args = (0, bad) if api.name == "cuda" else (bad,)
        assert getattr(api.lib, set_flags)(*args) == INVALID_VALUE


# -- faults and call counts -----------------------------------------------------------------


def test_injected_faults_come_first_and_calls_are_counted(api: Api) -> None:
    record = api.full_name("EventRecord")
    _, ev = api.event_create()
    api.drv.reset_counters()
    api.drv.inject_fault(record, count=2, code=ILLEGAL_ADDRESS)
    assert api.call("EventRecord", ev, 0) == ILLEGAL_ADDRESS
    # A fault returns before anything is checked: even a dead handle gets the fault.
    assert api.call("EventRecord", 0x1234, 0) == ILLEGAL_ADDRESS
    assert api.call("EventRecord", ev, 0) == SUCCESS
    assert api.drv.calls(record) == 3
    assert api.drv.calls(api.full_name("EventQuery")) == 0
    api.drv.inject_fault(record, count=5, code=ILLEGAL_ADDRESS)
    api.drv.clear_faults()
    assert api.call("EventRecord", ev, 0) == SUCCESS
    with pytest.raises(ValueError, match="non-zero error code"):
        api.drv.inject_fault(record, code=0)
    api.drv.reset_counters()
    assert api.drv.calls(record) == 0
    assert api.call("EventDestroy", ev) == SUCCESS


def test_versioned_names_count_as_the_base_function(cuda: EmulatedDriver) -> None:
    _bind_cuda_thread(cuda.lib)
    ev = _VP()
    assert cuda.lib.cuEventCreate(ctypes.byref(ev), 0) == SUCCESS
    cuda.reset_counters()
    cuda.inject_fault("cuEventDestroy_v2", code=ILLEGAL_ADDRESS)
    cuda.lib.cuEventDestroy.argtypes = [_VP]
    cuda.lib.cuEventDestroy_v2.argtypes = [_VP]
    assert cuda.lib.cuEventDestroy(ev) == ILLEGAL_ADDRESS
    assert cuda.lib.cuEventDestroy_v2(ev) == SUCCESS
    assert cuda.calls("cuEventDestroy") == 2
    assert cuda.calls("cuEventDestroy_v2") == 2
    assert cuda.lib.cuDevicePrimaryCtxRelease(0) == SUCCESS


# -- capture --------------------------------------------------------------------------------


def test_capture_refuses_sync_and_captured_events(api: Api) -> None:
    _, st = api.stream_create()
    _, ev = api.event_create()
    _, other = api.event_create()
    assert api.is_capturing(st) == (SUCCESS, CAPTURE_NONE)
    assert api.call("StreamBeginCapture", st, MODE_GLOBAL) == SUCCESS
    assert api.call("StreamBeginCapture", st, MODE_GLOBAL) == ILLEGAL_STATE
    assert api.is_capturing(st) == (SUCCESS, CAPTURE_ACTIVE)
    assert api.call("EventRecord", ev, st) == SUCCESS  # becomes a graph node, never runs
    assert api.call("EventQuery", ev) == CAPTURED_EVENT
    assert api.call("EventSynchronize", ev) == CAPTURED_EVENT
    assert api.elapsed(ev, ev)[0] == CAPTURED_EVENT
    assert api.call("StreamWaitEvent", 0, ev, 0) == CAPTURED_EVENT
    # Synchronizing a capturing stream is refused and spoils the capture.
    assert api.call("StreamSynchronize", st) == CAPTURE_UNSUPPORTED
    assert api.call("EventRecord", other, st) == CAPTURE_INVALIDATED
    rc, graph = api.end_capture(st)
    assert (rc, graph) == (CAPTURE_INVALIDATED, 0)
    assert api.is_capturing(st) == (SUCCESS, CAPTURE_NONE)
    assert api.end_capture(st)[0] == ILLEGAL_STATE
    # Re-recording outside capture makes the event usable again.
    assert api.call("EventRecord", ev, st) == SUCCESS
    assert api.call("EventSynchronize", ev) == SUCCESS
    assert api.call("StreamBeginCapture", 0, MODE_GLOBAL) == CAPTURE_UNSUPPORTED
    assert api.call("StreamBeginCapture", st, 7) == INVALID_VALUE
    for e in (ev, other):
        assert api.call("EventDestroy", e) == SUCCESS
    assert api.call("StreamDestroy", st) == SUCCESS


EXTERNAL = 1  # CU_EVENT_RECORD_EXTERNAL, hipEventRecordExternal


def test_a_plain_record_in_a_capture_is_never_stamped(api: Api) -> None:
    # A dependency inside the graph: refused as a captured event while the capture goes on,
    # "invalid argument" (CUDA's answer) once it ended, launched or not.
    _, st = api.stream_create()
    _, ev = api.event_create()
    assert api.call("StreamBeginCapture", st, MODE_RELAXED) == SUCCESS
    assert api.call("EventRecord", ev, st) == SUCCESS
    assert api.call("EventSynchronize", ev) == CAPTURED_EVENT
    rc, graph = api.end_capture(st)
    assert rc == SUCCESS
    rc, executable = api.instantiate(graph)
    assert rc == SUCCESS
    assert api.call("GraphDestroy", graph) == SUCCESS
    for _ in range(2):
        assert api.call("EventSynchronize", ev) == INVALID_VALUE
        assert api.call("EventQuery", ev) == INVALID_VALUE
        assert api.elapsed(ev, ev)[0] == INVALID_VALUE
        assert api.call("StreamWaitEvent", st, ev, 0) == INVALID_VALUE
        assert api.call("GraphLaunch", executable, st) == SUCCESS
        assert api.call("StreamSynchronize", st) == SUCCESS
    assert api.call("GraphExecDestroy", executable) == SUCCESS
    assert api.call("EventDestroy", ev) == SUCCESS
    assert api.call("StreamDestroy", st) == SUCCESS


def test_external_records_are_stamped_at_each_launch(api: Api) -> None:
    _, st = api.stream_create()
    start, end, before = (api.event_create()[1] for _ in range(3))
    # The flag is for a capture only, as CUDA says; nothing is recorded.
    assert api.call("EventRecordWithFlags", start, st, EXTERNAL) == INVALID_VALUE
    assert api.call("EventRecordWithFlags", start, st, 2) == INVALID_VALUE
    assert api.elapsed(start, start)[0] == INVALID_HANDLE  # never recorded
    slept: list[int] = []

    def host_node(_: int | None) -> None:
        begun = time.perf_counter_ns()
        time.sleep(0.002)
        slept.append(time.perf_counter_ns() - begun)

    callback = HOST_FN(host_node)  # kept alive while the graph may run it
    assert api.call("StreamBeginCapture", st, MODE_RELAXED) == SUCCESS
    assert api.call("EventRecordWithFlags", start, st, EXTERNAL) == SUCCESS
    assert api.call("LaunchHostFunc", st, callback, None) == SUCCESS
    assert api.call("EventRecordWithFlags", end, st, EXTERNAL) == SUCCESS
    # A node leaves the event as it was: never recorded, so nothing to wait for.
    assert api.call("EventSynchronize", start) == SUCCESS
    rc, graph = api.end_capture(st)
    assert rc == SUCCESS
    rc, executable = api.instantiate(graph)
    assert rc == SUCCESS
    assert api.drv.live_handles().graphs >= 2
    assert api.call("GraphDestroy", graph) == SUCCESS
    assert slept == []  # captured, not run
    assert api.elapsed(start, end)[0] == INVALID_HANDLE
    for launch in range(3):
        assert api.call("EventRecord", before, st) == SUCCESS
        assert api.call("GraphLaunch", executable, st) == SUCCESS
        assert api.call("EventSynchronize", end) == SUCCESS
        rc, ms = api.elapsed(start, end)
        assert rc == SUCCESS
        assert len(slept) == launch + 1
        assert ms * 1e6 >= slept[-1] - 20_000  # the host node, within the clock's rounding
        # Stamped again by this launch: after `before`, which follows the last launch's end.
        assert api.elapsed(before, start)[1] >= 0
    assert api.call("GraphExecDestroy", executable) == SUCCESS
    assert api.call("GraphExecDestroy", executable) == INVALID_HANDLE
    assert api.call("GraphLaunch", executable, st) == INVALID_HANDLE
    for ev in (start, end, before):
        assert api.call("EventDestroy", ev) == SUCCESS
    assert api.call("StreamDestroy", st) == SUCCESS


def test_a_graph_launched_into_a_capture_joins_it(api: Api) -> None:
    _, st = api.stream_create()
    _, ev = api.event_create()
    assert api.call("StreamBeginCapture", st, MODE_RELAXED) == SUCCESS
    assert api.call("EventRecordWithFlags", ev, st, EXTERNAL) == SUCCESS
    graph = api.end_capture(st)[1]
    executable = api.instantiate(graph)[1]
    assert api.call("StreamBeginCapture", st, MODE_RELAXED) == SUCCESS
    assert api.call("GraphLaunch", executable, st) == SUCCESS  # its nodes, captured
    outer = api.end_capture(st)[1]
    outer_executable = api.instantiate(outer)[1]
    assert api.elapsed(ev, ev)[0] == INVALID_HANDLE  # nothing ran
    assert api.call("GraphLaunch", outer_executable, st) == SUCCESS
    assert api.call("StreamSynchronize", st) == SUCCESS
    assert api.elapsed(ev, ev) == (SUCCESS, 0.0)
    for g in (graph, outer):
        assert api.call("GraphDestroy", g) == SUCCESS
    for e in (executable, outer_executable):
        assert api.call("GraphExecDestroy", e) == SUCCESS
    assert api.call("EventDestroy", ev) == SUCCESS
    assert api.call("StreamDestroy", st) == SUCCESS


def test_hip_before_7_leaves_external_records_in_a_graph_unstamped(
    emulated_libs: dict[DriverName, EmulatedDriver],
) -> None:
    # ROCm/rocm-systems#2380: the runtime records the event as hipEventRecord would.
    api = Api(emulated_libs["hip"])
    api.drv.set_driver_version(60241133)
    try:
        _, st = api.stream_create()
        _, ev = api.event_create()
        assert api.call("EventRecordWithFlags", ev, st, EXTERNAL) == INVALID_VALUE
        assert api.call("StreamBeginCapture", st, MODE_RELAXED) == SUCCESS
        assert api.call("EventRecordWithFlags", ev, st, EXTERNAL) == SUCCESS
        graph = api.end_capture(st)[1]
        executable = api.instantiate(graph)[1]
        assert api.call("GraphLaunch", executable, st) == SUCCESS
        assert api.call("StreamSynchronize", st) == SUCCESS
        assert api.elapsed(ev, ev)[0] == INVALID_VALUE
        assert api.call("GraphDestroy", graph) == SUCCESS
        assert api.call("GraphExecDestroy", executable) == SUCCESS
        assert api.call("EventDestroy", ev) == SUCCESS
        assert api.call("StreamDestroy", st) == SUCCESS
    finally:
        api.drv.set_driver_version(None)


def test_capture_must_end_on_its_thread_unless_relaxed(api: Api) -> None:
    _, st = api.stream_create()
    ended: list[tuple[int, int]] = []

    def end_elsewhere() -> None:
        if api.name == "cuda":
            _bind_cuda_thread(api.lib)
        ended.append(api.end_capture(st))
        if api.name == "cuda":
            assert api.lib.cuDevicePrimaryCtxRelease(0) == SUCCESS

    assert api.call("StreamBeginCapture", st, MODE_THREAD_LOCAL) == SUCCESS
    _run_in_thread(end_elsewhere)
    assert ended == [(CAPTURE_WRONG_THREAD, 0)]
    rc, graph = api.end_capture(st)  # still open: its own thread may end it
    assert rc == SUCCESS
    assert api.call("GraphDestroy", graph) == SUCCESS

    assert api.call("StreamBeginCapture", st, MODE_RELAXED) == SUCCESS
    ended.clear()
    _run_in_thread(end_elsewhere)
    [(rc, graph)] = ended
    assert rc == SUCCESS
    assert api.call("GraphDestroy", graph) == SUCCESS
    assert api.call("StreamDestroy", st) == SUCCESS


# -- CUDA contexts --------------------------------------------------------------------------


def test_cuda_contexts_are_per_thread(cuda: EmulatedDriver) -> None:
    lib = cuda.lib
    ctx = _bind_cuda_thread(lib)
    assert cuda.live_handles().contexts >= 1
    seen: dict[str, int] = {}

    def fresh_thread() -> None:
        current = _VP(1)
        assert lib.cuCtxGetCurrent(ctypes.byref(current)) == SUCCESS
        seen["current"] = current.value or 0
        ev = _VP()
        seen["create_without_context"] = lib.cuEventCreate(ctypes.byref(ev), 0)
        seen["sync_without_context"] = lib.cuStreamSynchronize(None)
        assert lib.cuCtxPushCurrent(ctx) == SUCCESS
        dev = ctypes.c_int(-1)
        assert lib.cuCtxGetDevice(ctypes.byref(dev)) == SUCCESS
        seen["device"] = dev.value
        seen["create_with_context"] = lib.cuEventCreate(ctypes.byref(ev), 0)
        assert lib.cuEventDestroy(ev) == SUCCESS
        popped = _VP()
        assert lib.cuCtxPopCurrent(ctypes.byref(popped)) == SUCCESS
        assert popped.value == ctx
        seen["pop_empty"] = lib.cuCtxPopCurrent(None)

    _run_in_thread(fresh_thread)
    assert seen == {
        "current": 0,
        "create_without_context": INVALID_CONTEXT,
        "sync_without_context": INVALID_CONTEXT,
        "device": 0,
        "create_with_context": SUCCESS,
        "pop_empty": INVALID_CONTEXT,
    }
    # Device 1's context is a different one, and device 5 does not exist.
    ctx1 = _VP()
    assert lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx1), 1) == SUCCESS
    assert ctx1.value not in (None, ctx)
    assert lib.cuDevicePrimaryCtxRelease(1) == SUCCESS
    assert lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx1), 5) == INVALID_DEVICE
    assert lib.cuDevicePrimaryCtxRelease(0) == SUCCESS


def _cuda_device_count(lib: ctypes.CDLL) -> int:
    n = ctypes.c_int(-1)
    assert lib.cuDeviceGetCount(ctypes.byref(n)) == SUCCESS
    return n.value


def test_cuda_released_context_refuses_calls(cuda: EmulatedDriver) -> None:
    lib = cuda.lib
    before = cuda.live_handles().contexts
    count = _cuda_device_count(lib)
    # The last of 16 devices: no other test in this process holds its context.
    cuda.set_device_count(16)

    def body() -> None:
        _bind_cuda_thread(lib, device=15)
        assert cuda.live_handles().contexts == before + 1
        assert lib.cuDevicePrimaryCtxRelease(15) == SUCCESS
        ev = _VP()
        # The thread's current context lost its last reference: refused, never a crash.
        assert lib.cuEventCreate(ctypes.byref(ev), 0) == INVALID_CONTEXT
        assert lib.cuDevicePrimaryCtxRelease(15) == INVALID_CONTEXT

    try:
        _run_in_thread(body)
    finally:
        cuda.set_device_count(count)
    assert cuda.live_handles().contexts == before


def test_cuda_devices_errors_and_version(cuda: EmulatedDriver) -> None:
    lib = cuda.lib
    count = _cuda_device_count(lib)
    dev = ctypes.c_int(-1)
    assert lib.cuDeviceGet(ctypes.byref(dev), count) == INVALID_DEVICE
    cuda.set_device_count(count + 1)
    try:
        assert _cuda_device_count(lib) == count + 1
        assert lib.cuDeviceGet(ctypes.byref(dev), count) == SUCCESS
        assert dev.value == count
    finally:
        cuda.set_device_count(count)
    with pytest.raises(ValueError, match=r"0\.\.16"):
        cuda.set_device_count(17)

    text = ctypes.c_char_p()
    assert lib.cuGetErrorName(INVALID_HANDLE, ctypes.byref(text)) == SUCCESS
    assert text.value == b"CUDA_ERROR_INVALID_HANDLE"
    assert lib.cuGetErrorString(CAPTURED_EVENT, ctypes.byref(text)) == SUCCESS
    assert text.value == b"operation not permitted on an event last recorded in a capturing stream"
    unknown = ctypes.c_char_p(b"unset")
    assert lib.cuGetErrorName(12345, ctypes.byref(unknown)) == INVALID_VALUE
    assert unknown.value is None

    version = ctypes.c_int()
    assert lib.cuDriverGetVersion(ctypes.byref(version)) == SUCCESS
    assert version.value == 13000
    cuda.set_driver_version(11080)
    assert lib.cuDriverGetVersion(ctypes.byref(version)) == SUCCESS
    assert version.value == 11080
    cuda.set_driver_version(None)
    assert lib.cuDriverGetVersion(ctypes.byref(version)) == SUCCESS
    assert version.value == 13000


def test_cuda_get_proc_address_picks_the_abi_by_version(cuda: EmulatedDriver) -> None:
    lib = cuda.lib
    fn = _VP()
    status = ctypes.c_int(-1)

    def resolve(name: bytes, version: int) -> tuple[int, int, int]:
        rc = lib.cuGetProcAddress_v2(name, ctypes.byref(fn), version, 0, ctypes.byref(status))
        return rc, fn.value or 0, status.value

    address = ctypes.cast(lib.cuEventElapsedTime_v2, _VP).value
    assert resolve(b"cuEventElapsedTime", 12080) == (SUCCESS, address, 0)
    v1 = ctypes.cast(lib.cuLaunchHostFunc, _VP).value
    v2 = ctypes.cast(lib.cuLaunchHostFunc_v2, _VP).value
    assert resolve(b"cuLaunchHostFunc", 10000)[1] == v1
    assert resolve(b"cuLaunchHostFunc", 13020)[1] == v2
    assert resolve(b"cuMemcpyHtoD", 3020) == (500, 0, 1)  # CUDA_ERROR_NOT_FOUND, not found
    assert resolve(b"cuStreamIsCapturing", 9000) == (500, 0, 2)  # version not sufficient


# -- HIP devices ----------------------------------------------------------------------------


def test_hip_device_is_per_thread_and_defaults_to_zero(
    emulated_libs: dict[DriverName, EmulatedDriver],
) -> None:
    lib = emulated_libs["hip"].lib
    dev = ctypes.c_int(-1)
    assert lib.hipSetDevice(1) == SUCCESS
    try:
        seen: list[int] = []

        def fresh_thread() -> None:
            d = ctypes.c_int(-1)
            assert lib.hipGetDevice(ctypes.byref(d)) == SUCCESS
            seen.append(d.value)

        _run_in_thread(fresh_thread)
        assert seen == [0]
        assert lib.hipGetDevice(ctypes.byref(dev)) == SUCCESS
        assert dev.value == 1
        assert lib.hipSetDevice(2) == INVALID_DEVICE
        assert lib.hipGetErrorName(NOT_READY) == b"hipErrorNotReady"
        assert lib.hipGetErrorString(INVALID_HANDLE) == b"invalid resource handle"
    finally:
        assert lib.hipSetDevice(0) == SUCCESS


# -- processes ------------------------------------------------------------------------------


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_device_count_zero_from_environment(
    emulated_libs: dict[DriverName, EmulatedDriver],
) -> None:
    code = """
        import ctypes, sys
        cu = ctypes.CDLL({cuda!r})
        hip = ctypes.CDLL({hip!r})
        n = ctypes.c_int(-1)
        print(cu.cuInit(0), hip.hipGetDeviceCount(ctypes.byref(n)), n.value, hip.hipInit(0))
    """.format(cuda=str(emulated_libs["cuda"].path), hip=str(emulated_libs["hip"].path))
    env = {**os.environ, "EMU_DEVICE_COUNT": "0"}
    env.pop("LD_PRELOAD", None)
    done = _python(code, env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(NO_DEVICE), str(NO_DEVICE), "0", str(NO_DEVICE)]


@pytest.mark.parametrize("name", ["cuda", "hip"])
def test_polling_workers_run_the_whole_check_and_release_everything(
    emulated_libs: dict[DriverName, EmulatedDriver], name: DriverName
) -> None:
    # EMU_WORKER_POLL_US: an idle worker polls its queue before it sleeps, so no call wakes
    # it. Fences, windows, host functions and stream destroys (which must end a polling
    # worker, not leave it to its timeout) behave as with sleeping workers.
    code = f"""
        import ctypes, gc, json, eventapi
        from eventapi import EventFence, EventProfiler
        api = type(eventapi.backend({name!r}))(0)  # an object of its own: it goes, with its spares
        ran = []
        for _ in range(50):
            stream = api.stream_create_non_blocking()
            with EventProfiler(api, stream) as prof:
                with prof.window("w"):
                    api.stream_launch_host_func(stream, lambda: ran.append(1))
                fence = EventFence.record(api, stream)
                fence.wait()
                fence.close()
                spans = prof.collect()
            api.stream_destroy(stream)
        lib = ctypes.CDLL({str(emulated_libs[name].path)!r})
        lib.emu_live_events.restype = lib.emu_live_streams.restype = ctypes.c_long
        driver = [lib.emu_live_events(), lib.emu_live_streams()]
        live = list(api.live_handles())
        del api, prof, fence, stream
        gc.collect()
        released = [lib.emu_live_events(), lib.emu_live_streams()]
        print(json.dumps([len(ran), len(spans), live, driver, released]))
    """
    env = {**preload_env(name), "EMU_WORKER_POLL_US": "200"}
    done = _python(code, env)
    assert done.returncode == 0, done.stderr
    # The 50 fences took turns with one driver event, kept until the object went.
    assert json.loads(done.stdout) == [50, 1, [0, 0], [1, 0], [0, 0]]


# A default event's wait on a stream whose worker first sleeps 100 ms in usleep(100000), in a
# fresh process: prints whether the wait returned only once that sleep was over (at least 100 ms
# after the host function was launched), how many times the wait looked at the unfinished event
# (a spin looks, pausing or yielding between looks; a sleeping wait never does), and how many of
# those looks yielded the core. All three are the driver's own doing: no machine load moves them,
# short of stalling the process for the 100 ms between its record and its synchronize.
# CONTEXTS primary contexts are retained first (cuda), then device 0's set to SCHED.
_SPINNING_WAIT = """
    import ctypes, time
    lib = ctypes.CDLL({path!r})
    libc = ctypes.CDLL(None)
    V, I = ctypes.c_void_p, ctypes.c_int
    lib.emu_spin_looks.restype = lib.emu_spin_yields.restype = ctypes.c_long
    if {kind!r} == "cuda":
        pre, create, flags = "cu", lib.cuEventCreate, ()
        lib.cuCtxSetCurrent.argtypes = [V]
        lib.cuDevicePrimaryCtxSetFlags.argtypes = [I, ctypes.c_uint]
        assert lib.cuInit(0) == 0
        contexts = [V() for _ in range({contexts})]
        for device, context in enumerate(contexts):
            assert lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) == 0
        assert lib.cuCtxSetCurrent(contexts[0]) == 0
        assert lib.cuDevicePrimaryCtxSetFlags(0, {sched}) == 0
        stream_create = lambda out: lib.cuStreamCreate(out, 0)
        event_create = lambda out: lib.cuEventCreate(out, 0)
    else:
        pre = "hip"
        assert lib.hipSetDeviceFlags({sched}) == 0
        stream_create, event_create = lib.hipStreamCreate, lib.hipEventCreate
    launch, record = getattr(lib, pre + "LaunchHostFunc"), getattr(lib, pre + "EventRecord")
    launch.argtypes, record.argtypes = [V, V, V], [V, V]
    synchronize = getattr(lib, pre + "EventSynchronize")
    synchronize.argtypes = [V]
    stream, event = V(), V()
    assert stream_create(ctypes.byref(stream)) == 0
    assert event_create(ctypes.byref(event)) == 0  # default flags: the wait spins
    looks, yields = lib.emu_spin_looks(), lib.emu_spin_yields()
    wall = time.perf_counter()
    assert launch(stream, ctypes.cast(libc.usleep, V), V(100000)) == 0
    assert record(event, stream) == 0
    assert synchronize(event) == 0
    wall = time.perf_counter() - wall
    print(wall >= 0.1, lib.emu_spin_looks() - looks, lib.emu_spin_yields() - yields)
"""

_PROCESSORS = len(os.sched_getaffinity(0))


@pytest.mark.parametrize(
    ("kind", "env", "contexts", "sched", "yields"),
    [
        # CU_CTX_SCHED_AUTO: spin on the core while contexts do not outnumber processors...
        ("cuda", {}, 1, 0, False),
        # ... and yield once they do.
        ("cuda", {"EMU_DEVICE_COUNT": "16"}, _PROCESSORS + 1, 0, True),
        ("cuda", {}, 1, 2, True),  # CU_CTX_SCHED_YIELD
        ("hip", {}, 0, 0, True),  # hipDeviceScheduleAuto, as HIP documents it
        ("hip", {}, 0, 1, False),  # hipDeviceScheduleSpin
        ("hip", {"EMU_SPIN_YIELD": "0"}, 0, 0, False),  # the override, for benchmarks
        ("cuda", {"EMU_SPIN_YIELD": "1"}, 1, 0, True),
    ],
)
def test_a_spinning_wait_yields_as_the_driver_documents_and_returns_when_reached(
    emulated_libs: dict[DriverName, EmulatedDriver],
    kind: DriverName,
    env: dict[str, str],
    contexts: int,
    sched: int,
    yields: bool,
) -> None:
    if contexts > 16:
        pytest.skip(f"{contexts} contexts: more than the emulated driver's 16 devices")
    code = _SPINNING_WAIT.format(
        path=str(emulated_libs[kind].path), kind=kind, contexts=contexts, sched=sched
    )
    done = _python(code, {**preload_env(kind), **env})
    assert done.returncode == 0, done.stderr
    returned_when_reached, looks, yielded = done.stdout.split()
    assert returned_when_reached == "True", done.stdout
    # It spun for the whole wait instead of sleeping: looks by the thousand in the 100 ms (at
    # least one, as the event was unfinished when the wait began), each a yield or none of them.
    assert int(looks) > 0, done.stdout
    assert int(yielded) == (int(looks) if yields else 0), done.stdout


def test_process_exits_with_streams_still_busy(
    emulated_libs: dict[DriverName, EmulatedDriver],
) -> None:
    # A stream held forever by pause() (its worker blocks every signal), another waiting on
    # it, and live events: the process must still exit at once and cleanly.
    code = """
        import ctypes
        lib = ctypes.CDLL({path!r})
        libc = ctypes.CDLL(None)
        P, V = ctypes.POINTER, ctypes.c_void_p
        lib.hipLaunchHostFunc.argtypes = [V, V, V]
        lib.hipEventRecord.argtypes = [V, V]
        lib.hipStreamWaitEvent.argtypes = [V, V, ctypes.c_uint]
        a, b, e = V(), V(), V()
        assert lib.hipStreamCreate(ctypes.byref(a)) == 0
        assert lib.hipStreamCreate(ctypes.byref(b)) == 0
        assert lib.hipEventCreate(ctypes.byref(e)) == 0
        assert lib.hipLaunchHostFunc(a, ctypes.cast(libc.pause, V), None) == 0
        assert lib.hipEventRecord(e, a) == 0
        assert lib.hipStreamWaitEvent(b, e, 0) == 0
        assert lib.hipStreamQuery(b) == 600
        print("exiting")
    """.format(path=str(emulated_libs["hip"].path))
    done = _python(code, preload_env("hip"))
    assert (done.returncode, done.stdout.strip()) == (0, "exiting"), done.stderr


def test_real_cuda_binding_runs_on_the_emulated_driver(
    emulated_libs: dict[DriverName, EmulatedDriver],
) -> None:
    code = """
        from cuda.bindings import driver as d
        ok = d.CUresult.CUDA_SUCCESS
        assert d.cuInit(0) == (ok,)
        err, dev = d.cuDeviceGet(1)
        err, ctx = d.cuDevicePrimaryCtxRetain(dev)
        assert err == ok and d.cuCtxSetCurrent(ctx) == (ok,)
        err, s = d.cuStreamCreate(d.CUstream_flags.CU_STREAM_NON_BLOCKING)
        err, a = d.cuEventCreate(d.CUevent_flags.CU_EVENT_DEFAULT)
        err, b = d.cuEventCreate(d.CUevent_flags.CU_EVENT_DEFAULT)
        assert d.cuEventRecord(a, s) == (ok,) and d.cuEventRecord(b, s) == (ok,)
        assert d.cuEventSynchronize(b) == (ok,) and d.cuStreamSynchronize(s) == (ok,)
        err, ms = d.cuEventElapsedTime(a, b)
        assert err == ok and ms >= 0, (err, ms)
        assert d.cuStreamIsCapturing(s)[1] == d.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE
        assert d.cuEventDestroy(a) == (ok,) and d.cuEventDestroy(b) == (ok,)
        assert d.cuStreamDestroy(s) == (ok,)
        assert d.cuEventQuery(a) == (d.CUresult.CUDA_ERROR_INVALID_HANDLE,)
        assert d.cuDevicePrimaryCtxRelease(dev) == (ok,)
        print("ok")
    """
    done = _python(code, preload_env("cuda"))
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr


def test_real_hip_binding_runs_on_the_emulated_driver(
    emulated_libs: dict[DriverName, EmulatedDriver],
) -> None:
    code = """
        from hip import hip
        ok = hip.hipError_t.hipSuccess
        assert hip.hipSetDevice(1) == (ok,)
        err, s = hip.hipStreamCreateWithFlags(hip.hipStreamNonBlocking)
        err, a = hip.hipEventCreate()
        err, b = hip.hipEventCreateWithFlags(hip.hipEventDefault)
        assert hip.hipEventRecord(a, s) == (ok,) and hip.hipEventRecord(b, s) == (ok,)
        assert hip.hipEventSynchronize(b) == (ok,) and hip.hipStreamSynchronize(s) == (ok,)
        err, ms = hip.hipEventElapsedTime(a, b)
        assert err == ok and ms >= 0, (err, ms)
        assert hip.hipEventDestroy(a) == (ok,) and hip.hipEventDestroy(b) == (ok,)
        assert hip.hipStreamDestroy(s) == (ok,)
        assert hip.hipEventQuery(a) == (hip.hipError_t.hipErrorInvalidHandle,)
        print("ok")
    """
    done = _python(code, preload_env("hip"))
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr
