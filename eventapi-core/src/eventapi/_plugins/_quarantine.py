"""Quarantine of plugins that end the process their code runs in.

A crash in native code (a probe that loads a C library the wrong way, a driver's worker thread
that segfaults) cannot be caught in the process it happens in, and neither can a plugin that
calls ``os._exit``. What can be done is not to let it happen again. So while an installed
plugin's code runs in the process (its import, hook and probe in discovery, its ``load`` in
selection), the process keeps a *journal*: a file that says which plugin runs, doing what. It is
removed when the last of them returns, and at exit, so a journal of a dead process says that
the process ended while that plugin ran.

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
import errno
import itertools
import os
import stat
import threading
import time
from typing import TYPE_CHECKING, Final, NamedTuple, final

from .._logger import logger

if TYPE_CHECKING:
    from ._plugin import Plugin

__all__ = ["Guard", "Quarantine", "crashed_before", "lift"]


# Plain os calls, not pathlib: its glob and first uses cost milliseconds in a fresh process, as
# much as the plugins' own imports (measured), and this runs in every first listing.

_JOURNAL: Final = ".probing"
_QUARANTINED: Final = ".quarantined"
_ENDED: Final = ".ended"
_TEMP: Final = ".tmp-"  # a file being written, renamed into place when complete
_MAGIC: Final = "eventapi-probe 2"
_RECORD: Final = "eventapi-record 2"
_MAX_BYTES: Final = 1 << 20  # a journal is a few hundred bytes
_STALE_TEMP_S: Final = 60.0  # a temporary file lives microseconds; older ones were abandoned
_FLAGS_READ: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_FLAGS_CREATE: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_PROBE: Final = "probe"  # what a plugin runs: its import, hook and probe; else "load[:DEVICE]"
_VARIABLE: Final = "EVENTAPI_DISABLE_PLUGINS"


class Quarantine(NamedTuple):
    """Why a plugin does not run: the row's reason, and the priority it had declared (or 0)."""

    reason: str
    priority: int


def _directory() -> str:
    """The records' directory. Raises OSError when there is no home to put it in."""
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    if not (base and os.path.isabs(base)):
        home = os.path.expanduser("~")
        if home == "~":  # no HOME and no password entry
            raise OSError("no home directory for the probe records")
        base = os.path.join(home, ".cache")
    return os.path.join(base, "eventapi", "probing")


def _open_directory(*, create: bool) -> tuple[int, str] | None:
    """A descriptor of the records' directory and its path, when it is safely ours; else None.

    Ours: a real directory (not a link), owned by this user; a mode wider than 0700 (an older
    eventapi created it with the umask's) is narrowed. Never raises.
    """
    try:
        path = _directory()
        if create:
            os.makedirs(path, mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            _not_ours(path)
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            _not_ours(path)
            os.close(fd)
            return None
        if info.st_mode & 0o077:
            os.fchmod(fd, 0o700)
    except OSError:
        os.close(fd)
        return None
    return fd, path


_warned = False


def _not_ours(path: str) -> None:
    global _warned
    if not _warned:
        _warned = True  # once per process: every plugin would say it again
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


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), or ""."""
    text = _read_small(f"/proc/{pid}/stat")
    # The command name (field 2) is in parentheses and may hold spaces and parentheses itself.
    fields = text.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else ""


def _namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return ""


class _Identity(NamedTuple):
    host: str
    boot: str
    pidns: str
    pid: int
    start: str


_identity: _Identity | None = None


def _me() -> _Identity:
    """This process's identity, read once per process (a forked child reads its own)."""
    global _identity
    found = _identity
    pid = os.getpid()
    if found is None or found.pid != pid:
        boot = _read_small("/proc/sys/kernel/random/boot_id")
        found = _identity = _Identity(
            os.uname().nodename, boot, _namespace(), pid, _start_time(pid)
        )
    return found


def _alive(pid: int, start: str) -> bool:
    """Whether process ``pid`` (of this namespace) still runs and is the one that started then."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's live process
    now = _start_time(pid)
    return not (start and now and now != start)  # a new process under a reused pid is not it


# -- safe files -------------------------------------------------------------------------------

_GONE: Final = object()  # the file vanished: another reader dealt with it


def _read(dir_fd: int, name: str) -> str | object | None:
    """The text of regular file ``name``; None when it is not one (a link, too big); _GONE."""
    try:
        fd = os.open(name, _FLAGS_READ, dir_fd=dir_fd)
    except FileNotFoundError:
        return _GONE
    except OSError:
        return None  # ELOOP: a symbolic link, never followed
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_BYTES:
            return None
        return os.read(fd, _MAX_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def _discard(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except OSError:
        logger().debug("cannot remove probe record %s", name, exc_info=True)


def _write_new(dir_fd: int, text: str, *, keep_open: bool = False) -> tuple[str, int]:
    """Write ``text`` to a new private file and return its temporary name and descriptor.

    The descriptor is open for appending when ``keep_open``, else closed (and -1). Raises
    OSError.
    """
    name = f"{_TEMP}{os.getpid()}-{os.urandom(4).hex()}"
    flags = _FLAGS_CREATE | (os.O_APPEND if keep_open else 0)
    fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
    try:
        os.write(fd, text.encode("utf-8"))
    except OSError:
        os.close(fd)
        _discard(dir_fd, name)
        raise
    if not keep_open:
        os.close(fd)
        fd = -1
    return name, fd


def _put(dir_fd: int, name: str, text: str) -> None:
    """Replace file ``name`` with ``text`` atomically (a link there is replaced, not followed)."""
    try:
        temp, _ = _write_new(dir_fd, text)
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError:
        logger().debug("cannot write probe record %s", name, exc_info=True)


def _line(*fields: object) -> str:
    # Fields never hold a tab or a line break, so a line always parses back.
    return "\t".join(" ".join(str(f).split()) for f in fields) + "\n"


# -- records: one plugin's quarantine, or its deaths in a row ---------------------------------


class _Record(NamedTuple):
    distribution: str
    version: str
    priority: int
    detail: str  # a quarantine: its reason; deaths: the pid of the last process that died
    deaths: int
    checked: bool  # the last death was checked in a separate process
    what: str  # what the plugin ran when it died: _PROBE, or "load[:DEVICE]"

    def text(self) -> str:
        lines = (_RECORD, *self[:4], self.deaths, int(self.checked), self.what)
        return "".join(_line(part) for part in lines)


def _parse_record(text: str) -> _Record | None:
    lines = text.split("\n")
    if len(lines) < 8 or lines[0] != _RECORD:
        return None
    try:
        priority, deaths, checked = int(lines[3]), int(lines[5]), lines[6] == "1"
    except ValueError:
        return None
    return _Record(lines[1], lines[2], priority, lines[4], deaths, checked, lines[7])


def _current(dir_fd: int, file: str, distribution: str, version: str) -> _Record | None:
    """Record ``file``, if of this plugin version; one of another (or unparsable) is removed."""
    text = _read(dir_fd, file)
    if text is _GONE:
        return None
    record = _parse_record(text) if isinstance(text, str) else None
    if record is None or record[:2] != (distribution, version):
        _discard(dir_fd, file)  # unparsable, a link, or of another version (may be fixed)
        return None
    return record


# -- the journals that dead processes left ----------------------------------------------------


class _Running(NamedTuple):
    """A plugin that a journal's process was running when it ended."""

    name: str
    distribution: str
    version: str
    deaths: int
    what: str
    priority: int


def _parse_journal(text: str) -> tuple[dict[str, str], list[_Running]] | None:
    """(header, the plugins still running) of a journal; None if it is not one."""
    rows = [line.split("\t") for line in text.split("\n") if line]
    if not rows or rows[0] != [_MAGIC]:
        return None
    header: dict[str, str] = {}
    begun: dict[str, list[str]] = {}
    priorities: dict[str, int] = {}
    for row in rows[1:]:
        kind = row[0]
        if kind == "begin" and len(row) == 7 and row[5].isdigit():
            begun[row[1]] = row[2:]
        elif kind == "end" and len(row) == 2:
            begun.pop(row[1], None)
        elif kind == "priority" and len(row) == 3 and row[2].lstrip("-").isdigit():
            priorities[row[1]] = int(row[2])
        elif len(row) == 2:
            header[kind] = row[1]
        else:
            return None
    if (
        not {"host", "boot", "pidns", "pid", "start"} <= header.keys()
        or not header["pid"].isdigit()
    ):
        return None
    running = [
        _Running(name, distribution, version, int(deaths), what, priorities.get(run, 0))
        for run, (name, distribution, version, deaths, what) in begun.items()
    ]
    return header, running


def _sweep(dir_fd: int, files: list[str]) -> None:
    """Turn each journal a dead process of this host, boot and namespace left into records."""
    me = _me()
    journal = _journal
    mine = journal.name if journal is not None and journal.pid == me.pid else None
    for file in files:
        if file.startswith(_TEMP):
            _drop_if_abandoned(dir_fd, file)
            continue
        if not file.endswith(_JOURNAL) or file == mine:
            if file.rpartition(".")[2].isdigit():
                _discard(dir_fd, file)  # an older eventapi's NAME.PID marker
            continue
        text = _read(dir_fd, file)
        if text is _GONE:
            continue
        parsed = _parse_journal(text) if isinstance(text, str) else None
        if parsed is None:
            _discard(dir_fd, file)  # unparsable, or a link: nothing to learn, never followed
            continue
        header, running = parsed
        if header["host"] != me.host or (header["boot"] and header["boot"] != me.boot):
            if header["host"] == me.host:
                _discard(dir_fd, file)  # from before a reboot, which is no crash
            continue  # another host's: its own readers judge it
        if header["pidns"] != me.pidns:
            continue  # another pid namespace's: its pid means nothing here
        if _alive(int(header["pid"]), header["start"]):
            continue  # running plugins right now
        for plugin in running:
            ended = f"{plugin.name}{_ENDED}"
            before = _current(dir_fd, ended, plugin.distribution, plugin.version)
            deaths = max(plugin.deaths, before.deaths if before is not None else 0) + 1
            record = _Record(
                *plugin[1:3], plugin.priority, header["pid"], deaths, False, plugin.what
            )
            _put(dir_fd, ended, record.text())
        _discard(dir_fd, file)


def _drop_if_abandoned(dir_fd: int, file: str) -> None:
    try:
        info = os.stat(file, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return
    if time.time() - info.st_mtime > _STALE_TEMP_S:
        _discard(dir_fd, file)


_sweeping = threading.Lock()  # one sweep at a time in a process: each plugin's thread asks


def crashed_before(plugin: Plugin, timeout: float) -> Quarantine | None:
    """Why ``plugin`` is not to run, or None when it may.

    First turns the journals dead processes left into records. Then, if ``plugin`` is
    quarantined, says why; if a process died while it ran and that was not checked yet, runs it
    alone in a separate process for at most ``timeout`` seconds to see whether it crashes
    (the module docstring says what follows). Never raises.
    """
    opened = _open_directory(create=False)
    if opened is None:
        return None  # no directory: nothing ever ran guarded here
    dir_fd, path = opened
    try:
        files = os.listdir(dir_fd)
        if not files:
            return None
        with _sweeping:
            _sweep(dir_fd, files)
        name, distribution, version = plugin[:3]
        file = f"{name}{_QUARANTINED}"
        quarantined = _current(dir_fd, file, distribution, version)
        if quarantined is None:
            ended = _current(dir_fd, f"{name}{_ENDED}", distribution, version)
            if ended is None or ended.checked:
                return None
            quarantined = _check(dir_fd, plugin, ended, timeout)
            if quarantined is None:
                return None
        return Quarantine(
            f"{quarantined.detail}; run 'eventapi backends --retry {name}' or delete "
            f"{os.path.join(path, file)} to try it again",
            quarantined.priority,
        )
    except OSError:
        logger().debug("cannot read the probe records", exc_info=True)
        return None
    finally:
        os.close(dir_fd)


def _check(dir_fd: int, plugin: Plugin, ended: _Record, timeout: float) -> _Record | None:
    """Run ``plugin`` alone as far as the dead process did: its quarantine record, or None."""
    from . import _alone

    name = plugin.name
    load = ended.what != _PROBE
    running = "its load" if load else "its import, hook or probe"
    outcome = _alone.run(plugin, ended.what.partition(":")[2] if load else None, timeout)
    if outcome.verdict == "crashed":
        when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime())
        detail = (
            f"the process running {running} ended there (pid {ended.detail}, found {when}); "
            f"run alone in a separate process it ended that one too, by {outcome.how} "
            f"{outcome.stage}, so it is not run again"
        )
        priority = ended.priority if outcome.priority is None else outcome.priority
        record = ended._replace(priority=priority, detail=detail, deaths=0, checked=True)
        _put(dir_fd, f"{name}{_QUARANTINED}", record.text())
        _discard(dir_fd, f"{name}{_ENDED}")
        return record
    _put(dir_fd, f"{name}{_ENDED}", ended._replace(checked=True).text())
    if outcome.verdict == "unknown":
        logger().warning(
            "backend %r: process %s ended while running %s, and eventapi could not tell a "
            "crash of it from a kill by running it alone in a separate process (%s); running "
            "it again. If it is what ends this program, block it with %s=%s",
            name,
            ended.detail,
            running,
            outcome.how,
            _VARIABLE,
            name,
        )
    elif ended.deaths > 1:
        logger().warning(
            "backend %r: %d processes in a row ended while running %s (the last: pid %s), "
            "and run alone in a separate process it returned, so eventapi cannot tell a crash "
            "of it from a kill from outside; running it again. If it is what ends this "
            "program, block it with %s=%s",
            name,
            ended.deaths,
            running,
            ended.detail,
            _VARIABLE,
            name,
        )
    else:
        logger().debug("process %s ended while %s ran: not a crash of it", ended.detail, name)
    return None


def lift(name: str) -> list[str]:
    """Remove ``name``'s quarantine (and its deaths); return the paths removed."""
    opened = _open_directory(create=False)
    if opened is None:
        return []
    dir_fd, path = opened
    removed = []
    try:
        for file in (f"{name}{_QUARANTINED}", f"{name}{_ENDED}"):
            try:
                os.unlink(file, dir_fd=dir_fd)
            except OSError:
                continue
            removed.append(os.path.join(path, file))
    finally:
        os.close(dir_fd)
    return removed


# -- this process's journal -------------------------------------------------------------------


@final
class _Journal:
    """This process's journal while plugins run."""

    __slots__ = ("active", "dir_fd", "fd", "name", "pid")

    def __init__(self, dir_fd: int, name: str, fd: int) -> None:
        self.dir_fd = dir_fd
        self.name = name
        self.fd = fd
        self.pid = os.getpid()
        self.active = 0

    def append(self, *fields: object) -> None:
        # One write() of a line to a file opened O_APPEND: lines of threads never interleave.
        try:
            os.write(self.fd, _line(*fields).encode("utf-8"))
        except OSError:
            logger().debug("cannot write to the probe journal", exc_info=True)

    def close(self) -> None:
        _discard(self.dir_fd, self.name)
        os.close(self.fd)
        os.close(self.dir_fd)


_lock = threading.Lock()  # guards _journal and its count of active runs
_journal: _Journal | None = None
_registered = False
_runs = itertools.count()  # a journal's name for each run: a plugin may run twice at once


def _open_journal() -> _Journal | None:
    """A new journal for this process; None where there is no directory to put it in."""
    opened = _open_directory(create=True)
    if opened is None:
        return None
    dir_fd, _ = opened
    me = _me()
    fields = zip(me._fields, me, strict=True)
    header = _line(_MAGIC) + "".join(_line(key, value) for key, value in fields)
    name = f"{me.pid}.{os.urandom(4).hex()}{_JOURNAL}"
    try:
        temp, fd = _write_new(dir_fd, header, keep_open=True)
        try:
            os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except OSError:
            os.close(fd)
            _discard(dir_fd, temp)
            raise
    except OSError:
        logger().debug("cannot write a probe journal; running unguarded", exc_info=True)
        os.close(dir_fd)
        return None
    return _Journal(dir_fd, name, fd)


def _close_at_exit() -> None:
    # A plugin still running (timed out) when the process exits normally did not end it.
    global _journal
    with _lock:
        journal, _journal = _journal, None
    if journal is not None and journal.pid == os.getpid():
        journal.close()


def _after_fork_in_child() -> None:
    global _lock, _journal
    _lock = threading.Lock()  # another thread may have held it at the fork
    journal, _journal = _journal, None
    if journal is not None:
        # The parent's plugins do not run here; its journal is the parent's to remove.
        os.close(journal.fd)
        os.close(journal.dir_fd)


os.register_at_fork(after_in_child=_after_fork_in_child)


@final
class Guard:
    """One run of a plugin's code in the journal: ``with Guard(plugin) as guard:``.

    ``what`` is what runs: ``"probe"`` (the import, hook and probe) or ``"load"`` /
    ``"load:DEVICE"``. Entered and exited on the thread that runs the plugin. On exit
    (whatever the body raises) the run is marked done, the plugin's deaths in a row are
    forgotten (it ran to the end this time), and the journal is removed when no other run is
    under way. Only installed plugins are guarded: for another, the guard does nothing. One
    per run.
    """

    __slots__ = ("_deaths", "_journal", "_plugin", "_run", "_what")

    def __init__(self, plugin: Plugin, what: str = _PROBE) -> None:
        self._plugin = plugin
        self._what = what
        self._journal: _Journal | None = None
        self._run = next(_runs)
        self._deaths = 0

    def __enter__(self) -> Guard:
        global _journal, _registered
        plugin = self._plugin
        if not plugin.installed:
            return self
        with _lock:
            journal = _journal
            if journal is None or journal.pid != os.getpid():
                journal = _journal = _open_journal()
                if journal is None:
                    return self
                if not _registered:
                    atexit.register(_close_at_exit)
                    _registered = True
            journal.active += 1
        self._journal = journal
        name, distribution, version = plugin[:3]
        ended = _current(journal.dir_fd, f"{name}{_ENDED}", distribution, version)
        self._deaths = ended.deaths if ended is not None else 0
        journal.append("begin", self._run, name, distribution, version, self._deaths, self._what)
        return self

    def declared(self, priority: int) -> None:
        """Record the priority the plugin declared: its row's, should it be quarantined."""
        journal = self._journal
        if journal is not None:
            journal.append("priority", self._run, priority)

    def __exit__(self, *exc_info: object) -> None:
        global _journal
        journal = self._journal
        self._journal = None
        if journal is None or journal.pid != os.getpid():
            return  # unguarded, or a child forked inside: the journal is its parent's
        journal.append("end", self._run)
        if self._deaths:
            _discard(journal.dir_fd, f"{self._plugin.name}{_ENDED}")
        with _lock:
            journal.active -= 1
            last = journal.active == 0 and _journal is journal
            if last:
                _journal = None
        if last:
            journal.close()
