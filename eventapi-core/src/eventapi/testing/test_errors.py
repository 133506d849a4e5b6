"""Typed errors: misuse is refused with EventStateError before the driver, with a hint."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from eventapi import EventStateError

from ._kit import Kit

# A refusal says what to do instead; one of these verbs names the fix.
HINTS = ("create", "record", "pass", "call", "use")

# name -> (capability it needs or None, call(api, bad_event, good_stream, reached_event))
EVENT_CALLS: dict[str, tuple[str | None, Callable[[Any, Any, Any, Any], object]]] = {
    "event_wait": (None, lambda api, bad, stream, ok: api.event_wait(bad)),
    "event_elapsed(start)": (None, lambda api, bad, stream, ok: api.event_elapsed(bad, ok)),
    "event_elapsed(end)": (None, lambda api, bad, stream, ok: api.event_elapsed(ok, bad)),
    "stream_wait_event": (None, lambda api, bad, stream, ok: api.stream_wait_event(stream, bad)),
    "event_query": ("SupportsEventQuery", lambda api, bad, stream, ok: api.event_query(bad)),
}
# Calls that take an event that was never recorded; the rest also refuse it once destroyed.
EVENT_CALLS_ANY_STATE = {
    **EVENT_CALLS,
    "event_record": (None, lambda api, bad, stream, ok: api.event_record(bad, stream)),
}

# name -> (capability or None, call(api, bad_stream, fresh_event, reached_event))
STREAM_CALLS: dict[str, tuple[str | None, Callable[[Any, Any, Any, Any], object]]] = {
    "event_record": (None, lambda api, bad, event, ok: api.event_record(event, bad)),
    "stream_synchronize": (None, lambda api, bad, event, ok: api.stream_synchronize(bad)),
    "stream_wait_event": (None, lambda api, bad, event, ok: api.stream_wait_event(bad, ok)),
    "stream_is_capturing": (
        "SupportsCaptureCheck",
        lambda api, bad, event, ok: api.stream_is_capturing(bad),
    ),
    "stream_launch_host_func": (
        "SupportsHostFunc",
        lambda api, bad, event, ok: api.stream_launch_host_func(bad, lambda: None),
    ),
}


def _refused(kit: Kit, call: Callable[[], object], what: str) -> None:
    with pytest.raises(EventStateError) as info:
        kit.call(call, what=what)
    message = str(info.value)
    assert message, f"{what}: EventStateError without a message"
    assert any(hint in message.lower() for hint in HINTS), (
        f"{what}: the message {message!r} does not say what to do (none of {HINTS})"
    )


def _need(kit: Kit, capability: str | None) -> None:
    if capability is not None:
        kit.require(capability)


@pytest.mark.parametrize("name", list(EVENT_CALLS))
def test_never_recorded_event_is_refused(
    eventapi_kit: Kit, eventapi_stream: object, name: str
) -> None:
    # A wait on an event that marks nothing is a bug; CUDA would call it complete.
    capability, call = EVENT_CALLS[name]
    _need(eventapi_kit, capability)
    api = eventapi_kit.api
    fresh, ok = eventapi_kit.event(), eventapi_kit.reached(eventapi_stream)
    _refused(eventapi_kit, lambda: call(api, fresh, eventapi_stream, ok), name)


@pytest.mark.parametrize("recorded", [True, False], ids=["recorded", "never-recorded"])
@pytest.mark.parametrize("name", list(EVENT_CALLS_ANY_STATE))
def test_destroyed_event_is_refused(
    eventapi_kit: Kit, eventapi_stream: object, name: str, recorded: bool
) -> None:
    capability, call = EVENT_CALLS_ANY_STATE[name]
    _need(eventapi_kit, capability)
    api = eventapi_kit.api
    ok = eventapi_kit.reached(eventapi_stream)
    dead = eventapi_kit.reached(eventapi_stream) if recorded else eventapi_kit.event()
    eventapi_kit.call(api.event_destroy, dead)
    _refused(eventapi_kit, lambda: call(api, dead, eventapi_stream, ok), name)


@pytest.mark.parametrize("name", list(STREAM_CALLS))
def test_destroyed_stream_is_refused(eventapi_kit: Kit, eventapi_stream: object, name: str) -> None:
    capability, call = STREAM_CALLS[name]
    _need(eventapi_kit, capability)
    api = eventapi_kit.api
    ok = eventapi_kit.reached(eventapi_stream)
    dead = eventapi_kit.stream()
    eventapi_kit.call(api.stream_destroy, dead)
    event = eventapi_kit.event()
    _refused(eventapi_kit, lambda: call(api, dead, event, ok), name)


@pytest.mark.parametrize("name", [*EVENT_CALLS_ANY_STATE, "event_destroy"])
def test_foreign_object_as_event_is_refused(
    eventapi_kit: Kit, eventapi_stream: object, name: str
) -> None:
    api = eventapi_kit.api
    ok = eventapi_kit.reached(eventapi_stream)
    if name == "event_destroy":
        _refused(eventapi_kit, lambda: api.event_destroy(object()), name)
        return
    capability, call = EVENT_CALLS_ANY_STATE[name]
    _need(eventapi_kit, capability)
    _refused(eventapi_kit, lambda: call(api, object(), eventapi_stream, ok), name)


@pytest.mark.parametrize("name", [*STREAM_CALLS, "stream_destroy"])
def test_foreign_object_as_stream_is_refused(
    eventapi_kit: Kit, eventapi_stream: object, name: str
) -> None:
    api = eventapi_kit.api
    if name == "stream_destroy":
        _refused(eventapi_kit, lambda: api.stream_destroy(object()), name)
        return
    capability, call = STREAM_CALLS[name]
    _need(eventapi_kit, capability)
    ok, event = eventapi_kit.reached(eventapi_stream), eventapi_kit.event()
    _refused(eventapi_kit, lambda: call(api, object(), event, ok), name)


@pytest.mark.parametrize("name", [*EVENT_CALLS_ANY_STATE, "event_destroy"])
def test_event_of_another_backend_object_is_refused(
    eventapi_kit: Kit, eventapi_second_api: Any, eventapi_stream: object, name: str
) -> None:
    api, other = eventapi_kit.api, eventapi_second_api
    ok = eventapi_kit.reached(eventapi_stream)
    theirs = eventapi_kit.event(other)
    eventapi_kit.call(other.event_record, theirs, eventapi_kit.stream(other))
    eventapi_kit.call(other.event_wait, theirs)
    if name == "event_destroy":
        _refused(eventapi_kit, lambda: api.event_destroy(theirs), name)
        return
    capability, call = EVENT_CALLS_ANY_STATE[name]
    _need(eventapi_kit, capability)
    _refused(eventapi_kit, lambda: call(api, theirs, eventapi_stream, ok), name)


@pytest.mark.parametrize("name", [*STREAM_CALLS, "stream_destroy"])
def test_stream_of_another_backend_object_is_refused(
    eventapi_kit: Kit, eventapi_second_api: Any, eventapi_stream: object, name: str
) -> None:
    api, other = eventapi_kit.api, eventapi_second_api
    theirs = eventapi_kit.stream(other)
    if name == "stream_destroy":
        _refused(eventapi_kit, lambda: api.stream_destroy(theirs), name)
        return
    capability, call = STREAM_CALLS[name]
    _need(eventapi_kit, capability)
    ok, event = eventapi_kit.reached(eventapi_stream), eventapi_kit.event()
    _refused(eventapi_kit, lambda: call(api, theirs, event, ok), name)
