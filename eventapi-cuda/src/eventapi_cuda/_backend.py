"""The ``cuda`` backend: the event and stream calls spelled on ``cuda.bindings.driver``.

Contexts. The driver is initialized once per process (``cuInit``, thread-safe). Each backend
object retains its device's *primary context* (the one the CUDA runtime, PyTorch, CuPy and
cuda.core share) once, and releases it when the backend object is garbage-collected; every
handle holds its backend object, so the context outlives every handle made in it. Objects
cached by ``eventapi.backend()`` live for the process, and their context is left to the
driver's own teardown at exit: releasing it earlier would pull it from under handles that
finalizers may still destroy.

Threads. A thread's first call through a backend object makes the primary context current on
that thread if the thread has none (a thread that never made a CUDA call can wait on a fence
recorded elsewhere). Creating an event or a stream pushes this backend's context for the
call when another one is current, so a thread working on another device still creates on
this one. The other calls take handles that carry their context; only the legacy default
stream (a raw ``0``) means "the current context's", which is why a thread with no context is
given this backend's.
"""

from __future__ import annotations

import logging
import operator
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, final

from cuda.bindings import driver

from eventapi import BackendUnavailableError, DriverError
from eventapi.driverkit import (
    DriverBackend,
    DriverCalls,
    foreign_stream_handle,
    launch_host_func,
    ms_to_ns,
)

if TYPE_CHECKING:
    from eventapi import EventApi, SupportsCaptureCheck, SupportsEventQuery, SupportsHostFunc
    from eventapi.driverkit import Event, Stream

__all__ = ["CudaBackend"]

_log = logging.getLogger("eventapi")

_CUresult = driver.CUresult
# Timing enabled: CU_EVENT_DISABLE_TIMING would drop exactly the timestamp a profiler reads.
_EVENT_FLAGS = int(driver.CUevent_flags.CU_EVENT_DEFAULT)
_STREAM_FLAGS = int(driver.CUstream_flags.CU_STREAM_NON_BLOCKING)


def _describe(status: Any) -> tuple[str | None, str | None]:
    err, name = driver.cuGetErrorName(status)
    err2, text = driver.cuGetErrorString(status)
    return (
        name.decode() if not err and name else None,
        text.decode() if not err2 and text else None,
    )


_call = DriverCalls(
    "cuda",
    describe=_describe,
    not_ready=_CUresult.CUDA_ERROR_NOT_READY,
    missing=_CUresult.CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND,
    missing_hint="install the NVIDIA driver (libcuda.so.1), or update it to one that "
    "supports the CUDA version cuda-bindings was built for",
)

_init_lock = threading.Lock()
_initialized = False


def _init_driver() -> None:
    global _initialized
    if _initialized:
        return
    with _init_lock:
        if not _initialized:
            _call(driver.cuInit, 0)
            _initialized = True


def _release_primary_context(device: Any) -> None:
    # From a weakref finalizer: whatever happens is only worth a log line.
    try:
        err = driver.cuDevicePrimaryCtxRelease(device)[0]
    except Exception:
        _log.debug("cuda: releasing the primary context failed", exc_info=True)
        return
    if err:
        _log.debug("cuda: cuDevicePrimaryCtxRelease returned %r", err)


@final
class CudaBackend(DriverBackend[Any, Any]):
    """The CUDA driver's events and streams on one device.

    Build it with ``eventapi.backend("cuda")`` or ``eventapi.backend("cuda:N")``, which cache
    one object per device; constructing one directly is fine too. Events are created with
    timing enabled (``CU_EVENT_DEFAULT``), streams with ``CU_STREAM_NON_BLOCKING``. Every
    driver failure raises :class:`~eventapi.DriverError` with the driver's own name and text
    for the code. Besides its own streams, any call taking a stream accepts a framework's (an
    object with ``__cuda_stream__``: cuda.core, CuPy, PyTorch), a ``driver.CUstream``, or a
    raw integer handle (``0`` the legacy default stream, ``2`` the per-thread default stream),
    which is trusted as given: without the driver it cannot be validated. Such streams are
    never destroyed here.

    Raises :class:`~eventapi.BackendUnavailableError` when the driver library is missing, the
    driver is too old, or there is no device ``device``.
    """

    BACKEND = "cuda"

    __slots__ = ("_context", "_context_handle", "_device", "_ordinal")

    def __init__(self, device: int = 0) -> None:
        ordinal = operator.index(device)
        if ordinal < 0:
            raise ValueError(f"cuda: device must be a device index >= 0, got {ordinal}")
        super().__init__()
        self._ordinal = ordinal
        try:
            _init_driver()
            count = _call(driver.cuDeviceGetCount)
            if ordinal >= count:
                raise BackendUnavailableError(
                    f"cuda: no CUDA device {ordinal}: {count} visible (devices 0 to "
                    f"{count - 1}; check CUDA_VISIBLE_DEVICES)"
                    if count
                    else "cuda: no CUDA device visible (cuDeviceGetCount returned 0)"
                )
            self._device = _call(driver.cuDeviceGet, ordinal)
            self._context = _call(driver.cuDevicePrimaryCtxRetain, self._device)
        except DriverError as exc:
            reason = (
                "no CUDA device visible"
                if exc.code == _CUresult.CUDA_ERROR_NO_DEVICE
                else f"device {ordinal} cannot be used"
            )
            raise BackendUnavailableError(f"cuda: {reason}: {exc}") from exc
        self._context_handle = int(self._context)
        finalizer = weakref.finalize(self, _release_primary_context, self._device)
        finalizer.atexit = False

    @property
    def device(self) -> int:
        """The device index this backend object was built for."""
        return self._ordinal

    def __repr__(self) -> str:
        return f"<CudaBackend device={self._ordinal}>"

    # -- threads and contexts -----------------------------------------------------------------

    def _bind_thread(self) -> None:
        current = _call(driver.cuCtxGetCurrent)
        if current is None or not int(current):
            _call(driver.cuCtxSetCurrent, self._context)

    def _create_in_context(self, create: Callable[..., Any], flags: int) -> Any:
        current = _call(driver.cuCtxGetCurrent)
        if current is not None and int(current) == self._context_handle:
            return _call(create, flags)
        _call(driver.cuCtxPushCurrent, self._context)
        try:
            return _call(create, flags)
        finally:
            _call(driver.cuCtxPopCurrent)

    def _adopt_stream(self, stream: object) -> Any:
        handle = foreign_stream_handle(self.BACKEND, stream, native=(driver.CUstream,))
        return None if handle is None else driver.CUstream(handle)

    # -- the driver calls ---------------------------------------------------------------------

    def _raw_event_create(self) -> Any:
        return self._create_in_context(driver.cuEventCreate, _EVENT_FLAGS)

    def _raw_event_destroy(self, event: Any) -> None:
        _call(driver.cuEventDestroy, event)

    def _raw_event_record(self, event: Any, stream: Any) -> None:
        _call(driver.cuEventRecord, event, stream)

    def _raw_event_wait(self, event: Any) -> None:
        _call(driver.cuEventSynchronize, event)  # the binding releases the GIL

    def _raw_event_query(self, event: Any) -> bool:
        return _call.ready(driver.cuEventQuery, event)

    def _raw_event_elapsed_ns(self, start: Any, end: Any) -> int:
        return ms_to_ns(_call(driver.cuEventElapsedTime, start, end))

    def _raw_stream_wait_event(self, stream: Any, event: Any) -> None:
        _call(driver.cuStreamWaitEvent, stream, event, 0)

    def _raw_stream_synchronize(self, stream: Any) -> None:
        _call(driver.cuStreamSynchronize, stream)

    def _raw_stream_create_non_blocking(self) -> Any:
        return self._create_in_context(driver.cuStreamCreate, _STREAM_FLAGS)

    def _raw_stream_destroy(self, stream: Any) -> None:
        _call(driver.cuStreamDestroy, stream)

    def _raw_stream_is_capturing(self, stream: Any) -> bool:
        # ACTIVE and INVALIDATED both refuse a timing event; only NONE (0) is free.
        return bool(int(_call(driver.cuStreamIsCapturing, stream)))

    def _raw_launch_host_func(self, stream: Any, fn: Callable[[], object]) -> None:
        launch_host_func(
            self.BACKEND,
            fn,
            lambda address, key: _call(
                driver.cuLaunchHostFunc, stream, driver.CUhostFn(address), key
            ),
        )


if TYPE_CHECKING:

    def _conforms(backend: CudaBackend) -> None:
        _api: EventApi[Event[Any], Stream[Any]] = backend
        _query: SupportsEventQuery[Event[Any]] = backend
        _capture: SupportsCaptureCheck[Stream[Any]] = backend
        _host_func: SupportsHostFunc[Stream[Any]] = backend
