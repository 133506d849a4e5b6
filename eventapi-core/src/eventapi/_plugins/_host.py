"""The ``host`` backend's plugin module: registered like any third-party backend.

Declared by eventapi-core's own entry point (``host = "eventapi._plugins._host"``) and registered
in code by discovery as well, so ``EVENTAPI_DISABLE_PLUGIN_AUTOLOAD=1`` keeps it. Light on
purpose: the backend module is imported by :func:`_load`, not here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ._spec import BackendSpec, hookimpl

__all__ = ["eventapi_backends"]


def _load(device: int | None) -> Any:
    if device is not None:
        # The host has one clock and no device to pick; an index would mean nothing.
        raise ValueError(
            f"the host backend has no devices, so 'host:{device}' names none; select it as 'host'"
        )
    from ..host import HostBackend

    return HostBackend()


@hookimpl
def eventapi_backends() -> Iterator[BackendSpec]:
    """The embedded backend: lowest priority, always usable, nothing to install."""
    yield BackendSpec(name="host", load=_load, priority=0, install_hint="")
