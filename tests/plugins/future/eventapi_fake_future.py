"""A plugin built for a later major of the plugin contract."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import eventapi


def _load(device: int | None) -> Any:
    raise AssertionError("never reached: the plugin API major differs")


@eventapi.hookimpl
def eventapi_backends() -> Iterator[eventapi.BackendSpec]:
    yield eventapi.BackendSpec(name="future", load=_load, api_version=(2, 0))
