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

Handles. The events and streams are ``_native.Event`` and ``_native.Stream``, whose C struct
holds the runtime's handle, the backend object and their state; the calls are
``_native.Backend``'s, made in C with their checks (eventapi-cuda's ``_native.c``, which this
package links to, states the rules; docs/native.md says why).

Graphs. ``SupportsGraphs`` (capture a stream into a graph, launch it) is made through the
binding (``_graphs``, linked from eventapi-cuda as ``_native.c`` is). ``SupportsGraphRecord``
(``hipEventRecordWithFlags`` with ``hipEventRecordExternal``, an event-record node each launch
stamps) depends on the runtime: before ROCm 7 it records the event as a plain record would, a
dependency inside the graph that nothing stamps (ROCm/rocm-systems#2380). So the first backend
object of a process tries it, on a graph of two such records launched once, before anything
asks which capabilities the class has; where the runtime left them unstamped, the class goes
without the capability for the process (its ``event_record_in_graph`` becomes None, the
protocols' way of switching a method off: the runtime is the process's, so are its answers),
and the ``eventapi`` logger says why, once, at INFO.

Benchmarks. ``SupportsCacheFlush`` (a memset of a buffer of the device's L2 size, ``_cache``,
linked from eventapi-cuda) is made through the binding. ``SupportsClocks`` is not offered yet:
ROCm reads clocks through amdsmi (or rocm-smi), a library of its own that hip-python does not
bind; a later version may use it, matched to the HIP device by PCI bus id or UUID as the cuda
backend matches NVML's.

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

from hip import hip

from eventapi import BackendUnavailableError, CaptureError, DriverError, EventStateError
from eventapi.driverkit import DriverCalls, LiveHandles, foreign_stream_handle, launch_host_func

if sysconfig.get_config_var("Py_GIL_DISABLED"):
    raise ImportError(
        "eventapi-hip needs the GIL, which this free-threaded CPython build does not have: "
        "its compiled handles rely on it (docs/native.md); use the default build of CPython"
    )

from . import _native
from ._cache import CacheCalls, CacheFlush, FlushBuffer
from ._graphs import Graph, GraphCalls, GraphCapture

if TYPE_CHECKING:
    from eventapi import (
        EventApi,
        SupportsCacheFlush,
        SupportsCaptureCheck,
        SupportsEventQuery,
        SupportsFastPath,
        SupportsGraphRecord,
        SupportsGraphs,
        SupportsHostFunc,
    )

__all__ = ["HipBackend"]

_log = logging.getLogger("eventapi")

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
# (HIP keeps a current device per thread, not a context: the last two are CUDA's only.)
_NATIVE_CALLS: tuple[str | None, ...] = (
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
    "hipLaunchHostFunc",
    "hipEventRecordWithFlags",
    "hipGetDevice",
    "hipSetDevice",
    None,
    None,
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
            calls = tuple(
                (name, int(ctypes.cast(getattr(library, name), ctypes.c_void_p).value or 0))
                if name
                else ("-", 0)
                for name in _NATIVE_CALLS
            )
        except (OSError, AttributeError) as exc:
            raise BackendUnavailableError(
                f"hip: the HIP runtime hip-python loaded ({path}) has not every call this "
                f"backend makes ({exc}); install the ROCm version hip-python was built for"
            ) from exc
        _native.configure(
            calls,
            contexts=False,
            not_ready=int(_HipError.hipErrorNotReady),
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
        _configured = True


def _native_failure(call: str, status: int) -> DriverError:
    # The error of a call _native.c made; once the device is lost, it calls the runtime no more.
    error = _call.failure(call, status)
    if _call.lost is not None:
        _native.lose(_call.lost.code)
    return error


def _adopt(stream: object) -> int | None:
    # A stream eventapi did not create: a framework's, an ihipStream_t, or a raw handle.
    return foreign_stream_handle("hip", stream, native=(hip.ihipStream_t,))


os.register_at_fork(after_in_child=_after_fork_in_child)


def _graph_call(fn: Callable[..., Any], *args: object) -> Any:
    # A graph call through the binding; once it lost the device, _native calls nothing more.
    try:
        return _call(fn, *args)
    finally:
        if _call.lost is not None:
            _native.lose(_call.lost.code)


@contextlib.contextmanager
def _on_device(backend: Any) -> Iterator[None]:
    # The object's own device, which its graphs belong to, current on the thread, and back.
    current = _graph_call(hip.hipGetDevice)
    if current != backend.device:
        _graph_call(hip.hipSetDevice, backend.device)
    try:
        yield
    finally:
        if current != backend.device:
            _graph_call(hip.hipSetDevice, current)


_GRAPH_CALLS = GraphCalls(
    begin=lambda raw: _graph_call(
        hip.hipStreamBeginCapture, raw, hip.hipStreamCaptureMode.hipStreamCaptureModeRelaxed
    ),
    end=lambda raw: _graph_call(hip.hipStreamEndCapture, raw),
    instantiate=lambda graph: _graph_call(hip.hipGraphInstantiateWithFlags, graph, 0),
    destroy_template=lambda graph: _graph_call(hip.hipGraphDestroy, graph),
    launch=lambda graph, raw: _graph_call(hip.hipGraphLaunch, graph, raw),
    destroy=lambda graph: _graph_call(hip.hipGraphExecDestroy, graph),
    on_device=_on_device,
    unusable=lambda: _forked_after_use or _call.lost is not None,
)

_CACHE_CALLS = CacheCalls(
    size=lambda ordinal: _graph_call(
        hip.hipDeviceGetAttribute, hip.hipDeviceAttribute_t.hipDeviceAttributeL2CacheSize, ordinal
    ),
    alloc=lambda nbytes: _graph_call(hip.hipMalloc, nbytes),
    free=lambda pointer: _graph_call(hip.hipFree, pointer),
    memset=lambda pointer, nbytes, raw: _graph_call(hip.hipMemsetAsync, pointer, 0, nbytes, raw),
    on_device=_on_device,
    unusable=lambda: _forked_after_use or _call.lost is not None,
)

# Whether this process's runtime stamps an event recorded into a graph as a node: None until
# the first backend object tried it, then "" where it does, or why it does not.
_graph_records_refused: str | None = None
_graph_records_lock = threading.Lock()


def _why_graph_records_unstamped(backend: HipBackend) -> str:
    """Empty where the runtime stamps an event recorded into a graph with hipEventRecordExternal
    at each launch; else why not. Tried on a graph of two such records, launched once; whatever
    fails says no, and everything made is released."""
    made: list[tuple[Callable[[Any], object], Any]] = []  # (destroy, handle), oldest first
    try:
        stream = backend.stream_create_non_blocking()
        made.append((backend.stream_destroy, stream))
        events = [backend.event_create(), backend.event_create()]
        made += [(backend.event_destroy, event) for event in events]
        backend.stream_begin_capture(stream)
        try:
            for event in events:
                backend.event_record_in_graph(event, stream)
        finally:
            graph = backend.stream_end_capture(stream)
            made.append((backend.graph_destroy, graph))
        backend.graph_launch(graph, stream)
        backend.stream_synchronize(stream)
        backend.event_elapsed(*events)
    except Exception as exc:
        return (
            "hip: windows inside captured graphs (SupportsGraphRecord) are not offered: this "
            f"HIP runtime ({_runtime_version()}) left an event recorded into a graph with "
            f"hipEventRecordExternal unstamped when the graph ran ({exc}); ROCm 7 and later "
            "stamp it (ROCm/rocm-systems#2380)"
        )
    finally:
        for destroy, handle in reversed(made):
            try:
                destroy(handle)
            except Exception:  # nothing to do about it here, and the backend still works
                _log.debug("hip: releasing the graph records' trial failed", exc_info=True)
    return ""


def _runtime_version() -> str:
    try:
        version = int(_call(hip.hipRuntimeGetVersion))
    except Exception:
        return "version unknown"
    return f"{version // 10_000_000}.{version // 100_000 % 100}"


@final
class HipBackend(CacheFlush, GraphCapture, _native.Backend):
    """The HIP runtime's events and streams on one device.

    Build it with ``eventapi.backend("hip")`` or ``eventapi.backend("hip:N")``, which cache one
    object per device; constructing one directly is fine too, and that object owns its own
    handles. Events are created with timing enabled and ``hipEventBlockingSync``
    (``event_wait`` queries for up to 100 µs, then sleeps instead of spinning), streams with
    ``hipStreamNonBlocking``; ``stream_synchronize`` waits as ``event_wait`` does, on a
    blocking-sync event recorded into the stream, whatever the device's scheduling flag (by
    default the runtime's own synchronize spins or yields). ``Stream.raw`` is the stream's
    address. Every runtime failure raises :class:`~eventapi.DriverError` with the runtime's
    own name and text for the code. Besides its own streams, any call taking a stream accepts
    a raw integer handle (``0``: the null stream of the calling thread's current device), a
    ``hip.ihipStream_t``, or an object with ``__cuda_stream__`` (PyTorch and CuPy built for
    ROCm speak the CUDA protocol with HIP handles; there is no HIP-named protocol). Such
    handles are trusted as given, since the runtime cannot validate them, and are never
    destroyed here.

    Raises :class:`~eventapi.BackendUnavailableError` when the runtime library is missing,
    there is no device ``device``, or the process was forked after its parent used HIP. See the
    module docstring for what it does with another device's handles, with sticky errors and
    after ``fork()``.

    Graphs: ``stream_begin_capture`` captures in relaxed mode (the capture may end on any
    thread), ``stream_end_capture`` returns the graph instantiated on this object's device, and
    ``event_record_in_graph`` records with ``hipEventRecordExternal`` where the runtime stamps
    such records (see the module docstring: None where it does not).

    Benchmarks: ``cache_flush_create`` allocates ``hipDeviceAttributeL2CacheSize`` bytes
    (``hipMalloc``) and ``stream_flush_cache`` writes them (``hipMemsetAsync``).
    """

    BACKEND = "hip"
    _GRAPH_CALLS = _GRAPH_CALLS
    _CACHE_CALLS = _CACHE_CALLS

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
        _used = True  # set before the call: a runtime that started initializing is in use
        try:
            count = _call(hip.hipGetDeviceCount)
        except DriverError as exc:
            if exc.code != _HipError.hipErrorNoDevice:
                raise BackendUnavailableError(
                    f"hip: device {ordinal} cannot be used: {exc}"
                ) from exc
            count = 0
        if ordinal >= count:
            raise BackendUnavailableError(
                f"hip: no HIP device {ordinal}: {count} visible (devices 0 to {count - 1}; "
                "check HIP_VISIBLE_DEVICES)"
                if count
                else "hip: no HIP device visible (hipGetDeviceCount returned 0)"
            )
        _configure_native()  # hip-python has loaded the runtime by now
        # The visible devices are fixed when the runtime starts (HIP_VISIBLE_DEVICES): with
        # one, every thread's current device is it, and a create need not switch.
        super().__init__(self.BACKEND, ordinal, count, None)
        _try_graph_records(self)

    def __repr__(self) -> str:
        return f"<HipBackend device={self.device}>"

    def live_handles(self) -> LiveHandles:
        """Events and streams this backend object created and has not destroyed yet."""
        events, streams, _ = self._live_counts()
        return LiveHandles(events, streams)

    def stream_launch_host_func(self, stream: object, fn: Callable[[], object]) -> None:
        """Run ``fn()`` on a runtime thread when ``stream`` reaches this point.

        Later work on the stream waits for ``fn`` to return; an exception it raises is
        logged. Raises :class:`~eventapi.CaptureError` while ``stream`` captures a graph.
        """
        if not callable(fn):
            raise TypeError(f"stream_launch_host_func needs a callable, got {fn!r}")
        launch_host_func(self.BACKEND, fn, functools.partial(self._enqueue_host_func, stream))


def _try_graph_records(backend: HipBackend) -> None:
    """Once per process: where the runtime leaves external records in a graph unstamped, switch
    ``event_record_in_graph`` off for the class (None, which no protocol counts as a method)."""
    global _graph_records_refused
    with _graph_records_lock:
        if _graph_records_refused is None:
            _graph_records_refused = _why_graph_records_unstamped(backend)
            if _graph_records_refused:
                _log.info("%s", _graph_records_refused)
                setattr(HipBackend, _GRAPH_RECORD, None)


_GRAPH_RECORD = "event_record_in_graph"


if TYPE_CHECKING:

    def _conforms(backend: HipBackend) -> None:
        _api: EventApi[_native.Event, _native.Stream] = backend
        _query: SupportsEventQuery[_native.Event] = backend
        _capture: SupportsCaptureCheck[_native.Stream] = backend
        _host_func: SupportsHostFunc[_native.Stream] = backend
        _fast: SupportsFastPath[_native.Event, _native.Stream] = backend
        _graphs: SupportsGraphs[_native.Stream, Graph] = backend
        _graph_record: SupportsGraphRecord[_native.Event, _native.Stream] = backend
        _cache: SupportsCacheFlush[_native.Stream, FlushBuffer] = backend
