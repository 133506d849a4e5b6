"""The handle layer every driver backend is built on (eventapi.driverkit.DriverBackend).

These tests run a small backend of their own on DriverBackend: its "driver" is a log of the
raw calls it received plus gates that make a chosen raw call block until the test opens it.
That is what a real driver does during a long wait, and it lets the tests put a destroy from
another thread exactly inside a call, deterministically, on every hot path the base class has.
"""

from __future__ import annotations

import copy
import gc
import itertools
import logging
import pickle
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, final

import pytest
from interrupts import Trace, interrupting, on_call_of, on_return_of
from threads import JOIN_S, Waiter, release_and_join

from eventapi import (
    CaptureError,
    DriverError,
    EventApi,
    EventStateError,
    SupportsCaptureCheck,
    SupportsEventQuery,
    SupportsHostFunc,
)
from eventapi.driverkit import (
    CaptureCheckMixin,
    DriverBackend,
    DriverCalls,
    Event,
    EventQueryMixin,
    HostFuncMixin,
    LiveHandles,
    Stream,
)


@final
class GatedBackend(EventQueryMixin[int, int], CaptureCheckMixin[int, int], HostFuncMixin[int, int]):
    """Raw handles are integers; every raw call is logged; a gated call blocks until opened."""

    BACKEND = "gated"

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, tuple[int, ...]]] = []
        self.bound_threads: list[int] = []
        self._ids = itertools.count(1)
        self._gates: dict[str, tuple[threading.Event, threading.Event]] = {}

    def gate(self, call: str) -> tuple[threading.Event, threading.Event]:
        """Make the next ``call`` block: returns (entered, release)."""
        entered, release = threading.Event(), threading.Event()
        self._gates[call] = (entered, release)
        return entered, release

    def _log(self, call: str, *handles: int) -> None:
        self.calls.append((call, handles))
        gate = self._gates.pop(call, None)
        if gate is not None:
            entered, release = gate
            entered.set()
            assert release.wait(JOIN_S), f"the test never released {call}"

    def raw_calls(self, call: str) -> list[tuple[int, ...]]:
        return [handles for name, handles in self.calls if name == call]

    def _bind_thread(self) -> None:
        self.bound_threads.append(threading.get_ident())

    def _adopt_stream(self, stream: object) -> int | None:
        return stream if type(stream) is int and stream >= 0 else None

    def _raw_event_create(self) -> int:
        return next(self._ids)

    def _raw_event_destroy(self, event: int) -> None:
        self._log("event_destroy", event)

    def _raw_event_record(self, event: int, stream: int) -> None:
        self._log("event_record", event, stream)

    def _raw_event_wait(self, event: int) -> None:
        self._log("event_wait", event)

    def _raw_event_query(self, event: int) -> bool:
        self._log("event_query", event)
        return True

    def _raw_event_elapsed_ns(self, start: int, end: int) -> int:
        self._log("event_elapsed", start, end)
        return end - start - 10  # negative for adjacent handles: the base must clamp

    def _raw_stream_wait_event(self, stream: int, event: int) -> None:
        self._log("stream_wait_event", stream, event)

    def _raw_stream_synchronize(self, stream: int) -> None:
        self._log("stream_synchronize", stream)

    def _raw_stream_create_non_blocking(self) -> int:
        return 1000 + next(self._ids)

    def _raw_stream_destroy(self, stream: int) -> None:
        self._log("stream_destroy", stream)

    def _raw_stream_is_capturing(self, stream: int) -> bool:
        self._log("stream_is_capturing", stream)
        return False

    def _raw_launch_host_func(self, stream: int, fn: Callable[[], object]) -> None:
        self._log("launch_host_func", stream)
        fn()


@pytest.fixture
def api() -> Iterator[GatedBackend]:
    backend = GatedBackend()
    yield backend
    assert backend.live_handles() == (0, 0), "the test leaked handles"


def recorded(api: GatedBackend, stream: Stream[int]) -> Event[int]:
    event = api.event_create()
    api.event_record(event, stream)
    return event


# -- deferred destroy: never under a call in flight ---------------------------------------------

TWO_HANDLE_CALLS: dict[str, Callable[[GatedBackend, Event[int], Stream[int]], object]] = {
    "event_record": lambda api, event, stream: api.event_record(event, stream),
    "stream_wait_event": lambda api, event, stream: api.stream_wait_event(stream, event),
}


@pytest.mark.parametrize("call", sorted(TWO_HANDLE_CALLS))
def test_an_event_destroyed_during_a_call_is_destroyed_when_the_call_returns(
    api: GatedBackend, call: str
) -> None:
    stream = api.stream_create_non_blocking()
    event = recorded(api, stream)
    raw = event._raw  # the wrapper gives its driver handle up as the driver destroys it
    entered, release = api.gate(call)
    waiter = Waiter(lambda: TWO_HANDLE_CALLS[call](api, event, stream))
    assert entered.wait(JOIN_S)

    api.event_destroy(event)  # returns at once; the driver must not see it yet
    assert event.closed
    assert api.raw_calls("event_destroy") == []
    release_and_join(release, [waiter])

    assert api.raw_calls("event_destroy") == [(raw,)]
    given_up: object = event._raw
    assert given_up is None
    api.stream_destroy(stream)


def test_a_stream_destroyed_during_a_record_waits_for_it(api: GatedBackend) -> None:
    stream = api.stream_create_non_blocking()
    raw = stream.raw
    event = api.event_create()
    entered, release = api.gate("event_record")
    waiter = Waiter(lambda: api.event_record(event, stream))
    assert entered.wait(JOIN_S)

    api.stream_destroy(stream)
    assert api.raw_calls("stream_destroy") == []
    release_and_join(release, [waiter])

    assert api.raw_calls("stream_destroy") == [(raw,)]
    api.event_destroy(event)


def test_elapsed_with_both_events_destroyed_destroys_each_once(api: GatedBackend) -> None:
    stream = api.stream_create_non_blocking()
    start, end = recorded(api, stream), recorded(api, stream)
    raws = [(start._raw,), (end._raw,)]
    entered, release = api.gate("event_elapsed")
    waiter = Waiter(lambda: api.event_elapsed(start, end))
    assert entered.wait(JOIN_S)

    api.event_destroy(start)
    api.event_destroy(end)
    api.event_destroy(end)  # a second destroy of a closed handle is a no-op
    assert api.raw_calls("event_destroy") == []
    release_and_join(release, [waiter])

    assert sorted(api.raw_calls("event_destroy")) == sorted(raws)
    api.stream_destroy(stream)


def test_concurrent_waiters_defer_the_destroy_to_the_last_one_out(api: GatedBackend) -> None:
    stream = api.stream_create_non_blocking()
    event = recorded(api, stream)
    raw = event._raw
    first_in, first_release = api.gate("event_wait")
    first = Waiter(lambda: api.event_wait(event))
    assert first_in.wait(JOIN_S)
    second_in, second_release = api.gate("event_wait")
    second = Waiter(lambda: api.event_wait(event))
    assert second_in.wait(JOIN_S)

    api.event_destroy(event)
    release_and_join(first_release, [first])
    assert api.raw_calls("event_destroy") == [], "destroyed while a second waiter was inside"
    release_and_join(second_release, [second])

    assert api.raw_calls("event_destroy") == [(raw,)]
    api.stream_destroy(stream)


# -- refusals before the driver ------------------------------------------------------------------


def test_closed_foreign_and_never_recorded_handles_never_reach_the_driver(
    api: GatedBackend,
) -> None:
    other = GatedBackend()
    stream = api.stream_create_non_blocking()
    fresh = api.event_create()
    closed = recorded(api, stream)
    api.event_destroy(closed)
    foreign = other.event_create()
    other.event_record(foreign, other.stream_create_non_blocking())
    before = list(api.calls)

    with pytest.raises(EventStateError, match=r"never recorded.*event_record"):
        api.event_wait(fresh)
    with pytest.raises(EventStateError, match="already destroyed"):
        api.event_wait(closed)
    with pytest.raises(EventStateError, match="already destroyed"):
        api.event_record(closed, stream)
    with pytest.raises(EventStateError, match="not an event of this gated backend object"):
        api.event_wait(foreign)
    with pytest.raises(EventStateError, match="not a stream this backend can use"):
        api.event_record(fresh, "not a stream")
    with pytest.raises(EventStateError, match="never recorded"):
        api.event_elapsed(fresh, fresh)

    assert api.calls == before
    api.event_destroy(fresh)
    api.stream_destroy(stream)
    other.event_destroy(foreign)
    del foreign
    gc.collect()


def test_an_adopted_stream_is_used_but_never_destroyed(api: GatedBackend) -> None:
    event = api.event_create()
    api.event_record(event, 7)  # a raw handle, adopted for the call
    adopted = api.adopt_stream(7)
    api.event_record(event, adopted)

    assert api.raw_calls("event_record") == [(event._raw, 7), (event._raw, 7)]
    assert not adopted.owned
    with pytest.raises(EventStateError, match="did not create it"):
        api.stream_destroy(adopted)
    del adopted
    gc.collect()
    assert api.raw_calls("stream_destroy") == []
    api.event_destroy(event)


def test_negative_readings_are_clamped(api: GatedBackend) -> None:
    stream = api.stream_create_non_blocking()
    start, end = recorded(api, stream), recorded(api, stream)
    assert api.event_elapsed(start, end) == 0  # the raw reading is end - start - 10 < 0
    api.event_destroy(start)
    api.event_destroy(end)
    api.stream_destroy(stream)


# -- threads and the safety net ------------------------------------------------------------------


def test_each_thread_is_bound_once_before_its_first_driver_call(api: GatedBackend) -> None:
    stream = api.stream_create_non_blocking()
    event = recorded(api, stream)
    api.event_wait(event)

    def wait_and_query() -> None:
        api.event_wait(event)
        api.event_query(event)

    waiter = Waiter(wait_and_query)
    waiter.result()

    assert api.bound_threads == [threading.get_ident(), waiter.thread.ident]
    api.event_destroy(event)
    api.stream_destroy(stream)


def test_dropped_handles_are_destroyed_by_the_collector(api: GatedBackend) -> None:
    def make() -> tuple[Any, Any]:
        stream = api.stream_create_non_blocking()
        return api.event_create(), stream

    event, stream = make()
    raw_event, raw_stream = event._raw, stream.raw
    del event, stream
    gc.collect()

    assert api.live_handles() == (0, 0)
    assert api.raw_calls("event_destroy") == [(raw_event,)]
    assert api.raw_calls("stream_destroy") == [(raw_stream,)]


# -- capabilities: opt-in, one class each -------------------------------------------------------


@final
class RequiredOnly(DriverBackend[int, int]):
    """The required raw calls and nothing else: a driver without query, capture or host funcs."""

    BACKEND = "required-only"

    def __init__(self, device: int | None = None) -> None:
        super().__init__()
        self.device = device
        self._ids = itertools.count(1)
        self._stamps: dict[int, int] = {}

    def _shares_handles_with(self, other: DriverBackend[Any, Any]) -> bool:
        # Devices of one "driver": sibling objects are those of another device index.
        return type(other) is RequiredOnly and other.device != self.device

    def _raw_event_create(self) -> int:
        return next(self._ids)

    def _raw_event_destroy(self, event: int) -> None:
        self._stamps.pop(event, None)

    def _raw_event_record(self, event: int, stream: int) -> None:
        self._stamps[event] = next(self._ids)

    def _raw_event_wait(self, event: int) -> None:
        pass

    def _raw_event_elapsed_ns(self, start: int, end: int) -> int:
        return self._stamps[end] - self._stamps[start]

    def _raw_stream_wait_event(self, stream: int, event: int) -> None:
        pass

    def _raw_stream_synchronize(self, stream: int) -> None:
        pass

    def _raw_stream_create_non_blocking(self) -> int:
        return 1000 + next(self._ids)

    def _raw_stream_destroy(self, stream: int) -> None:
        pass


def test_a_backend_has_exactly_the_capabilities_it_opts_into(api: GatedBackend) -> None:
    bare = RequiredOnly()
    _protocol: EventApi[Event[int], Stream[int]] = bare  # mypy proves the protocol
    for capability in (SupportsEventQuery, SupportsCaptureCheck, SupportsHostFunc):
        assert not isinstance(bare, capability), capability
        assert isinstance(api, capability), capability
    stream = bare.stream_create_non_blocking()
    start, end = bare.event_create(), bare.event_create()
    bare.event_record(start, stream)
    bare.event_record(end, stream)
    bare.event_wait(end)
    assert bare.event_elapsed(start, end) == 1
    for handle in (start, end):
        bare.event_destroy(handle)
    bare.stream_destroy(stream)
    assert bare.live_handles() == (0, 0)


def test_a_host_function_is_refused_on_a_capturing_stream_when_the_backend_can_tell() -> None:
    @final
    class Capturing(GatedBackend):  # type: ignore[misc]
        def _raw_stream_is_capturing(self, stream: int) -> bool:
            self._log("stream_is_capturing", stream)
            return True

    api = Capturing()
    stream = api.stream_create_non_blocking()
    with pytest.raises(CaptureError, match="capturing a graph"):
        api.stream_launch_host_func(stream, lambda: None)
    assert api.raw_calls("launch_host_func") == []
    api.stream_destroy(stream)
    assert api.live_handles() == (0, 0)


# -- what the object holds for its handles' sake -------------------------------------------------


def test_the_last_handle_gone_hook_runs_once_after_the_object_and_every_handle_it_made() -> None:
    done: list[str] = []

    @final
    class Holding(GatedBackend):  # type: ignore[misc]
        held: list[object]

        def _raw_event_destroy(self, event: int) -> None:
            done.append("event_destroy")

        def _last_handle_gone(self) -> None:
            done.append("last_handle_gone")

    api = Holding()
    del api
    gc.collect()
    assert done == ["last_handle_gone"]  # no handle: when the object goes
    done.clear()

    # In a reference cycle with a handle of its own, the collector finalizes the two in no set
    # order: the hook runs after the handle's destroy either way, once.
    api = Holding()
    api.held = [api.event_create()]
    del api
    gc.collect()
    assert done == ["event_destroy", "last_handle_gone"]


def test_once_the_context_is_lost_destroys_skip_the_driver_and_it_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    @final
    class Losing(GatedBackend):  # type: ignore[misc]
        lost: DriverError | None = None

        def _context_lost(self) -> DriverError | None:
            return self.lost

    api = Losing()
    stream = api.stream_create_non_blocking()
    events = [api.event_create() for _ in range(3)]
    api.lost = DriverError("gated", "event_record", 700, "ILLEGAL_ADDRESS", "illegal address")
    with caplog.at_level(logging.ERROR, logger="eventapi"):
        for event in events:
            api.event_destroy(event)
        api.stream_destroy(stream)
    assert api.raw_calls("event_destroy") == api.raw_calls("stream_destroy") == []
    assert api.live_handles() == (0, 0)
    [record] = [r for r in caplog.records if r.name == "eventapi"]
    assert "the device context is lost" in record.getMessage()


# -- one owner per handle: no copies, no pickles ------------------------------------------------


COPIES: dict[str, Callable[[object], object]] = {
    "copy": copy.copy,
    "deepcopy": copy.deepcopy,
    "pickle": pickle.dumps,
}


@pytest.mark.parametrize("how", sorted(COPIES))
def test_a_handle_cannot_be_copied_into_a_second_owner(
    api: GatedBackend, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    unraisable: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    stream = api.stream_create_non_blocking()
    event = recorded(api, stream)
    for handle in (event, stream):
        with pytest.raises(TypeError, match=r"cannot be (copied|pickled)"):
            COPIES[how](handle)
    gc.collect()
    assert unraisable == []  # no half-built copy whose finalizer complained
    assert api.live_handles() == (1, 1)
    api.event_destroy(event)
    api.stream_destroy(stream)
    assert len(api.raw_calls("event_destroy")) == 1  # the one owner destroyed it, once
    assert len(api.raw_calls("stream_destroy")) == 1


# -- a destroy that fails ----------------------------------------------------------------------


def test_a_failed_destroy_leaves_the_handle_closed_and_uncounted() -> None:
    @final
    class FailingDestroy(GatedBackend):  # type: ignore[misc]
        def _raw_event_destroy(self, event: int) -> None:
            super()._raw_event_destroy(event)
            raise DriverError("gated", "event_destroy", 1, "FAILED", "refused")

    api = FailingDestroy()
    event = api.event_create()
    with pytest.raises(DriverError):
        api.event_destroy(event)
    assert event.closed
    assert api.live_handles() == (0, 0)
    api.event_destroy(event)  # a second destroy is a no-op: the driver is not asked again
    assert len(api.raw_calls("event_destroy")) == 1


# -- Ctrl-C inside a create ---------------------------------------------------------------------


@pytest.mark.parametrize("where", ["raw-create", "wrapper"])
@pytest.mark.parametrize("kind", ["event", "stream"])
def test_an_interrupt_inside_a_create_leaves_the_counts_exact(
    api: GatedBackend, kind: str, where: str
) -> None:
    # An interrupt as the raw call returns (the handle itself is lost then, as docs/errors.md
    # says), or as the wrapper is built around it: no count may be left behind either way.
    create: Callable[[], object]
    if kind == "event":
        create = api.event_create
        codes = GatedBackend._raw_event_create.__code__, Event.__init__.__code__
    else:
        create = api.stream_create_non_blocking
        codes = GatedBackend._raw_stream_create_non_blocking.__code__, Stream.__init__.__code__
    with (
        pytest.raises(KeyboardInterrupt),
        interrupting(on_return_of(codes[0] if where == "raw-create" else codes[1])),
    ):
        create()
    gc.collect()
    assert api.live_handles() == (0, 0)


# -- an interrupt between a call's count and its way out ------------------------------------------
#
# A call counts the handles it uses in (so that a destroy meanwhile is deferred to it) and out;
# an interrupt can land between the count and the try that would count it out, or between the
# count out and the destroy owed to it. The call's frame is gone then, so no call is in flight
# when the handle is dropped: its finalizer destroys what is owed.


def test_an_interrupt_after_a_call_counted_its_event_in_leaves_the_destroy_to_the_finalizer(
    api: GatedBackend,
) -> None:
    stream = api.stream_create_non_blocking()
    event = recorded(api, stream)
    raw = event._raw
    with (
        pytest.raises(KeyboardInterrupt),
        interrupting(on_return_of(DriverBackend._holding.__code__)),
    ):
        api.event_wait(event)
    api.event_destroy(event)  # deferred to a call that will never leave
    assert api.raw_calls("event_destroy") == []
    del event
    gc.collect()
    assert api.raw_calls("event_destroy") == [(raw,)]
    assert api.live_handles() == (0, 1)
    api.stream_destroy(stream)


class Interrupted(NamedTuple):
    """What :func:`_interrupt_a_deferred_destroy` saw."""

    raw: int  # the event's driver handle
    stream: Stream[int]  # its stream, still to destroy
    destroyed: list[tuple[int, ...]]  # raw destroys before the event was dropped
    live: LiveHandles  # before the event was dropped


def _interrupt_a_deferred_destroy(api: GatedBackend, trace: Trace) -> Interrupted:
    """A wait holds an event destroyed meanwhile, and its way out is interrupted at ``trace``;
    then the event is dropped and collected."""
    stream = api.stream_create_non_blocking()
    event = recorded(api, stream)
    raw = event._raw
    entered, release = api.gate("event_wait")
    held = [event]  # the waiter's only reference, dropped with it

    def wait_interrupted_on_the_way_out() -> None:
        with interrupting(trace):
            api.event_wait(held[0])

    waiter = Waiter(wait_interrupted_on_the_way_out)
    assert entered.wait(JOIN_S)
    api.event_destroy(event)  # deferred to the waiter
    release.set()
    with pytest.raises(KeyboardInterrupt):
        waiter.result()
    seen = Interrupted(raw, stream, api.raw_calls("event_destroy"), api.live_handles())
    waiter.error = None  # its traceback holds the event
    held.clear()
    del event, waiter
    gc.collect()
    return seen


def test_an_interrupt_as_the_last_leave_hands_over_its_deferred_destroy_leaves_it_to_the_finalizer(
    api: GatedBackend,
) -> None:
    # The last call out has claimed the destroy and counted the event gone; the release that
    # follows is interrupted before it begins.
    seen = _interrupt_a_deferred_destroy(api, on_call_of(DriverBackend._collect.__code__))
    assert seen.destroyed == []
    assert api.raw_calls("event_destroy") == [(seen.raw,)]
    assert api.live_handles() == (0, 1)
    api.stream_destroy(seen.stream)


def test_an_interrupt_after_a_deferred_destroy_counted_its_handle_gone_leaves_it_to_the_finalizer(
    api: GatedBackend,
) -> None:
    # Between the count out and the driver's destroy: the wrapper still holds its driver
    # handle, and its finalizer destroys it, once.
    trace = on_call_of(DriverBackend._release_counted_gone.__code__)
    seen = _interrupt_a_deferred_destroy(api, trace)
    assert seen.live == (0, 1)
    assert seen.destroyed == []
    assert api.raw_calls("event_destroy") == [(seen.raw,)]
    api.stream_destroy(seen.stream)


# -- an interrupt inside a destroy -----------------------------------------------------------------
#
# A destroy counts its handle gone, then calls the driver, some bytecodes later. The wrapper
# keeps its driver handle until right before the driver's destroy, so an interrupt in the steps
# before leaves the handle to the wrapper's finalizer, which destroys it once.

_DESTROY_STEPS = {"event": "event_destroy", "stream": "stream_destroy"}


@pytest.mark.parametrize("step", ["_release_counted_gone", "_context_lost"])
@pytest.mark.parametrize("kind", sorted(_DESTROY_STEPS))
def test_an_interrupt_in_a_destroy_before_the_driver_call_leaves_the_handle_to_the_finalizer(
    api: GatedBackend, kind: str, step: str
) -> None:
    call = _DESTROY_STEPS[kind]
    handle: Event[int] | Stream[int] = (
        api.event_create() if kind == "event" else api.stream_create_non_blocking()
    )
    raw = handle._raw
    code = getattr(DriverBackend, step).__code__
    with pytest.raises(KeyboardInterrupt), interrupting(on_call_of(code)):
        getattr(api, call)(handle)
    assert handle.closed
    assert api.live_handles() == (0, 0)  # counted gone in the destroy's first step
    assert api.raw_calls(call) == []
    getattr(api, call)(handle)  # a second destroy is a no-op: the destroy is claimed
    assert api.raw_calls(call) == []
    del handle
    gc.collect()  # the interrupt's traceback held the frames that held the handle
    assert api.raw_calls(call) == [(raw,)]
    assert api.live_handles() == (0, 0)


# -- sibling devices ------------------------------------------------------------------------------


def test_a_sibling_devices_event_is_used_only_where_the_driver_allows() -> None:
    zero, one, zero_again = RequiredOnly(0), RequiredOnly(1), RequiredOnly(0)
    stream0, stream1 = zero.stream_create_non_blocking(), one.stream_create_non_blocking()
    event1 = one.event_create()
    one.event_record(event1, stream1)
    event0 = zero.event_create()
    zero.event_record(event0, stream0)

    zero.stream_wait_event(stream0, event1)  # a stream waits on another device's event
    zero.event_wait(event1)  # and a host thread waits on any device's event
    refused: dict[str, Callable[[], object]] = {
        "event_record": lambda: zero.event_record(event1, stream0),
        "event_elapsed": lambda: zero.event_elapsed(event0, event1),
        "event_destroy": lambda: zero.event_destroy(event1),
        "stream_synchronize": lambda: zero.stream_synchronize(stream1),
    }
    for call, action in refused.items():
        with pytest.raises(EventStateError, match="another device") as info:
            action()
        assert call in str(info.value)
    # An object of the same device owns its handles: its sibling's are foreign.
    with pytest.raises(EventStateError, match="not an event of this"):
        zero_again.event_wait(event0)
    own = zero_again.stream_create_non_blocking()
    with pytest.raises(EventStateError, match="not an event of this"):
        zero_again.stream_wait_event(own, event0)
    zero_again.stream_destroy(own)

    one.event_destroy(event1)
    with pytest.raises(EventStateError, match="already destroyed"):
        zero.event_wait(event1)
    zero.event_destroy(event0)
    zero.stream_destroy(stream0)
    one.stream_destroy(stream1)
    assert zero.live_handles() == one.live_handles() == (0, 0)


# -- the fast path (SupportsFastPath): the object's own handles, checked once -------------------


def test_the_fast_path_takes_the_objects_own_handles_and_refuses_every_other(
    api: GatedBackend,
) -> None:
    other = GatedBackend()
    stream = api.stream_create_non_blocking()
    theirs_stream = other.stream_create_non_blocking()
    event, theirs, fresh = api.event_create(), other.event_create(), api.event_create()
    assert api.event_record_unless_capturing(event, stream) is True
    assert event.recorded
    assert api.raw_calls("event_record") == [(event._raw, stream.raw)]
    other.event_record(theirs, theirs_stream)

    for bad_event, bad_stream in ((theirs, stream), (event, theirs_stream), (event, 7)):
        with pytest.raises(EventStateError, match=r"not (an event|a stream) of this"):
            api.event_record_unless_capturing(bad_event, bad_stream)
    with pytest.raises(EventStateError, match="not a stream of this"):
        api.event_record_new(theirs_stream)
    for starts, ends in (([event], [theirs]), ([fresh], [event]), ([event, theirs], [event] * 2)):
        with pytest.raises(EventStateError):
            api.event_elapsed_many(starts, ends)
    with pytest.raises(ValueError, match="2 starts but 1 ends"):
        api.event_elapsed_many([event, event], [event])
    assert len(api.raw_calls("event_record")) == 1  # none of the refused reached the driver
    assert api.raw_calls("event_elapsed") == []
    assert api.event_elapsed_many([event], [event]) == [0]  # negative readings clamped
    assert api.event_elapsed_many([], []) == []
    # Each start's reading pairs with its own end, in the order given (this backend reads
    # end - start - 10; handles are numbered in creation order).
    early = api.event_create()
    spacers = [api.event_create() for _ in range(20)]
    late = api.event_create()
    for held in (early, late):
        api.event_record(held, stream)
    assert api.event_elapsed_many([early, event], [late, late]) == [
        late._raw - early._raw - 10,
        late._raw - event._raw - 10,
    ]
    assert api.raw_calls("event_elapsed")[-2:] == [(early._raw, late._raw), (event._raw, late._raw)]
    # The same readings as the plain call makes, one pair at a time.
    assert [api.event_elapsed(early, late), api.event_elapsed(event, late)] == (
        api.event_elapsed_many([early, event], [late, late])
    )
    for handle in (*spacers, early, late, event, fresh):
        api.event_destroy(handle)
    other.event_destroy(theirs)
    other.stream_destroy(theirs_stream)
    api.stream_destroy(stream)
    assert other.live_handles() == (0, 0)


def test_the_fast_path_refuses_destroyed_handles_before_the_driver(api: GatedBackend) -> None:
    stream = api.stream_create_non_blocking()
    event = recorded(api, stream)
    api.event_destroy(event)
    with pytest.raises(EventStateError, match="already destroyed"):
        api.event_record_unless_capturing(event, stream)
    with pytest.raises(EventStateError, match="already destroyed"):
        api.event_elapsed_many([event], [event])
    api.stream_destroy(stream)
    live = api.event_create()
    for call in (
        lambda: api.event_record_unless_capturing(live, stream),
        lambda: api.event_record_new(stream),
        lambda: api.adopt_stream(stream),
    ):
        with pytest.raises(EventStateError, match="already destroyed"):
            call()
    assert len(api.raw_calls("event_record")) == 1  # the one record made before the destroys
    assert api.raw_calls("stream_is_capturing") == []
    api.event_destroy(live)


def test_a_record_waits_for_nothing_and_a_destroy_meanwhile_waits_for_it(
    api: GatedBackend,
) -> None:
    # The fused record holds the object's lock across the driver call instead of counting the
    # handles in and out: a destroy from another thread meanwhile takes effect after it.
    stream = api.stream_create_non_blocking()
    event = api.event_create()
    raw = event._raw
    entered, release = api.gate("event_record")
    recorder = Waiter(lambda: api.event_record_unless_capturing(event, stream))
    assert entered.wait(JOIN_S)
    destroyer = Waiter(lambda: api.event_destroy(event))
    # A negative check, so bounded by time: a destroy that did not wait would return at once.
    destroyer.thread.join(0.2)
    assert destroyer.thread.is_alive()
    assert api.raw_calls("event_destroy") == []  # not under the record
    release_and_join(release, [recorder, destroyer])
    assert recorder.value is True
    assert api.raw_calls("event_destroy") == [(raw,)]
    api.stream_destroy(stream)


def test_the_fast_path_records_unless_the_stream_is_capturing() -> None:
    from eventapi.host import HostBackend

    host = HostBackend()
    stream = host.stream_create_non_blocking()
    event = host.event_create()
    host.begin_capture(stream)
    assert host.event_record_unless_capturing(event, stream) is False
    assert not event.recorded  # nothing was recorded into the capture
    assert host.event_record_new(stream) is None
    assert host.live_handles().events == 1  # event_record_new created nothing
    host.end_capture(stream)
    assert host.event_record_unless_capturing(event, stream) is True
    host.event_wait(event)
    fresh = host.event_record_new(stream)
    assert fresh is not None
    assert fresh.recorded
    host.event_destroy(fresh)
    host.event_destroy(event)
    host.stream_destroy(stream)
    assert host.live_handles() == (0, 0)


# -- DriverCalls: a binding's calls, checked --------------------------------------------------


def _driver_calls() -> DriverCalls:
    return DriverCalls(
        "toy",
        describe=lambda status: (f"TOY_ERROR_{int(status)}", f"toy failure {int(status)}"),
        not_ready=600,
        missing=34,
        missing_hint="install the toy driver",
        sticky=(700,),
    )


def test_a_call_returns_what_follows_the_status_and_raises_the_drivers_error() -> None:
    calls = _driver_calls()
    assert calls(lambda: (0,)) is None
    assert calls(lambda handle: (0, handle * 2), 21) == 42
    assert calls(lambda: (0, 1, 2)) == (1, 2)

    def elapsed(start: int, end: int) -> tuple[int, float]:
        return (400 if end == 99 else 0), float(end - start)

    with pytest.raises(DriverError) as caught:
        calls(elapsed, 2, 99)
    assert (caught.value.call, caught.value.code, caught.value.name) == (
        "elapsed",
        400,
        "TOY_ERROR_400",
    )
    assert not caught.value.not_ready
    assert calls.ready(lambda: (0,)) is True
    assert calls.ready(lambda: (600,)) is False
    with pytest.raises(DriverError, match="toy failure 400"):
        calls.ready(lambda: (400,))


def test_a_call_fails_fast_once_the_context_is_lost_and_names_an_unreachable_driver() -> None:
    calls = _driver_calls()
    made: list[int] = []

    def poisoned(start: int, end: int) -> tuple[int, float]:
        made.append(start)
        return 700, 0.0

    with pytest.raises(DriverError, match="restart the process"):
        calls(poisoned, 1, 3)
    assert calls.lost is not None
    assert made == [1]
    with pytest.raises(DriverError, match="lost earlier") as again:
        calls(poisoned, 5, 6)
    assert again.value.call == "poisoned"
    with pytest.raises(DriverError, match="lost earlier"):
        calls.ready(poisoned, 5, 6)
    assert made == [1]  # not called again

    def missing(start: int, end: int) -> tuple[int, float]:
        raise RuntimeError("Function cuEventElapsedTime not found")

    with pytest.raises(DriverError, match="install the toy driver") as caught:
        _driver_calls()(missing, 1, 2)
    assert (caught.value.call, caught.value.code) == ("missing", 34)
