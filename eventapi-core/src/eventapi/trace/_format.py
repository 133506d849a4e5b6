"""Chrome Trace Event JSON for eventapi spans: the document's shape, written in one pass.

A trace is the JSON object format of the Trace Event format (what Perfetto and
``chrome://tracing`` open)::

    {"otherData": {"eventapi": {...the clock and the process...}},
     "displayTimeUnit": "ns",
     "traceEvents": [ metadata events, then one complete ("X") event per span ]}

``otherData`` comes first so that a trace written as spans arrive (:class:`TraceFile`) needs
nothing rewritten at the end. Times: ``ts`` and ``dur`` are microseconds (the format's unit),
written with three decimals so nothing below the nanosecond is lost. In the trace of one
process ``ts`` is :func:`time.perf_counter_ns` / 1000 (Linux's ``CLOCK_MONOTONIC``, shared by
every process of one boot); the ``clock`` object in ``otherData`` says so, and carries what a
merge needs to put the trace on another host's axis (:mod:`eventapi.trace._merge`).

One process track (``pid``) per process, named ``"<host> pid <pid>"`` or, in a distributed
job, ``"rank <rank> (<host> pid <pid>)"`` (:mod:`eventapi.trace._rank`); one thread track
(``tid``) per stream, named ``"<backend>:<device> <label>"``. Windows nest on their track as
their ``depth`` says: a child placed a nanosecond past its parent's end by rounding is clamped
into the parent, because viewers draw a slice that overlaps its parent's end as a separate,
broken stack.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import sys
import threading
import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Final, NoReturn, final

from .._arguments import bounded_repr
from .._errors import EventStateError
from ._files import Replacement, check_path
from ._rank import process_title, rank_info

if TYPE_CHECKING:
    from .._profiling._span import Span  # an annotation: merge and report never load the profiler

__all__ = [
    "FORMAT",
    "Clock",
    "TraceFile",
    "Track",
    "check_span",
    "host_clock",
    "json_type",
    "process_info",
    "read_trace",
    "span_event",
]

FORMAT: Final = 1
"""Version of the ``otherData.eventapi`` object; a reader refuses a newer major."""

_OFFSET_SAMPLES: Final = 7
"""Bracketed reads of the wall clock. Each costs well under a microsecond; the tightest wins."""


@final
@dataclass(frozen=True, slots=True)
class Clock:
    """What a trace's times are, and where they lie on the wall clock.

    ``kind`` is ``"monotonic"`` (``ts`` is :func:`time.perf_counter_ns` / 1000 on the host
    whose boot is ``boot_id``) or ``"wall"`` (``ts`` is :func:`time.time_ns` / 1000 minus
    ``base_ns`` / 1000: a merge of several hosts). ``wall_offset_ns`` is
    ``time.time_ns() - time.perf_counter_ns()`` on that host, measured within
    ``wall_offset_uncertainty_ns``; for a ``"wall"`` trace it is ``base_ns``, exactly.
    """

    kind: str
    boot_id: str
    wall_offset_ns: int
    wall_offset_uncertainty_ns: int

    def as_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "boot_id": self.boot_id,
            "wall_offset_ns": self.wall_offset_ns,
            "wall_offset_uncertainty_ns": self.wall_offset_uncertainty_ns,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Clock:
        return cls(
            kind=str(data["kind"]),
            boot_id=str(data.get("boot_id", "")),
            wall_offset_ns=int(data["wall_offset_ns"]),
            wall_offset_uncertainty_ns=int(data.get("wall_offset_uncertainty_ns", 0)),
        )


def _boot_id() -> str:
    # Processes of one boot share CLOCK_MONOTONIC (perf_counter), so their traces merge exactly.
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as file:
            return file.read().strip()
    except OSError:
        return f"{socket.gethostname()}:unknown-boot"


def host_clock() -> Clock:
    """This host's monotonic clock and its wall-clock offset, measured now.

    The offset is read between two reads of :func:`time.perf_counter_ns`, several times; the
    tightest bracket wins (as the anchor's samples do) and half of it is the uncertainty.
    Linux slews ``CLOCK_MONOTONIC`` and ``CLOCK_REALTIME`` alike, so the offset changes only
    when the wall clock is stepped (by an administrator, or NTP correcting a large error).
    """
    best: tuple[int, int] | None = None
    for _ in range(_OFFSET_SAMPLES):
        before = time.perf_counter_ns()
        wall = time.time_ns()
        after = time.perf_counter_ns()
        width = after - before
        if best is None or width < best[1]:
            best = (wall - (before + after) // 2, width)
    assert best is not None
    offset, width = best
    return Clock("monotonic", _boot_id(), offset, (width + 1) // 2 + 1)


def process_info() -> dict[str, object]:
    """The ``otherData.eventapi`` object of a trace written by this process, clock measured now.

    In a distributed job it also carries ``rank``, ``rank_from`` (what said so), and where known
    ``world_size`` and ``local_rank``.
    """
    from .. import __version__

    return {
        "format": FORMAT,
        "eventapi": __version__,
        "python": sys.version.split()[0],
        "host": socket.gethostname(),
        "pid": os.getpid(),
        **rank_info(),
        "clock": host_clock().as_json(),
    }


@final
@dataclass(frozen=True, slots=True)
class Track:
    """One stream's track: the backend and device it is on, and the profiler's label."""

    backend: str
    device: int | None
    label: str

    @property
    def title(self) -> str:
        where = self.backend if self.device is None else f"{self.backend}:{self.device}"
        return f"{where} {self.label}"


def _us(ns: int) -> float:
    # Three decimals: ns / 1000 is correctly rounded, and repr() prints the shortest form that
    # reads back to the same float, so whole nanoseconds survive the round trip.
    return ns / 1000


def span_event(
    span: Span, pid: int, tid: int, start_ns: int, end_ns: int, *, slice_args: bool = True
) -> dict[str, object]:
    """The complete ("X") event of ``span`` on ``(pid, tid)``, placed at ``start_ns..end_ns``.

    With ``slice_args`` its args carry the span's ``duration_ns``, ``depth`` and
    ``uncertainty_ns``; without, it has none (viewers that key frames on name and args, such as
    speedscope, then aggregate slices by name).
    """
    event: dict[str, object] = {
        "name": span.name,
        "ph": "X",
        "pid": pid,
        "tid": tid,
        "ts": _us(start_ns),
        "dur": _us(end_ns - start_ns),
    }
    if slice_args:
        event["args"] = {
            "duration_ns": span.duration_ns,
            "depth": span.depth,
            "uncertainty_ns": span.uncertainty_ns,
        }
    return event


# Every TraceFile open in this process, so that a forked child can disown the parent's.
_open_files: weakref.WeakSet[TraceFile] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # Runs in the child right after fork(), on its only thread, before anything else can touch
    # a trace the parent was writing.
    for trace in list(_open_files):
        trace._forked_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)


_SPAN_FIELDS: Final = (
    ("name", str),
    ("start_ns", int),
    ("end_ns", int),
    ("duration_ns", int),
    ("depth", int),
    ("stream", str),
    ("uncertainty_ns", int),
)
_ABSENT: Final = object()


def check_span(span: object, what: str) -> None:
    """:class:`TypeError` unless ``span`` has a :class:`~eventapi.Span`'s fields, of its types.

    For spans that do not come from a profiler (a sink called by hand): what a file would
    otherwise write, or fail to encode, is refused first, naming ``what`` and the field.
    """
    for field, kind in _SPAN_FIELDS:
        value = getattr(span, field, _ABSENT)
        if value is _ABSENT:
            raise TypeError(
                f"{what} takes an eventapi.Span (as EventProfiler.collect gives it), not "
                f"{type(span).__qualname__} {bounded_repr(span)}"
            )
        if type(value) is not kind:
            raise TypeError(
                f"{what}: a span's {field} must be {'a str' if kind is str else 'an int'}, not "
                f"{type(value).__qualname__} {bounded_repr(value)}"
            )
        if field == "depth" and isinstance(value, int) and value < 0:
            raise ValueError(f"{what}: a span's depth is 0 or more, got {value}")


@final
class TraceFile:
    """A trace being written: header at open, one line per event, the tail at :meth:`close`.

    Thread-safe: a lock serializes writes, so sinks of profilers on several threads may share
    one file. Each span costs one small JSON line in a buffered file, nothing more is held but
    the open windows' ends per track (for clamping). Raises :class:`OSError` from the file,
    :class:`TypeError` for a ``path`` that is not a ``str`` or ``os.PathLike``.

    After ``fork()`` the child's copy is the parent's file, not the child's: every write or
    flush there raises :class:`~eventapi.EventStateError` naming ``fork()``, and
    :meth:`close` and :meth:`discard` there do nothing. Nothing of the child, its exit
    included, reaches the file, and nothing there waits for a lock a parent thread held.

    ``replace``: write a temporary file that takes the place of ``path`` at :meth:`close`
    (after a flush to the disk), so ``path`` is never left half written; :meth:`discard` drops
    it instead. Without it the file is written in place, as it grows. ``slice_args``: see
    :func:`span_event`.
    """

    __slots__ = (
        "__weakref__",
        "_closed",
        "_file",
        "_forked",
        "_lock",
        "_nesting",
        "_path",
        "_pid",
        "_replacement",
        "_slice_args",
        "_tracks",
    )

    def __init__(
        self,
        path: str | os.PathLike[str],
        process: dict[str, object],
        *,
        replace: bool = False,
        slice_args: bool = True,
    ) -> None:
        where = self._path = check_path(path, "the trace's path")
        self._replacement: Replacement | None = None
        if replace:
            self._replacement = Replacement(where)
            self._file: IO[str] = self._replacement.file
        else:
            self._file = open(where, "w", encoding="utf-8")  # noqa: SIM115
        self._slice_args = slice_args
        self._lock = threading.Lock()
        self._tracks: dict[Track, int] = {}
        self._nesting: dict[int, list[int]] = {}
        self._closed = False
        self._forked = False
        pid = process["pid"]
        assert isinstance(pid, int)
        self._pid = pid
        try:
            self._header(process)
        except BaseException:
            self.discard()
            raise
        _open_files.add(self)

    def _forked_in_child(self) -> None:
        # The lock may have been held at the fork by a parent thread that does not exist here.
        self._lock = threading.Lock()
        self._forked = True
        if self._closed:
            return
        # The child's descriptor shares the parent's file offset: whatever the child wrote or
        # flushed (the buffered file's own close when collected at exit included) would land
        # in the middle of the parent's trace, and the buffer's own lock may be held too.
        # Closing the raw file underneath closes only this process's descriptor and marks the
        # whole stack closed, so nothing above it ever flushes or takes that lock.
        raw = getattr(getattr(self._file, "buffer", None), "raw", None)
        if isinstance(raw, io.FileIO):
            with contextlib.suppress(OSError):
                raw.close()

    def check_owner(self, call: str) -> None:
        """:class:`~eventapi.EventStateError` for ``call`` in a child forked after the open."""
        if self._forked:
            self._refuse_forked(call)

    def _refuse_forked(self, call: str) -> NoReturn:
        raise EventStateError(
            f"{call} refused: the trace {self._path} was opened before fork(), by the parent "
            f"process, which still writes it; it is not writable from this process "
            f"(pid {os.getpid()}), and closing it here does nothing. Write this process's "
            "spans to a TraceWriter on a file of its own, or start worker processes with "
            "multiprocessing's 'spawn' or 'forkserver' method"
        )

    def _header(self, process: dict[str, object]) -> None:
        pid = self._pid
        header = {"otherData": {"eventapi": process}, "displayTimeUnit": "ns"}
        # The object minus its closing brace, then the event array opened.
        self._text(json.dumps(header)[:-1] + ',\n"traceEvents": [\n')
        names: dict[str, object] = {"name": process_title(str(process["host"]), pid, process)}
        rank = process.get("rank")
        if isinstance(rank, int):
            names["rank"] = rank
        self._write({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": names})
        if isinstance(rank, int):  # viewers order processes by it: rank 0 first
            self._write(
                {
                    "name": "process_sort_index",
                    "ph": "M",
                    "pid": pid,
                    "tid": 0,
                    "args": {"sort_index": rank},
                }
            )

    def _write(self, event: dict[str, object]) -> None:
        self._text(json.dumps(event, separators=(",", ":")) + ",\n")

    def _text(self, text: str) -> None:
        try:
            self._file.write(text)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot write {self._path}: {exc.strerror}") from None

    def track(self, track: Track, **extra: object) -> int:
        """The ``tid`` of ``track``, announcing it (with ``extra`` in its args) on first use."""
        with self._lock:
            if self._forked:
                self._refuse_forked("a new track")
            return self._track(track, extra)

    def _track(self, track: Track, extra: dict[str, object]) -> int:
        tid = self._tracks.get(track)
        if tid is None:
            tid = self._tracks[track] = len(self._tracks) + 1
            self._nesting[tid] = []
            args: dict[str, object] = {
                "name": track.title,
                "backend": track.backend,
                "device": track.device,
                "stream": track.label,
                **extra,
            }
            self._write(
                {"name": "thread_name", "ph": "M", "pid": self._pid, "tid": tid, "args": args}
            )
            self._write(
                {
                    "name": "thread_sort_index",
                    "ph": "M",
                    "pid": self._pid,
                    "tid": tid,
                    "args": {"sort_index": tid},
                }
            )
        return tid

    def add(self, track: Track, spans: Iterable[Span]) -> None:
        """Write ``spans`` (in the order their windows opened) on ``track``."""
        with self._lock:
            if self._forked:
                self._refuse_forked("a span")
            if self._closed:
                raise ValueError("this trace was closed; write spans before closing it")
            tid = self._track(track, {})
            ends = self._nesting[tid]
            for span in spans:
                start_ns, end_ns = span.start_ns, max(span.end_ns, span.start_ns)
                del ends[span.depth :]
                if ends:
                    # Within the parent: rounding must not break the stack viewers draw.
                    parent_end = ends[-1]
                    start_ns = min(start_ns, parent_end)
                    end_ns = min(end_ns, parent_end)
                ends.append(end_ns)
                self._write(
                    span_event(span, self._pid, tid, start_ns, end_ns, slice_args=self._slice_args)
                )

    def flush(self) -> None:
        with self._lock:
            if self._forked:
                self._refuse_forked("flush()")
            try:
                self._file.flush()
            except OSError as exc:
                raise OSError(exc.errno, f"cannot write {self._path}: {exc.strerror}") from None

    def discard(self) -> None:
        """Close without finishing: a ``replace`` trace leaves ``path`` as it was. Idempotent."""
        with self._lock:
            if self._closed or self._forked:  # a forked child's: the parent's file, untouched
                return
            self._closed = True
            if self._replacement is not None:
                self._replacement.discard()
            else:
                self._file.close()

    def close(self) -> None:
        """Finish the JSON document and close the file (a ``replace`` one: into place).

        Idempotent. Raises :class:`OSError` when the end cannot be written; a ``replace`` trace
        then leaves ``path`` as it was.
        """
        with self._lock:
            if self._closed or self._forked:  # a forked child's: the parent's file, untouched
                return
            self._closed = True
            replacement = self._replacement
            if replacement is not None:
                try:
                    self._write_tail()
                except BaseException:
                    replacement.discard()
                    raise
                replacement.commit()
                return
            try:
                self._write_tail()
            finally:
                self._file.close()

    def _write_tail(self) -> None:
        # A closing metadata event, so the array never ends in a trailing comma.
        end = {
            "name": "trace_end",
            "ph": "M",
            "pid": self._pid,
            "tid": 0,
            "args": {"wall_clock": host_clock().as_json()},
        }
        self._text(json.dumps(end, separators=(",", ":")) + "\n]}\n")


_EMPTY_HINT: Final = "pass a trace written by eventapi or another Chrome trace exporter"


def read_trace(path: str | os.PathLike[str], *, lenient: bool = False) -> dict[str, Any]:
    """Read a trace file; one cut short (its process died while writing) is completed.

    Returns the document in its object form (a bare event array is wrapped). ``lenient``: bytes
    that are not UTF-8 are read as U+FFFD instead of refused (the report draws what it can).
    Raises :class:`ValueError`, in one line that names the file, when it is not a Trace Event
    JSON document; :class:`OSError` (naming it too) when it cannot be read; :class:`TypeError`
    for a ``path`` that is not a ``str`` or ``os.PathLike``.
    """
    where = check_path(path, "the trace's path")
    try:
        with open(where, "rb") as file:
            raw = file.read()
    except OSError as exc:
        raise OSError(exc.errno, f"cannot read {where}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8", errors="replace" if lenient else "strict")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{where} is not UTF-8 text (byte {exc.start} is 0x{raw[exc.start]:02x}); a trace "
            "is JSON, which is UTF-8"
        ) from None
    if not text.strip():
        raise ValueError(f"{where} is empty; {_EMPTY_HINT}")
    document = _parse(text, where)
    if isinstance(document, list):  # the format's bare array form
        document = {"traceEvents": document}
    if not isinstance(document, dict):
        raise ValueError(
            f"{where} holds a JSON {json_type(document)}, not a trace (an object with a "
            f"traceEvents list); {_EMPTY_HINT}"
        )
    events = document.get("traceEvents")
    if not isinstance(events, list):
        what = (
            "no traceEvents list"
            if events is None
            else f"a JSON {json_type(events)} as traceEvents"
        )
        raise ValueError(f"{where} has {what}; pass a Chrome Trace Event JSON file")
    return document


def _parse(text: str, where: str) -> Any:
    try:
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            # A trace written as spans arrived ends after a complete line when its process
            # died: drop a partial last line and close the array and the object.
            body = text[: text.rfind(",\n") + 1].rstrip(",\n") if ",\n" in text else text
            try:
                return json.loads(body + "\n]}")
            except json.JSONDecodeError:
                raise ValueError(
                    f"{where} is not a Trace Event JSON file ({exc}); {_EMPTY_HINT}"
                ) from None
    except RecursionError:
        raise ValueError(
            f"{where} nests arrays or objects too deeply to read; a trace's events are flat objects"
        ) from None
    except ValueError as exc:
        if str(exc).startswith(where):
            raise
        # Python's own limits, such as an integer of more than 4,300 digits.
        raise ValueError(f"{where} is not a Trace Event JSON file ({exc})") from None


def json_type(value: object) -> str:
    """The JSON name of ``value``'s type, as an error message says it."""
    for kind, name in _JSON_TYPES:
        if isinstance(value, kind):
            return name
    return type(value).__name__


_JSON_TYPES: Final = (
    (type(None), "null"),
    (bool, "boolean"),  # before int: a bool is an int
    (int | float, "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
)
