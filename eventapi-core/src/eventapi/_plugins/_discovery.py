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

A plugin is untrusted code. Each one's import, hook and probe run once, never on the caller's
thread, and are waited for at most :data:`DEFAULT_PLUGIN_TIMEOUT` seconds from the call
(``EVENTAPI_PLUGIN_TIMEOUT`` changes it). :func:`backends` runs the plugins in turn on one
thread, and after :data:`IN_TURN_S` gives each plugin not yet started a thread of its own, so
listing takes about the quick ones' total or the slowest one, never more than the budget;
:func:`entry` runs the one plugin it needs on a thread of its own. One that cannot be
imported, raises (``SystemExit`` included) in its hook, yields something that is not a matching
:class:`~eventapi.BackendSpec`, was built for another major of the plugin contract, has a probe
that raises, or does not finish within the budget is listed as ``broken: <error>``; every
other backend keeps working. A plugin that crashed the process while running there is
quarantined on the next run (:mod:`eventapi._plugins._quarantine`). The embedded ``host`` is this
package's own code and runs inline.

Names decided from metadata alone, without importing anything: two distributions claiming one
name are a conflict (both broken; selecting the name raises :class:`~eventapi.BackendError`);
an entry point whose name is not a backend name (:data:`~eventapi._plugins._spec.NAME_PATTERN`), or
that claims a name reserved for this project's distributions
(:data:`~eventapi._plugins._spec.RESERVED_NAMES`), is listed broken and never selected, and never
displaces the backend it imitates.

Locking: one lock guards the registry's data and each scan its own; neither is held while
plugin code runs or entry points are read. Waiting for a plugin is waiting on that plugin's
event, so a plugin that hangs holds up only callers that need that plugin.

The variables ``EVENTAPI_DISABLE_PLUGIN_AUTOLOAD``, ``EVENTAPI_DISABLE_PLUGINS`` and
``EVENTAPI_PLUGIN_TIMEOUT`` are read when discovery first runs in the process, and again after
:func:`refresh`. Selection (:mod:`eventapi._plugins._selection`) asks for one name through
:func:`entry` or for every row through :func:`backends`, and compares :func:`generation` to know
when what it cached was built from a discovery since forgotten.
"""

from __future__ import annotations

import importlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Final, NamedTuple, final

import pluggy

from .._logger import logger
from .._metadata import name_and_version
from ._spec import (
    ENTRY_POINT_GROUP,
    NAME_PATTERN,
    PLUGIN_API,
    PROJECT,
    RESERVED_NAMES,
    BackendInfo,
    BackendSpec,
    _Hooks,
)

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from . import _quarantine

__all__ = [
    "DEFAULT_PLUGIN_TIMEOUT",
    "ENV_DISABLE_AUTOLOAD",
    "ENV_DISABLE_PLUGINS",
    "ENV_PLUGIN_TIMEOUT",
    "IN_TURN_S",
    "KNOWN_HINTS",
    "autoload",
    "backends",
    "check_name",
    "check_spec",
    "entry",
    "generation",
    "refresh",
    "register",
    "unregister",
]


ENV_DISABLE_AUTOLOAD: Final = "EVENTAPI_DISABLE_PLUGIN_AUTOLOAD"
ENV_DISABLE_PLUGINS: Final = "EVENTAPI_DISABLE_PLUGINS"
ENV_PLUGIN_TIMEOUT: Final = "EVENTAPI_PLUGIN_TIMEOUT"

DEFAULT_PLUGIN_TIMEOUT: Final = 30.0
"""Seconds one plugin's import, hook and probe may take before it is listed as timed out.

Generous on purpose: a probe may initialize its driver, and a real ``cuInit`` on a machine with
many GPUs (persistence mode off) takes seconds, sometimes over ten. A plugin that hangs costs
this once per process, after which its row is cached.
"""

# Backends this project publishes, so that a missing one is answered with the command that
# installs it rather than only "not found".
KNOWN_HINTS: Final = {
    "cuda": 'pip install "eventapi-core[cuda]"',
    "hip": 'pip install "eventapi-core[hip]"',
}

_NAME_RE: Final = re.compile(NAME_PATTERN)


# NamedTuples, not dataclasses: both are immutable values, and these cost a tenth as much to
# define, which every process that lists backends pays (dataclasses exec generated code).
class _Candidate(NamedTuple):
    """A plugin that claims a backend name, before its module is imported."""

    name: str
    distribution: str
    version: str
    # The entry point's value ("pkg.module" or "pkg.module:attr"), or what was registered.
    target: str
    load_plugin: Callable[[], object]
    # This package's own host plugin: runs inline, unguarded, on the caller's thread.
    embedded: bool = False
    # Registered in code (register), not found through an entry point.
    in_code: bool = False

    @property
    def label(self) -> str:
        return f"{self.distribution} {self.version}".strip()


class _Entry(NamedTuple):
    """What discovery knows about one backend name: its rows, and the spec when it is sound."""

    rows: tuple[BackendInfo, ...]
    spec: BackendSpec | None


@final
class _BrokenPluginError(Exception):
    """A plugin failed one of discovery's checks; the message is the row's reason."""


_TRUE: Final = ("1", "true", "yes", "on")
_FALSE: Final = ("", "0", "false", "no", "off")


def _env_flag(name: str) -> bool:
    raw = os.environ.get(name, "")
    value = raw.strip().lower()
    if value in _FALSE:
        return False
    if value not in _TRUE:
        logger().warning(
            "%s=%r is not one of %s (set) or %s (not set); taken as set",
            name,
            raw,
            ", ".join(_TRUE),
            ", ".join(repr(v) for v in _FALSE),
        )
    return True


def _blocked_names() -> frozenset[str]:
    raw = os.environ.get(ENV_DISABLE_PLUGINS, "")
    names = frozenset(part.strip() for part in raw.split(",") if part.strip())
    odd = sorted(name for name in names if _NAME_RE.fullmatch(name) is None)
    if odd:
        logger().warning(
            "%s=%r: %s not a backend name, so it blocks nothing; separate names with commas "
            "and give no device (%s)",
            ENV_DISABLE_PLUGINS,
            raw,
            ", ".join(repr(name) for name in odd),
            "for example EVENTAPI_DISABLE_PLUGINS=cuda,hip",
        )
    return names


def _budget() -> float:
    raw = os.environ.get(ENV_PLUGIN_TIMEOUT, "").strip()
    if not raw:
        return DEFAULT_PLUGIN_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        logger().warning(
            "%s=%r is not a positive number of seconds; using %g",
            ENV_PLUGIN_TIMEOUT,
            raw,
            DEFAULT_PLUGIN_TIMEOUT,
        )
        return DEFAULT_PLUGIN_TIMEOUT
    if value > threading.TIMEOUT_MAX:
        # A wait for longer than the platform's thread timeouts allow raises OverflowError.
        logger().warning(
            "%s=%r is more seconds than a thread can wait; using %g",
            ENV_PLUGIN_TIMEOUT,
            raw,
            threading.TIMEOUT_MAX,
        )
        return threading.TIMEOUT_MAX
    return value


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _one_line(text: str) -> str:
    return " ".join(text.split())


# -- one plugin's run -------------------------------------------------------------------------


@final
class _Run:
    """One plugin's import, hook and probe: run once off the caller's thread, with a deadline.

    The deadline is set when the run is created: ``budget`` seconds later. The run is *claimed*
    by the one thread that runs it: the thread of :func:`_run_in_turn`, or a thread of its own
    that :meth:`start` (or a waiter, in :meth:`result`) gives it. The first waiter past the
    deadline publishes a timed-out entry; the plugin may still be running, and what it returns
    later is dropped, so every caller sees one answer.
    """

    __slots__ = (
        "_candidate",
        "_claimed",
        "_deadline",
        "_done",
        "_entry",
        "_guard",
        "_lock",
        "spec",
        "stage",
    )

    def __init__(self, candidate: _Candidate, budget: float) -> None:
        self._candidate = candidate
        self._deadline = time.monotonic() + budget
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._claimed = False
        self._entry: _Entry | None = None
        # Written by the plugin's thread as it goes (advance), read for a timeout's message.
        self.stage = f"importing {candidate.target}"
        self.spec: BackendSpec | None = None
        self._guard: _quarantine.Guard | None = None

    @property
    def finished(self) -> bool:
        return self._entry is not None

    def claim(self) -> bool:
        """True for the one caller that is to run the plugin; False once a thread runs it."""
        with self._lock:
            claimed, self._claimed = self._claimed, True
        return not claimed

    def start(self) -> None:
        """Run the plugin on a thread of its own, unless a thread already runs it."""
        if self.claim():
            name = f"eventapi-plugin-{self._candidate.name}"
            threading.Thread(target=self.work, name=name, daemon=True).start()

    def work(self) -> None:
        """Import, hook and probe, on the calling thread; only the claimant calls this."""
        # Imported here, as importlib.metadata is: `import eventapi` pays for neither.
        from . import _quarantine

        candidate = self._candidate
        try:
            guard = _quarantine.Guard(candidate.name, candidate.distribution, candidate.version)
            with guard:
                self._guard = guard
                guard.stage(self.stage)
                entry = _resolve(candidate, self)
        except BaseException as exc:  # _resolve reports the plugin's own errors
            entry = _Entry((_broken(candidate, f"discovery failed: {_describe(exc)}"),), None)
        finally:
            self._guard = None
        self._publish(entry)

    def advance(self, stage: str, spec: BackendSpec | None = None) -> None:
        """Say what the plugin runs now (and its spec, once known); on the plugin's thread."""
        if spec is not None:
            self.spec = spec
        self.stage = stage
        guard = self._guard
        if guard is not None:
            guard.stage(stage, spec.priority if spec is not None else None)

    def _publish(self, entry: _Entry) -> _Entry:
        with self._lock:
            if self._entry is None:
                self._entry = entry
            published = self._entry
        self._done.set()
        return published

    def result(self, budget: float) -> _Entry:
        """The entry, waiting for the plugin at most until the deadline.

        A run no thread has claimed yet (queued behind a slow plugin in :func:`_run_in_turn`)
        is started on a thread of its own first, so that it still has its budget.
        """
        entry = self._entry
        if entry is not None:
            return entry
        self.start()
        if self._done.wait(max(0.0, self._deadline - time.monotonic())):
            assert self._entry is not None  # set before the event
            return self._entry
        spec = self.spec
        priority = spec.priority if spec is not None else 0
        reason = (
            f"timed out after {budget:g} s {self.stage}; it may still be running. If it is "
            f"only slow, raise {ENV_PLUGIN_TIMEOUT} (seconds); to skip it, add "
            f"{self._candidate.name} to {ENV_DISABLE_PLUGINS}"
        )
        return self._publish(_Entry((_broken(self._candidate, reason, priority=priority),), None))


IN_TURN_S: Final = 0.05
"""Seconds :func:`backends` lets the plugins run in turn on one thread before each still
waiting gets a thread of its own.

Nearly every plugin's import, hook and probe take well under a millisecond to a few
milliseconds, and one thread running them in turn hands the interpreter lock back and forth
with the caller twice in all, where a thread per plugin does it several times per plugin: on a
loaded machine each hand-off costs a wake-up. A plugin that takes longer (a probe initializing
a real driver) holds up the ones behind it for this long at most, a small part of their
budget, after which they run side by side as before.
"""


def _run_in_turn(runs: list[_Run]) -> threading.Thread:
    """Run ``runs`` one after the other on one new thread, and return it; join it to wait.

    A run some other thread claimed meanwhile is skipped.
    """

    def work() -> None:
        for run in runs:
            if run.claim():
                run.work()

    thread = threading.Thread(target=work, name="eventapi-plugins", daemon=True)
    thread.start()
    return thread


# -- one scan ---------------------------------------------------------------------------------


@final
class _Scan:
    """What one scan found: the claims per name, the settings read with it, and each plugin's run.

    ``refused`` are rows decided from metadata alone (an invalid name, a reserved name claimed
    by another distribution): listed, never selectable. Its lock guards ``_decided`` and
    ``_runs`` only.
    """

    __slots__ = ("_decided", "_lock", "_runs", "autoload", "blocked", "budget", "claims", "refused")

    def __init__(
        self,
        *,
        autoload: bool,
        blocked: frozenset[str],
        budget: float,
        claims: dict[str, list[_Candidate]],
        refused: list[BackendInfo],
    ) -> None:
        self.autoload = autoload
        self.blocked = blocked
        self.budget = budget
        self.claims = claims
        self.refused = refused
        self._lock = threading.Lock()
        self._decided: dict[str, _Entry] = {}
        self._runs: dict[str, _Run] = {}

    def prepare(self, name: str, *, start: bool = True) -> _Entry | _Run | None:
        """What answers for ``name``: an entry already known, a run, or None.

        A new run is started on a thread of its own, unless ``start`` is false: then the
        caller runs it (:func:`_run_in_turn`), or :meth:`_Run.result` starts it.
        """
        candidates = self.claims.get(name)
        if candidates is None:
            return None
        with self._lock:
            known = self._decided.get(name) or self._runs.get(name)
        if known is not None:
            return known
        decided = _decide(name, candidates, self.blocked)
        if decided is None and candidates[0].embedded:
            decided = _resolve(candidates[0], None)
        new_run: _Run | None = None
        with self._lock:
            known = self._decided.get(name) or self._runs.get(name)
            if known is None:
                if decided is not None:
                    self._decided[name] = known = decided
                else:
                    new_run = self._runs[name] = known = _Run(candidates[0], self.budget)
        if new_run is not None and start:
            new_run.start()
        return known

    def reclaimed(self, name: str, code: _Candidate | None) -> _Scan:
        """A copy in which ``name`` is claimed by ``code`` (if any) and its entry points.

        What was learnt of ``name`` is dropped; what was learnt of the others is kept.
        """
        claims = dict(self.claims)
        found = [c for c in claims.pop(name, []) if not c.in_code]
        if code is not None:
            found.insert(0, code)
        if found:
            claims[name] = found
        copy = _Scan(
            autoload=self.autoload,
            blocked=self.blocked,
            budget=self.budget,
            claims=claims,
            refused=self.refused,
        )
        with self._lock:
            copy._decided = {k: v for k, v in self._decided.items() if k != name}
            copy._runs = {k: v for k, v in self._runs.items() if k != name}
        return copy

    def entry(self, name: str) -> _Entry | None:
        found = self.prepare(name)
        if isinstance(found, _Run):
            return found.result(self.budget)
        if found is None and name not in RESERVED_NAMES:
            # Refused from its metadata alone (a value that is not a module): broken, not
            # absent. A reserved name's impostor is not what the user asked for, though.
            refused = tuple(row for row in self.refused if row.name == name)
            if refused:
                return _Entry(refused, None)
        return found

    def after_fork(self) -> None:
        # A plugin's thread does not exist in the child: forget runs it had not finished (they
        # start again on demand), keep what is known. The lock may have been held at the fork.
        self._lock = threading.Lock()
        self._runs = {name: run for name, run in self._runs.items() if run.finished}


def _decide(name: str, candidates: list[_Candidate], blocked: frozenset[str]) -> _Entry | None:
    """The entry of ``name`` when metadata alone decides it, else None (the plugin must run)."""
    if name in blocked:
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
    if candidate.embedded:
        return None
    from . import _quarantine

    crashed = _quarantine.crashed_before(name, candidate.distribution, candidate.version)
    if crashed is not None:
        return _Entry((_broken(candidate, crashed.reason, priority=crashed.priority),), None)
    return None


# importlib.metadata's own form of an entry point's value, "module[:attr][ [extras]]", which
# its load() matches without checking, so a value of another form fails there with an
# AttributeError that names neither the entry point nor the fix.
_VALUE_RE: Final = re.compile(r"[\w.]+\s*(?::\s*[\w.]+\s*)?(?:\[.*\]\s*)?")


def _refusal(candidate: _Candidate) -> str | None:
    """Why an entry point is refused from its metadata alone, or None."""
    name = candidate.name
    if _NAME_RE.fullmatch(name) is None:
        return (
            f"entry point name {name!r} is not a backend name (letters, digits, '_', '.', '-', "
            f"starting with a letter, digit or '_'), so it cannot be selected; rename the "
            f"entry point in the group {ENTRY_POINT_GROUP!r}"
        )
    owner = RESERVED_NAMES.get(name)
    if owner is not None and _normalize(candidate.distribution) != owner:
        return (
            f"the name {name!r} is reserved for {owner}, this project's own backend; "
            f"rename the entry point (for example {name}-{_normalize(candidate.distribution)})"
        )
    if _VALUE_RE.fullmatch(candidate.target) is None:
        return (
            f"entry point {name!r} has the value {candidate.target!r}, which is not a module "
            "('package.module', or 'package.module:attribute'); set it to the plugin's module"
        )
    return None


def _read(code: list[_Candidate]) -> _Scan:
    """Scan: the environment, the plugins registered in code and the entry points."""
    autoload = not _env_flag(ENV_DISABLE_AUTOLOAD)
    claims: dict[str, list[_Candidate]] = {"host": [_host_candidate()]}
    for candidate in code:
        claims.setdefault(candidate.name, []).append(candidate)
    refused: list[BackendInfo] = []
    if autoload:
        # Imported here: importlib.metadata costs more to import than the rest of
        # eventapi's own modules, and `import eventapi` scans nothing.
        from importlib.metadata import entry_points

        for ep in entry_points(group=ENTRY_POINT_GROUP):
            candidate = _from_entry_point(ep)
            why = _refusal(candidate)
            if why is not None:
                refused.append(_broken(candidate, why))
                continue
            claim = claims.setdefault(candidate.name, [])
            # The core registers host in code and declares it as an entry point too, so
            # that autoload=off keeps it; the same module of the same distribution is one
            # plugin, not a conflict.
            if not any(_same_plugin(candidate, other) for other in claim):
                claim.append(candidate)
    return _Scan(
        autoload=autoload,
        blocked=_blocked_names(),
        budget=_budget(),
        claims=claims,
        refused=refused,
    )


# -- the registry -----------------------------------------------------------------------------


@final
class _Registry:
    """The process-wide discovery state: plugins registered in code, and the current scan.

    ``_lock`` guards those fields only; it is never held while entry points are read or plugin
    code runs. ``_generation`` counts what was forgotten, for selection to compare.
    """

    __slots__ = ("_code", "_generation", "_lock", "_registrations", "_scan")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._code: dict[str, _Candidate] = {}
        self._scan: _Scan | None = None
        self._generation = 0
        self._registrations = 0

    @property
    def generation(self) -> int:
        return self._generation

    def register(self, candidate: _Candidate) -> None:
        name = candidate.name
        check_name(name)
        with self._lock:
            if name in self._code:
                raise ValueError(
                    f"a backend {name!r} is already registered in code; unregister it first"
                )
            self._code[name] = candidate
            self._reclaim(name)
            self._registrations += 1

    def unregister(self, name: str) -> bool:
        with self._lock:
            found = self._code.pop(name, None) is not None
            if found:
                self._reclaim(name)
                self._registrations += 1
        return found

    def _reclaim(self, name: str) -> None:
        # Called with the lock held. Only this name's claims change: what discovery knows of
        # every other backend stays (its plugin is not run again, its objects stay cached).
        # (A scan being read meanwhile is not kept: scan() compares the generation, and a
        # registration changes it too, though selection keeps its objects of other names.)
        if self._scan is not None:
            self._scan = self._scan.reclaimed(name, self._code.get(name))

    def refresh(self) -> None:
        with self._lock:
            self._forget()

    def _forget(self) -> None:
        self._scan = None
        self._generation += 1

    def scan(self) -> _Scan:
        with self._lock:
            scan, code = self._scan, list(self._code.values())
            seen = (self._generation, self._registrations)
        if scan is not None:
            return scan
        # Two first callers may both read; the first to finish is kept. Reading costs
        # milliseconds and runs no plugin code, so that beats making one wait on the other.
        fresh = _read(code)
        with self._lock:
            if self._scan is None and (self._generation, self._registrations) == seen:
                self._scan = fresh
            return self._scan or fresh

    def after_fork(self) -> None:
        self._lock = threading.Lock()
        if self._scan is not None:
            self._scan.after_fork()


def _resolve(candidate: _Candidate, run: _Run | None) -> _Entry:
    """Import the plugin, call its hook, check the spec and run its probe: one entry."""
    spec: BackendSpec | None = None
    try:
        spec = _load_spec(candidate, run)
        if run is not None:
            run.advance("in its probe", spec)
        reason = _probe(spec)
    except _BrokenPluginError as exc:
        logger().debug("backend %r (%s) is broken: %s", candidate.name, candidate.label, exc)
        priority = spec.priority if spec is not None else 0
        return _Entry((_broken(candidate, str(exc), priority=priority, spec=spec),), None)
    if reason is None:
        return _Entry((_row(candidate, spec=spec, status="ok", reason=""),), spec)
    return _Entry(
        (_row(candidate, spec=spec, status=f"unavailable: {reason}", reason=reason),), spec
    )


# The plugin's own code may raise anything, SystemExit and KeyboardInterrupt included: each is
# the plugin's failure, reported in its row, never raised into the caller of backends().
def _load_spec(candidate: _Candidate, run: _Run | None) -> BackendSpec:
    """Import the plugin, call its hook alone, and check what it yields."""
    try:
        plugin = candidate.load_plugin()
    except BaseException as exc:  # the plugin's failure, see above
        logger().debug("importing %s failed", candidate.target, exc_info=True)
        raise _BrokenPluginError(f"cannot import {candidate.target}: {_describe(exc)}") from exc
    if run is not None:
        run.advance("in its eventapi_backends hook")
    # A manager of its own: pluggy's is not thread-safe, and only this plugin's hook must run.
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(_Hooks)
    try:
        pm.register(plugin, name=candidate.name)
    except Exception as exc:
        raise _BrokenPluginError(
            f"{candidate.target} is not a valid plugin: {_describe(exc)}"
        ) from exc
    if not pm.hook.eventapi_backends.get_hookimpls():
        raise _BrokenPluginError(
            f"{candidate.target} implements no eventapi_backends hook; define "
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
    except BaseException as exc:  # the plugin's failure, see above
        logger().debug("eventapi_backends of %s raised", candidate.target, exc_info=True)
        raise _BrokenPluginError(f"eventapi_backends raised {_describe(exc)}") from exc
    return _check_specs(candidate, specs)


def check_name(name: str) -> None:
    """Raise ValueError unless ``name`` may be registered in code (a free, valid name)."""
    if name in RESERVED_NAMES:
        raise ValueError(
            f"{name!r} is reserved for {RESERVED_NAMES[name]}, this project's own backend; "
            "register the backend under another name"
        )
    if not isinstance(name, str) or _NAME_RE.fullmatch(name) is None:
        raise ValueError(
            f"{name!r} is not a backend name (letters, digits, '_', '.', '-', starting with a "
            "letter, digit or '_')"
        )


def check_spec(spec: BackendSpec) -> None:
    """Raise ValueError unless ``spec`` is a sound BackendSpec, as discovery checks a plugin's."""
    check_name(spec.name)
    candidate = _Candidate(spec.name, "(registered in code)", "", repr(spec.name), lambda: None)
    try:
        _check_specs(candidate, [spec])
    except _BrokenPluginError as exc:
        raise ValueError(f"BackendSpec {spec.name!r}: {exc}") from None


def _from_entry_point(ep: EntryPoint) -> _Candidate:
    dist = ep.dist
    distribution, version = ("?", "?") if dist is None else name_and_version(dist)
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
    device: object = spec.default_device
    if device is not None and (isinstance(device, bool) or not isinstance(device, int)):
        raise _BrokenPluginError(f"default_device {device!r} is not None or a device index")
    if isinstance(device, int) and device < 0:
        raise _BrokenPluginError(f"default_device {device!r} is negative")
    if not callable(spec.load) or not callable(spec.probe):
        raise _BrokenPluginError("BackendSpec.load and BackendSpec.probe must be callables")
    if not isinstance(spec.install_hint, str):
        raise _BrokenPluginError(f"install_hint {spec.install_hint!r} is not a str")
    return spec


def _probe(spec: BackendSpec) -> str | None:
    try:
        reason: object = spec.probe()
    except BaseException as exc:  # the plugin's failure, see _load_spec
        logger().debug("probe of backend %r raised", spec.name, exc_info=True)
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
    from .. import __version__

    # Registered in code as well as by entry point, so that EVENTAPI_DISABLE_PLUGIN_AUTOLOAD
    # keeps the embedded backend.
    module = "eventapi._plugins._host"
    return _Candidate("host", "eventapi-core", __version__, module, _import(module), embedded=True)


def _import(module: str) -> Callable[[], object]:
    return lambda: importlib.import_module(module)


_registry: Final = _Registry()
os.register_at_fork(after_in_child=_registry.after_fork)


# -- the functions selection and users call ---------------------------------------------------


def backends() -> list[BackendInfo]:
    """Every backend discovery found, sorted by priority (highest first), then name.

    Imports each plugin's light hook module and runs its probe off the calling thread: in turn
    on one thread, and each plugin still waiting after :data:`IN_TURN_S` on a thread of its own,
    side by side. Waits for each at most ``EVENTAPI_PLUGIN_TIMEOUT`` seconds
    (:data:`DEFAULT_PLUGIN_TIMEOUT` by default) from the call; imports no driver binding and
    loads no backend. A broken plugin is a row with status ``broken: <error>``, never an
    exception, and what it prints goes where the process's output goes. Thread-safe.
    """
    scan = _registry.scan()
    found = [scan.prepare(name, start=False) for name in scan.claims]
    queued = [f for f in found if isinstance(f, _Run) and not f.finished]
    if queued:
        # The usual case: every plugin done in turn, and the caller woken once, as the thread
        # ends. (Joining wakes it as the thread lets go of the interpreter lock; an event set
        # just before would wake it to wait for the lock, measured a millisecond later.)
        # Otherwise each plugin not yet started gets a thread of its own, so that a slow one
        # holds up no other.
        in_turn = _run_in_turn(queued)
        in_turn.join(min(IN_TURN_S, scan.budget))
        if in_turn.is_alive():
            for run in queued:
                run.start()
    entries = [f.result(scan.budget) if isinstance(f, _Run) else f for f in found]
    rows = [row for e in entries if e is not None for row in e.rows] + scan.refused
    return sorted(rows, key=lambda row: (-row.priority, row.name, row.distribution))


def entry(name: str) -> _Entry | None:
    """What discovery knows of ``name`` (running only its plugin, bounded), or None if absent."""
    return _registry.scan().entry(name)


def autoload() -> bool:
    """False when the current scan skipped entry points (``EVENTAPI_DISABLE_PLUGIN_AUTOLOAD``)."""
    return _registry.scan().autoload


def generation() -> int:
    """A number that changes whenever discovery forgets what it learnt (refresh, register)."""
    return _registry.generation


def register(
    plugin: object, name: str, *, distribution: str = "(registered in code)", version: str = ""
) -> None:
    """Register a plugin object (a module of hook implementations) for backend ``name`` in code.

    What :func:`eventapi.register_backend` builds on. A plugin registered here survives
    ``EVENTAPI_DISABLE_PLUGIN_AUTOLOAD`` and :func:`refresh`; its hook and probe run as any
    plugin's do, off the caller's thread within the budget, and what discovery knows of every
    other name is kept. Raises ValueError if ``name`` is already registered in code, is reserved
    (``host``, ``cuda``, ``hip``) or is not a backend name.
    """
    target = getattr(plugin, "__name__", repr(plugin))
    _registry.register(
        _Candidate(name, distribution, version, target, lambda: plugin, in_code=True)
    )


def unregister(name: str) -> bool:
    """Remove the plugin registered in code for ``name``; False when there is none."""
    return _registry.unregister(name)


def refresh() -> None:
    """Forget everything discovery learnt, so the next call rescans (tests use this).

    The environment variables are read again. Cached backend objects are dropped, not closed:
    objects already handed out keep working, and later :func:`~eventapi.backend` calls build
    new ones.
    """
    _registry.refresh()
