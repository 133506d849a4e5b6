"""Events: created with timing, recorded without blocking, waited on from any thread, released."""

from __future__ import annotations

import itertools

import pytest

from eventapi import EventStateError

from ._kit import Kit, failed_destroy, live_counts, second_destroy

WAITERS = 8
MANY_EVENTS = 32


def test_event_create_returns_distinct_events(eventapi_kit: Kit) -> None:
    first, second = eventapi_kit.event(), eventapi_kit.event()
    assert first is not second, "two event_create calls returned one handle"
    assert first != second, "two event_create calls returned equal handles"


def test_created_event_can_be_timed(eventapi_kit: Kit, eventapi_stream: object) -> None:
    # Timing enabled is the point of event_create: two reached events of it have a span.
    api = eventapi_kit.api
    start = eventapi_kit.recorded(eventapi_stream)
    end = eventapi_kit.reached(eventapi_stream)
    assert eventapi_kit.call(api.event_elapsed, start, end) >= 0


def test_event_destroy_releases_the_event(eventapi_kit: Kit) -> None:
    api = eventapi_kit.api
    events, streams = eventapi_kit.require_live_handles()
    event = api.event_create()
    try:
        assert eventapi_kit.require_live_handles() == (events + 1, streams)
    finally:
        api.event_destroy(event)
    assert eventapi_kit.require_live_handles() == (events, streams)


def test_event_destroy_twice_is_a_no_op(eventapi_kit: Kit, eventapi_stream: object) -> None:
    # The second destroy returns and raises nothing, and does not reach the driver (a double
    # free there is undefined behaviour): the event is counted released once.
    api = eventapi_kit.api
    event = eventapi_kit.reached(eventapi_stream)
    api.event_destroy(event)
    after_first = live_counts(api)
    second_destroy(eventapi_kit, api.event_destroy, event)
    if after_first is not None:
        assert live_counts(api) == after_first, "the second destroy released the event again"


def test_never_recorded_event_destroy_twice_is_a_no_op(eventapi_kit: Kit) -> None:
    api = eventapi_kit.api
    event = eventapi_kit.event()
    eventapi_kit.call(api.event_destroy, event)
    after_first = live_counts(api)
    second_destroy(eventapi_kit, api.event_destroy, event)
    assert live_counts(api) == after_first, "the second destroy released the event again"


def test_failed_event_destroy_leaves_it_closed_and_uncounted(
    eventapi_kit: Kit, eventapi_stream: object
) -> None:
    api = eventapi_kit.api
    event = eventapi_kit.reached(eventapi_stream)
    failed_destroy(eventapi_kit, api.event_destroy, event)
    with pytest.raises(EventStateError):
        eventapi_kit.call(api.event_wait, event)


def test_event_record_returns_once_queued(eventapi_kit: Kit, eventapi_stream: object) -> None:
    api = eventapi_kit.api
    hold = eventapi_kit.hold(eventapi_stream)
    event = eventapi_kit.event()
    eventapi_kit.call(api.event_record, event, eventapi_stream)  # returns while held
    eventapi_kit.assert_unreached(event, hold)
    hold.release()
    eventapi_kit.call(api.event_wait, event)


def test_event_wait_blocks_until_reached(eventapi_kit: Kit, eventapi_stream: object) -> None:
    api = eventapi_kit.api
    hold = eventapi_kit.hold(eventapi_stream)
    event = eventapi_kit.recorded(eventapi_stream)
    waiter = eventapi_kit.waiter(api.event_wait, event, holds=[hold])
    waiter.assert_blocked()
    hold.release()
    waiter.join()


def test_event_wait_on_a_reached_event_returns_at_once(
    eventapi_kit: Kit, eventapi_stream: object
) -> None:
    api = eventapi_kit.api
    event = eventapi_kit.reached(eventapi_stream)
    eventapi_kit.call(api.event_wait, event)
    eventapi_kit.call(api.event_wait, event)


def test_event_wait_on_another_thread_than_the_record(
    eventapi_kit: Kit, eventapi_stream: object
) -> None:
    # The seed: an event is recorded on the server's thread and read back on whichever thread
    # waits. Each kit.call runs on a fresh thread that never called the backend before.
    api = eventapi_kit.api
    event = eventapi_kit.event()
    eventapi_kit.call(api.event_record, event, eventapi_stream, what="event_record on thread A")
    eventapi_kit.call(api.event_wait, event, what="event_wait on thread B")


def test_many_threads_wait_on_one_event(eventapi_kit: Kit, eventapi_stream: object) -> None:
    api = eventapi_kit.api
    hold = eventapi_kit.hold(eventapi_stream)
    event = eventapi_kit.recorded(eventapi_stream)
    waiters = [eventapi_kit.waiter(api.event_wait, event, holds=[hold]) for _ in range(WAITERS)]
    waiters[0].assert_blocked()  # one observation window covers them all
    assert all(w.blocked for w in waiters), "a waiter returned while the stream was held"
    hold.release()
    for waiter in waiters:
        waiter.join()


def test_rerecorded_event_marks_the_latest_record(
    eventapi_kit: Kit, eventapi_stream: object
) -> None:
    # Re-recording is allowed (event pools reuse events) and, as in CUDA, a wait is then for
    # the latest record, not for one reached before.
    api = eventapi_kit.api
    event = eventapi_kit.reached(eventapi_stream)
    hold = eventapi_kit.hold(eventapi_stream)
    eventapi_kit.call(api.event_record, event, eventapi_stream)
    eventapi_kit.assert_unreached(event, hold)
    hold.release()
    eventapi_kit.call(api.event_wait, event)


def test_event_destroy_while_recorded_and_pending(
    eventapi_kit: Kit, eventapi_stream: object
) -> None:
    # An owner may drop a fence before the device reached it; the destroy returns at once.
    api = eventapi_kit.api
    hold = eventapi_kit.hold(eventapi_stream)
    event = eventapi_kit.recorded(eventapi_stream)
    eventapi_kit.call(api.event_destroy, event)
    hold.release()
    eventapi_kit.call(api.stream_synchronize, eventapi_stream)


def test_event_destroy_while_another_thread_waits(
    eventapi_kit: Kit, eventapi_stream: object
) -> None:
    # A fence closed while another thread waits on it: the destroy returns, nothing crashes,
    # and the waiter returns normally or, if the destroy came first, with EventStateError.
    api = eventapi_kit.api
    hold = eventapi_kit.hold(eventapi_stream)
    event = eventapi_kit.recorded(eventapi_stream)
    # The waiter may enter event_wait before or after the destroy; both orders are allowed.
    waiter = eventapi_kit.waiter(api.event_wait, event, holds=[hold])
    eventapi_kit.call(api.event_destroy, event)
    hold.release()
    waiter.join(allow=(EventStateError,))


def test_many_events_on_one_stream_are_reached_in_order(
    eventapi_kit: Kit, eventapi_stream: object
) -> None:
    # A stream runs its work in the order it was queued: once the last event is reached, every
    # earlier one is, and each one's timestamp is at or after the one recorded before it. The
    # events queue up behind a held stream where the backend can hold one, so that a backend
    # running a backlog in another order has the chance to. Read the wrong way round, two
    # in-order events span a negative time, which event_elapsed clamps to exactly 0: anything
    # above 0 is a later event stamped before an earlier one.
    api = eventapi_kit.api
    hold = eventapi_kit.hold(eventapi_stream) if eventapi_kit.has("SupportsHostFunc") else None
    events = [eventapi_kit.recorded(eventapi_stream) for _ in range(MANY_EVENTS)]
    if hold is not None:
        hold.release()
    eventapi_kit.call(api.event_wait, events[-1])
    if eventapi_kit.has("SupportsEventQuery"):
        unreached = [
            i for i, event in enumerate(events) if not eventapi_kit.call(api.event_query, event)
        ]
        assert not unreached, (
            f"events {unreached} of {MANY_EVENTS} recorded into one stream were not reached "
            "when the last one was: a stream must run its work in the order it was queued"
        )
    for i, (earlier, later) in enumerate(itertools.pairwise(events)):
        backwards = eventapi_kit.call(api.event_elapsed, later, earlier)
        assert backwards == 0, (
            f"event {i + 1} on a stream is stamped {backwards} ns before event {i}, which was "
            "recorded before it: a stream must run its work in the order it was queued"
        )
