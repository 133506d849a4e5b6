"""Public calls given hostile arguments refuse them with a TypeError or ValueError naming them.

A value of the wrong type, a non-finite or absurd number, or a hostile structure (a list nested
100,000 deep, a string of ten million characters) must be refused at the call, before any work,
with the exception type the rest of the surface raises and a message that names the argument
and shows the value cut short: never an AttributeError from inside, a RecursionError or a
MemoryError while the message is built, a ``decimal.InvalidOperation``, nor silent acceptance.
One table for the calls, one for the command lines' numeric options.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import child
import pytest
from kit_run import KIT, run_pytest

import eventapi
from eventapi import EventFence, EventProfiler, EventStateError, Span, Stats
from eventapi.driverkit import (
    DriverCalls,
    Stream,
    foreign_stream_handle,
    launch_host_func,
    ms_to_ns,
)
from eventapi.driverkit.probe import c_int_out, installed_version, open_driver_library
from eventapi.host import HostBackend
from eventapi.trace import (
    TraceWriter,
    export_chrome_trace,
    gather_chrome_trace,
    merge,
    write_report,
)


def _deep(levels: int) -> list[Any]:
    outer: list[Any] = []
    inner = outer
    for _ in range(levels):
        inner.append([])
        inner = inner[0]
    return outer


DEEP = _deep(100_000)  # its full repr raises RecursionError
HUGE = "x" * 10**7  # its full repr is a 10 MB message
NAN = Decimal("NaN")  # compared with a float, raises decimal.InvalidOperation


@dataclass
class Scene:
    """What a call in the table works on: a fresh host backend, a stream of it, a file name."""

    host: HostBackend
    stream: Stream[Any]
    path: Path

    def sink(self) -> Callable[[Span], None]:
        return TraceWriter(self.path).sink(self.host)

    def result(self) -> Any:  # what eventapi.bench returns
        return eventapi.bench(_enqueue, api=self.host, stream=self.stream, warmup_ms=0, rep_ms=1)


def _enqueue(stream: object) -> None:
    pass


def _span(**fields: object) -> Span:
    values: dict[str, Any] = {
        "name": "a",
        "start_ns": 0,
        "end_ns": 5,
        "duration_ns": 5,
        "depth": 0,
        "stream": "s",
        "uncertainty_ns": 1,
    }
    values.update(fields)
    return Span(**values)


def _calls(**fields: object) -> DriverCalls:
    arguments: dict[str, Any] = {
        "describe": lambda status: (None, None),
        "not_ready": 600,
        "missing": 34,
        "missing_hint": "install the toy driver",
    }
    arguments.update(fields)
    return DriverCalls("toy", **arguments)


def _bench(scene: Scene, fn: object = _enqueue, **options: object) -> object:
    arguments: dict[str, Any] = {"api": scene.host, "stream": scene.stream, "rep_ms": 1}
    arguments.update(options)
    return eventapi.bench(fn, **arguments)  # type: ignore[arg-type]


def _libc() -> ctypes.CDLL:
    library = open_driver_library(["libc.so.6"])
    assert library is not None
    return library


def _profiling(scene: Scene, use: Callable[[EventProfiler[Any, Any]], object]) -> object:
    with EventProfiler(scene.host, scene.stream) as prof:
        return use(prof)


def _summarized(prof: EventProfiler[Any, Any]) -> Stats:
    with prof.window("w"):
        pass
    return prof.summary()["w"]


def _fence(scene: Scene, use: Callable[[EventFence[Any, Any]], object]) -> object:
    with EventFence.record(scene.host, scene.stream) as fence:
        return use(fence)


Call = Callable[[Scene], object]


def case(
    call: str, argument: str, fn: Call, raises: type[Exception], fragment: str
) -> Any:  # a pytest ParameterSet
    return pytest.param(fn, raises, fragment, id=f"{call}-{argument}")


CASES = [
    # eventapi.trace
    case(
        "export_chrome_trace",
        "profilers-float",
        lambda s: export_chrome_trace(s.path, 1.5),  # type: ignore[arg-type]
        TypeError,
        "profilers[0] is float",
    ),
    case(
        "export_chrome_trace",
        "slice_args-str",
        lambda s: export_chrome_trace(s.path, slice_args="no"),  # type: ignore[arg-type]
        TypeError,
        "slice_args must be True or False",
    ),
    case(
        "export_chrome_trace",
        "path-huge",
        lambda s: export_chrome_trace(HUGE),
        ValueError,
        "path is 10,000,000 characters long",
    ),
    case(
        "export_chrome_trace",
        "path-nul",
        lambda s: export_chrome_trace(f"{s.path}\0x"),
        ValueError,
        "path holds a NUL",
    ),
    case(
        "TraceWriter",
        "slice_args-float",
        lambda s: TraceWriter(s.path, slice_args=1.5).close(),  # type: ignore[arg-type]
        TypeError,
        "slice_args must be True or False",
    ),
    case("TraceWriter", "path-huge", lambda s: TraceWriter(HUGE), ValueError, "path is 10,000,000"),
    case(
        "TraceWriter.sink",
        "api-float",
        lambda s: TraceWriter(s.path).sink(1.5),  # type: ignore[arg-type]
        TypeError,
        "TraceWriter.sink needs a backend object",
    ),
    case(
        "TraceWriter.sink",
        "api-deep",
        lambda s: TraceWriter(s.path).sink(DEEP),  # type: ignore[arg-type]
        TypeError,
        "TraceWriter.sink needs a backend object",
    ),
    case(
        "sink",
        "span-float",
        lambda s: s.sink()(1.5),  # type: ignore[arg-type]
        TypeError,
        "sink takes an eventapi.Span",
    ),
    case(
        "sink",
        "span-deep",
        lambda s: s.sink()(DEEP),  # type: ignore[arg-type]
        TypeError,
        "sink takes an eventapi.Span",
    ),
    case(
        "sink",
        "name-deep",
        lambda s: s.sink()(_span(name=DEEP)),
        TypeError,
        "span's name must be a str",
    ),
    case(
        "sink",
        "start_ns-nan",
        lambda s: s.sink()(_span(start_ns=float("nan"))),
        TypeError,
        "span's start_ns must be an int",
    ),
    case(
        "sink",
        "stream-list",
        lambda s: s.sink()(_span(stream=[])),
        TypeError,
        "span's stream must be a str",
    ),
    case(
        "sink",
        "depth-negative",
        lambda s: s.sink()(_span(depth=-1)),
        ValueError,
        "depth is 0 or more",
    ),
    case(
        "merge",
        "slice_args-str",
        lambda s: merge([s.path], s.path.with_suffix(".out"), slice_args="x"),  # type: ignore[arg-type]
        TypeError,
        "slice_args must be True or False",
    ),
    case(
        "merge",
        "paths-huge",
        lambda s: merge([HUGE], s.path),
        ValueError,
        "each of paths is 10,000,000 characters long",
    ),
    case(
        "write_report",
        "path-huge",
        lambda s: write_report(HUGE),
        ValueError,
        "path is 10,000,000 characters long",
    ),
    case(
        "gather_chrome_trace",
        "dst-negative",
        lambda s: gather_chrome_trace(s.path, dst=-1),
        ValueError,
        "dst must be at least 0",
    ),
    case(
        "gather_chrome_trace",
        "profilers-float",
        lambda s: gather_chrome_trace(s.path, 1.5),  # type: ignore[arg-type]
        TypeError,
        "profilers[0] is float",
    ),
    # eventapi.driverkit and its probe helpers
    case(
        "open_driver_library",
        "names-str",
        lambda s: open_driver_library("libc.so.6"),
        TypeError,
        "names must be a sequence of library names, not a single str",
    ),
    case(
        "open_driver_library",
        "names-float",
        lambda s: open_driver_library(1.5),  # type: ignore[arg-type]
        TypeError,
        "names must be a sequence of library names",
    ),
    case(
        "open_driver_library",
        "name-float",
        lambda s: open_driver_library([1.5]),  # type: ignore[list-item]
        TypeError,
        "names[0] must be a str",
    ),
    case(
        "open_driver_library",
        "name-deep",
        lambda s: open_driver_library([DEEP]),  # type: ignore[list-item]
        TypeError,
        "names[0] must be a str",
    ),
    case(
        "open_driver_library",
        "name-empty",
        lambda s: open_driver_library([""]),
        ValueError,
        "names[0] is empty",
    ),
    case(
        "open_driver_library",
        "name-nul",
        lambda s: open_driver_library(["libc.so.6\0"]),
        ValueError,
        "names[0] holds a NUL",
    ),
    case(
        "c_int_out",
        "library-float",
        lambda s: c_int_out(1.5, "f"),  # type: ignore[arg-type]
        TypeError,
        "library must be a ctypes.CDLL",
    ),
    case(
        "c_int_out",
        "function-float",
        lambda s: c_int_out(_libc(), 1.5),  # type: ignore[arg-type]
        TypeError,
        "function must be the symbol's name",
    ),
    case(
        "installed_version",
        "distribution-deep",
        lambda s: installed_version(DEEP),  # type: ignore[arg-type]
        TypeError,
        "distribution must be a distribution's name",
    ),
    case(
        "ms_to_ns",
        "ms-huge-str",
        lambda s: ms_to_ns(HUGE),  # type: ignore[arg-type]
        TypeError,
        "ms must be a number of milliseconds, not str",
    ),
    case(
        "ms_to_ns",
        "ms-decimal-nan",
        lambda s: ms_to_ns(NAN),  # type: ignore[arg-type]
        ValueError,
        "ms must be a finite number of milliseconds",
    ),
    case(
        "ms_to_ns",
        "ms-inf",
        lambda s: ms_to_ns(float("inf")),
        ValueError,
        "ms must be a finite number of milliseconds",
    ),
    case(
        "ms_to_ns",
        "ms-bool",
        lambda s: ms_to_ns(True),
        TypeError,
        "ms must be a number of milliseconds, not bool",
    ),
    case(
        "foreign_stream_handle",
        "protocols-str",
        lambda s: foreign_stream_handle("toy", object(), protocols="__cuda_stream__"),
        TypeError,
        "protocols must be a sequence of attribute names",
    ),
    case(
        "foreign_stream_handle",
        "native-not-types",
        lambda s: foreign_stream_handle("toy", object(), native=(1.5,)),  # type: ignore[arg-type]
        TypeError,
        "native must be a tuple of types",
    ),
    case(
        "launch_host_func",
        "fn-float",
        lambda s: launch_host_func("toy", 1.5, lambda f, k: None),  # type: ignore[arg-type]
        TypeError,
        "fn must be callable",
    ),
    case(
        "launch_host_func",
        "enqueue-float",
        lambda s: launch_host_func("toy", lambda: None, 1.5),  # type: ignore[arg-type]
        TypeError,
        "enqueue must be callable",
    ),
    case(
        "DriverCalls",
        "not_ready-str",
        lambda s: _calls(not_ready="600"),
        TypeError,
        "not_ready must be a status code",
    ),
    case(
        "DriverCalls",
        "not_ready-decimal-nan",
        lambda s: _calls(not_ready=NAN),
        TypeError,
        "not_ready must be a status code",
    ),
    case(
        "DriverCalls",
        "sticky-str",
        lambda s: _calls(sticky="700"),
        TypeError,
        "sticky must be a collection of status codes",
    ),
    case(
        "DriverCalls",
        "describe-none",
        lambda s: _calls(describe=None),
        TypeError,
        "describe must be a callable",
    ),
    # eventapi.host
    case(
        "stream_synchronize",
        "stream-deep",
        lambda s: s.host.stream_synchronize(DEEP),
        EventStateError,
        "not a stream this backend can use",
    ),
    case(
        "stream_launch_host_func",
        "fn-deep",
        lambda s: s.host.stream_launch_host_func(s.stream, DEEP),  # type: ignore[arg-type]
        TypeError,
        "needs a callable",
    ),
    case(
        "inject_fault",
        "method-deep",
        lambda s: s.host.inject_fault(DEEP),  # type: ignore[arg-type]
        TypeError,
        "method must be a method's name as a str",
    ),
    case(
        "inject_fault",
        "method-huge",
        lambda s: s.host.inject_fault(HUGE),
        ValueError,
        "is not a protocol method",
    ),
    case(
        "inject_fault",
        "count-float",
        lambda s: s.host.inject_fault("event_create", count=1.5),  # type: ignore[arg-type]
        TypeError,
        "count must be an int",
    ),
    case(
        "inject_fault",
        "count-decimal-nan",
        lambda s: s.host.inject_fault("event_create", count=NAN),  # type: ignore[arg-type]
        TypeError,
        "count must be an int",
    ),
    # eventapi.bench and its result
    case("bench", "fn-float", lambda s: _bench(s, 1.5), TypeError, "fn must be callable"),
    case(
        "bench", "setup-float", lambda s: _bench(s, setup=1.5), TypeError, "setup must be callable"
    ),
    case(
        "bench",
        "api-float",
        lambda s: _bench(s, api=1.5),
        TypeError,
        "bench(api=...) needs a backend object",
    ),
    case(
        "bench",
        "api-deep",
        lambda s: _bench(s, api=DEEP),
        TypeError,
        "bench(api=...) needs a backend object",
    ),
    case(
        "bench",
        "warmup_ms-str",
        lambda s: _bench(s, warmup_ms="x"),
        TypeError,
        "warmup_ms must be a number of milliseconds",
    ),
    case(
        "bench",
        "warmup_ms-decimal-nan",
        lambda s: _bench(s, warmup_ms=NAN),
        ValueError,
        "warmup_ms must be a finite number",
    ),
    case(
        "bench",
        "rep_ms-inf",
        lambda s: _bench(s, rep_ms=float("inf")),
        ValueError,
        "rep_ms must be a finite number",
    ),
    case(
        "bench",
        "rep_ms-bool",
        lambda s: _bench(s, rep_ms=True),
        TypeError,
        "rep_ms must be a number of milliseconds, not bool",
    ),
    case(
        "bench",
        "noise_target-decimal-nan",
        lambda s: _bench(s, noise_target=NAN),
        ValueError,
        "noise_target must be a finite number",
    ),
    case(
        "bench",
        "min_n-nan",
        lambda s: _bench(s, min_n=float("nan")),
        TypeError,
        "min_n must be an int",
    ),
    case(
        "bench",
        "min_n-decimal-nan",
        lambda s: _bench(s, min_n=NAN),
        TypeError,
        "min_n must be an int",
    ),
    case(
        "bench",
        "calls_per_window-float",
        lambda s: _bench(s, calls_per_window=1.5),
        TypeError,
        "calls_per_window must be an int",
    ),
    case(
        "bench",
        "hold_stream-str",
        lambda s: _bench(s, hold_stream="no"),
        TypeError,
        "hold_stream must be True or False",
    ),
    case(
        "BenchResult.quantile",
        "q-decimal-nan",
        lambda s: s.result().quantile(NAN),
        ValueError,
        "q must be a finite number",
    ),
    case(
        "BenchResult.quantile",
        "q-str",
        lambda s: s.result().quantile("x"),
        TypeError,
        "q must be a number",
    ),
    case(
        "BenchResult.compare",
        "other-float",
        lambda s: s.result().compare(1.5),
        TypeError,
        "other must be a BenchResult",
    ),
    # eventapi.EventProfiler, Window and Stats
    case(
        "EventProfiler",
        "label-deep",
        lambda s: EventProfiler(s.host, s.stream, label=DEEP),  # type: ignore[arg-type]
        TypeError,
        "label must be a str",
    ),
    case(
        "EventProfiler",
        "max_names-nan",
        lambda s: EventProfiler(s.host, s.stream, max_names=float("nan")),  # type: ignore[arg-type]
        TypeError,
        "max_names must be an int",
    ),
    case(
        "EventProfiler",
        "max_names-decimal-nan",
        lambda s: EventProfiler(s.host, s.stream, max_names=NAN),  # type: ignore[arg-type]
        TypeError,
        "max_names must be an int",
    ),
    case(
        "EventProfiler",
        "max_names-bool",
        lambda s: EventProfiler(s.host, s.stream, max_names=True),
        TypeError,
        "max_names must be an int",
    ),
    case(
        "EventProfiler",
        "max_spans-huge",
        lambda s: EventProfiler(s.host, s.stream, max_spans=10**400),
        ValueError,
        "max_spans must be at most",
    ),
    case(
        "EventProfiler",
        "sink-float",
        lambda s: EventProfiler(s.host, s.stream, sink=1.5),  # type: ignore[arg-type]
        TypeError,
        "sink must be callable",
    ),
    case(
        "EventProfiler.window",
        "name-deep",
        lambda s: _profiling(s, lambda prof: prof.window(DEEP)),  # type: ignore[arg-type]
        TypeError,
        "a window name must be a str",
    ),
    case(
        "EventProfiler.start",
        "name-huge-bytes",
        lambda s: _profiling(s, lambda prof: prof.start(HUGE.encode())),  # type: ignore[arg-type]
        TypeError,
        "a window name must be a str",
    ),
    case(
        "EventProfiler.table",
        "sort_by-deep",
        lambda s: _profiling(s, lambda prof: prof.table(sort_by=DEEP)),  # type: ignore[arg-type]
        ValueError,
        "sort_by must be one of",
    ),
    case(
        "EventProfiler.table",
        "limit-nan",
        lambda s: _profiling(s, lambda prof: prof.table(limit=float("nan"))),  # type: ignore[arg-type]
        TypeError,
        "limit (an int >= 0, or None) must be an int",
    ),
    case(
        "Stats.quantile",
        "q-decimal-nan",
        lambda s: _profiling(s, lambda prof: _summarized(prof).quantile(NAN)),  # type: ignore[arg-type]
        ValueError,
        "q must be a finite number",
    ),
    case(
        "Stats.quantile",
        "q-str",
        lambda s: _profiling(s, lambda prof: _summarized(prof).quantile("x")),  # type: ignore[arg-type]
        TypeError,
        "q must be a number",
    ),
    # eventapi.EventFence
    case(
        "EventFence.record",
        "keep_alive-float",
        lambda s: EventFence.record(s.host, s.stream, keep_alive=1.5),  # type: ignore[arg-type]
        TypeError,
        "keep_alive must be an iterable",
    ),
    case(
        "EventFence.wait",
        "timeout-bool",
        lambda s: _fence(s, lambda fence: fence.wait(timeout=True)),
        TypeError,
        "timeout must be a number of seconds",
    ),
    case(
        "EventFence.wait",
        "timeout-decimal-nan",
        lambda s: _fence(s, lambda fence: fence.wait(timeout=NAN)),  # type: ignore[arg-type]
        ValueError,
        "timeout must be a finite number of seconds",
    ),
]


@pytest.fixture
def scene(host: HostBackend, host_stream: Stream[Any], tmp_path: Path) -> Scene:
    return Scene(host, host_stream, tmp_path / "trace.json")


@pytest.mark.parametrize(("call", "raises", "fragment"), CASES)
def test_a_hostile_argument_is_refused_naming_it(
    scene: Scene, call: Call, raises: type[Exception], fragment: str
) -> None:
    with pytest.raises(Exception) as caught:  # noqa: PT011 - the type is asserted below, exactly
        call(scene)
    error = caught.value
    assert type(error) is raises or (raises is EventStateError and isinstance(error, raises)), (
        f"{type(error).__name__}: {str(error)[:300]}"
    )
    message = str(error)
    assert fragment in message, message[:300]
    # The value is shown cut short, never whole.
    assert len(message) < 1_000, message[:300]


def test_a_library_name_longer_than_a_path_is_refused_before_the_loader_sees_it() -> None:
    # glibc's loader copies a name onto the stack: one of megabytes crashed the process
    # (SIGSEGV) instead of failing to load. In a child, so that a crash fails this test alone.
    done = child.run(
        textwrap.dedent(
            """
            import json
            from eventapi.driverkit.probe import open_driver_library

            try:
                open_driver_library(["x" * 10**7])
            except ValueError as exc:
                print(json.dumps(str(exc)))
            """
        )
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "names[0] is 10,000,000 characters long" in json.loads(done.stdout), done.stdout


def test_a_fault_count_of_any_size_costs_one_entry(
    host: HostBackend, host_stream: Stream[Any]
) -> None:
    # The count was a list of that many entries: 10**9 faults would have asked for 8 GB, and
    # 10**30 raised OverflowError.
    host.inject_fault("stream_synchronize", count=10**30)
    for _ in range(3):
        with pytest.raises(eventapi.DriverError, match="INJECTED_FAULT"):
            host.stream_synchronize(host_stream)
    # Runs of faults still come in the order they were injected, each as many times as asked.
    custom = eventapi.DriverError("host", "event_destroy", 1, "CUSTOM", "injected here")
    host.inject_fault("event_destroy", count=2)
    host.inject_fault("event_destroy", error=custom)
    assert [_destroy_fault(host) for _ in range(4)] == ["INJECTED_FAULT"] * 2 + ["CUSTOM", None]


def _destroy_fault(host: HostBackend) -> str | None:
    # A destroy that fails still releases the event: which error it raised, if any.
    event = host.event_create()
    try:
        host.event_destroy(event)
    except eventapi.DriverError as exc:
        return exc.name
    return None


# -- command lines ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value"),
    [("--warmup-ms", "nan"), ("--rep-ms", "inf"), ("--noise-target", "nan")],
)
def test_eventapi_bench_refuses_a_number_that_is_not_finite_naming_the_option(
    option: str, value: str
) -> None:
    done = child.command([sys.executable, "-m", "eventapi", "bench", "builtins:id", option, value])
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"argument {option}: " in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1", "1e300"])
def test_the_kit_refuses_a_timeout_it_cannot_wait_naming_the_option(
    value: str, tmp_path: Path
) -> None:
    environ = {key: item for key, item in os.environ.items() if not key.startswith("PYTEST_")}
    run = run_pytest(
        *KIT,
        "--eventapi-backend=host",
        f"--eventapi-timeout={value}",
        cwd=tmp_path,
        env=environ,
        timeout=child.TIMEOUT_S,
    )
    tail = run.output[-2000:]
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, tail
    assert "--eventapi-timeout must be a number of seconds above 0" in run.output, tail
