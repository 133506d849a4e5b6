"""One plugin: what running its light code yields.

A plugin is a module of pluggy hook implementations that claims one backend name: an entry
point of the group ``eventapi.backends``, or the core's own ``host``; a backend registered in
code is a plugin whose module is its :class:`~eventapi.BackendSpec`, checked as it was
registered (:func:`code_plugin`). Running it means importing it, calling its
``eventapi_backends`` hook alone, checking the one :class:`~eventapi.BackendSpec` it must yield
and calling its probe (:func:`resolve`); what comes out is its row. Discovery runs this on a
thread of its own (:mod:`eventapi._plugins._discovery`), the quarantine in a separate process
(:mod:`eventapi._plugins._alone`).

The plugin's own code may raise anything, ``SystemExit`` and ``KeyboardInterrupt`` included:
each is the plugin's failure, reported in its row, never raised into the caller.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, Final, NamedTuple, final

import pluggy

from .._logger import logger
from ._spec import (
    NAME_PATTERN,
    PLUGIN_API,
    PROJECT,
    RESERVED_NAMES,
    BackendInfo,
    BackendSpec,
    _Hooks,
)

__all__ = [
    "KNOWN_HINTS",
    "Entry",
    "Loaded",
    "Plugin",
    "code_plugin",
    "describe",
    "normalize",
    "resolve",
    "row",
]

# Backends this project publishes, so that a missing one is answered with the command that
# installs it rather than only "not found".
KNOWN_HINTS: Final = {
    "cuda": 'pip install "eventapi-core[cuda]"',
    "hip": 'pip install "eventapi-core[hip]"',
}

NAME_RE: Final = re.compile(NAME_PATTERN)


# NamedTuples, not dataclasses: both are immutable values, and these cost a tenth as much to
# define, which every process that lists backends pays (dataclasses exec generated code).
class Plugin(NamedTuple):
    """A plugin that claims a backend name, before its module is imported."""

    name: str
    distribution: str
    version: str
    # The entry point's value ("pkg.module" or "pkg.module:attr"), or what was registered.
    target: str
    load_plugin: Callable[[], object]
    # Found through an entry point: what the quarantine guards, and can run elsewhere. Not a
    # plugin registered in code, nor the embedded host.
    installed: bool = True
    # This package's own host plugin: runs inline, unguarded, on the caller's thread.
    embedded: bool = False

    @property
    def label(self) -> str:
        return f"{self.distribution} {self.version}".strip()


Loaded = dict[tuple[int, int | None], Any]
"""Selection's objects loaded from one backend, by the process id and device they belong to."""


class Entry(NamedTuple):
    """What discovery knows about one backend name: its rows and, when it is sound, its spec
    and plugin (a broken, blocked or claimed name has its rows alone).

    ``loaded`` is selection's, for a sound spec: the objects loaded from it, per process id and
    device. They are dropped with the entry, when discovery forgets it (a rescan, a registration
    of the name).
    """

    rows: tuple[BackendInfo, ...]
    spec: BackendSpec | None = None
    plugin: Plugin | None = None
    loaded: Loaded | None = None


Advance = Callable[[str, int], None]
"""Told what the plugin runs now (a stage, for messages), and the priority it declared so far
(0 until its spec is known)."""


@final
class _BrokenPluginError(Exception):
    """A plugin failed one of the checks; the message is the row's reason."""


def describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def normalize(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def row(
    plugin: Plugin,
    kind: str,
    reason: str = "",
    *,
    spec: BackendSpec | None = None,
    priority: int = 0,
) -> BackendInfo:
    """``plugin``'s row of ``kind``: ``"ok"``, ``"unavailable"``, ``"broken"`` or ``"blocked"``.

    The status is ``"<kind>: <reason>"`` for an unavailable or broken one, the kind alone
    otherwise; the reason is made one line. Its priority and install hint are the spec's when
    it yielded one.
    """
    reason = " ".join(reason.split())
    status = f"{kind}: {reason}" if kind in ("unavailable", "broken") else kind
    hint = KNOWN_HINTS.get(plugin.name, "")
    if spec is not None:
        priority, hint = spec.priority, spec.install_hint
    return BackendInfo(*plugin[:3], priority, status, reason, hint)  # name, distribution, version


def resolve(plugin: Plugin, advance: Advance) -> Entry:
    """Import the plugin, call its hook, check the spec and run its probe: one entry.

    On the calling thread; ``advance`` is told each stage as it starts.
    """
    spec: BackendSpec | None = None
    try:
        spec = _load_spec(plugin, advance)
        advance("in its probe", spec.priority)
        reason = _probe(spec)
    except _BrokenPluginError as exc:
        logger().debug(
            "backend %r (%s) is broken: %s", plugin.name, plugin.label, exc, exc_info=exc.__cause__
        )
        return Entry((row(plugin, "broken", str(exc), spec=spec),))
    kind = "ok" if reason is None else "unavailable"
    return Entry((row(plugin, kind, reason or "", spec=spec),), spec, plugin, {})


def _load_spec(plugin: Plugin, advance: Advance) -> BackendSpec:
    """Import the plugin, call its hook alone, and check what it yields."""
    advance(f"importing {plugin.target}", 0)
    try:
        module = plugin.load_plugin()
    except BaseException as exc:  # the plugin's failure (module docstring)
        raise _BrokenPluginError(f"cannot import {plugin.target}: {describe(exc)}") from exc
    if isinstance(module, BackendSpec):
        return module  # registered in code: checked as it was registered (code_plugin)
    advance("in its eventapi_backends hook", 0)
    # A manager of its own: pluggy's is not thread-safe, and only this plugin's hook must run.
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(_Hooks)
    try:
        pm.register(module, name=plugin.name)
    except Exception as exc:
        raise _BrokenPluginError(f"{plugin.target} is not a valid plugin: {describe(exc)}") from exc
    if not pm.hook.eventapi_backends.get_hookimpls():
        raise _BrokenPluginError(
            f"{plugin.target} implements no eventapi_backends hook; define "
            "`def eventapi_backends()` decorated with @eventapi.hookimpl"
        )
    try:
        specs: list[object] = []
        for result in pm.hook.eventapi_backends():
            if not isinstance(result, Iterable) or isinstance(result, str | bytes):
                raise _BrokenPluginError(
                    f"eventapi_backends returned {result!r}; it must yield BackendSpec values"
                )
            specs.extend(result)
    except _BrokenPluginError:
        raise
    except BaseException as exc:  # the plugin's failure (module docstring)
        raise _BrokenPluginError(f"eventapi_backends raised {describe(exc)}") from exc
    return _check_specs(plugin, specs)


def _probe(spec: BackendSpec) -> str | None:
    try:
        reason: object = spec.probe()
    except BaseException as exc:  # the plugin's failure (module docstring)
        raise _BrokenPluginError(f"probe raised {describe(exc)}") from exc
    if reason is None or (isinstance(reason, str) and reason.strip()):
        return reason
    raise _BrokenPluginError(f"probe returned {reason!r}; it must return None or a one-line reason")


def code_plugin(spec: BackendSpec) -> Plugin:
    """The plugin of a backend registered in code: its module is ``spec`` itself, checked.

    Raises TypeError for anything but a BackendSpec, and ValueError unless ``spec`` may be
    registered: a valid name not reserved, and as sound as discovery checks a plugin's spec.
    """
    if not isinstance(spec, BackendSpec):
        raise TypeError(
            f"register_backend() takes an eventapi.BackendSpec, got {type(spec).__name__}"
        )
    name = spec.name
    if name in RESERVED_NAMES:
        raise ValueError(
            f"{name!r} is reserved for {RESERVED_NAMES[name]}, this project's own backend; "
            "register the backend under another name"
        )
    if not isinstance(name, str) or NAME_RE.fullmatch(name) is None:
        raise ValueError(
            f"{name!r} is not a backend name (letters, digits, '_', '.', '-', starting with a "
            "letter, digit or '_')"
        )
    target = f"register_backend({name!r})"
    plugin = Plugin(name, "(registered in code)", "", target, lambda: spec, installed=False)
    try:
        _check_specs(plugin, [spec])
    except _BrokenPluginError as exc:
        raise ValueError(f"BackendSpec {name!r}: {exc}") from None
    return plugin


def _check_specs(plugin: Plugin, specs: list[object]) -> BackendSpec:
    name = plugin.name
    if len(specs) != 1:
        raise _BrokenPluginError(
            f"eventapi_backends yielded {len(specs)} values; an entry point declares exactly one "
            f"backend: it must yield one BackendSpec(name={name!r}, ...)"
        )
    (spec,) = specs
    if not isinstance(spec, BackendSpec):
        raise _BrokenPluginError(
            f"eventapi_backends yielded {spec!r} ({type(spec).__name__}), "
            "not an eventapi.BackendSpec"
        )
    if spec.name != name:
        raise _BrokenPluginError(
            f"entry point {name!r} yielded a BackendSpec named {spec.name!r}; the entry point "
            "name and BackendSpec.name must be the same"
        )
    version: object = spec.api_version
    if not isinstance(version, tuple) or [type(part) for part in version] != [int, int]:
        raise _BrokenPluginError(f"api_version {version!r} is not a (major, minor) pair of ints")
    major, minor = PLUGIN_API
    if version[0] != major:
        raise _BrokenPluginError(
            f"built for plugin API {version[0]}.x, this eventapi-core speaks {major}.{minor}; "
            f"install a version of {plugin.distribution} built for plugin API {major}.x "
            "(or an eventapi-core that speaks its version)"
        )
    if isinstance(spec.priority, bool) or not isinstance(spec.priority, int):
        raise _BrokenPluginError(f"priority {spec.priority!r} is not an int")
    device: object = spec.default_device
    index = isinstance(device, int) and not isinstance(device, bool) and device >= 0
    if device is not None and not index:
        raise _BrokenPluginError(f"default_device {device!r} is not None or a device index")
    if not callable(spec.load) or not callable(spec.probe):
        raise _BrokenPluginError("BackendSpec.load and BackendSpec.probe must be callables")
    if not isinstance(spec.install_hint, str):
        raise _BrokenPluginError(f"install_hint {spec.install_hint!r} is not a str")
    return spec
