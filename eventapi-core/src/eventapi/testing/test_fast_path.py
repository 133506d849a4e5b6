"""The fast path (``SupportsFastPath``): the same readings, errors and handles as the plain calls.

A backend that offers the fused calls is used through them by every fence and profiling window,
so each must be exactly the plain calls it fuses: a reading of the same two events is the same
number, the same misuse raises the same exception type, and the live handles afterwards are the
same. Skipped, with the reason, for a backend without the capability.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from eventapi import DriverError, EventStateError

from ._kit import Kit, live_counts


@pytest.fixture
def kit(eventapi_kit: Kit) -> Kit:
    eventapi_kit.require("SupportsFastPath")
    return eventapi_kit


def _raised(kit: Kit, call: Callable[[], object], what: str) -> type[BaseException] | None:
    """The type of what ``call`` raised (bounded), or None when it returned."""
    try:
        kit.call(call, what=what)
    except Exception as exc:
        return type(exc)
    return None


def test_adopt_stream_returns_the_backends_own_stream_as_it_is(
    kit: Kit, eventapi_stream: object
) -> None:
    assert kit.call(kit.api.adopt_stream, eventapi_stream) is eventapi_stream
    dead = kit.stream()
    kit.call(kit.api.stream_destroy, dead)
    with pytest.raises(EventStateError):
        kit.call(kit.api.adopt_stream, dead)


def test_event_record_new_is_a_create_and_a_record(kit: Kit, eventapi_stream: object) -> None:
    api = kit.api
    before = live_counts(api)
    fused = kit.call(api.event_record_new, eventapi_stream)
    assert fused is not None, "event_record_new returned None on a stream that is not capturing"
    after_fused = live_counts(api)
    plain = kit.recorded(eventapi_stream)
    after_plain = live_counts(api)
    if before is not None and after_fused is not None and after_plain is not None:
        assert after_fused[0] - before[0] == after_plain[0] - after_fused[0] == 1, (
            f"live events went {before} -> {after_fused} (event_record_new) -> {after_plain} "
            "(event_create and event_record): each must add exactly one event"
        )
    # Recorded like the plain one: waited on, timed against it, in stream order.
    kit.call(api.event_wait, plain)
    kit.call(api.event_wait, fused)
    assert kit.call(api.event_elapsed, fused, plain) >= 0
    kit.call(api.event_destroy, fused)
    after_destroy = live_counts(api)
    if after_plain is not None and after_destroy is not None:
        assert after_destroy[0] == after_plain[0] - 1, (
            "destroying the event from event_record_new did not release it"
        )


def test_the_fused_reading_of_two_events_equals_the_plain_one(
    kit: Kit, eventapi_stream: object
) -> None:
    api = kit.api
    events = [kit.event() for _ in range(4)]
    for event in events:
        assert kit.call(api.event_record_unless_capturing, event, eventapi_stream) is True
    kit.call(api.event_wait, events[-1])
    starts, ends = [events[0], events[1], events[0]], [events[2], events[3], events[3]]
    pairs = zip(starts, ends, strict=True)
    plain = [kit.call(api.event_elapsed, start, end) for start, end in pairs]
    fused = kit.call(api.event_elapsed_many, starts, ends)
    assert fused == plain, f"event_elapsed_many read {fused}, event_elapsed {plain}"
    assert kit.call(api.event_elapsed_many, [], []) == []
    with pytest.raises(ValueError, match="3 starts but 2 ends"):
        kit.call(api.event_elapsed_many, starts, ends[:2])


def test_an_unreached_event_is_not_ready_through_both(kit: Kit, eventapi_stream: object) -> None:
    api = kit.api
    start = kit.reached(eventapi_stream)
    hold = kit.hold(eventapi_stream)
    end = kit.event()
    assert kit.call(api.event_record_unless_capturing, end, eventapi_stream) is True
    with pytest.raises(DriverError) as plain:
        kit.call(api.event_elapsed, start, end)
    with pytest.raises(DriverError) as fused:
        kit.call(api.event_elapsed_many, [start], [end])
    assert plain.value.not_ready, plain.value
    assert fused.value.not_ready, fused.value
    hold.release()
    kit.call(api.event_wait, end)


def test_misuse_raises_the_same_types_through_both(kit: Kit, eventapi_stream: object) -> None:
    api = kit.api
    ok = kit.reached(eventapi_stream)
    never = kit.event()
    closed = kit.reached(eventapi_stream)
    kit.call(api.event_destroy, closed)
    dead = kit.stream()
    kit.call(api.stream_destroy, dead)
    fresh = kit.event()
    cases: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
        "never-recorded event read": (
            lambda: api.event_elapsed(never, ok),
            lambda: api.event_elapsed_many([never], [ok]),
        ),
        "destroyed event read": (
            lambda: api.event_elapsed(ok, closed),
            lambda: api.event_elapsed_many([ok], [closed]),
        ),
        "destroyed event recorded": (
            lambda: api.event_record(closed, eventapi_stream),
            lambda: api.event_record_unless_capturing(closed, eventapi_stream),
        ),
        "record into a destroyed stream": (
            lambda: api.event_record(fresh, dead),
            lambda: api.event_record_unless_capturing(fresh, dead),
        ),
        "new event in a destroyed stream": (
            lambda: api.event_record(fresh, dead),
            lambda: api.event_record_new(dead),
        ),
    }
    before = live_counts(api)
    for what, (plain_call, fused_call) in cases.items():
        plain = _raised(kit, plain_call, f"{what}, plain")
        fused = _raised(kit, fused_call, f"{what}, fused")
        assert plain is not None, f"{what}: the plain call was not refused"
        assert fused is plain, (
            f"{what}: the plain call raised {plain}, the fused call {fused}: the same misuse "
            "must raise the same exception type through both paths"
        )
    assert live_counts(api) == before, "a refused fused call changed the live handles"


def test_another_objects_handles_are_refused_through_both(
    kit: Kit, eventapi_second_api: Any
) -> None:
    api, other = kit.api, eventapi_second_api
    mine = kit.stream()
    theirs_stream = kit.stream(other)
    theirs = kit.event(other)
    kit.call(other.event_record, theirs, theirs_stream)
    kit.call(other.event_wait, theirs)
    ok = kit.reached(mine)
    fresh = kit.event()
    cases: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
        "foreign event read": (
            lambda: api.event_elapsed(ok, theirs),
            lambda: api.event_elapsed_many([ok], [theirs]),
        ),
        "foreign event recorded": (
            lambda: api.event_record(theirs, mine),
            lambda: api.event_record_unless_capturing(theirs, mine),
        ),
        "record into a foreign stream": (
            lambda: api.event_record(fresh, theirs_stream),
            lambda: api.event_record_unless_capturing(fresh, theirs_stream),
        ),
    }
    for what, (plain_call, fused_call) in cases.items():
        plain = _raised(kit, plain_call, f"{what}, plain")
        fused = _raised(kit, fused_call, f"{what}, fused")
        for path, raised in (("plain", plain), ("fused", fused)):
            assert raised is EventStateError, (
                f"{what}: the {path} call raised {raised}; both paths must refuse another "
                "backend object's handle with EventStateError"
            )


def test_a_capturing_stream_gets_nothing_through_both(kit: Kit, eventapi_stream: object) -> None:
    api = kit.api
    kit.require("SupportsCaptureCheck")
    event = kit.event()
    before = live_counts(api)
    with kit.capturing(eventapi_stream):
        assert kit.call(api.stream_is_capturing, eventapi_stream) is True
        assert kit.call(api.event_record_unless_capturing, event, eventapi_stream) is False
        assert kit.call(api.event_record_new, eventapi_stream) is None
    assert live_counts(api) == before, "a capture-refused fused call created a handle"
    with pytest.raises(EventStateError):
        kit.call(api.event_wait, event)  # nothing was recorded into the capture
