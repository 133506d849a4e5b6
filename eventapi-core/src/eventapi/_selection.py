"""Backend selection: which discovered backend :func:`backend` returns, and the one object per pair.

The choice is, in order: the argument ``"NAME[:DEVICE]"``; else the variable
``EVENTAPI_BACKEND`` (same syntax, read by each call without a name); else the usable backend of
highest priority, where a tie at the top is an error, not a coin toss. An explicit choice that
cannot be satisfied raises with a message that names the fix (not installed, blocked, broken,
unusable here); it never falls back to another backend.

Discovery (:mod:`eventapi._discovery`) says what exists; this module asks it for one name
(``entry``) or for every row (``rows``) and never imports a plugin itself. The loaded objects
are cached per (name, device) and the cache is emptied whenever discovery forgets what it learnt
(:func:`~eventapi._discovery.refresh`, ``register``, ``unregister``).

Locking: the one re-entrant lock is the registry's (``_registry.lock``). :func:`backend` holds it
across a first ``load``, so concurrent callers of one pair wait and receive the same object; it
is re-entrant so that a ``load`` may itself call :func:`backend` (a backend composed over
``host``).
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any, Final

from ._discovery import (
    ENV_DISABLE_AUTOLOAD,
    ENV_DISABLE_PLUGINS,
    KNOWN_HINTS,
    _describe,
    _registry,
)
from ._errors import BackendError, BackendNotFoundError, BackendUnavailableError
from ._plugin import ENTRY_POINT_GROUP, BackendSpec
from ._protocol import PROTOCOL_METHODS

if TYPE_CHECKING:
    from ._protocol import EventApi

__all__ = ["ENV_BACKEND", "backend", "choose"]

ENV_BACKEND: Final = "EVENTAPI_BACKEND"

# What load() must return, checked by name so that a plugin returning the wrong object fails
# at selection, with its name, not at the first call.
_PROTOCOL_MEMBERS: Final = ("BACKEND", *PROTOCOL_METHODS)

_NAME_RE: Final = re.compile(r"(?P<name>[^:\s]+)(?::(?P<device>[0-9]+))?")
_FORM: Final = "NAME or NAME:DEVICE, for example 'cuda' or 'cuda:1'"

# One object per (name, device), guarded by _registry.lock. Emptied when discovery forgets:
# objects already handed out keep working, later calls build new ones.
_objects: Final[dict[tuple[str, int | None], Any]] = {}
_registry.on_forget(_objects.clear)


def backend(name: str | None = None) -> EventApi[Any, Any]:
    """Return the ready backend object for ``name``; one object per (name, device), cached.

    ``name`` is ``"NAME"`` or ``"NAME:DEVICE"`` (``"cuda:1"``: device index 1). The choice is,
    in order: the argument; else the variable ``EVENTAPI_BACKEND`` (same syntax); else the
    usable backend of highest priority. An explicit choice (argument or variable) that cannot be
    satisfied raises; it never falls back to another backend.

    ``"cuda"`` (device ``None``: the backend's default device) and ``"cuda:0"`` are two
    selections and give two objects, even where the default device is 0; handles of one are
    foreign to the other. Use one spelling throughout a program.

    The first call for a (name, device) pair imports the backend's driver binding and may take
    a while; concurrent callers wait for it and receive the same object.

    Raises:
        ValueError: ``name`` (or ``EVENTAPI_BACKEND``) is not of the form NAME[:DEVICE].
        BackendNotFoundError: no backend of that name is installed; the message lists those
            that are and, for the backends this project publishes, the pip command.
        BackendUnavailableError: the backend is installed but cannot run here (the probe's
            reason), is blocked by ``EVENTAPI_DISABLE_PLUGINS``, or its ``load`` failed (the
            original exception is chained).
        BackendError: the plugin is broken or its name is claimed twice; or no name was given
            and two usable backends tie for the top priority (the message says how to choose).
    """
    chosen, device, source = choose(name)
    key = (chosen, device)
    with _registry.lock:
        obj = _objects.get(key)
        if obj is not None:
            return obj  # type: ignore[no-any-return]
        spec = _usable_spec(chosen, source)
        obj = _load(spec, device)
        _objects[key] = obj
        return obj  # type: ignore[no-any-return]


def choose(name: str | None = None) -> tuple[str, int | None, str]:
    """The (name, device, source) :func:`backend` would select, without loading it.

    ``source`` is ``"argument"``, ``"EVENTAPI_BACKEND"`` or ``"priority"``. Raises what
    :func:`backend` raises while choosing (ValueError, BackendError for a tie,
    BackendUnavailableError when nothing is usable).
    """
    if name is not None:
        if not isinstance(name, str):
            raise TypeError(f"backend name must be a str, got {type(name).__name__}")
        parsed, device = _parse(name, f"backend name {name!r}")
        return parsed, device, "argument"
    value = os.environ.get(ENV_BACKEND, "").strip()
    if value:
        parsed, device = _parse(value, f"{ENV_BACKEND}={value!r}")
        return parsed, device, ENV_BACKEND
    rows = _registry.rows()
    usable = [row for row in rows if row.usable]
    if not usable:
        listing = "; ".join(f"{row.name}: {row.status}" for row in rows) or "none installed"
        raise BackendUnavailableError(
            f"no usable backend here ({listing}). Fix one of those, or unset "
            f"{ENV_DISABLE_PLUGINS} / {ENV_DISABLE_AUTOLOAD} if they hide one"
        )
    top = [row for row in usable if row.priority == usable[0].priority]
    if len(top) > 1:
        names = ", ".join(f"{row.name} ({row.distribution} {row.version})" for row in top)
        raise BackendError(
            f"several usable backends share the top priority {top[0].priority}: {names}; "
            f"choose one with eventapi.backend({top[0].name!r}) or "
            f"{ENV_BACKEND}={top[0].name}"
        )
    return top[0].name, None, "priority"


def _parse(text: str, subject: str) -> tuple[str, int | None]:
    match = _NAME_RE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{subject} is not of the form {_FORM}")
    device = match.group("device")
    return match.group("name"), int(device) if device is not None else None


# -- why a chosen name cannot be used ---------------------------------------------------------


def _usable_spec(name: str, source: str) -> BackendSpec:
    subject = f"backend {name!r}" + (f" (from {ENV_BACKEND})" if source == ENV_BACKEND else "")
    entry = _registry.entry(name)
    if entry is None:
        raise BackendNotFoundError(_not_found(name, subject))
    row = entry.rows[0]
    where = f"{row.distribution} {row.version}".strip()
    if row.status == "blocked":
        raise BackendUnavailableError(
            f"{subject} is blocked by {ENV_DISABLE_PLUGINS}="
            f"{os.environ.get(ENV_DISABLE_PLUGINS, '')!r}; remove {name!r} from that "
            "variable to use it"
        )
    if entry.spec is None:
        raise BackendError(f"{subject} ({where}) is broken: {row.reason}")
    if not row.usable:
        raise BackendUnavailableError(
            f"{subject} ({where}) cannot be used here: {row.reason}. {_usable_elsewhere(name)}"
        )
    return entry.spec


def _usable_elsewhere(name: str) -> str:
    others = [row.name for row in _registry.rows() if row.usable and row.name != name]
    if not others:
        return "No other backend is usable here either"
    return (
        f"Usable here: {', '.join(others)}; select one with eventapi.backend(NAME) or "
        f"{ENV_BACKEND}=NAME"
    )


def _not_found(name: str, subject: str) -> str:
    installed = (
        ", ".join(f"{row.name} ({row.status.split(':')[0]})" for row in _registry.rows()) or "none"
    )
    message = f"{subject} is not installed; installed backends: {installed}"
    hint = KNOWN_HINTS.get(name)
    if hint:
        message += f". Install it with: {hint}"
    else:
        message += (
            f". A backend is a distribution declaring an entry point {name!r} in the group "
            f"{ENTRY_POINT_GROUP!r}; install the one that provides it"
        )
    if not _registry.autoload:
        message += (
            f". {ENV_DISABLE_AUTOLOAD} is set, so installed plugins were not scanned; "
            "unset it to find them"
        )
    return message


def _load(spec: BackendSpec, device: int | None) -> Any:
    what = spec.name if device is None else f"{spec.name}:{device}"
    try:
        obj = spec.load(device)
    except BackendError:
        raise  # the plugin already said what is wrong, in eventapi's own terms
    except Exception as exc:
        raise BackendUnavailableError(f"backend {what!r} failed to load: {_describe(exc)}") from exc
    missing = [member for member in _PROTOCOL_MEMBERS if not hasattr(obj, member)]
    if missing:
        raise BackendError(
            f"backend {what!r}: load() returned {obj!r}, which lacks {', '.join(missing)}; "
            "it must return an object satisfying eventapi.EventApi"
        )
    return obj
