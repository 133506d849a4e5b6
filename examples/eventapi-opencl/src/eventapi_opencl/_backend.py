"""eventapi's protocol spelled in OpenCL, on pyopencl.

OpenCL's event model matches the one eventapi is built on, with one difference of shape:

* a **stream** is a command queue created with ``PROFILING_ENABLE`` (in order, so a marker
  completes after everything enqueued before it);
* an **event** exists only once enqueued: ``clEnqueueMarkerWithWaitList`` returns a new one at
  each record. So the raw event is a :class:`Marker` slot, created empty, that each record
  fills with the new marker: a re-recorded event then marks its latest record, as in CUDA;
* a stream **waits** on an event with a barrier whose wait list is the marker
  (``clEnqueueBarrierWithWaitList``): the device waits, the host does not;
* a **host function** is a marker, then a barrier on a user event: a thread of the backend
  waits for the marker, runs the function and completes the user event, so later work on the
  queue waits for the function, as a CUDA host function holds its stream;
* **elapsed** time is read from the markers' ``CL_PROFILING_COMMAND_END`` counters, device
  nanoseconds on one clock for every queue of a context.

:class:`~eventapi.driverkit.DriverBackend` supplies the rest (closed, foreign and never-recorded
handles refused before OpenCL sees them, live-handle counts, clamping), so this module only
spells the OpenCL calls.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, final

import pyopencl as cl

from eventapi import BackendUnavailableError, DriverError, EventStateError
from eventapi.driverkit import EventQueryMixin, HostFuncMixin

__all__ = ["Marker", "OpenCLBackend"]

_PROFILING: Final = cl.command_queue_properties.PROFILING_ENABLE
_COMPLETE: Final = cl.command_execution_status.COMPLETE
# CL_PROFILING_INFO_NOT_AVAILABLE: OpenCL's answer for the counters of a command that has not
# completed, which is eventapi's "not ready".
_PROFILING_INFO_NOT_AVAILABLE: Final = -7
_log = logging.getLogger("eventapi")


@final
class Marker:
    """The raw event: a slot for the marker enqueued by the latest record.

    ``marker`` is ``None`` until the first record; driverkit never passes an unrecorded event
    to a call that reads it. Replacing the reference is atomic, so a record on one thread and
    a wait on another see one marker or the other, never a torn one.
    """

    __slots__ = ("marker",)

    def __init__(self) -> None:
        self.marker: cl.Event | None = None

    def recorded(self) -> cl.Event:
        marker = self.marker
        assert marker is not None, "driverkit passes recorded events only"
        return marker


def _status_name(code: int) -> str:
    """``CL_<NAME>`` of an OpenCL status code, as the OpenCL headers spell it."""
    for name in dir(cl.status_code):
        if not name.startswith("_") and getattr(cl.status_code, name) == code:
            return f"CL_{name}"
    return "CL_UNKNOWN_ERROR"


def _driver_error(call: str, exc: cl.Error) -> DriverError:
    code = int(exc.code)
    return DriverError(
        "opencl",
        call,
        code,
        _status_name(code),
        str(exc.what),
        not_ready=code == _PROFILING_INFO_NOT_AVAILABLE,
    )


def _devices() -> list[cl.Device]:
    """Every OpenCL device, platform by platform, in the order the ICD loader lists them."""
    try:
        platforms = cl.get_platforms()
    except cl.Error as exc:  # PLATFORM_NOT_FOUND_KHR: the loader found no driver at all
        raise BackendUnavailableError(
            f"opencl: no OpenCL platform found ({exc}); "
            'pip install "eventapi-opencl[pocl]" for a CPU driver, or install your GPU\'s'
        ) from exc
    return [device for platform in platforms for device in platform.get_devices()]


def _run_host_func(reached: cl.Event, gate: cl.UserEvent, fn: Callable[[], object]) -> None:
    """On the host function's own thread: wait for the queue to reach it, run it, release it."""
    try:
        reached.wait()
        fn()
    except BaseException:
        # Nowhere to raise to (the caller enqueued and left), as on a driver's callback thread.
        _log.exception("opencl: host function %r raised; the queue went on", fn)
    finally:
        gate.set_status(_COMPLETE)


@final
class OpenCLBackend(
    EventQueryMixin[Marker, "cl.CommandQueue"], HostFuncMixin[Marker, "cl.CommandQueue"]
):
    """The ``opencl`` backend: one object per OpenCL device, with a context of its own.

    ``device`` indexes every platform's devices in order (``eventapi.backend("opencl:1")``).
    Any thread may call any method. Events and streams of one object work together; those of
    another object (another context) are refused as foreign, since OpenCL cannot wait on an
    event of another context. A command queue of this object's context created with
    ``PROFILING_ENABLE`` (a pyopencl user's own queue) is accepted as a stream, never destroyed.
    """

    BACKEND = "opencl"

    __slots__ = ("context", "device", "device_name")

    def __init__(self, device: int = 0) -> None:
        super().__init__()
        devices = _devices()
        if not 0 <= device < len(devices):
            raise BackendUnavailableError(
                f"opencl: no OpenCL device {device}: {len(devices)} found; "
                f"pick one of 0 to {len(devices) - 1}"
                if devices
                else "opencl: the OpenCL platforms list no device; install a driver that has one"
            )
        self.device = device
        self.device_name: str = devices[device].name
        self.context = cl.Context(devices=[devices[device]])

    def __repr__(self) -> str:
        return f"<OpenCLBackend device {self.device}: {self.device_name}>"

    # -- the raw calls driverkit builds the protocol on -----------------------------------------

    def _raw_event_create(self) -> Marker:
        return Marker()

    def _raw_event_destroy(self, event: Marker) -> None:
        event.marker = None  # the marker's last reference: pyopencl releases it

    def _raw_event_record(self, event: Marker, stream: cl.CommandQueue) -> None:
        try:
            marker = cl.enqueue_marker(stream)
            # Submit now: a barrier on another queue, or a query polled from another thread,
            # may wait for this marker, and OpenCL only promises progress to flushed commands.
            stream.flush()
        except cl.Error as exc:
            raise _driver_error("clEnqueueMarkerWithWaitList", exc) from exc
        event.marker = marker

    def _raw_event_wait(self, event: Marker) -> None:
        try:
            event.recorded().wait()  # clWaitForEvents; pyopencl releases the GIL
        except cl.Error as exc:
            raise _driver_error("clWaitForEvents", exc) from exc

    def _raw_event_query(self, event: Marker) -> bool:
        try:
            status = event.recorded().command_execution_status
        except cl.Error as exc:
            raise _driver_error("clGetEventInfo", exc) from exc
        if status < 0:  # the command failed: OpenCL reports the error as the status
            raise DriverError(
                "opencl",
                "clGetEventInfo",
                int(status),
                _status_name(int(status)),
                "a command before the marker failed",
            )
        return bool(status == _COMPLETE)

    def _raw_event_elapsed_ns(self, start: Marker, end: Marker) -> int:
        return self._end_ns(end) - self._end_ns(start)

    @staticmethod
    def _end_ns(event: Marker) -> int:
        marker = event.recorded()
        try:
            # Checked first: some drivers answer the counters of a running command.
            if marker.command_execution_status != _COMPLETE:
                raise DriverError(
                    "opencl",
                    "clGetEventProfilingInfo",
                    _PROFILING_INFO_NOT_AVAILABLE,
                    "CL_PROFILING_INFO_NOT_AVAILABLE",
                    "the event has not been reached yet; wait for it first",
                    not_ready=True,
                )
            return int(marker.get_profiling_info(cl.profiling_info.END))
        except cl.Error as exc:
            raise _driver_error("clGetEventProfilingInfo", exc) from exc

    def _raw_stream_wait_event(self, stream: cl.CommandQueue, event: Marker) -> None:
        try:
            cl.enqueue_barrier(stream, wait_for=[event.recorded()])
            stream.flush()
        except cl.Error as exc:
            raise _driver_error("clEnqueueBarrierWithWaitList", exc) from exc

    def _raw_stream_synchronize(self, stream: cl.CommandQueue) -> None:
        try:
            stream.finish()  # clFinish; pyopencl releases the GIL
        except cl.Error as exc:
            raise _driver_error("clFinish", exc) from exc

    def _raw_stream_create_non_blocking(self) -> cl.CommandQueue:
        # OpenCL has no legacy default queue to synchronize with: every queue is independent.
        try:
            return cl.CommandQueue(self.context, properties=_PROFILING)
        except cl.Error as exc:
            raise _driver_error("clCreateCommandQueueWithProperties", exc) from exc

    def _raw_stream_destroy(self, stream: cl.CommandQueue) -> None:
        # Submit what is queued and drop the reference; the driver finishes the work and
        # frees the queue (clReleaseCommandQueue) without the caller waiting for it.
        try:
            stream.flush()
        except cl.Error as exc:
            raise _driver_error("clFlush", exc) from exc

    def _raw_launch_host_func(self, stream: cl.CommandQueue, fn: Callable[[], object]) -> None:
        try:
            reached = cl.enqueue_marker(stream)
            gate = cl.UserEvent(self.context)
            cl.enqueue_barrier(stream, wait_for=[gate])
            stream.flush()
        except cl.Error as exc:
            raise _driver_error("clEnqueueBarrierWithWaitList", exc) from exc
        # A thread per call, not one per backend: a host function may wait for another queue's,
        # which a single thread running them in turn would deadlock.
        runner = threading.Thread(
            target=_run_host_func, args=(reached, gate, fn), name="eventapi-opencl-host-func"
        )
        runner.daemon = True
        try:
            runner.start()
        except BaseException:
            gate.set_status(_COMPLETE)  # never leave the queue held by a function that won't run
            raise

    def _adopt_stream(self, stream: object) -> cl.CommandQueue | None:
        if not isinstance(stream, cl.CommandQueue) or stream.context != self.context:
            return None
        if not stream.properties & _PROFILING:
            raise EventStateError(
                "opencl: this command queue cannot time events; create it with "
                "properties=cl.command_queue_properties.PROFILING_ENABLE"
            )
        return stream


if TYPE_CHECKING:
    from eventapi import EventApi, SupportsEventQuery, SupportsHostFunc
    from eventapi.driverkit import Event, Stream

    def _conforms(backend: OpenCLBackend) -> None:
        _api: EventApi[Event[Marker], Stream[cl.CommandQueue]] = backend
        _query: SupportsEventQuery[Event[Marker]] = backend
        _host_func: SupportsHostFunc[Stream[cl.CommandQueue]] = backend
