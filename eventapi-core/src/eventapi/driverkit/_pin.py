"""Handles one owner holds for a long time, and the cheap calls on them: :class:`Pin`.

Part of :mod:`eventapi.driverkit`, which users import it from and which documents it.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, NoReturn, final

from .._errors import EventStateError, UnsupportedError
from ._backend import CaptureCheckMixin, DriverBackend
from ._handles import RE, RS, Event, Stream, _Handle

__all__ = ["Pin"]

_log = logging.getLogger("eventapi")


@final
class Pin(Generic[RE, RS]):
    """Streams and events one owner holds for a long time, and the cheap calls on them.

    Built by :meth:`DriverBackend.pin`; users of eventapi never need one (the profiler uses one
    for its pooled events). A call through the backend's protocol methods resolves each handle
    it is given and counts itself in and out of each under the backend's lock, so that a
    destroy from another thread meanwhile is deferred. An owner that records its own events
    into the same streams thousands of times can instead hold them once: a pin counts a handle
    in when it takes it (:meth:`hold_stream`, :meth:`event_create`) and out when it lets it go
    (:meth:`event_destroy`, :meth:`close`), and a call through the pin only checks that the
    handles are its own and still open, then calls the driver.

    What the protocol methods guarantee holds here too:

    * a handle the pin does not hold (another pin's, another backend object's, a plain one)
      and a closed one never reach the driver: :class:`~eventapi.EventStateError`;
    * a held handle is never destroyed under a call: a destroy asked for elsewhere
      (``event_destroy`` or ``stream_destroy`` on the backend object) closes it at once, so
      the pin refuses it from then on, and is carried out when the pin lets it go; the handle
      stays counted in ``live_handles()`` until then;
    * each thread is prepared before its first driver call, and a forked child's calls are
      refused, as on the backend object.

    Threads: one owner uses a pin, one thread at a time (as a profiler is used). Its calls
    hold the pin's own lock, not the backend's, so a :meth:`close` from another thread waits
    for a call in progress instead of releasing its handles under it. ``event_wait`` blocks
    without that lock, counted in as the protocol's ``event_wait`` is.
    """

    __slots__ = (
        "__weakref__",
        "_backend",
        "_capture",
        "_closed",
        "_events",
        "_lock",
        "_record_unless",
        "_streams",
    )

    def __init__(self, backend: DriverBackend[RE, RS]) -> None:
        self._backend = backend
        self._closed = False
        # Looked up once: an isinstance against the mixin costs more than the driver call. An
        # object that switched the capability off for itself (stream_is_capturing = None) is
        # taken at its word, as the core's capability detection takes it.
        self._capture: Callable[[RS], bool] | None = None
        self._record_unless: Callable[[RE, RS], bool] | None = None
        if isinstance(backend, CaptureCheckMixin) and callable(
            getattr(backend, "stream_is_capturing", None)
        ):
            self._capture = backend._raw_stream_is_capturing
            self._record_unless = backend._raw_event_record_unless_capturing
        # Re-entrant for the reason the backend's lock is: a finalizer run by a collection
        # inside a locked section may release another handle of this pin.
        self._lock = threading.RLock()
        self._streams: tuple[Stream[RS], ...] = ()  # a tuple: `in` is the hot path's check
        self._events: set[Event[RE]] = set()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran: the pin holds nothing and refuses every call."""
        return self._closed

    def hold_stream(self, stream: Stream[RS] | object) -> Stream[RS]:
        """Hold ``stream`` until :meth:`close`; returns the handle to pass to this pin's calls.

        ``stream`` is resolved as the protocol methods resolve it: a stream of the backend
        object, or a foreign one it adopts. Raises :class:`~eventapi.EventStateError` for a
        closed or foreign stream, or after :meth:`close`.
        """
        backend = self._live("hold_stream")
        handle = backend._stream(stream, "hold_stream")
        backend._enter(handle, "hold_stream")
        with self._lock:
            self._streams = (*self._streams, handle)
        return handle

    def event_create(self) -> Event[RE]:
        """Create a timing-enabled event that this pin holds until :meth:`event_destroy`.

        Raises the backend's :class:`~eventapi.DriverError` when the driver refuses it.
        """
        backend = self._live("event_create")
        event = backend.event_create()
        with backend._lock:
            event._users += 1  # the pin's hold: a destroy elsewhere waits for its release
        event._pin = self
        with self._lock:
            self._events.add(event)
        return event

    def event_destroy(self, event: Event[RE]) -> None:
        """Let ``event`` go and destroy it (or, while another call uses it, when that returns).

        Raises :class:`~eventapi.EventStateError` for an event this pin does not hold, and the
        :class:`~eventapi.DriverError` of a destroy the driver refused (the event is released
        either way).
        """
        with self._lock:
            if type(event) is not Event or event._pin is not self:
                self._refuse(event, "event_destroy")
            event._pin = None
            self._events.discard(event)
        _release(self._backend, event)

    # event_record and event_record_unless_capturing check their handles inline, not through
    # a helper as the readings do (_reading): each is made once or twice per profiling window,
    # and a call frame there costs more than the checks it would hold.

    def event_record(self, event: Event[RE], stream: Stream[RS]) -> None:
        """Enqueue ``event``'s timestamp on ``stream``: both must be held by this pin."""
        with self._lock:
            if event._pin is not self or event._closed:
                self._refuse(event, "event_record")
            if stream not in self._streams or stream._closed:
                self._refuse(stream, "event_record")
            backend = self._backend
            if not getattr(backend._tls, "bound", False):
                backend._ensure_thread("event_record")
            backend._raw_event_record(event._raw, stream._raw)
            event._recorded = True

    def event_record_unless_capturing(self, event: Event[RE], stream: Stream[RS]) -> bool:
        """Record ``event`` on ``stream`` unless the stream is capturing a graph.

        Returns True when recorded, False when the stream was capturing (nothing recorded).
        The capture check and the record are made back to back, one driver call after the
        other, as a caller that screens a stream before each record makes them. A backend
        without :class:`CaptureCheckMixin` cannot tell, and records. Both handles must be held
        by this pin.
        """
        with self._lock:
            if event._pin is not self or event._closed:
                self._refuse(event, "event_record_unless_capturing")
            if stream not in self._streams or stream._closed:
                self._refuse(stream, "event_record_unless_capturing")
            backend = self._backend
            if not getattr(backend._tls, "bound", False):
                backend._ensure_thread("event_record_unless_capturing")
            record_unless = self._record_unless
            if record_unless is None:
                backend._raw_event_record(event._raw, stream._raw)
            elif not record_unless(event._raw, stream._raw):
                return False
            event._recorded = True
            return True

    def event_elapsed(self, start: Event[RE], end: Event[RE]) -> int:
        """Device nanoseconds from ``start`` to ``end`` (clamped at 0); both held and recorded."""
        with self._lock:
            backend = self._reading("event_elapsed", start, end)
            return max(0, backend._raw_event_elapsed_ns(start._raw, end._raw))

    def read_windows(
        self, starts: Sequence[Event[RE]], ends: Sequence[Event[RE]], later: Event[RE]
    ) -> tuple[list[int], list[int]]:
        """What a profiler reads of its windows at collect, in one call.

        Returns ``(durations, befores)``: ``event_elapsed(starts[i], ends[i])`` and
        ``event_elapsed(starts[i], later)`` for each ``i`` (``later`` being the anchor's event,
        recorded after every window), clamped at 0. The lock is taken and each handle checked
        once, and the readings are made through ``DriverBackend._raw_event_elapsed_ns_many``
        in one batch, durations first. Raises :class:`~eventapi.EventStateError` for an event
        this pin does not hold, a closed one or one never recorded (before any reading),
        :class:`ValueError` when ``starts`` and ``ends`` differ in length, and the first
        failed reading's :class:`~eventapi.DriverError`.
        """
        count = len(starts)
        if len(ends) != count:
            raise ValueError(f"read_windows: {count} starts but {len(ends)} ends")
        with self._lock:
            backend = self._reading("read_windows", later, *starts, *ends)
            raw_starts = [event._raw for event in starts]
            readings = backend._raw_event_elapsed_ns_many(
                raw_starts + raw_starts, [event._raw for event in ends] + [later._raw] * count
            )
        clamped = [reading if reading > 0 else 0 for reading in readings]
        return clamped[:count], clamped[count:]

    def _reading(self, call: str, *events: Event[RE]) -> DriverBackend[RE, RS]:
        """The backend, once each of ``events`` is held, open and recorded (the lock held)."""
        for event in events:
            if event._pin is not self or event._closed or not event._recorded:
                self._refuse(event, call)
        backend = self._backend
        if not getattr(backend._tls, "bound", False):
            backend._ensure_thread(call)
        return backend

    def event_wait(self, event: Event[RE]) -> None:
        """Block until the device reached ``event`` (held by this pin); releases the GIL."""
        with self._lock:
            if event._pin is not self:
                self._refuse(event, "event_wait")
            backend = self._backend
        # Counted in as the protocol's own wait is, and without the pin's lock: a wait may take
        # long, and a close meanwhile then defers the event's destroy to the wait's return.
        backend.event_wait(event)

    def stream_is_capturing(self, stream: Stream[RS]) -> bool:
        """True while ``stream`` (held by this pin) is capturing a graph.

        Raises :class:`~eventapi.UnsupportedError` when the backend lacks
        :class:`CaptureCheckMixin`.
        """
        with self._lock:
            if stream not in self._streams or stream._closed:
                self._refuse(stream, "stream_is_capturing")
            backend = self._backend
            capture = self._capture
            if capture is None:
                raise UnsupportedError(
                    f"{backend.BACKEND}: stream_is_capturing needs the capture-check "
                    "capability, which this backend lacks; check "
                    "isinstance(api, eventapi.SupportsCaptureCheck) first"
                )
            if not getattr(backend._tls, "bound", False):
                backend._ensure_thread("stream_is_capturing")
            return capture(stream._raw)

    def close(self) -> None:
        """Destroy the events still held and let the streams go. Idempotent; never raises.

        A stream destroyed elsewhere while held is destroyed now. Failures are logged on the
        ``eventapi`` logger: this runs from ``close()`` paths and finalizers.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            backend = self._backend
            events, self._events = self._events, set()
            streams, self._streams = self._streams, ()
            for event in events:
                event._pin = None
        for event in events:
            try:
                _release(backend, event)
            except Exception:
                _log.warning("%s: destroying a pinned event failed", backend.BACKEND, exc_info=True)
        for stream in streams:
            backend._leave(stream)  # destroys it now if it was destroyed elsewhere; logs failures

    def __del__(self, _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
        # Safety net for a pin dropped unclosed: its holds would keep its handles alive forever.
        if not getattr(self, "_closed", True) and not _finalizing():
            self.close()

    def __repr__(self) -> str:
        if self._closed:
            return "<Pin closed>"
        held = f"{len(self._streams)} streams, {len(self._events)} events"
        return f"<Pin of {self._backend!r}: {held}>"

    def _live(self, call: str) -> DriverBackend[RE, RS]:
        if self._closed:
            raise EventStateError(
                f"{self._backend.BACKEND}: Pin.{call} refused: the pin was closed and holds "
                "nothing; take a new one with backend.pin()"
            )
        return self._backend

    def _refuse(self, handle: object, call: str) -> NoReturn:
        backend = self._live(call)
        if isinstance(handle, _Handle) and handle._closed:
            backend._refuse_closed(handle, call)
        if type(handle) is Event and handle._pin is self and not handle._recorded:
            backend._refuse_unrecorded(handle, call)
        raise EventStateError(
            f"{backend.BACKEND}: Pin.{call} refused {handle!r}: this pin does not hold it; pass "
            "a stream from pin.hold_stream() or an event from pin.event_create() of the same pin"
        )


def _release(backend: DriverBackend[Any, Any], event: Event[Any]) -> None:
    # Drops a pin's hold on ``event`` and destroys it, unless another call still uses it (then
    # the last one out does). A destroy asked for elsewhere while the pin held it is done now.
    with backend._lock:
        if event._users < 0:  # destroyed already (a forked child destroys at once)
            return
        event._users -= 1
        event._closed = True
        now = event._users == 0 or backend._forked
        if now:
            event._users = -1
    if now:
        backend._destroy_now(event)
