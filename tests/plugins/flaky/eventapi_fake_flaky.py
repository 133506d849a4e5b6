"""A backend that probes fine but whose load raises, as a driver that fails to initialise."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import eventapi


def _load(device: int | None) -> Any:
    raise OSError("widget driver initialisation failed: device busy")


@eventapi.hookimpl
def eventapi_backends() -> Iterator[eventapi.BackendSpec]:
    yield eventapi.BackendSpec(name="flaky", load=_load, priority=40)
