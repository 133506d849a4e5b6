"""A plugin whose spec is named differently from its entry point."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import eventapi


def _load(device: int | None) -> Any:
    raise AssertionError("never reached: the spec is refused")


@eventapi.hookimpl
def eventapi_backends() -> Iterator[eventapi.BackendSpec]:
    yield eventapi.BackendSpec(name="othername", load=_load)
