"""A backend whose driver is missing here: its probe says so. Priority 90, above alpha."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import eventapi

LOADS: list[int | None] = []


def _load(device: int | None) -> Any:
    LOADS.append(device)
    raise AssertionError("discovery must not load a backend whose probe refused")


def _probe() -> str | None:
    return "no widget driver found (libwidget.so.3); install the widget driver"


@eventapi.hookimpl
def eventapi_backends() -> Iterator[eventapi.BackendSpec]:
    yield eventapi.BackendSpec(
        name="widget",
        load=_load,
        priority=90,
        probe=_probe,
        install_hint="pip install eventapi-widget",
    )
