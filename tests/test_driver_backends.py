"""The ``cuda`` and ``hip`` backends, through the real bindings, on the emulated drivers.

Every test runs on both backends unless it is about something only one driver has (CUDA's
primary contexts and per-thread default stream). The emulated library is loaded into this
process before the binding's first call (see ``emulated_driver.load``); each test ends with as
many live events and streams in the emulated driver as it started with, and none live in the
backend object, so a leak anywhere fails the test that caused it.

What only the emulated drivers can show is checked through their control API: how often a
driver function was called (a refused handle must not reach the driver), faults with a given
code (the error's name and text come from the driver), and device counts.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import pytest
from emulated_driver import DriverName, EmulatedDriver, begin_capture, end_capture, load
from threads import JOIN_S, Waiter, release_and_join, settles

import eventapi
from eventapi import CaptureError, DriverError, EventFence, EventProfiler, EventStateError
from eventapi.driverkit._calls import pending_host_funcs

if TYPE_CHECKING:
    from eventapi_cuda import CudaBackend
    from eventapi_cuda._native import Stream

# One type for both: HipBackend's handle types are built from the same C source and stubs.
Api: TypeAlias = "CudaBackend"

KINDS: tuple[DriverName, ...] = ("cuda", "hip")

SPARES = 16
"""The driver events of closed fences a backend object keeps for its next fences."""


def _hip() -> Any:
    # hip-python's stubs leave its functions untyped; the tests use the results as Any.
    from hip import hip

    return hip


@dataclass(frozen=True)
class Spelling:
    """How one driver names the calls these tests count or make directly."""

    kind: DriverName

    def name(self, stem: str) -> str:
        """The driver's function for ``stem``: ``EventRecord`` -> ``cuEventRecord``."""
        return ("cu" if self.kind == "cuda" else "hip") + stem

    @property
    def invalid_handle(self) -> str:
        return "CUDA_ERROR_INVALID_HANDLE" if self.kind == "cuda" else "hipErrorInvalidHandle"

    def current_device(self) -> int:
        """The calling thread's current device, asked of the binding directly."""
        if self.kind == "cuda":
            from cuda.bindings import driver

            err, device = driver.cuCtxGetDevice()
            assert not err, err
            return int(device)
        hip = _hip()
        err, device = hip.hipGetDevice()
        assert not err, err
        return int(device)

    def raw_stream(self) -> int:
        """A stream made with the binding itself (a framework's stream, to eventapi)."""
        if self.kind == "cuda":
            from cuda.bindings import driver

            err, stream = driver.cuStreamCreate(1)
        else:
            err, stream = _hip().hipStreamCreateWithFlags(1)
        assert not err, err
        return int(stream)

    def destroy_raw_stream(self, handle: int) -> None:
        if self.kind == "cuda":
            from cuda.bindings import driver

            err = driver.cuStreamDestroy(driver.CUstream(handle))[0]
        else:
            err = _hip().hipStreamDestroy(handle)[0]
        assert not err, err

    def begin_capture(self, stream: Stream) -> None:
        begin_capture(self.kind, stream.raw)

    def end_capture(self, stream: Stream) -> None:
        end_capture(self.kind, stream.raw)


class CudaStreamObject:
    """A framework's stream as eventapi sees it: only the ``__cuda_stream__`` protocol."""

    def __init__(self, handle: int, *, as_attribute: bool = False) -> None:
        self.handle = handle
        if as_attribute:
            self.__dict__["__cuda_stream__"] = (0, handle)

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> DriverName:
    name: DriverName = request.param
    return name


def _work_on_device_0(kind: DriverName) -> None:
    """Make this thread work on device 0 through the process's own backend object, as a program
    does before it builds and drops objects of its own. That object keeps device 0's primary
    context retained, and this thread's current context is it: a collected object's release of
    its own reference is never the last, and never leaves a released context current here."""
    api = driver_backend(kind)
    api.stream_destroy(api.stream_create_non_blocking())


def driver_backend(name: str) -> Api:
    """``eventapi.backend(name)``, checked to be a cuda or hip backend object."""
    obj = eventapi.backend(name)
    assert name.split(":", maxsplit=1)[0] == obj.BACKEND
    return cast("Api", obj)


@pytest.fixture
def emu(kind: DriverName) -> Iterator[EmulatedDriver]:
    """The emulated driver, loaded; the test fails if it leaves events or streams live."""
    driver = load(kind)
    before = driver.live_handles()
    yield driver
    driver.clear_faults()
    after = driver.live_handles()
    assert (after.events, after.streams) == (before.events, before.streams), "driver leak"
    # A stream destroyed with work queued returns at once (as CUDA's does): a host function a
    # test left behind that work runs when the driver's thread gets to it.
    assert settles(lambda: pending_host_funcs() == 0), "a launched host function never ran"


@pytest.fixture
def spelled(kind: DriverName) -> Spelling:
    return Spelling(kind)


@pytest.fixture
def api(kind: DriverName, emu: EmulatedDriver) -> Iterator[Api]:
    """The backend for device 0, as ``eventapi.backend`` returns it."""
    backend = driver_backend(kind)
    yield backend
    assert backend.live_handles() == (0, 0), "the test leaked backend handles"


@pytest.fixture
def stream(api: Api) -> Iterator[Stream]:
    made = api.stream_create_non_blocking()
    yield made
    api.stream_destroy(made)


def _held(api: Api, stream: object) -> threading.Event:
    """Hold ``stream`` with a host function until the returned gate is set."""
    gate = threading.Event()
    api.stream_launch_host_func(stream, lambda: gate.wait(JOIN_S))
    return gate


# -- threads, contexts and devices ------------------------------------------------------------


@pytest.mark.parametrize("device", [0, 1], ids=["device-0", "device-1"])
def test_fence_recorded_here_is_waited_on_a_thread_that_never_called_the_driver(
    kind: DriverName, emu: EmulatedDriver, spelled: Spelling, device: int
) -> None:
    # Device 1 matters for hip, whose backend never sets a thread's current device: the
    # waiting thread's device stays 0 while it waits on an event of device 1.
    api = driver_backend(f"{kind}:{device}")
    stream = api.stream_create_non_blocking()
    gate = _held(api, stream)
    ran: list[int] = []
    api.stream_launch_host_func(stream, lambda: ran.append(time.perf_counter_ns()))
    fence = EventFence[Any, Any].record(api, stream)

    def wait_then_ask_the_device() -> int:
        fence.wait()
        return spelled.current_device()

    waiter = Waiter(wait_then_ask_the_device)
    try:
        assert not fence.reached()
    finally:
        _, (returned,) = release_and_join(gate, [waiter])
        fence.close()
        api.stream_destroy(stream)
    assert ran[0] <= returned, "the wait returned before the work ahead of the fence ran"
    # CUDA gives a thread without a context the backend's; HIP leaves the thread on device 0.
    assert waiter.value == (device if kind == "cuda" else 0)
    assert api.live_handles() == (0, 0)


# How long the stream stays held once the wait is inside the driver's wait, in the test below:
# a spinning wait looks at the event at least once (it is unfinished when the wait begins) and
# over and over meanwhile, a sleeping one never. The hold is not what the test rests on.
BUSY_S = 0.01


@pytest.mark.parametrize("main", [True, False], ids=["main-thread", "other-thread"])
def test_a_long_fence_wait_sleeps_instead_of_spinning(
    api: Api, stream: Stream, emu: EmulatedDriver, main: bool
) -> None:
    """A thread waiting on a fence sleeps in the driver, on the main thread or another.

    The emulated drivers spin in a default event's synchronize, as CUDA and HIP document; the
    backends create blocking-sync events, whose waiters sleep. The emulator counts a spinning
    wait's looks at unfinished work (``emu_spin_looks``): a wait that sleeps makes none, however
    long it is held and however loaded the machine, where its CPU share would depend on both.
    The stream is released only once the wait is inside the driver's wait (``emu_host_waits``),
    so a wait that spun would be seen. The main thread's wait runs the driver's wait on a
    helper thread.
    """
    gate = _held(api, stream)
    fence = EventFence[Any, Any].record(api, stream)
    looks, host_waits = emu.lib.emu_spin_looks, emu.lib.emu_host_waits
    looks.restype = host_waits.restype = ctypes.c_long
    in_the_driver: list[bool] = []

    def release() -> None:
        # A wait that never gets there (one that spins on queries in Python) is released only
        # after JOIN_S, and fails below.
        deadline = time.monotonic() + JOIN_S
        while host_waits() == 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        in_the_driver.append(host_waits() == 1)
        time.sleep(BUSY_S)  # the device's work, not synchronization
        gate.set()

    releaser = threading.Thread(target=release, daemon=True)
    try:
        before = looks()
        releaser.start()
        if main:
            fence.wait()
        else:
            Waiter(fence.wait).result()
        looked = looks() - before
    finally:
        gate.set()
        if releaser.is_alive():
            releaser.join(JOIN_S)
        fence.close()
    assert in_the_driver == [True], "the wait never reached the driver's wait"
    assert looked == 0, f"the wait spun in the driver: {looked} looks at the held stream"


@pytest.mark.parametrize("thread_works_on_device_0", [False, True], ids=["fresh", "on-0"])
def test_a_device_index_creates_on_that_device_from_any_thread(
    api: Api,
    stream: Stream,
    kind: DriverName,
    spelled: Spelling,
    thread_works_on_device_0: bool,
) -> None:
    second = driver_backend(f"{kind}:1")
    assert second is not api

    def on_a_new_thread() -> tuple[int, int]:
        if thread_works_on_device_0:
            api.event_destroy(api.event_create())  # device 0 becomes (or stays) current
        own_stream = second.stream_create_non_blocking()
        event = second.event_create()
        try:
            second.event_record(event, own_stream)  # one device: accepted
            second.event_wait(event)
            with pytest.raises(DriverError) as refused:
                # Device 0's stream, as a raw handle: the driver itself refuses the pairing,
                # which proves the event was created on device 1.
                second.event_record(event, int(stream.raw))
            return refused.value.code, spelled.current_device()
        finally:
            second.event_destroy(event)
            second.stream_destroy(own_stream)

    waiter = Waiter(on_a_new_thread)
    waiter.result()
    code, current = cast("tuple[int, int]", waiter.value)
    assert code == 400
    # A thread working on device 0 keeps it. A fresh thread: CUDA gives a thread without a
    # context the backend's; HIP leaves the thread's device alone (it starts as device 0).
    fresh_cuda = kind == "cuda" and not thread_works_on_device_0
    assert current == (1 if fresh_cuda else 0)
    assert second.live_handles() == (0, 0)


def test_an_interrupt_as_a_create_switches_device_leaves_the_thread_on_its_own(
    api: Api, kind: DriverName, spelled: Spelling, emu: EmulatedDriver
) -> None:
    # This thread works on device 0; a create on device 1 switches to it for the call (CUDA
    # pushes its context, HIP sets the device) and back in the same C call, so a Ctrl-C that
    # lands inside the create is raised once the thread is back on its own device.
    second = driver_backend(f"{kind}:1")
    api.event_destroy(api.event_create())
    assert spelled.current_device() == 0
    create = spelled.name("EventCreateWithFlags" if kind == "hip" else "EventCreate")
    emu.signal_calls(create, signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        second.event_create()
    assert spelled.current_device() == 0
    assert second.live_handles() == (0, 0)


def test_hip_with_one_device_creates_without_asking_for_the_current_device() -> None:
    from eventapi_hip import HipBackend

    hip_emu = load("hip")
    hip_emu.set_device_count(1)
    try:
        only = HipBackend(0)
        asked = hip_emu.calls("hipGetDevice")
        stream = only.stream_create_non_blocking()
        event = only.event_create()
        only.event_record(event, stream)
        only.event_wait(event)
        assert hip_emu.calls("hipGetDevice") == asked
        only.event_destroy(event)
        only.stream_destroy(stream)
        assert only.live_handles() == (0, 0)
    finally:
        hip_emu.set_device_count(2)
    two = HipBackend(0)
    asked = hip_emu.calls("hipGetDevice")
    two.event_destroy(two.event_create())
    assert hip_emu.calls("hipGetDevice") == asked + 1  # with two, a create asks


def test_the_primary_context_is_released_when_the_backend_object_is_collected() -> None:
    from eventapi_cuda import CudaBackend

    emu = load("cuda")
    _work_on_device_0("cuda")
    # Objects of earlier tests left in reference cycles release their contexts when a collection
    # finds them: let that happen before counting, so the count below is this object's alone.
    gc.collect()
    released = emu.calls("cuDevicePrimaryCtxRelease")
    backend = CudaBackend(1)
    event = backend.event_create()
    backend.event_destroy(event)
    del backend, event
    gc.collect()
    assert emu.calls("cuDevicePrimaryCtxRelease") == released + 1


def test_a_device_out_of_range_is_unavailable_and_says_how_many_there_are(
    emu: EmulatedDriver, kind: DriverName
) -> None:
    with pytest.raises(eventapi.BackendUnavailableError, match="2 visible"):
        eventapi.backend(f"{kind}:7")


# -- spare fence events -----------------------------------------------------------------------


def _driver_calls(emu: EmulatedDriver, spelled: Spelling, *stems: str) -> list[int]:
    return [emu.calls(spelled.name(stem)) for stem in stems]


def _driver_events(emu: EmulatedDriver) -> int:
    """The driver's live events, with the spares every backend object keeps: the baseline.

    Collected first, so that no object of an earlier test lets its spares go later. Not 0
    after a test whose injected destroy failure left an event in the driver for good.
    """
    gc.collect()
    return emu.live_handles(spares=True).events


def _new_backend(kind: DriverName) -> Api:
    """A backend object of its own for device 0, whose spares go when it is collected."""
    _work_on_device_0(kind)
    if kind == "cuda":
        from eventapi_cuda import CudaBackend

        return CudaBackend(0)
    from eventapi_hip import HipBackend

    return cast("Api", HipBackend(0))


def test_a_closed_fences_driver_event_serves_the_next_fence(
    kind: DriverName, emu: EmulatedDriver, spelled: Spelling
) -> None:
    create = "EventCreateWithFlags" if spelled.kind == "hip" else "EventCreate"
    api = _new_backend(kind)
    base = _driver_events(emu)
    held = emu.live_handles().events
    stream = api.stream_create_non_blocking()
    first = EventFence.record(api, stream)
    first.wait()
    first.close()
    assert emu.live_handles(spares=True).events == base + 1  # kept, not destroyed
    before = _driver_calls(emu, spelled, create, "EventDestroy")
    second = EventFence.record(api, stream)
    assert _driver_calls(emu, spelled, create, "EventDestroy") == before  # no create, no destroy
    assert second.event is not first.event
    assert emu.live_handles(spares=True).events == base + 1  # the one driver event, recorded again
    with pytest.raises(EventStateError, match="already destroyed"):
        api.event_query(first.event)  # the closed fence's wrapper stays refused
    second.wait()
    assert second.reached()
    second.close()
    assert api.live_handles().events == 0

    # At most SPARES are kept; the rest are destroyed as before.
    fences = [EventFence.record(api, stream) for _ in range(SPARES + 3)]
    for fence in fences:
        fence.wait()
        fence.close()
    api.stream_destroy(stream)
    assert emu.live_handles(spares=True).events == base + SPARES
    assert emu.live_handles().events == held  # the spares are the backend's, not a leak
    destroys = emu.calls(spelled.name("EventDestroy"))
    del api, fences, fence, first, second, stream
    gc.collect()  # the object goes, and its spares with it
    assert emu.calls(spelled.name("EventDestroy")) == destroys + SPARES
    assert emu.live_handles(spares=True).events == base


def test_only_fence_events_are_kept_and_never_one_a_record_failed_on(
    kind: DriverName, emu: EmulatedDriver, spelled: Spelling
) -> None:
    base = _driver_events(emu)
    api = _new_backend(kind)
    stream = api.stream_create_non_blocking()
    api.event_destroy(api.event_create())  # a user's event goes back to the driver
    assert emu.live_handles(spares=True).events == base

    fence = EventFence.record(api, stream)
    fence.close()
    emu.inject_fault(spelled.name("EventRecord"), code=400)
    with pytest.raises(DriverError):
        EventFence.record(api, stream)  # took the spare; the failed record destroyed it
    assert emu.live_handles(spares=True).events == base
    assert api.live_handles().events == 0
    api.stream_destroy(stream)


def test_a_fence_closed_before_it_was_seen_reached_goes_back_to_the_driver(
    kind: DriverName, emu: EmulatedDriver, spelled: Spelling
) -> None:
    # HIP leaves re-recording an event whose record is outstanding undefined: only an event
    # seen reached (a wait returned, a query said so) is kept for the next fence.
    base = _driver_events(emu)
    api = _new_backend(kind)
    stream = api.stream_create_non_blocking()
    gate = _held(api, stream)
    try:
        unseen = EventFence.record(api, stream)
        destroys = emu.calls(spelled.name("EventDestroy"))
        unseen.close()
        assert emu.calls(spelled.name("EventDestroy")) == destroys + 1
        queried = EventFence.record(api, stream)
    finally:
        gate.set()
    while not queried.reached():  # the gate is open: the stream reaches it
        pass
    queried.close()
    api.stream_destroy(stream)
    assert emu.live_handles(spares=True).events == base + 1  # seen reached by a query: kept


def test_a_fence_closed_during_a_wait_keeps_its_event_once_the_wait_returns(
    kind: DriverName, emu: EmulatedDriver, spelled: Spelling
) -> None:
    base = _driver_events(emu)
    api = _new_backend(kind)
    stream = api.stream_create_non_blocking()
    gate = _held(api, stream)
    fence = EventFence.record(api, stream)
    sync = spelled.name("EventSynchronize")
    entered = emu.calls(sync)
    waiter = Waiter(fence.wait)
    try:
        while emu.calls(sync) == entered:  # the waiter is inside the driver's wait
            waiter.thread.join(0.001)
        destroys = emu.calls(spelled.name("EventDestroy"))
        fence.close()  # deferred: the waiter still uses the event
    finally:
        release_and_join(gate, [waiter])
    assert emu.calls(spelled.name("EventDestroy")) == destroys  # the last one out kept it
    api.stream_destroy(stream)
    assert emu.live_handles(spares=True).events == base + 1
    assert api.live_handles().events == 0


def test_a_backend_collected_in_a_reference_cycle_destroys_its_spares(
    kind: DriverName, caplog: pytest.LogCaptureFixture
) -> None:
    # Every handle holds its backend object, so the object goes after the last of them even
    # when a cycle holds it: the spares are destroyed, and before their context goes.
    emu = load(kind)
    _work_on_device_0(kind)
    if kind == "cuda":
        from eventapi_cuda import CudaBackend as Backend
    else:
        from eventapi_hip import HipBackend as Backend  # type: ignore[assignment]
    before = _driver_events(emu)
    cycle: dict[str, Any] = {"api": Backend(0)}
    cycle["self"] = cycle
    stream = cycle["api"].stream_create_non_blocking()
    closed = [EventFence.record(cycle["api"], stream) for _ in range(2)]
    for fence in closed:
        fence.wait()
        fence.close()
    cycle["api"].stream_destroy(stream)
    assert emu.live_handles(spares=True).events == before + 2
    del cycle, closed, fence, stream
    with caplog.at_level(logging.DEBUG, logger="eventapi"):
        gc.collect()
    assert emu.live_handles(spares=True).events == before
    assert [r.getMessage() for r in caplog.records] == []


def test_a_collected_backend_object_destroys_its_spare_events(kind: DriverName) -> None:
    emu = load(kind)
    _work_on_device_0(kind)
    if kind == "cuda":
        from eventapi_cuda import CudaBackend as Backend
    else:
        from eventapi_hip import HipBackend as Backend  # type: ignore[assignment]
    before = _driver_events(emu)
    backend = Backend(0)
    stream = backend.stream_create_non_blocking()
    for _ in range(3):
        fences = [EventFence.record(backend, stream) for _ in range(2)]
        for fence in fences:
            fence.wait()
            fence.close()
    backend.stream_destroy(stream)
    assert emu.live_handles(spares=True).events == before + 2
    del backend, stream, fences, fence
    gc.collect()
    assert emu.live_handles(spares=True).events == before


# -- foreign streams --------------------------------------------------------------------------


def test_the_default_stream_as_int_zero_is_used_and_never_destroyed(
    api: Api, emu: EmulatedDriver, spelled: Spelling
) -> None:
    destroyed = emu.calls(spelled.name("StreamDestroy"))
    fence = EventFence[Any, Any].record(api, 0)
    fence.wait()
    fence.close()
    adopted = api.adopt_stream(0)
    with pytest.raises(EventStateError, match="did not create it"):
        api.stream_destroy(adopted)
    del adopted
    gc.collect()
    assert emu.calls(spelled.name("StreamDestroy")) == destroyed


@pytest.mark.parametrize("as_attribute", [False, True], ids=["method", "attribute"])
def test_a_framework_stream_is_used_through_its_protocol_and_never_destroyed(
    api: Api, emu: EmulatedDriver, spelled: Spelling, as_attribute: bool
) -> None:
    handle = spelled.raw_stream()
    try:
        framework_stream = CudaStreamObject(handle, as_attribute=as_attribute)
        destroyed = emu.calls(spelled.name("StreamDestroy"))
        live = emu.live_handles().streams
        gate = _held(api, framework_stream)
        fence = EventFence[Any, Any].record(api, framework_stream)
        assert not fence.reached(), "the fence went into another stream than the held one"
        gate.set()
        fence.wait()
        fence.close()
        api.stream_synchronize(framework_stream)
        adopted = api.adopt_stream(framework_stream)
        assert not adopted.owned
        assert int(adopted.raw) == handle
        with pytest.raises(EventStateError):
            api.stream_destroy(adopted)
        del adopted
        gc.collect()
        assert emu.calls(spelled.name("StreamDestroy")) == destroyed
        assert emu.live_handles().streams == live
    finally:
        spelled.destroy_raw_stream(handle)


def test_the_bindings_own_stream_object_is_adopted(api: Api, spelled: Spelling) -> None:
    handle = spelled.raw_stream()
    try:
        if spelled.kind == "cuda":
            from cuda.bindings import driver

            native: object = driver.CUstream(handle)
        else:
            native = _hip().ihipStream_t.fromObj(handle)
        fence = EventFence[Any, Any].record(api, native)
        fence.wait()
        fence.close()
    finally:
        spelled.destroy_raw_stream(handle)


def test_cudas_per_thread_default_stream_is_accepted() -> None:
    load("cuda")
    api = eventapi.backend("cuda")
    fence = EventFence[Any, Any].record(api, 2)
    fence.wait()
    fence.close()


class _BrokenProtocol:
    def __cuda_stream__(self) -> tuple[int, int]:
        raise RuntimeError("stream was closed")


@pytest.mark.parametrize(
    ("stream", "match"),
    [
        (-1, "not a stream"),
        (True, "not a stream"),
        ("0", "not a stream"),
        (_BrokenProtocol(), "stream was closed"),
    ],
    ids=["negative", "bool", "str", "protocol-raises"],
)
def test_what_is_not_a_stream_is_refused_before_the_driver(
    api: Api,
    emu: EmulatedDriver,
    spelled: Spelling,
    stream: object,
    match: str,
) -> None:
    event = api.event_create()
    recorded = emu.calls(spelled.name("EventRecord"))
    try:
        with pytest.raises(EventStateError, match=match):
            api.event_record(event, stream)
        assert emu.calls(spelled.name("EventRecord")) == recorded
    finally:
        api.event_destroy(event)


def test_a_protocol_with_another_version_is_refused(
    api: Api,
) -> None:
    class FutureStream:
        def __cuda_stream__(self) -> tuple[int, int]:
            return (1, 0)

    with pytest.raises(EventStateError, match="not a stream this backend can use"):
        api.adopt_stream(FutureStream())


# -- errors -----------------------------------------------------------------------------------


def test_a_driver_failure_carries_the_drivers_own_name_and_text(
    api: Api, stream: Stream, emu: EmulatedDriver, spelled: Spelling
) -> None:
    event = api.event_create()
    call = spelled.name("EventRecord")
    emu.inject_fault(call, code=400)
    try:
        with pytest.raises(DriverError) as caught:
            api.event_record(event, stream)
    finally:
        api.event_destroy(event)
    error = caught.value
    assert str(error) == (
        f"{spelled.kind}: {call} failed: {spelled.invalid_handle} (400): invalid resource handle"
    )
    assert (error.backend, error.call, error.code, error.not_ready) == (
        spelled.kind,
        call,
        400,
        False,
    )


def test_a_batch_of_readings_is_what_one_reading_at_a_time_returns(
    api: Api, stream: Stream, emu: EmulatedDriver, spelled: Spelling
) -> None:
    # A collect reads every window through the backend's batched call; it must agree with
    # the single reading, clamp as it does, and fail as it does.
    events = [api.event_create() for _ in range(5)]
    for event in events:
        api.event_record(event, stream)
    api.event_wait(events[-1])
    starts, ends = events[:2] + events[:2], events[2:4] + [events[4]] * 2
    one_by_one = [api.event_elapsed(start, end) for start, end in zip(starts, ends, strict=True)]
    call = spelled.name("EventElapsedTime")
    calls = emu.calls(call)
    assert api.event_elapsed_many(starts, ends) == one_by_one
    assert emu.calls(call) - calls == 4  # one driver call per reading, no more

    emu.set_negative_elapsed(1)  # as some drivers read events stamped together
    readings = api.event_elapsed_many(starts, ends)
    assert (readings[0], readings[1:]) == (0, one_by_one[1:])

    emu.inject_fault(call, code=400)
    with pytest.raises(DriverError) as caught:
        api.event_elapsed_many(starts, ends)
    assert (caught.value.call, caught.value.code) == (call, 400)
    assert api.event_elapsed_many(starts, ends) == one_by_one  # nothing stuck
    for event in events:
        api.event_destroy(event)


def test_error_names_are_asked_of_the_driver_once_per_code(
    api: Api, emu: EmulatedDriver, spelled: Spelling
) -> None:
    call = spelled.name("EventCreateWithFlags" if spelled.kind == "hip" else "EventCreate")
    names = spelled.name("GetErrorName")
    emu.inject_fault(call, code=2, count=2)  # out of memory, in both drivers
    with pytest.raises(DriverError) as first:
        api.event_create()
    asked = emu.calls(names)
    with pytest.raises(DriverError) as second:
        api.event_create()
    assert emu.calls(names) == asked
    assert str(first.value) == str(second.value)
    assert first.value.message != ""


def test_not_ready_from_a_wait_is_flagged(
    api: Api, stream: Stream, emu: EmulatedDriver, spelled: Spelling
) -> None:
    event = api.event_create()
    try:
        # Held, so that the wait outlasts its query spin and calls the synchronize.
        gate = _held(api, stream)
        api.event_record(event, stream)
        emu.inject_fault(spelled.name("EventSynchronize"), code=600)
        with pytest.raises(DriverError) as caught:
            api.event_wait(event)
        assert caught.value.not_ready
        gate.set()
        api.event_wait(event)  # the fault was for one call
    finally:
        api.event_destroy(event)


def test_a_wait_on_work_already_done_returns_from_the_query_spin(
    api: Api, stream: Stream, emu: EmulatedDriver, spelled: Spelling
) -> None:
    """A short wait never sleeps in the driver: it wakes as fast as the driver's spin would."""
    event = api.event_create()
    try:
        api.event_record(event, stream)
        api.stream_synchronize(stream)
        synchronized = emu.calls(spelled.name("EventSynchronize"))
        queried = emu.calls(spelled.name("EventQuery"))
        api.event_wait(event)
        assert emu.calls(spelled.name("EventSynchronize")) == synchronized
        assert emu.calls(spelled.name("EventQuery")) == queried + 1
    finally:
        api.event_destroy(event)


def test_closed_foreign_and_unrecorded_handles_never_reach_the_driver(
    api: Api, stream: Stream, emu: EmulatedDriver, spelled: Spelling
) -> None:
    stems = ("EventRecord", "EventSynchronize", "EventQuery", "EventElapsedTime", "EventDestroy")
    other = driver_backend(f"{spelled.kind}:1")
    foreign = other.event_create()
    never_recorded = api.event_create()
    closed = api.event_create()
    api.event_record(closed, stream)
    api.event_destroy(closed)
    dead_stream = api.stream_create_non_blocking()
    api.stream_destroy(dead_stream)
    before = {stem: emu.calls(spelled.name(stem)) for stem in stems}
    try:
        attempts: list[Callable[[], object]] = [
            lambda: api.event_record(closed, stream),
            lambda: api.event_wait(closed),
            lambda: api.event_query(closed),
            lambda: api.event_elapsed(closed, closed),
            lambda: api.event_record(foreign, stream),
            lambda: api.event_wait(foreign),
            lambda: api.event_destroy(foreign),
            lambda: api.event_wait(never_recorded),
            lambda: api.event_elapsed(never_recorded, never_recorded),
            lambda: api.event_record(never_recorded, dead_stream),
        ]
        for attempt in attempts:
            with pytest.raises(EventStateError):
                attempt()
        api.event_destroy(closed)  # idempotent, and no second destroy reaches the driver
        assert {stem: emu.calls(spelled.name(stem)) for stem in stems} == before
    finally:
        api.event_destroy(never_recorded)
        other.event_destroy(foreign)


# -- timing, host functions, capture ----------------------------------------------------------


def test_elapsed_is_integer_nanoseconds_covering_the_held_work(api: Api, stream: Stream) -> None:
    start, end = api.event_create(), api.event_create()
    stamps: list[int] = []
    gate = threading.Event()

    def held() -> None:
        stamps.append(time.perf_counter_ns())
        gate.wait(JOIN_S)
        stamps.append(time.perf_counter_ns())

    try:
        api.event_record(start, stream)
        api.stream_launch_host_func(stream, held)
        api.event_record(end, stream)
        with pytest.raises(DriverError) as early:
            api.event_elapsed(start, end)
        assert early.value.not_ready
        gate.set()
        api.event_wait(end)
        elapsed = api.event_elapsed(start, end)
    finally:
        api.event_destroy(start)
        api.event_destroy(end)
    assert type(elapsed) is int
    # The emulated driver stamps with the clock perf_counter_ns reads; the reading travels as
    # float32 milliseconds, good to well under 1 us at these durations.
    assert elapsed >= stamps[1] - stamps[0] - 1_000


def test_a_negative_reading_is_clamped_to_zero(
    api: Api, stream: Stream, emu: EmulatedDriver
) -> None:
    start, end = api.event_create(), api.event_create()
    try:
        api.event_record(start, stream)
        api.event_record(end, stream)
        api.event_wait(end)
        emu.set_negative_elapsed(1)
        assert api.event_elapsed(start, end) == 0
    finally:
        emu.set_negative_elapsed(0)
        api.event_destroy(start)
        api.event_destroy(end)


def test_host_functions_run_in_stream_order_and_an_exception_is_only_logged(
    api: Api, stream: Stream, caplog: pytest.LogCaptureFixture
) -> None:
    order: list[str] = []

    def fails() -> None:
        order.append("fails")
        raise ValueError("boom")

    api.stream_launch_host_func(stream, lambda: order.append("first"))
    api.stream_launch_host_func(stream, fails)
    api.stream_launch_host_func(stream, lambda: order.append("after"))
    with caplog.at_level(logging.ERROR, logger="eventapi"):
        # The wait blocks this thread inside the driver while the host functions need the GIL:
        # it returns only because the binding releases the GIL while it waits.
        api.stream_synchronize(stream)
    assert order == ["first", "fails", "after"]
    assert any("boom" in (r.exc_text or "") for r in caplog.records)
    assert pending_host_funcs() == 0


def test_a_failed_launch_does_not_keep_the_callable(
    api: Api, stream: Stream, emu: EmulatedDriver, spelled: Spelling
) -> None:
    emu.inject_fault(spelled.name("LaunchHostFunc"), code=400)
    with pytest.raises(DriverError):
        api.stream_launch_host_func(stream, lambda: None)
    assert pending_host_funcs() == 0


def test_a_capturing_stream_is_reported_and_gets_no_fence(
    api: Api, stream: Stream, spelled: Spelling
) -> None:
    assert not api.stream_is_capturing(stream)
    spelled.begin_capture(stream)
    try:
        assert api.stream_is_capturing(stream)
        with pytest.raises(CaptureError):
            EventFence[Any, Any].record(api, stream)
    finally:
        spelled.end_capture(stream)
    assert not api.stream_is_capturing(stream)


def test_a_host_function_is_refused_on_a_capturing_stream_and_nothing_is_held(
    api: Api, stream: Stream, emu: EmulatedDriver, spelled: Spelling
) -> None:
    # Captured, it would run on the graph's first replay only (and, never launched, be held
    # for good); refused, it reaches neither the driver nor the trampoline's table.
    launches = emu.calls(spelled.name("LaunchHostFunc"))
    spelled.begin_capture(stream)
    try:
        with pytest.raises(CaptureError, match="capturing a graph"):
            api.stream_launch_host_func(stream, lambda: None)
    finally:
        spelled.end_capture(stream)
    assert emu.calls(spelled.name("LaunchHostFunc")) == launches
    assert pending_host_funcs() == 0


def test_a_window_during_a_capture_is_skipped_and_nothing_is_recorded_into_the_capture(
    api: Api,
    stream: Stream,
    emu: EmulatedDriver,
    spelled: Spelling,
) -> None:
    # The stop checks the stream again: a record into a capture would become part of the
    # user's graph. A window opens and stops with the check and the record in one backend
    # call (made in C, _native.FastPath), which must still check first: the driver's own
    # counts show each edge's check, and no record into the capture.
    with EventProfiler[Any, Any](api, stream) as prof:
        with prof.window("before"):
            pass
        assert [s.name for s in prof.collect()] == ["before"]  # the pool now has free events
        checks = emu.calls(spelled.name("StreamIsCapturing"))
        straddles = prof.start("straddles")
        assert emu.calls(spelled.name("StreamIsCapturing")) == checks + 1
        spelled.begin_capture(stream)
        try:
            records = emu.calls(spelled.name("EventRecord"))
            straddles.stop()
            with prof.window("inside") as inside:
                pass
            assert emu.calls(spelled.name("EventRecord")) == records
            # straddles' stop and inside's open, each checked; inside's stop does nothing.
            assert emu.calls(spelled.name("StreamIsCapturing")) == checks + 3
        finally:
            spelled.end_capture(stream)
        assert straddles.skipped
        assert inside.skipped
        assert prof.skipped == 2
        with prof.window("after"):
            pass
        assert [s.name for s in prof.collect()] == ["after"]


def test_a_window_whose_check_or_record_fails_raises_naming_that_call(
    api: Api, stream: Stream, emu: EmulatedDriver, spelled: Spelling
) -> None:
    with EventProfiler[Any, Any](api, stream) as prof:
        with prof.window("warm"):
            pass
        prof.collect()  # the pool has free events: a window opens with one backend call
        records = emu.calls(spelled.name("EventRecord"))
        emu.inject_fault(spelled.name("StreamIsCapturing"), code=400)
        with pytest.raises(DriverError) as check_failed:
            prof.start("check fails")
        assert check_failed.value.call == spelled.name("StreamIsCapturing")
        # The check is made from C on both drivers, so hip's own code comes back too (through
        # hip-python's binding it read as hipErrorUnknown, 999).
        assert check_failed.value.code == 400
        assert emu.calls(spelled.name("EventRecord")) == records  # nothing recorded
        emu.inject_fault(spelled.name("EventRecord"), code=400)
        with pytest.raises(DriverError) as record_failed:
            prof.start("record fails")
        assert (record_failed.value.call, record_failed.value.code) == (
            spelled.name("EventRecord"),
            400,
        )
        with prof.window("after"):
            pass
        assert [s.name for s in prof.collect()] == ["after"]


def test_a_fence_from_a_spare_is_made_and_given_back_in_c_with_the_counts_exact(
    kind: DriverName, emu: EmulatedDriver, spelled: Spelling
) -> None:
    # event_record_new takes a spare driver event and event_destroy gives it back: no create or
    # destroy reaches the driver, and live_handles() counts the open event and only it.
    calls = ("EventCreate" if spelled.kind == "cuda" else "EventCreateWithFlags", "EventDestroy")
    api = _new_backend(kind)
    stream = api.stream_create_non_blocking()
    base = _driver_events(emu)
    fence = EventFence.record(api, stream)
    fence.wait()
    fence.close()  # a spare now
    spares = emu.live_handles(spares=True).events
    assert spares == base + 1
    before = _driver_calls(emu, spelled, *calls)
    for _ in range(3):
        event = api.event_record_new(stream)
        assert event is not None
        assert type(event).__name__ == "Event"
        assert (event.recorded, event.closed) == (True, False)
        assert api.live_handles().events == 1
        api.event_wait(event)
        assert api.event_query(event) is True
        api.event_destroy(event)
        assert event.closed
        assert api.live_handles().events == 0
        api.event_destroy(event)  # a second destroy is a no-op
        with pytest.raises(EventStateError, match="already destroyed"):
            api.event_query(event)
    assert _driver_calls(emu, spelled, *calls) == before
    assert emu.live_handles(spares=True).events == spares

    # Capturing: None, and the spare is back as it was, nothing open or counted.
    records = emu.calls(spelled.name("EventRecord"))
    spelled.begin_capture(stream)
    try:
        assert api.event_record_new(stream) is None
    finally:
        spelled.end_capture(stream)
    assert emu.calls(spelled.name("EventRecord")) == records
    assert api.live_handles().events == 0
    assert emu.live_handles(spares=True).events == spares
    assert _driver_calls(emu, spelled, *calls) == before

    # An event destroyed before it was seen reached goes back to the driver: HIP leaves
    # re-recording it undefined.
    gate = _held(api, stream)
    try:
        unseen = api.event_record_new(stream)
        assert unseen is not None
        destroys = emu.calls(spelled.name("EventDestroy"))
        api.event_destroy(unseen)
        assert emu.calls(spelled.name("EventDestroy")) == destroys + 1
    finally:
        gate.set()
    api.stream_destroy(stream)
    assert api.live_handles() == (0, 0)
    assert emu.live_handles(spares=True).events == spares - 1


@pytest.mark.parametrize("call", ["StreamIsCapturing", "EventRecord"])
def test_a_spares_failed_check_or_record_raises_and_sends_it_to_the_driver(
    kind: DriverName, emu: EmulatedDriver, spelled: Spelling, call: str
) -> None:
    api = _new_backend(kind)
    stream = api.stream_create_non_blocking()
    fence = EventFence.record(api, stream)
    fence.wait()
    fence.close()
    spares = emu.live_handles(spares=True).events
    emu.inject_fault(spelled.name(call), code=400)
    with pytest.raises(DriverError) as failed:
        api.event_record_new(stream)
    assert (failed.value.call, failed.value.code) == (spelled.name(call), 400)
    assert api.live_handles().events == 0
    assert emu.live_handles(spares=True).events == spares - 1  # destroyed, not kept
    again = EventFence.record(api, stream)  # a create: no spare is left
    again.wait()
    again.close()
    api.stream_destroy(stream)
    assert api.live_handles() == (0, 0)


# -- two devices ----------------------------------------------------------------------------------


def test_another_devices_event_is_used_where_the_driver_allows_it(
    api: Api, stream: Stream, emu: EmulatedDriver, spelled: Spelling
) -> None:
    other = driver_backend(f"{spelled.kind}:1")
    assert (api.device, other.device) == (0, 1)
    other_stream = other.stream_create_non_blocking()
    gate = _held(other, other_stream)
    theirs, ours = other.event_create(), api.event_create()
    try:
        other.event_record(theirs, other_stream)
        api.stream_wait_event(stream, theirs)  # device 0's stream waits on device 1's work
        api.event_record(ours, stream)
        assert not api.event_query(theirs)  # any device's event, queried through device 0
        assert not api.event_query(ours)  # held behind device 1's work
        before = emu.calls(spelled.name("EventRecord")), emu.calls(spelled.name("EventElapsedTime"))
        with pytest.raises(EventStateError, match="another device"):
            api.event_record(theirs, stream)
        with pytest.raises(EventStateError, match="another device"):
            api.event_elapsed(ours, theirs)
        assert (
            emu.calls(spelled.name("EventRecord")),
            emu.calls(spelled.name("EventElapsedTime")),
        ) == before
        # An object built directly for device 0 owns its own handles, as the kit expects.
        with pytest.raises(EventStateError, match="not an event of this"):
            type(api)(0).event_wait(ours)
        gate.set()
        api.event_wait(theirs)
        api.event_wait(ours)
        assert api.event_query(theirs)
    finally:
        gate.set()
        api.event_destroy(ours)
        other.event_destroy(theirs)
        other.stream_destroy(other_stream)
    assert other.live_handles() == (0, 0)


# -- the fast path's common case runs no Python ------------------------------------------------


def test_the_fast_path_runs_no_python_function_on_its_common_path(kind: DriverName) -> None:
    # A fence's and a window's calls on this object's own, open, recorded handles, on a thread
    # already bound: every check and driver call is C. sys.setprofile reports each Python
    # function that starts running (a callback called from C included) as a "call" event.
    api = _new_backend(kind)
    stream = api.stream_create_non_blocking()
    start, end = api.event_create(), api.event_create()
    fence = EventFence.record(api, stream)
    fence.wait()
    fence.close()  # a spare: the next fence takes it, as every fence after the first does
    seen: list[tuple[str, str]] = []

    def profile(frame: Any, event: str, arg: object) -> None:
        seen.append((event, arg.__name__ if event.startswith("c_") else frame.f_code.co_name))  # type: ignore[attr-defined]

    sys.setprofile(profile)
    adopted = api.adopt_stream(stream)
    made = api.event_record_new(stream)
    opened = api.event_record_unless_capturing(start, stream)
    stopped = api.event_record_unless_capturing(end, stream)
    api.event_wait(end)
    reached = api.event_query(start)
    readings = api.event_elapsed_many([start], [end])
    api.event_destroy(made)  # type: ignore[arg-type]
    sys.setprofile(None)
    assert (adopted is stream, made is not None, opened, stopped, reached) == (True,) * 5
    assert len(readings) == 1
    assert [name for event, name in seen if event == "call"] == []
    assert {name for event, name in seen if event == "c_call"} >= {
        "adopt_stream",
        "event_record_new",
        "event_record_unless_capturing",
        "event_wait",
        "event_query",
        "event_elapsed_many",
        "event_destroy",
    }

    # The instrument sees a callback: a foreign stream is adopted by Python code, on purpose.
    sys.setprofile(profile)
    foreign = api.adopt_stream(0)
    sys.setprofile(None)
    assert ("call", "foreign_stream_handle") in seen
    for event in (start, end):
        api.event_destroy(event)
    del foreign
    api.stream_destroy(stream)
    assert api.live_handles() == (0, 0)
