"""A driver fault at every step of every path of the fence, the profiler and ``eventapi check``.

For each path (a sequence of public calls), each protocol or capability method, and each step
of the path, one fault is injected into that method just before the step: on ``host`` with
``inject_fault``, on ``cuda`` and ``hip`` into the driver function the backend calls for it,
through the emulated driver. The path then goes on as a program would: the step that meets the
fault raises ``DriverError`` (the only error a fault may surface as), the program stops using
what failed and closes everything. Whatever the fault hit, afterwards:

* every handle is released: the backend's live counts are back to zero, and so are the emulated
  driver's (less the one handle a faulted destroy leaves in the driver, which nothing can free);
* a fault the path consumed surfaced as ``DriverError``: raised by the call, or, for a destroy
  in ``close()``, logged on the ``eventapi`` logger (a close never raises it);
* ``eventapi check`` never raises: it reports the fault in a failed row (a destroy's fault is
  logged instead, as everywhere), and its own leak row still passes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import pytest
from emulated_driver import DriverName, EmulatedDriver, load

import eventapi
from eventapi import DriverError, EventFence, EventProfiler, Window
from eventapi._cli._check import check_backend
from eventapi._protocol import CAPABILITY_METHODS, PROTOCOL_METHODS
from eventapi.host import HostBackend

# Every method a backend may have, read off the protocols (eventapi._protocol).
METHODS: Final = (*PROTOCOL_METHODS, *CAPABILITY_METHODS)

# The driver function each backend calls for a protocol method.
DRIVER_CALLS: Final[dict[DriverName, dict[str, str]]] = {
    "cuda": {
        "event_create": "cuEventCreate",
        "event_destroy": "cuEventDestroy",
        "event_record": "cuEventRecord",
        "event_wait": "cuEventSynchronize",
        "event_elapsed": "cuEventElapsedTime",
        "stream_wait_event": "cuStreamWaitEvent",
        "stream_synchronize": "cuStreamSynchronize",
        "stream_create_non_blocking": "cuStreamCreate",
        "stream_destroy": "cuStreamDestroy",
        "event_query": "cuEventQuery",
        "stream_is_capturing": "cuStreamIsCapturing",
        "stream_launch_host_func": "cuLaunchHostFunc",
    },
    "hip": {
        "event_create": "hipEventCreateWithFlags",
        "event_destroy": "hipEventDestroy",
        "event_record": "hipEventRecord",
        "event_wait": "hipEventSynchronize",
        "event_elapsed": "hipEventElapsedTime",
        "stream_wait_event": "hipStreamWaitEvent",
        "stream_synchronize": "hipStreamSynchronize",
        "stream_create_non_blocking": "hipStreamCreateWithFlags",
        "stream_destroy": "hipStreamDestroy",
        "event_query": "hipEventQuery",
        "stream_is_capturing": "hipStreamIsCapturing",
        "stream_launch_host_func": "hipLaunchHostFunc",
    },
}

# Out of memory: the same number in both drivers, and an error that does not poison a device,
# so one fault stays one failed call.
FAULT_CODE: Final = 2

CHECK_ITERATIONS: Final = 5  # the overhead rows' loop: a few calls exercise the same paths


# -- where the fault goes ---------------------------------------------------------------------


@dataclass
class Target:
    """A backend object and how to put one fault into one of its methods."""

    name: str
    api: Any
    inject: Callable[[str], None]
    calls: Callable[[str], int] | None  # driver calls of a method so far, where countable
    driver_handles: Callable[[], tuple[int, int]] | None  # the emulated driver's live counts


@pytest.fixture(params=["host", "cuda", "hip"])
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    name: str = request.param
    if name == "host":
        api = HostBackend()
        yield Target(name, api, api.inject_fault, None, None)
        return
    kind: DriverName = "cuda" if name == "cuda" else "hip"
    emu: EmulatedDriver = load(kind)
    functions = DRIVER_CALLS[kind]
    backend: Any = eventapi.backend(kind)
    assert backend.live_handles() == (0, 0)

    def driver_handles() -> tuple[int, int]:
        live = emu.live_handles()
        return live.events, live.streams

    try:
        yield Target(
            name,
            backend,
            lambda method: emu.inject_fault(functions[method], code=FAULT_CODE),
            lambda method: emu.calls(functions[method]),
            driver_handles,
        )
    finally:
        emu.clear_faults()


# -- the paths --------------------------------------------------------------------------------


@dataclass
class Program:
    """What a program using eventapi holds while it walks a path."""

    api: Any
    streams: list[Any] = field(default_factory=list)
    fence: EventFence[Any, Any] | None = None
    profiler: EventProfiler[Any, Any] | None = None
    windows: list[Window[Any]] = field(default_factory=list)

    def stream(self, index: int) -> Any:
        while len(self.streams) <= index:
            self.streams.append(self.api.stream_create_non_blocking())
        return self.streams[index]


Step = Callable[[Program], object]


def _fence_record(p: Program) -> None:
    p.fence = EventFence.record(p.api, p.stream(0))


def _fence(p: Program) -> EventFence[Any, Any]:
    assert p.fence is not None
    return p.fence


def _open(p: Program) -> None:
    p.profiler = EventProfiler(p.api)


def _profiler(p: Program) -> EventProfiler[Any, Any]:
    assert p.profiler is not None
    return p.profiler


def _start(name: str) -> Step:
    return lambda p: p.windows.append(_profiler(p).start(name))


def _stop(p: Program) -> None:
    p.windows.pop().stop()


PATHS: Final[dict[str, tuple[Step, ...]]] = {
    "fence": (
        lambda p: p.stream(1),  # the program's streams
        _fence_record,
        lambda p: _fence(p).reached(),
        lambda p: _fence(p).wait_on(p.stream(1)),
        lambda p: _fence(p).wait(),
        lambda p: _fence(p).wait(timeout=1.0),
        lambda p: _fence(p).close(),
    ),
    "profiler": (
        _open,
        _start("outer"),
        _start("inner"),
        _stop,
        _stop,
        lambda p: _profiler(p).collect(),
        _start("again"),
        _stop,
        lambda p: _profiler(p).anchor,
        lambda p: _profiler(p).close(),
    ),
}


def _close_everything(p: Program, raised: list[BaseException]) -> None:
    """Release what the program holds, as its cleanup code would, keeping what is raised."""
    for close in (
        (lambda: _fence(p).close()) if p.fence is not None else None,
        (lambda: _profiler(p).close()) if p.profiler is not None else None,
        *((lambda s=s: p.api.stream_synchronize(s)) for s in p.streams),
        *((lambda s=s: p.api.stream_destroy(s)) for s in p.streams),
    ):
        if close is None:
            continue
        try:
            close()
        except Exception as exc:  # judged by the test
            raised.append(exc)


def _walk(target: Target, path: str, method: str, at: int) -> tuple[list[BaseException], int]:
    """Walk ``path`` with a fault in ``method`` just before step ``at``; return what was raised
    and how many driver calls of ``method`` were made from the fault on (-1 where uncounted)."""
    program = Program(target.api)
    raised: list[BaseException] = []
    before = -1
    for index, step in enumerate(PATHS[path]):
        if index == at:
            before = target.calls(method) if target.calls is not None else -1
            target.inject(method)
        try:
            step(program)
        except Exception as exc:  # judged by the test
            raised.append(exc)
            break  # the program stops using what failed, and cleans up
    _close_everything(program, raised)
    called = target.calls(method) - before if target.calls is not None else -1
    return raised, called


def _assert_only_driver_errors(raised: list[BaseException]) -> None:
    wrong = [exc for exc in raised if not isinstance(exc, DriverError)]
    assert not wrong, f"a driver fault surfaced as {wrong!r}; only DriverError is documented"


def _logged_driver_errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        record
        for record in caplog.records
        if record.name == "eventapi"
        and record.exc_info is not None
        and isinstance(record.exc_info[1], DriverError)
    ]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_fault_anywhere_on_a_path_leaks_nothing_and_surfaces_as_driver_error(
    target: Target,
    path: str,
    method: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="eventapi")
    driver_before = target.driver_handles() if target.driver_handles else None
    for at in range(len(PATHS[path])):
        caplog.clear()
        raised, called = _walk(target, path, method, at)
        _assert_only_driver_errors(raised)
        where = f"{path} path, fault in {method} before step {at}"
        assert target.api.live_handles() == (0, 0), f"{where}: the backend leaked"
        if called > 0:
            assert raised or _logged_driver_errors(caplog), (
                f"{where}: the driver call failed, yet no DriverError was raised or logged"
            )
        if called == 0:
            assert not raised, f"{where}: {raised!r} though the fault was never reached"
    if driver_before is not None and target.driver_handles is not None:
        # A destroy the driver failed leaves its handle in the driver: nothing can free it.
        events, streams = target.driver_handles()
        kept_events = events - driver_before[0]
        kept_streams = streams - driver_before[1]
        allowed_events = len(PATHS[path]) if method == "event_destroy" else 0
        allowed_streams = len(PATHS[path]) if method == "stream_destroy" else 0
        assert 0 <= kept_events <= allowed_events, f"the driver holds {kept_events} more events"
        assert 0 <= kept_streams <= allowed_streams, f"the driver holds {kept_streams} more streams"


@pytest.mark.parametrize("method", METHODS)
def test_a_fault_in_eventapi_check_is_reported_not_raised_and_leaks_nothing(
    target: Target, method: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="eventapi")
    target.inject(method)
    report = check_backend(target.api, iterations=CHECK_ITERATIONS)
    rows = {result.check: result for result in report.results}
    assert rows["handles"].result == "PASS", rows["handles"].detail
    assert target.api.live_handles() == (0, 0)
    failed = [result for result in report.results if result.result == "FAIL"]
    reported = [result for result in failed if "DriverError" in result.detail]
    assert reported or _logged_driver_errors(caplog), (
        f"a fault in {method} was neither reported in a failed check nor logged: "
        f"{[(result.check, result.detail) for result in failed]}"
    )
