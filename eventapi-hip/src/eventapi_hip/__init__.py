"""The ``hip`` backend of eventapi, on AMD's hip-python (``hip.hip``).

Select it with ``eventapi.backend("hip")`` (or ``"hip:1"`` for device 1). Importing this
package imports no driver binding: :class:`HipBackend` is loaded on first access, and the
plugin module the entry point names (:mod:`eventapi_hip._plugin`) stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._backend import HipBackend

__all__ = ["HipBackend"]


def __getattr__(name: str) -> Any:
    if name == "HipBackend":
        from ._backend import HipBackend

        return HipBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
