"""The optional capabilities, each tested when the backend declares it and skipped when not."""

from __future__ import annotations

import threading

from ._kit import Kit

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


def test_host_funcs_run_in_stream_order_on_another_thread(
    eventapi_kit: Kit, eventapi_stream: object
) -> None:
    eventapi_kit.require("SupportsHostFunc")
    api = eventapi_kit.api
    ran: list[tuple[int, int]] = []
    for index in range(HOST_FUNCS):
        eventapi_kit.call(
            api.stream_launch_host_func,
            eventapi_stream,
            lambda index=index: ran.append((index, threading.get_ident())),
        )
    # Work recorded after a host function waits for it to return.
    eventapi_kit.reached(eventapi_stream)
    assert [index for index, _ in ran] == list(range(HOST_FUNCS))
    assert threading.get_ident() not in {ident for _, ident in ran}, "ran on the caller's thread"


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
