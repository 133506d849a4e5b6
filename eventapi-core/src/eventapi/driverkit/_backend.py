"""The protocol implemented once over a driver's raw calls: :class:`DriverBackend`, and the
classes that each add an optional capability to it (:class:`EventQueryMixin`,
:class:`CaptureCheckMixin`, :class:`HostFuncMixin`).

Part of :mod:`eventapi.driverkit`, which users import these from and whose docstring states the
contract a subclass follows; its handles are in :mod:`eventapi.driverkit._handles`.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar, Generic, NoReturn, Self, TypeVar, cast, final

from .._arguments import bounded_repr
from .._errors import CaptureError, DriverError, EventStateError
from .._logger import logger
from ._handles import OWED, RE, RS, Event, LiveHandles, Stream, _Handle

if TYPE_CHECKING:
    from .. import _protocol

__all__ = ["CaptureCheckMixin", "DriverBackend", "EventQueryMixin", "HostFuncMixin"]

H = TypeVar("H", bound=_Handle)


# Every DriverBackend object alive, so that a forked child can mark the parent's unusable.
_backends: weakref.WeakSet[DriverBackend[Any, Any]] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # Runs in the child right after fork(), on its only thread. Each parent object gets fresh
    # locks (another parent thread may have held one at the fork, and that thread does not
    # exist here) and is marked forked, so every call and handle of it is refused from now on.
    for backend in list(_backends):
        backend._fresh_state(forked=True)


os.register_at_fork(after_in_child=_after_fork_in_child)


class DriverBackend(ABC, Generic[RE, RS]):
    """The :class:`~eventapi.EventApi` protocol implemented once over ``_raw_*`` driver calls.

    Subclasses set ``BACKEND``, call ``super().__init__()`` and spell the abstract ``_raw_*``
    methods as the module docstring's contract says. They may override the hooks
    :meth:`_bind_thread`, :meth:`_adopt_stream`, :meth:`_shares_handles_with` and
    :meth:`_context_lost`, and use :meth:`_hold_stream` and
    :meth:`_hold_event` in calls of their own. The optional capabilities come from
    :class:`EventQueryMixin`, :class:`CaptureCheckMixin` and :class:`HostFuncMixin`.

    Every method may be called from any thread. A handle of another object is refused with
    :class:`~eventapi.EventStateError`, except where :meth:`_shares_handles_with` says the
    other object is a sibling device of the same driver: then ``event_wait`` and
    ``event_query`` take its events, and ``stream_wait_event`` lets one of this object's
    streams wait on one.
    """

    BACKEND: ClassVar[str]

    # sys.is_finalizing, read from the class by the finalizers of this object and of its
    # handles, which must read no module global at interpreter shutdown (see _handles).
    _is_finalizing: ClassVar[Callable[[], bool]] = sys.is_finalizing

    def __init__(self) -> None:
        self._fresh_state(forked=False)
        self._live: dict[type[_Handle], int] = {Event: 0, Stream: 0}
        self._lost_logged = False
        self._finalized = False  # __del__ ran
        self._gone = False  # _last_handle_gone ran
        _backends.add(self)

    def _fresh_state(self, *, forked: bool) -> None:
        # The lock and the threads' state, new: as the object is created, and again in a child
        # forked after it was (see _after_fork_in_child), there marked forked. The lock is
        # re-entrant: a garbage collection can start on any allocation, including one made
        # while it is held, and the finalizer it runs may destroy another handle of the same
        # backend object on the same thread. Each section is a self-contained update of a flag
        # or a counter, so re-entry cannot observe one half-done.
        self._lock = threading.RLock()
        self._tls = threading.local()
        self._forked = forked

    # -- hooks a backend may override ---------------------------------------------------------

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

    def _shares_handles_with(self, other: DriverBackend[Any, Any]) -> bool:
        """True when ``other`` is another device of this same driver in this process.

        Then the driver lets this object's streams wait on ``other``'s events
        (``stream_wait_event``) and any thread wait on or query them (``event_wait``,
        ``event_query``); recording into another device's stream, timing events of two devices
        and destroying another object's handle stay refused. Never asked about ``self``. The
        default shares nothing. Answer False for an object of the *same* device: an object
        built directly from the class owns its own handles, and the conformance kit checks
        that a second object refuses them.
        """
        return False

    def _context_lost(self) -> DriverError | None:
        """The error that lost this device's context for good, or None while it is usable.

        A driver with sticky errors (CUDA's and HIP's illegal address, say: every later call
        returns the same error until the process exits) returns the first such error here, as
        :attr:`DriverCalls.lost` does. Destroys are then not passed to the driver, and the
        handles left are logged once instead of once each.
        """
        return None

    def _last_handle_gone(self) -> None:
        """Release what the object holds for its handles' sake (a device context, say).

        Runs once, after the object was garbage-collected and every handle it created was
        destroyed and counted gone: right when the object is
        collected, or, when it is collected in a reference cycle together with handles of
        its own, after the last of those. Never at interpreter shutdown (the driver frees
        everything at exit). Failures are only worth a log line; it must not raise.
        """

    # -- the required driver calls ------------------------------------------------------------

    @abstractmethod
    def _raw_event_create(self) -> RE:
        """A timing-enabled event."""

    @abstractmethod
    def _raw_event_destroy(self, event: RE) -> None:
        """Release ``event`` at once; a record still queued may complete harmlessly."""

    @abstractmethod
    def _raw_event_record(self, event: RE, stream: RS) -> None:
        """Enqueue a record of ``event`` on ``stream`` and return."""

    @abstractmethod
    def _raw_event_wait(self, event: RE) -> None:
        """Block, with the GIL released, until the device reached ``event``'s latest record."""

    @abstractmethod
    def _raw_event_elapsed_ns(self, start: RE, end: RE) -> int:
        """Device time from start to end in nanoseconds, unclamped (the base clamps)."""

    def _raw_event_elapsed_ns_many(self, starts: list[RE], ends: list[RE]) -> list[int]:
        """``_raw_event_elapsed_ns(starts[i], ends[i])`` for each ``i``, in order, unclamped.

        Raises the first reading's :class:`~eventapi.DriverError`. Override it where the
        driver reads many pairs in one call.
        """
        read = self._raw_event_elapsed_ns
        return [read(start, end) for start, end in zip(starts, ends, strict=True)]

    @abstractmethod
    def _raw_stream_wait_event(self, stream: RS, event: RE) -> None:
        """Make ``stream`` wait on the device for ``event``'s record current now."""

    @abstractmethod
    def _raw_stream_synchronize(self, stream: RS) -> None:
        """Block, with the GIL released, until ``stream`` drained."""

    @abstractmethod
    def _raw_stream_create_non_blocking(self) -> RS:
        """A stream that does not synchronize with the legacy default stream."""

    @abstractmethod
    def _raw_stream_destroy(self, stream: RS) -> None:
        """Release ``stream`` without waiting for its queued work, which still completes."""

    # -- what the fast path asks of the driver: spelled by CaptureCheckMixin's backends ---------

    def _raw_stream_is_capturing(self, stream: RS) -> bool:
        """True while ``stream`` captures a graph. Without :class:`CaptureCheckMixin`, never."""
        return False

    def _raw_event_record_unless_capturing(self, event: RE, stream: RS) -> bool:
        """Unless ``stream`` captures a graph, record ``event`` into it; True when recorded.

        :meth:`_raw_stream_is_capturing`, then :meth:`_raw_event_record`: what a profiler's
        window makes as it opens and as it stops. A backend may override it to make the same
        two calls in one step (in C, say), which spares the Python between them.
        """
        if self._raw_stream_is_capturing(stream):
            return False
        self._raw_event_record(event, stream)
        return True

    # -- the protocol -------------------------------------------------------------------------

    def event_create(self) -> Event[RE]:
        """Create a timing-enabled event. See :meth:`eventapi.EventApi.event_create`."""
        return self._create(Event(self), self._raw_event_create, "event_create")

    def event_destroy(self, event: Event[RE] | object) -> None:
        """Release an event; a second call is a no-op. Deferred while another call uses it.

        A destroy the driver refuses still leaves the event closed and uncounted (it is never
        passed to the driver again), and raises the :class:`~eventapi.DriverError`.
        """
        self._close(self._own(event, "event_destroy", Event))

    def event_record(self, event: Event[RE] | object, stream: Stream[RS] | object) -> None:
        """Enqueue the event's timestamp on ``stream``."""
        handle = self._stream(stream, "event_record")
        event = self._own(event, "event_record", Event)
        with self._holding("event_record", handle, event):
            self._raw_event_record(event._raw, handle._raw)
            event._recorded = True

    def event_wait(self, event: Event[RE] | object) -> None:
        """Block until the device reached ``event``; releases the GIL.

        ``event`` may be a sibling device's (see :meth:`_shares_handles_with`).
        """
        owner, event = self._event_owner(event, "event_wait")
        with owner._holding("event_wait", event):
            owner._raw_event_wait(event._raw)

    def event_elapsed(self, start: Event[RE] | object, end: Event[RE] | object) -> int:
        """Device nanoseconds from ``start`` to ``end``, clamped at 0."""
        start = self._recorded(start, "event_elapsed")
        end = self._recorded(end, "event_elapsed")
        with self._holding("event_elapsed", start, end):
            return max(0, self._raw_event_elapsed_ns(start._raw, end._raw))

    def stream_wait_event(self, stream: Stream[RS] | object, event: Event[RE] | object) -> None:
        """Make ``stream`` wait for ``event`` on the device; the host does not block.

        ``event`` may be a sibling device's (see :meth:`_shares_handles_with`).
        """
        handle = self._stream(stream, "stream_wait_event")
        owner, event = self._event_owner(event, "stream_wait_event")
        # Each handle is held by the object whose lock guards it: a sibling's event by its own.
        with self._holding("stream_wait_event", handle), owner._holding("stream_wait_event", event):
            self._raw_stream_wait_event(handle._raw, event._raw)

    def stream_synchronize(self, stream: Stream[RS] | object) -> None:
        """Block until ``stream`` drained; releases the GIL."""
        with self._hold_stream(stream, "stream_synchronize") as raw:
            self._raw_stream_synchronize(raw)

    # -- the fast path (eventapi.SupportsFastPath) ---------------------------------------------
    #
    # What a fence and a profiler window do, each in one call that takes this object's own
    # handles only and checks each once: the same checks and results as the plain calls they
    # fuse (the conformance kit compares the two).

    def event_record_new(self, stream: Stream[RS] | object) -> Event[RE] | None:
        """Create an event and record it into ``stream``: what a fence does, in one call.

        The same as ``stream_is_capturing(stream)`` (with :class:`CaptureCheckMixin`),
        ``event_create()`` and ``event_record(event, stream)``. Returns None, creating nothing,
        when ``stream`` is capturing a graph. A failed record destroys the new event before its
        :class:`~eventapi.DriverError` is raised (a failure of that destroy is logged).
        """
        stream = self._own(stream, "event_record_new", Stream)
        with self._holding("event_record_new", stream):
            if self._raw_stream_is_capturing(stream._raw):
                return None
            event = self._create(Event(self), self._raw_event_create, "event_record_new")
            try:
                self._raw_event_record(event._raw, stream._raw)
            except BaseException:
                self._collect(event, "after its record failed")
                raise
            event._recorded = True
            return event

    def event_record_unless_capturing(
        self, event: Event[RE] | object, stream: Stream[RS] | object
    ) -> bool:
        """Unless ``stream`` is capturing a graph, record ``event`` into it; True when recorded.

        The same as ``stream_is_capturing(stream)`` (with :class:`CaptureCheckMixin`; without,
        the stream is taken as not capturing) followed by ``event_record(event, stream)``: what
        a profiling window makes as it opens and as it stops. Both handles must be this
        object's.
        """
        call = "event_record_unless_capturing"
        event = self._own(event, call, Event)
        stream = self._own(stream, call, Stream)
        self._ensure_thread(call)
        # A window's call, made twice per window: the lock is held across the record instead of
        # counting both handles in and out, since a record only enqueues; a destroy from another
        # thread meanwhile waits for it.
        with self._lock:
            if event._closed or stream._closed:
                self._refuse_closed(event if event._closed else stream, call)
            if not self._raw_event_record_unless_capturing(event._raw, stream._raw):
                return False
            event._recorded = True
        return True

    def event_elapsed_many(
        self, starts: Sequence[Event[RE]], ends: Sequence[Event[RE]]
    ) -> list[int]:
        """``event_elapsed(starts[i], ends[i])`` for each ``i``, in one call: a profiler's collect.

        Each event is checked (this object's, open and recorded) before any reading, and the
        readings are made in one batch (:meth:`_raw_event_elapsed_ns_many`), clamped at 0.
        Raises :class:`ValueError` when the two differ in length, and the first failed
        reading's :class:`~eventapi.DriverError` (``not_ready`` for an event not reached).
        """
        if len(starts) != len(ends):
            raise ValueError(f"event_elapsed_many: {len(starts)} starts but {len(ends)} ends")
        events = (*starts, *ends)
        for event in events:
            # What _recorded accepts, tested inline: a collect passes hundreds of events.
            if type(event) is not Event or event._owner is not self or not event._recorded:
                self._recorded(event, "event_elapsed_many")  # refuses it, saying why
        with self._holding("event_elapsed_many", *events):
            raws = [event._raw for event in events]
            readings = self._raw_event_elapsed_ns_many(raws[: len(starts)], raws[len(starts) :])
        return [max(0, reading) for reading in readings]

    def __del__(self) -> None:
        # Not for an object whose __init__ never ran, nor at interpreter shutdown (the driver
        # frees what is left at exit).
        if hasattr(self, "_gone") and not type(self)._is_finalizing():
            self._finalized = True
            self._after_uncount()

    def stream_create_non_blocking(self) -> Stream[RS]:
        """Create a stream that does not synchronize with the legacy default stream."""
        return self._create(
            Stream(self), self._raw_stream_create_non_blocking, "stream_create_non_blocking"
        )

    def stream_destroy(self, stream: Stream[RS] | object) -> None:
        """Release a stream this backend created; a second call is a no-op.

        The work queued on the stream still completes; the destroy returns without waiting
        for it where the driver allows (CUDA's), or once it is done where the driver's destroy
        waits (ROCm's may). A destroy the driver refuses still leaves the stream closed and
        uncounted, and raises
        the :class:`~eventapi.DriverError`.
        """
        stream = self._own(stream, "stream_destroy", Stream)
        if not stream._owned:
            raise EventStateError(
                f"{self.BACKEND}: stream_destroy refused {stream!r}: eventapi did not create it, "
                "so it is not eventapi's to destroy; release it through the library that made it"
            )
        self._close(stream)

    # -- beyond the protocol ------------------------------------------------------------------

    def adopt_stream(self, stream: object) -> Stream[RS]:
        """Wrap a stream this backend did not create, without taking ownership.

        Passing the returned handle is cheaper than passing the foreign object on every call. A
        stream of this object is returned as it is. Raises :class:`~eventapi.EventStateError`
        when ``stream`` is not one this backend can use, or was destroyed.
        """
        handle = self._stream(stream, "adopt_stream")
        if handle._closed:
            self._refuse_closed(handle, "adopt_stream")
        return handle

    def live_handles(self) -> LiveHandles:
        """Events and streams this backend object created and has not destroyed yet."""
        with self._lock:
            return LiveHandles(self._live[Event], self._live[Stream])

    # -- what a subclass may call -------------------------------------------------------------

    def _hold_stream(self, stream: Stream[RS] | object, call: str) -> AbstractContextManager[RS]:
        """Hold ``stream`` for the length of the ``with`` block; yields its raw handle.

        ``stream`` is resolved as every protocol call resolves it (this object's, or a foreign
        one :meth:`_adopt_stream` accepts); a closed or foreign one is refused with
        :class:`~eventapi.EventStateError` naming ``call``. A destroy from another thread
        meanwhile is deferred until the block ends.
        """
        return self._holding(call, self._stream(stream, call))

    def _hold_event(self, event: object, call: str) -> AbstractContextManager[RE]:
        """Hold a recorded ``event`` of this object for the ``with`` block; yields its raw handle.

        A closed, foreign or never-recorded event is refused with
        :class:`~eventapi.EventStateError` naming ``call``.
        """
        return self._holding(call, self._recorded(event, call))

    # -- bookkeeping --------------------------------------------------------------------------

    def _ensure_thread(self, call: str) -> None:
        if not getattr(self._tls, "bound", False):
            # Also the one place a forked object is refused: the fork handler gives it a fresh
            # thread-local, so every call comes here once more and the hot path pays nothing.
            if self._forked:
                raise EventStateError(
                    f"{self.BACKEND}: {call} refused: this backend object was created before "
                    f"fork(), in the parent process; it and its handles are not usable in this "
                    f"process (pid {os.getpid()}). Create a new backend object here, or start "
                    "worker processes with multiprocessing's 'spawn' or 'forkserver' method"
                )
            self._bind_thread()
            self._tls.bound = True

    def _create(self, handle: H, create: Callable[[], object], call: str) -> H:
        # The wrapper exists, open and counted, before the driver call, and takes the raw handle
        # as the create returns: an interrupt before leaves a wrapper holding nothing, after, one
        # destroyed with what it holds (docs/errors.md). One landing between the driver's return
        # and the store loses the driver's handle: a compiled backend creates straight into its
        # own handle type instead (eventapi_cuda). Opened and counted together, so a wrapper is
        # counted exactly while its finalizer would release it.
        self._ensure_thread(call)
        with self._lock:
            self._live[type(handle)] += 1
            handle._closed = False
        try:
            handle._raw = create()
        except BaseException:
            self._collect(handle, "after its create failed")
            raise
        return handle

    def _own(self, handle: object, call: str, kind: type[H]) -> H:
        # ``handle`` as this object's handle of ``kind``; anything else is refused.
        if type(handle) is kind and handle._owner is self:
            return handle
        what = "an event" if kind is Event else "a stream"
        if isinstance(handle, kind) and self._shares_handles_with(handle._owner):
            raise EventStateError(
                f"{self.BACKEND}: {call} refused {handle!r}: it belongs to {handle._owner!r}, "
                f"another device, and {call} needs {what} of this one ({self!r}); across devices "
                "only stream_wait_event(stream, event), event_wait(event) and event_query(event) "
                "take another device's event. Make the call on the handle's own backend object"
            )
        raise EventStateError(
            f"{self.BACKEND}: {call} refused {bounded_repr(handle)}: not {what} of this "
            f"{self.BACKEND} backend object; pass {what} created by the same backend object "
            f"(eventapi.backend(...) returns one per device)"
        )

    def _stream(self, stream: object, call: str) -> Stream[RS]:
        # ``stream`` as a stream of this object, or a foreign one adopted for the call.
        if isinstance(stream, _Handle):
            return self._own(stream, call, Stream)
        raw = self._adopt_stream(stream)
        if raw is None:
            raise EventStateError(
                f"{self.BACKEND}: {call} refused {bounded_repr(stream)}: not a stream this "
                "backend can use; pass one from stream_create_non_blocking() or adopt_stream()"
            )
        return Stream(self, raw)

    def _recorded(self, event: object, call: str) -> Event[RE]:
        # ``event`` as a recorded event of this object; anything else is refused.
        checked: Event[RE] = self._own(event, call, Event)
        if checked._recorded:
            return checked
        if checked._closed:
            self._refuse_closed(checked, call)
        raise EventStateError(
            f"{self.BACKEND}: {call} refused {checked!r}: it was never recorded, so there is "
            "nothing to wait for or time; call event_record(event, stream) first"
        )

    def _event_owner(self, event: object, call: str) -> tuple[Self, Event[RE]]:
        # A recorded event, and the object whose bookkeeping guards it: this one, or a sibling
        # device's (see _shares_handles_with); anything else is refused.
        owner = event._owner if type(event) is Event else self
        if owner is not self and self._shares_handles_with(owner):
            return cast("Self", owner), owner._recorded(event, call)  # one driver, one class
        return self, self._recorded(event, call)

    # A call holds each handle it uses for as long as the driver may use it, so that a destroy
    # from another thread meanwhile is deferred until the call is out of the driver: the last
    # one out destroys it. The lock guards this bookkeeping only, never a driver call (but the
    # two non-blocking ones made per window and per spin of a fence's wait).

    def _holding(self, call: str, *handles: _Handle) -> _Holding:
        # ``with self._holding(call, a, b) as raw_a:`` a and b are in use for the block, and
        # _leave is owed to them from here (a call that never leaves, its frame interrupted,
        # leaves its handles to their finalizers: see _collect).
        self._ensure_thread(call)
        with self._lock:
            for handle in handles:
                if handle._closed:
                    self._refuse_closed(handle, call)
            for handle in handles:
                handle._users += 1
        return _Holding(self, handles)

    def _leave(self, *handles: _Handle) -> None:
        deferred = []
        with self._lock:
            for handle in handles:
                handle._users -= 1
                # A destroy asked for meanwhile, by another thread that returned already: the
                # last one out makes it, claimed in this section so that no other leaver does.
                if handle._closed and handle._users == 0:
                    self._count_gone(handle)
                    deferred.append(handle)
        for handle in deferred:
            self._collect(handle, "deferred while a call used it")

    def _refuse_closed(self, handle: _Handle, call: str) -> NoReturn:
        raise EventStateError(
            f"{self.BACKEND}: {call} refused {handle!r}: it was already destroyed; "
            "create a new one (a destroyed handle is never passed to the driver)"
        )

    def _close(self, handle: _Handle) -> None:
        with self._lock:
            if handle._closed:
                return
            handle._closed = True
            now = handle._users == 0 or self._forked  # a forked child has no calls in flight
            if now:
                self._count_gone(handle)  # in the same section that closes it
        if now:
            self._release_counted_gone(handle)

    def _count_gone(self, handle: _Handle) -> None:
        # With the lock held: the handle's destroy is claimed (_users OWED: no later leaver
        # destroys it again) and it is counted gone, in one step. Counted gone whether or not
        # the driver then agrees: a handle it refused to destroy is unusable either way, and a
        # second destroy would be undefined behaviour. The wrapper keeps its driver handle until
        # the driver's destroy takes it (_release_counted_gone), so an interrupt between this
        # section and that destroy leaves it to the wrapper's finalizer (_collect); the counts
        # stay exact.
        handle._users = OWED
        self._live[type(handle)] -= 1

    def _release_counted_gone(self, handle: _Handle) -> None:
        # The driver's part of a destroy whose _count_gone ran: the handle's driver handle
        # leaves the wrapper right before the driver's destroy (released then, also when the
        # driver refuses the destroy). An interrupt before the two leaves it to the wrapper's
        # finalizer (_collect); one between them loses it, the window a compiled backend's own
        # handle type closes (eventapi_cuda).
        try:
            raw = handle._raw
            if raw is None or self._forked or self._gone:
                # Never created, or taken already; or created by the parent process, whose
                # driver state this child must not touch (the parent still owns the handle and
                # destroys it there); or left by an interrupt until after _last_handle_gone
                # released what the handles needed (their context, say), which freed it.
                return
            lost = self._context_lost()
            if lost is not None:
                self._log_lost_once(lost)
                return
            is_event = type(handle) is Event
            self._ensure_thread("event_destroy" if is_event else "stream_destroy")
            handle._raw = None
            if is_event:
                self._raw_event_destroy(raw)
            else:
                self._raw_stream_destroy(raw)
        finally:
            self._after_uncount()

    def _after_uncount(self) -> None:
        # A handle was counted gone and its driver handle released, or the object itself was
        # finalized. Once it was (collected, maybe in a reference cycle with handles of its
        # own, whose finalizers run in no set order), the last one out runs _last_handle_gone.
        if self._finalized:
            with self._lock:
                last = not (any(self._live.values()) or self._gone)
                self._gone = self._gone or last
            if last:
                self._last_handle_gone()

    def _log_lost_once(self, lost: DriverError) -> None:
        with self._lock:
            logged, self._lost_logged = self._lost_logged, True
        if not logged:
            logger().error(
                "%s: %r: the device context is lost (%s); its remaining handles are not "
                "released one by one, the driver frees them when the process exits; restart "
                "the process to use the device again",
                self.BACKEND,
                self,
                lost,
            )

    def _collect(self, handle: _Handle, why: str = "dropped without a destroy") -> None:
        # Releases a handle no call is using, and logs a failure, which no caller is told of: from
        # the __del__ of a handle whose driver handle is not released (it still holds one, or was
        # never closed), after a failed create or record (whose own error is the one raised), and
        # for the last call out of a handle destroyed meanwhile (counted gone by _leave). The user
        # dropped it without a destroy; or a destroy is owed to a call that an interrupt stopped
        # between its count and its with block (never left), or between its leave and the deferred
        # destroy; or an interrupt stopped a destroy between its count and the driver's destroy
        # (OWED, and the wrapper still holds its driver handle). No call is in flight now, since a
        # call holds the handle, so whatever count such an interrupt left behind is void.
        with self._lock:
            if handle._closed and handle._raw is None:
                return  # released already, or never opened (nothing counted, nothing held)
            if handle._users != OWED:  # not counted gone yet
                handle._closed = True
                self._count_gone(handle)
        try:
            self._release_counted_gone(handle)
        except Exception:
            logger().warning(
                "%s: destroying %r (%s) did not succeed", self.BACKEND, handle, why, exc_info=True
            )


# -- the optional capabilities, one class each ------------------------------------------------
#
# A backend lists the ones its driver can do before DriverBackend in its bases and spells their
# _raw_* call; each adds the public method built on that call.


class EventQueryMixin(DriverBackend[RE, RS]):
    """Adds :class:`~eventapi.SupportsEventQuery` (``event_query``) to a :class:`DriverBackend`.

    List it before ``DriverBackend`` in the class's bases and spell
    :meth:`_raw_event_query`.
    """

    @abstractmethod
    def _raw_event_query(self, event: RE) -> bool:
        """True when the device reached ``event``'s latest record; never blocks."""

    def event_query(self, event: Event[RE] | object) -> bool:
        """True when the device reached ``event``; never blocks.

        ``event`` may be a sibling device's (see :meth:`DriverBackend._shares_handles_with`).
        """
        owner, event = self._event_owner(event, "event_query")
        owner._ensure_thread("event_query")
        # A query never blocks, and a fence's wait makes many: the lock is held across it instead
        # of counting the event in and out (as in event_record_unless_capturing).
        with owner._lock:
            if event._closed:
                owner._refuse_closed(event, "event_query")
            return owner._raw_event_query(event._raw)


class CaptureCheckMixin(DriverBackend[RE, RS]):
    """Adds :class:`~eventapi.SupportsCaptureCheck` (``stream_is_capturing``).

    List it before ``DriverBackend`` in the class's bases and spell
    :meth:`_raw_stream_is_capturing`. With it, :class:`HostFuncMixin` also refuses a host
    function on a capturing stream.
    """

    @abstractmethod
    def _raw_stream_is_capturing(self, stream: RS) -> bool:
        """True while ``stream`` captures a graph: active, or invalidated and not yet ended."""

    def stream_is_capturing(self, stream: Stream[RS] | object) -> bool:
        """True while ``stream`` is capturing a graph."""
        with self._hold_stream(stream, "stream_is_capturing") as raw:
            return self._raw_stream_is_capturing(raw)


class HostFuncMixin(DriverBackend[RE, RS]):
    """Adds :class:`~eventapi.SupportsHostFunc` (``stream_launch_host_func``).

    List it before ``DriverBackend`` in the class's bases and spell
    :meth:`_raw_launch_host_func` (:func:`launch_host_func` does the C side for a binding
    that takes a C function pointer and a user-data pointer).
    """

    @abstractmethod
    def _raw_launch_host_func(self, stream: RS, fn: Callable[[], object]) -> None:
        """Enqueue ``fn()`` to run on a driver thread when ``stream`` reaches this point."""

    def stream_launch_host_func(
        self, stream: Stream[RS] | object, fn: Callable[[], object]
    ) -> None:
        """Run ``fn()`` on a driver thread when ``stream`` reaches this point.

        Raises :class:`~eventapi.CaptureError` when the backend can tell (it also has
        :class:`CaptureCheckMixin`) that ``stream`` is capturing a graph: a host function
        captured into a graph runs on the graph's first launch only, and is held forever when
        the graph is never launched.
        """
        if not callable(fn):
            raise TypeError(f"stream_launch_host_func needs a callable, got {bounded_repr(fn)}")
        with self._hold_stream(stream, "stream_launch_host_func") as raw:
            if self._raw_stream_is_capturing(raw):
                raise CaptureError(
                    f"{self.BACKEND}: stream_launch_host_func refused on {bounded_repr(stream)}: "
                    "the stream is capturing a graph, where a host function would run on the "
                    "graph's first launch only; launch it after the capture ends, or on another "
                    "stream"
                )
            self._raw_launch_host_func(raw, fn)


if TYPE_CHECKING:

    def _conforms(
        backend: DriverBackend[object, object],
        query: EventQueryMixin[object, object],
        capture: CaptureCheckMixin[object, object],
        host_func: HostFuncMixin[object, object],
    ) -> None:
        _api: _protocol.EventApi[Event[object], Stream[object]] = backend
        _fast: _protocol.SupportsFastPath[Event[object], Stream[object]] = backend
        _query: _protocol.SupportsEventQuery[Event[object]] = query
        _capture: _protocol.SupportsCaptureCheck[Stream[object]] = capture
        _host_func: _protocol.SupportsHostFunc[Stream[object]] = host_func


@final
class _Holding:
    """Handles in use for a ``with`` block, which is given the first one's raw handle (None
    for none); :meth:`DriverBackend._leave` them as it ends.

    A class, not a generator context manager: every call a backend makes goes through one.
    """

    __slots__ = ("_backend", "_handles")

    def __init__(self, backend: DriverBackend[Any, Any], handles: tuple[_Handle, ...]) -> None:
        self._backend = backend
        self._handles = handles

    def __enter__(self) -> Any:
        return self._handles[0]._raw if self._handles else None

    def __exit__(self, *exc: object) -> None:
        self._backend._leave(*self._handles)
