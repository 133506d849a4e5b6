"""A sound backend plugin with alpha's priority, 70: the two tie."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import eventapi


def _load(device: int | None) -> Any:
    from eventapi.host import HostBackend

    return HostBackend()


@eventapi.hookimpl
def eventapi_backends() -> Iterator[eventapi.BackendSpec]:
    yield eventapi.BackendSpec(name="beta", load=_load, priority=70)
