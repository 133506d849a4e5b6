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
``nvtx`` before a ``cuda`` profiler is created, nor without a tool attached.

The decision runs on a daemon thread of its own, which every constructor that needs it waits
for: an import is the one place where Ctrl-C (delivered to the main thread only) could leave
CPython's import locks held against the other threads building their first profilers. On a
thread of its own the import always finishes; an interrupted constructor raises
:class:`KeyboardInterrupt` from its wait, and the next profiler finds the answer.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Callable
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


def _nvtx_domain() -> Any:
    if not _tool_attached():  # no one listening: not even the import
        return None
    try:
        # Through importlib: the package ships partial type information, and the profiler
        # uses only three calls of it.
        nvtx: Any = importlib.import_module("nvtx")
    except ImportError:
        return None
    try:
        if not nvtx.enabled():  # NVTX_DISABLE
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


def _roctx_domain() -> _Domain | None:
    from ._roctx import domain  # ctypes only, and only for hip

    return domain()


@final
class _Decided:
    """A tool's domain decided once per process, on a daemon thread of its own (see the
    module): None when its ranges are off."""

    __slots__ = ("_decide", "_done", "_name", "_started", "_value")

    def __init__(self, name: str, decide: Callable[[], _Domain | None]) -> None:
        self._name = name
        self._decide = decide
        self._done = threading.Event()
        self._started = False
        self._value: _Domain | None = None
        os.register_at_fork(after_in_child=self._after_fork)

    def get(self) -> _Domain | None:
        """The value, deciding it first (waiting for the thread that does) if need be."""
        if not self._done.is_set():
            if not self._started:
                # Started before it is marked: an interrupt in between leaves it unmarked, and
                # the next caller starts another (a second decision finds the same answer).
                threading.Thread(target=self._run, name=self._name, daemon=True).start()
                self._started = True
            self._done.wait()
        return self._value

    def _run(self) -> None:
        try:
            self._value = self._decide()
        except Exception:  # a broken install must not stop profiling: windows work without it
            _log.warning("%s failed; windows get no tool ranges", self._name, exc_info=True)
        finally:
            self._done.set()

    def _after_fork(self) -> None:
        # A child has no copy of a deciding thread: it counts as started only where the
        # parent had decided, so a child whose parent had not decides again.
        self._started = self._done.is_set()


_DECIDED: Final = {
    "cuda": _Decided("eventapi-nvtx", _nvtx_domain),
    "hip": _Decided("eventapi-roctx", _roctx_domain),
}


def ranges_for(backend: str) -> Ranges | None:
    """The tool ranges for a profiler on ``backend``; None when they are off (see the module)."""
    decided = _DECIDED.get(backend)
    domain = None if decided is None else decided.get()
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
