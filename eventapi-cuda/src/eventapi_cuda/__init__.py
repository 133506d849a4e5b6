"""The ``cuda`` backend of eventapi, on NVIDIA's ``cuda.bindings.driver``.

Select it with ``eventapi.backend("cuda")`` (or ``"cuda:1"`` for device 1). Importing this
package imports no driver binding: :class:`CudaBackend` is loaded on first access, and the
plugin module the entry point names (:mod:`eventapi_cuda._plugin`) stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._backend import CudaBackend

__all__ = ["CudaBackend"]


def __getattr__(name: str) -> Any:
    if name == "CudaBackend":
        from ._backend import CudaBackend

        return CudaBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
