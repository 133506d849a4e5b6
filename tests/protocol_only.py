"""A backend with the nine protocol calls and nothing else, for tests of the core classes.

It delegates to a real :class:`~eventapi.host.HostBackend` (composition, not a mock: every
call does real work on real worker threads) and hides the optional capabilities, so the fence,
the profiler and ``eventapi check`` must manage without ``event_query``,
``stream_is_capturing`` and host functions. ``calls`` lists what reached it, in order;
``waiting`` is set while a thread is inside ``event_wait``.
"""

from __future__ import annotations

import threading
from typing import Any, final

from eventapi.host import HostBackend


@final
class ProtocolOnly:
    """The protocol, nothing else, over ``inner``."""

    BACKEND = "protocol-only"

    def __init__(self, inner: HostBackend) -> None:
        self.inner = inner
        self.calls: list[str] = []
        self.waiting = threading.Event()

    def event_create(self) -> Any:
        self.calls.append("event_create")
        return self.inner.event_create()

    def event_destroy(self, event: Any) -> None:
        self.calls.append("event_destroy")
        self.inner.event_destroy(event)

    def event_record(self, event: Any, stream: Any) -> None:
        self.calls.append("event_record")
        self.inner.event_record(event, stream)

    def event_wait(self, event: Any) -> None:
        self.calls.append("event_wait")
        self.waiting.set()
        self.inner.event_wait(event)
        self.calls.append("event_wait returned")

    def event_elapsed(self, start: Any, end: Any) -> int:
        self.calls.append("event_elapsed")
        return self.inner.event_elapsed(start, end)

    def stream_wait_event(self, stream: Any, event: Any) -> None:
        self.calls.append("stream_wait_event")
        self.inner.stream_wait_event(stream, event)

    def stream_synchronize(self, stream: Any) -> None:
        self.calls.append("stream_synchronize")
        self.inner.stream_synchronize(stream)

    def stream_create_non_blocking(self) -> Any:
        self.calls.append("stream_create_non_blocking")
        return self.inner.stream_create_non_blocking()

    def stream_destroy(self, stream: Any) -> None:
        self.calls.append("stream_destroy")
        self.inner.stream_destroy(stream)
