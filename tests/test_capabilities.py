"""Optional capabilities are detected per backend object, and a non-backend is refused clearly.

The fence and the profiler decide once per object of a class which optional capabilities it
has; an object that switches one off for itself (``self.event_query = None``) must get its own
answer, whichever object of its class came first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from eventapi import DriverError, EventFence, EventProfiler, UnsupportedError
from eventapi.driverkit import Stream
from eventapi.host import HostBackend


class Switchable:
    """The protocol and both checks over a host backend; an object may switch either off."""

    BACKEND = "switchable"

    def __init__(self, inner: HostBackend, *, query: bool, capture: bool) -> None:
        self.inner = inner
        # Switched off on this object only, as a backend whose driver lacks a call would.
        if not query:
            self.__dict__["event_query"] = None
        if not capture:
            self.__dict__["stream_is_capturing"] = None

    def event_query(self, event: Any) -> bool:
        return self.inner.event_query(event)

    def stream_is_capturing(self, stream: Any) -> bool:
        return self.inner.stream_is_capturing(stream)

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


def _reached(api: Any, stream: Stream[Any]) -> bool | None:
    """What ``reached()`` says on a fence of ``api``; None when it lacks event_query."""
    with EventFence.record(api, stream) as fence:
        fence.wait()
        try:
            return fence.reached()
        except UnsupportedError:
            return None


@pytest.mark.parametrize("first", [True, False])
def test_two_objects_of_one_class_keep_their_own_query(
    host: HostBackend, host_stream: Stream[Any], first: bool
) -> None:
    one = Switchable(host, query=first, capture=True)
    other = Switchable(host, query=not first, capture=True)
    for _ in range(2):  # a second round is answered from what the first one learned
        assert _reached(one, host_stream) is (True if first else None)
        assert _reached(other, host_stream) is (None if first else True)


@pytest.mark.parametrize("first", [True, False])
def test_two_objects_of_one_class_keep_their_own_capture_check(
    host: HostBackend, host_stream: Stream[Any], first: bool
) -> None:
    one = Switchable(host, query=True, capture=first)
    other = Switchable(host, query=True, capture=not first)
    for api, checks in ((one, first), (other, not first)):
        prof = EventProfiler(api, host_stream)
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
