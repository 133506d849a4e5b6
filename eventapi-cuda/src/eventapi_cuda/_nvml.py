"""The cuda backend's clocks, ``eventapi.SupportsClocks``, read through NVML with nvidia-ml-py.

nvidia-ml-py (``import pynvml``) is optional: the extra ``eventapi-cuda[nvml]`` (and
``eventapi-core[cuda12,nvml]`` ...) installs it. Without it the backend class has no
``device_clocks`` and so no ``SupportsClocks``; :func:`available` says which, without importing
it. NVML itself is opened at the first reading, by pynvml (``libnvidia-ml.so.1``, the NVIDIA
driver's), and initialized once for the process, never shut down (a shutdown under another
user of pynvml in the process would pull NVML from under it).

The NVML device is matched to the CUDA device by the UUID the driver gives
(``cuDeviceGetUuid``), else by its PCI bus id (``cuDeviceGetPCIBusId``), never by index: NVML
counts every GPU of the machine in PCI order, CUDA only those ``CUDA_VISIBLE_DEVICES`` shows, by
default fastest first.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Callable
from typing import Any, Final, final

from eventapi import DeviceClocks, DriverError, UnsupportedError

__all__ = ["NvmlClocks", "available", "uuid_text"]

# NVML's clock event reasons (nvmlClocksEventReason*) that hold the clock down for the
# device's sake. Left out: an idle device (0x1), a clock a user set (0x2, 0x100), and sync boost
# (0x10), which matches the clocks of several GPUs.
_REASONS: Final = (
    (0x4, "power cap"),
    (0x8, "hardware slowdown"),
    (0x20, "thermal slowdown"),
    (0x40, "hardware thermal slowdown"),
    (0x80, "power brake"),
)

_init_lock = threading.Lock()
_initialized = False


def available() -> bool:
    """Whether nvidia-ml-py is installed (looked up, not imported)."""
    return importlib.util.find_spec("pynvml") is not None


def _nvml() -> Any:
    global _initialized
    import pynvml

    with _init_lock:
        if not _initialized:
            pynvml.nvmlInit()
            _initialized = True
    return pynvml


@final
class NvmlClocks:
    """The NVML device of one CUDA device, found at the first reading."""

    __slots__ = ("_handle", "_lock", "_max_mhz", "_refused", "_where")

    def __init__(self, where: Callable[[], tuple[str, str]]) -> None:
        self._where = where  # () -> (UUID as NVML writes it, PCI bus id): asked once
        self._handle: Any = None
        self._max_mhz = 0
        self._refused: str | None = None
        self._lock = threading.Lock()

    def read(self) -> DeviceClocks:
        """The device's SM clock, its maximum and what holds it down, from NVML."""
        pynvml, handle = self._found()
        try:
            mhz = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
            try:
                mask = pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
            except pynvml.NVMLError_FunctionNotFound:  # its name before NVML 12.2
                mask = pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
        except pynvml.NVMLError as exc:
            raise _error(exc, "nvmlDeviceGetClockInfo") from exc
        reasons = tuple(word for bit, word in _REASONS if mask & bit)
        return DeviceClocks(int(mhz), self._max_mhz, reasons)

    def _found(self) -> tuple[Any, Any]:
        with self._lock:
            if self._handle is None and self._refused is None:
                self._refused = self._find()
            if self._refused:
                raise UnsupportedError(self._refused)
            return _nvml(), self._handle

    def _find(self) -> str:
        # Empty once the handle is found, else why it was not.
        try:
            pynvml = _nvml()
        except Exception as exc:
            return (
                f"cuda: the device's clocks cannot be read: NVML did not start ({exc}); it is "
                "the NVIDIA driver's libnvidia-ml.so.1, which nvidia-ml-py opens"
            )
        uuid, bus_id = self._where()
        for find, key in (
            (pynvml.nvmlDeviceGetHandleByUUID, uuid),
            (pynvml.nvmlDeviceGetHandleByPciBusId, bus_id),
        ):
            try:
                handle = find(key)
                self._max_mhz = int(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM))
            except pynvml.NVMLError:
                continue  # not that key (a MIG instance's UUID has no clocks of its own)
            self._handle = handle
            return ""
        return (
            f"cuda: the device's clocks cannot be read: NVML knows no device {uuid} nor one at "
            f"PCI bus {bus_id}"
        )


def _error(exc: Any, call: str) -> DriverError:
    code = int(getattr(exc, "value", 0) or 0)
    return DriverError("cuda", call, code, type(exc).__name__, str(exc))


def uuid_text(raw: bytes) -> str:
    """The 16 bytes of ``cuDeviceGetUuid`` as NVML writes a GPU's UUID."""
    text = raw.hex()
    return f"GPU-{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
