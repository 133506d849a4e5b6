"""EventProfiler on the host backend: windows, nesting, readout, pooling, capture, faults."""

from __future__ import annotations

import copy
import dataclasses
import gc
import logging
import pickle
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from protocol_only import ProtocolOnly
from threads import Waiter, blocked_in

from eventapi import (
    DriverError,
    EventApi,
    EventProfiler,
    EventStateError,
    Span,
    Stats,
    SupportsCaptureCheck,
    Window,
)
from eventapi._profiling._anchor import ANCHOR_SAMPLES
from eventapi._profiling._span import spans_of
from eventapi.host import HostBackend

# The host backend's events and sleeps read one clock (CLOCK_MONOTONIC), and time.sleep never
# returns early on it, so a window around a 20 ms sleep reads at least 20 ms.
DELAY_NS = 20_000_000
HOLD_S = 5.0  # a held stream is released after this even if a test fails, so nothing hangs


@pytest.fixture
def api() -> Iterator[HostBackend]:
    backend = HostBackend()
    yield backend
    assert backend.live_handles() == (0, 0), "the test leaked handles"


@pytest.fixture
def prof(api: HostBackend) -> Iterator[EventProfiler[Any, Any]]:
    with EventProfiler(api) as profiler:
        yield profiler


def sleep_on(api: HostBackend, stream: object, seconds: float) -> None:
    api.stream_launch_host_func(stream, lambda: time.sleep(seconds))


def hold(api: HostBackend, stream: object) -> tuple[threading.Event, threading.Event]:
    """Block ``stream`` until the returned gate is set; the second event marks it released."""
    gate, released = threading.Event(), threading.Event()

    def held() -> None:
        gate.wait(HOLD_S)
        released.set()

    api.stream_launch_host_func(stream, held)
    return gate, released


# -- readings -----------------------------------------------------------------------------------


def test_window_reads_a_known_delay(api: HostBackend, prof: EventProfiler[Any, Any]) -> None:
    # The stream notes the clock around the sleep, and just before the window opens and after
    # it closes: the bounds are what this run measured, never a guess at how late a loaded
    # machine runs the stream's worker.
    noted: dict[str, int] = {}

    def note(name: str) -> Callable[[], None]:
        return lambda: noted.__setitem__(name, time.perf_counter_ns())

    def sleep() -> None:
        note("slept_from")()
        time.sleep(DELAY_NS / 1e9)
        note("slept_to")()

    api.stream_launch_host_func(prof.stream, note("before"))
    with prof.window("sleep"):
        api.stream_launch_host_func(prof.stream, sleep)
    api.stream_launch_host_func(prof.stream, note("after"))
    (span,) = prof.collect()
    assert span.name == "sleep"
    # A window that missed the sleep reads less than it; one read between its own two events
    # can read no more than the notes taken outside them.
    slept = noted["slept_to"] - noted["slept_from"]
    assert DELAY_NS <= slept <= span.duration_ns <= noted["after"] - noted["before"]
    assert span.end_ns == span.start_ns + span.duration_ns
    assert span.stream == prof.label
    assert span.depth == 0


def test_windows_nest_and_come_back_in_the_order_they_opened(
    prof: EventProfiler[Any, Any],
) -> None:
    with prof.window("outer") as outer:
        with prof.window("middle") as middle:
            inner = prof.start("inner")
            inner.stop()
        with prof.window("second"):
            pass
    assert (outer.depth, middle.depth, inner.depth) == (0, 1, 2)
    spans = prof.collect()
    assert [(s.name, s.depth) for s in spans] == [
        ("outer", 0),
        ("middle", 1),
        ("inner", 2),
        ("second", 1),
    ]
    by_name = {s.name: s for s in spans}
    # Inner windows lie inside their parents on the host clock: one stream, in order.
    for child, parent in [("middle", "outer"), ("inner", "middle"), ("second", "outer")]:
        assert by_name[parent].start_ns <= by_name[child].start_ns
        assert by_name[child].end_ns <= by_name[parent].end_ns


def test_a_collected_span_is_the_value_span_builds_from_its_fields(
    prof: EventProfiler[Any, Any],
) -> None:
    # collect() fills each Span's slots directly, without the dataclass's __init__; what it
    # hands back must be the same value in every way a user can see.
    with prof.window("outer"), prof.window("inner"):
        pass
    for span in prof.collect():
        fields = {f.name: getattr(span, f.name) for f in dataclasses.fields(Span)}
        plain = Span(**fields)
        assert type(span) is Span
        assert span == plain
        assert hash(span) == hash(plain)
        assert repr(span) == repr(plain)
        assert pickle.loads(pickle.dumps(span)) == plain
        assert dataclasses.replace(span, name="renamed") == dataclasses.replace(
            plain, name="renamed"
        )
        with pytest.raises(dataclasses.FrozenInstanceError):
            span.name = "renamed"  # type: ignore[misc]
    assert [(f["name"], f["depth"], f["stream"]) for f in map(dataclasses.asdict, prof.spans)] == [
        ("outer", 0, prof.label),
        ("inner", 1, prof.label),
    ]


def test_start_and_stop_are_a_window_without_a_block(
    api: HostBackend, prof: EventProfiler[Any, Any]
) -> None:
    window = prof.start("copy")
    assert isinstance(window, Window)
    stopped = [window.stopped]
    sleep_on(api, prof.stream, 0.002)
    window.stop()
    stopped.append(window.stopped)
    assert stopped == [False, True]
    (span,) = prof.collect()
    assert span.name == "copy"
    assert span.duration_ns >= 2_000_000  # the 2 ms sleep is inside; see DELAY_NS above


def test_a_window_is_one_shot(prof: EventProfiler[Any, Any]) -> None:
    window = prof.start("once")
    window.stop()
    with pytest.raises(EventStateError, match="already stopped"):
        window.stop()
    with pytest.raises(EventStateError, match="one-shot"), window:
        pass
    assert len(prof.collect()) == 1


def test_stopping_an_outer_window_first_is_refused(prof: EventProfiler[Any, Any]) -> None:
    outer = prof.start("outer")
    inner = prof.start("inner")
    with pytest.raises(EventStateError, match=r"'inner'.*still open"):
        outer.stop()
    # The refusal changed nothing: both can still be stopped in order.
    inner.stop()
    outer.stop()
    assert [s.name for s in prof.collect()] == ["outer", "inner"]


def test_an_exception_abandons_windows_left_open_inside_a_block(
    prof: EventProfiler[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    def fails_inside_a_window() -> None:
        with prof.window("outer"):
            prof.start("forgotten")
            raise KeyError("boom")

    with pytest.raises(KeyError):
        fails_inside_a_window()
    assert "'forgotten'" in caplog.text
    assert [s.name for s in prof.collect()] == ["outer"]


def test_collect_leaves_open_windows_pending(prof: EventProfiler[Any, Any]) -> None:
    outer = prof.start("outer")
    prof.start("inner").stop()
    assert [s.name for s in prof.collect()] == ["inner"]
    assert prof.collect() == []
    outer.stop()
    assert [s.name for s in prof.collect()] == ["outer"]


def test_opening_and_closing_windows_never_waits_for_the_stream(
    api: HostBackend, prof: EventProfiler[Any, Any]
) -> None:
    gate, released = hold(api, prof.stream)
    try:
        for i in range(100):
            with prof.window(f"w{i}"):
                pass
        # Had any of the 200 records waited for the device, the held stream would have made it
        # block until HOLD_S ran out and released the hold; it is still held.
        assert not released.is_set()
    finally:
        gate.set()
    assert len(prof.collect()) == 100


def test_pooled_events_bound_the_handles_of_many_windows(
    api: HostBackend, prof: EventProfiler[Any, Any]
) -> None:
    # 10,000 windows collected every 100: the pool reuses events, so the backend never holds
    # more than one batch's two events per window plus the anchor's samples and the previous
    # anchor's event (kept to measure the clock rate), not 20,000. The first batches fill the
    # pool to that high-water mark; later batches reuse it and create nothing.
    bound = 2 * 100 + ANCHOR_SAMPLES + 1
    highest = 0
    total = 0
    for batch in range(100):
        for _ in range(100):
            with prof.window("w"):
                pass
        highest = max(highest, api.live_handles().events)
        total += len(prof.collect())
        highest = max(highest, api.live_handles().events)
        assert batch > 0 or highest >= 2 * 100  # the first batch did create its events
        assert batch < 2 or api.live_handles().events == highest
    assert total == 10_000
    assert highest <= bound
    assert prof.summary()["w"].count == 10_000


# -- capture ------------------------------------------------------------------------------------


def test_windows_opened_during_a_capture_are_skipped(
    api: HostBackend, prof: EventProfiler[Any, Any]
) -> None:
    api.begin_capture(prof.stream)
    try:
        with prof.window("captured") as window, prof.window("nested"):
            pass
        prof.start("started").stop()
    finally:
        api.end_capture(prof.stream)
    assert window.skipped
    assert window.stopped
    assert prof.skipped == 3
    # The one event the first edge took (the check and the record are one fused call) went back
    # to the pool unrecorded: the three skips created no other.
    assert api.live_handles().events == 1
    assert prof.collect() == []
    with prof.window("after"):
        pass
    assert [s.name for s in prof.collect()] == ["after"]


def test_an_exception_in_a_skipped_window_abandons_the_windows_opened_inside_it(
    api: HostBackend, prof: EventProfiler[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    # The capture ends inside the skipped window, so the window opened after it is recorded;
    # the exception skips its stop, as it would inside a window that was not skipped.
    captured = prof.window("captured")

    def fails_inside_the_skipped_window() -> None:
        with captured:
            api.end_capture(prof.stream)
            prof.start("forgotten")
            raise KeyError("boom")

    api.begin_capture(prof.stream)
    with pytest.raises(KeyError):
        fails_inside_the_skipped_window()
    assert captured.skipped
    assert "'forgotten'" in caplog.text
    with prof.window("after") as after:
        assert after.depth == 0
    assert [s.name for s in prof.collect()] == ["after"]


def test_a_capture_begun_inside_a_window_skips_it_as_it_stops(
    api: HostBackend, prof: EventProfiler[Any, Any]
) -> None:
    with prof.window("before"):
        pass
    outer = prof.start("outer")
    straddles = prof.start("straddles")
    api.begin_capture(prof.stream)
    try:
        straddles.stop()
        assert straddles.skipped  # known at once: its end was not recorded into the capture
        outer.stop()
        with prof.window("inside") as inside:
            pass
        assert prof.skipped == 3
    finally:
        api.end_capture(prof.stream)
    with prof.window("after"):
        pass
    assert [w.skipped for w in (straddles, outer, inside)] == [True, True, True]
    assert [s.name for s in prof.collect()] == ["before", "after"]
    prof.close()
    assert api.live_handles().events == 0  # the skipped windows' events went back to the pool


# -- faults -------------------------------------------------------------------------------------


def test_a_failed_record_at_open_leaves_nothing_open(
    api: HostBackend, prof: EventProfiler[Any, Any]
) -> None:
    api.inject_fault("event_record")
    with pytest.raises(DriverError) as info:
        prof.start("refused")
    assert info.value.call == "event_record"
    assert api.live_handles().events == 1  # the refused window's event, back in the pool
    window = prof.start("next")
    assert window.depth == 0  # nothing was left on the window stack
    assert api.live_handles().events == 1  # the pooled event was reused, not a new one
    window.stop()
    assert [s.name for s in prof.collect()] == ["next"]


def test_a_failed_record_at_stop_discards_only_that_window(
    api: HostBackend, prof: EventProfiler[Any, Any]
) -> None:
    outer = prof.start("outer")
    inner = prof.start("inner")
    api.inject_fault("event_record")
    with pytest.raises(DriverError):
        inner.stop()
    assert inner.stopped
    outer.stop()
    assert [s.name for s in prof.collect()] == ["outer"]


def test_a_failed_create_surfaces_typed(api: HostBackend, prof: EventProfiler[Any, Any]) -> None:
    api.inject_fault("event_create")
    with pytest.raises(DriverError) as info:
        prof.start("no event")
    assert info.value.call == "event_create"
    assert api.live_handles().events == 0


def test_a_failed_stream_create_leaves_nothing_to_release(
    api: HostBackend, caplog: pytest.LogCaptureFixture
) -> None:
    api.inject_fault("stream_create_non_blocking")
    with caplog.at_level(logging.WARNING, logger="eventapi"), pytest.raises(DriverError) as info:
        EventProfiler(api)
    gc.collect()  # the half-built profiler's finalizer must find nothing to release or log
    assert info.value.call == "stream_create_non_blocking"
    assert api.live_handles() == (0, 0)
    assert not caplog.records


def test_a_failed_capture_check_keeps_no_window_and_drops_the_window_it_stops(
    api: HostBackend, prof: EventProfiler[Any, Any]
) -> None:
    api.inject_fault("stream_is_capturing")
    with pytest.raises(DriverError) as info:
        prof.start("refused")
    assert info.value.call == "stream_is_capturing"
    # The check and the record are one fused call: the event it took went back to the pool.
    assert api.live_handles().events == 1
    with prof.window("outer"):
        window = prof.start("w")
        events = api.live_handles().events
        api.inject_fault("stream_is_capturing")
        with pytest.raises(DriverError) as info:
            window.stop()
        assert info.value.call == "stream_is_capturing"
        # Dropped, as a failed record drops it (one fused call makes both): it has no end.
        assert window.stopped
        with pytest.raises(EventStateError, match="already stopped"):
            window.stop()
        # The stop took one event more; it went back to the pool with the window's start.
        assert api.live_handles().events == events + 1
    with prof.window("after"):
        pass
    assert [(s.name, s.depth) for s in prof.collect()] == [("outer", 0), ("after", 0)]


@pytest.mark.parametrize("method", ["event_wait", "event_elapsed", "event_record"])
def test_a_failed_readout_keeps_windows_for_the_next_collect(
    api: HostBackend, prof: EventProfiler[Any, Any], method: str
) -> None:
    # event_record fails here in the anchor's first sample.
    for name in ("a", "b"):
        with prof.window(name):
            pass
    api.inject_fault(method)
    with pytest.raises(DriverError) as info:
        prof.collect()
    assert info.value.call == method
    assert [s.name for s in prof.collect()] == ["a", "b"]
    assert prof.summary()["a"].count == 1  # counted once, by the collect that succeeded


class FailingAdopt:
    """The host backend, whose ``adopt_stream`` fails once ``fail`` is set (once).

    The fast path's methods are spelled out: ``isinstance`` against a runtime protocol looks
    attributes up statically on CPython 3.12 and later, past ``__getattr__``.
    """

    def __init__(self, inner: HostBackend) -> None:
        self._inner = inner
        self.fail = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def adopt_stream(self, stream: Any) -> Any:
        if self.fail:
            self.fail = False
            raise DriverError("host", "adopt_stream", 1, "REFUSED", "refused for the test")
        return self._inner.adopt_stream(stream)

    def event_record_new(self, stream: Any) -> Any:
        return self._inner.event_record_new(stream)

    def event_record_unless_capturing(self, event: Any, stream: Any) -> bool:
        return self._inner.event_record_unless_capturing(event, stream)

    def event_elapsed_many(self, starts: Any, ends: Any) -> list[int]:
        return self._inner.event_elapsed_many(starts, ends)


def test_a_failed_adopt_of_the_anchor_stream_is_tried_again_by_the_next_collect(
    api: HostBackend,
) -> None:
    backend = FailingAdopt(api)
    with EventProfiler(backend) as prof:
        with prof.window("first"):
            pass
        backend.fail = True  # the anchor's stream, created by this first collect
        with pytest.raises(DriverError, match="adopt_stream failed"):
            prof.collect()
        assert [s.name for s in prof.collect()] == ["first"]


def test_a_failed_destroy_on_close_is_logged(
    api: HostBackend, caplog: pytest.LogCaptureFixture
) -> None:
    prof = EventProfiler(api)
    with prof.window("w"):
        pass
    api.inject_fault("event_destroy", count=3)
    api.inject_fault("stream_destroy", count=2)  # the window stream and the anchor stream
    with caplog.at_level(logging.WARNING, logger="eventapi"):
        prof.close()
    assert "destroying a pooled event failed" in caplog.text
    assert caplog.text.count("destroying a stream of the profiler failed") == 2
    assert api.live_handles() == (0, 0)


def test_a_failed_readout_at_close_is_raised_after_releasing(api: HostBackend) -> None:
    prof = EventProfiler(api)
    with prof.window("w"):
        pass
    api.inject_fault("event_elapsed")
    with pytest.raises(DriverError):
        prof.close()
    assert prof.closed
    assert api.live_handles() == (0, 0)


# -- summary ------------------------------------------------------------------------------------


def test_summary_statistics(api: HostBackend, prof: EventProfiler[Any, Any]) -> None:
    for seconds in (0.001, 0.004, 0.002, 0.003):
        with prof.window("step"):
            sleep_on(api, prof.stream, seconds)
    with prof.window("other"):
        pass
    spans = prof.collect()
    durations = sorted(s.duration_ns for s in spans if s.name == "step")
    stats = prof.summary()
    assert list(stats) == ["step", "other"]
    assert stats["step"] == Stats(
        count=4,
        total_ns=sum(durations),
        min_ns=durations[0],
        median_ns=durations[1],  # an even count takes the lower middle value
        mean_ns=sum(durations) // 4,
        max_ns=durations[3],
    )
    assert stats["step"].min_ns >= 1_000_000
    assert stats["other"].count == 1
    assert all(isinstance(v, int) for v in (stats["step"].mean_ns, stats["step"].median_ns))


def test_summary_of_an_odd_count_is_the_middle_value(prof: EventProfiler[Any, Any]) -> None:
    for _ in range(3):
        prof.start("x").stop()
    durations = sorted(s.duration_ns for s in prof.collect())
    assert prof.summary()["x"].median_ns == durations[1]


def test_results_hold_every_window_stopped_so_far_without_a_collect(
    prof: EventProfiler[Any, Any],
) -> None:
    # Reading the results collects what is pending (one wait), so they are never silently
    # empty inside the profiler's with block; a window still open is not in them.
    with prof.window("pending"):
        pass
    still_open = prof.start("open")
    stats = prof.summary()
    assert set(stats) == {"pending"}
    assert stats["pending"].count == 1
    prof.start("second").stop()
    assert [span.name for span in prof.spans] == ["pending", "second"]
    prof.start("third").stop()
    assert "third" in prof.table()
    assert prof.collect() == []  # everything stopped was read by the results already
    still_open.stop()
    assert [span.name for span in prof.collect()] == ["open"]


# -- lifecycle ----------------------------------------------------------------------------------


def test_close_is_idempotent_and_releases_everything(api: HostBackend) -> None:
    prof = EventProfiler(api)
    for _ in range(5):
        prof.start("w").stop()
    prof.collect()
    assert api.live_handles().events > 0
    prof.close()
    prof.close()
    assert prof.closed
    assert api.live_handles() == (0, 0)
    with pytest.raises(EventStateError, match="closed"):
        prof.start("late")
    with pytest.raises(EventStateError, match="closed"):
        prof.collect()


def test_close_collects_what_was_stopped_and_discards_what_is_open(
    api: HostBackend, caplog: pytest.LogCaptureFixture
) -> None:
    prof = EventProfiler(api)
    gate, _ = hold(api, prof.stream)
    still_open = prof.start("open")
    prof.start("stopped").stop()
    gate.set()
    with caplog.at_level(logging.WARNING, logger="eventapi"):
        prof.close()
    assert "'open'" in caplog.text
    assert list(prof.summary()) == ["stopped"]
    with pytest.raises(EventStateError, match="closed"):
        still_open.stop()
    assert api.live_handles() == (0, 0)


def test_close_with_only_open_windows_waits_for_them(api: HostBackend) -> None:
    prof = EventProfiler(api)
    gate, released = hold(api, prof.stream)
    prof.start("open")
    closer = Waiter(prof.close)
    try:
        # Released once close() waits on the open window's start, behind the hold.
        assert blocked_in(closer.thread, "event_wait"), "close() never waited for the stream"
    finally:
        gate.set()
    closer.result()
    # close() returned only after the stream reached the open window's start, behind the hold.
    assert released.is_set()
    assert api.live_handles() == (0, 0)


def test_a_stream_passed_in_stays_its_owners(api: HostBackend) -> None:
    stream = api.stream_create_non_blocking()
    with EventProfiler(api, stream, label="mine") as prof:
        assert prof.stream is stream
        prof.start("w").stop()
        (span,) = prof.collect()
        assert span.stream == "mine"
    assert api.live_handles() == (0, 1)
    api.stream_destroy(stream)


def test_a_dropped_profiler_is_released_and_logged(
    api: HostBackend, caplog: pytest.LogCaptureFixture
) -> None:
    prof = EventProfiler(api)
    prof.start("w").stop()
    with caplog.at_level(logging.WARNING, logger="eventapi"):
        del prof
        gc.collect()
    assert "dropped without close()" in caplog.text
    assert api.live_handles() == (0, 0)


@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "protocol-only"])
def test_a_dropped_profiler_is_released_as_its_last_reference_goes(
    api: HostBackend, fast: bool, caplog: pytest.LogCaptureFixture
) -> None:
    # With no window pending, nothing of its own refers back to the profiler: an interrupted
    # close() or a profiler dropped without one gives its stream and events back at once, not
    # at the cyclic collector's next run. (A window pending holds its profiler until collect().)
    backend: EventApi[Any, Any] = api if fast else ProtocolOnly(api)
    prof = EventProfiler(backend)
    prof.start("w").stop()
    prof.collect()
    dropped = weakref.ref(prof)
    gc.disable()
    try:
        with caplog.at_level(logging.WARNING, logger="eventapi"):
            del prof
        assert dropped() is None
        assert api.live_handles() == (0, 0)
    finally:
        gc.enable()
    assert "dropped without close()" in caplog.text


def test_bad_window_names_are_refused(prof: EventProfiler[Any, Any]) -> None:
    with pytest.raises(TypeError, match="str"):
        prof.start(42)  # type: ignore[arg-type]


# -- any backend --------------------------------------------------------------------------------


def test_a_backend_with_only_the_protocol_works(api: HostBackend) -> None:
    bare: EventApi[Any, Any] = ProtocolOnly(api)
    assert not isinstance(bare, SupportsCaptureCheck)
    with EventProfiler(bare) as prof:
        with prof.window("outer"), prof.window("inner"):
            pass
        spans = prof.collect()
    assert [(s.name, s.depth) for s in spans] == [("outer", 0), ("inner", 1)]
    assert all(isinstance(s, Span) and s.stream.startswith("profiler-") for s in spans)


@pytest.mark.parametrize("duplicate", [copy.copy, copy.deepcopy, pickle.dumps])
def test_a_profiler_and_its_windows_cannot_be_copied(
    prof: EventProfiler[Any, Any], duplicate: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    window = prof.start("w")
    for owner, name in ((prof, "EventProfiler"), (window, "Window")):
        with pytest.raises(TypeError, match=f"{name} cannot be copied or pickled"):
            duplicate(owner)
    window.stop()
    assert [span.name for span in prof.collect()] == ["w"]
    gc.collect()
    assert capfd.readouterr() == ("", "")


# -- retention and the sink ---------------------------------------------------------------------


def test_collected_spans_are_retained_up_to_max_spans(api: HostBackend) -> None:
    with EventProfiler(api, max_spans=3) as prof:
        for i in range(5):
            with prof.window(f"w{i}"):
                pass
        collected = prof.collect()
        assert prof.spans == tuple(collected[2:])
        assert prof.dropped_spans == 2
        with prof.window("w5"):
            pass
        prof.collect()
        assert [span.name for span in prof.spans] == ["w3", "w4", "w5"]
        assert prof.dropped_spans == 3
    with EventProfiler(api, max_spans=0) as prof:
        with prof.window("w"):
            pass
        prof.collect()
        assert (prof.spans, prof.dropped_spans) == ((), 1)


def test_the_sink_receives_every_span_in_order(api: HostBackend) -> None:
    received: list[Span] = []
    with EventProfiler(api, max_spans=1, sink=received.append) as prof:
        for i in range(4):
            with prof.window(f"w{i}"):
                pass
            if i % 2:
                assert received == [] or received[-1].name == f"w{i - 2}"
                prof.collect()
        with prof.window("last"):
            pass
    # close() collects what was stopped, and the sink gets those too.
    assert [span.name for span in received] == ["w0", "w1", "w2", "w3", "last"]


@pytest.mark.parametrize("reader", ["spans", "summary", "table", "export_chrome_trace"])
def test_what_a_reader_collects_reaches_the_sink(
    api: HostBackend, reader: str, tmp_path: Path
) -> None:
    # Every reader collects what is pending first; the spans it reads go to the sink too, or a
    # TraceWriter given as the sink would miss the windows a program read this way.
    received: list[Span] = []
    with EventProfiler(api, sink=received.append) as prof:
        with prof.window("w"):
            pass
        read = getattr(prof, reader)
        if reader == "export_chrome_trace":
            read(tmp_path / "trace.json")
        elif callable(read):
            read()
        assert [span.name for span in received] == ["w"]
        assert prof.collect() == []
    assert [span.name for span in received] == ["w"]


def test_a_failing_sink_raises_from_collect_after_the_readout(api: HostBackend) -> None:
    def sink(span: Span) -> None:
        raise RuntimeError(f"disk full at {span.name}")

    with EventProfiler(api, sink=sink) as prof:
        with prof.window("w"):
            pass
        with pytest.raises(RuntimeError, match="disk full at w"):
            prof.collect()
        assert prof.summary()["w"].count == 1  # read and counted before the sink ran
        assert [span.name for span in prof.spans] == ["w"]
        assert prof.collect() == []


def test_bounds_below_zero_are_refused(api: HostBackend) -> None:
    with pytest.raises(ValueError, match="max_spans"):
        EventProfiler(api, max_spans=-1)
    assert api.live_handles() == (0, 0)


def test_a_destroyed_stream_is_refused_and_one_destroyed_later_refuses_new_windows(
    api: HostBackend,
) -> None:
    dead = api.stream_create_non_blocking()
    api.stream_destroy(dead)
    with pytest.raises(EventStateError, match=r"EventProfiler\(api, stream\).*destroyed"):
        EventProfiler(api, dead)
    stream = api.stream_create_non_blocking()
    prof = EventProfiler(api, stream)
    prof.start("w").stop()
    # Destroyed by its owner while the profiler uses it: released at once (the work queued on
    # it still completes, as a driver's stream destroy promises), and refused from then on.
    api.stream_destroy(stream)
    assert api.live_handles().streams == 0
    with pytest.raises(EventStateError, match="destroyed"):
        prof.start("late")
    [span] = prof.collect()  # what was recorded before the destroy is still read back
    assert span.name == "w"
    prof.close()
    assert api.live_handles() == (0, 0)


def test_spans_built_a_column_at_a_time_are_the_spans_their_constructor_builds() -> None:
    # A collect builds its spans in one batch (spans_of); each must be the value Span(...)
    # makes of the same fields: equal, hashed alike, shown alike, and as frozen.
    rows = [(f"w{i}", 10 * i, 10 * i + 7 + i, 7 + i, i % 3, "stream", 100 + i) for i in range(50)]
    names, starts, ends, durations, depths, _, bounds = (list(c) for c in zip(*rows, strict=True))
    built = spans_of(names, starts, ends, durations, depths, "stream", bounds)
    expected = [Span(*row) for row in rows]
    assert built == expected
    assert [hash(s) for s in built] == [hash(s) for s in expected]
    assert [repr(s) for s in built] == [repr(s) for s in expected]
    with pytest.raises(dataclasses.FrozenInstanceError):
        built[0].name = "changed"  # type: ignore[misc]
    assert spans_of([], [], [], [], [], "stream", []) == []
