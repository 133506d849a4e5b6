"""Building blocks for a backend that spells a C driver API.

A backend only has to satisfy :class:`eventapi.EventApi`. Most backends wrap a C driver whose
handles are plain pointers, where a destroyed, foreign or never-recorded handle is undefined
behaviour rather than an error. :class:`DriverBackend` implements the protocol once over a
handful of ``_raw_*`` methods that spell the driver's calls, and adds what keeps such a driver
safe to call from Python:

* every handle is wrapped in an :class:`Event` or :class:`Stream` that remembers its backend
  object, whether it was closed and whether it was recorded, and a bad one is refused with
  :class:`~eventapi.EventStateError` before the driver sees it;
* a handle destroyed while another thread is inside a call with it (a fence closed while a
  waiter blocks on it) is destroyed when that call returns, never under it;
* a stream the backend did not create (a framework's stream, a raw handle) is adopted without
  ownership and never destroyed;
* each thread is prepared once before its first driver call (:meth:`DriverBackend._bind_thread`,
  where a driver makes its context or device current);
* live handles are counted, so tests can prove nothing leaks;
* negative elapsed readings are clamped to zero.

For a backend on a C driver binding whose calls return a tuple led by a status code, this
module also re-exports the pieces such a backend would otherwise write again (from
:mod:`eventapi._native`): :class:`DriverCalls` (status checks and error translation with the
driver's own names), :func:`launch_host_func` (the host-function trampoline),
:func:`foreign_stream_handle` (framework streams and raw handles), :func:`ms_to_ns`, and the
probe helpers :func:`open_driver_library` and :func:`c_int_out`.

The ``host`` backend, ``cuda`` and ``hip`` are all built on it. A third-party backend may use it
or satisfy the protocol directly; the conformance kit checks the behaviour, not the base class.
"""

from __future__ import annotations

import logging
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar, final

from ._errors import EventStateError
from ._native import (
    DriverCalls,
    c_int_out,
    foreign_stream_handle,
    launch_host_func,
    ms_to_ns,
    open_driver_library,
    pending_host_funcs,
)

if TYPE_CHECKING:
    from ._protocol import EventApi, SupportsCaptureCheck, SupportsEventQuery, SupportsHostFunc

__all__ = [
    "DriverBackend",
    "DriverCalls",
    "Event",
    "LiveHandles",
    "Stream",
    "c_int_out",
    "foreign_stream_handle",
    "launch_host_func",
    "ms_to_ns",
    "open_driver_library",
    "pending_host_funcs",
]

_log = logging.getLogger("eventapi")

RE = TypeVar("RE")
RS = TypeVar("RS")


class LiveHandles(NamedTuple):
    """Handles a backend object created and has not destroyed yet."""

    events: int
    streams: int


class _Handle:
    """State shared by event and stream handles; guarded by the owning backend's lock."""

    __slots__ = ("__weakref__", "_closed", "_owner", "_raw", "_users")

    _raw: Any
    _owner: DriverBackend[Any, Any] | None

    def __init__(self, raw: object, owner: DriverBackend[Any, Any] | None) -> None:
        self._raw = raw
        self._owner = owner
        self._closed = False
        # Calls under way with this handle; a destroy waits for them to leave (see _leave).
        self._users = 0

    @property
    def closed(self) -> bool:
        """True once the handle was destroyed. An adopted stream is never closed here."""
        return self._closed

    @property
    def backend(self) -> str:
        """The name of the backend this handle belongs to."""
        return self._owner.BACKEND if self._owner is not None else "?"


@final
class Event(_Handle, Generic[RE]):
    """An event handle of a :class:`DriverBackend`. Users receive it; they never build one.

    It may be passed between threads freely. ``recorded`` turns true after the first successful
    record and stays true: an event re-recorded marks the latest record, as in CUDA.
    """

    __slots__ = ("_recorded",)

    _raw: RE

    def __init__(self, raw: RE, owner: DriverBackend[RE, Any]) -> None:
        super().__init__(raw, owner)
        self._recorded = False

    @property
    def recorded(self) -> bool:
        """True once the event was recorded into a stream."""
        return self._recorded

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("recorded" if self._recorded else "new")
        return f"<{self.backend} event {self._raw!r} {state}>"

    def __del__(self) -> None:
        # Safety net for an event dropped without event_destroy; never raises.
        owner = self._owner
        if owner is not None and not self._closed and not sys.is_finalizing():
            owner._collect(self)


@final
class Stream(_Handle, Generic[RS]):
    """A stream handle of a :class:`DriverBackend`. Users receive it; they never build one.

    ``owned`` is true for a stream the backend created, which :meth:`DriverBackend.stream_destroy`
    releases; an adopted stream (a framework's, or a raw handle) is never destroyed by eventapi.
    """

    __slots__ = ("_owned",)

    _raw: RS

    def __init__(self, raw: RS, owner: DriverBackend[Any, RS], *, owned: bool) -> None:
        super().__init__(raw, owner)
        self._owned = owned

    @property
    def owned(self) -> bool:
        """True when this backend created the stream and will destroy it."""
        return self._owned

    @property
    def raw(self) -> RS:
        """The driver's own handle, for passing to the framework that launches work."""
        return self._raw

    def __repr__(self) -> str:
        kind = "stream" if self._owned else "adopted stream"
        state = " closed" if self._closed else ""
        return f"<{self.backend} {kind} {self._raw!r}{state}>"

    def __del__(self) -> None:
        owner = self._owner
        if owner is not None and self._owned and not self._closed and not sys.is_finalizing():
            owner._collect(self)


class DriverBackend(ABC, Generic[RE, RS]):
    """The :class:`~eventapi.EventApi` protocol implemented once over ``_raw_*`` driver calls.

    Subclasses set ``BACKEND`` and spell the abstract ``_raw_*`` methods, each of which raises
    :class:`~eventapi.DriverError` when the driver fails. They may override
    :meth:`_bind_thread` and :meth:`_adopt_stream`. The optional capabilities
    (``event_query``, ``stream_is_capturing``, ``stream_launch_host_func``) are implemented here
    too and call ``_raw_event_query``, ``_raw_stream_is_capturing`` and
    ``_raw_launch_host_func``, which a subclass must spell: a backend without them should
    satisfy the protocol directly instead, so that capability detection stays truthful.
    """

    BACKEND: str

    def __init__(self) -> None:
        # Re-entrant: a garbage collection can start on any allocation, including one made
        # while this lock is held, and the finalizer it runs may destroy another handle of the
        # same backend object on the same thread. Each section is a self-contained update of a
        # flag or a counter, so re-entry cannot observe one half-done.
        self._lock = threading.RLock()
        self._tls = threading.local()
        self._live_events = 0
        self._live_streams = 0

    # -- what a backend spells --------------------------------------------------------------

    def _bind_thread(self) -> None:
        """Prepare the calling thread for driver calls; runs once per thread before its first.

        Where a driver keeps per-thread state (CUDA's current context, HIP's current device),
        make this backend's current here, so that a thread that never touched the driver can
        wait on an event recorded elsewhere.
        """

    def _adopt_stream(self, stream: object) -> RS | None:
        """Return the raw handle of a stream this backend did not create, or None if not one.

        The default adopts nothing. A driver backend accepts its frameworks' stream objects and
        raw integer handles here.
        """
        return None

    @abstractmethod
    def _raw_event_create(self) -> RE: ...

    @abstractmethod
    def _raw_event_destroy(self, event: RE) -> None: ...

    @abstractmethod
    def _raw_event_record(self, event: RE, stream: RS) -> None: ...

    @abstractmethod
    def _raw_event_wait(self, event: RE) -> None: ...

    @abstractmethod
    def _raw_event_query(self, event: RE) -> bool: ...

    @abstractmethod
    def _raw_event_elapsed_ns(self, start: RE, end: RE) -> int:
        """Device time from start to end in nanoseconds, unclamped (the base clamps)."""

    @abstractmethod
    def _raw_stream_wait_event(self, stream: RS, event: RE) -> None: ...

    @abstractmethod
    def _raw_stream_synchronize(self, stream: RS) -> None: ...

    @abstractmethod
    def _raw_stream_create_non_blocking(self) -> RS: ...

    @abstractmethod
    def _raw_stream_destroy(self, stream: RS) -> None: ...

    @abstractmethod
    def _raw_stream_is_capturing(self, stream: RS) -> bool: ...

    @abstractmethod
    def _raw_launch_host_func(self, stream: RS, fn: Callable[[], object]) -> None: ...

    # -- the protocol -------------------------------------------------------------------------

    def event_create(self) -> Event[RE]:
        """Create a timing-enabled event. See :meth:`eventapi.EventApi.event_create`."""
        self._ensure_thread()
        raw = self._raw_event_create()
        event: Event[RE] = Event(raw, self)
        with self._lock:
            self._live_events += 1
        return event

    def event_destroy(self, event: Event[RE]) -> None:
        """Release an event; a second call is a no-op. Deferred while another call uses it."""
        self._check_owner(event, "event_destroy", Event)
        self._close(event)

    def event_record(self, event: Event[RE], stream: Stream[RS] | object) -> None:
        """Enqueue the event's timestamp on ``stream``."""
        handle = self._stream(stream, "event_record")
        self._check_owner(event, "event_record", Event)
        self._enter_both(handle, event, "event_record")
        try:
            self._raw_event_record(event._raw, handle._raw)
            event._recorded = True
        finally:
            self._leave_both(handle, event)

    def event_wait(self, event: Event[RE]) -> None:
        """Block until the device reached ``event``; releases the GIL."""
        raw = self._enter_event(event, "event_wait", need_recorded=True)
        try:
            self._raw_event_wait(raw)
        finally:
            self._leave(event)

    def event_query(self, event: Event[RE]) -> bool:
        """True when the device reached ``event``; never blocks."""
        raw = self._enter_event(event, "event_query", need_recorded=True)
        try:
            return self._raw_event_query(raw)
        finally:
            self._leave(event)

    def event_elapsed(self, start: Event[RE], end: Event[RE]) -> int:
        """Device nanoseconds from ``start`` to ``end``, clamped at 0."""
        self._check_recorded(start, "event_elapsed")
        self._check_recorded(end, "event_elapsed")
        self._enter_both(start, end, "event_elapsed")
        try:
            return max(0, self._raw_event_elapsed_ns(start._raw, end._raw))
        finally:
            self._leave_both(start, end)

    def stream_wait_event(self, stream: Stream[RS] | object, event: Event[RE]) -> None:
        """Make ``stream`` wait for ``event`` on the device; the host does not block."""
        handle = self._stream(stream, "stream_wait_event")
        self._check_recorded(event, "stream_wait_event")
        self._enter_both(handle, event, "stream_wait_event")
        try:
            self._raw_stream_wait_event(handle._raw, event._raw)
        finally:
            self._leave_both(handle, event)

    def stream_synchronize(self, stream: Stream[RS] | object) -> None:
        """Block until ``stream`` drained; releases the GIL."""
        handle = self._stream(stream, "stream_synchronize")
        raw = self._enter(handle, "stream_synchronize")
        try:
            self._raw_stream_synchronize(raw)
        finally:
            self._leave(handle)

    def stream_create_non_blocking(self) -> Stream[RS]:
        """Create a stream that does not synchronize with the legacy default stream."""
        self._ensure_thread()
        raw = self._raw_stream_create_non_blocking()
        stream: Stream[RS] = Stream(raw, self, owned=True)
        with self._lock:
            self._live_streams += 1
        return stream

    def stream_destroy(self, stream: Stream[RS]) -> None:
        """Release a stream this backend created; a second call is a no-op."""
        self._check_owner(stream, "stream_destroy", Stream)
        if not stream._owned:
            raise EventStateError(
                f"{self.BACKEND}: stream_destroy refused {stream!r}: eventapi did not create it, "
                "so it is not eventapi's to destroy; release it through the library that made it"
            )
        self._close(stream)

    def stream_is_capturing(self, stream: Stream[RS] | object) -> bool:
        """True while ``stream`` is capturing a graph."""
        handle = self._stream(stream, "stream_is_capturing")
        raw = self._enter(handle, "stream_is_capturing")
        try:
            return self._raw_stream_is_capturing(raw)
        finally:
            self._leave(handle)

    def stream_launch_host_func(
        self, stream: Stream[RS] | object, fn: Callable[[], object]
    ) -> None:
        """Run ``fn()`` on a driver thread when ``stream`` reaches this point."""
        if not callable(fn):
            raise TypeError(f"stream_launch_host_func needs a callable, got {fn!r}")
        handle = self._stream(stream, "stream_launch_host_func")
        raw = self._enter(handle, "stream_launch_host_func")
        try:
            self._raw_launch_host_func(raw, fn)
        finally:
            self._leave(handle)

    # -- beyond the protocol ------------------------------------------------------------------

    def adopt_stream(self, stream: object) -> Stream[RS]:
        """Wrap a stream this backend did not create, without taking ownership.

        Passing the returned handle is cheaper than passing the foreign object on every call.
        Raises :class:`~eventapi.EventStateError` when ``stream`` is not one this backend can
        use.
        """
        return self._stream(stream, "adopt_stream")

    def live_handles(self) -> LiveHandles:
        """Events and streams this backend object created and has not destroyed yet."""
        with self._lock:
            events, streams = self._live_events, self._live_streams
        return LiveHandles(events, streams)

    # -- bookkeeping --------------------------------------------------------------------------

    def _ensure_thread(self) -> None:
        tls = self._tls
        if not getattr(tls, "bound", False):
            self._bind_thread()
            tls.bound = True

    def _check_owner(self, handle: object, call: str, kind: type[_Handle]) -> None:
        if type(handle) is not kind or handle._owner is not self:
            what = "an event" if kind is Event else "a stream"
            raise EventStateError(
                f"{self.BACKEND}: {call} refused {handle!r}: not {what} of this {self.BACKEND} "
                f"backend object; pass {what} created by the same backend object "
                f"(eventapi.backend(...) returns one per device)"
            )

    def _stream(self, stream: object, call: str) -> Stream[RS]:
        if type(stream) is Stream:
            self._check_owner(stream, call, Stream)
            return stream
        if isinstance(stream, _Handle):
            self._check_owner(stream, call, Stream)
        raw = self._adopt_stream(stream)
        if raw is None:
            raise EventStateError(
                f"{self.BACKEND}: {call} refused {stream!r}: not a stream this backend can use; "
                "pass one from stream_create_non_blocking() or adopt_stream()"
            )
        return Stream(raw, self, owned=False)

    def _check_recorded(self, event: Event[RE], call: str) -> None:
        self._check_owner(event, call, Event)
        if not event._recorded:
            if event._closed:
                self._refuse_closed(event, call)
            raise EventStateError(
                f"{self.BACKEND}: {call} refused {event!r}: it was never recorded, so there is "
                "nothing to wait for or time; call event_record(event, stream) first"
            )

    def _enter_event(self, event: Event[RE], call: str, *, need_recorded: bool) -> RE:
        if need_recorded:
            self._check_recorded(event, call)
        else:
            self._check_owner(event, call, Event)
        raw: RE = self._enter(event, call)
        return raw

    # A call holds each handle it uses from _enter to _leave, so that a destroy from another
    # thread meanwhile is deferred until the call is out of the driver. Calls on two handles
    # take both under one acquisition of the lock: these are the per-window hot path.

    def _enter_both(self, first: _Handle, second: _Handle, call: str) -> None:
        if not getattr(self._tls, "bound", False):
            self._ensure_thread()
        with self._lock:
            closed = first if first._closed else second if second._closed else None
            if closed is None:
                first._users += 1
                second._users += 1
        if closed is not None:
            self._refuse_closed(closed, call)

    def _leave_both(self, first: _Handle, second: _Handle) -> None:
        with self._lock:
            first._users -= 1
            second._users -= 1
            if not (first._closed or second._closed):
                return
        self._leave_closed(first)
        self._leave_closed(second)

    def _enter(self, handle: _Handle, call: str) -> Any:
        self._ensure_thread()
        with self._lock:
            closed = handle._closed
            if not closed:
                handle._users += 1
        if closed:
            self._refuse_closed(handle, call)
        return handle._raw

    def _leave(self, handle: _Handle) -> None:
        with self._lock:
            handle._users -= 1
            if not handle._closed:
                return
        self._leave_closed(handle)

    def _leave_closed(self, handle: _Handle) -> None:
        # A destroy was asked for while this call held the handle; whoever leaves last does it.
        with self._lock:
            deferred = handle._closed and handle._users == 0
            if deferred:
                handle._users = -1  # negative: done, so no later leaver destroys it again
        if deferred:
            # The destroy was asked for by another thread, which has returned already; a
            # failure here belongs to nobody's call, so it is logged.
            try:
                self._destroy_now(handle)
            except Exception:
                _log.warning(
                    "%s: deferred destroy of %r failed", self.BACKEND, handle, exc_info=True
                )

    def _refuse_closed(self, handle: _Handle, call: str) -> None:
        raise EventStateError(
            f"{self.BACKEND}: {call} refused {handle!r}: it was already destroyed; "
            "create a new one (a destroyed handle is never passed to the driver)"
        )

    def _close(self, handle: _Handle) -> None:
        with self._lock:
            if handle._closed:
                return
            handle._closed = True
            now = handle._users == 0
            if now:
                handle._users = -1
        if now:
            self._destroy_now(handle)

    def _destroy_now(self, handle: _Handle) -> None:
        # Counted as gone whether or not the driver agrees: a handle it refused to destroy is
        # unusable either way, and a second destroy would be undefined behaviour.
        is_event = type(handle) is Event
        with self._lock:
            if is_event:
                self._live_events -= 1
            else:
                self._live_streams -= 1
        self._ensure_thread()
        if is_event:
            self._raw_event_destroy(handle._raw)
        else:
            self._raw_stream_destroy(handle._raw)

    def _collect(self, handle: _Handle) -> None:
        # From a handle's __del__: the user dropped it without destroying it.
        try:
            self._close(handle)
        except Exception:  # a finalizer has nowhere to raise to
            _log.warning("%s: destroying a dropped %r failed", self.BACKEND, handle, exc_info=True)


if TYPE_CHECKING:

    def _conforms(backend: DriverBackend[object, object]) -> None:
        _api: EventApi[Event[object], Stream[object]] = backend
        _query: SupportsEventQuery[Event[object]] = backend
        _capture: SupportsCaptureCheck[Stream[object]] = backend
        _host_func: SupportsHostFunc[Stream[object]] = backend
