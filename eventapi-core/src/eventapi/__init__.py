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
# and ruff read any name TYPE_CHECKING as true. Deleted below, so it is not public. Each name is
# imported as itself, which marks it re-exported: __all__ is read off _WHERE at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._bench import bench as bench
    from ._errors import BackendError as BackendError
    from ._errors import BackendNotFoundError as BackendNotFoundError
    from ._errors import BackendUnavailableError as BackendUnavailableError
    from ._errors import CaptureError as CaptureError
    from ._errors import DriverError as DriverError
    from ._errors import EventApiError as EventApiError
    from ._errors import EventStateError as EventStateError
    from ._errors import UnsupportedError as UnsupportedError
    from ._fence import EventFence as EventFence
    from ._plugins._discovery import backends as backends
    from ._plugins._discovery import register_backend as register_backend
    from ._plugins._discovery import unregister_backend as unregister_backend
    from ._plugins._selection import backend as backend
    from ._plugins._spec import PLUGIN_API as PLUGIN_API
    from ._plugins._spec import BackendInfo as BackendInfo
    from ._plugins._spec import BackendSpec as BackendSpec
    from ._plugins._spec import hookimpl as hookimpl
    from ._plugins._spec import hookspec as hookspec
    from ._profiling._anchor import Anchor as Anchor
    from ._profiling._profiler import EventProfiler as EventProfiler
    from ._profiling._profiler import Span as Span
    from ._profiling._profiler import Stats as Stats
    from ._profiling._profiler import Window as Window
    from ._protocol import DeviceClocks as DeviceClocks
    from ._protocol import EventApi as EventApi
    from ._protocol import SupportsCacheFlush as SupportsCacheFlush
    from ._protocol import SupportsCaptureCheck as SupportsCaptureCheck
    from ._protocol import SupportsClocks as SupportsClocks
    from ._protocol import SupportsEventQuery as SupportsEventQuery
    from ._protocol import SupportsFastPath as SupportsFastPath
    from ._protocol import SupportsGraphRecord as SupportsGraphRecord
    from ._protocol import SupportsGraphs as SupportsGraphs
    from ._protocol import SupportsHostFunc as SupportsHostFunc
else:
    # Hidden from type checkers, which see the imports above: to them a name not in that list
    # is an error, as it is at run time.
    def __getattr__(name: str) -> object:
        # Called only for a name not yet in the module's namespace: import its module once,
        # then keep the value here, so later reads are plain attribute reads. The public
        # submodules are attributes too (eventapi.trace after a bare `import eventapi`), and
        # the version is read from the installed distribution's metadata, its one source.
        where = _WHERE.get(name)
        if where is None and name not in _SUBMODULES and name != "__version__":
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from importlib import import_module

        if name == "__version__":
            metadata = import_module(f"{__name__}._metadata")
            value: object = metadata.version_of("eventapi-core") or "0+unknown"
        elif where is None:
            value = import_module(f"{__name__}.{name}")
        else:
            value = getattr(import_module(f"{__name__}.{where}"), name)
        globals()[name] = value
        return value


del TYPE_CHECKING

__version__: str  # read on first use from the distribution's metadata (see __getattr__)

# The public submodules, reachable as attributes without importing them first.
_SUBMODULES = frozenset({"driverkit", "host", "testing", "trace"})

# Where each public name is defined: the same list as the imports above, read at run time, in
# the order of __all__. (The errors carry __module__ = "eventapi" themselves, so a traceback and
# pickle name them here whichever module imported them first.)
_WHERE = {
    "PLUGIN_API": "_plugins._spec",
    "Anchor": "_profiling._anchor",
    "BackendError": "_errors",
    "BackendInfo": "_plugins._spec",
    "BackendNotFoundError": "_errors",
    "BackendSpec": "_plugins._spec",
    "BackendUnavailableError": "_errors",
    "CaptureError": "_errors",
    "DeviceClocks": "_protocol",
    "DriverError": "_errors",
    "EventApi": "_protocol",
    "EventApiError": "_errors",
    "EventFence": "_fence",
    "EventProfiler": "_profiling._profiler",
    "EventStateError": "_errors",
    "Span": "_profiling._profiler",
    "Stats": "_profiling._profiler",
    "SupportsCacheFlush": "_protocol",
    "SupportsCaptureCheck": "_protocol",
    "SupportsClocks": "_protocol",
    "SupportsEventQuery": "_protocol",
    "SupportsFastPath": "_protocol",
    "SupportsGraphRecord": "_protocol",
    "SupportsGraphs": "_protocol",
    "SupportsHostFunc": "_protocol",
    "UnsupportedError": "_errors",
    "Window": "_profiling._profiler",
    "backend": "_plugins._selection",
    "backends": "_plugins._discovery",
    "bench": "_bench",
    "hookimpl": "_plugins._spec",
    "hookspec": "_plugins._spec",
    "register_backend": "_plugins._discovery",
    "unregister_backend": "_plugins._discovery",
}

__all__ = list(_WHERE)  # constants, then classes, then functions, as isort sorts them


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, "__version__"})
