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
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, final

from hip import hip

from eventapi import BackendUnavailableError, DriverError
from eventapi.driverkit import (
    CaptureCheckMixin,
    DriverBackend,
    DriverCalls,
    EventQueryMixin,
    HostFuncMixin,
    compiled_fast_path,
    foreign_stream_handle,
    launch_host_func,
)

from . import _native

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
# The event a stream synchronize waits on (see _native.c): it sleeps, and times nothing.
_SYNC_EVENT_FLAGS = _EVENT_FLAGS | int(hip.hipEventDisableTiming) & _UINT32
# How long a wait queries before it sleeps: as DriverCalls.wait and a fence do.
_SPIN_NS = 100_000

# The runtime calls _native.c makes, in the order it takes them (the prototypes it declares
# are HIP's own: hipEventCreateWithFlags(hipEvent_t *, unsigned) ...).
_NATIVE_CALLS = (
    "hipEventCreateWithFlags",
    "hipEventDestroy",
    "hipEventRecord",
    "hipEventQuery",
    "hipEventSynchronize",
    "hipEventElapsedTime",
    "hipStreamCreateWithFlags",
    "hipStreamDestroy",
    "hipStreamWaitEvent",
    "hipStreamSynchronize",
    "hipStreamIsCapturing",
)


def _text(call: Callable[[Any], tuple[Any, Any]], status: Any) -> str | None:
    if not hip.has_symbol(call.__name__):
        return None
    value = call(status)[1]
    return bytes(value).decode() if value else None


def _describe(status: Any) -> tuple[str | None, str | None]:
    if not isinstance(status, _HipError):  # a code from _native.c: hip-python takes its enum
        try:
            status = _HipError(int(status))
        except ValueError:
            return None, None
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

# The fast path's common case in C, on driverkit's own handles: _native.FastPath, first among
# the backend's bases, takes six of the fast path's calls and hands anything else to the
# driverkit methods (see eventapi.driverkit.compiled_fast_path). It reads whether the context
# is lost from _call, which is what _context_lost() returns.
_native.configure_fast_path(*compiled_fast_path(), _call)


# Whether this process called the runtime; in a child forked after that, nothing may call it.
_used = False
_forked_after_use = False
_configure_lock = threading.Lock()
_configured = False


def _after_fork_in_child() -> None:
    global _forked_after_use, _configure_lock
    _forked_after_use = _forked_after_use or _used
    _configure_lock = threading.Lock()  # another parent thread may have held it at the fork


def _configure_native() -> None:
    # The addresses of the calls _native.c makes, from the one HIP runtime in the process:
    # the library hip-python opened (by absolute path, where it found ROCm), looked up without
    # loading it (RTLD_NOLOAD). A second copy of the runtime would be a second runtime, whose
    # handles mean nothing to the first.
    global _configured
    with _configure_lock:
        if _configured:
            return
        import ctypes

        from rocm.bindings.util.paths import get_library_path

        path = os.fsdecode(get_library_path("amdhip64"))
        try:
            library = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
            addresses = tuple(
                int(ctypes.cast(getattr(library, name), ctypes.c_void_p).value or 0)
                for name in _NATIVE_CALLS
            )
        except (OSError, AttributeError) as exc:
            raise BackendUnavailableError(
                f"hip: the HIP runtime hip-python loaded ({path}) has not every call this "
                f"backend makes ({exc}); install the ROCm version hip-python was built for"
            ) from exc
        _native.configure(
            addresses,
            _NATIVE_CALLS,
            _native_failure,
            int(_HipError.hipErrorNotReady),
            _SYNC_EVENT_FLAGS,
            _SPIN_NS,
        )
        _configured = True


def _native_failure(call: str, status: int) -> DriverError:
    # The error of a call _native.c made; once the device is lost, it calls the runtime no more.
    error = _call.failure(call, status)
    if _call.lost is not None:
        _native.lose(_call.lost.code)
    return error


os.register_at_fork(after_in_child=_after_fork_in_child)


@final
class HipBackend(
    _native.FastPath,
    EventQueryMixin[int, int],
    CaptureCheckMixin[int, int],
    HostFuncMixin[int, int],
):
    """The HIP runtime's events and streams on one device.

    Build it with ``eventapi.backend("hip")`` or ``eventapi.backend("hip:N")``, which cache one
    object per device; constructing one directly is fine too. Events are created with timing
    enabled and ``hipEventBlockingSync`` (``event_wait`` queries for up to 100 µs, then sleeps
    instead of spinning), streams with ``hipStreamNonBlocking``; ``stream_synchronize`` waits as
    ``event_wait`` does, on a blocking-sync event recorded into the stream, whatever the
    device's scheduling flag (by default the runtime's own synchronize spins or yields).
    Handles are ints, the runtime's pointers: ``Stream.raw`` is the stream's address. Every runtime
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
        _configure_native()  # hip-python has loaded the runtime by now

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

    def _new_lock(self) -> AbstractContextManager[object]:
        # _native.FastPath takes this one without a method call (see _native.c, "Lock").
        return _native.Lock()

    # -- threads and devices ------------------------------------------------------------------

    def _on_device(self, call: Callable[..., None], *args: object) -> None:
        # Events and streams are made on the current device, and a stream synchronize waits
        # on an event made there: this backend's, switched to for the call and back.
        if self._only_device:
            call(*args)
            return
        current = _call(hip.hipGetDevice)
        if current == self._ordinal:
            call(*args)
            return
        try:
            # Inside the try: an interrupt can land as the switch returns, and switching back
            # to the device the thread had is right whether or not it switched.
            _call(hip.hipSetDevice, self._ordinal)
            call(*args)
        finally:
            _call(hip.hipSetDevice, current)

    def _exported_handle(self, raw: int) -> int:
        # The handle is the stream's address, as __cuda_stream__ gives it to a framework.
        return raw

    def _adopt_stream(self, stream: object) -> int | None:
        return foreign_stream_handle(self.BACKEND, stream, native=(hip.ihipStream_t,))

    # -- the runtime calls --------------------------------------------------------------------
    #
    # Handles are ints (the runtime's pointers). The hot calls are _native.c's, made on the
    # runtime directly (docs/native.md); the rest go through hip-python.

    def _raw_event_create(self) -> int:
        created: list[int] = []
        self._raw_event_create_into(created.append)
        return created[0]

    def _raw_event_create_into(self, store: Callable[[int], None]) -> None:
        self._on_device(_native.event_create, _EVENT_FLAGS, store)

    def _raw_stream_create_non_blocking(self) -> int:
        created: list[int] = []
        self._raw_stream_create_into(created.append)
        return created[0]

    def _raw_stream_create_into(self, store: Callable[[int], None]) -> None:
        self._on_device(_native.stream_create, _STREAM_FLAGS, store)

    def _raw_stream_synchronize(self, stream: int) -> None:
        self._on_device(_native.stream_synchronize, stream)

    # The other raw calls are _native's functions themselves, bound as static methods: the
    # base's call reaches C with no Python frame between. (mypy types a staticmethod as its
    # callable, without the self of the method it overrides; _native.pyi gives the types.)
    # HIP can read slightly negative for events stamped close together; the base clamps.
    _raw_event_elapsed_ns = staticmethod(_native.event_elapsed_ns)  # type: ignore[assignment]
    _raw_event_elapsed_ns_many = staticmethod(_native.event_elapsed_ns_many)  # type: ignore[assignment]
    _raw_event_destroy = staticmethod(_native.event_destroy)  # type: ignore[assignment]
    _raw_event_destroy_from = staticmethod(_native.event_destroy_from)  # type: ignore[assignment]
    _raw_event_record = staticmethod(_native.event_record)  # type: ignore[assignment]
    _raw_event_record_unless_capturing = staticmethod(_native.event_record_unless_capturing)  # type: ignore[assignment]
    _raw_event_wait = staticmethod(_native.event_wait)  # type: ignore[assignment]
    _raw_event_query = staticmethod(_native.event_query)  # type: ignore[assignment]
    _raw_stream_wait_event = staticmethod(_native.stream_wait_event)  # type: ignore[assignment]
    _raw_stream_destroy = staticmethod(_native.stream_destroy)  # type: ignore[assignment]
    _raw_stream_destroy_from = staticmethod(_native.stream_destroy_from)  # type: ignore[assignment]
    # Active and Invalidated both refuse a timing event; only None (0) is free.
    _raw_stream_is_capturing = staticmethod(_native.stream_is_capturing)  # type: ignore[assignment]

    def _raw_launch_host_func(self, stream: int, fn: Callable[[], object]) -> None:
        launch_host_func(
            self.BACKEND,
            fn,
            lambda address, key: _call(hip.hipLaunchHostFunc, stream, address, key),
        )


if TYPE_CHECKING:

    def _conforms(backend: HipBackend) -> None:
        _api: EventApi[Event[int], Stream[int]] = backend
        _query: SupportsEventQuery[Event[int]] = backend
        _capture: SupportsCaptureCheck[Stream[int]] = backend
        _host_func: SupportsHostFunc[Stream[int]] = backend
