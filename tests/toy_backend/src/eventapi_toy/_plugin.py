"""The hook eventapi discovers through the entry point ``toy``. Light: imports no backend."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import eventapi


def _load(device: int | None) -> Any:
    if device is not None:
        raise ValueError(f"the toy backend has no devices; select it as 'toy', not 'toy:{device}'")
    from ._backend import ToyBackend

    return ToyBackend()


@eventapi.hookimpl
def eventapi_backends() -> Iterator[eventapi.BackendSpec]:
    # Below the default 50: a toy should never win automatic selection over a real device.
    yield eventapi.BackendSpec(
        name="toy", load=_load, priority=10, install_hint="pip install eventapi-toy"
    )
