"""EventFence through its public surface, on the host backend and on a protocol-only backend.

Streams are held with a host function blocked on a :class:`threading.Event`; threads are ordered
with events and joins, never with sleeps.
"""

from __future__ import annotations

import _thread
import asyncio
import concurrent.futures
import copy
import decimal
import functools
import gc
import logging
import pickle
import queue
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from functools import partial
from types import SimpleNamespace
from typing import Any

import pytest
from protocol_only import ProtocolOnly
from threads import Waiter, blocked_in, release_and_join

from eventapi import (
    CaptureError,
    DriverError,
    EventApi,
    EventFence,
    EventProfiler,
    EventStateError,
    SupportsCaptureCheck,
    SupportsEventQuery,
    UnsupportedError,
    _fence,
)
from eventapi.driverkit import Stream
from eventapi.host import HostBackend

# Bounds a broken build's hang; never decides whether a working one passes.
HANG_S = 10.0


class Buffer:
    """Stands in for memory the device still reads: weakly referenceable, so tests see it go."""


@pytest.fixture
def gates() -> Iterator[list[threading.Event]]:
    """Gates the test opens; any left shut are opened at teardown so no stream stays held."""
    opened: list[threading.Event] = []
    yield opened
    for gate in opened:
        gate.set()


@pytest.fixture
def hold(host: HostBackend, gates: list[threading.Event]) -> Any:
    """``hold(stream)`` blocks the stream until the returned gate is set."""

    def hold(stream: Stream[Any]) -> threading.Event:
        gate = threading.Event()
        gates.append(gate)
        host.stream_launch_host_func(stream, functools.partial(gate.wait, HANG_S))
        return gate

    return hold


# -- recording and waiting ----------------------------------------------------------------------


def test_record_wait_close(host: HostBackend, host_stream: Stream[Any]) -> None:
    before = time.perf_counter_ns()
    fence = EventFence.record(host, host_stream)
    assert fence.api is host
    assert "closed" not in repr(fence)
    assert host.live_handles().events == 1
    fence.wait()
    assert host.stamp_ns(fence.event) >= before
    assert fence.reached()
    fence.close()
    assert fence.closed
    assert host.live_handles().events == 0


def test_the_constructor_is_not_public() -> None:
    with pytest.raises(TypeError, match=r"EventFence\.record"):
        EventFence()


def test_reached_and_timed_waits_follow_the_stream(
    host: HostBackend, host_stream: Stream[Any], hold: Any
) -> None:
    gate = hold(host_stream)
    with EventFence.record(host, host_stream) as fence:
        assert not fence.reached()
        assert "pending" in repr(fence)
        with pytest.raises(TimeoutError, match="not reached within 0 s"):
            fence.wait(timeout=0)
        began = time.monotonic()
        with pytest.raises(TimeoutError, match=r"host: fence not reached within 0\.05 s"):
            fence.wait(timeout=0.05)
        # At least the timeout. No upper bound: the gate proves the deadline is kept, since a
        # wait that ignored it could not return while the gate holds the stream; it would
        # return only as the hold gives up (HANG_S), reached, and pytest.raises would fail.
        assert time.monotonic() - began >= 0.05

        released = time.perf_counter_ns()
        gate.set()
        fence.wait(timeout=HANG_S)
        assert host.stamp_ns(fence.event) >= released
        assert fence.reached()
        fence.wait(timeout=0)  # reached: returns at once
        assert "reached" in repr(fence)
    assert "closed" in repr(fence)
    assert "host" in repr(fence)


def test_a_fence_is_waited_on_from_other_threads(
    host: HostBackend, host_stream: Stream[Any], hold: Any
) -> None:
    gate = hold(host_stream)
    fence = EventFence.record(host, host_stream)
    waiters = [Waiter(partial(fence.wait, t)) for t in (None, None, HANG_S, HANG_S)]
    released, returned = release_and_join(gate, waiters)
    assert all(t >= host.stamp_ns(fence.event) >= released for t in returned)
    fence.close()


def test_wait_on_makes_another_stream_wait(host: HostBackend, hold: Any) -> None:
    a, b = host.stream_create_non_blocking(), host.stream_create_non_blocking()
    gate = hold(a)
    first = EventFence.record(host, a)
    first.wait_on(b)  # returns at once although `a` is held
    second = EventFence.record(host, b)
    # `second` cannot be reached while `a` is held; a broken dependency would let it through.
    with pytest.raises(TimeoutError):
        second.wait(timeout=0.05)
    first.close()  # the dependency already enqueued outlives the fence
    with pytest.raises(TimeoutError):
        second.wait(timeout=0.05)
    released = time.perf_counter_ns()
    gate.set()
    second.wait(timeout=HANG_S)
    assert host.stamp_ns(second.event) >= released
    second.close()
    host.stream_destroy(a)
    host.stream_destroy(b)


@pytest.mark.parametrize("main", [True, False], ids=["main thread", "other thread"])
def test_a_failed_wait_leaves_the_fence_usable(
    host: HostBackend, host_stream: Stream[Any], hold: Any, main: bool
) -> None:
    # Held, so that the wait outlasts its query spin and calls event_wait (on the main thread
    # through a helper thread): the failure is raised here, typed.
    gate = hold(host_stream)
    fence = EventFence.record(host, host_stream)
    host.inject_fault("event_wait")
    with pytest.raises(DriverError, match="INJECTED_FAULT"):
        fence.wait() if main else Waiter(fence.wait).result()
    assert not fence.closed
    gate.set()
    fence.wait()
    fence.close()


@pytest.mark.parametrize(
    ("timeout", "error", "says"),
    [
        (float("nan"), ValueError, "finite number of seconds, got nan"),
        (decimal.Decimal("nan"), ValueError, "finite number of seconds, got Decimal('NaN')"),
        (decimal.Decimal("snan"), ValueError, "finite number of seconds, got Decimal('sNaN')"),
        (-1, ValueError, ">= 0"),
        ("1", TypeError, "not str '1'"),
        ([1.0], TypeError, "not list"),
        (True, TypeError, "not bool"),
    ],
)
def test_a_timeout_that_is_no_number_of_seconds_is_refused(
    host: HostBackend, host_stream: Stream[Any], hold: Any, timeout: Any, error: type, says: str
) -> None:
    # A NaN deadline is never "passed" by a plain comparison: a careless poll loop would spin
    # until the stream was released, and one that took NaN for 0 would give up at once.
    hold(host_stream)
    with EventFence.record(host, host_stream) as fence:
        with pytest.raises(error, match=r"EventFence\.wait: timeout must be a") as refused:
            fence.wait(timeout=timeout)
        assert says in str(refused.value)
        assert not fence.reached()


# Every backend call a fence makes after its record, and the fence call that makes it.
FENCE_CALLS: dict[str, list[tuple[str, Any]]] = {
    # An untimed wait on a fence reached at once (as here) is seen reached by the query spin
    # that comes first, on any thread; test_a_failed_wait_leaves_the_fence_usable holds the
    # stream so that event_wait is called.
    "event_query": [
        ("wait() on the main thread", lambda f, s: f.wait()),
        ("wait() off the main thread", lambda f, s: Waiter(f.wait).result()),
        ("reached()", lambda f, s: f.reached()),
        ("wait(timeout)", lambda f, s: f.wait(timeout=HANG_S)),
        ("wait_async()", lambda f, s: asyncio.run(f.wait_async())),
    ],
    "stream_wait_event": [("wait_on()", lambda f, s: f.wait_on(s))],
}


@pytest.mark.parametrize(
    ("method", "use"),
    [(m, use) for m, uses in FENCE_CALLS.items() for _, use in uses],
    ids=[f"{m}-{name}" for m, uses in FENCE_CALLS.items() for name, _ in uses],
)
def test_a_fault_in_a_fence_call_surfaces_typed_and_leaves_the_fence_usable(
    host: HostBackend, host_stream: Stream[Any], method: str, use: Any
) -> None:
    other = host.stream_create_non_blocking()
    fence = EventFence.record(host, host_stream)
    host.inject_fault(method)
    with pytest.raises(DriverError) as info:
        use(fence, other)
    assert (info.value.call, info.value.name) == (method, "INJECTED_FAULT")
    assert not fence.closed
    use(fence, other)  # the fault is spent: the same call now works
    fence.close()
    host.stream_destroy(other)
    assert host.live_handles() == (0, 1)  # only host_stream, which the fixture destroys


def test_a_fault_in_the_capture_check_creates_nothing(
    host: HostBackend, host_stream: Stream[Any]
) -> None:
    host.inject_fault("stream_is_capturing")
    with pytest.raises(DriverError) as info:
        EventFence.record(host, host_stream)
    assert info.value.call == "stream_is_capturing"
    assert host.live_handles() == (0, 1)


# -- asyncio ------------------------------------------------------------------------------------


async def _await_while_the_loop_releases(fence: EventFence[Any, Any], gate: threading.Event) -> int:
    """Await the fence while another task on the same loop opens the gate; return when it did.

    If wait_async blocked the loop, the opener could not run until the hold timed out on its
    own, so the fence would be stamped before the returned time.
    """

    async def opener() -> int:
        for _ in range(3):
            await asyncio.sleep(0)
        released = time.perf_counter_ns()
        gate.set()
        return released

    opening = asyncio.create_task(opener())
    await asyncio.wait_for(fence.wait_async(), HANG_S)
    return await opening


def test_wait_async_polls_without_blocking_the_loop(
    host: HostBackend, host_stream: Stream[Any], hold: Any
) -> None:
    gate = hold(host_stream)
    with EventFence.record(host, host_stream) as fence:
        released = asyncio.run(_await_while_the_loop_releases(fence, gate))
        assert host.stamp_ns(fence.event) >= released
        assert fence.reached()


def test_wait_async_without_event_query_uses_the_executor(
    host: HostBackend, host_stream: Stream[Any], hold: Any
) -> None:
    plain = ProtocolOnly(host)
    gate = hold(host_stream)
    with EventFence.record(plain, host_stream) as fence:
        released = asyncio.run(_await_while_the_loop_releases(fence, gate))
        assert host.stamp_ns(fence.event) >= released
        assert "event_wait returned" in plain.calls


async def _cancel_a_queued_wait_async(fence: EventFence[Any, Any]) -> None:
    # The default executor's one worker is busy, so wait_async's job waits in the queue while
    # the coroutine is cancelled; the worker is freed once the fence was closed.
    loop = asyncio.get_running_loop()
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    loop.set_default_executor(executor)
    busy = threading.Event()
    occupied = loop.run_in_executor(None, busy.wait, HANG_S)
    waiting = asyncio.create_task(fence.wait_async())
    await asyncio.sleep(0)  # the task runs up to its await of the queued job
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    fence.close()
    busy.set()
    await occupied
    executor.shutdown(wait=True)  # the queued job, if it still runs, has run


def test_a_cancelled_wait_async_still_leaves_the_fence_when_its_job_was_queued(
    host: HostBackend, host_stream: Stream[Any]
) -> None:
    # Cancelling the await must not cancel the executor's job: the job is the wait's way out
    # of the fence, and without it the closed fence's event would stay until garbage collection.
    plain = ProtocolOnly(host)
    fence = EventFence.record(plain, host_stream)
    asyncio.run(_cancel_a_queued_wait_async(fence))
    assert "event_destroy" in plain.calls
    assert host.live_handles().events == 0


# -- an interrupt as a wait starts its helper ----------------------------------------------------
#
# An untimed wait on the main thread waits in a helper thread, and wait_async without
# event_query in an executor job. A Ctrl-C can land as the call that starts it returns, when the
# helper may or may not run already. These tests stand in for that interrupt: the start
# succeeds, then KeyboardInterrupt is raised. The fence counts nothing: the backend keeps the
# helper's wait safe from the close that follows (host defers the destroy until it returns, and
# refuses the destroyed event to a helper that starts later).


def _interrupting_start(
    before: Callable[[], None], finished: threading.Event, *, held: threading.Event | None = None
) -> SimpleNamespace:
    """A stand-in for ``_thread`` in eventapi._fence: start_new_thread starts the real thread
    (held at ``held`` until it is set, when given), runs ``before``, then raises
    KeyboardInterrupt. ``finished`` is set when the thread's function returned."""

    def start_new_thread(fn: Callable[..., None], args: tuple[Any, ...]) -> int:
        def run() -> None:
            if held is not None:
                held.wait(HANG_S)
            try:
                fn(*args)
            finally:
                finished.set()

        _thread.start_new_thread(run, ())
        before()
        raise KeyboardInterrupt

    return SimpleNamespace(allocate_lock=_thread.allocate_lock, start_new_thread=start_new_thread)


def test_an_interrupt_as_the_waiting_thread_starts_leaks_nothing(
    host: HostBackend,
    host_stream: Stream[Any],
    hold: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert threading.current_thread() is threading.main_thread()  # the helper thread's path
    plain = ProtocolOnly(host)
    gate = hold(host_stream)
    fence = EventFence.record(plain, host_stream)
    finished = threading.Event()

    def in_event_wait() -> None:
        assert plain.waiting.wait(HANG_S), "the helper never reached event_wait"

    monkeypatch.setattr(_fence, "_thread", _interrupting_start(in_event_wait, finished))
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    with pytest.raises(KeyboardInterrupt):
        fence.wait()
    fence.close()  # while the helper still waits: the backend defers the destroy
    gate.set()
    assert finished.wait(HANG_S)
    assert "event_wait returned" in plain.calls  # the helper's wait finished normally
    assert unraisable == []
    assert host.live_handles().events == 0


def test_an_interrupt_before_the_waiting_thread_runs_leaks_nothing(
    host: HostBackend,
    host_stream: Stream[Any],
    hold: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert threading.current_thread() is threading.main_thread()
    plain = ProtocolOnly(host)
    hold(host_stream)
    fence = EventFence.record(plain, host_stream)
    held, finished = threading.Event(), threading.Event()
    monkeypatch.setattr(_fence, "_thread", _interrupting_start(lambda: None, finished, held=held))
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    with pytest.raises(KeyboardInterrupt):
        fence.wait()
    fence.close()
    assert plain.calls[-1] == "event_destroy"  # no wait in the backend: destroyed at once
    held.set()
    assert finished.wait(HANG_S)
    # The helper's wait came after the destroy: the backend refused it, and nobody waits for it.
    assert "event_wait returned" not in plain.calls
    assert unraisable == []
    assert host.live_handles().events == 0


async def _fail_after_the_job_started(
    fence: EventFence[Any, Any], plain: ProtocolOnly, gate: threading.Event, monkeypatch: Any
) -> BaseException | None:
    # wait_async submits its executor job, then fails before it awaits it, as an interrupt
    # landing as run_in_executor returns would make it.
    loop = asyncio.get_running_loop()
    submit = loop.run_in_executor
    jobs: list[asyncio.Future[Any]] = []

    def submit_then_fail(executor: Any, fn: Callable[..., Any], *args: Any) -> Any:
        jobs.append(submit(executor, fn, *args))
        assert plain.waiting.wait(HANG_S), "the job never reached event_wait"
        raise RuntimeError("stands in for an interrupt")

    monkeypatch.setattr(loop, "run_in_executor", submit_then_fail)
    with pytest.raises(RuntimeError, match="stands in"):
        await fence.wait_async()
    fence.close()
    gate.set()
    await asyncio.wait_for(jobs[0], HANG_S)
    return jobs[0].exception()


def test_a_wait_async_that_fails_after_queueing_its_job_leaks_nothing(
    host: HostBackend,
    host_stream: Stream[Any],
    hold: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plain = ProtocolOnly(host)
    gate = hold(host_stream)
    fence = EventFence.record(plain, host_stream)
    failure = asyncio.run(_fail_after_the_job_started(fence, plain, gate, monkeypatch))
    assert failure is None  # the job's wait finished normally, the close deferred behind it
    assert host.live_handles().events == 0


# -- keep_alive ---------------------------------------------------------------------------------


def test_keep_alive_is_held_until_the_fence_is_seen_reached(
    host: HostBackend, host_stream: Stream[Any], hold: Any
) -> None:
    gate = hold(host_stream)
    buffer = Buffer()
    fence = EventFence.record(host, host_stream, keep_alive=[buffer])
    alive = weakref.ref(buffer)
    del buffer
    assert alive() is not None
    assert not fence.reached()
    assert alive() is not None  # not reached yet: still held
    gate.set()
    fence.wait()
    assert alive() is None  # reached: dropped
    fence.close()


def test_keep_alive_is_dropped_by_reached(host: HostBackend, host_stream: Stream[Any]) -> None:
    buffer = Buffer()
    fence = EventFence.record(host, host_stream, keep_alive=(buffer,))
    alive = weakref.ref(buffer)
    del buffer
    host.stream_synchronize(host_stream)
    assert alive() is not None  # reached, but nobody looked yet
    assert fence.reached()
    assert alive() is None
    fence.close()


def test_keep_alive_is_dropped_by_close(
    host: HostBackend, host_stream: Stream[Any], hold: Any
) -> None:
    gate = hold(host_stream)
    buffer = Buffer()
    fence = EventFence.record(host, host_stream, keep_alive=(buffer,))
    alive = weakref.ref(buffer)
    del buffer
    assert alive() is not None
    fence.close()
    assert alive() is None
    gate.set()


# -- lifetime -----------------------------------------------------------------------------------


def test_close_is_idempotent_and_use_after_close_never_reaches_the_backend(
    host: HostBackend, host_stream: Stream[Any]
) -> None:
    plain = ProtocolOnly(host)
    with EventFence.record(plain, host_stream) as fence:
        fence.wait()
    fence.close()
    assert fence.closed
    assert plain.calls.count("event_destroy") == 1
    seen = list(plain.calls)

    other = host.stream_create_non_blocking()
    for use in (fence.wait, lambda: fence.wait(1.0), fence.reached, lambda: fence.wait_on(other)):
        with pytest.raises(EventStateError, match="fence is closed") as info:
            use()
        assert "EventFence.record(api, stream)" in str(info.value)
    with pytest.raises(EventStateError):
        asyncio.run(fence.wait_async())
    assert plain.calls == seen
    host.stream_destroy(other)


def test_use_after_close_on_host(host: HostBackend, host_stream: Stream[Any]) -> None:
    fence = EventFence.record(host, host_stream)
    fence.close()
    host.inject_fault("event_query")  # would fire if the fence reached the backend
    with pytest.raises(EventStateError, match=r"host: EventFence\.reached refused"):
        fence.reached()
    with EventFence.record(host, host_stream) as fresh, pytest.raises(DriverError, match="999"):
        fresh.reached()  # the fault was still pending


def test_a_dropped_fence_is_destroyed_by_the_safety_net(
    host: HostBackend, host_stream: Stream[Any]
) -> None:
    fence = EventFence.record(host, host_stream)
    fence.wait()
    collected = weakref.ref(fence)
    del fence
    gc.collect()
    assert collected() is None  # the safety net does not keep the fence alive
    assert host.live_handles().events == 0


def test_a_destroy_failure_in_the_safety_net_is_logged_not_raised(
    host: HostBackend, host_stream: Stream[Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="eventapi")
    fence = EventFence.record(host, host_stream)
    fence.wait()
    host.inject_fault("event_destroy")
    del fence  # an exception out of __del__ would fail the test (unraisable hook -> error)
    gc.collect()
    [record] = [r for r in caplog.records if r.name == "eventapi"]
    assert record.levelno == logging.WARNING
    assert "garbage collected" in record.getMessage()
    assert record.exc_info is not None
    assert record.exc_info[0] is DriverError
    assert host.live_handles().events == 0  # a refused destroy is not retried


def test_a_destroy_failure_on_close_is_logged_not_raised(
    host: HostBackend, host_stream: Stream[Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="eventapi")
    fence = EventFence.record(host, host_stream)
    host.inject_fault("event_destroy")
    fence.close()
    assert fence.closed
    assert any("on close" in r.getMessage() for r in caplog.records if r.name == "eventapi")


# -- record failures leave nothing behind -------------------------------------------------------


def test_a_capturing_stream_gets_no_fence(host: HostBackend, host_stream: Stream[Any]) -> None:
    host.begin_capture(host_stream)
    try:
        with pytest.raises(CaptureError, match="capturing a graph") as info:
            EventFence.record(host, host_stream)
        assert "after the capture ends" in str(info.value)
        assert host.live_handles().events == 0
    finally:
        host.end_capture(host_stream)


def test_a_failed_create_or_record_leaks_nothing(
    host: HostBackend, host_stream: Stream[Any], caplog: pytest.LogCaptureFixture
) -> None:
    buffer = Buffer()
    alive = weakref.ref(buffer)
    host.inject_fault("event_create")
    with pytest.raises(DriverError, match="event_create"):
        EventFence.record(host, host_stream, keep_alive=(buffer,))
    host.inject_fault("event_record")
    with pytest.raises(DriverError, match="event_record"):
        EventFence.record(host, host_stream, keep_alive=(buffer,))
    assert host.live_handles().events == 0
    assert not caplog.records
    del buffer
    assert alive() is None  # the failed records kept no reference to it

    # The record fails and so does the destroy that cleans up: the record's error is raised,
    # the destroy's is logged.
    caplog.set_level(logging.WARNING, logger="eventapi")
    host.inject_fault("event_record")
    host.inject_fault("event_destroy")
    with pytest.raises(DriverError) as info:
        EventFence.record(host, host_stream)
    assert info.value.call == "event_record"
    [record] = [r for r in caplog.records if r.name == "eventapi"]
    assert "after its record failed" in record.getMessage()
    assert host.live_handles().events == 0


# -- backends without the optional capabilities -------------------------------------------------


def test_a_protocol_only_backend(host: HostBackend, host_stream: Stream[Any]) -> None:
    plain = ProtocolOnly(host)
    api: EventApi[Any, Any] = plain
    assert not isinstance(api, SupportsEventQuery)
    assert not isinstance(api, SupportsCaptureCheck)
    with EventFence.record(plain, host_stream) as fence:
        for needs_query in (fence.reached, lambda: fence.wait(timeout=1.0)):
            with pytest.raises(UnsupportedError) as info:
                needs_query()
            assert "protocol-only" in str(info.value)
            assert "event_query" in str(info.value)
            assert isinstance(info.value, NotImplementedError)
        fence.wait()
        with pytest.raises(UnsupportedError):  # still, once the fence was seen reached
            fence.reached()
    assert plain.calls == [
        "event_create",
        "event_record",
        "event_wait",
        "event_wait returned",
        "event_destroy",
    ]


def test_close_while_another_thread_waits_lets_the_wait_finish(
    host: HostBackend, host_stream: Stream[Any], hold: Any
) -> None:
    # The backend keeps a wait in flight safe from a destroy made meanwhile (host defers it
    # until the wait returns): the close returns at once, and the wait finishes normally.
    plain = ProtocolOnly(host)
    gate = hold(host_stream)
    fence = EventFence.record(plain, host_stream)
    waiter = Waiter(fence.wait)
    assert plain.waiting.wait(HANG_S), "the waiter never reached event_wait"
    fence.close()  # returns at once; the waiter is still inside event_wait
    assert fence.closed
    release_and_join(gate, [waiter])  # the wait finished normally
    assert plain.calls.count("event_destroy") == 1
    assert host.live_handles().events == 0


def test_close_while_a_host_waiter_blocks(
    host: HostBackend, host_stream: Stream[Any], hold: Any
) -> None:
    gate = hold(host_stream)
    fence = EventFence.record(host, host_stream)
    waiter = Waiter(fence.wait)
    assert blocked_in(waiter.thread, "event_wait")
    fence.close()  # counted gone at once; host releases the event once the wait returned
    released, (returned,) = release_and_join(gate, [waiter])  # the wait finished normally
    assert returned >= released
    assert host.live_handles().events == 0


class GatedQuery:
    """The host backend, whose ``event_query`` waits at ``gate`` first; ``calls`` lists the
    queries and destroys in the order they happened, and ``answered`` is set once a query
    returned."""

    BACKEND = "gated-query"

    def __init__(self, inner: HostBackend) -> None:
        self.inner = inner
        self.calls: list[str] = []
        self.querying = threading.Event()
        self.gate = threading.Event()
        self.answered = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # every other call, as the host backend makes it

    def event_query(self, event: Any) -> bool:
        self.querying.set()
        self.gate.wait(HANG_S)
        reached = self.inner.event_query(event)
        self.calls.append("event_query returned")
        self.answered.set()
        return reached

    def event_destroy(self, event: Any) -> None:
        self.calls.append("event_destroy")
        self.inner.event_destroy(event)


def _close_during_its_query(
    api: GatedQuery, fence: EventFence[Any, Any], call: Callable[[], object]
) -> Waiter:
    """Run ``call`` (a wait of ``fence``) on a thread and close the fence while the call's first
    query waits at the gate, before it reached the host backend; then open the gate."""
    waiter = Waiter(call)
    try:
        assert api.querying.wait(HANG_S), "the query never started"
        fence.close()  # returns at once
    finally:
        api.gate.set()
    return waiter


def test_a_query_a_close_overtakes_is_refused_as_closed(
    host: HostBackend, host_stream: Stream[Any]
) -> None:
    # A close() while another thread's reached() has not reached the backend yet: the backend
    # refuses the destroyed event before its driver sees it, and the fence says it was closed.
    api = GatedQuery(host)
    fence = EventFence.record(api, host_stream)
    waiter = _close_during_its_query(api, fence, fence.reached)
    with pytest.raises(EventStateError, match=r"EventFence\.reached refused: the fence is closed"):
        waiter.result()
    assert api.calls == ["event_destroy"]
    assert host.live_handles().events == 0


def test_a_wait_whose_first_query_a_close_overtakes_is_refused_as_closed(
    host: HostBackend, host_stream: Stream[Any], hold: Any
) -> None:
    hold(host_stream)
    api = GatedQuery(host)
    fence = EventFence.record(api, host_stream)
    waiter = _close_during_its_query(api, fence, fence.wait)
    with pytest.raises(EventStateError, match=r"EventFence\.wait refused: the fence is closed"):
        waiter.result()
    assert api.calls == ["event_destroy"]
    assert host.live_handles().events == 0


# -- many threads -------------------------------------------------------------------------------


def test_many_threads_wait_on_many_fences(host: HostBackend, host_stream: Stream[Any]) -> None:
    fences_n, waiters_n = 1000, 8
    passed = [False] * fences_n  # set by a host function enqueued right before each fence
    inboxes: list[queue.SimpleQueue[tuple[int, EventFence[Any, Any]]]] = [
        queue.SimpleQueue() for _ in range(waiters_n)
    ]
    fences: list[EventFence[Any, Any]] = []
    errors: list[BaseException | str] = []
    # The stream starts held, so every waiter blocks on the first fences; it is released halfway
    # through recording, while waits and records go on together.
    gate = threading.Event()
    host.stream_launch_host_func(host_stream, functools.partial(gate.wait, HANG_S))

    def recorder() -> None:
        try:
            for i in range(fences_n):
                if i == fences_n // 2:
                    gate.set()
                host.stream_launch_host_func(
                    host_stream, functools.partial(passed.__setitem__, i, True)
                )
                fence = EventFence.record(host, host_stream)
                fences.append(fence)
                for inbox in inboxes:
                    inbox.put((i, fence))
        except BaseException as exc:
            errors.append(exc)

    def waiter(k: int) -> None:
        try:
            for _ in range(fences_n):
                i, fence = inboxes[k].get(timeout=HANG_S)
                if k % 3 == 0:
                    fence.wait()
                elif k % 3 == 1:
                    fence.wait(timeout=HANG_S)
                elif not fence.reached():
                    fence.wait()
                # Only after the fence was really reached: the work before it ran, and the
                # worker stamped it (stamp_ns raises not_ready otherwise).
                if not passed[i]:
                    errors.append(f"waiter {k} returned before fence {i} was reached")
                host.stamp_ns(fence.event)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=waiter, args=(k,)) for k in range(waiters_n)]
    threads.append(threading.Thread(target=recorder))
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join(60)
            assert not thread.is_alive(), "deadlock: a thread did not finish within 60 s"
    finally:
        gate.set()
    assert errors == []
    assert len(fences) == fences_n
    for fence in fences:
        fence.close()
    assert host.live_handles() == (0, 1)


class Tracked:
    """The host backend, noting every event call in flight and every destroy; ``violations``
    lists each destroy made while a call used the event, each call on a destroyed event, and
    each second destroy. ``entered`` is set by every call on an event, and ``entered_by`` holds
    the threads that made one."""

    BACKEND = "tracked"

    def __init__(self, inner: HostBackend) -> None:
        self.inner = inner
        self.violations: list[str] = []
        self.destroys = 0
        self.entered = threading.Event()
        self.entered_by: set[int] = set()
        self._lock = threading.Lock()
        self._in_flight: dict[int, int] = {}
        # Destroyed events by id, held so that no later event is given the same id.
        self._destroyed: dict[int, Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # every other call, as the host backend makes it

    def _use(self, call: str, event: Any, fn: Any, *args: Any) -> Any:
        key = id(event)
        with self._lock:
            if key in self._destroyed:
                self.violations.append(f"{call} on a destroyed event")
            self._in_flight[key] = self._in_flight.get(key, 0) + 1
            self.entered_by.add(threading.get_ident())
        self.entered.set()
        try:
            return fn(*args)
        finally:
            with self._lock:
                self._in_flight[key] -= 1

    def event_query(self, event: Any) -> bool:
        reached: bool = self._use("event_query", event, self.inner.event_query, event)
        return reached

    def event_wait(self, event: Any) -> None:
        self._use("event_wait", event, self.inner.event_wait, event)

    def event_destroy(self, event: Any) -> None:
        key = id(event)
        with self._lock:
            if self._in_flight.get(key):
                self.violations.append("event_destroy while a call used the event")
            if key in self._destroyed:
                self.violations.append("a second event_destroy")
            self._destroyed[key] = event
            self.destroys += 1
        self.inner.event_destroy(event)


# The racing waits switch threads every 50 us (the default is 5 ms): often enough to land
# between any two of a fence's calls, seldom enough to stay quick on a loaded machine.
SWITCH_S = 50e-6


def _race(
    fence: EventFence[Any, Any], call: Any, start: threading.Barrier, errors: list[BaseException]
) -> None:
    # One waiter of the race below: what it raises goes to errors, but the refusal of a call
    # that the close came first for (a call already in the backend finishes normally: the
    # backend defers the destroy behind it).
    try:
        start.wait(HANG_S)
        call()
    except EventStateError as exc:
        if not fence.closed or "the fence is closed" not in str(exc):
            errors.append(exc)
    except BaseException as exc:
        errors.append(exc)


def test_closes_racing_waits_never_destroy_under_a_call(
    host: HostBackend, host_stream: Stream[Any]
) -> None:
    # Four threads wait on each fence (wait(), wait(timeout), reached()) on a held stream, and
    # the main thread closes it once a wait reached the backend, the interpreter switching
    # threads often (SWITCH_S): every fence is destroyed once, and its event released by the
    # host backend once no call uses it; every call returns normally or is refused as closed.
    api = Tracked(host)
    fences_n, threads_n = 200, 4
    errors: list[BaseException] = []
    switch = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_S)
    try:
        for i in range(fences_n):
            # Held, so that the waits are still inside the backend when the close comes.
            gate = threading.Event()
            host.stream_launch_host_func(host_stream, partial(gate.wait, HANG_S))
            try:
                fence = EventFence.record(api, host_stream)
                api.entered.clear()
                api.entered_by.clear()
                start = threading.Barrier(threads_n + 1)
                calls = [fence.wait, fence.reached, partial(fence.wait, HANG_S), fence.wait]
                threads = [
                    threading.Thread(
                        target=_race,
                        args=(fence, calls[(i + k) % 4], start, errors),
                        daemon=True,
                    )
                    for k in range(threads_n)
                ]
                for thread in threads:
                    thread.start()
                start.wait(HANG_S)
                assert api.entered.wait(HANG_S), "no wait reached the backend"
                fence.close()
            finally:
                gate.set()
            for thread in threads:
                thread.join(HANG_S)
                assert not thread.is_alive(), "a wait never returned"
    finally:
        sys.setswitchinterval(switch)
    assert errors == []
    assert "a second event_destroy" not in api.violations
    assert api.destroys == fences_n
    assert host.live_handles().events == 0


# -- import cost --------------------------------------------------------------------------------


def test_importing_eventapi_leaves_asyncio_unimported() -> None:
    # wait_async imports asyncio when it runs: asyncio brings ssl, socket and subprocess, which
    # would more than double what `import eventapi` costs a program that never awaits a fence.
    code = "import sys, eventapi; print(sorted(m for m in sys.modules if m.startswith('asyncio')))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


# -- one owner ----------------------------------------------------------------------------------


@pytest.mark.parametrize("duplicate", [copy.copy, copy.deepcopy, pickle.dumps])
def test_a_fence_cannot_be_copied_into_a_second_owner(
    host: HostBackend, host_stream: Stream[Any], duplicate: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    with EventFence.record(host, host_stream) as fence:
        with pytest.raises(TypeError, match="EventFence cannot be copied or pickled"):
            duplicate(fence)
        fence.wait()
    gc.collect()
    assert capfd.readouterr() == ("", "")  # no "Exception ignored" from a half-built copy


def test_a_negative_timeout_is_refused_as_the_standard_library_refuses_it(
    host: HostBackend,
) -> None:
    stream = host.stream_create_non_blocking()
    try:
        with EventFence.record(host, stream) as fence:
            with pytest.raises(ValueError, match=r"timeout must be a number of seconds >= 0"):
                fence.wait(timeout=-1)
            fence.wait(timeout=0)  # 0 queries once; the idle stream reached it long ago
            fence.wait()
    finally:
        host.stream_destroy(stream)


def test_a_refusal_names_the_call_the_user_made(host: HostBackend) -> None:
    with pytest.raises(EventStateError, match=r"^EventFence\.record\(api, stream\): .*12345"):
        EventFence.record(host, 12345)
    with pytest.raises(EventStateError, match=r"^EventProfiler\(api, stream\): .*12345"):
        EventProfiler(host, 12345)
    assert host.live_handles() == (0, 0)
