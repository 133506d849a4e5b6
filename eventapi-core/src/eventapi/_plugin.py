"""The plugin contract: the hook a backend distribution implements and the values it returns.

A backend distribution declares one entry point in the group ``eventapi.backends`` whose name is
the backend's name and whose value is a light module of pluggy hook implementations. That
module must not import a driver binding at import time: listing backends imports nothing heavy,
and only :attr:`BackendSpec.load` does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, final

import pluggy

__all__ = [
    "ENTRY_POINT_GROUP",
    "PLUGIN_API",
    "PROJECT",
    "BackendInfo",
    "BackendSpec",
    "hookimpl",
    "hookspec",
]

PROJECT: Final = "eventapi"
ENTRY_POINT_GROUP: Final = "eventapi.backends"

PLUGIN_API: Final[tuple[int, int]] = (1, 0)
"""The plugin contract's version, ``(major, minor)``; a plugin for another major is refused."""

hookspec: Final = pluggy.HookspecMarker(PROJECT)
hookimpl: Final = pluggy.HookimplMarker(PROJECT)


@final
@dataclass(frozen=True, slots=True)
class BackendSpec:
    """How to load one backend, as a plugin declares it.

    ``load(device)`` does the heavy import and returns the backend object for ``device`` (an
    index, or ``None`` for the default device). ``probe()`` decides cheaply, without importing
    the driver binding, whether the backend can work here: ``None`` when it can, else a one-line
    reason. Priorities: ``host`` 0, the default 50, ``cuda`` and ``hip`` 100.
    """

    name: str
    load: Callable[[int | None], Any]
    priority: int = 50
    probe: Callable[[], str | None] = lambda: None
    install_hint: str = ""
    api_version: tuple[int, int] = PLUGIN_API


@final
@dataclass(frozen=True, slots=True)
class BackendInfo:
    """One row of :func:`eventapi.backends`: a backend as discovery found it.

    ``status`` is ``"ok"``, ``"unavailable: <reason>"``, ``"broken: <error>"`` or ``"blocked"``;
    ``reason`` is the part after the colon (empty when ``ok``; for ``blocked``, the variable
    that blocks it). ``priority`` is 0 when a broken or blocked plugin could not say.
    """

    name: str
    distribution: str
    version: str
    priority: int
    status: str
    reason: str
    install_hint: str

    @property
    def usable(self) -> bool:
        """True when the backend can be selected here."""
        return self.status == "ok"


class _Hooks:
    """The hook specification a backend plugin implements."""

    @hookspec
    def eventapi_backends(self) -> Iterable[BackendSpec]:  # type: ignore[empty-body]
        """Yield the :class:`BackendSpec` of each backend this plugin provides."""
