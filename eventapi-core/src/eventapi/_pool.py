"""A pool of timing events, so that a profiling window costs records, not creations.

Creating an event is a driver allocation (microseconds, sometimes a lock inside the driver);
recording one is a queue write. Events are taken from the pool when a window opens or closes,
and go back once their timestamps were read, where the next window re-records them: a
re-recorded event marks its latest record. The pool grows to the most events ever in flight at
once and never shrinks until it is closed.
"""

from __future__ import annotations

import logging
from typing import Generic, TypeVar, final

from ._protocol import EventApi

__all__ = ["EventPool"]

_log = logging.getLogger("eventapi")

E = TypeVar("E")
S = TypeVar("S")


@final
class EventPool(Generic[E, S]):
    """Free timing events of one backend object. Not thread-safe: one owner uses it."""

    __slots__ = ("_api", "_free")

    def __init__(self, api: EventApi[E, S]) -> None:
        self._api = api
        self._free: list[E] = []

    def acquire(self) -> E:
        """A free event, created when the pool is empty. Raises DriverError from the create."""
        if self._free:
            return self._free.pop()
        return self._api.event_create()

    def release(self, event: E) -> None:
        """Give ``event`` back; it must have come from :meth:`acquire` and be read already."""
        self._free.append(event)

    def close(self) -> None:
        """Destroy every free event. Failures are logged: this runs from ``close()`` paths."""
        free, self._free = self._free, []
        for event in free:
            try:
                self._api.event_destroy(event)
            except Exception:
                # A destroy that fails leaves nothing to retry; the caller is cleaning up.
                _log.warning(
                    "%s: destroying a pooled event failed", self._api.BACKEND, exc_info=True
                )
