"""Backend discovery: what is installed, and what can run here.

Discovery reads the entry points of the group ``eventapi.backends`` (the entry point's name is
the backend's name, its value a light module of pluggy hook implementations), plus the core's own
``host`` and the backends registered in code (:func:`register_backend`, whose plugin is the
checked spec itself). It is lazy and cached:

* ``import eventapi`` scans nothing;
* the first call of :func:`backends` or :func:`~eventapi.backend` lists the entry points (package
  metadata only, no import);
* a plugin module is imported, its hook called and its probe run the first time its name is
  needed: :func:`backends` needs every name, ``backend("cuda")`` only ``cuda``;
* only :attr:`BackendSpec.load <eventapi.BackendSpec.load>` imports a driver binding, and only
  :func:`~eventapi.backend` calls it.

A plugin is untrusted code. Each name has a once-cell: the first caller that needs the name
starts its plugin's import, hook and probe on a daemon thread of its own, and every caller
waits on the cell's event, each at most ``EVENTAPI_PLUGIN_TIMEOUT`` seconds
(:data:`DEFAULT_PLUGIN_TIMEOUT` by default) from its call. So a listing takes as long as the
slowest plugin, or the budget; a plugin that hangs holds up only callers that need it, and its
timed-out row is the cell's one answer. One that cannot be imported, raises (``SystemExit``
included) in its hook, yields something that is not a matching :class:`~eventapi.BackendSpec`,
was built for another major of the plugin contract, has a probe that raises, or does not finish
within the budget is listed as ``broken: <error>``; every other backend keeps working. A plugin
that ended a process while its code ran there is checked, and quarantined if it crashes, before
it runs again (:mod:`eventapi._plugins._quarantine`). The embedded ``host`` is this package's
own code and runs inline.

Names decided from metadata alone, without importing anything: two distributions claiming one
name are a conflict (both broken; selecting the name raises :class:`~eventapi.BackendError`);
an entry point whose name is not a backend name (:data:`~eventapi._plugins._spec.NAME_PATTERN`), or
that claims a name reserved for this project's distributions
(:data:`~eventapi._plugins._spec.RESERVED_NAMES`), is listed broken and never selected, and never
displaces the backend it imitates.

Locking: one lock guards the registry's data (the plugins registered in code, the scan's cells);
it is never held while plugin code runs or entry points are read. The scan has a lock of its
own, held while it is read: callers that need it wait for that one read.

The variables ``EVENTAPI_DISABLE_PLUGIN_AUTOLOAD``, ``EVENTAPI_DISABLE_PLUGINS`` and
``EVENTAPI_PLUGIN_TIMEOUT`` are read when discovery first runs in the process, and again after
:func:`refresh`. Selection (:mod:`eventapi._plugins._selection`) asks for one name through
:func:`entry` or for every row through :func:`backends`, and keeps the objects it loads in the
name's entry, so that they go when discovery forgets the entry.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import threading
import time
from typing import Final, NamedTuple, final

from .._logger import logger
from .._metadata import name_and_version
from ._plugin import (
    KNOWN_HINTS,
    NAME_RE,
    Entry,
    Plugin,
    code_plugin,
    describe,
    normalize,
    resolve,
    row,
)
from ._spec import ENTRY_POINT_GROUP, RESERVED_NAMES, BackendInfo, BackendSpec

__all__ = [
    "DEFAULT_PLUGIN_TIMEOUT",
    "ENV_DISABLE_AUTOLOAD",
    "ENV_DISABLE_PLUGINS",
    "ENV_PLUGIN_TIMEOUT",
    "KNOWN_HINTS",
    "autoload",
    "backends",
    "entry",
    "refresh",
    "register_backend",
    "unregister_backend",
]


ENV_DISABLE_AUTOLOAD: Final = "EVENTAPI_DISABLE_PLUGIN_AUTOLOAD"
ENV_DISABLE_PLUGINS: Final = "EVENTAPI_DISABLE_PLUGINS"
ENV_PLUGIN_TIMEOUT: Final = "EVENTAPI_PLUGIN_TIMEOUT"

DEFAULT_PLUGIN_TIMEOUT: Final = 30.0
"""Seconds a caller waits for a plugin's import, hook and probe before it is listed as timed out.

Generous on purpose: a probe may initialize its driver, and a real ``cuInit`` on a machine with
many GPUs (persistence mode off) takes seconds, sometimes over ten. A plugin that hangs costs
this once per process, after which its row is cached.
"""

_HOST: Final = "eventapi._plugins._host"  # the core's own host plugin

_TRUE: Final = ("1", "true", "yes", "on")
_FALSE: Final = ("", "0", "false", "no", "off")


def _env_flag(name: str) -> bool:
    raw = os.environ.get(name, "")
    value = raw.strip().lower()
    if value in _FALSE:
        return False
    if value not in _TRUE:
        spellings = f"{', '.join(_TRUE)} (set) or {', '.join(map(repr, _FALSE))} (not set)"
        logger().warning("%s=%r is not one of %s; taken as set", name, raw, spellings)
    return True


def _blocked_names() -> frozenset[str]:
    raw = os.environ.get(ENV_DISABLE_PLUGINS, "")
    names = frozenset(part.strip() for part in raw.split(",") if part.strip())
    odd = sorted(name for name in names if NAME_RE.fullmatch(name) is None)
    if odd:
        logger().warning(
            "%s=%r: %s not a backend name, so it blocks nothing; separate names with commas "
            "and give no device (for example EVENTAPI_DISABLE_PLUGINS=cuda,hip)",
            ENV_DISABLE_PLUGINS,
            raw,
            ", ".join(repr(name) for name in odd),
        )
    return names


def _budget() -> float:
    raw = os.environ.get(ENV_PLUGIN_TIMEOUT, "").strip()
    try:
        value = float(raw or DEFAULT_PLUGIN_TIMEOUT)
    except ValueError:
        value = float("nan")
    if 0 < value <= threading.TIMEOUT_MAX:
        return value
    if 0 < value < float("inf"):
        # A wait for longer than the platform's thread timeouts allow raises OverflowError.
        why, used = "more seconds than a thread can wait", threading.TIMEOUT_MAX
    else:
        why, used = "not a positive number of seconds", DEFAULT_PLUGIN_TIMEOUT
    logger().warning("%s=%r is %s; using %g", ENV_PLUGIN_TIMEOUT, raw, why, used)
    return used


# -- one name's once-cell ---------------------------------------------------------------------


@final
class _Cell:
    """One backend name's entry: worked out once, and waited for by every caller that needs it.

    A cell decided from metadata alone is done when made. Otherwise :meth:`start` runs its one
    plugin: inline for the embedded ``host``, else on a daemon thread of its own. The first
    answer is the cell's: the plugin's entry, or the timed-out row a caller whose wait ran out
    publishes (what the plugin returns after that is dropped).
    """

    __slots__ = ("answers", "budget", "done", "plugin", "priority", "stage")

    def __init__(self, plugin: Plugin, budget: float, entry: Entry | None = None) -> None:
        self.done = threading.Event()
        self.plugin = plugin
        self.budget = budget
        self.answers = [] if entry is None else [entry]  # the first is the cell's entry
        if entry is not None:
            self.done.set()
        # Written by the plugin's thread as it goes, read for a timeout's message.
        self.stage = "checking whether it crashed an earlier run"
        self.priority = 0

    def start(self) -> None:
        if self.plugin.embedded:
            self._work()
        else:
            name = f"eventapi-plugin-{self.plugin.name}"
            threading.Thread(target=self._work, name=name, daemon=True).start()

    def _work(self) -> None:
        # Imported here, as importlib.metadata is: `import eventapi` pays for neither.
        from . import _quarantine

        plugin = self.plugin
        try:
            crashed = _quarantine.crashed_before(plugin, self.budget)
            if crashed is not None:
                entry = Entry((crashed,))
            else:
                with _quarantine.guard(plugin):
                    entry = resolve(plugin, self._advance)
        except BaseException as exc:  # resolve reports the plugin's own errors
            entry = Entry((row(plugin, "broken", f"discovery failed: {describe(exc)}"),))
        self._publish(entry)

    def _advance(self, stage: str, priority: int) -> None:
        self.stage = stage
        self.priority = priority

    def _publish(self, entry: Entry) -> Entry:
        # list.append is atomic: of the plugin's entry and a timed-out caller's, whichever is
        # appended first is the one answer every caller gets.
        self.answers.append(entry)
        self.done.set()
        return self.answers[0]

    def wait(self, deadline: float) -> Entry:
        """The entry, waiting for the plugin until ``deadline`` (``time.monotonic()``) at most."""
        if self.done.wait(max(0.0, deadline - time.monotonic())):
            return self.answers[0]  # appended before the event was set
        reason = (
            f"timed out after {self.budget:g} s {self.stage}; it may still be running. If it "
            f"is only slow, raise {ENV_PLUGIN_TIMEOUT} (seconds); to skip it, add "
            f"{self.plugin.name} to {ENV_DISABLE_PLUGINS}"
        )
        timed_out = row(self.plugin, "broken", reason, priority=self.priority)
        return self._publish(Entry((timed_out,)))


# -- one scan ---------------------------------------------------------------------------------


class _Scan(NamedTuple):
    """What one scan read: the settings, the entry points per name, and each name's cell.

    ``refused`` are rows decided from metadata alone (an invalid name, a reserved name claimed
    by another distribution): listed, never selectable. ``cells`` is guarded by ``_lock``.
    """

    autoload: bool
    blocked: frozenset[str]
    budget: float
    claims: dict[str, list[Plugin]]
    refused: list[BackendInfo]
    cells: dict[str, _Cell]


# importlib.metadata's own form of an entry point's value, "module[:attr][ [extras]]", which
# its load() matches without checking, so a value of another form fails there with an
# AttributeError that names neither the entry point nor the fix.
_VALUE_RE: Final = re.compile(r"[\w.]+\s*(?::\s*[\w.]+\s*)?(?:\[.*\]\s*)?")


def _refusal(plugin: Plugin) -> str | None:
    """Why an entry point is refused from its metadata alone, or None."""
    name = plugin.name
    if NAME_RE.fullmatch(name) is None:
        return (
            f"entry point name {name!r} is not a backend name (letters, digits, '_', '.', '-', "
            f"starting with a letter, digit or '_'), so it cannot be selected; rename the "
            f"entry point in the group {ENTRY_POINT_GROUP!r}"
        )
    owner = RESERVED_NAMES.get(name)
    if owner is not None and normalize(plugin.distribution) != owner:
        return (
            f"the name {name!r} is reserved for {owner}, this project's own backend; "
            f"rename the entry point (for example {name}-{normalize(plugin.distribution)})"
        )
    if _VALUE_RE.fullmatch(plugin.target) is None:
        return (
            f"entry point {name!r} has the value {plugin.target!r}, which is not a module "
            "('package.module', or 'package.module:attribute'); set it to the plugin's module"
        )
    return None


def _read() -> _Scan:
    """Scan: the environment, the core's host and the entry points."""
    # Imported here: eventapi reads its __version__ from its metadata when first asked for it.
    from .. import __version__

    autoload = not _env_flag(ENV_DISABLE_AUTOLOAD)
    # The core's own host, registered here as well, so that autoload=off keeps it.
    load = functools.partial(importlib.import_module, _HOST)
    host = Plugin("host", "eventapi-core", __version__, _HOST, load, installed=False, embedded=True)
    claims: dict[str, list[Plugin]] = {"host": [host]}
    refused: list[BackendInfo] = []
    if autoload:
        # Imported here: importlib.metadata costs more to import than the rest of
        # eventapi's own modules, and `import eventapi` scans nothing.
        from importlib.metadata import entry_points

        for ep in entry_points(group=ENTRY_POINT_GROUP):
            distribution, version = ("?", "?") if ep.dist is None else name_and_version(ep.dist)
            plugin = Plugin(ep.name, distribution, version, ep.value, ep.load)
            why = _refusal(plugin)
            if why is not None:
                refused.append(row(plugin, "broken", why))
            # The core declares host as an entry point too, the module registered above: the
            # same plugin, no conflict.
            elif not (plugin.target == _HOST and normalize(distribution) == "eventapi-core"):
                claims.setdefault(plugin.name, []).append(plugin)
    return _Scan(autoload, _blocked_names(), _budget(), claims, refused, {})


# -- the registry: plugins registered in code, and the current scan ---------------------------

# Guards the registry's data: what follows, and each scan's cells. Never held while plugin code
# runs or entry points are read.
_lock = threading.Lock()
_code: dict[str, Plugin] = {}
_scan: _Scan | None = None
# The scan's own once-cell, held while it is read and while refresh() forgets it: a second first
# caller waits for the one read (milliseconds, no plugin code), and no read outlives a refresh.
_scanning = threading.Lock()


def _current_scan() -> _Scan:
    global _scan
    with _scanning:
        if _scan is None:
            _scan = _read()
        return _scan


def _started_cell(scan: _Scan, name: str) -> _Cell | None:
    """``name``'s cell in ``scan``, made and started if it is new; None if nothing claims it.

    A new cell is done when made where metadata alone decides it: a blocked name, or a name
    that two plugins claim.
    """
    with _lock:
        cell = scan.cells.get(name)
        if cell is not None:
            return cell
        plugins = ([_code[name]] if name in _code else []) + scan.claims.get(name, [])
        if not plugins:
            return None
        kind = reason = ""
        if name in scan.blocked:
            kind, reason = "blocked", f"listed in {ENV_DISABLE_PLUGINS}"
        elif len(plugins) > 1:
            claims = " and ".join(p.label for p in plugins)
            kind, reason = "broken", f"conflict: name claimed by {claims}; uninstall one"
        decided = Entry(tuple(row(p, kind, reason) for p in plugins)) if kind else None
        cell = scan.cells[name] = _Cell(plugins[0], scan.budget, decided)
    if decided is None:
        cell.start()
    return cell


def _after_fork_in_child() -> None:
    # A plugin's thread does not exist in the child: forget the cells it had not finished
    # (they start again on demand), keep what is known. The locks may have been held.
    global _lock, _scan, _scanning
    _lock = threading.Lock()
    _scanning = threading.Lock()
    if _scan is not None:
        cells = _scan.cells
        _scan = _scan._replace(cells={n: cell for n, cell in cells.items() if cell.done.is_set()})


os.register_at_fork(after_in_child=_after_fork_in_child)


# -- the functions selection and users call ---------------------------------------------------


def backends() -> list[BackendInfo]:
    """Every backend discovery found, sorted by priority (highest first), then name.

    Imports each plugin's light hook module and runs its probe, each plugin on a thread of its
    own, side by side; waits for each at most ``EVENTAPI_PLUGIN_TIMEOUT`` seconds
    (:data:`DEFAULT_PLUGIN_TIMEOUT` by default) from the call; imports no driver binding and
    loads no backend. A broken plugin is a row with status ``broken: <error>``, never an
    exception, and what it prints goes where the process's output goes. Thread-safe.
    """
    called = time.monotonic()
    scan = _current_scan()
    with _lock:
        names = list(scan.claims.keys() | _code.keys())
    cells = [_started_cell(scan, name) for name in names]
    deadline = called + scan.budget
    rows = [r for cell in cells if cell is not None for r in cell.wait(deadline).rows]
    return sorted(rows + scan.refused, key=lambda r: (-r.priority, r.name, r.distribution))


def entry(name: str) -> Entry | None:
    """What discovery knows of ``name`` (running only its plugin, bounded), or None if absent."""
    called = time.monotonic()
    scan = _current_scan()
    cell = _started_cell(scan, name)
    if cell is not None:
        return cell.wait(called + scan.budget)
    # Refused from its metadata alone (a value that is not a module): broken, not absent. A
    # reserved name's impostor is not what the user asked for, though.
    refused = tuple(r for r in scan.refused if r.name == name and name not in RESERVED_NAMES)
    return Entry(refused) if refused else None


def autoload() -> bool:
    """False when the current scan skipped entry points (``EVENTAPI_DISABLE_PLUGIN_AUTOLOAD``)."""
    return _current_scan().autoload


def register_backend(spec: BackendSpec) -> None:
    """Make the backend ``spec`` describes selectable in this process, by ``spec.name``.

    Returns None; :func:`unregister_backend` undoes it. The backend is listed by
    :func:`eventapi.backends` (distribution ``"(registered in code)"``, no version) and selected
    as any installed backend is: by name, by ``EVENTAPI_BACKEND``, or by priority. It survives
    ``EVENTAPI_DISABLE_PLUGIN_AUTOLOAD`` and a rescan of the installed plugins;
    ``EVENTAPI_DISABLE_PLUGINS`` blocks it. Its probe runs when its row is first needed, off
    the calling thread within ``EVENTAPI_PLUGIN_TIMEOUT``; its ``load`` when it is first
    selected. An installed distribution claiming the same name makes both a conflict, as two
    distributions would.
    Thread-safe; what discovery knows of every other name is kept, and the objects of other
    backends stay cached.

    Raises:
        TypeError: ``spec`` is not an :class:`eventapi.BackendSpec`.
        ValueError: the name is reserved (``host``, ``cuda``, ``hip``), is not a backend name,
            or is already registered in code; or a field is unsound (``api_version`` of
            another major, a ``priority`` that is not an int, ``load`` or ``probe`` not
            callable), with the same message discovery gives a plugin.
    """
    plugin = code_plugin(spec)  # checked here, on the caller's thread
    with _lock:
        if plugin.name in _code:
            raise ValueError(
                f"a backend {plugin.name!r} is already registered in code; unregister it first"
            )
        _code[plugin.name] = plugin
        _forget(plugin.name)


def unregister_backend(name: str) -> bool:
    """Undo :func:`register_backend` for ``name``; return False when none was registered.

    Objects already loaded from it keep working for whoever holds them; later selections of
    ``name`` raise :class:`~eventapi.BackendNotFoundError` (unless an installed distribution
    provides it). Thread-safe.
    """
    with _lock:
        found = _code.pop(name, None) is not None
        if found:
            _forget(name)
    return found


def _forget(name: str) -> None:
    # With the lock held. Only this name's claims changed: every other cell stays (its plugin
    # is not run again, selection keeps the objects loaded from its entry).
    if _scan is not None:
        _scan.cells.pop(name, None)


def refresh() -> None:
    """Forget everything discovery learnt, so the next call rescans (tests use this).

    The environment variables are read again. Cached backend objects are dropped, not closed:
    objects already handed out keep working, and later :func:`~eventapi.backend` calls build
    new ones.
    """
    global _scan
    with _scanning, _lock:
        _scan = None
