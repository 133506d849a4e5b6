"""Backends registered in code: :func:`eventapi.register_backend` and its undoing.

An application that builds its own backend (or wraps one) registers its
:class:`~eventapi.BackendSpec` here instead of publishing a distribution with an entry point.
Discovery then lists and selects it like any plugin: its probe runs off the caller's thread
within the budget, its ``load`` only when it is selected. Registering or unregistering one name
changes what discovery and selection know of that name only; every other backend keeps its
row and its loaded objects.
"""

from __future__ import annotations

from . import _discovery
from ._plugin import check_spec
from ._spec import BackendSpec

__all__ = ["register_backend", "unregister_backend"]


def register_backend(spec: BackendSpec) -> None:
    """Make the backend ``spec`` describes selectable in this process, by ``spec.name``.

    Returns None; :func:`unregister_backend` undoes it. The backend is listed by
    :func:`eventapi.backends` (distribution ``"(registered in code)"``, no version) and selected
    as any installed backend is: by name, by ``EVENTAPI_BACKEND``, or by priority. It survives
    ``EVENTAPI_DISABLE_PLUGIN_AUTOLOAD``; ``EVENTAPI_DISABLE_PLUGINS`` blocks it. Its probe runs
    when its row is first needed, off the calling thread within ``EVENTAPI_PLUGIN_TIMEOUT``;
    its ``load`` when it is first selected. An installed distribution claiming the same name
    makes both a conflict, as two distributions would. Thread-safe; the objects of other
    backends stay cached.

    Raises:
        TypeError: ``spec`` is not an :class:`eventapi.BackendSpec`.
        ValueError: the name is reserved (``host``, ``cuda``, ``hip``), is not a backend name,
            or is already registered in code; or a field is unsound (``api_version`` of
            another major, a ``priority`` that is not an int, ``load`` or ``probe`` not
            callable), with the same message discovery gives a plugin.
    """
    if not isinstance(spec, BackendSpec):
        raise TypeError(
            f"register_backend() takes an eventapi.BackendSpec, got {type(spec).__name__}"
        )
    check_spec(spec)
    _discovery.register(spec)


def unregister_backend(name: str) -> bool:
    """Undo :func:`register_backend` for ``name``; return False when none was registered.

    Objects already loaded from it keep working for whoever holds them; later selections of
    ``name`` raise :class:`~eventapi.BackendNotFoundError` (unless an installed distribution
    provides it). Thread-safe.
    """
    return _discovery.unregister(name)
