"""A backend on :class:`eventapi.driverkit.DriverBackend` without host functions, for the kit.

A driver API need not launch host callables (OpenCL has no such call, for one). A backend on
such a driver takes the handle layer and the two capabilities its driver has, event query and
capture check, and leaves ``HostFuncMixin`` out: the conformance kit must pass on it, skipping
what needs a held stream and naming the capability.

The raw layer is a stream of worker threads draining a queue and events stamped with
``time.perf_counter_ns()`` when the worker reaches them, written against driverkit's ``_raw_*``
contract only.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, final

from eventapi import DriverError
from eventapi.driverkit import CaptureCheckMixin, DriverBackend, EventQueryMixin

if TYPE_CHECKING:
    from eventapi import EventApi, SupportsCaptureCheck, SupportsEventQuery
    from eventapi.driverkit import Event, Stream


@final
class _RawEvent:
    """The latest record's completion flag and the stamp its worker wrote."""

    __slots__ = ("reached", "stamp_ns")

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.stamp_ns = 0


@final
class _RawStream:
    """One worker thread running queued callables in order; ``None`` stops it."""

    __slots__ = ("queue", "worker")

    def __init__(self) -> None:
        self.queue: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        self.worker = threading.Thread(target=self._drain, name="kit-raw-stream", daemon=True)
        self.worker.start()

    def _drain(self) -> None:
        while (item := self.queue.get()) is not None:
            item()


@final
class NoHostFuncDriverBackend(
    EventQueryMixin[_RawEvent, _RawStream],
    CaptureCheckMixin[_RawEvent, _RawStream],
    DriverBackend[_RawEvent, _RawStream],
):
    """Query and capture check, no host functions; the handle layer from driverkit."""

    BACKEND = "kit-driverkit"

    def _raw_event_create(self) -> _RawEvent:
        return _RawEvent()

    def _raw_event_destroy(self, event: _RawEvent) -> None:
        pass  # nothing of an event outlives its Python object

    def _raw_event_record(self, event: _RawEvent, stream: _RawStream) -> None:
        reached = threading.Event()
        event.reached = reached

        def stamp() -> None:
            event.stamp_ns = time.perf_counter_ns()
            reached.set()

        stream.queue.put(stamp)

    def _raw_event_wait(self, event: _RawEvent) -> None:
        event.reached.wait()

    def _raw_event_query(self, event: _RawEvent) -> bool:
        return event.reached.is_set()

    def _raw_event_elapsed_ns(self, start: _RawEvent, end: _RawEvent) -> int:
        if not (start.reached.is_set() and end.reached.is_set()):
            raise DriverError(
                self.BACKEND, "event_elapsed", 600, "NOT_READY", "not ready", not_ready=True
            )
        return end.stamp_ns - start.stamp_ns

    def _raw_stream_wait_event(self, stream: _RawStream, event: _RawEvent) -> None:
        stream.queue.put(event.reached.wait)  # the reached flag of the record current now

    def _raw_stream_synchronize(self, stream: _RawStream) -> None:
        drained = threading.Event()
        stream.queue.put(drained.set)
        drained.wait()

    def _raw_stream_create_non_blocking(self) -> _RawStream:
        return _RawStream()

    def _raw_stream_destroy(self, stream: _RawStream) -> None:
        stream.queue.put(None)  # the worker finishes what is queued, then exits

    def _raw_stream_is_capturing(self, stream: _RawStream) -> bool:
        return False  # this driver has no graphs


if TYPE_CHECKING:

    def _conforms(backend: NoHostFuncDriverBackend) -> None:
        _api: EventApi[Event[_RawEvent], Stream[_RawStream]] = backend
        _query: SupportsEventQuery[Event[_RawEvent]] = backend
        _capture: SupportsCaptureCheck[Stream[_RawStream]] = backend
