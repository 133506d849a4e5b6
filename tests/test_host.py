"""The ``host`` backend through its public surface: the protocol, the capabilities, the test aids.

A stream is held with a host function that blocks on a :class:`threading.Event` the test sets;
nothing here uses sleep to order threads.
"""

from __future__ import annotations

import functools
import gc
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from child import run_json
from interrupts import interrupting, on_return_of
from threads import Waiter, release_and_join

from eventapi import (
    CaptureError,
    DriverError,
    EventApi,
    EventStateError,
    SupportsCaptureCheck,
    SupportsEventQuery,
    SupportsHostFunc,
)
from eventapi._protocol import CAPABILITY_METHODS, PROTOCOL_METHODS
from eventapi.driverkit import Event, Stream
from eventapi.host import HostBackend

# Generous bound on any wait that should finish at once: it only decides how long a broken
# build hangs before failing, never whether a working one passes.
HANG_S = 10.0

Call = Callable[[], object]


def hold(host: HostBackend, stream: Stream[Any]) -> threading.Event:
    """Block ``stream`` until the returned gate is set (at most HANG_S: a failure cannot hang)."""
    gate = threading.Event()
    host.stream_launch_host_func(stream, lambda: gate.wait(HANG_S))
    return gate


@pytest.fixture
def gates() -> Iterator[list[threading.Event]]:
    """Gates the test opens; any left shut are opened at teardown so no stream stays held."""
    opened: list[threading.Event] = []
    yield opened
    for gate in opened:
        gate.set()


def stays_unreached(host: HostBackend, event: Event[Any], seconds: float = 0.05) -> bool:
    """True if ``event`` is still unreached after ``seconds``.

    Used only where the event *cannot* be reached while the test holds a gate, to catch a broken
    dependency that would let it through: a working build returns True whatever the timing.
    """
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if host.event_query(event):
            return False
        time.sleep(0.001)
    return not host.event_query(event)


def recorded(host: HostBackend, stream: Stream[Any]) -> Event[Any]:
    event = host.event_create()
    host.event_record(event, stream)
    return event


# -- the protocol -------------------------------------------------------------------------------


def test_conforms_to_the_protocol_and_declares_every_capability(host: HostBackend) -> None:
    api: EventApi[Any, Any] = host
    assert api.BACKEND == "host"
    assert isinstance(host, SupportsEventQuery)
    assert isinstance(host, SupportsCaptureCheck)
    assert isinstance(host, SupportsHostFunc)


def test_every_protocol_call(host: HostBackend) -> None:
    a = host.stream_create_non_blocking()
    b = host.stream_create_non_blocking()
    assert host.live_handles() == (0, 2)
    start, end, other = host.event_create(), host.event_create(), host.event_create()
    assert host.live_handles() == (3, 2)

    before = time.perf_counter_ns()
    host.event_record(start, a)
    host.event_record(end, a)
    host.stream_wait_event(b, end)
    host.event_record(other, b)
    host.event_wait(end)
    host.stream_synchronize(b)
    after = time.perf_counter_ns()

    assert host.event_query(start)
    assert host.event_query(end)
    assert host.event_query(other)
    assert before <= host.stamp_ns(start) <= host.stamp_ns(end) <= host.stamp_ns(other) <= after
    assert host.event_elapsed(start, end) == host.stamp_ns(end) - host.stamp_ns(start)
    assert not host.stream_is_capturing(a)

    for event in (start, end, other):
        host.event_destroy(event)
    host.stream_destroy(a)
    host.stream_destroy(b)
    assert host.live_handles() == (0, 0)


def test_a_negative_reading_is_clamped_to_zero(host: HostBackend, host_stream: Stream[Any]) -> None:
    first, second = recorded(host, host_stream), recorded(host, host_stream)
    host.stream_synchronize(host_stream)
    assert host.stamp_ns(second) > host.stamp_ns(first)
    assert host.event_elapsed(second, first) == 0
    host.event_destroy(first)
    host.event_destroy(second)


def test_an_event_is_unreached_until_the_stream_gets_there(
    host: HostBackend, host_stream: Stream[Any], gates: list[threading.Event]
) -> None:
    start = recorded(host, host_stream)
    gate = hold(host, host_stream)
    gates.append(gate)
    end = recorded(host, host_stream)
    host.event_wait(start)

    assert not host.event_query(end)
    with pytest.raises(DriverError) as info:
        host.event_elapsed(start, end)
    error = info.value
    assert (error.backend, error.call, error.code, error.name) == (
        "host",
        "event_elapsed",
        600,
        "NOT_READY",
    )
    assert error.not_ready
    with pytest.raises(DriverError) as info:
        host.stamp_ns(end)
    assert info.value.not_ready

    released = time.perf_counter_ns()
    gate.set()
    host.event_wait(end)
    assert host.event_query(end)
    assert host.stamp_ns(end) >= released
    host.event_destroy(start)
    host.event_destroy(end)


def test_a_record_on_an_idle_stream_is_reached_at_once(
    host: HostBackend, host_stream: Stream[Any]
) -> None:
    # Nothing queued or running: the stream reaches the record as it is made, with no worker
    # thread to wake, so an anchor's bracket (host time before the record, after the wait)
    # holds no thread wake-up. The stamp lies between two reads of the same clock around it.
    for _ in range(20):
        before = time.perf_counter_ns()
        event = recorded(host, host_stream)
        after = time.perf_counter_ns()
        assert host.event_query(event)
        assert before <= host.stamp_ns(event) <= after
        host.event_destroy(event)
    # Behind queued work, a record still waits its turn.
    gate = hold(host, host_stream)
    event = recorded(host, host_stream)
    assert not host.event_query(event)
    gate.set()
    host.event_wait(event)
    host.event_destroy(event)


def test_elapsed_reads_a_known_delay(host: HostBackend, host_stream: Stream[Any]) -> None:
    # Measured, not assumed: the stream notes the clock just before the start record, around
    # the sleep and just after the end record (one clock, the one the host backend stamps).
    noted: dict[str, int] = {}

    def note(name: str) -> Callable[[], None]:
        return lambda: noted.__setitem__(name, time.perf_counter_ns())

    def sleep() -> None:
        note("slept_from")()
        time.sleep(0.02)
        note("slept_to")()

    host.stream_launch_host_func(host_stream, note("before"))
    start = recorded(host, host_stream)
    host.stream_launch_host_func(host_stream, sleep)
    end = recorded(host, host_stream)
    host.stream_launch_host_func(host_stream, note("after"))
    host.stream_synchronize(host_stream)
    elapsed = host.event_elapsed(start, end)
    # The stream runs in order, so the reading covers the sleep as it was timed inside it and
    # lies within the notes taken before the start and after the end: bounds this run
    # measured, which a loaded machine widens together with the reading.
    assert noted["slept_to"] - noted["slept_from"] <= elapsed <= noted["after"] - noted["before"]
    host.event_destroy(start)
    host.event_destroy(end)


def test_an_event_is_waited_on_from_other_threads(
    host: HostBackend, host_stream: Stream[Any], gates: list[threading.Event]
) -> None:
    gate = hold(host, host_stream)
    gates.append(gate)
    event = recorded(host, host_stream)
    waiters = [Waiter(lambda: host.event_wait(event)) for _ in range(4)]
    released, returned = release_and_join(gate, waiters)
    assert all(t >= host.stamp_ns(event) >= released for t in returned)
    host.event_destroy(event)


# -- re-recording and stream dependencies (CUDA semantics) --------------------------------------


def test_re_recording_marks_the_latest_record(
    host: HostBackend, gates: list[threading.Event]
) -> None:
    a, b = host.stream_create_non_blocking(), host.stream_create_non_blocking()
    event = recorded(host, a)
    host.event_wait(event)
    first = host.stamp_ns(event)

    gate = hold(host, b)
    gates.append(gate)
    host.event_record(event, b)
    # The query and the wait now refer to the record on the held stream, not the reached one.
    assert stays_unreached(host, event)
    gate.set()
    host.event_wait(event)
    assert host.stamp_ns(event) > first

    host.event_destroy(event)
    host.stream_destroy(a)
    host.stream_destroy(b)


def test_a_stream_waits_for_an_event_on_another_stream(
    host: HostBackend, gates: list[threading.Event]
) -> None:
    a, b = host.stream_create_non_blocking(), host.stream_create_non_blocking()
    gate = hold(host, a)
    gates.append(gate)
    on_a = recorded(host, a)
    before_wait = recorded(host, b)
    host.stream_wait_event(b, on_a)
    ran_after_wait = threading.Event()
    host.stream_launch_host_func(b, ran_after_wait.set)
    after_wait = recorded(host, b)

    host.event_wait(before_wait)  # b is running, and its next op is the wait
    assert stays_unreached(host, after_wait)
    assert not ran_after_wait.is_set()

    released = time.perf_counter_ns()
    gate.set()
    host.event_wait(after_wait)
    assert ran_after_wait.is_set()
    assert host.stamp_ns(after_wait) >= host.stamp_ns(on_a) >= released

    for event in (on_a, before_wait, after_wait):
        host.event_destroy(event)
    host.stream_destroy(a)
    host.stream_destroy(b)


def test_a_stream_wait_keeps_the_record_current_when_it_was_enqueued(
    host: HostBackend, gates: list[threading.Event]
) -> None:
    a, b, c = (host.stream_create_non_blocking() for _ in range(3))
    gate = hold(host, a)
    gates.append(gate)
    event = recorded(host, a)
    host.stream_wait_event(b, event)  # waits for the record on held stream a
    host.event_record(event, c)  # re-recorded on free stream c, reached at once
    host.event_wait(event)
    behind_old_record = recorded(host, b)
    assert stays_unreached(host, behind_old_record)

    # A wait enqueued after the re-record refers to the new, reached record.
    d = host.stream_create_non_blocking()
    host.stream_wait_event(d, event)
    behind_new_record = recorded(host, d)
    host.event_wait(behind_new_record)
    assert not host.event_query(behind_old_record)

    gate.set()
    host.event_wait(behind_old_record)
    for handle in (event, behind_old_record, behind_new_record):
        host.event_destroy(handle)
    for stream in (a, b, c, d):
        host.stream_destroy(stream)


# -- streams ------------------------------------------------------------------------------------


def test_destroying_a_busy_stream_returns_at_once_and_the_queue_still_drains(
    host: HostBackend, gates: list[threading.Event]
) -> None:
    stream = host.stream_create_non_blocking()
    workers: list[threading.Thread] = []
    host.stream_launch_host_func(stream, lambda: workers.append(threading.current_thread()))
    gate = hold(host, stream)
    gates.append(gate)
    event = recorded(host, stream)

    host.stream_destroy(stream)  # returns although the stream is held
    assert host.live_handles() == (1, 0)
    assert not host.event_query(event)
    gate.set()
    host.event_wait(event)  # the worker finished the queue ...
    workers[0].join(HANG_S)
    assert not workers[0].is_alive()  # ... and then exited
    host.event_destroy(event)


def test_a_failed_stream_destroy_leaves_nothing_running(host: HostBackend) -> None:
    # The destroy contract: a destroy that fails leaves the handle closed and uncounted, with
    # nothing of it left running, while the caller still holds the handle.
    stream = host.stream_create_non_blocking()
    workers: list[threading.Thread] = []
    host.stream_launch_host_func(stream, lambda: workers.append(threading.current_thread()))
    host.stream_synchronize(stream)
    host.inject_fault("stream_destroy")
    with pytest.raises(DriverError) as info:
        host.stream_destroy(stream)
    assert info.value.name == "INJECTED_FAULT"
    assert stream.closed
    assert host.live_handles() == (0, 0)
    workers[0].join(HANG_S)
    assert not workers[0].is_alive()
    host.stream_destroy(stream)  # a second destroy is a no-op, not a second failure


def test_a_failed_event_destroy_leaves_the_event_closed_and_uncounted(
    host: HostBackend, host_stream: Stream[Any]
) -> None:
    event = host.event_create()
    host.event_record(event, host_stream)
    host.inject_fault("event_destroy")
    with pytest.raises(DriverError):
        host.event_destroy(event)
    assert event.closed
    assert host.live_handles() == (0, 1)
    host.event_destroy(event)  # no-op
    with pytest.raises(EventStateError, match="already destroyed"):
        host.event_wait(event)


def test_an_interrupt_as_a_stream_worker_starts_leaves_no_worker_running(
    host: HostBackend,
) -> None:
    # Ctrl-C landing as the worker thread has just started, before the create returned: the
    # raw stream is dropped with the interrupt, and its safety net must stop the thread.
    before = set(threading.enumerate())

    with (
        pytest.raises(KeyboardInterrupt),
        interrupting(on_return_of(threading.Thread.start.__code__)),
    ):
        host.stream_create_non_blocking()
    gc.collect()
    assert host.live_handles() == (0, 0)
    started = [t for t in threading.enumerate() if t not in before]
    for thread in started:
        thread.join(HANG_S)
    assert not any(thread.is_alive() for thread in started), "a worker was left running"


def test_the_host_backend_has_no_device(host: HostBackend) -> None:
    assert host.device is None


def test_host_functions_run_in_order_on_a_daemon_worker(
    host: HostBackend, host_stream: Stream[Any]
) -> None:
    seen: list[tuple[int, threading.Thread]] = []

    def note(i: int) -> None:
        seen.append((i, threading.current_thread()))

    for i in range(5):
        host.stream_launch_host_func(host_stream, functools.partial(note, i))
    host.stream_synchronize(host_stream)
    assert [i for i, _ in seen] == list(range(5))
    worker = seen[0][1]
    assert worker is not threading.current_thread()
    assert worker.daemon
    assert all(thread is worker for _, thread in seen)


def test_a_failing_host_function_is_logged_and_the_stream_goes_on(
    host: HostBackend, host_stream: Stream[Any], caplog: pytest.LogCaptureFixture
) -> None:
    def boom() -> None:
        raise ValueError("boom")

    def leave() -> None:
        raise SystemExit(3)

    caplog.set_level(logging.ERROR, logger="eventapi")
    host.stream_launch_host_func(host_stream, boom)
    host.stream_launch_host_func(host_stream, leave)
    event = recorded(host, host_stream)
    host.event_wait(event)  # later work ran: the worker survived both

    failures = [r for r in caplog.records if r.name == "eventapi" and r.levelno == logging.ERROR]
    assert len(failures) == 2
    assert failures[0].exc_info is not None
    assert failures[0].exc_info[0] is ValueError
    assert failures[1].exc_info is not None
    assert failures[1].exc_info[0] is SystemExit
    assert "boom" in failures[0].getMessage()
    host.event_destroy(event)


def test_blocking_calls_from_a_host_function_are_refused(
    host: HostBackend, gates: list[threading.Event]
) -> None:
    a, b = host.stream_create_non_blocking(), host.stream_create_non_blocking()
    gate = hold(host, b)
    gates.append(gate)
    pending = recorded(host, b)
    errors: list[BaseException] = []

    def blocking_calls() -> None:
        calls: list[Call] = [lambda: host.event_wait(pending), lambda: host.stream_synchronize(b)]
        for call in calls:
            try:
                call()
            except BaseException as exc:
                errors.append(exc)

    host.stream_launch_host_func(a, blocking_calls)
    host.stream_synchronize(a)
    assert [(e.call, e.name) for e in errors if isinstance(e, DriverError)] == [
        ("event_wait", "NOT_PERMITTED"),
        ("stream_synchronize", "NOT_PERMITTED"),
    ]
    gate.set()
    host.event_destroy(pending)
    host.stream_destroy(a)
    host.stream_destroy(b)


def test_host_func_needs_a_callable(host: HostBackend, host_stream: Stream[Any]) -> None:
    with pytest.raises(TypeError, match="callable"):
        host.stream_launch_host_func(host_stream, 42)  # type: ignore[arg-type]


# -- capture ------------------------------------------------------------------------------------


def test_capture_is_simulated(host: HostBackend, host_stream: Stream[Any]) -> None:
    ran = threading.Event()
    event = host.event_create()
    host.begin_capture(host_stream)
    assert host.stream_is_capturing(host_stream)
    with pytest.raises(CaptureError, match="capturing a graph"):
        host.stream_launch_host_func(host_stream, ran.set)  # would run on a first replay only
    host.event_record(event, host_stream)

    refused: list[tuple[str, Call]] = [
        ("event_wait", lambda: host.event_wait(event)),
        ("event_query", lambda: host.event_query(event)),
        ("event_elapsed", lambda: host.event_elapsed(event, event)),
        ("stamp_ns", lambda: host.stamp_ns(event)),
    ]
    for call, action in refused:
        with pytest.raises(DriverError) as info:
            action()
        assert (info.value.call, info.value.code, info.value.name) == (
            call,
            907,
            "CAPTURED_EVENT",
        )
        assert "record it again" in info.value.message
    with pytest.raises(DriverError) as info:
        host.stream_synchronize(host_stream)
    assert (info.value.code, info.value.name) == (900, "STREAM_CAPTURE_UNSUPPORTED")
    with pytest.raises(DriverError) as info:
        host.begin_capture(host_stream)
    assert info.value.name == "ILLEGAL_STATE"

    host.end_capture(host_stream)
    assert not host.stream_is_capturing(host_stream)
    with pytest.raises(DriverError) as info:
        host.end_capture(host_stream)
    assert (info.value.code, info.value.name) == (401, "ILLEGAL_STATE")
    host.stream_synchronize(host_stream)
    assert not ran.is_set()  # refused, and nothing captured ever runs

    host.event_record(event, host_stream)  # recorded again outside the capture: usable
    host.event_wait(event)
    assert host.event_query(event)
    host.event_destroy(event)


def test_a_stream_wait_on_a_captured_event(host: HostBackend) -> None:
    capturing, other = host.stream_create_non_blocking(), host.stream_create_non_blocking()
    event = host.event_create()
    host.begin_capture(capturing)
    host.event_record(event, capturing)
    host.stream_wait_event(capturing, event)  # joins the capture: accepted
    with pytest.raises(DriverError) as info:
        host.stream_wait_event(other, event)
    assert (info.value.call, info.value.name) == ("stream_wait_event", "CAPTURED_EVENT")
    host.end_capture(capturing)
    host.event_destroy(event)
    host.stream_destroy(capturing)
    host.stream_destroy(other)


def test_destroying_a_capturing_stream(host: HostBackend) -> None:
    stream = host.stream_create_non_blocking()
    host.begin_capture(stream)
    host.stream_destroy(stream)
    assert host.live_handles() == (0, 0)


# -- fault injection ----------------------------------------------------------------------------

# Every protocol method and capability: the calls below spell each one out.
FAULTABLE = sorted((*PROTOCOL_METHODS, *CAPABILITY_METHODS))


@pytest.mark.parametrize("method", FAULTABLE)
def test_an_injected_fault_fails_the_next_call_before_it_does_anything(
    host: HostBackend, method: str
) -> None:
    stream, other = host.stream_create_non_blocking(), host.stream_create_non_blocking()
    start, end = recorded(host, stream), recorded(host, stream)
    spare = host.event_create()
    host.stream_synchronize(stream)
    ran = threading.Event()
    calls: dict[str, Call] = {
        "event_create": host.event_create,
        "event_destroy": lambda: host.event_destroy(spare),
        "event_record": lambda: host.event_record(spare, stream),
        "event_wait": lambda: host.event_wait(end),
        "event_query": lambda: host.event_query(end),
        "event_elapsed": lambda: host.event_elapsed(start, end),
        "stream_wait_event": lambda: host.stream_wait_event(other, end),
        "stream_synchronize": lambda: host.stream_synchronize(stream),
        "stream_create_non_blocking": host.stream_create_non_blocking,
        "stream_destroy": lambda: host.stream_destroy(other),
        "stream_is_capturing": lambda: host.stream_is_capturing(stream),
        "stream_launch_host_func": lambda: host.stream_launch_host_func(stream, ran.set),
    }
    assert sorted(calls) == FAULTABLE
    counts = host.live_handles()

    host.inject_fault(method)
    with pytest.raises(DriverError) as info:
        calls[method]()
    error = info.value
    assert (error.backend, error.call, error.code, error.name) == (
        "host",
        method,
        999,
        "INJECTED_FAULT",
    )
    assert str(error) == (
        f"host: {method} failed: INJECTED_FAULT (999): fault injected by inject_fault('{method}')"
    )
    # It did nothing: nothing created, recorded or enqueued. A failed destroy is the exception:
    # the handle is counted gone, as a handle the driver refused to destroy is unusable anyway.
    if method in ("event_destroy", "stream_destroy"):
        assert host.live_handles() != counts
    else:
        assert host.live_handles() == counts
        if method == "event_record":
            with pytest.raises(EventStateError, match="never recorded"):
                host.event_query(spare)
        host.stream_synchronize(stream)
        assert not ran.is_set()

        result = calls[method]()  # the fault is spent: the same call now works
        if method == "event_create":
            host.event_destroy(result)
        elif method == "stream_create_non_blocking":
            host.stream_destroy(result)
    for event in (start, end, spare):
        host.event_destroy(event)
    host.stream_destroy(stream)
    host.stream_destroy(other)


def test_faults_count_and_carry_a_chosen_error(host: HostBackend, host_stream: Stream[Any]) -> None:
    event = recorded(host, host_stream)
    host.event_wait(event)
    chosen = DriverError("host", "event_query", 700, "ILLEGAL_ADDRESS", "the device faulted")
    host.inject_fault("event_query", count=2, error=chosen)
    for _ in range(2):
        with pytest.raises(DriverError) as info:
            host.event_query(event)
        assert (info.value.code, info.value.name) == (700, "ILLEGAL_ADDRESS")
    assert host.event_query(event)
    host.event_destroy(event)


def test_inject_fault_refuses_what_it_cannot_do(host: HostBackend) -> None:
    with pytest.raises(ValueError, match="event_record") as info:
        host.inject_fault("event_recrod")
    assert "event_recrod" in str(info.value)
    with pytest.raises(ValueError, match="count"):
        host.inject_fault("event_record", count=0)
    with pytest.raises(TypeError, match="DriverError"):
        host.inject_fault("event_record", error=RuntimeError("x"))  # type: ignore[arg-type]


# -- handles refused before the driver ----------------------------------------------------------


@pytest.mark.parametrize(
    "method", ["event_wait", "event_query", "event_elapsed", "stream_wait_event"]
)
def test_a_never_recorded_event_is_refused_without_a_driver_call(
    host: HostBackend, host_stream: Stream[Any], method: str
) -> None:
    fresh = host.event_create()
    calls: dict[str, Call] = {
        "event_wait": lambda: host.event_wait(fresh),
        "event_query": lambda: host.event_query(fresh),
        "event_elapsed": lambda: host.event_elapsed(fresh, fresh),
        "stream_wait_event": lambda: host.stream_wait_event(host_stream, fresh),
    }
    # A pending fault proves the driver call was not made: a refusal leaves it unspent.
    host.inject_fault(method)
    with pytest.raises(EventStateError, match="never recorded") as info:
        calls[method]()
    assert "event_record(event, stream) first" in str(info.value)
    host.event_record(fresh, host_stream)
    host.stream_synchronize(host_stream)
    with pytest.raises(DriverError, match="INJECTED_FAULT"):
        calls[method]()
    host.event_destroy(fresh)


def test_closed_handles_are_refused_and_destroy_is_idempotent(host: HostBackend) -> None:
    stream = host.stream_create_non_blocking()
    event = recorded(host, stream)
    host.event_wait(event)
    host.event_destroy(event)
    host.event_destroy(event)  # a second destroy is a no-op
    host.inject_fault("event_wait")
    with pytest.raises(EventStateError, match="already destroyed"):
        host.event_wait(event)
    with pytest.raises(EventStateError, match="already destroyed"):
        host.event_record(event, stream)
    fresh = recorded(host, stream)
    with pytest.raises(DriverError, match="INJECTED_FAULT"):  # the fault was not spent
        host.event_wait(fresh)
    host.event_destroy(fresh)

    host.stream_destroy(stream)
    host.stream_destroy(stream)
    with pytest.raises(EventStateError, match="already destroyed"):
        host.stream_synchronize(stream)
    assert host.live_handles() == (0, 0)


def test_foreign_handles_are_refused(host: HostBackend, host_stream: Stream[Any]) -> None:
    other = HostBackend()
    foreign_stream = other.stream_create_non_blocking()
    foreign_event = recorded(other, foreign_stream)
    own = host.event_create()

    with pytest.raises(EventStateError, match="not an event of this host backend object"):
        host.event_wait(foreign_event)
    with pytest.raises(EventStateError, match="not a stream of this host backend object"):
        host.event_record(own, foreign_stream)
    with pytest.raises(EventStateError, match="not a stream this backend can use"):
        host.event_record(own, object())
    with pytest.raises(EventStateError, match="not an event"):
        host.event_destroy(foreign_event)
    with pytest.raises(EventStateError):
        host.stream_destroy(foreign_stream)
    with pytest.raises(EventStateError):
        host.begin_capture(foreign_stream)

    host.event_destroy(own)
    other.event_destroy(foreign_event)
    other.stream_destroy(foreign_stream)
    assert other.live_handles() == (0, 0)


def test_repr_names_the_backend_and_state(host: HostBackend, host_stream: Stream[Any]) -> None:
    event = host.event_create()
    assert repr(event).startswith("<host event #")
    assert repr(event).endswith(" new>")
    host.event_record(event, host_stream)
    assert repr(event).endswith(" recorded>")
    assert repr(host_stream).startswith("<host stream #")
    assert repr(host) == "<HostBackend live events=1 streams=1>"
    host.event_destroy(event)


# A child process: on a deadlock it is the child that hangs (and is killed), not the suite.
_LAST_REFERENCE_CHILD = """
import functools, json, sys, threading
from eventapi.host import HostBackend

host = HostBackend()
stream = host.stream_create_non_blocking()
recorder_event = host.event_create()
ROUNDS = 2_000
done = {"recorder": 0, "launcher": 0}

def recorder():
    for _ in range(ROUNDS):
        host.event_record_unless_capturing(recorder_event, stream)
        done["recorder"] += 1

def launcher():
    for _ in range(ROUNDS):
        event = host.event_create()
        host.stream_launch_host_func(stream, functools.partial(id, event))
        del event  # the host function now holds the last reference
        done["launcher"] += 1

sys.setswitchinterval(1e-5)  # switch threads often, so the two loops interleave finely
threads = [threading.Thread(target=f) for f in (recorder, launcher)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
host.stream_synchronize(stream)
host.event_destroy(recorder_event)
host.stream_destroy(stream)
print(json.dumps({"done": done, "live": list(host.live_handles())}))
"""


def test_a_host_function_holding_the_last_reference_to_a_handle_deadlocks_nothing() -> None:
    # The worker drops a host function it ran; if that drops the last reference to an event,
    # the event's finalizer destroys it, taking the backend's lock. A thread recording into the
    # stream holds that lock while it takes the stream's. The worker must drop what it ran
    # before it takes the stream's lock again, or the two wait on each other for good (the
    # child then hangs until run_json's timeout).
    result = run_json(_LAST_REFERENCE_CHILD)
    assert result == {"done": {"recorder": 2_000, "launcher": 2_000}, "live": [0, 0]}
