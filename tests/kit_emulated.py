"""The cuda and hip backends for the conformance kit, able to fail a destroy and to capture.

The kit provokes a failed destroy through the backend object's ``inject_fault(method)`` and
skips those checks without one. The cuda and hip objects have none: a production object has no
switch that makes it fail. Over the emulated drivers the driver itself can fail a call, so these
factories build the real backend objects, each given an ``inject_fault`` that makes the emulated
driver fail the driver call the protocol method makes next: the failure reaches eventapi
through the real binding, as a real driver's would. Run the kit with the driver preloaded and
this directory on ``PYTHONPATH``, for example ``LD_PRELOAD=$PWD/build/emulated/libcuda.so.1
PYTHONPATH=tests pytest --pyargs eventapi.testing --eventapi-backend=kit_emulated:cuda``.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Final

from emulated_driver import DriverName, begin_capture, end_capture, load

# The protocol methods whose failure the kit provokes, and the driver function each calls.
_DRIVER_CALLS: Final[dict[str, str]] = {
    "event_destroy": "EventDestroy",
    "stream_destroy": "StreamDestroy",
}
_PREFIX: Final[dict[DriverName, str]] = {"cuda": "cu", "hip": "hip"}
# CUDA_ERROR_UNKNOWN and hipErrorUnknown.
_UNKNOWN: Final = 999


def _inject_fault(kind: DriverName, method: str, *, count: int = 1) -> None:
    """Make the emulated driver fail the next ``count`` calls that ``method`` makes."""
    stem = _DRIVER_CALLS.get(method)
    if stem is None:
        raise ValueError(
            f"inject_fault: {method!r} is not one of {', '.join(_DRIVER_CALLS)} on the emulated "
            f"{kind} driver"
        )
    load(kind).inject_fault(f"{_PREFIX[kind]}{stem}", code=_UNKNOWN, count=count)


def _with_faults(kind: DriverName, backend: Any) -> Any:
    # Attributes of this object only: the class, and every object eventapi.backend() returns,
    # stays without a fault switch. The capture aids let the kit start a real capture through
    # the binding, as the host backend's begin_capture does, for its capture checks.
    backend.inject_fault = partial(_inject_fault, kind)
    backend.begin_capture = partial(_capture, kind, backend, begin_capture)
    backend.end_capture = partial(_capture, kind, backend, end_capture)
    return backend


def _capture(kind: DriverName, backend: Any, action: Any, stream: Any) -> None:
    # As a backend's own test aid: a call of the backend's first binds the calling thread to
    # the device (any kit thread may call) and refuses a destroyed stream.
    backend.stream_is_capturing(stream)
    action(kind, stream.raw)


def cuda() -> Any:
    """A new ``CudaBackend`` for device 0 whose destroys the emulated driver can be made to fail."""
    from eventapi_cuda import CudaBackend

    return _with_faults("cuda", CudaBackend(0))


def hip() -> Any:
    """A new ``HipBackend`` for device 0 whose destroys the emulated driver can be made to fail."""
    from eventapi_hip import HipBackend

    return _with_faults("hip", HipBackend(0))
