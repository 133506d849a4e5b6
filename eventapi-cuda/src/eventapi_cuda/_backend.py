"""The ``cuda`` backend: the event and stream calls spelled on ``cuda.bindings.driver``.

Contexts. The driver is initialized once per process (``cuInit``, thread-safe). Each backend
object retains its device's *primary context* (the one the CUDA runtime, PyTorch, CuPy and
cuda.core share) once, and releases it when the backend object was garbage-collected, which is
after every event and stream made in the context: every handle holds its backend object, and
takes no part in the collector's cycles, so the object cannot go before it. Objects cached by
``eventapi.backend()`` live for the process, and their context is left to the driver's own
teardown at exit: releasing it earlier would pull it from under handles that finalizers may
still destroy.

Threads. A thread's first call through a backend object makes the primary context current on
that thread if the thread has none (a thread that never made a CUDA call can wait on a fence
recorded elsewhere). Creating an event or a stream pushes this backend's context for the
call when another one is current, so a thread working on another device still creates on
this one. The other calls take handles that carry their context; only the legacy default
stream (a raw ``0``) means "the current context's", which is why a thread with no context is
given this backend's.

Devices. Objects of two devices share some handles, as the driver does: a stream of one may
wait on an event of the other (``stream_wait_event``), and any thread may wait on or query any
device's event. Recording an event into another device's stream and timing events of two
devices are refused in Python (:class:`~eventapi.EventStateError`). Two objects of one device
(one from ``eventapi.backend()``, one built directly) own their handles separately.

Faults. The errors after which CUDA fails every later call of the process (an illegal
address, a failed launch, an uncorrectable ECC error) lose the context: the first raises a
:class:`~eventapi.DriverError` saying so, later calls raise it at once without calling the
driver, and handles left over are not destroyed one by one (logged once).

Fork. CUDA cannot be used in a child forked after the parent began initializing the driver.
In such a child this module refuses to build a backend object
(:class:`~eventapi.BackendUnavailableError`), the parent's objects refuse every call, and
nothing collected there calls the driver.

Handles. The events and streams are ``_native.Event`` and ``_native.Stream``, whose C struct
holds the driver's handle, the backend object and their state; the calls are ``_native.Backend``'s,
made in C with their checks (``_native.c`` states the rules; docs/native.md says why).

Graphs. ``SupportsGraphs`` (capture a stream into a graph, launch it) is made through the
binding (``_graphs``), and ``SupportsGraphRecord`` (an event recorded into a graph as a node
each launch stamps, ``CU_EVENT_RECORD_EXTERNAL``) in C: CUDA has both from 11.1 on.

Benchmarks. ``SupportsCacheFlush`` (a memset of an L2-sized buffer, ``_cache``) is made through
the binding; ``SupportsClocks`` (the SM clock and its throttle reasons, ``_nvml``) through NVML
with nvidia-ml-py, and only where that is installed: without it the class has no
``device_clocks``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import operator
import os
import sys
import sysconfig
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, final

from cuda.bindings import driver

from eventapi import BackendUnavailableError, CaptureError, DriverError, EventStateError
from eventapi.driverkit import DriverCalls, LiveHandles, foreign_stream_handle, launch_host_func

if sysconfig.get_config_var("Py_GIL_DISABLED"):
    raise ImportError(
        "eventapi-cuda needs the GIL, which this free-threaded CPython build does not have: "
        "its compiled handles rely on it (docs/native.md); use the default build of CPython"
    )

from . import _native, _nvml
from ._cache import CacheCalls, CacheFlush, FlushBuffer
from ._graphs import Graph, GraphCalls, GraphCapture

if TYPE_CHECKING:
    from eventapi import (
        DeviceClocks,
        EventApi,
        SupportsCacheFlush,
        SupportsCaptureCheck,
        SupportsClocks,
        SupportsEventQuery,
        SupportsFastPath,
        SupportsGraphRecord,
        SupportsGraphs,
        SupportsHostFunc,
    )

__all__ = ["CudaBackend"]

_log = logging.getLogger("eventapi")

_CUresult = driver.CUresult
# Timing enabled: CU_EVENT_DISABLE_TIMING would drop exactly the timestamp a profiler reads.
# Blocking sync: cuEventSynchronize on an event without it busy-waits, a core burnt per
# waiting thread for the whole wait; with it the thread sleeps until the device reaches the
# event. event_wait queries for 100 us first, so a short wait still wakes as fast as a spin.
_EVENT_FLAGS = int(driver.CUevent_flags.CU_EVENT_BLOCKING_SYNC)
_STREAM_FLAGS = int(driver.CUstream_flags.CU_STREAM_NON_BLOCKING)
# The event a stream synchronize waits on (see _native.c): it sleeps, and times nothing.
_SYNC_EVENT_FLAGS = _EVENT_FLAGS | int(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING)
# How long a wait queries before it sleeps: as DriverCalls.wait and a fence do.
_SPIN_NS = 100_000

# The driver calls _native.c makes, in the order it takes them, each with the CUDA versions
# whose ABI of that name has exactly the prototype _native.c declares, newest first. Each is
# requested at the newest of those the driver has, never at the driver's own version: a newer
# ABI of a name (a later _v2) may take other arguments.
_NATIVE_CALLS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("cuEventCreate", (2000,)),  # (CUevent *, unsigned int)
    ("cuEventDestroy", (4000,)),  # cuEventDestroy_v2 (CUevent)
    ("cuEventRecord", (2000,)),  # (CUevent, CUstream)
    ("cuEventQuery", (2000,)),  # (CUevent)
    ("cuEventSynchronize", (2000,)),  # (CUevent)
    ("cuEventElapsedTime", (12080, 2000)),  # (float *, CUevent, CUevent), _v2 and the first
    ("cuStreamCreate", (2000,)),  # (CUstream *, unsigned int)
    ("cuStreamDestroy", (4000,)),  # cuStreamDestroy_v2 (CUstream)
    ("cuStreamWaitEvent", (3020,)),  # (CUstream, CUevent, unsigned int)
    ("cuStreamSynchronize", (2000,)),  # (CUstream)
    ("cuStreamIsCapturing", (10000,)),  # (CUstream, CUstreamCaptureStatus *), an enum
    ("cuLaunchHostFunc", (10000,)),  # (CUstream, CUhostFn, void *)
    ("cuEventRecordWithFlags", (11010,)),  # (CUevent, CUstream, unsigned int)
    ("cuCtxGetCurrent", (4000,)),  # (CUcontext *)
    ("cuCtxSetCurrent", (4000,)),  # (CUcontext)
    ("cuCtxPushCurrent", (4000,)),  # cuCtxPushCurrent_v2 (CUcontext)
    ("cuCtxPopCurrent", (4000,)),  # cuCtxPopCurrent_v2 (CUcontext *)
)
# cuda.bindings resolves the per-thread default stream's variants of the stream calls when
# this variable is set to anything (it tests os.getenv's string); so does this module, so that
# a raw 0 means the same stream to both.
_PER_THREAD_VARIABLE = "CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM"


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
    # The errors the CUDA documentation says leave the process in an inconsistent state, every
    # later call failing the same way until the process is restarted.
    sticky=(
        _CUresult.CUDA_ERROR_ECC_UNCORRECTABLE,
        _CUresult.CUDA_ERROR_ILLEGAL_ADDRESS,
        _CUresult.CUDA_ERROR_LAUNCH_TIMEOUT,
        _CUresult.CUDA_ERROR_ASSERT,
        _CUresult.CUDA_ERROR_HARDWARE_STACK_ERROR,
        _CUresult.CUDA_ERROR_ILLEGAL_INSTRUCTION,
        _CUresult.CUDA_ERROR_MISALIGNED_ADDRESS,
        _CUresult.CUDA_ERROR_INVALID_ADDRESS_SPACE,
        _CUresult.CUDA_ERROR_INVALID_PC,
        _CUresult.CUDA_ERROR_LAUNCH_FAILED,
    ),
)

_init_lock = threading.Lock()
_initialized = False
# Set before cuInit: a driver whose initialization began (and may not have finished, when
# another thread forks meanwhile) is as unusable in a forked child as one initialized.
_init_begun = False
# True in a child forked after the parent began initializing the driver: nothing may call it.
_forked_after_init = False


def _after_fork_in_child() -> None:
    global _forked_after_init, _init_lock
    _forked_after_init = _forked_after_init or _init_begun
    _init_lock = threading.Lock()  # another parent thread may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)


def _init_driver() -> None:
    global _initialized, _init_begun
    if _forked_after_init:
        raise BackendUnavailableError(
            "cuda: this process was forked after its parent began initializing the CUDA driver, "
            "and CUDA cannot be used in such a child; start worker processes with "
            "multiprocessing's 'spawn' or 'forkserver' method, or use CUDA only after fork()"
        )
    if _initialized:
        return
    with _init_lock:
        if not _initialized:
            _init_begun = True
            _call(driver.cuInit, 0)
            _configure_native()
            _initialized = True


def _configure_native() -> None:
    # The addresses of the calls _native.c makes, from the driver cuda.bindings loaded.
    version = _call(driver.cuDriverGetVersion)
    flags = (
        driver.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
        if os.environ.get(_PER_THREAD_VARIABLE)
        else driver.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_DEFAULT
    )
    found = driver.CUdriverProcAddressQueryResult.CU_GET_PROC_ADDRESS_SUCCESS
    calls = []
    for name, abis in _NATIVE_CALLS:
        abi = next((abi for abi in abis if abi <= version), None)
        address, status = (
            _call(driver.cuGetProcAddress, name.encode(), abi, flags)
            if abi is not None
            else (0, None)
        )
        if status != found or not address:
            raise BackendUnavailableError(
                f"cuda: the driver (CUDA {version // 1000}.{version % 1000 // 10}) has no "
                f"{name} of the ABI this backend calls (CUDA {abis[-1] // 1000}."
                f"{abis[-1] % 1000 // 10}); update the NVIDIA driver"
            )
        calls.append((name, int(address)))
    _native.configure(
        tuple(calls),
        contexts=True,
        not_ready=int(_CUresult.CUDA_ERROR_NOT_READY),
        event_flags=_EVENT_FLAGS,
        stream_flags=_STREAM_FLAGS,
        sync_event_flags=_SYNC_EVENT_FLAGS,
        spin_ns=_SPIN_NS,
        fail=_native_failure,
        adopt=_adopt,
        log=_log.log,
        is_finalizing=sys.is_finalizing,
        state_error=EventStateError,
        capture_error=CaptureError,
    )


def _native_failure(call: str, status: int) -> DriverError:
    # The error of a call _native.c made; once the context is lost, it calls the driver no more.
    error = _call.failure(call, status)
    if _call.lost is not None:
        _native.lose(_call.lost.code)
    return error


def _adopt(stream: object) -> int | None:
    # A stream eventapi did not create: a framework's, a driver.CUstream, or a raw handle.
    return foreign_stream_handle("cuda", stream, native=(driver.CUstream,))


def _graph_call(fn: Callable[..., Any], *args: object) -> Any:
    # A graph call through the binding; once it lost the context, _native calls nothing more.
    try:
        return _call(fn, *args)
    finally:
        if _call.lost is not None:
            _native.lose(_call.lost.code)


@contextlib.contextmanager
def _in_context(backend: Any) -> Iterator[None]:
    # The object's own context, which its graphs belong to, on any thread.
    _graph_call(driver.cuCtxPushCurrent, backend._context)
    try:
        yield
    finally:
        _graph_call(driver.cuCtxPopCurrent)


_GRAPH_CALLS = GraphCalls(
    begin=lambda raw: _graph_call(
        driver.cuStreamBeginCapture,
        driver.CUstream(raw),
        driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED,
    ),
    end=lambda raw: _graph_call(driver.cuStreamEndCapture, driver.CUstream(raw)),
    instantiate=lambda graph: _graph_call(driver.cuGraphInstantiate, graph, 0),
    destroy_template=lambda graph: _graph_call(driver.cuGraphDestroy, graph),
    launch=lambda graph, raw: _graph_call(driver.cuGraphLaunch, graph, driver.CUstream(raw)),
    destroy=lambda graph: _graph_call(driver.cuGraphExecDestroy, graph),
    on_device=_in_context,
    unusable=lambda: _forked_after_init or _call.lost is not None,
)


_CACHE_CALLS = CacheCalls(
    size=lambda ordinal: _graph_call(
        driver.cuDeviceGetAttribute,
        driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE,
        ordinal,
    ),
    alloc=lambda nbytes: _graph_call(driver.cuMemAlloc, nbytes),
    free=lambda pointer: _graph_call(driver.cuMemFree, pointer),
    memset=lambda pointer, nbytes, raw: _graph_call(
        driver.cuMemsetD8Async, pointer, 0, nbytes, driver.CUstream(raw)
    ),
    on_device=_in_context,
    unusable=lambda: _forked_after_init or _call.lost is not None,
)


def _nvml_keys(ordinal: int) -> tuple[str, str]:
    # Where NVML finds a CUDA device: its UUID as NVML writes it, and its PCI bus id.
    uuid = _call(driver.cuDeviceGetUuid, ordinal)
    bus_id = _call(driver.cuDeviceGetPCIBusId, 32, ordinal)
    return _nvml.uuid_text(bytes(uuid.bytes)), bus_id.split(b"\0")[0].decode()


def _release_primary_context(device: Any) -> None:
    # Once a backend object and every handle of it are gone (_native.Backend's on_gone): what
    # happens is only worth a log line. Never in a forked child or after the context was lost.
    if _forked_after_init or _call.lost is not None:
        return
    try:
        err = driver.cuDevicePrimaryCtxRelease(device)[0]
    except Exception:
        _log.debug("cuda: releasing the primary context failed", exc_info=True)
        return
    if err:
        _log.debug("cuda: cuDevicePrimaryCtxRelease returned %r", err)


@final
class CudaBackend(CacheFlush, GraphCapture, _native.Backend):
    """The CUDA driver's events and streams on one device.

    Build it with ``eventapi.backend("cuda")`` or ``eventapi.backend("cuda:N")``, which cache
    one object per device; constructing one directly is fine too, and that object owns its own
    handles. Events are created with timing enabled and ``CU_EVENT_BLOCKING_SYNC``
    (``event_wait`` queries for up to 100 µs, then sleeps instead of spinning), streams with
    ``CU_STREAM_NON_BLOCKING``; ``stream_synchronize`` waits as ``event_wait`` does, on a
    blocking-sync event recorded into the stream, whatever the context's scheduling flag (by
    default the driver's own synchronize spins a core). ``Stream.raw`` is the stream's address.
    Every driver failure raises :class:`~eventapi.DriverError` with the driver's own name and
    text for the code. Besides its own streams, any call taking a stream accepts a framework's
    (an object with ``__cuda_stream__``: cuda.core, CuPy, PyTorch), a ``driver.CUstream``, or a
    raw integer handle (``0`` the legacy default stream, ``2`` the per-thread default stream),
    which is trusted as given: without the driver it cannot be validated. Such streams are
    never destroyed here.

    Raises :class:`~eventapi.BackendUnavailableError` when the driver library is missing, the
    driver is too old, there is no device ``device``, or the process was forked after its
    parent initialized CUDA. See the module docstring for what it does with another device's
    handles, with sticky errors and after ``fork()``.

    Graphs: ``stream_begin_capture`` captures in relaxed mode (the capture may end on any
    thread), ``stream_end_capture`` returns the graph instantiated in this object's context,
    and ``event_record_in_graph`` records with ``CU_EVENT_RECORD_EXTERNAL``.

    Benchmarks: ``cache_flush_create`` allocates ``CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE`` bytes
    (``cuMemAlloc``) and ``stream_flush_cache`` writes them (``cuMemsetD8Async``);
    ``device_clocks``, with nvidia-ml-py installed, reads the SM clock and its throttle reasons
    from NVML, on the NVML device of this device's UUID (else PCI bus id).
    """

    BACKEND = "cuda"
    _GRAPH_CALLS = _GRAPH_CALLS
    _CACHE_CALLS = _CACHE_CALLS

    def __init__(self, device: int = 0) -> None:
        ordinal = operator.index(device)
        if ordinal < 0:
            raise ValueError(f"cuda: device must be a device index >= 0, got {ordinal}")
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
            handle = _call(driver.cuDeviceGet, ordinal)
            context = _call(driver.cuDevicePrimaryCtxRetain, handle)
        except DriverError as exc:
            reason = (
                "no CUDA device visible"
                if exc.code == _CUresult.CUDA_ERROR_NO_DEVICE
                else f"device {ordinal} cannot be used"
            )
            raise BackendUnavailableError(f"cuda: {reason}: {exc}") from exc
        # The context is released once this object and all its handles are gone.
        release = functools.partial(_release_primary_context, handle)
        super().__init__(self.BACKEND, ordinal, int(context), release)
        self._context = context  # where its graphs are instantiated
        self._clocks = _nvml.NvmlClocks(functools.partial(_nvml_keys, handle))

    def __repr__(self) -> str:
        return f"<CudaBackend device={self.device}>"

    def live_handles(self) -> LiveHandles:
        """Events and streams this backend object created and has not destroyed yet."""
        events, streams, _ = self._live_counts()
        return LiveHandles(events, streams)

    def stream_launch_host_func(self, stream: object, fn: Callable[[], object]) -> None:
        """Run ``fn()`` on a driver thread when ``stream`` reaches this point.

        Later work on the stream waits for ``fn`` to return; an exception it raises is
        logged. Raises :class:`~eventapi.CaptureError` while ``stream`` captures a graph.
        """
        if not callable(fn):
            raise TypeError(f"stream_launch_host_func needs a callable, got {fn!r}")
        launch_host_func(self.BACKEND, fn, functools.partial(self._enqueue_host_func, stream))

    if _nvml.available():

        def device_clocks(self) -> DeviceClocks:
            """The SM clock, its maximum and its throttle reasons now, from NVML.

            Raises :class:`~eventapi.UnsupportedError` when NVML cannot be opened or knows no
            device of this UUID or PCI bus id, and :class:`~eventapi.DriverError` when a
            reading fails.
            """
            return self._clocks.read()


if TYPE_CHECKING:

    def _conforms(backend: CudaBackend) -> None:
        _api: EventApi[_native.Event, _native.Stream] = backend
        _query: SupportsEventQuery[_native.Event] = backend
        _capture: SupportsCaptureCheck[_native.Stream] = backend
        _host_func: SupportsHostFunc[_native.Stream] = backend
        _fast: SupportsFastPath[_native.Event, _native.Stream] = backend
        _graphs: SupportsGraphs[_native.Stream, Graph] = backend
        _graph_record: SupportsGraphRecord[_native.Event, _native.Stream] = backend
        _cache: SupportsCacheFlush[_native.Stream, FlushBuffer] = backend
        _clocks: SupportsClocks = backend
