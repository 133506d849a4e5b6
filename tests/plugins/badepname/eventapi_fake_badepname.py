"""A sound plugin declared under an entry point name with a space, which no one can select.

Priority 95: were it listed as usable, it would be chosen as the default.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import eventapi


def _load(device: int | None) -> Any:
    from eventapi.host import HostBackend

    return HostBackend()


@eventapi.hookimpl
def eventapi_backends() -> Iterator[eventapi.BackendSpec]:
    yield eventapi.BackendSpec(name="fancy gpu", load=_load, priority=95)
