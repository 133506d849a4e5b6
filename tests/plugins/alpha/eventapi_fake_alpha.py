"""A sound backend plugin, priority 70. Records each load so tests can count them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import eventapi

LOADS: list[int | None] = []
"""The device argument of every load() call, in order."""

ENTERED = threading.Event()
"""Set when a load() begins."""

GATE: threading.Event | None = None
"""When a test sets it, load() waits for it: holds a load open while other threads arrive."""


def _load(device: int | None) -> Any:
    from eventapi.host import HostBackend

    LOADS.append(device)
    ENTERED.set()
    if GATE is not None:
        GATE.wait(timeout=30)
    return HostBackend()


@eventapi.hookimpl
def eventapi_backends() -> Iterator[eventapi.BackendSpec]:
    yield eventapi.BackendSpec(name="alpha", load=_load, priority=70)
