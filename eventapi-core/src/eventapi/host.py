"""The ``host`` backend: streams are worker threads, events are ``perf_counter_ns`` stamps.

The embedded default and the reference implementation of :class:`eventapi.EventApi`. It needs
no device, so everything above the protocol can be tested anywhere, and it has all three
optional capabilities plus the test aids a project that *uses* eventapi needs.

Semantics (CUDA's, where the protocol is silent):

* A stream is a daemon worker thread draining a queue in order. Enqueueing (``event_record``,
  ``stream_wait_event``, ``stream_launch_host_func``) returns at once.
* An event is stamped with :func:`time.perf_counter_ns` (``CLOCK_MONOTONIC`` on Linux) when the
  worker reaches its record; on an idle stream (nothing queued or running), at once, by the
  thread that records it: the stream reaches it without a wait, as an idle device queue does,
  and no worker thread has to wake up (which would widen an anchor's bracket by two thread
  wake-ups). Re-recording an event marks the latest record: a wait, query or
  elapsed reading after the re-record refers to the new record. ``stream_wait_event`` captures
  the record current when it is enqueued; a later re-record does not move it.
* Waiting on an event recorded into another stream works; so does recording one event into
  several streams (the latest record counts).
* ``event_wait`` and ``stream_synchronize`` block on :mod:`threading` primitives, so they
  release the GIL. Calling either from a host function (on a worker thread) is refused, as the
  drivers refuse device calls from a callback: it could only deadlock.
* ``stream_destroy`` with work pending returns at once; the worker finishes the queue, then
  exits. Destroying an event with a record pending is allowed.
* ``stream_launch_host_func(stream, fn)`` runs ``fn()`` on the worker; later work on the stream
  waits for it. On a capturing stream it raises :class:`~eventapi.CaptureError`, as the driver
  backends do (a captured host function would run on a graph's first replay only). An
  exception from ``fn`` is logged on the ``eventapi`` logger (ERROR, with the traceback) and
  not propagated; the worker goes on. A worker never dies on a bad op.
* Graphs (``SupportsGraphs``, ``SupportsGraphRecord``): between ``stream_begin_capture`` and
  ``stream_end_capture`` the stream's enqueued work is captured into a graph, not executed.
  An event recorded there with ``event_record`` becomes a *captured* event, a dependency of
  the graph that nothing stamps, until it is recorded again outside a capture; one recorded
  with ``event_record_in_graph`` is a node that each ``graph_launch`` records on the stream it
  launches on, so it is stamped at every launch (until the first, it stays as it was: one never
  recorded before waits for nothing and has no stamp to read). A stream wait in a capture is a
  dependency and does nothing at launch; a host function is refused (below). A graph launched
  into a capturing stream adds its nodes to that capture. :meth:`HostBackend.begin_capture`
  and :meth:`HostBackend.end_capture` are the same capture as a test aid, the graph discarded.
* ``stream_destroy`` and ``event_destroy`` release the handle even when they fail (an injected
  fault): the stream's worker still finishes its queue and exits, as the destroy contract
  says (a failed destroy leaves nothing of the handle running).
* After ``fork()``, a :class:`HostBackend` created in the parent refuses every call in the
  child (its worker threads do not exist there); one created in the child works.

The errors it raises (:class:`~eventapi.DriverError` with ``backend="host"``, ``call`` the
protocol method's name, codes chosen to match CUDA's numbers so a log reads the same):

* ``2 OUT_OF_MEMORY``: ``stream_create_non_blocking`` could not start a worker thread.
* ``400 INVALID_HANDLE``: ``event_elapsed`` or :meth:`HostBackend.stamp_ns` on an event
  recorded only as a node of a graph that was not launched yet.
* ``401 ILLEGAL_STATE``: ``begin_capture`` or ``stream_begin_capture`` on a capturing stream,
  ``end_capture`` or ``stream_end_capture`` on one that is not.
* ``600 NOT_READY`` (``not_ready`` true): ``event_elapsed`` or
  :meth:`HostBackend.stamp_ns` on an event whose latest record was not reached yet.
* ``800 NOT_PERMITTED``: a blocking call (``event_wait`` on an unreached event,
  ``stream_synchronize`` on a busy stream) made from a host function, where it could only
  deadlock.
* ``900 STREAM_CAPTURE_UNSUPPORTED``: ``stream_synchronize`` on a capturing stream.
* ``907 CAPTURED_EVENT``: ``event_wait``, ``event_query``, ``event_elapsed``, ``stamp_ns``,
  or ``stream_wait_event`` from a stream that is not capturing, on a captured event.
* ``999 INJECTED_FAULT``: the default error of :meth:`HostBackend.inject_fault`.

Closed, foreign and never-recorded handles are refused with :class:`~eventapi.EventStateError`
by :class:`~eventapi.driverkit.DriverBackend` before any of the above is reached.
"""

from __future__ import annotations

import copy
import itertools
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, final

from ._arguments import bounded_repr, check_int
from ._errors import CaptureError, DriverError, EventStateError
from ._protocol import CAPABILITY_METHODS, GRAPH_METHODS, PROTOCOL_METHODS
from ._single_owner import SingleOwner
from .driverkit import CaptureCheckMixin, Event, EventQueryMixin, HostFuncMixin, Stream

if TYPE_CHECKING:
    from ._protocol import (
        EventApi,
        SupportsCaptureCheck,
        SupportsEventQuery,
        SupportsGraphRecord,
        SupportsGraphs,
        SupportsHostFunc,
    )

__all__ = ["HostBackend"]

_log = logging.getLogger("eventapi")
_now = time.perf_counter_ns
_ids = itertools.count(1)

# The methods HostBackend.inject_fault can make fail: the protocol and its capabilities.
_FAULTABLE: Final = tuple(sorted((*PROTOCOL_METHODS, *CAPABILITY_METHODS, *GRAPH_METHODS)))

# The codes of the errors the backend raises, by name: CUDA's numbers (the module docstring).
_CODES: Final = {
    "OUT_OF_MEMORY": 2,
    "INVALID_HANDLE": 400,
    "ILLEGAL_STATE": 401,
    "NOT_READY": 600,
    "NOT_PERMITTED": 800,
    "STREAM_CAPTURE_UNSUPPORTED": 900,
    "CAPTURED_EVENT": 907,
    "INJECTED_FAULT": 999,
}

# Set on worker threads, so blocking calls from a host function are refused instead of hanging.
_worker_thread = threading.local()


def _stop_worker(state: _StreamState, pid: int) -> None:
    # The safety net of a raw stream dropped without a successful destroy. Not in a forked
    # child: the worker does not exist there, and its lock may have been held at the fork.
    if pid == os.getpid():
        state.stop()


@final
class _StreamState:
    """A stream's queue and counters; everything here is guarded by ``lock``."""

    __slots__ = (
        "as_node",
        "capturing",
        "completed",
        "done",
        "enqueued",
        "idle",
        "lock",
        "nodes",
        "queue",
        "sleepers",
        "stopping",
        "work",
    )

    def __init__(self) -> None:
        # Reentrant because a finalizer may stop this stream on a thread that holds the lock: a
        # garbage collection can start at any allocation under it (the worker's notify_all
        # allocates), and a dropped profiler or stream handle collected there destroys its
        # stream, whose stop() takes this lock again. A plain Lock would deadlock that thread.
        self.lock = threading.RLock()
        # Two conditions on one lock: the worker sleeps on `work`, waiters on `done`, so waking
        # the worker never wakes a waiter instead (Condition.notify picks an arbitrary sleeper).
        self.work = threading.Condition(self.lock)
        self.done = threading.Condition(self.lock)
        # A record, or a callable the worker runs: a host function, or a wait for a record.
        self.queue: deque[_Record | Callable[[], object]] = deque()
        self.enqueued = 0
        self.completed = 0
        self.sleepers = 0  # threads waiting on `done`; the worker notifies only when nonzero
        self.idle = False
        self.capturing = False
        self.nodes: list[_HostEvent] = []  # the capture's event-record nodes, in order
        self.as_node = False  # the record being made is event_record_in_graph's
        self.stopping = False

    def push(self, op: _Record | Callable[[], object]) -> None:
        # Caller holds self.lock.
        self.queue.append(op)
        self.enqueued += 1
        if self.idle:
            self.work.notify()

    def stop(self) -> None:
        with self.lock:
            self.stopping = True
            if self.idle:
                self.work.notify()

    def record(self, event: _HostEvent) -> None:
        # Caller holds self.lock and the stream is not capturing.
        record = _Record(self)
        if self.completed == self.enqueued:
            # Nothing queued or running: the stream reaches the record at once, as an idle
            # device queue does, and no worker has to wake up for it. Stamped under the lock,
            # so nothing enqueued after it can be stamped before it.
            record.stamp = _now()
            self.enqueued += 1
            self.completed += 1
        else:
            self.push(record)
        event.latest = record

    def sleep_until(self, reached: Callable[[], bool]) -> None:
        # Caller holds self.lock. Counted as a sleeper, so that the worker notifies `done`.
        self.sleepers += 1
        try:
            self.done.wait_for(reached)
        finally:
            self.sleepers -= 1


@final
class _Record:
    """One record of an event: the op in the queue, and the stamp once the worker reached it."""

    __slots__ = ("stamp", "state")

    def __init__(self, state: _StreamState | None) -> None:
        self.state = state  # None only for _CAPTURED and _UNLAUNCHED
        self.stamp: int | None = None

    def wait(self) -> None:
        """Block the calling thread until the stream reached this record."""
        state = self.state
        assert state is not None  # callers screen _CAPTURED out; _UNLAUNCHED is reached
        with state.lock:
            state.sleep_until(lambda: self.stamp is not None)


# The record of an event recorded into a capturing stream: never reached, refused by waits.
_CAPTURED: Final = _Record(None)
# The record of an event recorded only as a node of a graph not launched yet (and of a new
# event, which driverkit refuses before it gets here): nothing to wait for, and no stamp to
# read (as a driver's event never recorded).
_UNLAUNCHED: Final = _Record(None)
_UNLAUNCHED.stamp = 0


@final
class _HostEvent:
    """The raw event: which record is the latest."""

    __slots__ = ("id", "latest")

    def __init__(self) -> None:
        self.id = next(_ids)
        self.latest = _UNLAUNCHED

    def __repr__(self) -> str:
        return f"#{self.id}"


@final
class _Worker:
    """The raw stream: a worker thread's state.

    The thread holds only the state, never this object, so a stream handle that is dropped (or
    whose destroy failed) still lets its thread finish the queue and exit.
    """

    __slots__ = ("__weakref__", "id", "state")

    def __init__(self) -> None:
        self.id = next(_ids)
        self.state = _StreamState()

    def __repr__(self) -> str:
        return f"#{self.id}"


def _drain(state: _StreamState) -> None:
    """A worker thread's body: run the queue in order until stopped and empty."""
    _worker_thread.active = True
    lock = state.lock
    queue = state.queue
    lock.acquire()
    try:
        while True:
            if not queue:
                if state.stopping:
                    return
                state.idle = True
                state.work.wait()
                state.idle = False
                continue
            op = queue.popleft()
            if type(op) is _Record:
                # Stamped under the lock: a waiter that saw no stamp is already asleep on `done`.
                op.stamp = _now()
            else:
                lock.release()
                try:
                    op()
                # A worker never dies: whatever a host function raises (even SystemExit) is logged.
                except BaseException:
                    _log.exception(
                        "host: host function %r raised; the stream went on with its later work", op
                    )
                finally:
                    # Dropped before the lock is taken again: the host function may hold the
                    # last reference to a handle, whose finalizer takes its backend's lock,
                    # which a thread recording into this stream holds while it waits for ours.
                    del op
                    lock.acquire()
            state.completed += 1
            if state.sleepers:
                state.done.notify_all()
    finally:
        state.done.notify_all()
        lock.release()


def _error(call: str, name: str, message: str) -> DriverError:
    return DriverError("host", call, _CODES[name], name, message, not_ready=name == "NOT_READY")


def _latest(event: _HostEvent, call: str) -> _Record:
    if event.latest is _CAPTURED:
        raise _error(
            call,
            "CAPTURED_EVENT",
            f"event {event!r} was last recorded into a stream capturing a graph, so it has no "
            "timestamp to wait for or read; record it again outside the capture",
        )
    return event.latest


def _stamp(event: _HostEvent, call: str) -> int:
    # The stamp of the event's latest record; refused when it has none (yet).
    record = event.latest
    if record.stamp is not None and record is not _UNLAUNCHED:
        return record.stamp
    _latest(event, call)  # refuses a captured event
    if record is _UNLAUNCHED:
        raise _error(
            call,
            "INVALID_HANDLE",
            f"event {event!r} was recorded only into a graph that was not launched yet, so "
            "it has no timestamp; launch the graph first",
        )
    raise _error(call, "NOT_READY", f"event {event!r} has not been reached yet; wait for it first")


def _refuse_on_worker(call: str) -> None:
    if getattr(_worker_thread, "active", False):
        raise _error(
            call,
            "NOT_PERMITTED",
            "called from a host function; a host function must not block on the device "
            "(it would wait on its own stream); do the wait on another thread",
        )


@final
class _HostGraph(SingleOwner):
    """A graph :meth:`HostBackend.stream_end_capture` returns: its event-record nodes, in order.

    Users receive it; they never build one. ``copy``, ``deepcopy`` and ``pickle`` raise
    :class:`TypeError`.
    """

    _COPY_HINT = "launch the same graph again, or capture another"

    __slots__ = ("_closed", "_id", "_nodes", "_owner")

    def __init__(self, owner: HostBackend, nodes: list[_HostEvent]) -> None:
        self._owner = owner
        self._nodes = nodes
        self._closed = False
        self._id = next(_ids)

    @property
    def closed(self) -> bool:
        """True once the graph was destroyed."""
        return self._closed

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._nodes)} event-record nodes"
        return f"<host graph #{self._id} {state}>"


@final
class HostBackend(
    EventQueryMixin[_HostEvent, _Worker],
    CaptureCheckMixin[_HostEvent, _Worker],
    HostFuncMixin[_HostEvent, _Worker],
):
    """The ``host`` backend: the protocol, every optional capability and the test aids.

    One object is a self-contained "device": its handles are refused by any other object.
    Every method may be called from any thread. See the module docstring for the semantics and
    the errors.
    """

    BACKEND = "host"

    def __init__(self) -> None:
        super().__init__()
        # method name -> runs of pending faults, one per inject_fault call, whatever its count:
        # (the error, None for the default one; how many calls it fails). Guarded by _faults_lock.
        self._faults: dict[str, deque[tuple[DriverError | None, int]]] = {}
        self._faults_lock = threading.Lock()

    @property
    def device(self) -> None:
        """None: the host backend has no devices (``cuda`` and ``hip`` give an index)."""
        return None

    def __repr__(self) -> str:
        events, streams = self.live_handles()
        return f"<HostBackend live events={events} streams={streams}>"

    # -- test aids ------------------------------------------------------------------------------

    def inject_fault(
        self, method: str, *, count: int = 1, error: DriverError | None = None
    ) -> None:
        """Make the next ``count`` calls of protocol method ``method`` raise a DriverError.

        The call raises before it does anything in the backend (nothing is created or queued),
        except a destroy, which fails as the destroy contract says a failed destroy does: the
        handle is released (closed, uncounted, its worker stopped) and then the error raised.
        Faults are injected after the handle checks: a call refused with
        :class:`~eventapi.EventStateError` does not consume a fault. ``error`` is raised (a
        copy of it, each time) instead of the default ``INJECTED_FAULT`` (999) error. Faults
        add up: a second call queues more. Raises :class:`ValueError` for a name that is not
        a protocol or capability method, or a ``count`` below 1;
        :class:`TypeError` for a ``method`` that is not a ``str``, a ``count`` that is not an
        ``int`` or an ``error`` that is not a :class:`~eventapi.DriverError`.
        """
        if not isinstance(method, str):
            raise TypeError(
                f"inject_fault: method must be a method's name as a str, not "
                f"{type(method).__qualname__} {bounded_repr(method)}"
            )
        if method not in _FAULTABLE:
            raise ValueError(
                f"inject_fault: {bounded_repr(method)} is not a protocol method of the host "
                f"backend; use one of: {', '.join(_FAULTABLE)}"
            )
        count = check_int(count, "inject_fault: count", minimum=1)
        if error is not None and not isinstance(error, DriverError):
            raise TypeError(f"inject_fault: error must be a DriverError, got {bounded_repr(error)}")
        with self._faults_lock:
            self._faults.setdefault(method, deque()).append((error, count))

    def begin_capture(self, stream: Stream[_Worker] | object) -> None:
        """Start a graph capture on ``stream``, as a test aid (:meth:`stream_begin_capture`).

        Until :meth:`end_capture`, work enqueued on the stream is captured and never executed,
        ``stream_is_capturing`` is true, and an event recorded into it becomes a captured event
        (``CAPTURED_EVENT`` on wait, query and elapsed). Work enqueued before keeps running.
        Raises DriverError ``ILLEGAL_STATE`` if the stream is already capturing.
        """
        self._capture(stream, "begin_capture", begin=True)

    def end_capture(self, stream: Stream[_Worker] | object) -> None:
        """End the capture begun by :meth:`begin_capture`; the graph it took is discarded.

        Raises DriverError ``ILLEGAL_STATE`` if the stream is not capturing.
        """
        self._capture(stream, "end_capture", begin=False)

    # -- graphs ---------------------------------------------------------------------------------

    def stream_begin_capture(self, stream: Stream[_Worker] | object) -> None:
        """Start capturing ``stream`` into a graph. See :class:`eventapi.SupportsGraphs`.

        Raises DriverError ``ILLEGAL_STATE`` if the stream is already capturing.
        """
        self._capture(stream, "stream_begin_capture", begin=True)

    def stream_end_capture(self, stream: Stream[_Worker] | object) -> _HostGraph:
        """End the capture of ``stream``; the graph it took, ready to launch.

        Raises DriverError ``ILLEGAL_STATE`` if the stream is not capturing.
        """
        return _HostGraph(self, self._capture(stream, "stream_end_capture", begin=False))

    def graph_launch(self, graph: _HostGraph | object, stream: Stream[_Worker] | object) -> None:
        """Enqueue a run of ``graph`` on ``stream``: each node records its event there.

        Into a capturing stream, the graph's nodes join that capture. Raises
        :class:`~eventapi.EventStateError` for a destroyed graph or another object's.
        """
        checked = self._graph(graph, "graph_launch")
        if checked._closed:
            raise EventStateError(
                f"host: graph_launch refused {graph!r}: it was already destroyed; capture another"
            )
        with self._hold_stream(stream, "graph_launch") as worker:
            self._fault("graph_launch")
            state = worker.state
            with state.lock:
                if state.capturing:
                    state.nodes.extend(checked._nodes)
                    return
                for event in checked._nodes:
                    state.record(event)

    def graph_destroy(self, graph: _HostGraph | object) -> None:
        """Release ``graph``; a second call is a no-op. Runs already launched complete."""
        checked = self._graph(graph, "graph_destroy")
        if not checked._closed:
            checked._closed = True  # released first: a failed destroy leaves nothing behind
            checked._nodes = []
            self._fault("graph_destroy")

    def event_record_in_graph(
        self, event: Event[_HostEvent] | object, stream: Stream[_Worker] | object
    ) -> None:
        """Record ``event`` as a node of the graph ``stream`` captures, stamped at each launch.

        See :class:`eventapi.SupportsGraphRecord`. Raises :class:`~eventapi.EventStateError`
        when the stream is not capturing, and as ``event_record`` does for the event.
        """
        with self._hold_stream(stream, "event_record_in_graph") as worker:
            state = worker.state
            # Held across the record (a reentrant lock): the node flag is this call's alone.
            with state.lock:
                if not state.capturing:
                    raise EventStateError(
                        f"host: event_record_in_graph refused {bounded_repr(stream)}: the stream "
                        "is not capturing a graph; record into it with event_record(event, stream)"
                    )
                state.as_node = True
                try:
                    self.event_record(event, stream)
                finally:
                    state.as_node = False

    def _capture(self, stream: object, call: str, *, begin: bool) -> list[_HostEvent]:
        # Begin or end the capture of ``stream``; the nodes it took (none when it begins).
        with self._hold_stream(stream, call) as worker:
            self._fault(call)
            state = worker.state
            with state.lock:
                if state.capturing == begin:
                    fix = (
                        "is already capturing; end that capture first"
                        if begin
                        else "is not capturing; begin a capture first"
                    )
                    raise _error(call, "ILLEGAL_STATE", f"stream {worker!r} {fix}")
                state.capturing = begin
                nodes, state.nodes = state.nodes, []
                return nodes

    def _graph(self, graph: object, call: str) -> _HostGraph:
        # ``graph`` as a graph of this object, open or destroyed; anything else is refused.
        if type(graph) is not _HostGraph or graph._owner is not self:
            raise EventStateError(
                f"host: {call} refused {bounded_repr(graph)}: not a graph of this host backend "
                "object; pass one its stream_end_capture() returned"
            )
        return graph

    def stamp_ns(self, event: Event[_HostEvent]) -> int:
        """The :func:`time.perf_counter_ns` value the worker stamped for ``event``'s latest record.

        The truth a test compares readings against. Never blocks. Raises
        :class:`~eventapi.EventStateError` for a never-recorded, closed or foreign event, and
        DriverError ``NOT_READY`` (``not_ready`` true) when the latest record was not reached
        yet (as ``event_elapsed`` does), ``CAPTURED_EVENT`` for a captured event.
        """
        with self._hold_event(event, "stamp_ns") as raw:
            return _stamp(raw, "stamp_ns")

    # -- the driver calls -----------------------------------------------------------------------

    def _fault(self, method: str) -> None:
        # Raises the next fault injected for `method`, if any. The calls a window, a collect and
        # a fence make test `_faults` first, so that they make no call while none is pending.
        with self._faults_lock:
            pending = self._faults.get(method)
            if not pending:
                return
            error, left = pending.popleft()
            if left > 1:
                pending.appendleft((error, left - 1))
            elif not pending:
                del self._faults[method]
        if error is None:
            raise _error(method, "INJECTED_FAULT", f"fault injected by inject_fault({method!r})")
        raise copy.copy(error)

    def _raw_event_create(self) -> _HostEvent:
        if self._faults:
            self._fault("event_create")
        return _HostEvent()

    def _raw_event_destroy(self, event: _HostEvent) -> None:
        if self._faults:
            self._fault("event_destroy")

    def _raw_event_record(self, event: _HostEvent, stream: _Worker) -> None:
        state = stream.state
        with state.lock:
            if self._faults:
                self._fault("event_record_in_graph" if state.as_node else "event_record")
            if not state.capturing:
                state.record(event)
            elif state.as_node:  # a node: the event stays as it was until a launch
                state.nodes.append(event)
            else:
                event.latest = _CAPTURED

    def _raw_event_wait(self, event: _HostEvent) -> None:
        self._fault("event_wait")
        record = _latest(event, "event_wait")
        if record.stamp is None:
            _refuse_on_worker("event_wait")
            record.wait()

    def _raw_event_query(self, event: _HostEvent) -> bool:
        if self._faults:
            self._fault("event_query")
        return _latest(event, "event_query").stamp is not None

    def _raw_event_elapsed_ns(self, start: _HostEvent, end: _HostEvent) -> int:
        if self._faults:
            self._fault("event_elapsed")
        return _stamp(end, "event_elapsed") - _stamp(start, "event_elapsed")

    def _raw_stream_wait_event(self, stream: _Worker, event: _HostEvent) -> None:
        self._fault("stream_wait_event")
        state = stream.state
        with state.lock:
            if state.capturing:
                return  # captured into the graph, as CUDA joins a captured event
            record = _latest(event, "stream_wait_event")
            if record.stamp is None:
                state.push(record.wait)

    def _raw_stream_synchronize(self, stream: _Worker) -> None:
        self._fault("stream_synchronize")
        state = stream.state
        with state.lock:
            if state.capturing:
                raise _error(
                    "stream_synchronize",
                    "STREAM_CAPTURE_UNSUPPORTED",
                    f"stream {stream!r} is capturing a graph and cannot be synchronized; "
                    "call end_capture(stream) first",
                )
            target = state.enqueued
            if state.completed < target:
                _refuse_on_worker("stream_synchronize")
                state.sleep_until(lambda: state.completed >= target)

    def _raw_stream_create_non_blocking(self) -> _Worker:
        self._fault("stream_create_non_blocking")
        worker = _Worker()
        # Safety net, armed before the thread starts so that no interrupt can leave a running
        # worker without it: a raw stream dropped without a successful destroy still stops.
        weakref.finalize(worker, _stop_worker, worker.state, os.getpid()).atexit = False
        thread = threading.Thread(
            target=_drain,
            args=(worker.state,),
            name=f"eventapi-host-stream-{worker.id}",
            daemon=True,
        )
        try:
            thread.start()
        except RuntimeError as exc:  # the interpreter could not start another thread
            raise _error(
                "stream_create_non_blocking",
                "OUT_OF_MEMORY",
                f"could not start the stream's worker thread ({exc}); destroy unused streams",
            ) from exc
        return worker

    def _raw_stream_destroy(self, stream: _Worker) -> None:
        stream.state.stop()  # released first: a failed destroy leaves no worker running
        self._fault("stream_destroy")

    def _raw_stream_is_capturing(self, stream: _Worker) -> bool:
        if self._faults:
            self._fault("stream_is_capturing")
        return stream.state.capturing

    def _raw_launch_host_func(self, stream: _Worker, fn: Callable[[], object]) -> None:
        self._fault("stream_launch_host_func")
        state = stream.state
        with state.lock:
            if state.capturing:  # checked before, but a capture may have begun since
                raise CaptureError(
                    f"host: stream_launch_host_func refused on stream {stream!r}: it began "
                    "capturing a graph; launch the host function after the capture ends"
                )
            state.push(fn)


if TYPE_CHECKING:
    _check: EventApi[Event[_HostEvent], Stream[_Worker]] = HostBackend()
    _query: SupportsEventQuery[Event[_HostEvent]] = HostBackend()
    _capture: SupportsCaptureCheck[Stream[_Worker]] = HostBackend()
    _host_func: SupportsHostFunc[Stream[_Worker]] = HostBackend()
    _graphs: SupportsGraphs[Stream[_Worker], _HostGraph] = HostBackend()
    _graph_record: SupportsGraphRecord[Event[_HostEvent], Stream[_Worker]] = HostBackend()
