"""The plugin contract: the hook a backend distribution implements and the values it returns.

A backend distribution declares one entry point in the group ``eventapi.backends`` whose name is
the backend's name and whose value is a light module of pluggy hook implementations. That
module must not import a driver binding at import time: listing backends imports nothing heavy,
and only :attr:`BackendSpec.load` does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Final, final

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


def _no_reason() -> str | None:
    return None


class _Value:
    """An immutable value over ``__slots__``: equal and hashed by its fields, shown by them.

    What ``@dataclass(frozen=True, slots=True)`` makes, written out: this module is imported
    by every process that lists backends, and ``dataclasses`` (its import and the code it
    generates for the two classes) cost about 2 ms there, a fifth of what a first listing
    adds to pluggy's own import and scan.
    """

    __slots__ = ()
    _FIELDS: ClassVar[tuple[str, ...]] = ()  # the slots, in the order of __init__'s parameters

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to {name!r}: a {type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete {name!r}: a {type(self).__name__} is immutable")

    def _fields(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self._FIELDS)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, _Value)
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._FIELDS)
        return f"{type(self).__name__}({fields})"

    def __copy__(self) -> _Value:
        return self  # immutable: a copy is the value itself

    def __deepcopy__(self, memo: dict[int, object]) -> _Value:
        return self

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), self._fields())


@final
class BackendSpec(_Value):
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

    _FIELDS = (
        "name",
        "load",
        "priority",
        "probe",
        "install_hint",
        "api_version",
        "default_device",
    )
    __slots__ = _FIELDS

    name: str
    load: Callable[[int | None], Any]
    priority: int
    probe: Callable[[], str | None]
    install_hint: str
    api_version: tuple[int, int]
    default_device: int | None

    def __init__(
        self,
        name: str,
        load: Callable[[int | None], Any],
        priority: int = 50,
        probe: Callable[[], str | None] = _no_reason,
        install_hint: str = "",
        api_version: tuple[int, int] = PLUGIN_API,
        default_device: int | None = None,
    ) -> None:
        init = object.__setattr__
        init(self, "name", name)
        init(self, "load", load)
        init(self, "priority", priority)
        init(self, "probe", probe)
        init(self, "install_hint", install_hint)
        init(self, "api_version", api_version)
        init(self, "default_device", default_device)


@final
class BackendInfo(_Value):
    """One row of :func:`eventapi.backends`: a backend as discovery found it.

    ``status`` is ``"ok"``, ``"unavailable: <reason>"``, ``"broken: <error>"`` or ``"blocked"``;
    ``reason`` is the part after the colon (empty when ``ok``; for ``blocked``, the variable
    that blocks it). ``priority`` is 0 when a broken or blocked plugin could not say.
    """

    _FIELDS = (
        "name",
        "distribution",
        "version",
        "priority",
        "status",
        "reason",
        "install_hint",
    )
    __slots__ = _FIELDS

    name: str
    distribution: str
    version: str
    priority: int
    status: str
    reason: str
    install_hint: str

    def __init__(
        self,
        name: str,
        distribution: str,
        version: str,
        priority: int,
        status: str,
        reason: str,
        install_hint: str,
    ) -> None:
        init = object.__setattr__
        init(self, "name", name)
        init(self, "distribution", distribution)
        init(self, "version", version)
        init(self, "priority", priority)
        init(self, "status", status)
        init(self, "reason", reason)
        init(self, "install_hint", install_hint)

    @property
    def usable(self) -> bool:
        """True when the backend can be selected here."""
        return self.status == "ok"


class _Hooks:
    """The hook specification a backend plugin implements."""

    @hookspec
    def eventapi_backends(self) -> Iterable[BackendSpec]:  # type: ignore[empty-body]
        """Yield the :class:`BackendSpec` of each backend this plugin provides."""
