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

import json
import os
import socket
import sys
import time
from collections.abc import Iterable
from typing import IO, TYPE_CHECKING, Any, Final, NamedTuple, final

from .._arguments import bounded_repr
from ._files import naming
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
]

FORMAT: Final = 1
"""Version of the ``otherData.eventapi`` object; a reader refuses a newer major."""

_OFFSET_SAMPLES: Final = 7
"""Bracketed reads of the wall clock. Each costs well under a microsecond; the tightest wins."""


@final
class Clock(NamedTuple):
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
    samples = []
    for _ in range(_OFFSET_SAMPLES):
        before = time.perf_counter_ns()
        wall = time.time_ns()
        after = time.perf_counter_ns()
        samples.append((after - before, wall - (before + after) // 2))
    width, offset = min(samples, key=lambda sample: sample[0])  # the first of the tightest
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
        "clock": host_clock()._asdict(),
    }


@final
class Track(NamedTuple):
    """One stream's track: the backend and device it is on, and the profiler's label."""

    backend: str
    device: int | None
    label: str


_SPAN_FIELDS: Final = (
    "name",
    "start_ns",
    "end_ns",
    "duration_ns",
    "depth",
    "stream",
    "uncertainty_ns",
)
_ABSENT: Final = object()


def check_span(span: object, what: str) -> None:
    """:class:`TypeError` unless ``span`` has a :class:`~eventapi.Span`'s fields, of its types.

    For spans that do not come from a profiler (a sink called by hand): what a file would
    otherwise write, or fail to encode, is refused first, naming ``what`` and the field.
    """
    for field in _SPAN_FIELDS:
        value = getattr(span, field, _ABSENT)
        kind = str if field in ("name", "stream") else int
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
    """The format written to an open text file: the header at once, spans, :meth:`finish`.

    Each span costs one small JSON line in the file; nothing more is held but the open windows'
    ends per track (for clamping). It takes no lock and names no file: its writer serializes
    the calls, and an :class:`OSError` of the file is the writer's to name. ``slice_args``:
    with it, a slice's args carry the span's ``duration_ns``, ``depth`` and
    ``uncertainty_ns``; without, it has none (viewers that key frames on name and args, such
    as speedscope, then aggregate slices by name).
    """

    __slots__ = ("_file", "_pid", "_slice_args", "_tracks")

    def __init__(self, file: IO[str], process: dict[str, Any], *, slice_args: bool) -> None:
        self._file = file
        self._slice_args = slice_args
        self._tracks: dict[Track, tuple[int, list[int]]] = {}  # tid, open windows' ends
        pid = self._pid = process["pid"]
        header = {"otherData": {"eventapi": process}, "displayTimeUnit": "ns"}
        # The object minus its closing brace, then the event array opened.
        file.write(json.dumps(header)[:-1] + ',\n"traceEvents": [\n')
        names: dict[str, object] = {"name": process_title(process["host"], pid, process)}
        rank = process.get("rank")
        if isinstance(rank, int):
            names["rank"] = rank
        self._meta("process_name", 0, names)
        if isinstance(rank, int):  # viewers order processes by it: rank 0 first
            self._meta("process_sort_index", 0, {"sort_index": rank})

    def _meta(self, name: str, tid: int, args: dict[str, object], end: str = ",\n") -> None:
        self._write({"name": name, "ph": "M", "pid": self._pid, "tid": tid, "args": args}, end)

    def _write(self, event: dict[str, object], end: str = ",\n") -> None:
        self._file.write(json.dumps(event, separators=(",", ":")) + end)

    def add(self, track: Track, spans: Iterable[Span], **extra: object) -> None:
        """Write ``spans`` (in the order their windows opened) on ``track``.

        A track is announced on first use, with ``extra`` in its args.
        """
        if track not in self._tracks:
            tid = len(self._tracks) + 1
            self._tracks[track] = (tid, [])
            where = track.backend if track.device is None else f"{track.backend}:{track.device}"
            args = {"backend": track.backend, "device": track.device, "stream": track.label}
            self._meta("thread_name", tid, {"name": f"{where} {track.label}", **args, **extra})
            self._meta("thread_sort_index", tid, {"sort_index": tid})
        tid, ends = self._tracks[track]
        for span in spans:
            start_ns, end_ns = span.start_ns, max(span.end_ns, span.start_ns)
            del ends[span.depth :]
            if ends:
                # Within the parent: rounding must not break the stack viewers draw.
                start_ns, end_ns = min(start_ns, ends[-1]), min(end_ns, ends[-1])
            ends.append(end_ns)
            # Microseconds: ns / 1000 is correctly rounded, and repr() prints the shortest form
            # that reads back to the same float, so whole nanoseconds survive the round trip.
            event: dict[str, object] = {
                "name": span.name,
                "ph": "X",
                "pid": self._pid,
                "tid": tid,
                "ts": start_ns / 1000,
                "dur": (end_ns - start_ns) / 1000,
            }
            if self._slice_args:
                event["args"] = {
                    "duration_ns": span.duration_ns,
                    "depth": span.depth,
                    "uncertainty_ns": span.uncertainty_ns,
                }
            self._write(event)

    def finish(self) -> None:
        """End the document: a closing metadata event, so the array never ends in a comma."""
        self._meta("trace_end", 0, {"wall_clock": host_clock()._asdict()}, end="\n]}\n")


_EMPTY_HINT: Final = "pass a trace written by eventapi or another Chrome trace exporter"


def read_trace(where: str, *, lenient: bool = False) -> dict[str, Any]:
    """Read the trace file ``where``; one cut short (its process died while writing) is completed.

    Returns the document in its object form (a bare event array is wrapped). ``lenient``: bytes
    that are not UTF-8 are read as U+FFFD instead of refused (the report draws what it can).
    Raises :class:`ValueError`, in one line that names the file, when it is not a Trace Event
    JSON document; :class:`OSError` (naming it too) when it cannot be read.
    """
    with naming(where, "read"), open(where, "rb") as file:
        raw = file.read()
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
            error = exc
        # A trace written as spans arrived ends after a complete line when its process died:
        # drop a partial last line and close the array and the object.
        body = text[: text.rfind(",\n") + 1].rstrip(",\n") if ",\n" in text else text
        return json.loads(body + "\n]}")
    except json.JSONDecodeError:
        raise ValueError(
            f"{where} is not a Trace Event JSON file ({error}); {_EMPTY_HINT}"
        ) from None
    except RecursionError:
        raise ValueError(
            f"{where} nests arrays or objects too deeply to read; a trace's events are flat objects"
        ) from None
    except ValueError as exc:  # Python's own limits, such as an int of more than 4,300 digits
        raise ValueError(f"{where} is not a Trace Event JSON file ({exc})") from None


def json_type(value: object) -> str:
    """The JSON name of ``value``'s type, as an error message says it."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return "number"
    names = {type(None): "null", bool: "boolean", str: "string", list: "array", dict: "object"}
    return names.get(type(value), type(value).__name__)
