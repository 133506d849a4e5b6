"""NVTX ranges for profiling windows on ``cuda``, so Nsight Systems shows them on its timeline.

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
from typing import Any, Final, final

__all__ = ["DOMAIN", "NvtxRanges", "ranges_for"]

_log = logging.getLogger("eventapi")

DOMAIN: Final = "eventapi"
"""The NVTX domain of the windows' ranges (Nsight Systems groups ranges by domain)."""

_ATTRIBUTE_CACHE: Final = 1024
"""Window names whose NVTX attributes are kept: a program uses a handful; a name built per
iteration (an f-string with a step number) must not grow the cache without bound."""


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


def ranges_for(backend: str) -> NvtxRanges | None:
    """The NVTX ranges for a profiler on ``backend``; None when they are off (see the module)."""
    if backend != "cuda":
        return None
    domain = _domain()
    return None if domain is None else NvtxRanges(domain)


@final
class NvtxRanges:
    """One profiler's open NVTX ranges: a stack, as its windows nest.

    Used from the profiler's own thread, as the profiler is.
    """

    __slots__ = ("_attributes", "_domain", "_open")

    def __init__(self, domain: Any) -> None:
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
