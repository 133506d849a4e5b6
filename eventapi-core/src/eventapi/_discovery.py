"""Backend discovery: what is installed, and what can run here.

Discovery reads the entry points of the group ``eventapi.backends`` (the entry point's name is
the backend's name, its value a light module of pluggy hook implementations), plus the plugins
registered in code, of which the core's own ``host`` is one. It is lazy and cached:

* ``import eventapi`` scans nothing;
* the first call of :func:`backends` or :func:`~eventapi.backend` lists the entry points (package
  metadata only, no import);
* a plugin module is imported, its hook called and its probe run the first time its name is
  needed: :func:`backends` needs every name, ``backend("cuda")`` only ``cuda``;
* only :attr:`BackendSpec.load <eventapi.BackendSpec.load>` imports a driver binding, and only
  :func:`~eventapi.backend` calls it.

Each plugin is handled in isolation. One that cannot be imported, raises in its hook, yields
something that is not a matching :class:`~eventapi.BackendSpec`, was built for another major of
the plugin contract, or has a probe that raises is listed as ``broken: <error>``; every other
backend keeps working. Two distributions claiming one name are a conflict: both are listed as
broken, and selecting the name raises :class:`~eventapi.BackendError`. Nothing picks a winner
silently.

The variables ``EVENTAPI_DISABLE_PLUGIN_AUTOLOAD`` and ``EVENTAPI_DISABLE_PLUGINS`` are read when
discovery first runs in the process, and again after :func:`refresh`.

Which backend to use, and the loaded objects, are :mod:`eventapi._selection`'s: it reads one
name through ``_registry.entry(name)`` or every row through ``_registry.rows()``, takes
``_registry.lock`` around a ``load``, and has its cache emptied by ``_registry.on_forget``.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, final

import pluggy

from ._plugin import (
    ENTRY_POINT_GROUP,
    PLUGIN_API,
    PROJECT,
    BackendInfo,
    BackendSpec,
    _Hooks,
)

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

__all__ = [
    "ENV_DISABLE_AUTOLOAD",
    "ENV_DISABLE_PLUGINS",
    "KNOWN_HINTS",
    "backends",
    "refresh",
    "register",
    "unregister",
]

_log = logging.getLogger("eventapi")

ENV_DISABLE_AUTOLOAD: Final = "EVENTAPI_DISABLE_PLUGIN_AUTOLOAD"
ENV_DISABLE_PLUGINS: Final = "EVENTAPI_DISABLE_PLUGINS"

# Backends this project publishes, so that a missing one is answered with the command that
# installs it rather than only "not found".
KNOWN_HINTS: Final = {
    "cuda": 'pip install "eventapi-core[cuda]"',
    "hip": 'pip install "eventapi-core[hip]"',
}


@final
@dataclass(frozen=True, slots=True)
class _Candidate:
    """A plugin that claims a backend name, before its module is imported."""

    name: str
    distribution: str
    version: str
    # The entry point's value ("pkg.module" or "pkg.module:attr"), or what was registered.
    target: str
    load_plugin: Callable[[], object]

    @property
    def label(self) -> str:
        return f"{self.distribution} {self.version}".strip()


@final
@dataclass(frozen=True, slots=True)
class _Entry:
    """What discovery knows about one backend name: its rows, and the spec when it is sound."""

    rows: tuple[BackendInfo, ...]
    spec: BackendSpec | None


@final
class _BrokenPluginError(Exception):
    """A plugin failed one of discovery's checks; the message is the row's reason."""


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def _blocked_names() -> frozenset[str]:
    raw = os.environ.get(ENV_DISABLE_PLUGINS, "")
    return frozenset(part.strip() for part in raw.split(",") if part.strip())


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _one_line(text: str) -> str:
    return " ".join(text.split())


@final
class _Registry:
    """The process-wide discovery state.

    Every public method takes :attr:`lock`, the one lock of discovery and selection. It is
    re-entrant because selection holds it across a backend's ``load``, and that ``load`` may
    itself select another backend (a backend composed over ``host``).
    """

    __slots__ = (
        "_autoload",
        "_blocked",
        "_candidates",
        "_code",
        "_entries",
        "_on_forget",
        "_pm",
        "lock",
    )

    def __init__(self) -> None:
        self.lock: Final = threading.RLock()
        self._code: dict[str, _Candidate] = {}
        self._candidates: dict[str, list[_Candidate]] | None = None
        self._entries: dict[str, _Entry] = {}
        self._on_forget: list[Callable[[], None]] = []
        self._pm: pluggy.PluginManager | None = None
        self._blocked: frozenset[str] = frozenset()
        self._autoload = True

    @property
    def autoload(self) -> bool:
        """False when the last scan skipped entry points (``EVENTAPI_DISABLE_PLUGIN_AUTOLOAD``)."""
        return self._autoload

    # -- registration and cache ---------------------------------------------------------------

    def register(self, candidate: _Candidate) -> None:
        with self.lock:
            if candidate.name == "host":
                raise ValueError("'host' is the embedded backend and is always registered")
            if candidate.name in self._code:
                raise ValueError(
                    f"a plugin for backend {candidate.name!r} is already registered in code; "
                    "unregister it first"
                )
            self._code[candidate.name] = candidate
            self._forget()

    def unregister(self, name: str) -> None:
        with self.lock:
            self._code.pop(name, None)
            self._forget()

    def refresh(self) -> None:
        with self.lock:
            self._forget()

    def on_forget(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (under the lock) whenever discovery forgets what it learnt."""
        with self.lock:
            self._on_forget.append(callback)

    def _forget(self) -> None:
        self._candidates = None
        self._entries.clear()
        self._pm = None
        for callback in self._on_forget:
            callback()

    # -- listing ------------------------------------------------------------------------------

    def _scan(self) -> dict[str, list[_Candidate]]:
        if self._candidates is not None:
            return self._candidates
        self._autoload = not _env_flag(ENV_DISABLE_AUTOLOAD)
        self._blocked = _blocked_names()
        found: dict[str, list[_Candidate]] = {"host": [_host_candidate()]}
        for candidate in self._code.values():
            found.setdefault(candidate.name, []).append(candidate)
        if self._autoload:
            # Imported here: importlib.metadata costs more to import than the rest of
            # eventapi's own modules, and `import eventapi` scans nothing.
            from importlib.metadata import entry_points

            for ep in entry_points(group=ENTRY_POINT_GROUP):
                candidate = _from_entry_point(ep)
                claims = found.setdefault(candidate.name, [])
                # The core registers host in code and declares it as an entry point too, so
                # that autoload=off keeps it; the same module of the same distribution is one
                # plugin, not a conflict.
                if not any(_same_plugin(candidate, other) for other in claims):
                    claims.append(candidate)
        pm = pluggy.PluginManager(PROJECT)
        pm.add_hookspecs(_Hooks)
        self._pm = pm
        self._candidates = found
        return found

    def entry(self, name: str) -> _Entry | None:
        """The resolved entry for ``name``, importing its plugin on first use; None if absent."""
        with self.lock:
            candidates = self._scan().get(name)
            if candidates is None:
                return None
            entry = self._entries.get(name)
            if entry is None:
                entry = self._resolve(name, candidates)
                self._entries[name] = entry
            return entry

    def rows(self) -> list[BackendInfo]:
        """Every row, highest priority first, then name; resolves every name on first use."""
        with self.lock:
            names = list(self._scan())
            rows = [row for name in names for row in self._entry_of(name).rows]
        return sorted(rows, key=lambda row: (-row.priority, row.name, row.distribution))

    def _entry_of(self, name: str) -> _Entry:
        entry = self.entry(name)
        assert entry is not None  # the name came from the scan
        return entry

    def _resolve(self, name: str, candidates: list[_Candidate]) -> _Entry:
        if name in self._blocked:
            return _Entry(
                tuple(
                    _row(c, status="blocked", reason=f"listed in {ENV_DISABLE_PLUGINS}")
                    for c in candidates
                ),
                None,
            )
        if len(candidates) > 1:
            claims = " and ".join(f"{c.label}" for c in candidates)
            conflict = f"conflict: name claimed by {claims}; uninstall one"
            return _Entry(tuple(_broken(c, conflict) for c in candidates), None)
        candidate = candidates[0]
        spec: BackendSpec | None = None
        try:
            spec = self._load_spec(candidate)
            reason = _probe(spec)
        except _BrokenPluginError as exc:
            _log.debug("backend %r (%s) is broken: %s", name, candidate.label, exc)
            priority = spec.priority if spec is not None else 0
            return _Entry((_broken(candidate, str(exc), priority=priority, spec=spec),), None)
        if reason is None:
            return _Entry((_row(candidate, spec=spec, status="ok", reason=""),), spec)
        return _Entry(
            (_row(candidate, spec=spec, status=f"unavailable: {reason}", reason=reason),), spec
        )

    def _load_spec(self, candidate: _Candidate) -> BackendSpec:
        """Import the plugin, call its hook alone, and check what it yields."""
        name = candidate.name
        try:
            plugin = candidate.load_plugin()
        except Exception as exc:
            _log.debug("importing %s failed", candidate.target, exc_info=True)
            raise _BrokenPluginError(f"cannot import {candidate.target}: {_describe(exc)}") from exc
        pm = self._pm
        assert pm is not None  # set by _scan, under the same lock
        try:
            pm.register(plugin, name=name)
        except Exception as exc:
            raise _BrokenPluginError(
                f"{candidate.target} is not a valid plugin: {_describe(exc)}"
            ) from exc
        caller = pm.hook.eventapi_backends
        if not any(impl.plugin is plugin for impl in caller.get_hookimpls()):
            raise _BrokenPluginError(
                f"{candidate.target} implements no eventapi_backends hook; define "
                "`def eventapi_backends()` decorated with @eventapi.hookimpl"
            )
        # Only this plugin's implementation runs: another plugin's failure is not its failure.
        others = [p for p in pm.get_plugins() if p is not plugin]
        try:
            results = pm.subset_hook_caller("eventapi_backends", others)()
            specs: list[object] = []
            for result in results:
                if not isinstance(result, Iterable) or isinstance(result, str | bytes):
                    raise _BrokenPluginError(
                        f"eventapi_backends returned {result!r}; it must yield BackendSpec values"
                    )
                specs.extend(result)
        except _BrokenPluginError:
            raise
        except Exception as exc:
            _log.debug("eventapi_backends of %s raised", candidate.target, exc_info=True)
            raise _BrokenPluginError(f"eventapi_backends raised {_describe(exc)}") from exc
        return _check_specs(candidate, specs)


def _from_entry_point(ep: EntryPoint) -> _Candidate:
    dist = ep.dist
    distribution = dist.name if dist is not None else "?"
    version = dist.version if dist is not None else "?"
    return _Candidate(ep.name, distribution, version, ep.value, ep.load)


def _normalize(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def _same_plugin(a: _Candidate, b: _Candidate) -> bool:
    return a.target == b.target and _normalize(a.distribution) == _normalize(b.distribution)


def _row(
    candidate: _Candidate,
    *,
    status: str,
    reason: str,
    spec: BackendSpec | None = None,
    priority: int | None = None,
) -> BackendInfo:
    if spec is not None:
        priority = spec.priority if priority is None else priority
        hint = spec.install_hint
    else:
        hint = KNOWN_HINTS.get(candidate.name, "")
    return BackendInfo(
        name=candidate.name,
        distribution=candidate.distribution,
        version=candidate.version,
        priority=priority if priority is not None else 0,
        status=status,
        reason=reason,
        install_hint=hint,
    )


def _broken(
    candidate: _Candidate,
    reason: str,
    *,
    priority: int = 0,
    spec: BackendSpec | None = None,
) -> BackendInfo:
    reason = _one_line(reason)
    return _row(candidate, status=f"broken: {reason}", reason=reason, spec=spec, priority=priority)


def _check_specs(candidate: _Candidate, specs: list[object]) -> BackendSpec:
    name = candidate.name
    if not specs:
        raise _BrokenPluginError(
            f"eventapi_backends yielded nothing; it must yield BackendSpec(name={name!r}, ...)"
        )
    for item in specs:
        if not isinstance(item, BackendSpec):
            raise _BrokenPluginError(
                f"eventapi_backends yielded {item!r} ({type(item).__name__}), "
                "not an eventapi.BackendSpec"
            )
    if len(specs) > 1:
        raise _BrokenPluginError(
            f"eventapi_backends yielded {len(specs)} BackendSpecs; an entry point declares "
            "exactly one backend"
        )
    spec = specs[0]
    assert isinstance(spec, BackendSpec)
    if spec.name != name:
        raise _BrokenPluginError(
            f"entry point {name!r} yielded a BackendSpec named {spec.name!r}; the entry point "
            "name and BackendSpec.name must be the same"
        )
    version: object = spec.api_version
    if not (
        isinstance(version, tuple)
        and len(version) == 2
        and all(isinstance(part, int) for part in version)
    ):
        raise _BrokenPluginError(f"api_version {version!r} is not a (major, minor) pair of ints")
    major, minor = PLUGIN_API
    if version[0] != major:
        raise _BrokenPluginError(
            f"built for plugin API {version[0]}.x, this eventapi-core speaks {major}.{minor}; "
            f"install a version of {candidate.distribution} built for plugin API {major}.x "
            "(or an eventapi-core that speaks its version)"
        )
    if isinstance(spec.priority, bool) or not isinstance(spec.priority, int):
        raise _BrokenPluginError(f"priority {spec.priority!r} is not an int")
    if not callable(spec.load) or not callable(spec.probe):
        raise _BrokenPluginError("BackendSpec.load and BackendSpec.probe must be callables")
    if not isinstance(spec.install_hint, str):
        raise _BrokenPluginError(f"install_hint {spec.install_hint!r} is not a str")
    return spec


def _probe(spec: BackendSpec) -> str | None:
    try:
        reason: object = spec.probe()
    except Exception as exc:
        _log.debug("probe of backend %r raised", spec.name, exc_info=True)
        raise _BrokenPluginError(f"probe raised {_describe(exc)}") from exc
    if reason is None:
        return None
    if not isinstance(reason, str) or not reason.strip():
        raise _BrokenPluginError(
            f"probe returned {reason!r}; it must return None or a one-line reason"
        )
    return _one_line(reason)


def _host_candidate() -> _Candidate:
    # Imported here: eventapi/__init__.py defines __version__ after importing this module.
    from . import __version__

    # Registered in code as well as by entry point, so that EVENTAPI_DISABLE_PLUGIN_AUTOLOAD
    # keeps the embedded backend.
    module = "eventapi._host_plugin"
    return _Candidate("host", "eventapi-core", __version__, module, _import(module))


def _import(module: str) -> Callable[[], object]:
    return lambda: importlib.import_module(module)


_registry: Final = _Registry()


# -- the public functions ---------------------------------------------------------------------


def backends() -> list[BackendInfo]:
    """Every backend discovery found, sorted by priority (highest first), then name.

    Imports each plugin's light hook module and runs its probe; imports no driver binding and
    loads no backend. A broken plugin is a row with status ``broken: <error>``, never an
    exception.
    """
    return _registry.rows()


def register(
    plugin: object, name: str, *, distribution: str = "(registered in code)", version: str = ""
) -> None:
    """Register a plugin object (a module of hook implementations) for backend ``name`` in code.

    Private: for tests and embedding applications. A plugin registered here survives
    ``EVENTAPI_DISABLE_PLUGIN_AUTOLOAD`` and :func:`refresh`. Raises ValueError if ``name`` is
    already registered in code.
    """
    target = getattr(plugin, "__name__", repr(plugin))
    _registry.register(_Candidate(name, distribution, version, target, lambda: plugin))


def unregister(name: str) -> None:
    """Remove a plugin registered in code; no-op when none is."""
    _registry.unregister(name)


def refresh() -> None:
    """Forget everything discovery learnt, so the next call rescans (tests use this).

    The environment variables are read again. Cached backend objects are dropped, not closed:
    objects already handed out keep working, and later :func:`~eventapi.backend` calls build
    new ones.
    """
    _registry.refresh()
