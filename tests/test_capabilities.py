"""Optional capabilities are detected by one rule, per backend class, and a non-backend is refused.

The fence, the profiler, the conformance kit and ``eventapi check`` all ask ``isinstance`` against
the runtime-checkable protocol, once per backend class: a class that lacks a capability's method
lacks the capability for every object of it, whichever object came first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from eventapi import DriverError, EventFence, EventProfiler, UnsupportedError
from eventapi.driverkit import Stream
from eventapi.host import HostBackend


class Plain:
    """The protocol alone over a host backend: no optional capability at all."""

    BACKEND = "plain"

    def __init__(self, inner: HostBackend) -> None:
        self.inner = inner

    def event_create(self) -> Any:
        return self.inner.event_create()

    def event_destroy(self, event: Any) -> None:
        self.inner.event_destroy(event)

    def event_record(self, event: Any, stream: Any) -> None:
        self.inner.event_record(event, stream)

    def event_wait(self, event: Any) -> None:
        self.inner.event_wait(event)

    def event_elapsed(self, start: Any, end: Any) -> int:
        return self.inner.event_elapsed(start, end)

    def stream_wait_event(self, stream: Any, event: Any) -> None:
        self.inner.stream_wait_event(stream, event)

    def stream_synchronize(self, stream: Any) -> None:
        self.inner.stream_synchronize(stream)

    def stream_create_non_blocking(self) -> Any:
        return self.inner.stream_create_non_blocking()

    def stream_destroy(self, stream: Any) -> None:
        self.inner.stream_destroy(stream)


class Querying(Plain):
    """With ``event_query``."""

    def event_query(self, event: Any) -> bool:
        return self.inner.event_query(event)


class Checking(Plain):
    """With ``stream_is_capturing``."""

    def stream_is_capturing(self, stream: Any) -> bool:
        return self.inner.stream_is_capturing(stream)


def _reached(api: Any, stream: Stream[Any]) -> bool | None:
    """What ``reached()`` says on a fence of ``api``; None when it lacks event_query."""
    with EventFence.record(api, stream) as fence:
        fence.wait()
        try:
            return fence.reached()
        except UnsupportedError:
            return None


@pytest.mark.parametrize("first", [Querying, Plain])
def test_each_class_has_its_own_query_whichever_came_first(
    host: HostBackend, host_stream: Stream[Any], first: type[Plain]
) -> None:
    second = Plain if first is Querying else Querying
    for _ in range(2):  # a second round is answered from what the first one learned
        for kind in (first, second):
            assert _reached(kind(host), host_stream) is (True if kind is Querying else None)


@pytest.mark.parametrize("kind", [Checking, Plain])
def test_a_profiler_screens_for_a_capture_only_with_the_capture_check(
    host: HostBackend, host_stream: Stream[Any], kind: type[Plain]
) -> None:
    checks = kind is Checking
    prof = EventProfiler(kind(host), host_stream)
    host.begin_capture(host_stream)
    try:
        with prof.window("w"):
            pass
    finally:
        host.end_capture(host_stream)
    # A profiler that can check skips the window; one that cannot records it into the
    # capture, and reading it back then fails.
    assert prof.skipped == (1 if checks else 0)
    if checks:
        prof.close()
    else:
        with pytest.raises(DriverError, match="CAPTURED_EVENT"):
            prof.close()


@pytest.mark.parametrize("not_a_backend", [None, 42, "cuda", object()])
def test_a_non_backend_is_refused_with_what_to_pass(
    host_stream: Stream[Any], not_a_backend: object
) -> None:
    calls: tuple[Callable[[], object], ...] = (
        lambda: EventFence.record(not_a_backend, host_stream),  # type: ignore[arg-type]
        lambda: EventProfiler(not_a_backend),  # type: ignore[arg-type]
    )
    for call in calls:
        with pytest.raises(TypeError) as info:
            call()
        assert "eventapi.backend()" in str(info.value)
        assert "lacks" in str(info.value)
