"""The ``hip`` backend: the event and stream calls spelled on hip-python's ``hip.hip``.

Devices. HIP keeps a current *device* per thread and needs nothing else made current: every
event and stream handle carries its device, so a thread that never made a HIP call can wait on
a fence recorded elsewhere as it is. A backend object therefore leaves each thread's current
device alone (setting it on first use would silently move the caller's own HIP work to this
device). Creating an event or a stream switches to this backend's device for the call and
back, so a thread working on another device still creates on this one. The one call that
depends on the current device is a raw ``0`` (the null stream): HIP resolves it on the calling
thread's current device, so use it from a thread working on this backend's device.

Objects of two devices share some handles, as the runtime does: a stream of one may wait on an
event of the other (``stream_wait_event``), and any thread may wait on or query any device's
event. Recording an event into another device's stream and timing events of two devices are
refused in Python (:class:`~eventapi.EventStateError`). Two objects of one device (one from
``eventapi.backend()``, one built directly) own their handles separately.

Faults. The errors after which HIP fails every later call of the process (an illegal address,
a failed launch, a device-side assert, an uncorrectable ECC error) lose the device: the first
raises a :class:`~eventapi.DriverError` saying so, later calls raise it at once without
calling the runtime, and handles left over are not destroyed one by one (logged once).

Fork. The HIP runtime cannot be used in a child forked after the parent used it. In such a
child this module refuses to build a backend object
(:class:`~eventapi.BackendUnavailableError`), the parent's objects refuse every call, and
nothing collected there calls the runtime.

hip-python facts this module relies on, checked against the binding's source
(``rocm/bindings/hip.pyx``, ``cyhip.pyx``):

* the library is opened lazily, symbol by symbol, at the first call: a missing
  ``libamdhip64.so`` or symbol is a ``RuntimeError`` there, which :class:`DriverCalls`
  translates (and the constructor turns into :class:`~eventapi.BackendUnavailableError`);
* ``hipGetErrorName``/``hipGetErrorString`` are declared not to raise: without the library
  (or the symbol) they print an "Exception ignored" traceback and return success with
  ``None``, so they are called only once ``has_symbol`` confirmed the symbol, and a ``None``
  falls back to the enum's own name;
* ``hipEventSynchronize`` and ``hipStreamSynchronize`` release the GIL (``with nogil``), so a
  host function that needs the GIL runs while another thread blocks in a wait;
* a few flag constants are exported as signed ints (``hipEventReleaseToSystem`` is
  ``-2147483648``); the flags used here are masked to the unsigned 32 bits the C API takes.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, final

from hip import hip

from eventapi import BackendUnavailableError, DriverError
from eventapi.driverkit import (
    CaptureCheckMixin,
    DriverBackend,
    DriverCalls,
    EventQueryMixin,
    HostFuncMixin,
    foreign_stream_handle,
    launch_host_func,
    ms_to_ns,
)

if TYPE_CHECKING:
    from eventapi import EventApi, SupportsCaptureCheck, SupportsEventQuery, SupportsHostFunc
    from eventapi.driverkit import Event, Stream

__all__ = ["HipBackend"]

_HipError = hip.hipError_t
_UINT32 = 0xFFFF_FFFF
# Timing enabled: hipEventDisableTiming would drop exactly the timestamp a profiler reads.
# Blocking sync: hipEventSynchronize on an event without it busy-waits, a core burnt per
# waiting thread for the whole wait; with it the thread sleeps until the device reaches the
# event. event_wait queries for 100 us first, so a short wait still wakes as fast as a spin.
_EVENT_FLAGS = int(hip.hipEventBlockingSync) & _UINT32
_STREAM_FLAGS = int(hip.hipStreamNonBlocking) & _UINT32


def _text(call: Callable[[Any], tuple[Any, Any]], status: Any) -> str | None:
    if not hip.has_symbol(call.__name__):
        return None
    value = call(status)[1]
    return bytes(value).decode() if value else None


def _describe(status: Any) -> tuple[str | None, str | None]:
    return _text(hip.hipGetErrorName, status), _text(hip.hipGetErrorString, status)


_call = DriverCalls(
    "hip",
    describe=_describe,
    not_ready=_HipError.hipErrorNotReady,
    missing=_HipError.hipErrorSharedObjectSymbolNotFound,
    missing_hint="install ROCm's HIP runtime (libamdhip64.so) where the loader finds it "
    "(ROCM_PATH or LD_LIBRARY_PATH), or update it to the version hip-python was built for",
    # HIP's counterparts of CUDA's sticky errors: the process must restart after one.
    sticky=(
        _HipError.hipErrorECCNotCorrectable,
        _HipError.hipErrorIllegalAddress,
        _HipError.hipErrorLaunchTimeOut,
        _HipError.hipErrorAssert,
        _HipError.hipErrorLaunchFailure,
    ),
)


def _stream_is_capturing(stream: Any) -> tuple[Any, Any]:
    """``hipStreamIsCapturing``, its one quirk answered as the failure it is.

    The runtime leaves the capture status unset when the call fails, and hip-python converts
    that unset value to ``hipStreamCaptureStatus`` before it returns the error code, raising
    :class:`ValueError` and losing the code. The call failed: it reads as ``hipErrorUnknown``.
    """
    binding: Any = hip  # hip-python's functions carry no annotations
    try:
        result: tuple[Any, Any] = binding.hipStreamIsCapturing(stream)
    except ValueError:
        return _HipError.hipErrorUnknown, None
    return result


_stream_is_capturing.__name__ = "hipStreamIsCapturing"  # the call a DriverError names

# Whether this process called the runtime; in a child forked after that, nothing may call it.
_used = False
_forked_after_use = False


def _after_fork_in_child() -> None:
    global _forked_after_use
    _forked_after_use = _forked_after_use or _used


os.register_at_fork(after_in_child=_after_fork_in_child)


@final
class HipBackend(EventQueryMixin[Any, Any], CaptureCheckMixin[Any, Any], HostFuncMixin[Any, Any]):
    """The HIP runtime's events and streams on one device.

    Build it with ``eventapi.backend("hip")`` or ``eventapi.backend("hip:N")``, which cache one
    object per device; constructing one directly is fine too. Events are created with timing
    enabled and ``hipEventBlockingSync`` (``event_wait`` queries for up to 100 µs, then sleeps
    instead of spinning), streams with ``hipStreamNonBlocking``; ``stream_synchronize`` waits as
    the device's scheduling flag says (by default the runtime spins or yields). Every runtime
    failure raises :class:`~eventapi.DriverError` with the runtime's own name and text for the
    code. Besides its own streams, any call taking a stream accepts a raw integer handle (``0``:
    the null stream of the calling thread's current device), a ``hip.ihipStream_t``, or an
    object with ``__cuda_stream__`` (PyTorch and CuPy built for ROCm speak the CUDA protocol
    with HIP handles; there is no HIP-named protocol). Such handles are trusted as given, since
    the runtime cannot validate them, and are never destroyed here.

    Raises :class:`~eventapi.BackendUnavailableError` when the runtime library is missing,
    there is no device ``device``, or the process was forked after its parent used HIP. See the
    module docstring for what it does with another device's handles, with sticky errors and
    after ``fork()``.
    """

    BACKEND = "hip"
    # A closed fence's driver event serves the next fence: one create and destroy saved per
    # fence (and the device check before a create). See DriverBackend.SPARE_EVENTS.
    SPARE_EVENTS = 16

    __slots__ = ("_only_device", "_ordinal")

    def __init__(self, device: int = 0) -> None:
        ordinal = operator.index(device)
        if ordinal < 0:
            raise ValueError(f"hip: device must be a device index >= 0, got {ordinal}")
        global _used
        if _forked_after_use:
            raise BackendUnavailableError(
                "hip: this process was forked after its parent used the HIP runtime, which "
                "cannot be used in such a child; start worker processes with multiprocessing's "
                "'spawn' or 'forkserver' method, or use HIP only after fork()"
            )
        super().__init__()
        self._ordinal = ordinal
        _used = True  # set before the call: a runtime that started initializing is in use
        try:
            count = _call(hip.hipGetDeviceCount)
        except DriverError as exc:
            if exc.code != _HipError.hipErrorNoDevice:
                raise BackendUnavailableError(
                    f"hip: device {ordinal} cannot be used: {exc}"
                ) from exc
            count = 0
        # The visible devices are fixed when the runtime starts (HIP_VISIBLE_DEVICES): with
        # one, every thread's current device is it, and a create need not ask.
        self._only_device = count == 1
        if ordinal >= count:
            raise BackendUnavailableError(
                f"hip: no HIP device {ordinal}: {count} visible (devices 0 to {count - 1}; "
                "check HIP_VISIBLE_DEVICES)"
                if count
                else "hip: no HIP device visible (hipGetDeviceCount returned 0)"
            )

    @property
    def device(self) -> int:
        """The device index this backend object was built for."""
        return self._ordinal

    def __repr__(self) -> str:
        return f"<HipBackend device={self._ordinal}>"

    def _shares_handles_with(self, other: DriverBackend[Any, Any]) -> bool:
        return type(other) is HipBackend and other._ordinal != self._ordinal

    def _context_lost(self) -> DriverError | None:
        return _call.lost

    # -- threads and devices ------------------------------------------------------------------

    def _create_on_device(self, create: Callable[..., Any], flags: int) -> Any:
        if self._only_device:
            return _call(create, flags)
        current = _call(hip.hipGetDevice)
        if current == self._ordinal:
            return _call(create, flags)
        _call(hip.hipSetDevice, self._ordinal)
        try:
            return _call(create, flags)
        finally:
            _call(hip.hipSetDevice, current)

    def _exported_handle(self, raw: Any) -> int:
        # The handle's address, as __cuda_stream__ gives it to a framework adopting the stream.
        return int(raw)

    def _adopt_stream(self, stream: object) -> Any:
        handle = foreign_stream_handle(self.BACKEND, stream, native=(hip.ihipStream_t,))
        return None if handle is None else hip.ihipStream_t.fromObj(handle)

    # -- the runtime calls --------------------------------------------------------------------

    def _raw_event_create(self) -> Any:
        return self._create_on_device(hip.hipEventCreateWithFlags, _EVENT_FLAGS)

    def _raw_event_destroy(self, event: Any) -> None:
        _call(hip.hipEventDestroy, event)

    def _raw_event_record(self, event: Any, stream: Any) -> None:
        _call(hip.hipEventRecord, event, stream)

    def _raw_event_wait(self, event: Any) -> None:
        # Queries first, then sleeps in the synchronize of a blocking-sync event (the binding
        # releases the GIL): see DriverCalls.wait.
        _call.wait(hip.hipEventSynchronize, hip.hipEventQuery, event)

    def _raw_event_query(self, event: Any) -> bool:
        return _call.ready(hip.hipEventQuery, event)

    def _raw_event_elapsed_ns(self, start: Any, end: Any) -> int:
        # HIP can read slightly negative for events stamped close together; the base clamps.
        return ms_to_ns(_call(hip.hipEventElapsedTime, start, end))

    def _raw_event_elapsed_ns_many(self, starts: list[Any], ends: list[Any]) -> list[int]:
        return list(map(ms_to_ns, _call.each(hip.hipEventElapsedTime, starts, ends)))

    def _raw_stream_wait_event(self, stream: Any, event: Any) -> None:
        _call(hip.hipStreamWaitEvent, stream, event, 0)

    def _raw_stream_synchronize(self, stream: Any) -> None:
        _call(hip.hipStreamSynchronize, stream)

    def _raw_stream_create_non_blocking(self) -> Any:
        return self._create_on_device(hip.hipStreamCreateWithFlags, _STREAM_FLAGS)

    def _raw_stream_destroy(self, stream: Any) -> None:
        _call(hip.hipStreamDestroy, stream)

    def _raw_stream_is_capturing(self, stream: Any) -> bool:
        # Active and Invalidated both refuse a timing event; only None (0) is free.
        return bool(int(_call(_stream_is_capturing, stream)))

    def _raw_event_record_unless_capturing(self, event: Any, stream: Any) -> bool:
        return _call.record_unless_capturing(
            _stream_is_capturing, hip.hipEventRecord, event, stream
        )

    def _raw_launch_host_func(self, stream: Any, fn: Callable[[], object]) -> None:
        launch_host_func(
            self.BACKEND,
            fn,
            lambda address, key: _call(hip.hipLaunchHostFunc, stream, address, key),
        )


if TYPE_CHECKING:

    def _conforms(backend: HipBackend) -> None:
        _api: EventApi[Event[Any], Stream[Any]] = backend
        _query: SupportsEventQuery[Event[Any]] = backend
        _capture: SupportsCaptureCheck[Stream[Any]] = backend
        _host_func: SupportsHostFunc[Stream[Any]] = backend
