"""The classes that add an optional capability to a :class:`~eventapi.driverkit.DriverBackend`.

:class:`EventQueryMixin`, :class:`CaptureCheckMixin` and :class:`HostFuncMixin`: a backend lists
the ones its driver can do before ``DriverBackend`` in its bases and spells their ``_raw_*``
call; each adds the public method built on that call. Part of :mod:`eventapi.driverkit`, which
users import these from.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._arguments import bounded_repr
from .._errors import CaptureError
from ._backend import DriverBackend
from ._handles import RE, RS, Event, Stream

if TYPE_CHECKING:
    from .._protocol import (
        EventApi,
        SupportsCaptureCheck,
        SupportsEventQuery,
        SupportsFastPath,
        SupportsHostFunc,
    )

__all__ = ["CaptureCheckMixin", "EventQueryMixin", "HostFuncMixin"]


class EventQueryMixin(DriverBackend[RE, RS]):
    """Adds :class:`~eventapi.SupportsEventQuery` (``event_query``) to a :class:`DriverBackend`.

    List it before ``DriverBackend`` in the class's bases and spell
    :meth:`_raw_event_query`.
    """

    @abstractmethod
    def _raw_event_query(self, event: RE) -> bool:
        """True when the device reached ``event``'s latest record; never blocks."""

    def event_query(self, event: Event[RE] | object) -> bool:
        """True when the device reached ``event``; never blocks.

        ``event`` may be a sibling device's (see :meth:`DriverBackend._shares_handles_with`).
        """
        owner, event = self._event_owner(event, "event_query")
        if not getattr(owner._tls, "bound", False):
            owner._ensure_thread("event_query")
        # A query never blocks, and a fence's wait makes many: the lock is held across it instead
        # of counting the event in and out (as in event_record_unless_capturing).
        with owner._lock:
            if event._closed:
                owner._refuse_closed(event, "event_query")
            return owner._raw_event_query(event._raw)


class CaptureCheckMixin(DriverBackend[RE, RS]):
    """Adds :class:`~eventapi.SupportsCaptureCheck` (``stream_is_capturing``).

    List it before ``DriverBackend`` in the class's bases and spell
    :meth:`_raw_stream_is_capturing`. With it, :class:`HostFuncMixin` also refuses a host
    function on a capturing stream.
    """

    @abstractmethod
    def _raw_stream_is_capturing(self, stream: RS) -> bool:
        """True while ``stream`` captures a graph: active, or invalidated and not yet ended."""

    def stream_is_capturing(self, stream: Stream[RS] | object) -> bool:
        """True while ``stream`` is capturing a graph."""
        with self._hold_stream(stream, "stream_is_capturing") as raw:
            return self._raw_stream_is_capturing(raw)


class HostFuncMixin(DriverBackend[RE, RS]):
    """Adds :class:`~eventapi.SupportsHostFunc` (``stream_launch_host_func``).

    List it before ``DriverBackend`` in the class's bases and spell
    :meth:`_raw_launch_host_func` (:func:`launch_host_func` does the C side for a binding
    that takes a C function pointer and a user-data pointer).
    """

    @abstractmethod
    def _raw_launch_host_func(self, stream: RS, fn: Callable[[], object]) -> None:
        """Enqueue ``fn()`` to run on a driver thread when ``stream`` reaches this point."""

    def stream_launch_host_func(
        self, stream: Stream[RS] | object, fn: Callable[[], object]
    ) -> None:
        """Run ``fn()`` on a driver thread when ``stream`` reaches this point.

        Raises :class:`~eventapi.CaptureError` when the backend can tell (it also has
        :class:`CaptureCheckMixin`) that ``stream`` is capturing a graph: a host function
        captured into a graph runs on the graph's first launch only, and is held forever when
        the graph is never launched.
        """
        if not callable(fn):
            raise TypeError(f"stream_launch_host_func needs a callable, got {bounded_repr(fn)}")
        handle = self._stream(stream, "stream_launch_host_func")
        self._enter("stream_launch_host_func", handle)
        try:
            if self._raw_stream_is_capturing(handle._raw):
                raise CaptureError(
                    f"{self.BACKEND}: stream_launch_host_func refused on {handle!r}: the stream "
                    "is capturing a graph, where a host function would run on the graph's first "
                    "launch only; launch it after the capture ends, or on another stream"
                )
            self._raw_launch_host_func(handle._raw, fn)
        finally:
            self._leave(handle)


if TYPE_CHECKING:

    class _AllCapabilities(
        EventQueryMixin[object, object],
        CaptureCheckMixin[object, object],
        HostFuncMixin[object, object],
    ):
        BACKEND = "all"

    def _conforms(backend: DriverBackend[object, object], full: _AllCapabilities) -> None:
        _api: EventApi[Event[object], Stream[object]] = backend
        _fast: SupportsFastPath[Event[object], Stream[object]] = backend
        _query: SupportsEventQuery[Event[object]] = full
        _capture: SupportsCaptureCheck[Stream[object]] = full
        _host_func: SupportsHostFunc[Stream[object]] = full
