"""eventapi: device events for Python.

Fences and profiling windows written once over a small protocol, :class:`EventApi`, that each
backend spells: the embedded ``host`` backend, ``cuda`` and ``hip`` from their own
distributions, or a third party's. ``import eventapi`` imports no driver binding and scans no
plugin; :func:`backend` does, on first use.

``import eventapi`` imports nothing but this module: each public name is imported from the
private module that defines it the first time it is read (PEP 562), so a process pays only for
what it touches. ``eventapi.backends()`` imports discovery and pluggy, not the fence, the
profiler or the handle layer; ``eventapi.EventFence`` imports the fence, not discovery.
"""

from __future__ import annotations

# typing.TYPE_CHECKING without importing typing (a few milliseconds in a fresh process); mypy
# and ruff read any name TYPE_CHECKING as true. Deleted below, so it is not public.
TYPE_CHECKING = False
if TYPE_CHECKING:
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
else:
    # Hidden from type checkers, which see the imports above: to them a name not in that list
    # is an error, as it is at run time.
    def __getattr__(name: str) -> object:
        # Called only for a name not yet in the module's namespace: import its module once,
        # then keep the value here, so later reads are plain attribute reads.
        where = _WHERE.get(name)
        if where is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from importlib import import_module

        value = getattr(import_module(f"{__name__}.{where}"), name)
        globals()[name] = value
        return value


del TYPE_CHECKING

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

# Where each public name is defined: the same list as the imports above, read at run time.
# (The errors carry __module__ = "eventapi" themselves, so a traceback and pickle name them
# here whichever module imported them first.)
_WHERE = {
    "PLUGIN_API": "_plugin",
    "Anchor": "_anchor",
    "BackendError": "_errors",
    "BackendInfo": "_plugin",
    "BackendNotFoundError": "_errors",
    "BackendSpec": "_plugin",
    "BackendUnavailableError": "_errors",
    "CaptureError": "_errors",
    "DriverError": "_errors",
    "EventApi": "_protocol",
    "EventApiError": "_errors",
    "EventFence": "_fence",
    "EventProfiler": "_profiler",
    "EventStateError": "_errors",
    "Span": "_profiler",
    "Stats": "_profiler",
    "SupportsCaptureCheck": "_protocol",
    "SupportsEventQuery": "_protocol",
    "SupportsHostFunc": "_protocol",
    "UnsupportedError": "_errors",
    "Window": "_profiler",
    "backend": "_selection",
    "backends": "_discovery",
    "bench": "_bench",
    "hookimpl": "_plugin",
    "hookspec": "_plugin",
}


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
