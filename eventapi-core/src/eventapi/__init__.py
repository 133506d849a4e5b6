"""eventapi: device events for Python.

Fences and profiling windows written once over a small protocol, :class:`EventApi`, that each
backend spells: the embedded ``host`` backend, ``cuda`` and ``hip`` from their own
distributions, or a third party's. ``import eventapi`` imports no driver binding and scans no
plugin; :func:`backend` does, on first use.
"""

from __future__ import annotations

from ._anchor import Anchor
from ._bench import bench
from ._discovery import backends
from ._errors import (
    BackendError,
    BackendNotFoundError,
    BackendUnavailableError,
    CaptureError,
    DriverError,
    EventApiError,
    EventStateError,
    UnsupportedError,
)
from ._fence import EventFence
from ._plugin import PLUGIN_API, BackendInfo, BackendSpec, hookimpl, hookspec
from ._profiler import EventProfiler, Span, Stats, Window
from ._protocol import EventApi, SupportsCaptureCheck, SupportsEventQuery, SupportsHostFunc
from ._selection import backend

__all__ = [
    "PLUGIN_API",
    "Anchor",
    "BackendError",
    "BackendInfo",
    "BackendNotFoundError",
    "BackendSpec",
    "BackendUnavailableError",
    "CaptureError",
    "DriverError",
    "EventApi",
    "EventApiError",
    "EventFence",
    "EventProfiler",
    "EventStateError",
    "Span",
    "Stats",
    "SupportsCaptureCheck",
    "SupportsEventQuery",
    "SupportsHostFunc",
    "UnsupportedError",
    "Window",
    "backend",
    "backends",
    "bench",
    "hookimpl",
    "hookspec",
]

__version__ = "0.1.0"

# Users meet the errors as eventapi.X, in tracebacks and in `eventapi backends`, never under the
# private module that defines them. (Errors only: other classes keep their module, which
# typing.get_type_hints needs to resolve their annotations.)
for _error in (
    BackendError,
    BackendNotFoundError,
    BackendUnavailableError,
    CaptureError,
    DriverError,
    EventApiError,
    EventStateError,
    UnsupportedError,
):
    _error.__module__ = __name__
del _error
