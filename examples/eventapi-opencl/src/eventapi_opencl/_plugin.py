"""The ``opencl`` entry point: a light hook module that imports no OpenCL binding.

Discovery imports this module in every process that lists backends, so it decides usability
from package metadata alone; :func:`load` does the heavy import and asks the OpenCL platforms
for their devices.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import eventapi

__all__ = ["eventapi_backends", "load", "probe"]

INSTALL_HINT = 'pip install "eventapi-opencl[pocl]"'


def probe() -> str | None:
    """None when the opencl backend can work here, else a one-line reason that names the fix.

    Only whether pyopencl is installed: counting devices would load the OpenCL ICD loader and
    every vendor driver it lists, native code a probe must not run in a process that is only
    listing backends. A machine with pyopencl but no OpenCL device learns it from ``load``.
    """
    if importlib.util.find_spec("pyopencl") is None:
        return f"pyopencl is not installed; {INSTALL_HINT}"
    return None


def load(device: int | None) -> Any:
    """The backend object of OpenCL device ``device`` (all platforms' devices, in order)."""
    from ._backend import OpenCLBackend

    return OpenCLBackend(0 if device is None else device)


@eventapi.hookimpl
def eventapi_backends() -> Iterator[eventapi.BackendSpec]:
    yield eventapi.BackendSpec(
        name="opencl",
        load=load,
        priority=50,
        probe=probe,
        install_hint=INSTALL_HINT,
        default_device=0,
    )
