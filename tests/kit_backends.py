"""Backends written straight against the protocol, for testing the conformance kit itself.

:class:`MinimalBackend` satisfies :class:`eventapi.EventApi` and nothing more; a stream is a
worker thread draining a queue and an event is stamped with ``time.perf_counter_ns()`` when the
worker reaches it. :class:`ThreadBackend` adds every optional capability, graphs included.
Both are correct, so the kit must pass on them. The ``Broken*`` subclasses each get one thing
wrong, so the kit must fail on them, in the test that covers that thing.

Nothing here uses :mod:`eventapi.driverkit`: the kit checks behaviour, not a base class, and a
third party may satisfy the protocol directly.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple, final

from eventapi import DriverError, EventStateError

_log = logging.getLogger("eventapi")


class Counts(NamedTuple):
    events: int
    streams: int


class KitEvent:
    """An event: the latest record's completion flag and the stamp its worker wrote."""

    __slots__ = ("closed", "owner", "reached", "stamp_ns")

    def __init__(self, owner: MinimalBackend) -> None:
        self.owner = owner
        self.closed = False
        self.reached: threading.Event | None = None  # None until recorded
        self.stamp_ns = 0


class KitStream:
    """A stream: one worker thread running the queued callables in order."""

    __slots__ = ("capturing", "closed", "nodes", "owner", "queue", "worker")

    def __init__(self, owner: MinimalBackend) -> None:
        self.owner = owner
        self.closed = False
        self.capturing = False  # set by ThreadBackend's captures
        self.nodes: list[KitEvent] = []  # the capture's event-record nodes
        self.queue: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        self.worker = threading.Thread(target=self._drain, name="kit-stream", daemon=True)
        self.worker.start()

    def _drain(self) -> None:
        while (item := self.queue.get()) is not None:
            try:
                item()
            except Exception:
                _log.warning("kit stream: host function failed", exc_info=True)


# An event's stamp while it has none: recorded plainly into a capture (a dependency of the
# graph), or only as a node of a graph not launched yet.
CAPTURED = -1
UNLAUNCHED = -2


class KitGraph:
    """A captured graph: the events its event-record nodes record, in order."""

    __slots__ = ("closed", "nodes", "owner")

    def __init__(self, owner: MinimalBackend, nodes: list[KitEvent]) -> None:
        self.owner = owner
        self.nodes = nodes
        self.closed = False


class MinimalBackend:
    """The protocol alone, no optional capability; counts its live handles."""

    BACKEND = "kit"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events = 0
        self._streams = 0
        self._faults: dict[str, int] = {}  # method -> calls left to fail (inject_fault)

    def _fault_due(self, method: str) -> bool:
        with self._lock:
            left = self._faults.get(method, 0)
            if left:
                self._faults[method] = left - 1
            return left > 0

    def _injected(self, method: str) -> DriverError:
        return DriverError("kit", method, 999, "INJECTED_FAULT", "fault injected")

    def live_handles(self) -> Counts:
        with self._lock:
            return Counts(self._events, self._streams)

    # -- checks ---------------------------------------------------------------------------

    def _event(self, event: object, call: str, *, recorded: bool = True) -> KitEvent:
        if not isinstance(event, KitEvent) or event.owner is not self:
            raise EventStateError(
                f"kit: {call}: {event!r} is not an event of this backend; pass one"
            )
        if event.closed:
            raise EventStateError(f"kit: {call}: event was destroyed; create a new one")
        if recorded and event.reached is None:
            raise EventStateError(f"kit: {call}: event never recorded; call event_record first")
        return event

    def _stream(self, stream: object, call: str) -> KitStream:
        if not isinstance(stream, KitStream) or stream.owner is not self:
            raise EventStateError(
                f"kit: {call}: {stream!r} is not a stream of this backend; pass one"
            )
        if stream.closed:
            raise EventStateError(f"kit: {call}: stream was destroyed; create a new one")
        return stream

    # -- the protocol ---------------------------------------------------------------------

    def event_create(self) -> KitEvent:
        with self._lock:
            self._events += 1
        return KitEvent(self)

    def event_destroy(self, event: KitEvent) -> None:
        if not isinstance(event, KitEvent) or event.owner is not self:
            raise EventStateError(f"kit: event_destroy: {event!r} is foreign; pass one of ours")
        with self._lock:
            if event.closed:
                return
            event.closed = True
            self._events -= 1
        # A failed destroy still releases the handle: the owner can only log the error.
        if self._fault_due("event_destroy"):
            raise self._injected("event_destroy")

    def event_record(self, event: KitEvent, stream: KitStream) -> None:
        target = self._stream(stream, "event_record")
        ev = self._event(event, "event_record", recorded=False)
        reached = threading.Event()
        ev.reached = reached

        def stamp() -> None:
            self._stamp(ev)
            reached.set()

        target.queue.put(stamp)

    def _stamp(self, event: KitEvent) -> None:
        event.stamp_ns = time.perf_counter_ns()

    def event_wait(self, event: KitEvent) -> None:
        reached = self._event(event, "event_wait").reached
        assert reached is not None
        reached.wait()

    def event_elapsed(self, start: KitEvent, end: KitEvent) -> int:
        first = self._event(start, "event_elapsed")
        last = self._event(end, "event_elapsed")
        for ev in (first, last):
            if ev.reached is None or not ev.reached.is_set():
                raise DriverError(
                    "kit", "event_elapsed", 600, "NOT_READY", "not ready", not_ready=True
                )
        return self._clamp(last.stamp_ns - first.stamp_ns)

    def _clamp(self, ns: int) -> int:
        return max(0, ns)

    def stream_wait_event(self, stream: KitStream, event: KitEvent) -> None:
        target = self._stream(stream, "stream_wait_event")
        reached = self._event(event, "stream_wait_event").reached
        assert reached is not None
        target.queue.put(reached.wait)

    def stream_synchronize(self, stream: KitStream) -> None:
        target = self._stream(stream, "stream_synchronize")
        drained = threading.Event()
        target.queue.put(drained.set)
        drained.wait()

    def stream_create_non_blocking(self) -> KitStream:
        with self._lock:
            self._streams += 1
        return KitStream(self)

    def stream_destroy(self, stream: KitStream) -> None:
        if not isinstance(stream, KitStream) or stream.owner is not self:
            raise EventStateError(f"kit: stream_destroy: {stream!r} is foreign; pass one of ours")
        with self._lock:
            if stream.closed:
                return
            stream.closed = True
            self._release_stream()
        stream.queue.put(None)  # the worker drains what is queued, then exits
        if self._fault_due("stream_destroy"):
            raise self._injected("stream_destroy")

    def _release_stream(self) -> None:
        self._streams -= 1


class HostFuncBackend(MinimalBackend):
    """The protocol and SupportsHostFunc only: held streams, but no query to look at them."""

    def stream_launch_host_func(self, stream: KitStream, fn: Callable[[], object]) -> None:
        self._stream(stream, "stream_launch_host_func").queue.put(fn)


class ThreadBackend(HostFuncBackend):
    """The protocol and all three optional capabilities, and fault injection for destroys."""

    def inject_fault(self, method: str) -> None:
        """Make the next ``method`` call fail, as the host backend's ``inject_fault`` does."""
        if method not in {"event_destroy", "stream_destroy"}:
            raise ValueError(f"kit: inject_fault: only destroys can fail here, not {method!r}")
        with self._lock:
            self._faults[method] = self._faults.get(method, 0) + 1

    def event_query(self, event: KitEvent) -> bool:
        reached = self._event(event, "event_query").reached
        assert reached is not None
        return reached.is_set()

    def stream_is_capturing(self, stream: KitStream) -> bool:
        return self._stream(stream, "stream_is_capturing").capturing

    def begin_capture(self, stream: KitStream) -> None:
        """Start a graph capture on ``stream`` (a test aid, as the host backend has)."""
        self.stream_begin_capture(stream)

    def end_capture(self, stream: KitStream) -> None:
        """End what :meth:`begin_capture` started; the graph is discarded."""
        self.stream_end_capture(stream)

    # Graphs (SupportsGraphs, SupportsGraphRecord): a plain record in a capture is a dependency
    # that nothing stamps; a record in graph is a node each launch records on its stream.

    def event_record(self, event: KitEvent, stream: KitStream) -> None:
        target = self._stream(stream, "event_record")
        if not target.capturing:
            super().event_record(event, stream)
            return
        ev = self._event(event, "event_record", recorded=False)
        ev.reached = threading.Event()  # never set
        ev.stamp_ns = CAPTURED

    def event_wait(self, event: KitEvent) -> None:
        self._stamped(event, "event_wait", unlaunched=True)
        super().event_wait(event)

    def event_elapsed(self, start: KitEvent, end: KitEvent) -> int:
        self._stamped(start, "event_elapsed")
        self._stamped(end, "event_elapsed")
        return super().event_elapsed(start, end)

    def _stamped(self, event: KitEvent, call: str, *, unlaunched: bool = False) -> None:
        stamp = self._event(event, call).stamp_ns
        if stamp == CAPTURED:
            raise DriverError("kit", call, 907, "CAPTURED_EVENT", "recorded in a capture")
        if stamp == UNLAUNCHED and not unlaunched:
            raise DriverError("kit", call, 400, "INVALID_HANDLE", "recorded in a graph not run")

    def stream_begin_capture(self, stream: KitStream) -> None:
        target = self._stream(stream, "stream_begin_capture")
        if target.capturing:
            raise DriverError("kit", "stream_begin_capture", 401, "ILLEGAL_STATE", "capturing")
        target.capturing = True
        target.nodes = []

    def stream_end_capture(self, stream: KitStream) -> KitGraph:
        target = self._stream(stream, "stream_end_capture")
        if not target.capturing:
            raise DriverError("kit", "stream_end_capture", 401, "ILLEGAL_STATE", "not capturing")
        target.capturing = False
        graph, target.nodes = KitGraph(self, target.nodes), []
        return graph

    def graph_launch(self, graph: KitGraph, stream: KitStream) -> None:
        nodes = self._graph(graph, "graph_launch").nodes
        target = self._stream(stream, "graph_launch")
        for event in nodes:
            if target.capturing:
                target.nodes.append(event)
            else:
                self._launch_node(event, target)

    def _launch_node(self, event: KitEvent, stream: KitStream) -> None:
        MinimalBackend.event_record(self, event, stream)

    def graph_destroy(self, graph: KitGraph) -> None:
        if not isinstance(graph, KitGraph) or graph.owner is not self:
            raise EventStateError(f"kit: graph_destroy: {graph!r} is foreign; pass one of ours")
        graph.closed = True

    def _graph(self, graph: object, call: str) -> KitGraph:
        if not isinstance(graph, KitGraph) or graph.owner is not self or graph.closed:
            raise EventStateError(f"kit: {call}: {graph!r} is no open graph of ours; pass one")
        return graph

    def event_record_in_graph(self, event: KitEvent, stream: KitStream) -> None:
        target = self._stream(stream, "event_record_in_graph")
        ev = self._event(event, "event_record_in_graph", recorded=False)
        if not target.capturing:
            raise EventStateError("kit: event_record_in_graph: the stream is not capturing")
        target.nodes.append(ev)
        if ev.reached is None:  # never recorded: nothing to wait for, no stamp to read
            ev.reached = threading.Event()
            ev.reached.set()
            ev.stamp_ns = UNLAUNCHED

    # The fast path (SupportsFastPath), written against the protocol rather than inherited from
    # driverkit: each fused call is the plain calls it stands for, which the kit checks.

    def adopt_stream(self, stream: object) -> KitStream:
        return self._stream(stream, "adopt_stream")

    def event_record_new(self, stream: KitStream) -> KitEvent | None:
        target = self._stream(stream, "event_record_new")
        if self.stream_is_capturing(target):
            return None
        event = self.event_create()
        self.event_record(event, target)
        return event

    def event_record_unless_capturing(self, event: KitEvent, stream: KitStream) -> bool:
        if self.stream_is_capturing(stream):
            return False
        self.event_record(event, stream)
        return True

    def event_elapsed_many(self, starts: Sequence[KitEvent], ends: Sequence[KitEvent]) -> list[int]:
        if len(starts) != len(ends):
            raise ValueError(f"kit: {len(starts)} starts but {len(ends)} ends")
        for event in (*starts, *ends):
            self._event(event, "event_elapsed_many")
        return [self.event_elapsed(start, end) for start, end in zip(starts, ends, strict=True)]


@final
class BrokenUnclampedBackend(ThreadBackend):
    """Returns a negative elapsed reading instead of clamping it to 0."""

    def _clamp(self, ns: int) -> int:
        return ns


@final
class BrokenScaledElapsedBackend(ThreadBackend):
    """Reads elapsed times ten times too long, as a wrong tick rate would."""

    def _clamp(self, ns: int) -> int:
        return super()._clamp(ns) * 10


@final
class BrokenClosedHandleBackend(ThreadBackend):
    """Lets a destroyed event through to the calls instead of refusing it."""

    def _event(self, event: object, call: str, *, recorded: bool = True) -> KitEvent:
        if isinstance(event, KitEvent) and event.owner is self and event.reached is not None:
            return event  # the bug: `closed` is never looked at
        return super()._event(event, call, recorded=recorded)


@final
class BrokenLeakyBackend(ThreadBackend):
    """Forgets to count a destroyed stream as released."""

    def _release_stream(self) -> None:
        pass


@final
class BrokenBlockingBackend(ThreadBackend):
    """Blocks the host in stream_wait_event until the event is reached, instead of the stream."""

    def stream_wait_event(self, stream: KitStream, event: KitEvent) -> None:
        self.event_wait(event)
        super().stream_wait_event(stream, event)


@final
class BrokenInlineHostFuncBackend(ThreadBackend):
    """Calls a host function at once on the launching thread instead of enqueuing it."""

    def stream_launch_host_func(self, stream: KitStream, fn: Callable[[], object]) -> None:
        self._stream(stream, "stream_launch_host_func")
        fn()


@final
class BrokenSecondDestroyBackend(ThreadBackend):
    """Refuses a second destroy of an event with EventStateError instead of ignoring it."""

    def event_destroy(self, event: KitEvent) -> None:
        if isinstance(event, KitEvent) and event.owner is self and event.closed:
            raise EventStateError("kit: event_destroy: event was destroyed; create a new one")
        super().event_destroy(event)


@final
class BrokenOneStreamElapsedBackend(ThreadBackend):
    """Reads elapsed time only between events of one stream, as the profiler's anchor cannot use."""

    def __init__(self) -> None:
        super().__init__()
        self._recorded_on: dict[int, KitStream] = {}

    def event_record(self, event: KitEvent, stream: KitStream) -> None:
        super().event_record(event, stream)
        self._recorded_on[id(event)] = stream

    def event_elapsed(self, start: KitEvent, end: KitEvent) -> int:
        reading = super().event_elapsed(start, end)  # the handle checks come first
        if self._recorded_on.get(id(start)) is not self._recorded_on.get(id(end)):
            raise DriverError("kit", "event_elapsed", 400, "INVALID_HANDLE", "two streams")
        return reading


@final
class BrokenFailedDestroyBackend(ThreadBackend):
    """Keeps an event open and counted when its destroy fails, instead of releasing it."""

    def event_destroy(self, event: KitEvent) -> None:
        if self._fault_due("event_destroy"):
            raise self._injected("event_destroy")
        super().event_destroy(event)


# The state machine's quarry: faults no single-purpose test of the kit looks for, which only a
# particular sequence of calls shows.


@final
class BrokenSequenceLeakBackend(ThreadBackend):
    """Forgets to count an event released when it was recorded into two different streams."""

    def __init__(self) -> None:
        super().__init__()
        self._streams_of: dict[int, set[int]] = {}

    def event_record(self, event: KitEvent, stream: KitStream) -> None:
        super().event_record(event, stream)
        self._streams_of.setdefault(id(event), set()).add(id(stream))

    def event_destroy(self, event: KitEvent) -> None:
        streams = self._streams_of.pop(id(event), set())
        if len(streams) > 1 and isinstance(event, KitEvent) and event.owner is self:
            event.closed = True  # the bug: the live count is not decremented
            return
        super().event_destroy(event)


@final
class BrokenCaptureBlindBackend(ThreadBackend):
    """Says no stream is capturing, even one that is."""

    def stream_is_capturing(self, stream: KitStream) -> bool:
        self._stream(stream, "stream_is_capturing")
        return False


class _ReorderingStream(KitStream):
    """A stream whose worker runs what piled up behind a finished item newest first."""

    __slots__ = ()

    def _drain(self) -> None:
        while (item := self.queue.get()) is not None:
            item()
            backlog: list[Callable[[], object] | None] = []
            while not self.queue.empty():
                backlog.append(self.queue.get())
            for queued in reversed(backlog):
                if queued is None:
                    return
                queued()


@final
class BrokenReorderingBackend(ThreadBackend):
    """Runs a stream's queued work out of order: what waited behind a held item, newest first."""

    def stream_create_non_blocking(self) -> KitStream:
        with self._lock:
            self._streams += 1
        return _ReorderingStream(self)


@final
class BrokenStaleStampBackend(ThreadBackend):
    """Keeps the stamp of an event's first record when the event is recorded again."""

    def _stamp(self, event: KitEvent) -> None:
        if event.stamp_ns == 0:
            super()._stamp(event)


@final
class BrokenFirstLaunchOnlyBackend(ThreadBackend):
    """Stamps an event recorded into a graph at the graph's first launch only."""

    def _launch_node(self, event: KitEvent, stream: KitStream) -> None:
        if event.stamp_ns == UNLAUNCHED:
            super()._launch_node(event, stream)


@final
class BrokenPlainNodeBackend(ThreadBackend):
    """Stamps a plain record in a capture at each launch, as if it were an external one."""

    def event_record(self, event: KitEvent, stream: KitStream) -> None:
        target = self._stream(stream, "event_record")
        if target.capturing:
            self.event_record_in_graph(event, stream)
        else:
            super().event_record(event, stream)


def make_thread_backend() -> ThreadBackend:
    """A factory, as ``--eventapi-backend=module:attr`` accepts."""
    return ThreadBackend()


SHARED = ThreadBackend()
"""An instance, as ``--eventapi-backend=module:attr`` accepts."""
