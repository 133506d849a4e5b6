"""A recorded event whose lifetime is managed: :class:`EventFence`.

A fence is created and recorded in one call, waited on from any number of threads, made a
device-side dependency of another stream, and closed once. It works over any
:class:`~eventapi.EventApi`. It counts nothing itself: a backend keeps a call in flight safe from
a destroy made meanwhile on another thread, and refuses a destroyed event before its driver
sees it (the protocol asks both of every backend, and the conformance kit checks them), so a
``close()`` that arrives while another thread waits never pulls the event from under it, and a
call that comes after a ``close()`` is refused. A backend with :class:`~eventapi.SupportsFastPath`
creates and records a fence's event in one call.
"""

from __future__ import annotations

import _thread
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any, ClassVar, Final, Generic, NoReturn, TypeVar, cast, final

from ._arguments import bounded_repr, check_real
from ._errors import CaptureError, DriverError, EventStateError, UnsupportedError
from ._gil import release_gil
from ._protocol import (
    EventApi,
    SupportsCaptureCheck,
    SupportsEventQuery,
    SupportsFastPath,
    _by_class,
    capabilities_of,
)
from ._single_owner import SingleOwner

__all__ = ["EventFence"]

_log = logging.getLogger("eventapi")
_new = object.__new__

E = TypeVar("E")
S = TypeVar("S")

# Polling bounds for waits with a timeout (and wait_async). The first sleep is 20 µs: shorter
# than that, the sleep call and the query cost more than they save, and Linux's default timer
# slack (50 µs) rounds it up anyway. Each further sleep doubles, up to 1 ms: a fence reached
# during a sleep is noticed at most 1 ms late, and a long wait costs about one query per
# millisecond (well under 1% of a core). No sleep runs past the deadline.
_POLL_FIRST_S = 20e-6
_POLL_MAX_S = 1e-3

# A wait without a timeout first queries for this long (when the backend can query), on every
# thread, then blocks in the backend's event_wait. The drivers' own wait on a default event
# spins for the whole wait (a core burnt per waiting thread), so the cuda and hip backends
# create blocking-sync events, whose wait sleeps (after a query spin of their own); a
# sleeping waiter wakes later than a spinning one (a futex or an interrupt, tens of
# microseconds), and the spin gives that latency back to the waits where it matters: most
# waits a program makes are on work that is done or nearly done, and those return from the
# spin as fast as a driver's own spin would, on any backend and with no thread started.
# 100 us is a few dozen queries, about what starting the main thread's waiter thread costs; a
# wait that outlasts it burns at most those 100 us of CPU (0.2 % of a 50 ms wait), where the
# driver's spin would burn all of it.
_SPIN_NS = 100_000

# A fence's state: recorded, observed reached (it stays reached), closed; and recorded but
# waited on and closed the long way: its backend has no event_query (a wait goes straight to
# event_wait), or it holds keep_alive objects to drop.
_PENDING: Final = 0
_REACHED: Final = 1
_CLOSED: Final = 2
_PENDING_LONG: Final = 3

# The backend classes whose fences take the short way: a fused create-and-record and a query.
_FUSED: set[type] = set()


@final
class EventFence(SingleOwner, Generic[E, S]):
    """An event recorded into a stream, with a managed lifetime.

    Build one with :meth:`record`. It may be waited on from any thread, by several threads at
    once, while the thread that recorded it goes on. ``close()`` (or leaving a ``with`` block)
    destroys the event; a call already waiting on another thread finishes first (the backend
    defers the destroy until it returns). A fence that is garbage collected unclosed is
    destroyed then, as a safety net. Every call after ``close()`` raises
    :class:`~eventapi.EventStateError` without reaching the backend's driver.

    Destroy failures (from ``close()`` or the safety net) are logged on the ``eventapi`` logger
    at WARNING and never raised: the fence is closed either way and there is nothing a caller
    could do about it.

    A fence owns its event: ``copy``, ``deepcopy`` and ``pickle`` raise :class:`TypeError`.
    """

    _COPY_HINT = "share the fence itself between threads, or record another one"

    __slots__ = ("__weakref__", "_api", "_event", "_keep_alive", "_state")

    _api: EventApi[E, S]
    _event: E
    _keep_alive: tuple[object, ...] | None  # set only when held (see _PENDING_LONG)
    _state: int

    # sys.is_finalizing, read from the class by __del__, which must read no module global at
    # interpreter shutdown (see eventapi.driverkit._handles).
    _is_finalizing: ClassVar[Callable[[], bool]] = sys.is_finalizing

    def __init__(self) -> None:
        # record() builds a fence without this (object.__new__) and sets every slot itself.
        raise TypeError("EventFence has no public constructor; use EventFence.record(api, stream)")

    @classmethod
    def record(
        cls, api: EventApi[E, S], stream: S, *, keep_alive: Iterable[object] = ()
    ) -> EventFence[E, S]:
        """Create an event, record it into ``stream`` and return the fence that owns it.

        Returns once the record is queued; nothing waits. ``keep_alive`` objects (buffers the
        device still reads) are held until the fence is observed reached (a wait returned,
        :meth:`reached` said true) or closed, then dropped.

        Raises :class:`TypeError` when ``api`` is not a backend object, and
        :class:`~eventapi.EventStateError` for a stream the backend refuses (destroyed, or not
        one it can use). Raises :class:`~eventapi.CaptureError` when the backend can tell (it has
        ``stream_is_capturing``) that ``stream`` is capturing a graph; nothing is created then.
        Raises the backend's :class:`~eventapi.DriverError` when creating or recording fails;
        an event created before a failed record is destroyed first (a failure of that destroy is
        logged), so nothing leaks.
        """
        # Before anything is created: it may raise. (An empty iterable that is truthy, an
        # exhausted generator, still gives None.)
        held = _held(keep_alive) if keep_alive else None
        try:
            if type(api) in _FUSED or _fuses(api):
                state = _PENDING
                try:
                    event = api.event_record_new(stream)  # type: ignore[attr-defined]
                except EventStateError:
                    # Not the backend's own stream object: a framework's, or a raw handle.
                    # Adopted, it is one; what the backend cannot use, adopt_stream refuses.
                    fast = cast("SupportsFastPath[E, S]", api)
                    event = fast.event_record_new(fast.adopt_stream(stream))
                if event is None:
                    _refuse_capturing(api, stream)
            else:
                capable = _by_class[type(api)]  # asked by _fuses()
                state = _PENDING if capable.event_query else _PENDING_LONG
                event = _record_new(api, stream, capable.capture_check)
        except EventStateError as exc:
            # The backend names its own call; the user made this one.
            raise EventStateError(f"EventFence.record(api, stream): {exc}") from exc
        except DriverError as exc:
            # Kept as the backend raised it (a caller may read its code); the note names the
            # call the user made and what it was given.
            exc.add_note(f"raised by EventFence.record(api, stream={stream!r})")
            raise
        fence: EventFence[E, S] = _new(cls)
        fence._api = api
        fence._event = event
        fence._state = state
        if held is not None:
            fence._keep_alive = held
            fence._state = _PENDING_LONG
        return fence

    # -- properties -----------------------------------------------------------------------------

    @property
    def api(self) -> EventApi[E, S]:
        """The backend object the fence's event belongs to."""
        return self._api

    @property
    def event(self) -> E:
        """The backend's event handle. Still returned after close, when it is destroyed."""
        return self._event

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._state == _CLOSED

    # -- waiting ------------------------------------------------------------------------------

    def wait(self, timeout: float | None = None) -> None:
        """Block the calling thread until the device reached the fence.

        ``timeout`` is in seconds. ``None`` first queries the fence for up to 100 µs when the
        backend has ``event_query`` (a fence reached by then returns with a spinning driver's
        latency), then waits with the backend's ``event_wait``, which blocks without holding
        the GIL (on ``cuda`` and ``hip`` it sleeps: their events are created blocking-sync, so
        a long wait costs a waiting thread next to no CPU). On the main thread that wait stays
        interruptible (Ctrl-C raises :class:`KeyboardInterrupt` at once, on every backend):
        ``event_wait`` runs on a helper thread while the main thread blocks on a lock, which a
        signal interrupts. An interrupted wait leaves that helper waiting until the device
        reaches the fence; the fence stays valid for it (a ``close()`` meanwhile destroys the
        event when the helper returns). Other threads call ``event_wait`` directly: signals
        are delivered to the main thread only.

        A number polls the backend's ``event_query`` (first every 20 µs, backing off to every
        1 ms) and raises :class:`TimeoutError` once ``timeout`` seconds passed without the
        fence being reached; ``timeout == 0`` queries once, and a negative or NaN ``timeout``
        raises :class:`ValueError` (one that is not a number, :class:`TypeError`). A timed wait
        needs ``event_query``: without it, :class:`~eventapi.UnsupportedError`. Raises
        :class:`~eventapi.EventStateError` after ``close()``, and the backend's
        :class:`~eventapi.DriverError` for the fault the wait revealed.
        """
        if self._state or timeout is not None:
            self._wait_slowly(timeout)
            return
        try:
            # Never blocks: work done or nearly done, the common case, returns from here.
            # (_PENDING: the backend has event_query, and nothing is held to drop.)
            if self._api.event_query(self._event):  # type: ignore[attr-defined]
                self._state = _REACHED
                return
            self._block()
        except EventStateError:
            self._refuse_if_closed("wait")
            raise

    def _wait_slowly(self, timeout: object) -> None:
        # wait() reached or closed already, with a timeout, or on a backend without a query.
        self._refuse_if_closed("wait")
        try:
            if timeout is not None:
                self._poll(_seconds(timeout))
            elif self._state != _REACHED:  # a fence is recorded once: reached stays reached
                self._block()
        except EventStateError:
            self._refuse_if_closed("wait")
            raise

    def _block(self) -> None:
        # A wait without a timeout, once the first query found the fence not reached.
        event = self._event
        if not self._spin(event):
            # By ident: current_thread() would register a dummy for a foreign thread.
            if threading.get_ident() == threading.main_thread().ident:
                self._block_interruptibly(event)
            else:
                self._api.event_wait(event)
        self._mark_reached()

    def _spin(self, event: E) -> bool:
        # Most waits a program makes are on work that is done or nearly done: those return
        # from here as fast as a driver's own spin would, with no thread started and no sleep
        # to wake from. A wait that outlasts the spin blocks (see _SPIN_NS for the price).
        if not self._has_query():
            return False
        query = cast("SupportsEventQuery[E]", self._api)
        deadline = time.perf_counter_ns() + _SPIN_NS
        while not query.event_query(event):
            if time.perf_counter_ns() >= deadline:
                return False
            # The stream may need the GIL to make progress (see _gil for why not a yield).
            release_gil()
        return True

    def _block_interruptibly(self, event: E) -> None:
        # A backend's event_wait blocks in native code, where a signal only sets a flag that
        # Python looks at when the call returns: Ctrl-C would wait for the device. A lock
        # acquire, though, is interrupted by a signal on POSIX and runs the handler at once.
        # The helper thread's wait is a call of its own, which the backend keeps safe from a
        # close() made meanwhile; an interrupt here leaves it to finish when the device does.
        done = _thread.allocate_lock()
        done.acquire()
        failure: list[BaseException] = []
        _thread.start_new_thread(self._wait_for_main, (event, done, failure))
        done.acquire()  # interruptible; the helper releases it once its wait returned
        if failure:
            raise failure[0]

    def _wait_for_main(
        self, event: E, done: _thread.LockType, failure: list[BaseException]
    ) -> None:
        try:
            self._api.event_wait(event)
        except BaseException as exc:  # handed to the main thread, which raises it
            failure.append(exc)
        finally:
            done.release()

    def reached(self) -> bool:
        """True when the device reached the fence. Never blocks.

        Needs the backend's ``event_query``; without it, :class:`~eventapi.UnsupportedError`.
        Raises :class:`~eventapi.EventStateError` after ``close()``.
        """
        self._refuse_if_closed("reached")
        query = self._require_query("reached()")
        if self._state == _REACHED:
            return True
        try:
            done = query.event_query(self._event)
        except EventStateError:
            self._refuse_if_closed("reached")
            raise
        if done:
            self._mark_reached()
        return done

    def wait_on(self, stream: S) -> None:
        """Make ``stream`` wait on the device until the fence is reached; the host does not block.

        Work enqueued on ``stream`` afterwards starts only after the fence. Raises
        :class:`~eventapi.EventStateError` after ``close()`` and the backend's
        :class:`~eventapi.DriverError` when it refuses the dependency.
        """
        self._refuse_if_closed("wait_on")
        try:
            self._api.stream_wait_event(stream, self._event)
        except EventStateError:
            self._refuse_if_closed("wait_on")
            raise

    async def wait_async(self) -> None:
        """Wait for the fence from a coroutine without blocking the event loop.

        With ``event_query`` the fence is polled between :func:`asyncio.sleep` calls (20 µs
        backing off to 1 ms; the loop's own timer resolution, about 1 ms, bounds it in
        practice), so no thread is tied up however many fences are awaited. Without it,
        ``event_wait`` runs in the loop's default executor; a cancelled ``wait_async`` then
        leaves that job to run and wait until the fence is reached (the backend keeps it safe
        from a close meanwhile). Raises as :meth:`wait` does.
        """
        # Imported here: asyncio (with ssl, socket and subprocess behind it) would more than
        # double what `import eventapi` costs, for the one method that needs it.
        import asyncio

        self._refuse_if_closed("wait_async")
        if self._state == _REACHED:
            return
        event = self._event
        query = cast("SupportsEventQuery[E]", self._api) if self._has_query() else None
        try:
            if query is None:
                loop = asyncio.get_running_loop()
                # Shielded: cancelling the await must not cancel a job still queued.
                await asyncio.shield(loop.run_in_executor(None, self._api.event_wait, event))
            else:
                delay = _POLL_FIRST_S
                while not query.event_query(event):
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, _POLL_MAX_S)
        except EventStateError:
            self._refuse_if_closed("wait_async")
            raise
        self._mark_reached()

    # -- lifetime -----------------------------------------------------------------------------

    def close(self) -> None:
        """Destroy the event and drop the ``keep_alive`` objects. Idempotent; never raises.

        A wait in progress on another thread finishes normally: the backend destroys the event
        when it returns. A destroy failure is logged on the ``eventapi`` logger.
        """
        if self._state >= _CLOSED:
            if self._state == _CLOSED:
                return
            self._keep_alive = None  # _PENDING_LONG may hold it
        self._state = _CLOSED
        try:
            # Two closes racing on two threads both get here: a second destroy is a no-op.
            self._api.event_destroy(self._event)
        except Exception:
            _log_destroy_failed(self._api, self._event, "on close")

    def __enter__(self) -> EventFence[E, S]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        # Safety net for a fence dropped unclosed. At interpreter shutdown the driver may be
        # gone: leave it to the OS.
        try:
            if self._state == 2 or type(self)._is_finalizing():  # 2: _CLOSED, a literal: no
                return  # module global is read at shutdown
        except AttributeError:  # the refused public constructor: nothing was created
            return
        self._state = 2
        try:
            self._api.event_destroy(self._event)
        except Exception:
            _log_destroy_failed(
                self._api, self._event, "when the unclosed fence was garbage collected"
            )

    def __repr__(self) -> str:
        try:
            backend = self._api.BACKEND
        except AttributeError:
            return "<EventFence (uninitialised)>"
        state = ("pending", "reached", "closed", "pending")[self._state]
        return f"<EventFence {backend} {state} event={self._event!r}>"

    # -- internals ----------------------------------------------------------------------------

    def _mark_reached(self) -> None:
        if self._state != _CLOSED:
            self._state = _REACHED
        self._keep_alive = None

    def _has_query(self) -> bool:
        # The backend's class was asked when the fence was recorded (capabilities_of).
        return _by_class[type(self._api)].event_query

    def _refuse_if_closed(self, call: str) -> None:
        # Before a call, and after the backend refused the event: a close() on another thread
        # may have come between.
        if self._state == _CLOSED:
            raise EventStateError(
                f"{self._api.BACKEND}: EventFence.{call} refused: the fence is closed (its event "
                "is destroyed, or will be once the calls still waiting on it return); record a "
                "new fence with EventFence.record(api, stream)"
            )

    def _require_query(self, call: str) -> SupportsEventQuery[E]:
        if not self._has_query():
            raise UnsupportedError(
                f"{self._api.BACKEND}: EventFence.{call} needs the event_query capability "
                "(eventapi.SupportsEventQuery), which this backend lacks; use wait() with no "
                "timeout, or a backend that has event_query"
            )
        return cast("SupportsEventQuery[E]", self._api)

    def _poll(self, timeout: float) -> None:
        query, event = self._require_query("wait(timeout=...)"), self._event
        # Bounds: see _POLL_FIRST_S and _POLL_MAX_S.
        deadline = time.monotonic() + timeout
        delay = _POLL_FIRST_S
        while self._state != _REACHED and not query.event_query(event):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"{self._api.BACKEND}: fence not reached within {timeout:g} s; the stream "
                    "it was recorded into is still busy (wait longer, or look for work on it "
                    "that never finishes)"
                )
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, _POLL_MAX_S)
        self._mark_reached()


def _seconds(timeout: object) -> float:
    """A wait's ``timeout`` as seconds, or :class:`TypeError` / :class:`ValueError` naming it."""
    seconds = check_real(timeout, "EventFence.wait: timeout", unit="seconds")
    if seconds < 0:
        raise ValueError(
            "EventFence.wait: timeout must be a number of seconds >= 0, or None to wait as long "
            f"as it takes; got {bounded_repr(timeout)}"
        )
    return seconds


def _record_new(api: EventApi[E, S], stream: S, capture_check: bool) -> E:
    """A new event recorded into ``stream`` by the plain calls that ``event_record_new`` fuses."""
    if capture_check and cast("SupportsCaptureCheck[S]", api).stream_is_capturing(stream):
        _refuse_capturing(api, stream)
    event = api.event_create()
    try:
        api.event_record(event, stream)
    except BaseException:
        try:
            api.event_destroy(event)
        except Exception:
            _log_destroy_failed(api, event, "after its record failed")
        raise
    return event


def _refuse_capturing(api: EventApi[Any, Any], stream: object) -> NoReturn:
    raise CaptureError(
        f"{api.BACKEND}: not recording a fence into {stream!r}: the stream is capturing "
        "a graph, where a record is no timestamp but a dependency inside the graph; record "
        "the fence after the capture ends, or into a stream that is not capturing"
    )


def _log_destroy_failed(api: EventApi[Any, Any], event: object, when: str) -> None:
    # Called from an except block: the warning carries the exception being handled.
    _log.warning(
        "%s: destroying fence event %r %s failed; the event is abandoned",
        api.BACKEND,
        event,
        when,
        exc_info=True,
    )


def _held(keep_alive: Iterable[object]) -> tuple[object, ...] | None:
    """``keep_alive`` as a tuple, None when empty; :class:`TypeError` when it is no iterable."""
    try:
        return tuple(keep_alive) or None
    except TypeError:
        if hasattr(type(keep_alive), "__iter__"):
            raise  # an iterable that failed: its own error
        raise TypeError(
            "EventFence.record: keep_alive must be an iterable of the objects to hold (a tuple "
            f"or a list), not {type(keep_alive).__qualname__} {bounded_repr(keep_alive)}"
        ) from None


def _fuses(api: object) -> bool:
    """Whether fences of ``api``'s class take the short way (see _FUSED); asks it the first time.

    Raises :class:`TypeError` when ``api`` is not a backend object.
    """
    capable = capabilities_of(api, "EventFence.record")
    if capable.fast_path and capable.event_query:
        _FUSED.add(type(api))
        return True
    return False
