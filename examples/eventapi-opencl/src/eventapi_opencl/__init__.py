"""The ``opencl`` backend of eventapi, on pyopencl.

Select it with ``eventapi.backend("opencl")`` (``"opencl:1"`` for the second OpenCL device).
Importing this package imports no OpenCL binding: :class:`OpenCLBackend` is loaded on first
access, so the plugin module the entry point names (:mod:`eventapi_opencl._plugin`) stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._backend import OpenCLBackend

__all__ = ["OpenCLBackend"]


def __getattr__(name: str) -> Any:
    if name == "OpenCLBackend":
        from ._backend import OpenCLBackend

        return OpenCLBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
