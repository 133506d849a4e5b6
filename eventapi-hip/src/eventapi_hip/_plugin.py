"""The ``hip`` entry point: a light hook module that imports no HIP binding.

:func:`probe` decides whether the backend can work here from package metadata, the HIP version
hip-python states it was generated from, and ``ctypes`` calls into the HIP runtime library
(``hipRuntimeGetVersion``, ``hipGetDeviceCount``); :func:`load` does the heavy import.
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
from eventapi.driverkit.probe import c_int_out, open_driver_library

__all__ = ["eventapi_backends", "load", "probe"]

INSTALL_HINT = 'pip install "eventapi-core[hip]"'
_LIBRARY = "libamdhip64.so"
_HIP_ERROR_NO_DEVICE = 100
# The oldest HIP runtime (major, minor) that eventapi-hip's hip-python requirement admits.
_OLDEST_RUNTIME = (6, 2)
# The last ROCm release whose major.minor is also its HIP version's.
_LAST_ROCM_EQUAL_HIP = (7, 2)


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
    loadable), the runtime's HIP version against the binding's, and the device count, asked of
    the library through ctypes.
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
    version_reason = _version_reason(library)
    if version_reason is not None:
        return version_reason
    status, count = c_int_out(library, "hipGetDeviceCount")
    if status == _HIP_ERROR_NO_DEVICE or (not status and count <= 0):
        return "no HIP device visible (hipGetDeviceCount found none)"
    if status:
        return f"the HIP runtime failed to count devices (hipGetDeviceCount returned {status})"
    return None


def _binding_hip_version() -> tuple[int, int] | None:
    """(major, minor) of the HIP that hip-python was generated from, or None if it says not.

    ``rocm.version`` is a module of plain constants (no library is loaded); hip-python releases
    without it are not checked.
    """
    try:
        from rocm.version import HIP_VERSION_TUPLE

        return int(HIP_VERSION_TUPLE[0]), int(HIP_VERSION_TUPLE[1])
    except Exception:  # absent, or not the shape documented: nothing to compare against
        return None


def _version_reason(library: ctypes.CDLL) -> str | None:
    # hip-python is generated from one ROCm release's headers and is meant for that release: a
    # binding newer than the runtime may call functions the runtime lacks, or pass structs of a
    # newer layout. An older binding on a newer runtime is what AMD's compatibility covers.
    binding = _binding_hip_version()
    if binding is None:
        return None
    status, encoded = c_int_out(library, "hipRuntimeGetVersion")
    if status:
        return f"the HIP runtime fails hipRuntimeGetVersion (returned {status}); reinstall ROCm"
    # HIP encodes major * 10_000_000 + minor * 100_000 + patch.
    runtime = (encoded // 10_000_000, encoded // 100_000 % 100)
    if binding <= runtime:
        return None
    found = (
        f"HIP runtime {runtime[0]}.{runtime[1]}, hip-python built for HIP {binding[0]}.{binding[1]}"
    )
    if runtime < _OLDEST_RUNTIME:
        oldest = ".".join(map(str, _OLDEST_RUNTIME))
        return f"{found}; update ROCm (eventapi-hip needs {oldest} or newer)"
    if runtime > _LAST_ROCM_EQUAL_HIP:
        # Later ROCm releases carry a HIP version that no longer names the ROCm release, and
        # hip-python is numbered by ROCm's.
        return f'{found}; pip install "hip-python~=R.0" with R your ROCm version, or update ROCm'
    # hip-python's release numbers are ROCm's, whose major.minor is HIP's up to ROCm 7.2;
    # "~=M.m.0" picks the newest hip-python of that release.
    return (
        f'{found}; pip install "hip-python~={runtime[0]}.{runtime[1]}.0" for this runtime, '
        "or update ROCm"
    )


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
