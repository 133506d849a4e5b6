"""A pool of timing events, so that a profiling window costs records, not creations.

Creating an event is a driver allocation (microseconds, sometimes a lock inside the driver);
recording one is a queue write. Events are taken from the pool when a window opens or closes,
and go back once their timestamps were read, where the next window re-records them: a
re-recorded event marks its latest record. The pool grows to the most events ever in flight at
once and never shrinks until it is closed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Generic, TypeVar, final

__all__ = ["EventPool"]

_log = logging.getLogger("eventapi")

E = TypeVar("E")


@final
class EventPool(Generic[E]):
    """Free timing events of one backend object. Not thread-safe: one owner uses it.

    ``create`` and ``destroy`` are the backend's ``event_create`` and ``event_destroy``, or
    those of a :class:`~eventapi.driverkit.Pin` the owner records through; ``backend`` names
    the backend in log lines.
    """

    __slots__ = ("_backend", "_create", "_destroy", "free")

    def __init__(
        self, create: Callable[[], E], destroy: Callable[[E], object], backend: str
    ) -> None:
        self._create = create
        self._destroy = destroy
        self._backend = backend
        # The free events. The owner's hot path may pop and append here directly, saving the
        # calls of acquire() and release(); an event popped must be appended back or used.
        self.free: list[E] = []

    def acquire(self) -> E:
        """A free event, created when the pool is empty. Raises DriverError from the create."""
        if self.free:
            return self.free.pop()
        return self._create()

    def release(self, event: E) -> None:
        """Give ``event`` back; it must have come from :meth:`acquire` and be read already."""
        self.free.append(event)

    def close(self) -> None:
        """Destroy every free event. Failures are logged: this runs from ``close()`` paths."""
        free, self.free = self.free, []
        for event in free:
            try:
                self._destroy(event)
            except Exception:
                # A destroy that fails leaves nothing to retry; the caller is cleaning up.
                _log.warning("%s: destroying a pooled event failed", self._backend, exc_info=True)
