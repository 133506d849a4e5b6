"""The backend contract: the event and stream calls the C-family device APIs agree on.

A backend is an object that satisfies :class:`EventApi` structurally; it does not inherit from
it. Everything above these calls (a fence's lifetime, a profiling window, the anchor that places
one on the host clock) is written once, in the classes that *hold* a backend.

The contract is deliberately only what :class:`~eventapi.EventFence` and
:class:`~eventapi.EventProfiler` need. Memory, launches and module loading have their own seams;
widening this protocol to cover them would make it the device API rather than the device's
event API.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Protocol, TypeVar, runtime_checkable

__all__ = [
    "CAPABILITY_METHODS",
    "PROTOCOL_METHODS",
    "EventApi",
    "SupportsCaptureCheck",
    "SupportsEventQuery",
    "SupportsHostFunc",
]

E = TypeVar("E")
S = TypeVar("S")
E_contra = TypeVar("E_contra", contravariant=True)
S_contra = TypeVar("S_contra", contravariant=True)


class EventApi(Protocol[E, S]):
    """One backend's spelling of the device event calls.

    ``E`` is the backend's event handle, ``S`` its stream handle. An event is a handle into the
    driver, not thread-affine state: it is recorded on one thread and waited on any other. A
    stream stays with the code that owns it.

    Every method raises :class:`~eventapi.DriverError` when the driver refuses the call, and
    :class:`~eventapi.EventStateError` for a closed, foreign or never-recorded handle, which is
    refused before the driver sees it.
    """

    @property
    def BACKEND(self) -> str:  # noqa: N802 - the seed's constant; read-only so a plain attribute satisfies it
        """The backend's name as a log line shows it: ``"host"``, ``"cuda"``, ``"hip"``."""
        ...

    def event_create(self) -> E:
        """Create an event with timing enabled.

        Timing is the point: the flag a pure synchronization event would take to disable it is
        exactly the timestamp a profiler reads back.
        """
        ...

    def event_destroy(self, event: E) -> None:
        """Release an event. Idempotent on an already destroyed handle of this backend.

        Called from the owner's ``close()`` or finalizer, where a failure can only be logged.
        """
        ...

    def event_record(self, event: E, stream: S) -> None:
        """Enqueue the timestamp on ``stream``; return once it is queued."""
        ...

    def event_wait(self, event: E) -> None:
        """Block the calling thread until the device has reached ``event``.

        Releases the GIL while it blocks. The error it raises is the fault the wait revealed on
        the stream the event was recorded into.
        """
        ...

    def event_elapsed(self, start: E, end: E) -> int:
        """Device time from ``start`` to ``end`` in integer nanoseconds.

        Both must have been reached, else :class:`~eventapi.DriverError` with ``not_ready``
        true. A negative reading is clamped to 0: the device clock is monotonic, and a profiler
        is not worth an exception.
        """
        ...

    def stream_wait_event(self, stream: S, event: E) -> None:
        """Make ``stream`` wait for ``event`` on the device; the host does not block."""
        ...

    def stream_synchronize(self, stream: S) -> None:
        """Block the host until every operation enqueued on ``stream`` has completed."""
        ...

    def stream_create_non_blocking(self) -> S:
        """Create a stream that does not synchronize with the legacy default stream."""
        ...

    def stream_destroy(self, stream: S) -> None:
        """Release a stream created by :meth:`stream_create_non_blocking`.

        A stream this backend did not create (a framework's stream, a raw handle) is refused
        with :class:`~eventapi.EventStateError`: it is never destroyed here.
        """
        ...


@runtime_checkable
class SupportsEventQuery(Protocol[E_contra]):
    """Optional capability: ask whether an event was reached, without blocking.

    Used by :meth:`EventFence.reached` and by waits with a timeout.
    """

    def event_query(self, event: E_contra) -> bool:
        """True when the device has reached ``event``; never blocks."""
        ...


@runtime_checkable
class SupportsCaptureCheck(Protocol[S_contra]):
    """Optional capability: tell whether a stream is recording a graph.

    A stream that is capturing gets no timing event; callers screen for it in advance.
    """

    def stream_is_capturing(self, stream: S_contra) -> bool:
        """True while ``stream`` is capturing a graph."""
        ...


@runtime_checkable
class SupportsHostFunc(Protocol[S_contra]):
    """Optional capability: enqueue a host callable on a stream.

    Not a widening of :class:`EventApi` (launches have their own seam): it lets tests and
    ``eventapi check`` put a known delay on a stream without compiling a kernel.
    """

    def stream_launch_host_func(self, stream: S_contra, fn: Callable[[], object]) -> None:
        """Run ``fn()`` on a driver thread when ``stream`` reaches this point.

        Later work on the stream waits for ``fn`` to return. ``fn`` must not call back into the
        device API, as the drivers forbid; an exception it raises is logged, not propagated.
        """
        ...


def _methods(protocol: type) -> tuple[str, ...]:
    members = vars(protocol).items()
    return tuple(name for name, member in members if not name.startswith("_") and callable(member))


PROTOCOL_METHODS: Final[tuple[str, ...]] = _methods(EventApi)
"""The methods of :class:`EventApi`, read off the protocol so no list can drift from it."""

CAPABILITY_METHODS: Final[tuple[str, ...]] = (
    *_methods(SupportsEventQuery),
    *_methods(SupportsCaptureCheck),
    *_methods(SupportsHostFunc),
)
"""The methods of the optional capability protocols, read off them likewise."""
