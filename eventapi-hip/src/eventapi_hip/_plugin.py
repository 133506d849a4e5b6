"""The ``hip`` entry point: a light hook module that imports no HIP binding.

:func:`probe` decides whether the backend can work here from package metadata and a
``ctypes`` call into the HIP runtime library (``hipGetDeviceCount``); :func:`load` does the
heavy import.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import eventapi
from eventapi import BackendSpec
from eventapi.driverkit import c_int_out, open_driver_library

__all__ = ["eventapi_backends", "load", "probe"]

INSTALL_HINT = 'pip install "eventapi-core[hip]"'
_LIBRARY = "libamdhip64.so"
_HIP_ERROR_NO_DEVICE = 100


def _library_names() -> list[str | bytes]:
    # The binding resolves the runtime's path itself (ROCM_PATH, rocm-sdk wheels, the bare
    # name); asking its resolver (plain Python, no binding import) opens the same file.
    names: list[str | bytes] = [_LIBRARY]
    try:
        from rocm.bindings.util.paths import get_library_path

        names.insert(0, get_library_path("amdhip64"))
    except Exception:  # an older hip-python without the resolver: the bare name will do
        pass
    return names


def probe() -> str | None:
    """None when the hip backend can work here, else a one-line reason.

    Cheap and import-free: the binding's presence, the runtime library (already mapped, or
    loadable) and its device count, asked of the library through ctypes.
    """
    try:
        installed = importlib.util.find_spec("hip") is not None
    except (ImportError, ValueError):
        installed = False
    if not installed:
        return f"hip-python is not installed; {INSTALL_HINT}"
    library = open_driver_library(_library_names())
    if library is None:
        return (
            f"no HIP runtime library ({_LIBRARY}) found; install ROCm and set ROCM_PATH or "
            "LD_LIBRARY_PATH to its lib directory"
        )
    status, count = c_int_out(library, "hipGetDeviceCount")
    if status == _HIP_ERROR_NO_DEVICE or (not status and count <= 0):
        return "no HIP device visible (hipGetDeviceCount found none)"
    if status:
        return f"the HIP runtime failed to count devices (hipGetDeviceCount returned {status})"
    return None


def load(device: int | None) -> object:
    """The :class:`~eventapi_hip.HipBackend` for ``device`` (default 0).

    Raises :class:`~eventapi.BackendUnavailableError` saying why when it cannot work here.
    """
    from ._backend import HipBackend

    return HipBackend(0 if device is None else device)


@eventapi.hookimpl
def eventapi_backends() -> Iterator[BackendSpec]:
    """The ``hip`` backend's :class:`~eventapi.BackendSpec`."""
    # default_device: load(None) is device 0, so "hip" and "hip:0" are one selected object.
    yield BackendSpec(
        name="hip",
        load=load,
        priority=100,
        probe=probe,
        install_hint=INSTALL_HINT,
        default_device=0,
    )
