"""The ``cuda`` entry point: a light hook module that imports no CUDA binding.

:func:`probe` decides whether the backend can work here from package metadata and a few
``ctypes`` calls into the driver library (``cuDriverGetVersion``, ``cuInit``,
``cuDeviceGetCount``); :func:`load` does the heavy import.
"""

from __future__ import annotations

import ctypes
import importlib.util
from collections.abc import Iterator

import eventapi
from eventapi import BackendSpec

# eventapi.driverkit re-exports these two, but importing it imports the whole handle layer,
# and this module is imported wherever backends are listed. This plugin is released with
# eventapi-core at one version, so it may import them from where they are defined.
from eventapi.driverkit.probe import c_int_out, installed_version, open_driver_library

__all__ = ["eventapi_backends", "load", "probe"]

INSTALL_HINT = 'pip install "eventapi-core[cuda]"'
_LIBRARY = "libcuda.so.1"
_CUDA_ERROR_NO_DEVICE = 100
# The extra of eventapi-core that pins the cuda-bindings major of each driver's CUDA major.
_EXTRAS = {12: "cuda12", 13: "cuda13"}


def probe() -> str | None:
    """None when the cuda backend can work here, else a one-line reason.

    Cheap and import-free: the binding's presence from its metadata, the driver library
    (already mapped, or loadable), the driver's CUDA version against the binding's, and the
    device count, asked of the library through ctypes. Where installing is the fix, the reason
    ends with the command, with the extra that fits the driver's CUDA major.
    """
    try:
        found = importlib.util.find_spec("cuda.bindings") is not None
    except (ImportError, ValueError):
        found = False
    binding_version = installed_version("cuda-bindings") if found else None
    library = open_driver_library([_LIBRARY])
    if binding_version is None:
        driver = None if library is None else _driver_version(library)
        return f"cuda-bindings is not installed; {_install_command(driver)}"
    if library is None:
        return f"no NVIDIA driver library ({_LIBRARY}) found; install the NVIDIA driver"
    return _version_reason(library, binding_version) or _device_reason(library)


def _install_command(driver: int | None) -> str:
    """The pip command for the extra that fits a driver version (None: not known)."""
    extra = None if driver is None else _EXTRAS.get(driver // 1000)
    return INSTALL_HINT if extra is None else f'pip install "eventapi-core[{extra}]"'


def _driver_version(library: ctypes.CDLL) -> int | None:
    """The CUDA version the driver supports, as CUDA encodes it (12040: 12.4), or None."""
    status, version = c_int_out(library, "cuDriverGetVersion")
    return None if status else version


def _version_reason(library: ctypes.CDLL, binding_version: str) -> str | None:
    # cuda-bindings N.x asks the driver for the N.0 versions of its entry points, so it needs a
    # driver for CUDA N.0 or newer; an older binding runs on a newer driver.
    version = _driver_version(library)
    if version is None:
        return f"{_LIBRARY} fails cuDriverGetVersion; reinstall the NVIDIA driver"
    needed = int(binding_version.split(".", maxsplit=1)[0])
    if version >= needed * 1000:
        return None
    short = ".".join(binding_version.split(".")[:2])
    found = f"driver supports CUDA {version // 1000}.{version % 1000 // 10}, cuda-bindings {short}"
    extra = _EXTRAS.get(version // 1000)
    if extra is None:
        oldest = min(_EXTRAS)
        return f"{found} needs {needed}.0; update the NVIDIA driver (CUDA {oldest}.0 or newer)"
    return (
        f'{found} needs {needed}.0; pip install "eventapi-core[{extra}]" for this driver, '
        "or update the driver"
    )


def _device_reason(library: ctypes.CDLL) -> str | None:
    status = int(library.cuInit(0))
    if status == _CUDA_ERROR_NO_DEVICE:
        return "no CUDA device visible (cuInit returned CUDA_ERROR_NO_DEVICE)"
    if status:
        return f"the NVIDIA driver failed to initialize (cuInit returned {status}); see nvidia-smi"
    status, count = c_int_out(library, "cuDeviceGetCount")
    if status or count <= 0:
        return f"no CUDA device visible (cuDeviceGetCount returned {status or count})"
    return None


def load(device: int | None) -> object:
    """The :class:`~eventapi_cuda.CudaBackend` for ``device`` (default 0).

    Raises :class:`~eventapi.BackendUnavailableError` saying why when it cannot work here.
    """
    from ._backend import CudaBackend

    return CudaBackend(0 if device is None else device)


@eventapi.hookimpl
def eventapi_backends() -> Iterator[BackendSpec]:
    """The ``cuda`` backend's :class:`~eventapi.BackendSpec`."""
    # default_device: load(None) is device 0, so "cuda" and "cuda:0" are one selected object.
    yield BackendSpec(
        name="cuda",
        load=load,
        priority=100,
        probe=probe,
        install_hint=INSTALL_HINT,
        default_device=0,
    )
