"""Paths, and whole files that are either written completely or not at all.

A trace, a merge or a report is written to a temporary file beside its destination, flushed to
the disk (``fsync``) and renamed over the destination only then: a write that fails (disk full,
a file-size limit, an error while building the content) leaves whatever was at the destination
untouched, and no reader ever sees half a file. ``rename`` is atomic within one file system,
which a temporary file in the same directory guarantees. The streaming
:class:`~eventapi.trace.TraceWriter` writes in place instead: its file is meant to be read while
it grows, and one cut short is read back to its last span.

A destination that exists and is not a regular file (``/dev/stdout``, a named pipe) is written in
place: there is nothing to replace, and renaming over it would remove the device node.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Final, final

from .._arguments import bounded_repr

__all__ = [
    "Replacement",
    "Written",
    "check_path",
    "check_paths",
    "refuse_overlap",
    "replacing",
]

PathLike = str | os.PathLike[str]

_PATH_MAX: Final = 4096
"""Linux's limit on a path given to a system call, its terminating NUL included: a longer one
is refused by the kernel anyway, and would make the message that names it as long."""

_DEFAULT_MODE: Final = 0o666
"""What ``open()`` would create a new file with, before the umask: a temporary file starts at
0o600, which would leave a trace unreadable to the other users ``open()`` lets read it."""


@final
@dataclass(frozen=True, slots=True)
class Written:
    """What a command wrote: the file, and how many processes and slices it holds."""

    path: str
    processes: int
    slices: int
    tracks: int = 0


def check_path(value: object, what: str) -> str:
    """``value`` as a ``str`` path; :class:`TypeError` unless it is a ``str`` or ``os.PathLike``.

    An ``int`` is refused: ``open()`` would take it as a file descriptor, write to it and close
    it. ``bytes`` are refused too: a path here is text, as ``pathlib`` makes it. An empty path,
    one holding a NUL character or one longer than a system call takes raises
    :class:`ValueError`.
    """
    if isinstance(value, str):
        path = value
    elif isinstance(value, os.PathLike):
        path = os.fspath(value)
        if not isinstance(path, str):
            raise TypeError(
                f"{what} must be a str or a text os.PathLike; {type(value).__name__} gave "
                f"{type(path).__name__}: pass os.fsdecode(path)"
            )
    else:
        raise TypeError(
            f"{what} must be a str or os.PathLike (a pathlib.Path), not {type(value).__name__}"
        )
    if not path:
        raise ValueError(f"{what} is an empty string; pass a file name")
    if len(path) >= _PATH_MAX:
        raise ValueError(
            f"{what} is {len(path):,} characters long ({bounded_repr(path)}); a path holds at "
            f"most {_PATH_MAX - 1} bytes"
        )
    if "\0" in path:
        raise ValueError(
            f"{what} holds a NUL character ({bounded_repr(path)}), which no file name can hold"
        )
    return path


def check_paths(values: object, what: str) -> list[str]:
    """A list of paths; :class:`TypeError` for a single path given where a list belongs."""
    if isinstance(values, str | bytes | os.PathLike):
        raise TypeError(
            f"{what} must be a list of paths, not a single {type(values).__name__}: "
            f"pass [{bounded_repr(values)}]"
        )
    if not isinstance(values, Iterable):
        raise TypeError(f"{what} must be a list of paths, not {type(values).__name__}")
    return [check_path(value, f"each of {what}") for value in values]


def _identity(path: str) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:  # reading it will say what is wrong
        return None
    return info.st_dev, info.st_ino


def refuse_overlap(inputs: Sequence[str], out: str | None) -> None:
    """:class:`ValueError` when an input is given twice, or ``out`` is one of the inputs.

    Files are compared as ``os.path.samefile`` does (device and inode), so a second spelling, a
    symbolic link or a hard link of one file is caught too.
    """
    seen: dict[tuple[int, int], str] = {}
    for path in inputs:
        key = _identity(path)
        if key is None:
            continue
        if key in seen:
            same = "" if seen[key] == path else f" as {seen[key]}"
            raise ValueError(f"{path} is given twice{same}; pass each trace once")
        seen[key] = path
    if out is not None:
        key = _identity(out)
        if key is not None and key in seen:
            raise ValueError(
                f"the output {out} is the input {seen[key]}; write to another file "
                "(the input would be lost if the write failed)"
            )


def _umask() -> int:
    # Read without setting it: os.umask() can only be read by changing it, which races with
    # every other thread that creates a file meanwhile.
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


@final
class Replacement:
    """A text file that takes the place of ``path`` at :meth:`commit`, or never does.

    ::

        replacement = Replacement(path)
        try:
            replacement.file.write(...)
        except BaseException:
            replacement.discard()
            raise
        replacement.commit()

    Raises :class:`OSError` naming ``path`` when the directory cannot take the temporary file,
    or from :meth:`commit` when the content cannot be written (disk full, a file-size limit).
    """

    __slots__ = ("_done", "_final", "_mode", "_temporary", "file")

    def __init__(self, path: str) -> None:
        self._final = os.path.realpath(path)  # through a symbolic link, which stays
        self._done = False
        try:
            info: os.stat_result | None = os.stat(self._final)
        except FileNotFoundError:
            info = None
        except OSError as exc:
            raise OSError(exc.errno, f"cannot write {path}: {exc.strerror}") from None
        if info is not None and not stat.S_ISREG(info.st_mode):
            if stat.S_ISDIR(info.st_mode):
                raise IsADirectoryError(
                    21, f"cannot write {path}: it is a directory; name a file inside it"
                )
            self._temporary = None
            self._mode = 0
            try:
                self.file: IO[str] = open(  # noqa: SIM115 - closed by commit() or discard()
                    self._final, "w", encoding="utf-8"
                )
            except OSError as exc:
                raise OSError(exc.errno, f"cannot write {path}: {exc.strerror}") from None
            return
        self._mode = stat.S_IMODE(info.st_mode) if info else _DEFAULT_MODE & ~_umask()
        directory, name = os.path.split(self._final)
        try:
            fd, self._temporary = tempfile.mkstemp(
                prefix=f".{name[:100]}.", suffix=".tmp", dir=directory
            )
        except OSError as exc:
            raise OSError(exc.errno, f"cannot write {path}: {exc.strerror}") from None
        self.file = open(fd, "w", encoding="utf-8")  # noqa: SIM115

    def commit(self) -> None:
        """Flush, sync and rename the file into place. Idempotent; discards it on failure."""
        if self._done:
            return
        try:
            self.file.flush()
            if self._temporary is not None:
                os.fsync(self.file.fileno())
            self.file.close()
            if self._temporary is not None:
                os.chmod(self._temporary, self._mode)
                os.replace(self._temporary, self._final)
        except OSError as exc:
            self.discard()
            raise OSError(exc.errno, f"cannot write {self._final}: {exc.strerror}") from None
        self._done = True
        if self._temporary is not None:
            self._sync_directory()

    def discard(self) -> None:
        """Close and remove the temporary file; the destination stays as it was. Idempotent."""
        if self._done:
            return
        self._done = True
        with contextlib.suppress(OSError):
            self.file.close()
        if self._temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._temporary)

    def _sync_directory(self) -> None:
        # The rename itself survives a crash only once the directory is on the disk.
        with contextlib.suppress(OSError):
            fd = os.open(os.path.dirname(self._final) or ".", os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


@contextlib.contextmanager
def replacing(path: str) -> Iterator[IO[str]]:
    """A text file for the block; it takes the place of ``path`` only if the block succeeds.

    Raises :class:`OSError` naming ``path`` when it cannot be written (see the module doc).
    """
    replacement = Replacement(path)
    try:
        yield replacement.file
    except OSError as exc:
        replacement.discard()
        raise OSError(exc.errno, f"cannot write {path}: {exc.strerror}") from None
    except BaseException:
        replacement.discard()
        raise
    replacement.commit()
