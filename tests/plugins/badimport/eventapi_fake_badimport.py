"""A plugin whose module imports a dependency that is not installed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import eventapi_fake_missing_dependency  # type: ignore[import-not-found]  # noqa: F401

import eventapi


def _load(device: int | None) -> Any:
    raise AssertionError("never reached: the module does not import")


@eventapi.hookimpl
def eventapi_backends() -> Iterator[eventapi.BackendSpec]:
    yield eventapi.BackendSpec(name="badimport", load=_load)
