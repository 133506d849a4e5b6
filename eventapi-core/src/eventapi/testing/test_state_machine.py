"""Random call sequences, valid and invalid, checked step by step against a model (hypothesis).

A hypothesis state machine drives the backend under test through the protocol, fences and
profiler windows: handles are created, recorded, waited on, queried, timed, made to wait on one
another and destroyed in random orders, on random threads, and misused on purpose (destroyed
handles, events never recorded, objects that are no handle, handles of a second backend object,
second destroys). After every step the model says what must have happened:

* every call returns or raises the documented error, nothing else: ``EventStateError`` for a
  refused handle, ``DriverError`` with ``not_ready`` for an unreached event in
  ``event_elapsed``, ``UnsupportedError`` for a capability the backend lacks;
* the backend's live handles (when it counts them) equal the model's;
* readings are non-negative, a later event read back to an earlier one reads 0, and readings of
  adjacent spans of one stream add up to the whole within the drivers' resolution;
* host functions run once each, in stream order; windows come back in the order they opened.

A failing sequence is shrunk to a short one and printed as code. The budget is
``--eventapi-fuzz-examples`` sequences (a small default keeps the kit fast; raise it for a
longer search). Needs hypothesis (``pip install "eventapi-core[testing]"``); without it these
tests are skipped with that reason.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable
from typing import Any, ClassVar, Final, final

import pytest

from eventapi import (
    DriverError,
    EventFence,
    EventProfiler,
    EventStateError,
    UnsupportedError,
    Window,
)

from ._kit import CAPABILITIES, Kit, live_counts

NO_HYPOTHESIS: Final = (
    "the kit's state machines need hypothesis: "
    'pip install "eventapi-core[testing]" (or pip install hypothesis)'
)
pytest.importorskip("hypothesis", reason=NO_HYPOTHESIS)

from hypothesis import HealthCheck, Phase, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import (  # noqa: E402
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

STEPS: Final = 40
"""Calls per sequence: long enough to build and tear down a few handles of every kind."""

# Readings of adjacent spans add up to the reading of the whole span up to the rounding of
# three readings to the driver's resolution (at most 1 us each on the drivers we know); the
# same bound as test_elapsed.py, for the same reason.
ADDITIVITY_TOLERANCE_NS: Final = 5_000

# Nested windows on one stream: the inner one's start and end lie between the outer one's, so
# the inner duration cannot exceed the outer; two readings' rounding is the only slack.
NESTING_TOLERANCE_NS: Final = 2_000

INITIAL_HANDLES: Final = 2  # streams (and events) each sequence starts with

MAX_PROFILERS: Final = 2  # each owns a stream and a pool: a few are enough to interleave


# -- calls ---------------------------------------------------------------------------------------

CALLER_THREADS: Final = 3  # calls rotate over these, so handles cross threads


@final
class _Caller:
    """One long-lived thread making calls handed to it, each bounded by the kit's timeout."""

    __slots__ = ("_jobs", "_thread")

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], threading.Event, list[Any]] | None]
        self._jobs = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, daemon=True, name="eventapi-kit caller")
        self._thread.start()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, done, box = job
            try:
                box.append((True, fn()))
            except BaseException as exc:  # handed to the calling thread
                box.append((False, exc))
            done.set()

    def call(self, fn: Callable[[], Any], timeout: float) -> tuple[bool, Any] | None:
        """``(True, result)`` or ``(False, exception)``; None when ``fn`` did not return."""
        done = threading.Event()
        box: list[Any] = []
        self._jobs.put((fn, done, box))
        return box[0] if done.wait(timeout) else None

    def close(self) -> None:
        self._jobs.put(None)


@final
class _Callers:
    """Threads that make a state machine's calls in turn, each call bounded in time.

    A thread per call (as :meth:`Kit.call` starts) would cost more than most calls do; a few
    long-lived ones keep sequences fast while a handle made on one thread is still used on
    another. A caller that hangs is abandoned (it is a daemon) and replaced.
    """

    __slots__ = ("_callers", "_turn", "timeout")

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._callers = [_Caller() for _ in range(CALLER_THREADS)]
        self._turn = 0

    def call(self, fn: Callable[..., Any], *args: object) -> Any:
        index = self._turn % len(self._callers)
        self._turn += 1
        outcome = self._callers[index].call(lambda: fn(*args), self.timeout)
        if outcome is None:
            self._callers[index] = _Caller()
            name = getattr(fn, "__name__", repr(fn))
            pytest.fail(
                f"{name} did not return within {self.timeout:g} s: a hang "
                "(raise the limit with --eventapi-timeout if the device is just slow)",
                pytrace=False,
            )
        ok, value = outcome
        if not ok:
            raise value
        return value

    def close(self) -> None:
        for caller in self._callers:
            caller.close()


# -- the model ------------------------------------------------------------------------------------
#
# Happens-before is tracked with record ids: each record (of an event or a fence) gets
# a new id, and each stream keeps the set of ids its later work comes after (its own records and
# what it was made to wait on). A record is known reached once the host saw it (a wait, a
# synchronize, a query or reading that said so) or saw a record that comes after it.
#
# A stream destroyed with work still queued may drop that work (the contract allows it); the ids
# it may drop, and everything that comes after them, are never waited on, so no step can hang on
# work that will never run.


STREAMS: Final = Bundle("streams")
"""The streams a sequence made, shared by both machines' rules."""


@final
class MStream:
    __slots__ = ("after", "alive", "handle", "launched", "ran")

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.alive = True
        self.after: set[int] = set()
        self.launched: list[int] = []  # host functions enqueued, by number
        self.ran: list[int] = []  # host functions run, appended on the stream's thread


@final
class MEvent:
    __slots__ = ("after", "alive", "handle", "rid", "stream")

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.alive = True
        self.rid: int | None = None  # the latest record; None until recorded
        self.after: frozenset[int] = frozenset()  # what the latest record comes after
        self.stream: MStream | None = None  # where the latest record went


@final
class MFence:
    __slots__ = ("after", "closed", "fence", "rid")

    def __init__(self, fence: EventFence[Any, Any], rid: int, after: frozenset[int]) -> None:
        self.fence = fence
        self.rid = rid
        self.after = after
        self.closed = False


@final
class MWindow:
    __slots__ = ("depth", "name", "parent", "seq", "window")

    def __init__(self, window: Window[Any], seq: int, parent: int | None) -> None:
        self.window = window
        self.name = window.name
        self.depth = window.depth
        self.seq = seq  # opening order within its profiler
        self.parent = parent  # the seq of the window it opened inside, if any


@final
class MProfiler:
    __slots__ = ("closed", "collected", "open", "opened", "profiler", "stopped")

    def __init__(self, profiler: EventProfiler[Any, Any]) -> None:
        self.profiler = profiler
        self.closed = False
        self.opened = 0
        self.open: list[MWindow] = []  # innermost last
        self.stopped: list[MWindow] = []  # stopped since the last collect
        self.collected: dict[str, int] = {}  # name -> windows read back, for summary()


class _Sequences(RuleBasedStateMachine):
    """The model, the stream rules and the checks both state machines share.

    A test binds :attr:`kit` and :attr:`foreign_handles` on a subclass of a concrete machine.
    """

    kit: ClassVar[Kit]
    callers: ClassVar[_Callers]
    foreign_handles: ClassVar[dict[str, Any]]  # "event"/"stream" of a second backend object

    streams = STREAMS

    def __init__(self) -> None:
        super().__init__()
        self.api: Any = self.kit.api
        self.has_query = isinstance(self.api, CAPABILITIES["SupportsEventQuery"])
        self.host_func = isinstance(self.api, CAPABILITIES["SupportsHostFunc"])
        self.baseline = live_counts(self.api)
        self.next_rid = 0
        self.next_func = 0
        self.reached: set[int] = set()
        self.dropped: set[int] = set()
        self.all_streams: list[MStream] = []
        self.all_events: list[MEvent] = []
        self.all_fences: list[MFence] = []
        self.all_profilers: list[MProfiler] = []

    # -- helpers --------------------------------------------------------------------------------

    def call(self, fn: Callable[..., Any], *args: object) -> Any:
        return self.callers.call(fn, *args)

    def refused(self, fn: Callable[..., Any], *args: object) -> None:
        """The call must raise EventStateError, with a message."""
        name = getattr(fn, "__name__", repr(fn))
        with pytest.raises(EventStateError) as info:
            self.call(fn, *args)
        assert str(info.value), f"{name}: EventStateError without a message"

    def record_id(self, stream: MStream) -> tuple[int, frozenset[int]]:
        """A new record on ``stream``: its id and what it comes after."""
        self.next_rid += 1
        rid = self.next_rid
        after = frozenset(stream.after)
        stream.after.add(rid)
        return rid, after

    def saw_reached(self, rid: int, after: frozenset[int]) -> None:
        self.reached.add(rid)
        self.reached.update(after)

    def certain(self, rid: int, after: frozenset[int]) -> bool:
        """True when the record will be reached: nothing it waits for may have been dropped."""
        return rid in self.reached or (rid not in self.dropped and after.isdisjoint(self.dropped))

    def stream_certain(self, stream: MStream) -> bool:
        return stream.after.isdisjoint(self.dropped - self.reached)

    def is_reached(self, event: MEvent) -> bool:
        return event.rid is not None and event.rid in self.reached

    def usable(self, event: MEvent) -> bool:
        return event.alive and event.rid is not None

    def synchronized(self, stream: MStream) -> None:
        """After a synchronize returned: everything on ``stream`` ran, in order."""
        self.reached.update(stream.after)
        assert stream.ran == stream.launched, (
            f"host functions launched {stream.launched}, run {stream.ran} after a synchronize: "
            "each must run once, in stream order, before the synchronize returns"
        )
        self.check_stream_order(stream)

    def check_stream_order(self, stream: MStream | None) -> None:
        """The reached events whose latest record is on ``stream``, in record order: each reads
        0 back to the one before it, and the spans between them add up.

        Run whenever the host learns that a record was reached, not only after a synchronize,
        so a stale reading shows in the shortest sequence that can produce one.
        """
        if stream is None:
            return
        ordered = sorted(
            (
                e
                for e in self.all_events
                if e.alive and e.stream is stream and e.rid is not None and e.rid in self.reached
            ),
            key=lambda e: e.rid or 0,
        )
        elapsed = self.api.event_elapsed
        for earlier, later in itertools.pairwise(ordered):
            assert self.call(elapsed, later.handle, earlier.handle) == 0, (
                "event_elapsed from an event to one recorded before it on the same stream is "
                "not 0: a re-recorded event must read from its latest record"
            )
        if len(ordered) >= 3:
            first, middle, last = ordered[0], ordered[len(ordered) // 2], ordered[-1]
            head = self.call(elapsed, first.handle, middle.handle)
            tail = self.call(elapsed, middle.handle, last.handle)
            whole = self.call(elapsed, first.handle, last.handle)
            assert abs(whole - (head + tail)) <= ADDITIVITY_TOLERANCE_NS, (
                f"spans of one stream do not add up: {head} + {tail} != {whole} ns "
                f"(tolerance {ADDITIVITY_TOLERANCE_NS} ns)"
            )

    # -- streams --------------------------------------------------------------------------------

    @initialize(target=STREAMS)
    def first_streams(self) -> Any:
        # Starting with handles of every kind leaves the steps to the calls that combine them.
        streams = [self.create_stream() for _ in range(INITIAL_HANDLES)]
        self.started()
        return multiple(*streams)

    def started(self) -> None:
        """Called by each initializer; a machine sets up what needs all of them here."""

    @rule(target=STREAMS)
    def create_stream(self) -> MStream:
        stream = MStream(self.call(self.api.stream_create_non_blocking))
        self.all_streams.append(stream)
        return stream

    @rule(stream=STREAMS)
    def synchronize(self, stream: MStream) -> None:
        if not stream.alive:
            self.refused(self.api.stream_synchronize, stream.handle)
        elif self.stream_certain(stream):
            self.call(self.api.stream_synchronize, stream.handle)
            self.synchronized(stream)

    @rule(stream=STREAMS, drain=st.booleans())
    def destroy_stream(self, stream: MStream, drain: bool) -> None:
        # A second destroy is a no-op. Without a drain, queued work may be dropped.
        if stream.alive and drain and self.stream_certain(stream):
            self.call(self.api.stream_synchronize, stream.handle)
            self.synchronized(stream)
        self.call(self.api.stream_destroy, stream.handle)
        if stream.alive:
            self.dropped.update(stream.after - self.reached)
        stream.alive = False

    # -- what holds after every step ------------------------------------------------------------

    @invariant()
    def live_handles_match_the_model(self) -> None:
        # A profiler pools events and may own streams of its own: counted only when none is open.
        if self.baseline is None or any(not p.closed for p in self.all_profilers):
            return
        events = sum(e.alive for e in self.all_events) + sum(not f.closed for f in self.all_fences)
        streams = sum(s.alive for s in self.all_streams)
        expected = (self.baseline[0] + events, self.baseline[1] + streams)
        actual = live_counts(self.api)
        assert actual == expected, (
            f"live handles (events, streams) are {actual}; the calls so far leave {expected}"
        )

    def teardown(self) -> None:
        for profiler in self.all_profilers:
            self.call(profiler.profiler.close)
        for fence in self.all_fences:
            self.call(fence.fence.close)
        try:
            for stream in self.all_streams:
                if stream.alive and self.stream_certain(stream):
                    self.call(self.api.stream_synchronize, stream.handle)
                    # Every sequence ends with the checks a synchronize earns.
                    self.synchronized(stream)
        finally:
            for event in self.all_events:
                self.call(self.api.event_destroy, event.handle)
            for stream in self.all_streams:
                self.call(self.api.stream_destroy, stream.handle)
        after = live_counts(self.api)
        assert after == self.baseline, (
            f"live handles (events, streams) were {self.baseline} before the sequence and "
            f"{after} after everything it made was closed or destroyed"
        )


class ProtocolSequences(_Sequences):
    """The protocol's calls on streams and events, valid and invalid, from several threads."""

    events = Bundle("events")

    @initialize(target=events)
    def first_events(self) -> Any:
        events = [self.create_event() for _ in range(INITIAL_HANDLES)]
        self.started()
        return multiple(*events)

    def started(self) -> None:
        # Once both initializers ran, the first events are recorded in turn on the first stream:
        # drawn steps rarely repeat the same rule with the same handles, so without this most
        # sequences never hold two records on one stream, which an ordering defect needs.
        if self.all_events and self.all_streams and self.next_rid == 0:
            for event in self.all_events:
                self.record(event, self.all_streams[0])

    @precondition(lambda self: self.host_func)
    @rule(stream=STREAMS)
    def launch_host_func(self, stream: MStream) -> None:
        self.next_func += 1
        number = self.next_func
        if not stream.alive:
            self.refused(self.api.stream_launch_host_func, stream.handle, lambda: None)
            return
        self.call(
            self.api.stream_launch_host_func, stream.handle, lambda: stream.ran.append(number)
        )
        stream.launched.append(number)

    # -- events ---------------------------------------------------------------------------------

    @rule(target=events)
    def create_event(self) -> MEvent:
        event = MEvent(self.call(self.api.event_create))
        self.all_events.append(event)
        return event

    @rule(event=events, stream=STREAMS)
    def record(self, event: MEvent, stream: MStream) -> None:
        if not event.alive or not stream.alive:
            self.refused(self.api.event_record, event.handle, stream.handle)
            return
        self.call(self.api.event_record, event.handle, stream.handle)
        event.rid, event.after = self.record_id(stream)
        event.stream = stream

    @rule(event=events)
    def record_again(self, event: MEvent) -> None:
        # Re-recording an event on the stream of its last record is what a pool of events does
        # (the profiler's own): drawn by itself, as two independent draws rarely land on it.
        if self.usable(event) and event.stream is not None and event.stream.alive:
            self.record(event, event.stream)

    @rule(event=events)
    def wait(self, event: MEvent) -> None:
        if not self.usable(event):
            self.refused(self.api.event_wait, event.handle)
            return
        assert event.rid is not None
        if self.certain(event.rid, event.after):
            self.call(self.api.event_wait, event.handle)
            self.saw_reached(event.rid, event.after)
            self.check_stream_order(event.stream)

    @rule(event=events, waiters=st.integers(min_value=2, max_value=4))
    def wait_from_threads(self, event: MEvent, waiters: int) -> None:
        # Several threads, each new to the backend, wait on one event at once.
        if not self.usable(event):
            return
        assert event.rid is not None
        if not self.certain(event.rid, event.after):
            return
        started = [self.kit.waiter(self.api.event_wait, event.handle) for _ in range(waiters)]
        for waiter in started:
            waiter.join()
        self.saw_reached(event.rid, event.after)
        self.check_stream_order(event.stream)

    @precondition(lambda self: self.has_query)
    @rule(event=events)
    def query(self, event: MEvent) -> None:
        if not self.usable(event):
            self.refused(self.api.event_query, event.handle)
            return
        assert event.rid is not None
        answer = self.call(self.api.event_query, event.handle)
        assert type(answer) is bool, f"event_query returned {answer!r}, not a bool"
        if self.is_reached(event):
            assert answer, "event_query returned False for an event the host saw reached"
        if answer:
            self.saw_reached(event.rid, event.after)
            self.check_stream_order(event.stream)

    @rule(start=events, end=events)
    def elapsed(self, start: MEvent, end: MEvent) -> None:
        if not self.usable(start) or not self.usable(end):
            self.refused(self.api.event_elapsed, start.handle, end.handle)
            return
        assert start.rid is not None
        assert end.rid is not None
        known = self.is_reached(start) and self.is_reached(end)
        try:
            reading = self.call(self.api.event_elapsed, start.handle, end.handle)
        except DriverError as exc:
            # Either event may still be on its way; then, and only then, not_ready is right.
            if not exc.not_ready or known:
                raise AssertionError(
                    f"event_elapsed raised {exc!r} on events "
                    f"{'the host saw reached' if known else 'that may be unreached'}; only "
                    "DriverError with not_ready is allowed, and only for an unreached event"
                ) from exc
            return
        assert type(reading) is int, f"event_elapsed returned {reading!r}, not int nanoseconds"
        assert reading >= 0, f"event_elapsed returned {reading} ns: not clamped at 0"
        self.saw_reached(start.rid, start.after)
        self.saw_reached(end.rid, end.after)
        if start is end or end.rid in start.after:
            assert reading == 0, (
                f"event_elapsed from an event to one recorded before it read {reading} ns, not 0"
            )

    @rule(stream=STREAMS, event=events)
    def stream_wait_event(self, stream: MStream, event: MEvent) -> None:
        if not stream.alive or not self.usable(event):
            self.refused(self.api.stream_wait_event, stream.handle, event.handle)
            return
        assert event.rid is not None
        self.call(self.api.stream_wait_event, stream.handle, event.handle)
        stream.after.add(event.rid)
        stream.after.update(event.after)

    @rule(event=events)
    def destroy_event(self, event: MEvent) -> None:
        # A second destroy is a no-op: it raises nothing and releases nothing more.
        self.call(self.api.event_destroy, event.handle)
        event.alive = False

    # -- handles that are not this backend's ----------------------------------------------------

    @rule(
        call=st.sampled_from(
            ["event_record", "event_wait", "event_elapsed", "stream_wait_event", "event_destroy"]
        ),
        kind=st.sampled_from(["object", "second"]),
        stream=STREAMS,
    )
    def foreign_event(self, call: str, kind: str, stream: MStream) -> None:
        foreign = self.foreign("event") if kind == "second" else object()
        if foreign is None or not stream.alive:
            return
        api = self.api
        calls: dict[str, tuple[Callable[..., Any], tuple[object, ...]]] = {
            "event_record": (api.event_record, (foreign, stream.handle)),
            "event_wait": (api.event_wait, (foreign,)),
            "event_elapsed": (api.event_elapsed, (foreign, foreign)),
            "stream_wait_event": (api.stream_wait_event, (stream.handle, foreign)),
            "event_destroy": (api.event_destroy, (foreign,)),
        }
        fn, args = calls[call]
        self.refused(fn, *args)

    @rule(
        call=st.sampled_from(["event_record", "stream_synchronize", "stream_destroy"]),
        kind=st.sampled_from(["object", "second"]),
        event=events,
    )
    def foreign_stream(self, call: str, kind: str, event: MEvent) -> None:
        foreign = self.foreign("stream") if kind == "second" else object()
        if foreign is None or not event.alive:
            return
        api = self.api
        calls: dict[str, tuple[Callable[..., Any], tuple[object, ...]]] = {
            "event_record": (api.event_record, (event.handle, foreign)),
            "stream_synchronize": (api.stream_synchronize, (foreign,)),
            "stream_destroy": (api.stream_destroy, (foreign,)),
        }
        fn, args = calls[call]
        self.refused(fn, *args)

    def foreign(self, kind: str) -> Any:
        """A handle of the second backend object (made once per test), or None without one."""
        return self.foreign_handles.get(kind)


class FenceProfilerSequences(_Sequences):
    """Fences and profiler windows over the streams, valid and invalid."""

    fences = Bundle("fences")
    profilers = Bundle("profilers")

    # -- fences ---------------------------------------------------------------------------------

    @rule(target=fences, stream=STREAMS)
    def record_fence(self, stream: MStream) -> Any:
        if not stream.alive:
            self.refused(EventFence.record, self.api, stream.handle)
            return multiple()
        fence = self.call(EventFence.record, self.api, stream.handle)
        rid, after = self.record_id(stream)
        model = MFence(fence, rid, after)
        self.all_fences.append(model)
        return model

    @rule(fence=fences)
    def fence_wait(self, fence: MFence) -> None:
        if fence.closed:
            self.refused(fence.fence.wait)
        elif self.certain(fence.rid, fence.after):
            self.call(fence.fence.wait)
            self.saw_reached(fence.rid, fence.after)

    @rule(fence=fences)
    def fence_reached(self, fence: MFence) -> None:
        if fence.closed:
            self.refused(fence.fence.reached)
            return
        if not self.has_query:
            with pytest.raises(UnsupportedError):
                self.call(fence.fence.reached)
            return
        answer = self.call(fence.fence.reached)
        assert type(answer) is bool
        if fence.rid in self.reached:
            assert answer, "reached() returned False for a fence the host saw reached"
        if answer:
            self.saw_reached(fence.rid, fence.after)

    @rule(fence=fences, stream=STREAMS)
    def fence_wait_on(self, fence: MFence, stream: MStream) -> None:
        if fence.closed or not stream.alive:
            self.refused(fence.fence.wait_on, stream.handle)
            return
        self.call(fence.fence.wait_on, stream.handle)
        stream.after.add(fence.rid)
        stream.after.update(fence.after)

    @rule(fence=fences)
    def fence_close(self, fence: MFence) -> None:
        self.call(fence.fence.close)  # idempotent
        fence.closed = True
        assert fence.fence.closed

    # -- profiler windows -----------------------------------------------------------------------

    @precondition(lambda self: sum(not p.closed for p in self.all_profilers) < MAX_PROFILERS)
    @rule(target=profilers)
    def open_profiler(self) -> MProfiler:
        profiler = MProfiler(self.call(EventProfiler, self.api))
        self.all_profilers.append(profiler)
        return profiler

    @rule(profiler=profilers, name=st.sampled_from(["a", "b", "c"]))
    def window_start(self, profiler: MProfiler, name: str) -> None:
        if profiler.closed:
            self.refused(profiler.profiler.start, name)
            return
        window = self.call(profiler.profiler.start, name)
        profiler.opened += 1
        parent = profiler.open[-1].seq if profiler.open else None
        profiler.open.append(MWindow(window, profiler.opened, parent))

    @rule(profiler=profilers)
    def window_stop(self, profiler: MProfiler) -> None:
        if not profiler.open:
            return
        window = profiler.open.pop()
        if profiler.closed:
            self.refused(window.window.stop)  # close() discarded it
            return
        self.call(window.window.stop)
        profiler.stopped.append(window)
        self.refused(window.window.stop)  # a window is one-shot

    @rule(profiler=profilers)
    def window_stop_outer(self, profiler: MProfiler) -> None:
        # Stopping a window while one opened inside it is still open is refused; both stay open.
        if profiler.closed or len(profiler.open) < 2:
            return
        self.refused(profiler.open[-2].window.stop)

    @rule(profiler=profilers)
    def collect(self, profiler: MProfiler) -> None:
        if profiler.closed:
            self.refused(profiler.profiler.collect)
            return
        spans = self.call(profiler.profiler.collect)
        stopped = sorted(profiler.stopped, key=lambda w: w.seq)
        profiler.stopped.clear()
        got = [(span.name, span.depth) for span in spans]
        expected = [(w.name, w.depth) for w in stopped]
        assert got == expected, (
            f"collect() returned windows {got}; those stopped, in opening order, are {expected}"
        )
        by_seq = {w.seq: span for w, span in zip(stopped, spans, strict=True)}
        for window, span in zip(stopped, spans, strict=True):
            assert span.duration_ns >= 0, f"window {span.name!r} read {span.duration_ns} ns"
            profiler.collected[span.name] = profiler.collected.get(span.name, 0) + 1
            outer = by_seq.get(window.parent) if window.parent is not None else None
            if outer is not None:
                assert span.duration_ns <= outer.duration_ns + NESTING_TOLERANCE_NS, (
                    f"window {span.name!r} read {span.duration_ns} ns inside {outer.name!r}, "
                    f"which read {outer.duration_ns} ns"
                )

    @rule(profiler=profilers)
    def close_profiler(self, profiler: MProfiler) -> None:
        self.call(profiler.profiler.close)  # idempotent
        if not profiler.closed:
            # close() reads back what was stopped and discards what is still open.
            for window in profiler.stopped:
                profiler.collected[window.name] = profiler.collected.get(window.name, 0) + 1
            profiler.stopped.clear()
            profiler.closed = True
        counts = {name: stats.count for name, stats in profiler.profiler.summary().items()}
        assert counts == profiler.collected, (
            f"summary() counts {counts} after close; windows read back: {profiler.collected}"
        )


def _foreign_handles(kit: Kit, request: pytest.FixtureRequest) -> dict[str, Any]:
    """A reached event and a stream of a second backend object, when a factory can make one."""
    try:
        second = request.getfixturevalue("eventapi_second_api")
    except pytest.skip.Exception:
        return {}
    stream = kit.stream(second)
    event = kit.event(second)
    kit.call(second.event_record, event, stream)
    kit.call(second.event_wait, event)
    return {"event": event, "stream": stream}


def _run(machine: type[_Sequences], kit: Kit, examples: int, foreign: dict[str, Any]) -> None:
    callers = _Callers(kit.timeout)
    bound = type(
        machine.__name__,
        (machine,),
        {"kit": kit, "callers": callers, "foreign_handles": foreign},
    )
    try:
        _explore(bound, examples)
    finally:
        callers.close()


def _explore(machine: type[_Sequences], examples: int) -> None:
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=STEPS,
            deadline=None,
            database=None,
            # Shrinking finds the shortest failing sequence; the explain phase, which traces
            # coverage, would multiply the time a failure takes for little a reader needs.
            phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
            report_multiple_bugs=False,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


def test_protocol_call_sequences_match_the_model(
    eventapi_kit: Kit, eventapi_fuzz_examples: int, request: pytest.FixtureRequest
) -> None:
    foreign = _foreign_handles(eventapi_kit, request)
    _run(ProtocolSequences, eventapi_kit, eventapi_fuzz_examples, foreign)


def test_fence_and_window_sequences_match_the_model(
    eventapi_kit: Kit, eventapi_fuzz_examples: int
) -> None:
    _run(FenceProfilerSequences, eventapi_kit, eventapi_fuzz_examples, {})
