"""The classes that add an optional capability to a :class:`~eventapi.driverkit.DriverBackend`.

:class:`EventQueryMixin`, :class:`CaptureCheckMixin` and :class:`HostFuncMixin`: a backend lists
the ones its driver can do before ``DriverBackend`` in its bases and spells their ``_raw_*``
call. Each only declares that call and names the public method, whose body is
``DriverBackend``'s own (``_event_query``, ``_stream_is_capturing``,
``_stream_launch_host_func``). That is for the compiled build of the core
(:doc:`/native`): ``DriverBackend`` compiles to a native class, and these cannot, since a
backend inherits from several of them at once. Named this way, the capability's body runs as
natively as the rest of the handle layer, and no Python frame stands between the public method
and it. Part of :mod:`eventapi.driverkit`, which users import these from; this module is never
compiled.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING

from ._backend import DriverBackend
from ._handles import RE, RS

if TYPE_CHECKING:
    from .._protocol import (
        EventApi,
        SupportsCaptureCheck,
        SupportsEventQuery,
        SupportsFastPath,
        SupportsHostFunc,
    )
    from ._handles import Event, Stream

__all__ = ["CaptureCheckMixin", "EventQueryMixin", "HostFuncMixin"]


class EventQueryMixin(DriverBackend[RE, RS]):
    """Adds :class:`~eventapi.SupportsEventQuery` (``event_query``) to a :class:`DriverBackend`.

    List it before ``DriverBackend`` in the class's bases and spell
    :meth:`_raw_event_query`.
    """

    @abstractmethod
    def _raw_event_query(self, event: RE) -> bool:
        """True when the device reached ``event``'s latest record; never blocks."""

    event_query = DriverBackend._event_query


class CaptureCheckMixin(DriverBackend[RE, RS]):
    """Adds :class:`~eventapi.SupportsCaptureCheck` (``stream_is_capturing``).

    List it before ``DriverBackend`` in the class's bases and spell
    :meth:`_raw_stream_is_capturing`. With it, :class:`HostFuncMixin` also refuses a host
    function on a capturing stream.
    """

    @abstractmethod
    def _raw_stream_is_capturing(self, stream: RS) -> bool:
        """True while ``stream`` captures a graph: active, or invalidated and not yet ended."""

    stream_is_capturing = DriverBackend._stream_is_capturing


class HostFuncMixin(DriverBackend[RE, RS]):
    """Adds :class:`~eventapi.SupportsHostFunc` (``stream_launch_host_func``).

    List it before ``DriverBackend`` in the class's bases and spell
    :meth:`_raw_launch_host_func` (:func:`launch_host_func` does the C side for a binding
    that takes a C function pointer and a user-data pointer).
    """

    @abstractmethod
    def _raw_launch_host_func(self, stream: RS, fn: Callable[[], object]) -> None:
        """Enqueue ``fn()`` to run on a driver thread when ``stream`` reaches this point."""

    stream_launch_host_func = DriverBackend._stream_launch_host_func


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
