"""A plugin that forgot to mark its hook with @eventapi.hookimpl, so pluggy never sees it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import eventapi


def _load(device: int | None) -> Any:
    raise AssertionError("never reached: the hook is not registered")


def eventapi_backends() -> Iterator[eventapi.BackendSpec]:
    yield eventapi.BackendSpec(name="nohook", load=_load)
