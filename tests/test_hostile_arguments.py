"""Public calls given hostile arguments refuse them with a TypeError or ValueError naming them.

A value of the wrong type, a non-finite or absurd number, or a hostile structure (a list nested
100,000 deep, a string of ten million characters) must be refused at the call, before any work,
with the exception type the rest of the surface raises and a message that names the argument
and shows the value cut short: never an AttributeError from inside, a RecursionError or a
MemoryError while the message is built, a ``decimal.InvalidOperation``, nor silent acceptance.
One table for the calls.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from eventapi import EventStateError, Span
from eventapi.driverkit import Stream
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


@dataclass
class Scene:
    """What a call in the table works on: a fresh host backend, a stream of it, a file name."""

    host: HostBackend
    stream: Stream[Any]
    path: Path

    def sink(self) -> Callable[[Span], None]:
        return TraceWriter(self.path).sink(self.host)


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
