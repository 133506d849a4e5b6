"""A recorded event whose lifetime is managed: :class:`EventFence`.

A fence is created and recorded in one call, waited on from any number of threads, made a
device-side dependency of another stream, and closed once. It works over any
:class:`~eventapi.EventApi`, not only the backends built on :mod:`eventapi.driverkit`, so it keeps
its own count of calls in flight: a ``close()`` that arrives while another thread waits defers
the destroy to the last call out, and never pulls the event from under a waiter; the count
takes no lock (see the comment at ``EventFence._calls``). A backend with
:class:`~eventapi.SupportsFastPath` creates and records a fence's event in one call.
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

_RECORD: Final = object()  # EventFence.record's token for EventFence.__init__
_NOTHING: Final[tuple[()]] = ()  # the empty tuple, EventFence.record's default keep_alive


@final
class EventFence(SingleOwner, Generic[E, S]):
    """An event recorded into a stream, with a managed lifetime.

    Build one with :meth:`record`. It may be waited on from any thread, by several threads at
    once, while the thread that recorded it goes on. ``close()`` (or leaving a ``with`` block)
    destroys the event; a call already waiting on another thread finishes normally first, and
    the last one out destroys it. A fence that is garbage collected unclosed is destroyed then,
    as a safety net. Every call after ``close()`` raises :class:`~eventapi.EventStateError`
    without reaching the backend.

    Destroy failures (from ``close()``, the last waiter or the safety net) are logged on the
    ``eventapi`` logger at WARNING and never raised: the fence is closed either way and there is
    nothing a caller could do about it.

    A fence owns its event: ``copy``, ``deepcopy`` and ``pickle`` raise :class:`TypeError`.
    """

    _COPY_HINT = "share the fence itself between threads, or record another one"

    __slots__ = (
        "__weakref__",
        "_api",
        "_calls",
        "_closed",
        "_event",
        "_keep_alive",
        "_query",
        "_reached",
        "_unclaimed",
    )

    _api: EventApi[E, S]
    _event: E
    _keep_alive: tuple[object, ...] | None
    _query: SupportsEventQuery[E] | None
    # The lifetime without a lock: two with blocks on one, to count a call in and out, cost
    # more than the rest of a wait. list.append and list.pop are atomic in CPython (the Python
    # FAQ, "What kinds of global value mutation are thread-safe?"), the GIL runs each thread's
    # steps in order, and the order of the steps makes every race safe: a call appends itself
    # to _calls, then reads _closed; close() sets _closed, then reads _calls. So a close() that
    # finds no call is seen by every later call, which refuses, and a call that found the
    # fence open is found by close(), which leaves the destroy to the last call out. Whoever
    # finds the fence closed and no call in flight destroys the event, once: the one that pops
    # _unclaimed's single item. (The free-threaded build, which eventapi does not support,
    # would need a lock here: without the GIL the two sides' store and load may pass each
    # other.) An interrupt between two steps can leave a call counted for good, as one between
    # a locked count and its try did before; the safety net (__del__) then destroys the event.
    # tests/test_fence.py races closes against wait(), wait(timeout) and reached().
    _calls: list[None]  # one item per call in flight
    _unclaimed: list[None]  # one item until the destroy is claimed (close, last call, __del__)
    _closed: bool
    _reached: bool  # observed reached; it stays reached, so later waits return at once

    # sys.is_finalizing, read from the class by __del__, which must read no module global at
    # interpreter shutdown (see eventapi.driverkit._handles).
    _is_finalizing: ClassVar[Callable[[], bool]] = sys.is_finalizing

    def __init__(self, _token: object = None) -> None:
        # record() passes _RECORD and sets every slot itself; a fence is never built otherwise.
        # (Not object.__new__(cls) there: the compiled build's native class refuses it.)
        if _token is not _RECORD:
            raise TypeError(
                "EventFence has no public constructor; use EventFence.record(api, stream)"
            )

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
        # Before anything is created: it may raise. The default costs no call: CPython has one
        # empty tuple, the default's (any other empty iterable still gives None).
        held = None if keep_alive is _NOTHING else (tuple(keep_alive) or None)
        # The class's capabilities, cached: capabilities_of asks and caches the first time.
        capable = _by_class.get(type(api)) or capabilities_of(api, "EventFence.record")
        try:
            if capable.fast_path:
                fast: SupportsFastPath[E, S] = api  # type: ignore[assignment]
                event = fast.event_record_new(fast.adopt_stream(stream))
                if event is None:
                    _refuse_capturing(api, stream)
            else:
                event = _record_new(api, stream, capable.capture_check)
        except EventStateError as exc:
            # The backend names its own call; the user made this one.
            raise EventStateError(f"EventFence.record(api, stream): {exc}") from exc
        except DriverError as exc:
            # Kept as the backend raised it (a caller may read its code); the note names the
            # call the user made and what it was given.
            exc.add_note(f"raised by EventFence.record(api, stream={stream!r})")
            raise
        fence: EventFence[E, S] = cls(_RECORD)
        fence._api = api
        fence._event = event
        fence._query = api if capable.event_query else None  # type: ignore[assignment]
        fence._keep_alive = held
        fence._calls = []
        fence._unclaimed = [None]
        fence._closed = False
        fence._reached = False
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
        return self._closed

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
        fence being reached; ``timeout == 0`` (or NaN) queries once, and a negative ``timeout``
        raises :class:`ValueError`, as ``queue.Queue.get`` does. A timed wait needs
        ``event_query``: without it, :class:`~eventapi.UnsupportedError`. Raises
        :class:`~eventapi.EventStateError` after ``close()``, and the backend's
        :class:`~eventapi.DriverError` for the fault the wait revealed.
        """
        if self._closed:
            self._refuse_closed("wait")
        if timeout is not None:
            if timeout < 0:
                raise ValueError(
                    f"EventFence.wait: timeout must be a number of seconds >= 0, or None to wait "
                    f"as long as it takes; got {timeout!r}"
                )
            self._require_query("wait(timeout=...)")
        if self._reached:
            return  # a fence is recorded once: reached stays reached
        # _enter and _leave, spelled out: every fence's wait comes here. (mypy takes _closed
        # for False from the check above; another thread's close() may have set it since.)
        calls = self._calls
        calls.append(None)  # in flight first, then the check (see _calls)
        if self._closed:
            self._leave()  # type: ignore[unreachable]
            self._refuse_closed("wait")
        event = self._event
        try:
            query = self._query
            if timeout is not None:
                self._poll(event, timeout)
            elif query is not None and query.event_query(event):
                pass  # reached already: the common case, with no clock read and no spin
            elif not self._spin(event):
                # By ident: current_thread() would register a dummy for a foreign thread.
                if threading.get_ident() == threading.main_thread().ident:
                    self._block_interruptibly(event)
                else:
                    self._api.event_wait(event)
            # _mark_reached, spelled out too.
            self._reached = True
            self._keep_alive = None
        finally:
            calls.pop()
            if self._closed:
                self._last_out()  # type: ignore[unreachable]

    def _spin(self, event: E) -> bool:
        # Most waits a program makes are on work that is done or nearly done: those return
        # from here as fast as a driver's own spin would, with no thread started and no sleep
        # to wake from. A wait that outlasts the spin blocks (see _SPIN_NS for the price).
        query = self._query
        if query is None:
            return False
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
        done = _thread.allocate_lock()
        done.acquire()
        failure: list[BaseException] = []
        # The helper thread is a call in flight of its own, so close() never destroys the
        # event under it, however this thread leaves. The count is made here and handed over:
        # an interrupt can land as start_new_thread returns, when the thread may or may not
        # run already, and whichever side pops the handoff owns the count (see _take).
        handoff: list[None] = [None]
        self._calls.append(None)
        try:
            _thread.start_new_thread(self._wait_for_main, (event, done, failure, handoff))
        except BaseException:
            if _take(handoff):
                self._leave()
            raise
        done.acquire()  # interruptible; the helper releases it after it left the fence
        if failure:
            raise failure[0]

    def reached(self) -> bool:
        """True when the device reached the fence. Never blocks.

        Needs the backend's ``event_query``; without it, :class:`~eventapi.UnsupportedError`.
        Raises :class:`~eventapi.EventStateError` after ``close()``.
        """
        if self._closed:
            self._refuse_closed("reached")
        query = self._require_query("reached()")
        if self._reached:
            return True
        event = self._enter("reached")
        try:
            done = query.event_query(event)
            if done:
                self._mark_reached()
            return done
        finally:
            self._leave()

    def wait_on(self, stream: S) -> None:
        """Make ``stream`` wait on the device until the fence is reached; the host does not block.

        Work enqueued on ``stream`` afterwards starts only after the fence. Raises
        :class:`~eventapi.EventStateError` after ``close()`` and the backend's
        :class:`~eventapi.DriverError` when it refuses the dependency.
        """
        event = self._enter("wait_on")
        try:
            self._api.stream_wait_event(stream, event)
        finally:
            self._leave()

    async def wait_async(self) -> None:
        """Wait for the fence from a coroutine without blocking the event loop.

        With ``event_query`` the fence is polled between :func:`asyncio.sleep` calls (20 µs
        backing off to 1 ms; the loop's own timer resolution, about 1 ms, bounds it in
        practice), so no thread is tied up however many fences are awaited. Without it,
        ``event_wait`` runs in the loop's default executor; a cancelled ``wait_async`` then
        leaves that job to run and wait until the fence is reached (the fence stays valid for
        it until then, even if closed). Raises as :meth:`wait` does.
        """
        # Imported here: asyncio (with ssl, socket and subprocess behind it) would more than
        # double what `import eventapi` costs, for the one method that needs it.
        import asyncio

        if self._closed:
            self._refuse_closed("wait_async")
        if self._reached:
            return
        event = self._enter("wait_async")
        if self._query is None:
            handoff: list[None] = [None]  # the count goes to the job, as in _block_interruptibly
            try:
                loop = asyncio.get_running_loop()
                future = loop.run_in_executor(None, self._wait_then_leave, event, handoff)
            except BaseException:
                if _take(handoff):
                    self._leave()
                raise
            # The executor's job leaves the fence when event_wait returns, so a cancelled await
            # does not let close() destroy the event under that thread. Shielded: cancelling
            # the await must not cancel a job still queued, the wait's only way out.
            await asyncio.shield(future)
            return
        try:
            query = self._query
            delay = _POLL_FIRST_S
            while not query.event_query(event):
                await asyncio.sleep(delay)
                delay = min(delay * 2, _POLL_MAX_S)
            self._mark_reached()
        finally:
            self._leave()

    # -- lifetime -----------------------------------------------------------------------------

    def close(self) -> None:
        """Destroy the event and drop the ``keep_alive`` objects. Idempotent; never raises.

        A wait in progress on another thread finishes normally, and the event is destroyed when
        the last such call returns. A destroy failure is logged on the ``eventapi`` logger.
        """
        if self._closed:
            return
        self._closed = True
        self._keep_alive = None
        if not self._calls and _take(self._unclaimed):  # see _claim_destroy
            # _destroy_logged, spelled out: every fence's close comes here.
            try:
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
        # Safety net for a fence dropped unclosed. Nothing is in flight (a call in flight holds
        # the fence), and at interpreter shutdown the driver may be gone: leave it to the OS.
        try:
            unclaimed = self._unclaimed
        except AttributeError:  # the refused public constructor: nothing was created
            return
        if not unclaimed or type(self)._is_finalizing():
            return
        unclaimed.pop()
        _destroy_logged(self._api, self._event, "when the unclosed fence was garbage collected")

    def __repr__(self) -> str:
        try:
            backend = self._api.BACKEND
        except AttributeError:
            return "<EventFence (uninitialised)>"
        if self._closed:
            state = "closed"
        elif self._reached:
            state = "reached"
        else:
            state = "pending"
        return f"<EventFence {backend} {state} event={self._event!r}>"

    # -- internals ----------------------------------------------------------------------------

    def _enter(self, call: str) -> E:
        # In flight first, then the check (see _calls).
        self._calls.append(None)
        if self._closed:
            self._leave()
            self._refuse_closed(call)
        return self._event

    def _leave(self) -> None:
        self._calls.pop()
        if self._closed:
            self._last_out()

    def _last_out(self) -> None:
        # A call left the closed fence. With no call left in flight, whoever pops _unclaimed
        # first (close, the last call out or a refused one) destroys, here this call; a failure
        # belongs to nobody's call, so it is logged.
        if not self._calls and self._claim_destroy():
            _destroy_logged(self._api, self._event, "after the last call on the closed fence")

    def _claim_destroy(self) -> bool:
        # True for the one caller that takes the destroy (see _calls).
        return _take(self._unclaimed)

    def _wait_then_leave(self, event: E, handoff: list[None]) -> None:
        if not _take(handoff):
            return  # the coroutine was interrupted before its job ran, and left the fence
        try:
            self._api.event_wait(event)
            self._mark_reached()
        finally:
            self._leave()

    def _wait_for_main(
        self,
        event: E,
        done: _thread.LockType,
        failure: list[BaseException],
        handoff: list[None],
    ) -> None:
        if not _take(handoff):
            # The main thread was interrupted as it started this thread and took its count
            # back: the event may be destroyed already, and nobody waits for this thread.
            done.release()
            return
        try:
            self._api.event_wait(event)
            self._mark_reached()
        except BaseException as exc:  # handed to the main thread, which raises it
            failure.append(exc)
        finally:
            # Leave before releasing: a close() right after wait() returns then finds no call
            # in flight and destroys the event itself.
            try:
                self._leave()
            finally:
                done.release()

    def _mark_reached(self) -> None:
        self._reached = True
        self._keep_alive = None

    def _refuse_closed(self, call: str) -> NoReturn:
        raise EventStateError(
            f"{self._api.BACKEND}: EventFence.{call} refused: the fence is closed (its event is "
            "destroyed, or will be once the calls still waiting on it return); record a new "
            "fence with EventFence.record(api, stream)"
        )

    def _require_query(self, call: str) -> SupportsEventQuery[E]:
        query = self._query
        if query is None:
            raise UnsupportedError(
                f"{self._api.BACKEND}: EventFence.{call} needs the event_query capability "
                "(eventapi.SupportsEventQuery), which this backend lacks; use wait() with no "
                "timeout, or a backend that has event_query"
            )
        return query

    def _poll(self, event: E, timeout: float) -> None:
        query = self._require_query("wait(timeout=...)")
        # Bounds: see _POLL_FIRST_S and _POLL_MAX_S.
        if query.event_query(event):
            return
        deadline = time.monotonic() + timeout
        delay = _POLL_FIRST_S
        while True:
            remaining = deadline - time.monotonic()
            # Written so that a NaN timeout expires at once, as in concurrent.futures, instead
            # of polling forever.
            if not remaining > 0:
                raise TimeoutError(
                    f"{self._api.BACKEND}: fence not reached within {timeout:g} s; the stream "
                    "it was recorded into is still busy (wait longer, or look for work on it "
                    "that never finishes)"
                )
            time.sleep(min(delay, remaining))
            if query.event_query(event):
                return
            delay = min(delay * 2, _POLL_MAX_S)


def _take(one: list[None]) -> bool:
    """Pop ``one``'s single item: True for the one caller that gets it, however many race.

    ``list.pop`` is atomic under the GIL (see ``EventFence._calls``), so of the callers that
    race for a claim (a fence's destroy, a wait's count handed to a helper thread) at most one
    wins it. An interrupt right after the winner's pop loses the claim (nobody acts on it);
    what it guarded is then left to the fence's safety net, ``__del__``.
    """
    try:
        one.pop()
    except IndexError:
        return False
    return True


def _record_new(api: EventApi[E, S], stream: S, capture_check: bool) -> E:
    """A new event recorded into ``stream`` by the plain calls that ``event_record_new`` fuses."""
    if capture_check and cast("SupportsCaptureCheck[S]", api).stream_is_capturing(stream):
        _refuse_capturing(api, stream)
    event = api.event_create()
    try:
        api.event_record(event, stream)
    except BaseException:
        _destroy_logged(api, event, "after its record failed")
        raise
    return event


def _refuse_capturing(api: EventApi[Any, Any], stream: object) -> NoReturn:
    raise CaptureError(
        f"{api.BACKEND}: not recording a fence into {stream!r}: the stream is capturing "
        "a graph, where a record is no timestamp but a dependency inside the graph; record "
        "the fence after the capture ends, or into a stream that is not capturing"
    )


def _destroy_logged(api: EventApi[Any, Any], event: object, when: str) -> None:
    try:
        api.event_destroy(event)
    except Exception:
        _log_destroy_failed(api, event, when)


def _log_destroy_failed(api: EventApi[Any, Any], event: object, when: str) -> None:
    # Called from an except block: the warning carries the exception being handled.
    _log.warning(
        "%s: destroying fence event %r %s failed; the event is abandoned",
        api.BACKEND,
        event,
        when,
        exc_info=True,
    )
