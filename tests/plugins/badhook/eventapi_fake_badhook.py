"""A plugin whose hook raises."""

from __future__ import annotations

from collections.abc import Iterator

import eventapi


@eventapi.hookimpl
def eventapi_backends() -> Iterator[eventapi.BackendSpec]:
    raise RuntimeError("the badhook plugin could not read its configuration")
