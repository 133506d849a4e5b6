"""``eventapi check``: prove on a live backend that fences and profiling windows behave.

Each backend gets the same checks, in this order:

``fence_cross_thread``
    A fence recorded on this thread behind work held by a host function is waited on from
    another thread, and that wait returns only after the work ran.
``stream_dependency``
    Stream B waits on a fence of stream A while A is held by a host function; B's own fence is
    not reached before A is released, and B's work runs after A's (needs ``SupportsHostFunc``).
``window_delay``
    Profiler windows around a host function that sleeps 20 ms read what it slept: each reading
    at least the sleep as the host function timed it, less the timer's resolution (0.1 ms),
    and the median reading at most 5 ms above that sleep (what a backend adds around a host
    function: its dispatch). The bound is on what the function measured, not on the 20 ms it
    asked for: a loaded machine wakes a sleeping thread late, by more than 5 ms beside two
    busy processes on two cores, and that lateness is the sleep's, not the profiler's.
``anchor``
    The anchor's uncertainty, at most 1 ms, and every span placed inside the host interval
    that recorded and collected it (widened by that uncertainty and the timer's resolution).
``overhead_*``
    Host-side cost per call in microseconds over many iterations: ``event_record``,
    ``event_query``, a fence's record + wait + close, a window's open + stop.
``handles``
    The backend's live handle count is back where it started (when it counts them).

:func:`run_check` is the command-line job; :func:`check_backend` runs the checks on one
backend object. Printing the results and writing the trace are :mod:`eventapi._cli._report`'s.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from typing import Any, Final, NamedTuple, final

from .._fence import EventFence
from .._profiling._profiler import EventProfiler
from .._protocol import EventApi, SupportsEventQuery, SupportsHostFunc

__all__ = [
    "ANCHOR_LIMIT_NS",
    "DELAY_NS",
    "DELAY_OVER_NS",
    "DELAY_UNDER_NS",
    "RESOLUTION_NS",
    "BackendReport",
    "CheckResult",
    "check_backend",
]

PASS: Final = "PASS"
FAIL: Final = "FAIL"
SKIP: Final = "SKIP"

DELAY_NS: Final = 20_000_000
"""The known delay a host function puts on the stream."""
DELAY_UNDER_NS: Final = 100_000
"""How far below the measured sleep a reading may fall: timer resolution, not scheduling."""
DELAY_OVER_NS: Final = 5_000_000
"""How far above the measured sleep the median reading may lie: the host function's dispatch,
tens of microseconds on a healthy backend."""
ANCHOR_LIMIT_NS: Final = 1_000_000
"""The largest acceptable anchor uncertainty; a healthy backend is tens of microseconds."""
RESOLUTION_NS: Final = 2_000
"""Slack for the device timer in a placement: 1 µs (HIP's step; CUDA's is 0.5 µs) per reading."""
ITERATIONS: Final = 200
"""Calls timed per overhead figure."""
WAIT_S: Final = 10.0
"""How long a check waits for a backend before calling it hung."""

_Outcome = tuple[str, str, dict[str, float]]
"""What a check found: its result, the table's detail and the measured values."""


@final
class CheckResult(NamedTuple):
    """One row of the check table. ``result`` is ``"PASS"``, ``"FAIL"`` or ``"SKIP"``.

    ``values`` holds the measured numbers by name, with the unit in the name (``"us"``,
    ``"ms"``), for ``--json`` readers.
    """

    backend: str
    check: str
    result: str
    detail: str
    values: Mapping[str, float]


@final
class BackendReport(NamedTuple):
    """Every check of one backend, and the (closed) profilers whose windows its checks read."""

    backend: str
    results: tuple[CheckResult, ...]
    profilers: tuple[EventProfiler[Any, Any], ...] = ()

    @property
    def failed(self) -> bool:
        """True when any check failed."""
        return any(r.result == FAIL for r in self.results)


class _CheckError(Exception):
    """A check found the backend misbehaving; the message is the table's detail."""


def check_backend(
    api: EventApi[Any, Any], *, name: str | None = None, iterations: int = ITERATIONS
) -> BackendReport:
    """Run every check on ``api``; never raises for a backend failure, reports it.

    ``name`` labels the rows (default ``api.BACKEND``; ``"cuda:1"`` tells devices apart).

    Blocks for about a tenth of a second on a healthy backend. Call it from a thread that may
    create streams on ``api``.
    """
    name = name if name is not None else api.BACKEND
    before = _live_handles(api)
    profilers: list[EventProfiler[Any, Any]] = []
    checks: list[tuple[str, Callable[[], _Outcome]]] = [
        ("fence_cross_thread", lambda: _check_fence(api)),
        ("stream_dependency", lambda: _check_dependency(api)),
        ("window_delay", lambda: _check_window(api, profilers)),
        ("anchor", lambda: _check_anchor(api)),
        *_overheads(api, iterations),
        ("handles", lambda: _check_handles(api, before)),
    ]
    results = tuple(CheckResult(name, check, *_outcome(body)) for check, body in checks)
    return BackendReport(name, results, tuple(profilers))


def _outcome(body: Callable[[], _Outcome]) -> _Outcome:
    """What ``body`` found; a failure it raised is a ``FAIL`` that says what it was."""
    try:
        return body()
    except _CheckError as exc:
        return FAIL, str(exc), {}
    except Exception as exc:
        return FAIL, f"{type(exc).__name__}: {exc}", {}


# -- the checks ---------------------------------------------------------------------------------


def _check_fence(api: EventApi[Any, Any]) -> _Outcome:
    gate = threading.Event()
    ran = threading.Event()
    outcome: dict[str, object] = {}

    def work() -> None:
        gate.wait(WAIT_S)  # bounded, so a failed check never strands the stream's thread
        ran.set()

    def waiter(fence: EventFence[Any, Any]) -> None:
        try:
            fence.wait()
            outcome["after_work"] = ran.is_set()
        except BaseException as exc:
            outcome["error"] = exc

    held = False
    with _own_stream(api) as stream:
        try:
            if isinstance(api, SupportsHostFunc):
                api.stream_launch_host_func(stream, work)
                held = True
            with EventFence.record(api, stream) as fence:
                thread = threading.Thread(
                    target=waiter, args=(fence,), name="eventapi-check-waiter", daemon=True
                )
                thread.start()
                gate.set()
                thread.join(WAIT_S)
        finally:
            gate.set()
    if thread.is_alive():
        raise _CheckError(f"the wait on another thread did not return within {WAIT_S:g} s")
    if "error" in outcome:
        error = outcome["error"]
        raise _CheckError(f"the wait on another thread raised {type(error).__name__}: {error}")
    if held and not outcome["after_work"]:
        raise _CheckError("the wait on another thread returned before the work ahead of it ran")
    how = "after the held work ran" if held else "(no host functions: nothing held)"
    return PASS, f"recorded here, waited on another thread, returned {how}", {}


def _check_dependency(api: EventApi[Any, Any]) -> _Outcome:
    if not isinstance(api, SupportsHostFunc):
        return SKIP, "needs SupportsHostFunc to hold a stream", {}
    gate = threading.Event()
    order: list[str] = []

    def held_a() -> None:
        gate.wait(WAIT_S)  # bounded, so a failed check never strands the stream's thread
        order.append("A")

    with _own_stream(api) as first, _own_stream(api) as second, ExitStack() as fences:
        try:
            api.stream_launch_host_func(first, held_a)
            fence_a = fences.enter_context(EventFence.record(api, first))
            fence_a.wait_on(second)
            api.stream_launch_host_func(second, lambda: order.append("B"))
            fence_b = fences.enter_context(EventFence.record(api, second))
            early = fence_b.reached() if isinstance(api, SupportsEventQuery) else None
            gate.set()
            fence_b.wait()
            if early:
                raise _CheckError("stream B's fence was reached while stream A was still held")
            if order != ["A", "B"]:
                raise _CheckError(f"work ran in the order {order}, expected A before B")
            seen = "not reached while A was held, " if early is False else ""
            return PASS, f"B waited on A's fence on the device: {seen}B ran after A", {}
        finally:
            gate.set()  # before the fences close and the streams drain


def _check_window(
    api: EventApi[Any, Any], profilers_out: list[EventProfiler[Any, Any]]
) -> _Outcome:
    if not isinstance(api, SupportsHostFunc):
        return SKIP, "needs SupportsHostFunc to put a known delay on the stream", {}
    slept: list[int] = []  # each sleep as the host function timed it, in stream order

    def sleep() -> None:
        began = time.perf_counter_ns()
        time.sleep(DELAY_NS / 1e9)
        slept.append(time.perf_counter_ns() - began)

    with EventProfiler(api, label=f"{api.BACKEND} check") as prof:
        with prof.window("known delays"):
            for _ in range(3):
                with prof.window(f"host sleep {DELAY_NS // 1_000_000} ms"):
                    api.stream_launch_host_func(prof.stream, sleep)
        spans = prof.collect()
    profilers_out.append(prof)  # closed: it keeps its spans and anchor for the trace
    readings = [s.duration_ns for s in spans if s.depth == 1]
    if len(slept) != len(readings):
        raise _CheckError(f"{len(readings)} windows read, but the host function ran {len(slept)}")
    median = statistics.median_low(readings)
    over = statistics.median_low(r - s for r, s in zip(readings, slept, strict=True))
    values = {"median_ms": median / 1e6, "min_ms": min(readings) / 1e6, "over_us": over / 1e3}
    detail = f"median {median / 1e6:.3f} ms of 3 over a {DELAY_NS / 1e6:g} ms delay"
    for reading, took in zip(readings, slept, strict=True):
        if reading < took - DELAY_UNDER_NS:
            raise _CheckError(
                f"read {reading / 1e6:.3f} ms over a host function that slept "
                f"{took / 1e6:.3f} ms (at least {(took - DELAY_UNDER_NS) / 1e6:.3f} ms expected)"
            )
    if over > DELAY_OVER_NS:
        raise _CheckError(
            f"{detail}: the median reading is {over / 1e6:.3f} ms above what the host function "
            f"slept, more than {DELAY_OVER_NS / 1e6:g} ms"
        )
    return PASS, f"{detail}, {over / 1e3:.0f} us above what it slept", values


def _check_anchor(api: EventApi[Any, Any]) -> _Outcome:
    with EventProfiler(api) as prof:
        before = time.perf_counter_ns()
        with prof.window("placed"):
            pass
        (span,) = prof.collect()
        after = time.perf_counter_ns()
        u = prof.anchor.uncertainty_ns
    values = {"uncertainty_us": u / 1e3}
    detail = f"uncertainty {u / 1e3:.1f} us"
    if u > ANCHOR_LIMIT_NS:
        raise _CheckError(f"{detail}, more than {ANCHOR_LIMIT_NS / 1e3:g} us")
    slack = u + RESOLUTION_NS
    if not (before - slack <= span.start_ns <= span.end_ns <= after + slack):
        raise _CheckError(
            f"{detail}, but a span was placed at [{span.start_ns}, {span.end_ns}] ns, outside "
            f"the host interval [{before}, {after}] ns that recorded and read it"
        )
    return PASS, f"{detail}; span placed inside the host interval that recorded it", values


def _check_handles(api: EventApi[Any, Any], before: tuple[int, ...] | None) -> _Outcome:
    after = _live_handles(api)
    if before is None or after is None:
        return SKIP, "the backend does not count its live handles", {}
    if after != before:
        raise _CheckError(
            f"live handles {_fmt_handles(before)} before, {_fmt_handles(after)} after"
        )
    return PASS, f"live handles back to {_fmt_handles(before)}", {}


def _overheads(api: EventApi[Any, Any], n: int) -> list[tuple[str, Callable[[], _Outcome]]]:
    def record() -> _Outcome:
        with ExitStack() as done:
            event = api.event_create()
            done.callback(api.event_destroy, event)
            stream = done.enter_context(_own_stream(api))  # drained before the event goes
            t0 = time.perf_counter_ns()
            for _ in range(n):
                api.event_record(event, stream)
            return _per_call(time.perf_counter_ns() - t0, n)

    def query() -> _Outcome:
        if not isinstance(api, SupportsEventQuery):
            return SKIP, "the backend has no event_query", {}
        with ExitStack() as done:
            event = api.event_create()
            done.callback(api.event_destroy, event)
            stream = done.enter_context(_own_stream(api))
            api.event_record(event, stream)
            api.event_wait(event)
            t0 = time.perf_counter_ns()
            for _ in range(n):
                api.event_query(event)
            return _per_call(time.perf_counter_ns() - t0, n)

    def fence() -> _Outcome:
        with _own_stream(api) as stream:
            t0 = time.perf_counter_ns()
            for _ in range(n):
                f = EventFence.record(api, stream)
                f.wait()
                f.close()
            return _per_call(time.perf_counter_ns() - t0, n)

    def window() -> _Outcome:
        with EventProfiler(api) as prof:
            prof.start("warm").stop()  # the pool's first events are created, not timed
            prof.collect()
            total = 0
            for i in range(1, n + 1):
                t0 = time.perf_counter_ns()
                prof.start("w").stop()
                total += time.perf_counter_ns() - t0
                if i % 50 == 0:  # untimed readouts keep the loop on pooled events
                    prof.collect()
            return _per_call(total, n)

    return [
        ("overhead_event_record", record),
        ("overhead_event_query", query),
        ("overhead_fence", fence),
        ("overhead_window", window),
    ]


# -- helpers ------------------------------------------------------------------------------------


def _per_call(total_ns: int, n: int) -> _Outcome:
    us = total_ns / n / 1e3
    return PASS, f"{us:.2f} us per call over {n}", {"us_per_call": us}


@contextmanager
def _own_stream(api: EventApi[Any, Any]) -> Iterator[Any]:
    """A stream for one check, drained and destroyed however the check ends."""
    stream = api.stream_create_non_blocking()
    try:
        yield stream
    finally:
        try:
            api.stream_synchronize(stream)
        finally:
            api.stream_destroy(stream)


def _live_handles(api: object) -> tuple[int, ...] | None:
    counter = getattr(api, "live_handles", None)
    return tuple(counter()) if callable(counter) else None


def _fmt_handles(counts: tuple[int, ...]) -> str:
    return f"{counts[0]} events, {counts[1]} streams" if len(counts) == 2 else str(counts)
