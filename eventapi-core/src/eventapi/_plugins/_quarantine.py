"""Quarantine of plugins that end the process their code runs in.

A crash in native code (a probe that loads a C library the wrong way, a driver's worker thread
that segfaults) cannot be caught in the process it happens in, and neither can a plugin that
calls ``os._exit``. What can be done is not to let it happen again. So while an installed
plugin's code runs in the process (its import, hook and probe in discovery, its ``load`` in
selection), the process keeps a *journal* of that run: a file that says which plugin runs,
doing what. It is removed when the plugin returns, and at exit, so a journal of a dead process
says that the process ended while that plugin ran.

It does not say how. A crash of the plugin on any thread, a crash of the program's own code, and
``SIGKILL`` or ``SIGTERM`` from outside (``timeout``, a batch system's time limit, a closed
terminal) all leave the same file, with or without :mod:`faulthandler` (which is the program's
to enable, and is left alone). So the next process that needs the plugin does not judge from
the file: before running the plugin in itself, it runs it alone, in a separate process, as far
as the dead one got (:mod:`eventapi._plugins._alone`), and watches how that process ends:

* by a fatal signal, or without the plugin returning (``os._exit``), while the plugin ran:
  the plugin is quarantined. ``<name>.quarantined`` records why, and the plugin is listed
  ``broken`` with that reason, and never run, until the record is removed (``eventapi backends
  --retry NAME``) or the plugin's version changes;
* the plugin returned: the death was not its doing that anything can show (a kill from outside,
  or a crash only that program causes), and it runs again. A second such death in a row is
  reported with a warning that says so and how to block the plugin;
* not to an end (it timed out, was killed, could not start): the plugin runs again, with a
  warning that says why eventapi could not tell.

This costs a process start only after a process ended while a plugin ran; every other first
use of a plugin pays a few file operations.

A journal is private to one boot of one host and one process: it records the host name, the
boot id (``/proc/sys/kernel/random/boot_id``), the pid namespace (the inode of
``/proc/self/ns/pid``), the pid and the process's start time (``/proc/<pid>/stat``, so a reused
pid is not taken for the process). Only a reader on the same host, boot and namespace judges a
journal; one from before a reboot is removed (a reboot is not a crash); one from another host
or namespace (a container, a home directory shared over NFS) is left to its own. Files are
created under a temporary name with ``O_EXCL | O_NOFOLLOW`` and renamed into place, read with
``O_NOFOLLOW``, and only in a directory that is the user's own, mode 0700; a file that cannot
be parsed (or a planted link) is removed.

The files, in ``$XDG_CACHE_HOME/eventapi/probing`` (``~/.cache/eventapi/probing`` by default):
``<pid>.<random>.probing`` (a journal), ``<name>.ended`` (the deaths in a row while ``name``
ran, and whether the last was checked in a separate process) and ``<name>.quarantined``. A
record of another version of the plugin is removed: an upgrade may have fixed the crash.

Where the directory cannot be used (a read-only home, a directory someone else owns), plugins
run unguarded: quarantine is a convenience for the next run, never a reason for discovery to
fail. Backends registered in code are the program's own code and are not guarded.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import functools
import os
import threading
import time
from collections.abc import Iterator
from typing import Final, NamedTuple

from .._logger import logger
from ._plugin import Plugin, row
from ._spec import BackendInfo

__all__ = ["crashed_before", "guard", "lift"]


# Plain os calls, not pathlib: its glob and first uses cost milliseconds in a fresh process, as
# much as the plugins' own imports (measured), and this runs in every first listing.

_JOURNAL: Final = ".probing"
_QUARANTINED: Final = ".quarantined"
_ENDED: Final = ".ended"
_TEMP: Final = ".tmp-"  # a file being written, renamed into place when complete
_MAGIC: Final = "eventapi-probe 4"
_RECORD: Final = "eventapi-record 4"
_MAX_BYTES: Final = 1 << 20  # a journal or a record is one line
_STALE_TEMP_S: Final = 60.0  # a temporary file lives microseconds; older ones were abandoned


def _open_directory(*, create: bool) -> tuple[int, str] | None:
    """A descriptor of the records' directory and its path, when it is safely ours; else None.

    Ours: a real directory (not a link), owned by this user; a mode wider than 0700 (an older
    eventapi created it with the umask's) is narrowed. Never raises.
    """
    fd = -1
    try:
        base = os.environ.get("XDG_CACHE_HOME", "").strip()
        if not (base and os.path.isabs(base)):
            home = os.path.expanduser("~")
            if home == "~":  # no HOME and no password entry: nowhere to put the records
                return None
            base = os.path.join(home, ".cache")
        path = os.path.join(base, "eventapi", "probing")
        if create:
            os.makedirs(path, mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        info = os.fstat(fd)
        if info.st_uid == os.getuid():
            if info.st_mode & 0o077:
                os.fchmod(fd, 0o700)
            return fd, path
        _not_ours(path)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a link, or not a directory
            _not_ours(path)
    if fd >= 0:
        os.close(fd)
    return None


@functools.cache
def _not_ours(path: str) -> None:
    # Cached: said once per directory, where every plugin would say it again.
    logger().warning(
        "%s is a link or not this user's own directory, so its records are not trusted "
        "and plugins run unguarded; remove it to let eventapi create its own",
        path,
    )


# -- who this process is ----------------------------------------------------------------------


def _read_small(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as file:
            return file.read(4096).strip()
    except OSError:
        return ""


def _start_time(pid: str) -> str:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), or ""."""
    text = _read_small(f"/proc/{pid}/stat")
    # The command name (field 2) is in parentheses and may hold spaces and parentheses itself.
    fields = text.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else ""


@functools.cache
def _me() -> tuple[str, str, str, str, str]:
    """This process's identity, as a journal records it: the host name, the boot id, the pid
    namespace, the pid and the start time. Read once per process (a forked child reads its own).
    """
    try:
        pidns = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        pidns = ""
    pid = str(os.getpid())
    boot = _read_small("/proc/sys/kernel/random/boot_id")
    return os.uname().nodename, boot, pidns, pid, _start_time(pid)


def _alive(pid: str, start: str) -> bool:
    """Whether process ``pid`` (of this namespace) still runs and is the one that started then."""
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's live process
    now = _start_time(pid)
    return not (start and now and now != start)  # a new process under a reused pid is not it


# -- safe files -------------------------------------------------------------------------------


def _open_at(name: str, flags: int, dir_fd: int) -> int:
    # open()'s opener for the records: never through a link, a new file private to the user, and
    # no wait on a FIFO planted there.
    return os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600, dir_fd=dir_fd)


def _discard(dir_fd: int, name: str) -> bool:
    """Remove file ``name``; whether it was there to remove."""
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    except OSError:
        logger().debug("cannot remove probe record %s", name, exc_info=True)
        return False
    return True


def _put(dir_fd: int, name: str, *fields: object) -> None:
    """Replace file ``name`` with a line of ``fields`` atomically (a link there is replaced)."""
    # Fields never hold a tab or a line break, so the line always parses back.
    line = "\t".join(" ".join(str(field).split()) for field in fields) + "\n"
    temp = f"{_TEMP}{os.getpid()}-{os.urandom(4).hex()}"
    opener = functools.partial(_open_at, dir_fd=dir_fd)
    try:
        with open(temp, "x", encoding="utf-8", opener=opener) as file:
            file.write(line)
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError:
        logger().debug("cannot write probe record %s", name, exc_info=True)
        _discard(dir_fd, temp)


def _fields(dir_fd: int, name: str, magic: str, count: int) -> list[str] | None:
    """The ``count`` fields after ``magic`` in file ``name``; None when it holds no such line,
    is gone, or is a link (never followed)."""
    opener = functools.partial(_open_at, dir_fd=dir_fd)
    try:
        with open(name, encoding="utf-8", errors="replace", opener=opener) as file:
            first, *fields = file.read(_MAX_BYTES).removesuffix("\n").split("\t")
    except OSError:
        return None
    return fields if first == magic and len(fields) == count else None


# -- records: one plugin's quarantine, or its deaths in a row ---------------------------------


class _Record(NamedTuple):
    distribution: str
    version: str
    priority: int  # a quarantine's: the priority the plugin declared, or 0
    detail: str  # a quarantine: its reason; deaths: the pid of the last process that died
    deaths: int
    checked: bool  # the last death was checked in a separate process
    load: str  # what the plugin ran when it died: "", its import, hook and probe; or its load,
    # the backend as selected: "NAME" or "NAME:DEVICE"


def _current(dir_fd: int, file: str, distribution: str, version: str) -> _Record | None:
    """Record ``file``, if of this plugin version; one of another (or unparsable) is removed."""
    fields = _fields(dir_fd, file, _RECORD, 7)
    if fields is not None and fields[:2] == [distribution, version]:
        priority, detail, deaths, checked, load = fields[2:]
        with contextlib.suppress(ValueError):  # a number that is not one
            return _Record(
                distribution, version, int(priority), detail, int(deaths), checked == "True", load
            )
    _discard(dir_fd, file)  # unparsable, a link, or of another version (which may be fixed)
    return None


# -- the journals that dead processes left ----------------------------------------------------


def _sweep(dir_fd: int, files: list[str]) -> None:
    """Turn each journal a dead process of this host, boot and namespace left into records."""
    my_host, my_boot, my_pidns, _, _ = _me()
    for file in files:
        if file.startswith(_TEMP):
            with contextlib.suppress(OSError):  # gone meanwhile
                age = time.time() - os.stat(file, dir_fd=dir_fd, follow_symlinks=False).st_mtime
                if age > _STALE_TEMP_S:
                    _discard(dir_fd, file)  # abandoned by a process that died writing it
            continue
        if not file.endswith(_JOURNAL):
            continue
        fields = _fields(dir_fd, file, _MAGIC, 9)  # the identity, then the run
        if fields is None or not fields[3].isdigit():
            _discard(dir_fd, file)  # unparsable, or a link: nothing to learn, never followed
            continue
        host, boot, pidns, pid, start, name, distribution, version, load = fields
        if host != my_host or (boot and boot != my_boot):
            if host == my_host:
                _discard(dir_fd, file)  # from before a reboot, which is no crash
            continue  # another host's: its own readers judge it
        if pidns != my_pidns or _alive(pid, start):
            continue  # another namespace's (its pid means nothing here), or running plugins now
        ended = f"{name}{_ENDED}"
        before = _current(dir_fd, ended, distribution, version)
        deaths = (before.deaths if before is not None else 0) + 1
        _put(dir_fd, ended, _RECORD, distribution, version, 0, pid, deaths, False, load)
        _discard(dir_fd, file)


_sweeping = threading.Lock()  # one sweep at a time in a process: each plugin's thread asks


def crashed_before(plugin: Plugin, timeout: float) -> BackendInfo | None:
    """``plugin``'s broken row when it is not to run, or None when it may.

    First turns the journals dead processes left into records. Then, if ``plugin`` is
    quarantined, says why; if a process died while it ran and that was not checked yet, runs it
    alone in a separate process for at most ``timeout`` seconds to see whether it crashes
    (the module docstring says what follows). Only installed plugins are guarded: for another,
    None. Never raises.
    """
    opened = _open_directory(create=False) if plugin.installed else None
    if opened is None:
        return None  # not guarded, or no directory: nothing ever ran guarded here
    dir_fd, path = opened
    name, distribution, version = plugin[:3]
    file = f"{name}{_QUARANTINED}"
    try:
        # The file operations below deal with their own errors; listing is the one left.
        with _sweeping, contextlib.suppress(OSError):  # a directory it cannot list: no sweep
            _sweep(dir_fd, os.listdir(dir_fd))
        quarantined = _current(dir_fd, file, distribution, version)
        if quarantined is None:
            ended = _current(dir_fd, f"{name}{_ENDED}", distribution, version)
            if ended is not None and not ended.checked:
                quarantined = _check(dir_fd, plugin, ended, timeout)
    finally:
        os.close(dir_fd)
    if quarantined is None:
        return None
    reason = (
        f"{quarantined.detail}; run 'eventapi backends --retry {name}' or delete "
        f"{os.path.join(path, file)} to try it again"
    )
    return row(plugin, "broken", reason, priority=quarantined.priority)


def _check(dir_fd: int, plugin: Plugin, ended: _Record, timeout: float) -> _Record | None:
    """Run ``plugin`` alone as far as the dead process did: its quarantine record, or None."""
    from . import _alone

    name = plugin.name
    running = "its load" if ended.load else "its import, hook or probe"
    verdict, how, priority = _alone.run(plugin, ended.load, timeout)
    if verdict == "crashed":
        when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime())
        detail = (
            f"the process running {running} ended there (pid {ended.detail}, found {when}); run "
            f"alone in a separate process it ended that one too, by {how}, so it is not run again"
        )
        record = ended._replace(priority=priority, detail=detail, deaths=0, checked=True)
        _put(dir_fd, f"{name}{_QUARANTINED}", _RECORD, *record)
        _discard(dir_fd, f"{name}{_ENDED}")
        return record
    _put(dir_fd, f"{name}{_ENDED}", _RECORD, *ended._replace(checked=True))
    if verdict == "unknown":
        why = (
            f"process {ended.detail} ended while running {running}, and eventapi could not tell "
            f"a crash of it from a kill by running it alone in a separate process ({how})"
        )
    elif ended.deaths > 1:
        why = (
            f"{ended.deaths} processes in a row ended while running {running} (the last: pid "
            f"{ended.detail}), and run alone in a separate process it returned, so eventapi "
            "cannot tell a crash of it from a kill from outside"
        )
    else:
        logger().debug("process %s ended while %s ran: not a crash of it", ended.detail, name)
        return None
    fix = f"If it is what ends this program, block it with EVENTAPI_DISABLE_PLUGINS={name}"
    logger().warning("backend %r: %s; running it again. %s", name, why, fix)
    return None


def lift(name: str) -> list[str]:
    """Remove ``name``'s quarantine (and its deaths); return the paths removed."""
    opened = _open_directory(create=False)
    if opened is None:
        return []
    dir_fd, path = opened
    files = (f"{name}{_QUARANTINED}", f"{name}{_ENDED}")
    removed = [os.path.join(path, file) for file in files if _discard(dir_fd, file)]
    os.close(dir_fd)
    return removed


# -- this process's journals ------------------------------------------------------------------

# The journals of this process's runs under way, each with a descriptor of its directory. Taken
# out (dict.pop, atomic) by whichever of the run's end, the exit or a fork's child comes first.
_running: dict[str, int] = {}


@contextlib.contextmanager
def guard(plugin: Plugin, load: str = "") -> Iterator[None]:
    """Keep a journal of ``plugin`` running while the block runs.

    ``load`` is ``""`` while the block runs its import, hook and probe, else the backend whose
    ``load`` it calls, as selected (``"NAME"`` or ``"NAME:DEVICE"``). On
    exit, whatever the block raises, the journal is removed and the plugin's deaths in a row are
    forgotten (it ran to the end this time). Only installed plugins are guarded: for another,
    the guard does nothing.
    """
    opened = _open_directory(create=True) if plugin.installed else None
    if opened is None:
        yield
        return
    dir_fd, _ = opened
    journal = f"{os.getpid()}.{os.urandom(4).hex()}{_JOURNAL}"
    _running[journal] = dir_fd
    _put(dir_fd, journal, _MAGIC, *_me(), *plugin[:3], load)
    try:
        yield
    finally:
        if _running.pop(journal, None) is not None:  # else removed at exit, or forked inside
            _discard(dir_fd, journal)
            _discard(dir_fd, f"{plugin.name}{_ENDED}")
            os.close(dir_fd)


@atexit.register
def _remove_at_exit() -> None:
    # A plugin still running (timed out) when the process exits normally did not end it.
    for journal in list(_running):
        dir_fd = _running.pop(journal, None)
        if dir_fd is not None:
            _discard(dir_fd, journal)


def _after_fork_in_child() -> None:
    # The parent's plugins do not run here: its journals are the parent's to remove.
    for dir_fd in _running.values():
        os.close(dir_fd)
    _running.clear()
    _me.cache_clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
