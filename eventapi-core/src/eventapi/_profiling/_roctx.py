"""roctx ranges for profiling windows on ``hip``, so ROCm's profilers show them as markers.

When a ROCm profiler traces markers, an :class:`~eventapi.EventProfiler` on a ``hip`` backend
also opens a roctx range for each window it records, named as the window, from the window's
start to its stop: ``roctxRangeStartA`` and ``roctxRangeStop``, not push/pop, since a range is
not tied to the thread that opened it, and ranges that contain one another show nested, as
the windows are. As with NVTX on ``cuda``, the range marks when the host *enqueued* the
window; the window's device time is the profiler's to read.

A profiler traces markers when ``ROCPROF_MARKER_API_TRACE`` is set (what
``rocprofv3 --marker-trace`` sets for the programs it runs). The roctx library is then the one
already in the process (``rocprofv3`` preloads its own), else the first of
:data:`LIBRARIES` the dynamic loader finds (``LD_LIBRARY_PATH``, the loader's cache), else the
first under ``$ROCM_PATH/lib`` (default ``/opt/rocm/lib``). Without the variable, or without a
library, no library is loaded and the profiler holds ``None``: a window pays one ``is None``
test. The decision is taken once per process, when the first ``hip`` profiler is created
(through :func:`eventapi._profiling._nvtx.ranges_for`).
"""

from __future__ import annotations

import ctypes
import logging
import os
from typing import Final, final

__all__ = ["LIBRARIES", "RoctxDomain", "domain"]

_log = logging.getLogger("eventapi")

LIBRARIES: Final = ("librocprofiler-sdk-roctx.so.1", "libroctx64.so.4", "libroctx64.so")
"""The roctx libraries looked for by name, in order: ROCprofiler-SDK's, then roctracer's."""

_TRACING: Final = "ROCPROF_MARKER_API_TRACE"
_OFF: Final = frozenset({"", "0", "false", "no", "off"})


@final
class RoctxDomain:
    """The three calls a profiler's ranges make, spelled on roctx (as NVTX's domain spells them).

    ``get_event_attributes(message=name)`` gives what ``start_range`` takes: the name encoded.
    ``start_range(attributes)`` is ``roctxRangeStartA``, which opens a range and returns its id;
    ``end_range(range_id)`` is ``roctxRangeStop``, which closes it.
    """

    __slots__ = ("end_range", "start_range")

    def __init__(self, library: ctypes.CDLL) -> None:
        self.start_range = library.roctxRangeStartA
        self.start_range.argtypes = [ctypes.c_char_p]
        self.start_range.restype = ctypes.c_uint64
        self.end_range = library.roctxRangeStop
        self.end_range.argtypes = [ctypes.c_uint64]
        self.end_range.restype = None

    def get_event_attributes(self, *, message: str) -> bytes:
        """``message`` as roctx takes it (a C string: an embedded NUL would end it)."""
        return message.encode("utf-8", "replace").replace(b"\0", b" ")


def domain() -> RoctxDomain | None:
    """roctx's calls when a profiler traces markers and a library is found; else None.

    Called once per process, by :func:`eventapi._profiling._nvtx.ranges_for`."""
    if os.environ.get(_TRACING, "").strip().lower() in _OFF:
        return None
    library = _library()
    if library is None:
        _log.info("%s is set but no roctx library was found; windows get no roctx ranges", _TRACING)
        return None
    try:
        return RoctxDomain(library)
    except AttributeError:  # a library of that name without the calls: profile without ranges
        _log.warning("%r has no roctxRangeStartA; windows get no roctx ranges", library)
        return None


def _library() -> ctypes.CDLL | None:
    root = os.environ.get("ROCM_PATH") or "/opt/rocm"
    # The process itself (None) first, taken only where a profiler preloaded its roctx.
    for path in (None, *LIBRARIES, *(os.path.join(root, "lib", name) for name in LIBRARIES)):
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        if path is not None or hasattr(library, "roctxRangeStartA"):
            return library
    return None
