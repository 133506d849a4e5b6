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
import secrets
import stat
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, Final, NamedTuple, final

from .._arguments import bounded_repr, check_path_text

__all__ = ["Written", "check_path", "check_paths", "naming", "refuse_overlap", "replacing"]

_NEW_FILE_MODE: Final = 0o666
"""What ``open()`` creates a file with, less the umask (and a directory's default ACL), which the
kernel applies as it creates the temporary file; ``tempfile`` would give 0o600 and leave a trace
unreadable to the users ``open()`` lets read it."""


@final
class Written(NamedTuple):
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
    if not isinstance(value, str | os.PathLike):
        raise TypeError(
            f"{what} must be a str or os.PathLike (a pathlib.Path), not {type(value).__name__}"
        )
    path = os.fspath(value)
    if not isinstance(path, str):
        raise TypeError(
            f"{what} must be a str or a text os.PathLike; {type(value).__name__} gave "
            f"{type(path).__name__}: pass os.fsdecode(path)"
        )
    return check_path_text(path, what, "a file name")


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
    except OSError:
        return None
    return info.st_dev, info.st_ino


def refuse_overlap(inputs: Sequence[str], out: str) -> None:
    """:class:`ValueError` when an input is given twice, or ``out`` is one of the inputs.

    Files are compared as ``os.path.samefile`` does (device and inode), so a second spelling, a
    symbolic link or a hard link of one file is caught too.
    """
    seen: dict[tuple[int, int], str] = {}
    for path in inputs:
        key = _identity(path)  # None for a file that cannot be read: reading it will say why
        if key in seen:
            same = "" if seen[key] == path else f" as {seen[key]}"
            raise ValueError(f"{path} is given twice{same}; pass each trace once")
        if key is not None:
            seen[key] = path
    key = _identity(out)
    if key in seen:
        raise ValueError(
            f"the output {out} is the input {seen[key]}; write to another file "
            "(the input would be lost if the write failed)"
        )


@contextlib.contextmanager
def naming(path: str, verb: str = "write") -> Iterator[None]:
    """Re-raise an :class:`OSError` of the block as ``cannot <verb> <path>: <strerror>``."""
    try:
        yield
    except OSError as exc:
        raise OSError(exc.errno, f"cannot {verb} {path}: {exc.strerror}") from None


@contextlib.contextmanager
def replacing(path: str) -> Iterator[IO[str]]:
    """A text file for the block; it takes the place of ``path`` only if the block succeeds.

    The file is flushed to the disk and renamed over ``path`` (through a symbolic link, which
    stays) once the block is done; a destination that is not a regular file is written in place
    (see the module doc). Raises :class:`OSError` naming ``path`` when it cannot be written.
    """
    final = os.path.realpath(path)
    temporary: str | None = None
    with naming(path):
        try:
            info: os.stat_result | None = os.stat(final)
        except FileNotFoundError:
            info = None
        if info is not None and stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(21, "it is a directory; name a file inside it")
        if info is not None and not stat.S_ISREG(info.st_mode):
            file = open(final, "w", encoding="utf-8")  # noqa: SIM115 - closed below
        else:
            directory, name = os.path.split(final)
            temporary = os.path.join(directory, f".{name[:100]}.{secrets.token_hex(6)}.tmp")
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _NEW_FILE_MODE)
            file = open(fd, "w", encoding="utf-8")  # noqa: SIM115
    try:
        with naming(path):
            yield file
            file.flush()
            if temporary is not None:
                os.fsync(file.fileno())
            file.close()
            if temporary is not None:
                if info is not None:  # a replaced file keeps its mode
                    os.chmod(temporary, stat.S_IMODE(info.st_mode))
                os.replace(temporary, final)
    except BaseException:
        with contextlib.suppress(OSError):
            file.close()
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        raise
    if temporary is not None:
        # The rename itself survives a crash only once the directory is on the disk.
        with contextlib.suppress(OSError):
            fd = os.open(os.path.dirname(final), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
