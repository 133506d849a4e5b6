"""eventapi-toy: a pure-Python eventapi backend, built from eventapi's public names only.

A stream is a worker thread draining a queue; an event is stamped with
``time.perf_counter_ns()`` when the worker reaches it. It declares one optional capability,
``SupportsEventQuery``, and leaves the other two out.

The package imports nothing on import: discovery imports ``eventapi_toy._plugin``, which runs
this file first, and listing backends must stay cheap. The classes load on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._backend import ToyBackend, ToyEvent, ToyStream

__all__ = ["ToyBackend", "ToyEvent", "ToyStream"]


def __getattr__(name: str) -> object:
    if name in __all__:
        from . import _backend

        return getattr(_backend, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
