"""The optional capabilities, each tested when the backend declares it and skipped when not."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from eventapi import CaptureError, EventFence

from ._kit import BLOCK_WINDOW_S, Kit

HOST_FUNCS = 5


def test_event_query_false_while_held_true_once_reached(
    eventapi_kit: Kit, eventapi_stream: object
) -> None:
    eventapi_kit.require("SupportsEventQuery")
    api = eventapi_kit.api
    hold = eventapi_kit.hold(eventapi_stream)
    event = eventapi_kit.recorded(eventapi_stream)
    result = eventapi_kit.call(api.event_query, event)  # bounded: a query never blocks
    assert result is False, f"event_query returned {result!r} for an event behind a held stream"
    hold.release()
    eventapi_kit.call(api.event_wait, event)
    assert eventapi_kit.call(api.event_query, event) is True, "reached, yet event_query not True"


def test_fresh_stream_is_not_capturing(eventapi_kit: Kit, eventapi_stream: object) -> None:
    eventapi_kit.require("SupportsCaptureCheck")
    api = eventapi_kit.api
    assert eventapi_kit.call(api.stream_is_capturing, eventapi_stream) is False
    eventapi_kit.reached(eventapi_stream)
    assert eventapi_kit.call(api.stream_is_capturing, eventapi_stream) is False


def test_a_capturing_stream_says_so_and_takes_no_fence(
    eventapi_kit: Kit, eventapi_stream: object
) -> None:
    # What the capture check is for: a fence (or a window) recorded into a capture would time
    # nothing, so EventFence.record refuses one there, and works again once the capture ended.
    eventapi_kit.require("SupportsCaptureCheck")
    api = eventapi_kit.api
    with eventapi_kit.capturing(eventapi_stream):
        assert eventapi_kit.call(api.stream_is_capturing, eventapi_stream) is True, (
            "stream_is_capturing returned False for a stream that is capturing a graph"
        )
        with pytest.raises(CaptureError):
            eventapi_kit.call(EventFence.record, api, eventapi_stream)
    assert eventapi_kit.call(api.stream_is_capturing, eventapi_stream) is False, (
        "stream_is_capturing still returned True after the capture ended"
    )
    fence = eventapi_kit.call(EventFence.record, api, eventapi_stream)
    try:
        eventapi_kit.call(fence.wait)
    finally:
        fence.close()


def test_host_funcs_run_in_order_not_inline(eventapi_kit: Kit, eventapi_stream: object) -> None:
    # A host function is enqueued, not called: it must not run on the launching thread while
    # stream_launch_host_func is still on that thread's stack (a backend that calls it inline
    # serializes the caller behind the stream's work). A thread-local flag set around each
    # launch tells the function where it runs, whatever thread ids the system reuses.
    eventapi_kit.require("SupportsHostFunc")
    api = eventapi_kit.api
    launching = threading.local()
    ran: list[tuple[int, bool]] = []

    def launch(fn: Callable[[], None]) -> None:
        launching.inside = True
        try:
            api.stream_launch_host_func(eventapi_stream, fn)
        finally:
            launching.inside = False

    for index in range(HOST_FUNCS):
        eventapi_kit.call(
            launch,
            lambda index=index: ran.append((index, getattr(launching, "inside", False))),
        )
    # Work recorded after a host function waits for it to return.
    eventapi_kit.reached(eventapi_stream)
    assert [index for index, _ in ran] == list(range(HOST_FUNCS))
    assert not any(inside for _, inside in ran), (
        "a host function ran inside stream_launch_host_func on the launching thread; it must "
        "be enqueued on the stream and run on another thread once the stream reaches it"
    )


def test_host_func_waits_for_earlier_work_on_its_stream(
    eventapi_kit: Kit, eventapi_stream: object
) -> None:
    eventapi_kit.require("SupportsHostFunc")
    api = eventapi_kit.api
    hold = eventapi_kit.hold(eventapi_stream)
    ran = threading.Event()
    eventapi_kit.call(api.stream_launch_host_func, eventapi_stream, ran.set)
    # Given the time to run: a backend running host functions out of order (on a pool, say)
    # would have run it by then.
    assert not ran.wait(BLOCK_WINDOW_S), (
        "a host function ran while earlier work on its stream was held"
    )
    hold.release()
    eventapi_kit.call(api.stream_synchronize, eventapi_stream)
    assert ran.is_set(), "stream_synchronize returned before the host function ran"


def test_host_func_exception_does_not_kill_the_stream(
    eventapi_kit: Kit, eventapi_stream: object
) -> None:
    # The exception is the backend's to log; it must not propagate into a later call or stop
    # the stream.
    eventapi_kit.require("SupportsHostFunc")
    api = eventapi_kit.api
    ran: list[str] = []

    def fail() -> None:
        ran.append("fail")
        raise RuntimeError("a host function failed on purpose (eventapi conformance kit)")

    eventapi_kit.call(api.stream_launch_host_func, eventapi_stream, fail)
    eventapi_kit.call(api.stream_launch_host_func, eventapi_stream, lambda: ran.append("after"))
    eventapi_kit.call(api.stream_synchronize, eventapi_stream)
    assert ran == ["fail", "after"]
    eventapi_kit.reached(eventapi_stream)
