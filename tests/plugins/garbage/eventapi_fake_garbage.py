"""A plugin that yields a dict where a BackendSpec belongs."""

from __future__ import annotations

from collections.abc import Iterator

import eventapi


@eventapi.hookimpl
def eventapi_backends() -> Iterator[object]:
    yield {"name": "garbage", "priority": 50}
