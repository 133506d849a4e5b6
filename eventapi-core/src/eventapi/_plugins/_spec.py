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
    "NAME_PATTERN",
    "PLUGIN_API",
    "PROJECT",
    "RESERVED_NAMES",
    "BackendInfo",
    "BackendSpec",
    "hookimpl",
    "hookspec",
]

PROJECT: Final = "eventapi"
ENTRY_POINT_GROUP: Final = "eventapi.backends"

PLUGIN_API: Final[tuple[int, int]] = (1, 1)
"""The plugin contract's version, ``(major, minor)``; a plugin for another major is refused.

1.1 added :attr:`BackendSpec.default_device`.
"""

NAME_PATTERN: Final = r"[A-Za-z0-9_][A-Za-z0-9_.-]*"
"""A backend name: the NAME of ``NAME[:DEVICE]``, and so the name of its entry point.

Letters, digits, ``_``, ``.`` and ``-``, not starting with ``.`` or ``-``: no ``:`` (it
separates the device), no ``,`` (it separates ``EVENTAPI_DISABLE_PLUGINS``), no space.
"""

RESERVED_NAMES: Final = {
    "host": "eventapi-core",
    "cuda": "eventapi-cuda",
    "hip": "eventapi-hip",
}
"""Backend names that belong to this project's distributions, and the distribution of each.

Another distribution declaring one of them is listed as broken and never selected: the
embedded default ``host`` cannot be taken away by an installed package, and ``cuda`` or
``hip`` always mean this project's backends, whose install hints and extras the docs name.
"""

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

    ``default_device`` is the device index ``load(None)`` builds its object for, where a
    backend has devices and its default is fixed (``cuda`` and ``hip``: 0). Selection then
    loads ``"NAME"`` as ``"NAME:<default_device>"``, so the two spellings are one object
    whichever comes first. Left ``None``, selection learns the device from the loaded object's
    ``device`` attribute, which still makes ``"NAME"`` and ``"NAME:N"`` one object when
    ``"NAME"`` is selected first.
    """

    name: str
    load: Callable[[int | None], Any]
    priority: int = 50
    probe: Callable[[], str | None] = lambda: None
    install_hint: str = ""
    api_version: tuple[int, int] = PLUGIN_API
    default_device: int | None = None


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
