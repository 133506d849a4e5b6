"""Streams: created non-blocking, synchronized, made to wait on events, destroyed."""

from __future__ import annotations

import pytest

from eventapi import EventStateError

from ._kit import BLOCK_WINDOW_S, Kit, failed_destroy, live_counts, second_destroy


def test_stream_create_returns_distinct_streams(eventapi_kit: Kit) -> None:
    first, second = eventapi_kit.stream(), eventapi_kit.stream()
    assert first is not second, "two stream_create_non_blocking calls returned one handle"
    assert first != second, "two stream_create_non_blocking calls returned equal handles"


def test_stream_destroy_releases_the_stream(eventapi_kit: Kit) -> None:
    api = eventapi_kit.api
    events, streams = eventapi_kit.require_live_handles()
    stream = api.stream_create_non_blocking()
    try:
        assert eventapi_kit.require_live_handles() == (events, streams + 1)
    finally:
        eventapi_kit.call(api.stream_destroy, stream)
    assert eventapi_kit.require_live_handles() == (events, streams)


def test_stream_destroy_twice_is_a_no_op(eventapi_kit: Kit) -> None:
    api = eventapi_kit.api
    stream = eventapi_kit.stream()
    eventapi_kit.call(api.stream_destroy, stream)
    after_first = live_counts(api)
    second_destroy(eventapi_kit, api.stream_destroy, stream)
    assert live_counts(api) == after_first, "the second destroy released the stream again"


def test_failed_stream_destroy_leaves_it_closed_and_uncounted(eventapi_kit: Kit) -> None:
    api = eventapi_kit.api
    stream = eventapi_kit.stream()
    eventapi_kit.reached(stream)
    failed_destroy(eventapi_kit, api.stream_destroy, stream)
    with pytest.raises(EventStateError):
        eventapi_kit.call(api.stream_synchronize, stream)


def test_stream_synchronize_on_an_idle_stream_returns(
    eventapi_kit: Kit, eventapi_stream: object
) -> None:
    eventapi_kit.call(eventapi_kit.api.stream_synchronize, eventapi_stream)


def test_stream_synchronize_blocks_until_drained(
    eventapi_kit: Kit, eventapi_stream: object
) -> None:
    api = eventapi_kit.api
    hold = eventapi_kit.hold(eventapi_stream)
    event = eventapi_kit.recorded(eventapi_stream)
    waiter = eventapi_kit.waiter(api.stream_synchronize, eventapi_stream, holds=[hold])
    waiter.assert_blocked()
    hold.release()
    waiter.join()
    if eventapi_kit.has("SupportsEventQuery"):
        assert eventapi_kit.call(api.event_query, event), "synchronized, yet its event unreached"
    eventapi_kit.call(api.event_wait, event)


def test_non_blocking_streams_do_not_wait_for_each_other(eventapi_kit: Kit) -> None:
    api = eventapi_kit.api
    held, free = eventapi_kit.stream(), eventapi_kit.stream()
    hold = eventapi_kit.hold(held)
    assert hold.started.wait(eventapi_kit.timeout), "the held stream never reached its hold"
    behind = eventapi_kit.recorded(held)
    eventapi_kit.reached(free)  # bounded: must not wait for the held stream
    eventapi_kit.call(api.stream_synchronize, free)
    # The free stream drained while the held one was still inside its host function.
    assert not hold.finished.is_set(), "the held stream moved past its hold meanwhile"
    eventapi_kit.assert_unreached(behind, hold)
    hold.release()
    eventapi_kit.call(api.event_wait, behind)


def test_stream_wait_event_orders_streams_without_blocking_the_host(eventapi_kit: Kit) -> None:
    api = eventapi_kit.api
    first, second = eventapi_kit.stream(), eventapi_kit.stream()
    hold = eventapi_kit.hold(first)
    marker = eventapi_kit.recorded(first)
    # Bounded: the host must not block in stream_wait_event while `first` is held.
    eventapi_kit.call(api.stream_wait_event, second, marker)
    after = eventapi_kit.recorded(second)
    eventapi_kit.assert_unreached(after, hold)
    waiter = eventapi_kit.waiter(api.event_wait, after, holds=[hold])
    waiter.assert_blocked()
    hold.release()
    waiter.join()
    eventapi_kit.call(api.event_wait, marker)


def test_stream_wait_event_on_a_reached_event_does_not_hold_the_stream(
    eventapi_kit: Kit,
) -> None:
    api = eventapi_kit.api
    first, second = eventapi_kit.stream(), eventapi_kit.stream()
    marker = eventapi_kit.reached(first)
    eventapi_kit.call(api.stream_wait_event, second, marker)
    eventapi_kit.reached(second)


def test_stream_destroy_with_pending_work_lets_it_complete(eventapi_kit: Kit) -> None:
    # A stream destroyed while work is queued: CUDA's destroy returns at once and releases the
    # stream once the work is done; ROCm's hipStreamDestroy may wait for that work instead.
    # Either is allowed. Cutting the work short is not, nor hanging once it can finish.
    api = eventapi_kit.api
    stream = eventapi_kit.stream()
    hold = eventapi_kit.hold(stream)
    eventapi_kit.recorded(stream)
    destroy = eventapi_kit.waiter(api.stream_destroy, stream)
    destroy.watch(BLOCK_WINDOW_S)  # the destroy reaches the backend with the work still held
    hold.release()
    destroy.join()
    assert hold.finished.wait(eventapi_kit.timeout), (
        "the work queued on a destroyed stream never ran: a destroy must let it complete"
    )
