"""The anchor: spans land on the host clock within the stated uncertainty of the truth.

The host backend stamps each event with ``time.perf_counter_ns()`` on its stream's worker, and
``HostBackend.stamp_ns`` reads that stamp back: the truth a placement is compared against. The
profiler's own events are private, so each window is fenced by two marker events recorded on
the same stream just before and just after it opens (and again around its stop). The stream
runs in order, so the window's true start stamp lies between the two markers' stamps, and the
placed ``start_ns`` must lie within ``uncertainty_ns`` of that interval: no extra tolerance.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any, cast

import pytest
from emulated_driver import DriverName, load

import eventapi
from eventapi import Anchor, EventProfiler, EventStateError
from eventapi._profiling._anchor import (
    ANCHOR_SAMPLES,
    Earlier,
    Placement,
    _reading_error,
    sample_anchor,
)
from eventapi.host import HostBackend

# Bounds a broken build's hang; never decides whether a working one passes.
HANG_S = 10.0


@pytest.fixture
def api() -> Iterator[HostBackend]:
    backend = HostBackend()
    yield backend
    assert backend.live_handles() == (0, 0), "the test leaked handles"


class Markers:
    """Marker events recorded next to the profiler's own, to bracket their true stamps."""

    def __init__(self, api: HostBackend, stream: Any) -> None:
        self.api = api
        self.stream = stream
        self.events: list[Any] = []

    def mark(self) -> Any:
        event = self.api.event_create()
        self.api.event_record(event, self.stream)
        self.events.append(event)
        return event

    def stamp(self, event: Any) -> int:
        return self.api.stamp_ns(event)

    def close(self) -> None:
        for event in self.events:
            self.api.event_destroy(event)


def test_spans_lie_within_their_own_bound_of_the_true_stamps(api: HostBackend) -> None:
    with EventProfiler(api) as prof:
        markers = Markers(api, prof.stream)
        try:
            for batch in range(3):
                brackets = []
                for i in range(5):
                    before_start = markers.mark()
                    window = prof.start(f"w{batch}.{i}")
                    after_start = markers.mark()
                    # Spread the windows out so that placement errors cannot hide in overlap.
                    api.stream_launch_host_func(prof.stream, lambda: time.sleep(0.001))
                    before_end = markers.mark()
                    window.stop()
                    after_end = markers.mark()
                    brackets.append((before_start, after_start, before_end, after_end))
                spans = prof.collect()
                assert len(spans) == len(brackets)
                for span, (b_s, a_s, b_e, a_e) in zip(spans, brackets, strict=True):
                    u = span.uncertainty_ns
                    assert markers.stamp(b_s) - u <= span.start_ns <= markers.stamp(a_s) + u
                    assert markers.stamp(b_e) - u <= span.end_ns <= markers.stamp(a_e) + u
        finally:
            markers.close()


class RecordSpy:
    """The host backend, noting every event recorded through it.

    Lets a test read the exact stamp of the profiler's own events: each window's two events
    are the last ones recorded by its ``start()`` and ``stop()``, and they keep their stamps
    until the pool hands them to a later window.
    """

    BACKEND = "host"

    def __init__(self, inner: HostBackend) -> None:
        self.inner = inner
        self.recorded: list[Any] = []

    def event_record(self, event: Any, stream: Any) -> None:
        self.inner.event_record(event, stream)
        self.recorded.append(event)

    # A window opens with this call where the backend has the fast path, which the delegation
    # below provides on CPython 3.11 (whose isinstance sees __getattr__) and not on 3.12+.
    def event_record_unless_capturing(self, event: Any, stream: Any) -> bool:
        recorded = self.inner.event_record_unless_capturing(event, stream)
        if recorded:
            self.recorded.append(event)
        return recorded

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_every_span_lies_within_its_own_bound_of_its_true_stamps(api: HostBackend) -> None:
    # The exact form of the test above: the stamps the worker took for the window's own events.
    spy = RecordSpy(api)
    with EventProfiler(spy) as prof:
        for batch in range(3):
            truth = []
            for i in range(5):
                window = prof.start(f"w{batch}.{i}")
                start = spy.recorded[-1]
                api.stream_launch_host_func(prof.stream, lambda: time.sleep(0.001))
                window.stop()
                truth.append((start, spy.recorded[-1]))
            spans = prof.collect()
            assert len(spans) == len(truth)
            for span, (start, end) in zip(spans, truth, strict=True):
                u = span.uncertainty_ns
                assert abs(span.start_ns - api.stamp_ns(start)) <= u
                assert abs(span.end_ns - api.stamp_ns(end)) <= u


class CallClock:
    """The host backend, noting each record and wait it makes with the host clock read just
    before and just after it: ``calls`` holds ``(call, event, began_ns, ended_ns)``."""

    BACKEND = "host"

    def __init__(self, inner: HostBackend) -> None:
        self.inner = inner
        self.calls: list[tuple[str, Any, int, int]] = []

    def _timed(self, call: str, event: Any, *args: Any) -> None:
        began = time.perf_counter_ns()
        try:
            getattr(self.inner, call)(event, *args)
        finally:
            self.calls.append((call, event, began, time.perf_counter_ns()))

    def event_record(self, event: Any, stream: Any) -> None:
        self._timed("event_record", event, stream)

    def event_wait(self, event: Any) -> None:
        self._timed("event_wait", event)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_uncertainty_is_positive_and_half_the_tightest_round_trip(api: HostBackend) -> None:
    clock = CallClock(api)
    with EventProfiler(clock) as prof:
        prof.start("w").stop()
        clock.calls.clear()
        prof.collect()
        anchor = prof.anchor
        samples = clock.calls[-2 * ANCHOR_SAMPLES :]
    assert isinstance(anchor, Anchor)
    # The collect's last calls are the anchor's samples: a record, then a wait on that event.
    assert [call for call, *_ in samples] == ["event_record", "event_wait"] * ANCHOR_SAMPLES
    assert all(samples[i][1] is samples[i + 1][1] for i in range(0, len(samples), 2))
    # A sample's own bracket lies within the end of the wait before it and the start of the
    # record after it: an outer bracket measured here, as wide as this run made it. The anchor
    # keeps the tightest sample and half its bracket, so it is within half of the tightest
    # outer bracket (those of the samples between two others).
    outer = min(samples[i + 2][2] - samples[i - 1][3] for i in range(2, len(samples) - 2, 2))
    assert 0 < anchor.uncertainty_ns <= (outer + 1) // 2, (anchor, outer)


def test_each_collect_takes_a_fresh_anchor_after_its_windows(api: HostBackend) -> None:
    with EventProfiler(api) as prof:
        anchors = []
        for _ in range(3):
            prof.start("w").stop()
            (span,) = prof.collect()
            anchor = prof.anchor
            # The anchor was sampled after the window, so readings from it were never clamped.
            assert anchor.host_ns + anchor.uncertainty_ns >= span.end_ns
            anchors.append(anchor)
    assert anchors[0].host_ns < anchors[1].host_ns < anchors[2].host_ns


def test_a_collect_with_nothing_to_read_keeps_the_anchor(api: HostBackend) -> None:
    with EventProfiler(api) as prof:
        prof.start("w").stop()
        prof.collect()
        anchor = prof.anchor
        assert prof.collect() == []
        assert prof.anchor is anchor


def _hold(api: Any, stream: Any) -> tuple[threading.Event, threading.Event]:
    """Hold ``stream`` until the first event returned is set; the second is set once it ran.

    The hold gives up after HANG_S on its own, so a call that wrongly waits for it returns
    late, with the second event set, instead of hanging the test.
    """
    gate, released = threading.Event(), threading.Event()

    def held() -> None:
        gate.wait(HANG_S)
        released.set()

    api.stream_launch_host_func(stream, held)
    return gate, released


def test_reading_the_anchor_before_any_collect_takes_one_without_waiting_for_work(
    api: HostBackend,
) -> None:
    with EventProfiler(api) as prof:
        gate, released = _hold(api, prof.stream)
        before = time.perf_counter_ns()
        anchor = prof.anchor  # on the profiler's anchor stream: the held stream is not waited
        assert not released.is_set()
        gate.set()
        assert anchor.host_ns - anchor.uncertainty_ns >= before
        assert prof.anchor is anchor


@pytest.mark.parametrize("windows", [1, 3])
@pytest.mark.parametrize("kind", ["host", "cuda", "hip"])
def test_collect_does_not_wait_for_work_queued_after_the_last_window(
    api: HostBackend, kind: str, windows: int
) -> None:
    backend: Any = api
    if kind != "host":  # the real backend, through its binding, on the emulated driver
        load(cast("DriverName", kind))
        backend = eventapi.backend(kind)
    with EventProfiler(backend) as prof:
        for i in range(windows):
            with prof.window(f"w{i}"):
                pass
        gate, released = _hold(backend, prof.stream)
        try:
            spans = prof.collect()
            assert not released.is_set(), "collect() waited for the work queued after it"
        finally:
            gate.set()
        assert [span.name for span in spans] == [f"w{i}" for i in range(windows)]
    assert backend.live_handles() == (0, 0)


def test_the_anchor_of_a_profiler_closed_before_any_is_refused(api: HostBackend) -> None:
    prof = EventProfiler(api)
    prof.close()
    with pytest.raises(EventStateError, match="closed"):
        _ = prof.anchor


def test_a_sample_brackets_the_stamp_of_the_event_it_returns(api: HostBackend) -> None:
    stream = api.stream_create_non_blocking()
    events = [api.event_create() for _ in range(5)]
    try:
        for _ in range(20):
            anchor, chosen = sample_anchor(api, stream, events)
            assert any(chosen is e for e in events)
            truth = api.stamp_ns(chosen)
            assert abs(anchor.host_ns - truth) <= anchor.uncertainty_ns
    finally:
        for event in events:
            api.event_destroy(event)
        api.stream_destroy(stream)


def test_a_sample_needs_events(api: HostBackend) -> None:
    stream = api.stream_create_non_blocking()
    try:
        with pytest.raises(ValueError, match="at least one event"):
            sample_anchor(api, stream, [])
    finally:
        api.stream_destroy(stream)


# -- the bound against every truth the anchors allow ----------------------------------------------
#
# Placement alone, with no backend: two anchors (this one, A, and the previous one, P), the
# device time D read between them, and windows at device distances before A. The truths the
# anchors and readings allow are the extremes of each one's interval (A's true host time within
# u_A of its host_ns, P's within u_P, D, a window's distance and its duration each within its
# reading error), with the clocks' true rate whatever those make it; a window's true start is
# then A's true time minus its distance at that rate, and its end the same at the distance less
# the duration. Both ends must lie within the window's stated bound of each truth, on both
# paths: back from A (a window before P) and between the two.


@pytest.mark.parametrize("u_a", [10, 10_000])
@pytest.mark.parametrize("u_p", [10, 10_000])
@pytest.mark.parametrize("host_over_device", [0.6, 1.0, 2.0])
@pytest.mark.parametrize("interval_ns", [20_000, 300_000, 1_000_000_000])
def test_a_placement_lies_within_its_bound_of_every_truth_the_anchors_allow(
    u_a: int, u_p: int, host_over_device: float, interval_ns: int
) -> None:
    host_a = 10**15
    host_interval = round(interval_ns * host_over_device)
    if host_interval <= u_a + u_p:
        pytest.skip("anchors whose brackets overlap order nothing")
    anchor = Anchor(host_ns=host_a, uncertainty_ns=u_a)
    previous = Anchor(host_ns=host_a - host_interval, uncertainty_ns=u_p)
    reading = _reading_error(interval_ns)
    placement = Placement(anchor, (Earlier(previous, interval_ns, reading),))
    befores = [0, interval_ns // 3, interval_ns // 2, interval_ns, 2 * interval_ns]
    befores.append(50 * interval_ns)
    for before_ns, thirds in itertools.product(befores, (0, 1, 3)):
        duration_ns = before_ns * thirds // 3  # none, a third of the way, all the way
        (start_ns,), (end_ns,), (bound_ns,) = placement.spans([before_ns], [duration_ns])
        # The window's distance and its duration are readings too, each within its error.
        own, length = _reading_error(before_ns), _reading_error(duration_ns)
        truths = itertools.product(
            (-u_a, u_a),
            (-u_p, u_p),
            (-reading, reading),
            (max(0, before_ns - own), before_ns + own),
            (max(0, duration_ns - length), duration_ns + length),
        )
        for off_a, off_p, device_off, true_before, true_duration in truths:
            true_a = host_a - off_a
            true_interval = host_interval - off_a + off_p
            to_host = true_interval / (interval_ns + device_off)
            true_start = true_a - true_before * to_host
            true_end = true_a - max(0, true_before - true_duration) * to_host
            for end, placed_ns, true_ns in (
                ("start", start_ns, true_start),
                ("end", end_ns, true_end),
            ):
                assert abs(placed_ns - true_ns) <= bound_ns, (
                    f"the {end} of a window {before_ns} ns before the anchor, {duration_ns} ns "
                    f"long: placed {placed_ns - true_ns:+.0f} ns from a truth the anchors and "
                    f"readings allow, bound {bound_ns} ns"
                )


@pytest.mark.parametrize("host_ns", [2**53 + 1, 2**62 + 3])
def test_a_placement_keeps_every_nanosecond_of_a_host_time_past_2_53(host_ns: int) -> None:
    # A host clock counting from boot passes 2**53 ns after 104 days; a float rounds such a
    # time to an even number (or a multiple of 1024 at 2**62), an integer keeps it.
    placement = Placement(Anchor(host_ns=host_ns, uncertainty_ns=10))
    starts, ends, _ = placement.spans([0, 1_000, 5_000], [0, 0, 2_000])
    assert starts == [host_ns, host_ns - 1_000, host_ns - 5_000]
    assert ends == [host_ns, host_ns - 1_000, host_ns - 3_000]


def test_a_distance_half_a_nanosecond_past_a_whole_one_rounds_up() -> None:
    # A device clock running exactly twice the host's: one device ns back is half a host ns.
    # The distance rounds half up (as the changelog says), so the host time goes half down.
    host_ns = 10**12
    previous = Anchor(host_ns=host_ns - 10**9, uncertainty_ns=10)
    placement = Placement(
        Anchor(host_ns=host_ns, uncertainty_ns=10),
        (Earlier(previous, 2 * 10**9, _reading_error(2 * 10**9)),),
    )
    starts, ends, _ = placement.spans([1, 3, 4], [0, 0, 1])
    assert starts == [host_ns - 1, host_ns - 2, host_ns - 2]
    assert ends == [host_ns - 1, host_ns - 2, host_ns - 2]
