"""Tool ranges for profiling windows: NVTX on ``cuda`` (Nsight Systems), roctx on ``hip``.

:func:`ranges_for` decides, once per backend name, whether a profiler's windows are also
ranges of a profiling tool: on ``cuda`` NVTX ranges, as below; on ``hip`` roctx ranges, when a
ROCm profiler traces markers (see :mod:`._roctx`); on any other backend none. Either way the
profiler holds one :class:`Ranges` or ``None``.

When the ``nvtx`` package is installed, an :class:`~eventapi.EventProfiler` on a ``cuda``
backend also opens an NVTX start/end range in the domain ``"eventapi"`` for each window it
records, named as the window, from the window's start to its stop (start/end ranges, not
push/pop: a range is not tied to the thread that opened it, and Nsight draws ranges that
contain one another nested, as the windows are). The range marks when the host *enqueued* the
window; the window's device time is the profiler's to read.

The decision is taken once per process, when the first ``cuda`` profiler is created: without
the package, on another backend, with ``NVTX_DISABLE`` set, or with no NVTX tool attached to
the process, the profiler holds ``None`` and a window pays one ``is None`` test. A tool
attaches as NVTX defines it: NVTX loads the library that ``NVTX_INJECTION64_PATH`` names (what
Nsight Systems sets for the programs it runs), or one already in the process exports
``InitializeInjectionNvtx2_fnptr``. Without one every NVTX call returns at once, so the ranges
would reach nobody and would only cost each window their two calls. Nothing here imports
``nvtx`` before a ``cuda`` profiler is created.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
from typing import Any, Final, Protocol, final

__all__ = ["DOMAIN", "Ranges", "ranges_for"]

_log = logging.getLogger("eventapi")

DOMAIN: Final = "eventapi"
"""The NVTX domain of the windows' ranges (Nsight Systems groups ranges by domain)."""

_ATTRIBUTE_CACHE: Final = 1024
"""Window names whose attributes are kept: a program uses a handful; a name built per
iteration (an f-string with a step number) must not grow the cache without bound."""


class _Domain(Protocol):
    """What :class:`Ranges` calls: an NVTX domain, or roctx spelled as one."""

    def get_event_attributes(self, *, message: str) -> Any: ...

    def start_range(self, attributes: Any) -> int: ...

    def end_range(self, range_id: int, /) -> None: ...


@functools.cache
def _domain() -> Any:
    try:
        # Through importlib: the package ships partial type information, and the profiler
        # uses only three calls of it.
        nvtx: Any = importlib.import_module("nvtx")
    except ImportError:
        return None
    try:
        if not nvtx.enabled() or not _tool_attached():  # NVTX_DISABLE, or no one listening
            return None
        return nvtx.get_domain(DOMAIN)
    except Exception:  # a broken install must not stop profiling: windows work without it
        _log.warning("nvtx is installed but unusable; windows get no NVTX ranges", exc_info=True)
        return None


def _tool_attached() -> bool:
    """True when NVTX will hand ranges to a tool: see the module docstring."""
    if os.environ.get("NVTX_INJECTION64_PATH"):
        return True
    import ctypes

    try:
        process = ctypes.CDLL(None)
    except OSError:
        return False
    return hasattr(process, "InitializeInjectionNvtx2_fnptr")


def ranges_for(backend: str) -> Ranges | None:
    """The tool ranges for a profiler on ``backend``; None when they are off (see the module)."""
    domain: _Domain | None
    if backend == "cuda":
        domain = _domain()
    elif backend == "hip":
        from ._roctx import domain as roctx_domain  # ctypes only, and only for hip

        domain = roctx_domain()
    else:
        return None
    return None if domain is None else Ranges(domain)


@final
class Ranges:
    """One profiler's open tool ranges: a stack, as its windows nest.

    Used from the profiler's own thread, as the profiler is.
    """

    __slots__ = ("_attributes", "_domain", "_open")

    def __init__(self, domain: _Domain) -> None:
        self._domain = domain
        self._open: list[int] = []
        self._attributes: dict[str, Any] = {}

    def start(self, name: str) -> None:
        """Open a range named ``name``, inside those still open."""
        attributes = self._attributes.get(name)
        if attributes is None:
            if len(self._attributes) >= _ATTRIBUTE_CACHE:
                self._attributes.clear()
            attributes = self._attributes[name] = self._domain.get_event_attributes(message=name)
        self._open.append(self._domain.start_range(attributes))

    def end(self, count: int = 1) -> None:
        """End the ``count`` innermost open ranges, innermost first."""
        for _ in range(min(count, len(self._open))):
            self._domain.end_range(self._open.pop())

    def end_all(self) -> None:
        """End every open range (the profiler closed with windows open)."""
        self.end(len(self._open))
