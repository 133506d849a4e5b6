"""Quarantine of plugins that crashed the process while discovery ran their code.

A crash in native code (a probe that loads a C library the wrong way and segfaults) cannot be
caught in the process it happens in; running every probe in a child process would contain it
but costs an interpreter start per plugin, several times what discovery itself costs (the
numbers are in ``docs/selecting-backends.md``). Instead, discovery leaves a *marker* file
behind while a plugin's import, hook and probe run, and removes it when they return, whatever
they return or raise. A crash is the one way to leave it behind, so the next process that finds
a marker whose process is gone lists that plugin as broken without running it again, with the
path to delete to try it again. The crash happens once per plugin version, not on every run.

Markers live in ``$XDG_CACHE_HOME/eventapi/probing`` (``~/.cache/eventapi/probing`` by
default), one file per (backend name, process) named ``<name>.<pid>``, holding the plugin's
distribution, version and start time, one per line: a marker of another version does not
quarantine (an upgrade may have fixed the crash) and is removed. A process that ends normally
while a plugin it timed out on is still running removes that plugin's marker at exit: a hang is
reported as a timeout, not as a crash. A process killed (``SIGKILL``) while probing leaves its
markers too; the row then says the process *ended* while probing, and deleting the file retries.

Where the directory cannot be written (a read-only home), plugins run unguarded: quarantine is
a convenience for the next run, never a reason for discovery to fail.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from typing import Final, final

from .._logger import logger

__all__ = ["Guard", "crashed_before"]


# Plain os calls, not pathlib: its glob and first uses cost milliseconds in a fresh process, as
# much as the plugins' own imports (measured), and this runs in every first listing.


def _directory() -> str:
    """The markers' directory. Raises OSError when there is no home to put it in."""
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    if not (base and os.path.isabs(base)):
        home = os.path.expanduser("~")
        if home == "~":  # no HOME and no password entry
            raise OSError("no home directory for the probe markers")
        base = os.path.join(home, ".cache")
    return os.path.join(base, "eventapi", "probing")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


def crashed_before(name: str, distribution: str, version: str) -> str | None:
    """The reason to quarantine ``name``'s plugin, or None when it may run.

    Reads the markers of ``name``: one left by a process that is gone, for this distribution
    and version, quarantines; a marker of another version is removed. Never raises.
    """
    try:
        directory = _directory()
        names = os.listdir(directory)
    except OSError:
        return None  # no directory: nothing ever crashed here
    prefix = f"{name}."
    for file in names:
        pid_text = file[len(prefix) :]
        if not file.startswith(prefix) or not pid_text.isdigit():
            continue
        pid = int(pid_text)
        if pid == os.getpid() or _alive(pid):
            continue  # being probed right now, by another process (or pid reuse: run it)
        path = os.path.join(directory, file)
        try:
            with open(path, encoding="utf-8") as marker:
                # Three lines: distribution, version, when it started (seconds since the epoch).
                marked, marked_version, started = marker.read().split("\n")[:3]
            when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(float(started)))
        except (OSError, ValueError):
            continue
        if (marked, marked_version) != (distribution, version):
            _discard(path)
            continue
        return (
            f"the process running its import, hook or probe ended there (pid {pid}, {when}): "
            "a crash in native code is the usual cause, so it is not run again; "
            f"delete {path} to try it again"
        )
    return None


def _discard(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError:
        logger().debug("cannot remove %s", path, exc_info=True)


# Markers this process wrote and has not removed: a plugin still running (timed out) when the
# process exits normally did not crash it, so they are removed at exit.
_open_lock = threading.Lock()
_open: Final[set[tuple[int, str]]] = set()
_registered = False


def _after_fork_in_child() -> None:
    global _open_lock
    _open_lock = threading.Lock()  # another thread may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)


def _remove_open_at_exit() -> None:
    with _open_lock:
        mine = [path for pid, path in _open if pid == os.getpid()]  # a forked child's are not
        _open.clear()
    for path in mine:
        _discard(path)


@final
class Guard:
    """A marker around one plugin's import, hook and probe: ``with Guard(...):``.

    Written on entry and removed on exit, whatever the body raises. Not reentrant; one per
    plugin run.
    """

    __slots__ = ("_name", "_path", "_record")

    def __init__(self, name: str, distribution: str, version: str) -> None:
        self._name = name
        self._path: str | None = None
        self._record = f"{distribution}\n{version}\n{time.time():.0f}\n"

    def __enter__(self) -> Guard:
        global _registered
        try:
            directory = _directory()
            os.makedirs(directory, exist_ok=True)
            path = os.path.join(directory, f"{self._name}.{os.getpid()}")
            with open(path, "w", encoding="utf-8") as marker:
                marker.write(self._record)
        except OSError:
            logger().debug("cannot write a probe marker; running unguarded", exc_info=True)
            return self
        self._path = path
        with _open_lock:
            _open.add((os.getpid(), path))
            if not _registered:
                atexit.register(_remove_open_at_exit)
                _registered = True
        return self

    def __exit__(self, *exc_info: object) -> None:
        path = self._path
        if path is None:
            return
        with _open_lock:
            _open.discard((os.getpid(), path))
        _discard(path)
