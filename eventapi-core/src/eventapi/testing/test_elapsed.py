"""event_elapsed: integer nanoseconds of device time, clamped at 0, refused until reached."""

from __future__ import annotations

import time

import pytest

from eventapi import DriverError

from ._kit import Kit

DELAY_S = 0.005

# Lower bound on a reading across a host delay of d ns measured inside a host function: the
# start event is stamped before the function begins and the end event after it returns, so
# on one clock the reading is at least d. A device stamps with its own clock: allow two ticks
# of its resolution (CUDA about 0.5 us, HIP 1 us) and the rate difference between device and
# host clocks (about 1e-5, so 0.05 us over 5 ms), rounded up generously to 20 us.
DELAY_TOLERANCE_NS = 20_000

# Readings of adjacent spans add up to the reading of the whole span up to the rounding of
# three readings to the driver's resolution (at most 1 us each on the drivers we know).
ADDITIVITY_TOLERANCE_NS = 5_000

# Upper bound on a reading: both events are stamped between the host's clock read before the
# first record and the one after the last wait returned, so the reading is at most that
# bracket, at the device clock's rate (1e-4 allows a hundred times a quartz's error) plus two
# ticks and the readout, the same 20 us as above. A loaded machine only widens the bracket.
RATE_TOLERANCE = 1e-4


def _delay(kit: Kit, stream: object, measured: list[int]) -> None:
    """Enqueue a host function that sleeps DELAY_S and appends how long it slept, in ns."""

    def sleep() -> None:
        # The sleep is the delay being measured, not synchronization.
        begin = time.perf_counter_ns()
        time.sleep(DELAY_S)
        measured.append(time.perf_counter_ns() - begin)

    kit.call(kit.api.stream_launch_host_func, stream, sleep)


def test_elapsed_is_int_nanoseconds_not_negative(
    eventapi_kit: Kit, eventapi_stream: object
) -> None:
    api = eventapi_kit.api
    start = eventapi_kit.recorded(eventapi_stream)
    end = eventapi_kit.reached(eventapi_stream)
    reading = eventapi_kit.call(api.event_elapsed, start, end)
    assert type(reading) is int, f"event_elapsed must return int nanoseconds, got {reading!r}"
    assert reading >= 0


def test_elapsed_from_an_event_to_itself_is_zero(
    eventapi_kit: Kit, eventapi_stream: object
) -> None:
    api = eventapi_kit.api
    event = eventapi_kit.reached(eventapi_stream)
    assert eventapi_kit.call(api.event_elapsed, event, event) == 0


def test_elapsed_covers_a_known_host_delay(eventapi_kit: Kit, eventapi_stream: object) -> None:
    eventapi_kit.require("SupportsHostFunc")
    api = eventapi_kit.api
    measured: list[int] = []
    opened = time.perf_counter_ns()
    first = eventapi_kit.recorded(eventapi_stream)
    _delay(eventapi_kit, eventapi_stream, measured)
    middle = eventapi_kit.recorded(eventapi_stream)
    _delay(eventapi_kit, eventapi_stream, measured)
    last = eventapi_kit.reached(eventapi_stream)
    bracket = time.perf_counter_ns() - opened
    before, after = measured
    head = eventapi_kit.call(api.event_elapsed, first, middle)
    tail = eventapi_kit.call(api.event_elapsed, middle, last)
    whole = eventapi_kit.call(api.event_elapsed, first, last)
    assert head >= before - DELAY_TOLERANCE_NS, f"{head} ns across a {before} ns host delay"
    assert tail >= after - DELAY_TOLERANCE_NS, f"{tail} ns across a {after} ns host delay"
    assert whole >= max(head, tail), "a longer span read shorter than a part of it"
    assert abs(whole - (head + tail)) <= ADDITIVITY_TOLERANCE_NS, (
        f"spans do not add up: {head} + {tail} != {whole} ns"
    )
    assert whole <= bracket * (1 + RATE_TOLERANCE) + DELAY_TOLERANCE_NS, (
        f"{whole} ns read between two events the host saw recorded and reached within "
        f"{bracket} ns: the readings run fast (a wrong tick rate?)"
    )


@pytest.mark.parametrize("unreached", ["end", "start", "both"])
def test_elapsed_not_ready_while_held(
    eventapi_kit: Kit, eventapi_stream: object, unreached: str
) -> None:
    api = eventapi_kit.api
    reached = eventapi_kit.reached(eventapi_stream)
    hold = eventapi_kit.hold(eventapi_stream)
    pending = eventapi_kit.recorded(eventapi_stream)
    start, end = {
        "end": (reached, pending),
        "start": (pending, reached),
        "both": (pending, pending),
    }[unreached]
    with pytest.raises(DriverError) as info:
        eventapi_kit.call(api.event_elapsed, start, end)
    assert info.value.not_ready, f"an unreached event must raise not_ready, got {info.value}"
    hold.release()
    eventapi_kit.call(api.event_wait, pending)
    assert eventapi_kit.call(api.event_elapsed, start, end) >= 0


def test_elapsed_clamps_a_negative_reading(eventapi_kit: Kit, eventapi_stream: object) -> None:
    # A negative reading cannot be forced on an arbitrary device; a span read backwards, from a
    # later event to an earlier one, is one. With a host function the gap is a known delay.
    api = eventapi_kit.api
    earlier = eventapi_kit.recorded(eventapi_stream)
    measured: list[int] = []
    if eventapi_kit.has("SupportsHostFunc"):
        _delay(eventapi_kit, eventapi_stream, measured)
    later = eventapi_kit.reached(eventapi_stream)
    assert eventapi_kit.call(api.event_elapsed, later, earlier) == 0, "not clamped at 0"
    if measured:
        assert eventapi_kit.call(api.event_elapsed, earlier, later) >= (
            measured[0] - DELAY_TOLERANCE_NS
        )


def test_elapsed_between_events_of_two_streams(eventapi_kit: Kit) -> None:
    # The profiler's anchor: an event on a stream of the profiler's own is compared with the
    # windows' events on the user's stream, so event_elapsed must read across two streams of
    # one backend object. An event waited for before the other was recorded lies before it.
    api = eventapi_kit.api
    first, second = eventapi_kit.stream(), eventapi_kit.stream()
    measured: list[int] = []
    earlier = eventapi_kit.reached(first)
    if eventapi_kit.has("SupportsHostFunc"):
        _delay(eventapi_kit, second, measured)
    later = eventapi_kit.reached(second)
    forward = eventapi_kit.call(api.event_elapsed, earlier, later)
    assert type(forward) is int, f"event_elapsed must return int nanoseconds, got {forward!r}"
    assert forward >= (measured[0] - DELAY_TOLERANCE_NS if measured else 0), (
        f"{forward} ns across a {measured} ns host delay on the second stream"
    )
    assert eventapi_kit.call(api.event_elapsed, later, earlier) == 0, "not clamped at 0"


def test_elapsed_across_streams_ignores_work_queued_later(eventapi_kit: Kit) -> None:
    # An anchor taken on a stream of its own must not wait for work queued on the user's
    # stream after the windows it places: the reading between a reached window event and a
    # reached anchor event is available while the user's stream is still held.
    api = eventapi_kit.api
    user, anchor_stream = eventapi_kit.stream(), eventapi_kit.stream()
    window_end = eventapi_kit.reached(user)
    hold = eventapi_kit.hold(user)
    eventapi_kit.recorded(user)  # later work, held
    anchor = eventapi_kit.reached(anchor_stream)  # bounded: must not wait for `user`
    assert eventapi_kit.call(api.event_elapsed, window_end, anchor) >= 0
    assert eventapi_kit.call(api.event_elapsed, anchor, window_end) == 0, "not clamped at 0"
    assert not hold.released
    hold.release()
