"""Quarantine of plugins that crashed the process while discovery ran their code.

A crash in native code (a probe that loads a C library the wrong way and segfaults) cannot be
caught in the process it happens in; running every probe in a child process would contain it
but costs an interpreter start per plugin, several times what discovery itself costs (the
numbers are in ``docs/selecting-backends.md``). Instead, while plugins run, each process keeps
a *journal*: a file that says which plugin runs on which thread, at which stage, and is removed
when the last of them returns (or at exit, when one that timed out still runs). A journal left
behind says only that the process ended while a plugin ran; it does not say *how*. A process
also ends that way when something outside ends it: ``SIGTERM`` or ``SIGHUP`` (``timeout``,
``kill``, a batch system's time limit, a closed terminal), ``SIGKILL``, a reboot. Those are not
the plugin's fault, and must not cost it its row.

What tells them apart is :mod:`faulthandler`: while plugins run, and only when no one else in
the process has enabled it, discovery points it at the journal. On a fatal signal (``SIGSEGV``,
``SIGBUS``, ``SIGFPE``, ``SIGILL``, ``SIGABRT``) its C handler appends the stacks of every thread
to the journal, naming the thread that crashed, and then lets the signal end the process as it
would have. A plugin is quarantined only when the journal of a dead process holds such a dump
and the crashed thread is the one that ran that plugin. An outside signal leaves no dump: the
journal is removed and the plugin runs again, as if nothing happened. A library does not own
the process's signal handlers, and this installs none: faulthandler chains to whatever was
installed, is disabled when the plugins return, and is left alone when it was already enabled.

When it was (``PYTHONFAULTHANDLER``, ``python -X faulthandler``, pytest), a crash cannot be told
from a kill afterwards. Then the first death in a plugin is logged as a warning and the plugin
is retried; a second death in a row, in the same plugin version, quarantines it.

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
``<pid>.<random>.probing`` (a journal), ``<name>.quarantined`` (the record that keeps ``name``
from running; delete it, or run ``eventapi backends --retry NAME``, to try it again) and
``<name>.ended`` (the one unexplained death that the next run retries). A record of another
version of the plugin is removed: an upgrade may have fixed the crash.

Where the directory cannot be used (a read-only home, a directory someone else owns), plugins
run unguarded: quarantine is a convenience for the next run, never a reason for discovery to
fail.
"""

from __future__ import annotations

import atexit
import errno
import faulthandler
import os
import stat
import threading
import time
from typing import Final, NamedTuple, final

from .._logger import logger

__all__ = ["Guard", "Quarantine", "crashed_before", "lift"]


# Plain os calls, not pathlib: its glob and first uses cost milliseconds in a fresh process, as
# much as the plugins' own imports (measured), and this runs in every first listing.

_JOURNAL: Final = ".probing"
_QUARANTINED: Final = ".quarantined"
_ENDED: Final = ".ended"
_TEMP: Final = ".tmp-"  # a file being written, renamed into place when complete
_MAGIC: Final = "eventapi-probe 1"
_RECORD: Final = "eventapi-record 1"
_MAX_BYTES: Final = 1 << 20  # a journal with every thread's stack is a few KiB
_STALE_TEMP_S: Final = 60.0  # a temporary file lives microseconds; older ones were abandoned
_CRASH_SIGNALS: Final = "Fatal Python error: "
_CRASHED_THREAD: Final = "Current thread 0x"
_FLAGS_READ: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_FLAGS_CREATE: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class Quarantine(NamedTuple):
    """Why a plugin does not run: the row's reason, and the priority it had declared (or 0)."""

    reason: str
    priority: int


def _directory() -> str:
    """The markers' directory. Raises OSError when there is no home to put it in."""
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    if not (base and os.path.isabs(base)):
        home = os.path.expanduser("~")
        if home == "~":  # no HOME and no password entry
            raise OSError("no home directory for the probe markers")
        base = os.path.join(home, ".cache")
    return os.path.join(base, "eventapi", "probing")


def _open_directory(*, create: bool) -> tuple[int, str] | None:
    """A descriptor of the markers' directory and its path, when it is safely ours; else None.

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
        logger().debug("cannot remove probe marker %s", name, exc_info=True)


def _temp_name() -> str:
    return f"{_TEMP}{os.getpid()}-{os.urandom(4).hex()}"


def _write_new(dir_fd: int, text: str, *, keep_open: bool = False) -> tuple[str, int]:
    """Write ``text`` to a new private file and return its temporary name and descriptor.

    The descriptor is open for appending when ``keep_open``, else closed (and -1). Raises
    OSError.
    """
    name = _temp_name()
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


def _fields(text: str) -> list[list[str]]:
    return [line.split("\t") for line in text.split("\n") if line]


# -- records: one plugin's quarantine, or its one unexplained death ----------------------------


def _record(distribution: str, version: str, priority: int, detail: str) -> str:
    one_line = " ".join(detail.split())
    return f"{_RECORD}\n{distribution}\n{version}\n{priority}\n{one_line}\n"


def _parse_record(text: str) -> tuple[str, str, int, str] | None:
    lines = text.split("\n")
    if len(lines) < 5 or lines[0] != _RECORD:
        return None
    try:
        priority = int(lines[3])
    except ValueError:
        return None
    return lines[1], lines[2], priority, lines[4]


def _current_record(
    dir_fd: int, file: str, distribution: str, version: str
) -> tuple[int, str] | None:
    """(priority, detail) of record ``file`` for this plugin version; others are removed."""
    text = _read(dir_fd, file)
    if text is _GONE:
        return None
    parsed = _parse_record(text) if isinstance(text, str) else None
    if parsed is None or parsed[:2] != (distribution, version):
        _discard(dir_fd, file)  # unparsable, a link, or of another version (may be fixed)
        return None
    return parsed[2], parsed[3]


# -- judging the journals that dead processes left --------------------------------------------


class _Running(NamedTuple):
    """A plugin that a journal's process was running when it ended."""

    name: str
    distribution: str
    version: str
    thread: int
    deaths: int
    stage: str
    priority: int


def _parse_journal(text: str) -> tuple[dict[str, str], list[_Running], str] | None:
    """(header, the plugins still running, the crash dump or "") of a journal; None if bad."""
    head, crash_marker, dump = text.partition(_CRASH_SIGNALS)
    rows = _fields(head)
    if not rows or rows[0] != [_MAGIC]:
        return None
    header: dict[str, str] = {}
    begun: dict[str, list[str]] = {}
    stages: dict[str, str] = {}
    priorities: dict[str, int] = {}
    for row in rows[1:]:
        kind = row[0]
        if kind == "begin" and len(row) == 6:
            begun[row[1]] = row[2:]
        elif kind == "end" and len(row) == 2:
            begun.pop(row[1], None)
        elif kind == "stage" and len(row) == 3:
            stages[row[1]] = row[2]
        elif kind == "priority" and len(row) == 3 and row[2].lstrip("-").isdigit():
            priorities[row[1]] = int(row[2])
        elif len(row) == 2:
            header[kind] = row[1]
        else:
            return None
    if not {"host", "boot", "pidns", "pid", "start", "witness"} <= header.keys():
        return None
    if not header["pid"].isdigit():
        return None
    running = []
    for name, (distribution, version, thread, deaths) in begun.items():
        if not (thread.isdigit() and deaths.isdigit()):
            return None
        running.append(
            _Running(
                name,
                distribution,
                version,
                int(thread),
                int(deaths),
                stages.get(name, "in its import, hook or probe"),
                priorities.get(name, 0),
            )
        )
    return header, running, crash_marker + dump if crash_marker else ""


def _crashed_thread(dump: str) -> tuple[int | None, str]:
    """The thread faulthandler names as the one that crashed, and a line saying where."""
    what = dump.split("\n", 1)[0].removeprefix(_CRASH_SIGNALS).strip()
    _, found, rest = dump.partition(_CRASHED_THREAD)
    if not found:
        return None, what
    ident, _, frames = rest.partition(" ")
    try:
        thread = int(ident, 16)
    except ValueError:
        return None, what
    # The innermost frame outside the standard library: the plugin's own line, usually.
    stdlib = os.path.dirname(os.__file__)
    for line in frames.split("\n")[1:]:
        frame = line.strip()
        if not frame.startswith("File "):
            break  # the end of this thread's stack
        if not frame.startswith(f'File "{stdlib}{os.sep}') or "-packages" in frame:
            return thread, f"{what}, {frame}"
    return thread, what


def _judge(
    dir_fd: int, path: str, header: dict[str, str], running: list[_Running], dump: str
) -> None:
    """Turn a dead process's journal into records: a quarantine only for a plugin that crashed."""
    pid = header["pid"]
    when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime())
    crashed, where = _crashed_thread(dump) if dump else (None, "")
    for plugin in running:
        name = plugin.name
        if header["witness"] == "1":
            if crashed != plugin.thread:
                # Ended from outside (a signal, a kill), or another thread crashed it: not this
                # plugin's doing, so it runs again as if nothing happened.
                logger().debug("process %s ended while %s ran: not a crash of it", pid, name)
                continue
            detail = (
                f"the process running its import, hook or probe ended there (pid {pid}, "
                f"found {when}): a crash in native code ({where}) {plugin.stage}, so it is not "
                "run again"
            )
        elif plugin.deaths >= 1:
            detail = (
                f"the process running its import, hook or probe ended there twice in a row "
                f"(the last: pid {pid}, found {when}) {plugin.stage}; that process could not "
                "tell a crash from a kill (faulthandler was enabled by someone else), so it is "
                "not run again"
            )
        else:
            _put(
                dir_fd,
                f"{name}{_ENDED}",
                _record(plugin.distribution, plugin.version, plugin.priority, pid),
            )
            continue
        _put(
            dir_fd,
            f"{name}{_QUARANTINED}",
            _record(plugin.distribution, plugin.version, plugin.priority, detail),
        )
        _discard(dir_fd, f"{name}{_ENDED}")
    _discard(dir_fd, path)


def _sweep(dir_fd: int, files: list[str]) -> None:
    """Judge every journal a dead process of this host, boot and namespace left behind."""
    me = _me()
    mine = _journal.name if _journal is not None and _journal.pid == me.pid else None
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
        header, running, dump = parsed
        if header["host"] != me.host or (header["boot"] and header["boot"] != me.boot):
            if header["host"] == me.host:
                _discard(dir_fd, file)  # from before a reboot, which is no crash
            continue  # another host's: its own readers judge it
        if header["pidns"] != me.pidns:
            continue  # another pid namespace's: its pid means nothing here
        if _alive(int(header["pid"]), header["start"]):
            continue  # running plugins right now
        _judge(dir_fd, file, header, running, dump)


def _drop_if_abandoned(dir_fd: int, file: str) -> None:
    try:
        info = os.stat(file, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return
    if time.time() - info.st_mtime > _STALE_TEMP_S:
        _discard(dir_fd, file)


def crashed_before(name: str, distribution: str, version: str) -> Quarantine | None:
    """Why ``name``'s plugin is not to run, or None when it may.

    First judges the journals dead processes left (a crash quarantines the plugin that
    crashed; an outside kill, nothing), then reads ``name``'s record; a record of another
    distribution or version is removed. Never raises.
    """
    opened = _open_directory(create=False)
    if opened is None:
        return None  # no directory: nothing ever ran guarded here
    dir_fd, path = opened
    try:
        files = os.listdir(dir_fd)
        if not files:
            return None
        _sweep(dir_fd, files)
        file = f"{name}{_QUARANTINED}"
        found = _current_record(dir_fd, file, distribution, version)
        if found is not None:
            priority, detail = found
            return Quarantine(
                f"{detail}; run 'eventapi backends --retry {name}' or delete "
                f"{os.path.join(path, file)} to try it again",
                priority,
            )
        ended = _current_record(dir_fd, f"{name}{_ENDED}", distribution, version)
        if ended is not None:
            logger().warning(
                "backend %r: process %s ended while running its import, hook or probe, and "
                "could not tell a crash from a kill; running it again (a second such end "
                "quarantines it)",
                name,
                ended[1],
            )
        return None
    except OSError:
        logger().debug("cannot read the probe markers", exc_info=True)
        return None
    finally:
        os.close(dir_fd)


def lift(name: str) -> list[str]:
    """Remove ``name``'s quarantine (and its unexplained death); return the paths removed."""
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
    """This process's journal while plugins run, and whether faulthandler writes to it."""

    __slots__ = ("active", "dir_fd", "fd", "name", "pid", "witness")

    def __init__(self, dir_fd: int, name: str, fd: int, *, witness: bool) -> None:
        self.dir_fd = dir_fd
        self.name = name
        self.fd = fd
        self.witness = witness
        self.pid = os.getpid()
        self.active = 0

    def append(self, *fields: object) -> None:
        # One write() of a line to a file opened O_APPEND: lines of threads never interleave.
        line = "\t".join(" ".join(str(f).split()) for f in fields) + "\n"
        try:
            os.write(self.fd, line.encode("utf-8"))
        except OSError:
            logger().debug("cannot write to the probe journal", exc_info=True)

    def close(self) -> None:
        # faulthandler first: it must not write to a descriptor that is closed, or reused.
        if self.witness and faulthandler.is_enabled():
            faulthandler.disable()
        _discard(self.dir_fd, self.name)
        os.close(self.fd)
        os.close(self.dir_fd)


_lock = threading.Lock()
_journal: _Journal | None = None
_registered = False


def _open_journal() -> _Journal | None:
    """A new journal for this process, faulthandler pointed at it if no one else uses it."""
    opened = _open_directory(create=True)
    if opened is None:
        return None
    dir_fd, _ = opened
    me = _me()
    witness = not faulthandler.is_enabled()
    header = (
        f"{_MAGIC}\nhost\t{me.host}\nboot\t{me.boot}\npidns\t{me.pidns}\npid\t{me.pid}\n"
        f"start\t{me.start}\nwitness\t{int(witness)}\n"
    )
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
    if witness:
        faulthandler.enable(file=fd, all_threads=True)
    return _Journal(dir_fd, name, fd, witness=witness)


def _close_at_exit() -> None:
    # A plugin still running (timed out) when the process exits normally did not crash it.
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
        # The parent's plugins do not run here; its journal and faulthandler are the parent's.
        if journal.witness and faulthandler.is_enabled():
            faulthandler.disable()
        os.close(journal.fd)
        os.close(journal.dir_fd)


os.register_at_fork(after_in_child=_after_fork_in_child)


@final
class Guard:
    """One plugin's import, hook and probe in the journal: ``with Guard(...) as guard:``.

    Entered and exited on the thread that runs the plugin; :meth:`stage` says what it runs
    now. On exit (whatever the body raises) the plugin is marked done, its unexplained death,
    if one was recorded, is forgotten, and the journal is removed when no other plugin runs.
    Not reentrant; one per plugin run.
    """

    __slots__ = ("_deaths", "_distribution", "_journal", "_name", "_version")

    def __init__(self, name: str, distribution: str, version: str) -> None:
        self._name = name
        self._distribution = distribution
        self._version = version
        self._journal: _Journal | None = None
        self._deaths = 0

    def __enter__(self) -> Guard:
        global _journal, _registered
        deaths = self._deaths = 1 if self._ended_before() else 0
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
        ident = threading.get_ident()
        journal.append("begin", self._name, self._distribution, self._version, ident, deaths)
        return self

    def _ended_before(self) -> bool:
        opened = _open_directory(create=False)
        if opened is None:
            return False
        dir_fd, _ = opened
        try:
            file = f"{self._name}{_ENDED}"
            return _current_record(dir_fd, file, self._distribution, self._version) is not None
        finally:
            os.close(dir_fd)

    def stage(self, text: str, priority: int | None = None) -> None:
        """Record that the plugin now runs ``text`` (and its priority, once known)."""
        journal = self._journal
        if journal is None:
            return
        journal.append("stage", self._name, text)
        if priority is not None:
            journal.append("priority", self._name, priority)

    def __exit__(self, *exc_info: object) -> None:
        global _journal
        journal = self._journal
        if journal is None:
            return
        self._journal = None
        journal.append("end", self._name)
        if self._deaths:
            _discard(journal.dir_fd, f"{self._name}{_ENDED}")  # it ran to the end this time
        with _lock:
            journal.active -= 1
            last = journal.active == 0 and _journal is journal
            if last:
                _journal = None
        if last:
            journal.close()
