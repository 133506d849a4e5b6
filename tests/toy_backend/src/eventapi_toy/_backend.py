"""The toy backend: streams are worker threads, events are the times the workers reach them.

Written against :class:`eventapi.EventApi` directly, as a third party would, without
``eventapi.driverkit``: it refuses closed, foreign and never-recorded handles itself, which is
the protocol's contract whatever a backend is built on.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, NamedTuple, final

from eventapi import DriverError, EventStateError

if TYPE_CHECKING:
    from eventapi import EventApi, SupportsEventQuery

__all__ = ["LiveHandles", "ToyBackend", "ToyEvent", "ToyStream"]

_NOT_READY: Final = 600  # the code a driver uses for "not ready"; any stable int would do


class LiveHandles(NamedTuple):
    """Events and streams a :class:`ToyBackend` created and has not destroyed yet."""

    events: int
    streams: int


@final
class _Mark:
    """One record of an event: set, with its time, when the stream's worker reaches it."""

    __slots__ = ("reached", "stamp_ns")

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.stamp_ns = 0

    def stamp(self) -> None:
        self.stamp_ns = time.perf_counter_ns()
        self.reached.set()


@final
class ToyEvent:
    """An event handle of one :class:`ToyBackend`; users receive it, never build it."""

    __slots__ = ("_closed", "_mark", "_owner")

    def __init__(self, owner: ToyBackend) -> None:
        self._owner = owner
        self._closed = False
        # The latest record; re-recording replaces it, as in CUDA.
        self._mark: _Mark | None = None

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("recorded" if self._mark else "new")
        return f"<toy event {id(self):#x} {state}>"


@final
class ToyStream:
    """A stream handle of one :class:`ToyBackend`: a worker thread that runs its queue in order."""

    __slots__ = ("_closed", "_owner", "_queue")

    def __init__(self, owner: ToyBackend) -> None:
        self._owner = owner
        self._closed = False
        self._queue: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        # A daemon: a stream left waiting on an event that is never reached must not keep the
        # interpreter from exiting.
        threading.Thread(target=self._run, name="eventapi-toy stream", daemon=True).start()

    def _run(self) -> None:
        while (work := self._queue.get()) is not None:
            work()

    def __repr__(self) -> str:
        return f"<toy stream {id(self):#x}{' closed' if self._closed else ''}>"


@final
class ToyBackend:
    """The toy backend object. Every method may be called from any thread.

    Implements :class:`eventapi.EventApi` and :class:`eventapi.SupportsEventQuery`; it has no
    graph capture and no host functions.
    """

    BACKEND: Final = "toy"

    __slots__ = ("_events", "_lock", "_streams")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events = 0
        self._streams = 0

    # -- handle checks ------------------------------------------------------------------------

    def _own_event(self, event: object, call: str) -> ToyEvent:
        if type(event) is not ToyEvent or event._owner is not self:
            raise EventStateError(
                f"toy: {call} refused {event!r}: not an event of this toy backend object; pass "
                "one from its event_create()"
            )
        return event

    def _own_stream(self, stream: object, call: str) -> ToyStream:
        if type(stream) is not ToyStream or stream._owner is not self:
            raise EventStateError(
                f"toy: {call} refused {stream!r}: not a stream of this toy backend object; pass "
                "one from its stream_create_non_blocking()"
            )
        return stream

    def _mark_of(self, event: object, call: str) -> _Mark:
        own = self._own_event(event, call)
        with self._lock:
            closed, mark = own._closed, own._mark
        if closed:
            raise EventStateError(f"toy: {call} refused {own!r}: it was destroyed; create another")
        if mark is None:
            raise EventStateError(
                f"toy: {call} refused {own!r}: it was never recorded, so there is nothing to wait "
                "for or time; call event_record(event, stream) first"
            )
        return mark

    def _enqueue(self, stream: object, call: str, work: Callable[[], object]) -> None:
        own = self._own_stream(stream, call)
        # Under the lock, so that a concurrent stream_destroy cannot slip its stop in first.
        with self._lock:
            if own._closed:
                raise EventStateError(
                    f"toy: {call} refused {own!r}: it was destroyed; create another"
                )
            own._queue.put(work)

    # -- the protocol -------------------------------------------------------------------------

    def event_create(self) -> ToyEvent:
        """A new event; timing is always on."""
        with self._lock:
            self._events += 1
        return ToyEvent(self)

    def event_destroy(self, event: ToyEvent) -> None:
        """Release ``event``; a second call is a no-op."""
        own = self._own_event(event, "event_destroy")
        with self._lock:
            if not own._closed:
                own._closed = True
                self._events -= 1

    def event_record(self, event: ToyEvent, stream: ToyStream) -> None:
        """Queue a stamp of ``event`` on ``stream``; returns at once."""
        own = self._own_event(event, "event_record")
        mark = _Mark()
        with self._lock:
            if own._closed:
                raise EventStateError(
                    f"toy: event_record refused {own!r}: it was destroyed; create another"
                )
        self._enqueue(stream, "event_record", mark.stamp)
        with self._lock:
            own._mark = mark

    def event_wait(self, event: ToyEvent) -> None:
        """Block until the stream reached ``event``'s latest record."""
        self._mark_of(event, "event_wait").reached.wait()

    def event_query(self, event: ToyEvent) -> bool:
        """True when the stream reached ``event``'s latest record; never blocks."""
        return self._mark_of(event, "event_query").reached.is_set()

    def event_elapsed(self, start: ToyEvent, end: ToyEvent) -> int:
        """Nanoseconds between the two stamps, clamped at 0."""
        first = self._mark_of(start, "event_elapsed")
        last = self._mark_of(end, "event_elapsed")
        if not (first.reached.is_set() and last.reached.is_set()):
            raise DriverError(
                "toy",
                "event_elapsed",
                _NOT_READY,
                "TOY_NOT_READY",
                "an event has not been reached yet; wait for both first",
                not_ready=True,
            )
        return max(0, last.stamp_ns - first.stamp_ns)

    def stream_wait_event(self, stream: ToyStream, event: ToyEvent) -> None:
        """Later work on ``stream`` waits for ``event``; the caller does not."""
        mark = self._mark_of(event, "stream_wait_event")
        self._enqueue(stream, "stream_wait_event", mark.reached.wait)

    def stream_synchronize(self, stream: ToyStream) -> None:
        """Block until everything queued on ``stream`` so far has run."""
        mark = _Mark()
        self._enqueue(stream, "stream_synchronize", mark.stamp)
        mark.reached.wait()

    def stream_create_non_blocking(self) -> ToyStream:
        """A new stream with its own worker thread."""
        stream = ToyStream(self)
        with self._lock:
            self._streams += 1
        return stream

    def stream_destroy(self, stream: ToyStream) -> None:
        """Release ``stream`` once its queued work has run; a second call is a no-op."""
        own = self._own_stream(stream, "stream_destroy")
        with self._lock:
            if own._closed:
                return
            own._closed = True
            self._streams -= 1
            own._queue.put(None)

    # -- beyond the protocol ------------------------------------------------------------------

    def live_handles(self) -> LiveHandles:
        """Handles created and not destroyed yet; the conformance kit checks them for leaks."""
        with self._lock:
            return LiveHandles(self._events, self._streams)


if TYPE_CHECKING:
    _api: EventApi[ToyEvent, ToyStream] = ToyBackend()
    _query: SupportsEventQuery[ToyEvent] = ToyBackend()
