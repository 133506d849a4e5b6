"""A plugin whose probe raises instead of returning a reason."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import eventapi


def _load(device: int | None) -> Any:
    raise AssertionError("never reached: the probe failed")


def _probe() -> str | None:
    raise KeyError("WIDGET_HOME")


@eventapi.hookimpl
def eventapi_backends() -> Iterator[eventapi.BackendSpec]:
    yield eventapi.BackendSpec(name="badprobe", load=_load, priority=60, probe=_probe)
