"""Backend selection: which backend :func:`backend` returns, and one object per device.

The choice is, in order: the argument ``"NAME[:DEVICE]"``; else the variable
``EVENTAPI_BACKEND`` (same syntax, read by each call without a name); else the usable backend of
highest priority, where a tie at the top is an error, not a coin toss. An explicit choice that
cannot be satisfied raises with a message that names the fix (not installed, blocked, broken,
unusable here); it never falls back to another backend.

Discovery (:mod:`eventapi._plugins._discovery`) says what exists; this module asks it for one name
(``entry``) or for every row (``backends``) and never imports a plugin itself.

One object per device: the loaded objects are kept per process and device in the name's
discovery entry (``Entry.loaded``), and every spelling of one device is one key. ``"NAME"`` is
loaded as ``"NAME:<default_device>"`` when the plugin declares its default device; otherwise
``load(None)``'s object is filed under the device it reports (its ``device`` attribute) as
well. They go with the entry, when discovery forgets it (a rescan, a registration of the name);
a child after ``fork()`` has another process id, so it loads its own and never waits on a cell
of its parent's (objects are per process: the backends refuse a parent's handles there).

Locking: each (name, device) has a once-cell, found or put in the entry's dictionary by one
``dict.setdefault``, which is atomic, so no lock guards the dictionary. The first caller loads
on its own thread holding that cell's lock only, later callers of *that pair* wait for it, and
callers of any other pair do not wait at all. A ``load`` may select another backend (a backend
composed over ``host``); one that selects its own pair gets :class:`~eventapi.BackendError`
instead of a deadlock.
"""

from __future__ import annotations

import os
import re
import threading
import warnings
from collections.abc import Sequence
from typing import Any, Final, final

from .._errors import BackendError, BackendNotFoundError, BackendUnavailableError
from .._protocol import PROTOCOL_METHODS, EventApi
from . import _discovery
from ._discovery import ENV_DISABLE_AUTOLOAD, ENV_DISABLE_PLUGINS
from ._plugin import KNOWN_HINTS, Loaded, Plugin, describe, normalize
from ._spec import ENTRY_POINT_GROUP, NAME_PATTERN, RESERVED_NAMES, BackendInfo, BackendSpec

__all__ = ["ENV_BACKEND", "backend", "choose", "passed_over", "preview"]

ENV_BACKEND: Final = "EVENTAPI_BACKEND"

_NAME_RE: Final = re.compile(rf"(?P<name>{NAME_PATTERN})(?::(?P<device>[0-9]+))?")
_FORM: Final = "NAME or NAME:DEVICE, for example 'cuda' or 'cuda:1'"


@final
class _Cell:
    """One device's object, loaded once under its ``lock``."""

    __slots__ = ("loading", "lock", "obj")

    def __init__(self) -> None:
        self.lock = threading.RLock()  # held by the one loading: the device's other callers wait
        self.loading = False  # entered again by the thread loading: a load() that selects itself
        self.obj: Any = None


def _load_once(spec: BackendSpec, plugin: Plugin, cells: Loaded, device: int | None) -> Any:
    """The object for ``device``, loaded once in this process and kept in ``cells``, the entry's."""
    what = spec.name if device is None else f"{spec.name}:{device}"  # as it was selected
    pid = os.getpid()
    cell: _Cell = cells.setdefault((pid, device), _Cell())
    with cell.lock:
        if cell.obj is not None:
            return cell.obj  # loaded before, or while this caller waited
        if cell.loading:
            raise BackendError(
                f"backend {what!r}: its load() selected {what!r} again, which would wait for itself"
            )
        cell.loading = True
        try:
            # A load that fails leaves the cell empty: each caller waiting tries it in turn,
            # and sees its error as its own.
            obj = _load(spec, plugin, device, what)
        finally:
            cell.loading = False
        reported = getattr(obj, "device", None)
        if device is None and isinstance(reported, int) and not isinstance(reported, bool):
            same = cells.setdefault((pid, reported), cell)
            if same.obj is not None:
                # A plugin without a default_device whose "NAME:N" came first: that object
                # stays the one; this second one is dropped unused.
                obj = same.obj
        cell.obj = obj
        return obj


def backend(name: str | None = None) -> EventApi[Any, Any]:
    """Return the ready backend object for ``name``: one per (name, device), cached.

    ``name`` is ``"NAME"`` or ``"NAME:DEVICE"`` (``"cuda:1"``: device index 1). The choice is,
    in order: the argument; else the variable ``EVENTAPI_BACKEND`` (same syntax); else the
    usable backend of highest priority. An explicit choice (argument or variable) that cannot be
    satisfied raises; it never falls back to another backend.

    Every spelling of one device is one object, whichever comes first: ``"cuda"`` (the
    backend's default device), ``"cuda:0"`` and ``EVENTAPI_BACKEND=cuda`` give the same object
    where the default device is 0, and each accepts the handles of the others. ``"cuda:1"`` is
    another object. An object built directly from a backend class is not cached and owns its
    own handles.

    The first call for a device imports the backend's driver binding and may take a while; it
    runs on the calling thread, concurrent callers for the same device wait for it and receive
    the same object, and callers for any other backend or device do not wait. A call for a
    device already loaded returns at once. Thread-safe; after ``fork()`` the child builds its
    own objects.

    Raises:
        ValueError: ``name`` (or ``EVENTAPI_BACKEND``) is not of the form NAME[:DEVICE].
        BackendNotFoundError: no backend of that name is installed; the message lists those
            that are and, for the backends this project publishes, the pip command.
        BackendUnavailableError: the backend is installed but cannot run here (the probe's
            reason), is blocked by ``EVENTAPI_DISABLE_PLUGINS``, or its ``load`` failed (the
            original exception is chained).
        BackendError: the plugin is broken (timed out included) or its name is claimed twice;
            or no name was given and two usable backends tie for the top priority (the message
            says how to choose).

    Warns:
        RuntimeWarning: no name was given (argument or variable) and a broken plugin (one
            that crashed, timed out or failed to import included) could have been chosen
            ahead of the one that was: its priority, 0 when it could not say, is at least the
            chosen one's. The warning names it and its error; choosing a backend by name, or
            blocking the broken one with ``EVENTAPI_DISABLE_PLUGINS``, silences it.
    """
    chosen, device, source = choose(name)
    if source == "priority":
        over = passed_over(_discovery.backends(), chosen)
        if over:
            warnings.warn(_passed_over_message(chosen, over), RuntimeWarning, stacklevel=2)
    spec, plugin, cells = _usable(chosen, source)
    device = spec.default_device if device is None else device
    return _load_once(spec, plugin, cells, device)  # type: ignore[no-any-return]


def choose(name: str | None = None) -> tuple[str, int | None, str]:
    """The (name, device, source) :func:`backend` would select, without checking or loading it.

    ``source`` is ``"argument"``, ``"EVENTAPI_BACKEND"`` or ``"priority"``. Raises what
    :func:`backend` raises while choosing (ValueError, BackendError for a tie,
    BackendUnavailableError when nothing is usable).
    """
    if name is not None:
        if not isinstance(name, str):
            raise TypeError(f"backend name must be a str, got {type(name).__name__}")
        return _parse(name, f"backend name {name!r}", "argument")
    # The variable may carry the blanks a shell or a file leaves around a value.
    value = os.environ.get(ENV_BACKEND, "").strip()
    if value:
        return _parse(value, f"{ENV_BACKEND}={value!r}", ENV_BACKEND)
    rows = _discovery.backends()
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
            f"choose one with eventapi.backend({top[0].name!r}) or {ENV_BACKEND}={top[0].name}"
        )
    return top[0].name, None, "priority"


def passed_over(rows: Sequence[BackendInfo], chosen: str) -> list[BackendInfo]:
    """The broken rows that could have been chosen ahead of ``chosen`` by priority.

    A broken row qualifies when its priority (0 when the plugin could not say) is at least
    the chosen backend's, and it claims another name, one it may have (not a name reserved
    for another distribution).
    """
    top = max((row.priority for row in rows if row.name == chosen and row.usable), default=0)
    return [
        row
        for row in rows
        if row.status.startswith("broken: ")
        and row.priority >= top
        and row.name != chosen
        # Its name is reserved for no one or for its own distribution: an impostor of a
        # reserved name is never selectable under it, so not a backend the user would have had.
        and RESERVED_NAMES.get(row.name) in (None, normalize(row.distribution))
    ]


def _passed_over_message(chosen: str, over: Sequence[BackendInfo]) -> str:
    what = "; ".join(
        f"{row.name!r} ({row.distribution} {row.version}, priority {row.priority}) is {row.status}"
        for row in over
    )
    return (
        f"eventapi.backend() chose {chosen!r} by priority, but {what}. Fix it (the error says "
        f"how; `eventapi backends` shows every row), or choose with eventapi.backend(NAME) or "
        f"{ENV_BACKEND}=NAME, or block it with {ENV_DISABLE_PLUGINS}"
    )


def preview(name: str | None = None) -> tuple[str, int | None, str]:
    """What :func:`backend` would do, short of loading: its choice, or the error it would raise.

    Returns :func:`choose`'s (name, device, source) when the chosen backend is installed, sound
    and usable here; raises what :func:`backend` would raise otherwise. A ``load`` that fails
    is the one failure it cannot foresee.
    """
    chosen, device, source = choose(name)
    spec, _, _ = _usable(chosen, source)
    return chosen, spec.default_device if device is None else device, source


def _parse(text: str, subject: str, source: str) -> tuple[str, int | None, str]:
    match = _NAME_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"{subject} is not of the form {_FORM}")
    device = match.group("device")
    return match.group("name"), int(device) if device is not None else None, source


# -- why a chosen name cannot be used ---------------------------------------------------------


def _usable(name: str, source: str) -> tuple[BackendSpec, Plugin, Loaded]:
    subject = f"backend {name!r}" + (f" (from {ENV_BACKEND})" if source == ENV_BACKEND else "")
    entry = _discovery.entry(name)
    if entry is None:
        raise BackendNotFoundError(_not_found(name, subject, source))
    row = entry.rows[0]
    where = f"{row.distribution} {row.version}".strip()
    if row.status == "blocked":
        raise BackendUnavailableError(
            f"{subject} is blocked by {ENV_DISABLE_PLUGINS}="
            f"{os.environ.get(ENV_DISABLE_PLUGINS, '')!r}; remove {name!r} from that "
            "variable to use it"
        )
    if entry.spec is None or entry.plugin is None or entry.loaded is None:
        raise BackendError(f"{subject} ({where}) is broken: {row.reason}")
    if not row.usable:
        others = ", ".join(r.name for r in _discovery.backends() if r.usable and r.name != name)
        elsewhere = (
            f"Usable here: {others}; select one with eventapi.backend(NAME) or {ENV_BACKEND}=NAME"
            if others
            else "No other backend is usable here either"
        )
        raise BackendUnavailableError(
            f"{subject} ({where}) cannot be used here: {row.reason}. {elsewhere}"
        )
    return entry.spec, entry.plugin, entry.loaded


def _not_found(name: str, subject: str, source: str) -> str:
    rows = _discovery.backends()
    installed = ", ".join(f"{row.name} ({row.status.split(':')[0]})" for row in rows) or "none"
    suggestion = _did_you_mean(name, rows, source)
    message = f"{subject} is not installed{suggestion}; installed backends: {installed}"
    if name in KNOWN_HINTS:
        message += f". Install it with: {KNOWN_HINTS[name]}"
    else:
        message += (
            f". A backend is a distribution declaring an entry point {name!r} in the group "
            f"{ENTRY_POINT_GROUP!r}; install the one that provides it"
        )
    if not _discovery.autoload():
        message += (
            f". {ENV_DISABLE_AUTOLOAD} is set, so installed plugins were not scanned; "
            "unset it to find them"
        )
    return message


def _did_you_mean(name: str, rows: Sequence[BackendInfo], source: str) -> str:
    """ "; did you mean 'cuda'?" for a name close to one installed or published, else ""."""
    # Imported here: only a name that is not found pays for difflib.
    import difflib

    names = {known: known for known in KNOWN_HINTS} | {row.name.lower(): row.name for row in rows}
    if names.get(name.lower()) == name:
        del names[name.lower()]  # a published backend that is not installed: not a typo
    close = [names[n] for n in difflib.get_close_matches(name.lower(), names, n=3, cutoff=0.6)]
    spell = (lambda n: f"{ENV_BACKEND}={n}") if source == ENV_BACKEND else repr
    return f"; did you mean {' or '.join(map(spell, close))}?" if close else ""


def _load(spec: BackendSpec, plugin: Plugin, device: int | None, what: str) -> Any:
    # Imported here, as in discovery. The guard: should an installed plugin's load end the
    # process, the next process finds out, and does not load it again if it crashes.
    from . import _quarantine

    try:
        with _quarantine.guard(plugin, what):
            obj = spec.load(device)
    except BackendError:
        raise  # the plugin already said what is wrong, in eventapi's own terms
    except Exception as exc:
        raise BackendUnavailableError(f"backend {what!r} failed to load: {describe(exc)}") from exc
    except SystemExit as exc:
        # A plugin must not end the program it was loaded into; its caller decides that.
        raise BackendError(
            f"backend {what!r}: its load() called sys.exit({exc.code!r}); the plugin is "
            "broken, report it to its distribution"
        ) from exc
    # What load() must return, checked by name so that a plugin returning the wrong object fails
    # at selection, with its name, not at the first call.
    missing = [member for member in ("BACKEND", *PROTOCOL_METHODS) if not hasattr(obj, member)]
    if missing:
        raise BackendError(
            f"backend {what!r}: load() returned {obj!r}, which lacks {', '.join(missing)}; "
            "it must return an object satisfying eventapi.EventApi"
        )
    return obj
