"""Graphs: a capture launched again and again, and events recorded into it, stamped each time.

``SupportsGraphs`` and ``SupportsGraphRecord``, each tested where the backend declares it (the
second needs the first, to make a graph), and the windows of an ``EventProfiler`` made with
``in_graphs=True`` on top of them.
"""

from __future__ import annotations

import time

import pytest

from eventapi import DriverError, EventProfiler, EventStateError

from ._kit import Kit

DELAY_S = 0.002
# A reading across a host delay measured inside the host function: see test_elapsed.py.
DELAY_TOLERANCE_NS = 20_000
LAUNCHES = 3


def test_a_capture_is_a_graph_launched_again_and_again(
    eventapi_kit: Kit, eventapi_stream: object
) -> None:
    eventapi_kit.require("SupportsGraphs")
    api = eventapi_kit.api
    eventapi_kit.call(api.stream_begin_capture, eventapi_stream)
    if eventapi_kit.has("SupportsCaptureCheck"):
        assert eventapi_kit.call(api.stream_is_capturing, eventapi_stream) is True
    with pytest.raises(DriverError):  # one capture at a time
        eventapi_kit.call(api.stream_begin_capture, eventapi_stream)
    graph = eventapi_kit.end_graph(eventapi_stream)
    if eventapi_kit.has("SupportsCaptureCheck"):
        assert eventapi_kit.call(api.stream_is_capturing, eventapi_stream) is False
    with pytest.raises(DriverError):  # nothing to end
        eventapi_kit.call(api.stream_end_capture, eventapi_stream)
    other = eventapi_kit.stream()
    for stream in (eventapi_stream, other, eventapi_stream):
        eventapi_kit.call(api.graph_launch, graph, stream)
    for stream in (eventapi_stream, other):
        eventapi_kit.call(api.stream_synchronize, stream)
    eventapi_kit.call(api.graph_destroy, graph)
    eventapi_kit.call(api.graph_destroy, graph)  # a second destroy is a no-op
    with pytest.raises(EventStateError):
        eventapi_kit.call(api.graph_launch, graph, eventapi_stream)


def test_what_is_no_graph_of_the_backend_is_refused(
    eventapi_kit: Kit, eventapi_stream: object
) -> None:
    eventapi_kit.require("SupportsGraphs")
    api = eventapi_kit.api
    for call, args in (
        (api.graph_launch, (object(), eventapi_stream)),
        (api.graph_destroy, (object(),)),
    ):
        with pytest.raises(EventStateError):
            eventapi_kit.call(call, *args)


def test_a_plain_record_in_a_graph_is_never_stamped(
    eventapi_kit: Kit, eventapi_stream: object
) -> None:
    # CUDA makes it a dependency inside the graph: no launch stamps it, and a wait for it fails
    # (CUDA_ERROR_CAPTURED_EVENT during the capture, an invalid argument after).
    eventapi_kit.require("SupportsGraphs")
    api = eventapi_kit.api
    event = eventapi_kit.event()
    eventapi_kit.call(api.stream_begin_capture, eventapi_stream)
    eventapi_kit.call(api.event_record, event, eventapi_stream)
    graph = eventapi_kit.end_graph(eventapi_stream)
    eventapi_kit.call(api.graph_launch, graph, eventapi_stream)
    eventapi_kit.call(api.stream_synchronize, eventapi_stream)
    with pytest.raises(DriverError):
        eventapi_kit.call(api.event_wait, event)
    with pytest.raises(DriverError):
        eventapi_kit.call(api.event_elapsed, event, event)


def test_an_event_recorded_into_a_graph_is_stamped_at_each_launch(
    eventapi_kit: Kit, eventapi_stream: object
) -> None:
    eventapi_kit.require("SupportsGraphRecord")
    eventapi_kit.require("SupportsGraphs")
    api = eventapi_kit.api
    start, end = eventapi_kit.event(), eventapi_kit.event()
    eventapi_kit.call(api.stream_begin_capture, eventapi_stream)
    eventapi_kit.call(api.event_record_in_graph, start, eventapi_stream)
    eventapi_kit.call(api.event_record_in_graph, end, eventapi_stream)
    graph = eventapi_kit.end_graph(eventapi_stream)
    # Not launched: never stamped, so there is nothing to wait for and nothing to read.
    eventapi_kit.call(api.event_wait, end)
    with pytest.raises((EventStateError, DriverError)):
        eventapi_kit.call(api.event_elapsed, start, end)
    slept: list[int] = []
    for launch in range(LAUNCHES):
        before = eventapi_kit.recorded(eventapi_stream)
        if launch and eventapi_kit.has("SupportsHostFunc"):
            _delay(eventapi_kit, eventapi_stream, slept)
        eventapi_kit.call(api.graph_launch, graph, eventapi_stream)
        eventapi_kit.call(api.event_wait, end)
        reading = eventapi_kit.call(api.event_elapsed, start, end)
        assert type(reading) is int
        assert reading >= 0
        # Stamped by this launch: after ``before``, and after the host delay put between them.
        since = eventapi_kit.call(api.event_elapsed, before, start)
        assert since >= (slept[-1] - DELAY_TOLERANCE_NS if launch and slept else 0), (
            f"launch {launch}: the event recorded into the graph read {since} ns after an event "
            "recorded before the launch; each launch must stamp it again"
        )


def test_an_event_is_recorded_into_a_graph_only_in_a_capture(
    eventapi_kit: Kit, eventapi_stream: object
) -> None:
    eventapi_kit.require("SupportsGraphRecord")
    api = eventapi_kit.api
    event = eventapi_kit.event()
    with pytest.raises(EventStateError, match="not capturing"):
        eventapi_kit.call(api.event_record_in_graph, event, eventapi_stream)
    with pytest.raises(EventStateError):  # still never recorded
        eventapi_kit.call(api.event_wait, event)


def test_profiler_windows_in_a_graph_read_once_per_launch(
    eventapi_kit: Kit, eventapi_stream: object
) -> None:
    # A plain profiler on the same stream skips its window and records nothing into the graph.
    eventapi_kit.require("SupportsGraphRecord")
    eventapi_kit.require("SupportsGraphs")
    api = eventapi_kit.api
    plain = EventProfiler(api, eventapi_stream)
    prof = EventProfiler(api, eventapi_stream, in_graphs=True)
    graph = None
    try:
        eventapi_kit.call(api.stream_begin_capture, eventapi_stream)
        with plain.window("skipped"):
            pass
        with prof.window("step"), prof.window("inner"):
            pass
        graph = eventapi_kit.end_graph(eventapi_stream)
        assert plain.skipped == 1
        assert eventapi_kit.call(plain.collect) == []
        assert eventapi_kit.call(prof.collect) == [], "a graph not launched yet gave spans"
        for _ in range(LAUNCHES):
            eventapi_kit.call(api.graph_launch, graph, eventapi_stream)
            spans = eventapi_kit.call(prof.collect)
            assert [(s.name, s.depth) for s in spans] == [("step", 0), ("inner", 1)]
            assert all(s.duration_ns >= 0 for s in spans)
        assert eventapi_kit.call(prof.collect) == [], "a collect with no launch since gave spans"
        assert prof.summary()["step"].count == LAUNCHES
    finally:
        if graph is not None:  # the graph first: it records into the profiler's events
            eventapi_kit.call(api.graph_destroy, graph)
        prof.close()
        plain.close()


def _delay(kit: Kit, stream: object, measured: list[int]) -> None:
    def sleep() -> None:
        # The sleep is the delay being measured, not synchronization.
        begin = time.perf_counter_ns()
        time.sleep(DELAY_S)
        measured.append(time.perf_counter_ns() - begin)

    kit.call(kit.api.stream_launch_host_func, stream, sleep)
