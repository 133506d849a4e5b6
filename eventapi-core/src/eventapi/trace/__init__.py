"""Traces of profiling windows: Chrome Trace Event JSON that Perfetto and ``chrome://tracing`` open.

* :func:`export_chrome_trace` writes the spans that profilers still hold (each keeps its last
  ``max_spans``), one track per stream, in one file.
* :class:`TraceWriter` writes every span as it is collected, through a profiler's ``sink``: a
  long job gets a complete trace in bounded memory.
* :func:`merge` puts the traces of many processes, and many hosts, on one time axis;
  :func:`write_report` turns a trace into one self-contained HTML page.
* :func:`gather_chrome_trace` does the same across the ranks of a ``torch.distributed`` job.

Every whole file written here (:func:`export_chrome_trace`, :func:`merge`,
:func:`write_report`) is written beside its destination and renamed into place once complete:
a failed write leaves the destination as it was. Paths are ``str`` or ``os.PathLike``.

Each trace says what its clock is: the host's ``time.perf_counter_ns()`` (shared by every
process of one boot of one host) and that clock's offset to the wall clock, measured when the
trace is written. See ``docs/traces.md`` for the format and the error bounds of a merge.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING, Any, cast, final

from .._arguments import bounded_repr, check_bool, check_int
from .._errors import EventStateError
from .._protocol import capabilities_of
from ._files import check_path, naming, replacing
from ._format import TraceFile, Track, check_span, process_info
from ._merge import dump, merge_documents, merge_files

if TYPE_CHECKING:
    # Annotations only: traces sit below the profiler, which imports this package to export.
    from .._profiling._profiler import EventProfiler
    from .._profiling._span import Span
    from .._protocol import EventApi

__all__ = ["TraceWriter", "export_chrome_trace", "gather_chrome_trace", "merge", "write_report"]

PathLike = str | os.PathLike[str]


# What an export reads of each profiler: checked on the class, so that no property runs for it.
_PROFILER_MEMBERS = ("api", "label", "spans", "dropped_spans", "anchor")


def _check_profilers(profilers: tuple[object, ...], caller: str) -> None:
    for index, profiler in enumerate(profilers):
        kind = type(profiler)
        if not all(hasattr(kind, name) for name in _PROFILER_MEMBERS):
            raise TypeError(
                f"{caller}: each of profilers must be an eventapi.EventProfiler; profilers[{index}]"
                f" is {kind.__qualname__} {bounded_repr(profiler)}"
            )


def _track(api: EventApi[Any, Any], label: str) -> Track:
    device = getattr(api, "device", None)
    return Track(api.BACKEND, device if isinstance(device, int) else None, label)


def export_chrome_trace(
    path: PathLike, *profilers: EventProfiler[Any, Any], slice_args: bool = True
) -> None:
    """Write the spans ``profilers`` retain (:attr:`~eventapi.EventProfiler.spans`) to ``path``.

    One process track for this process, one track per profiler's stream, named by backend,
    device and label; nested windows as nested slices. The metadata carries each profiler's
    latest anchor uncertainty and how many spans it dropped (``dropped_spans``): spans a
    profiler no longer holds are not in the file (use a :class:`TraceWriter` as its ``sink``
    for all of them). Reading ``spans`` collects first, so windows stopped since the last
    collect are in the file, and reach each profiler's sink.

    The file is written completely or not at all: ``path`` is replaced only once the whole
    trace is on the disk, so a failure leaves what was there. ``slice_args=False`` writes
    slices without their args (``duration_ns``, ``depth``, ``uncertainty_ns``), so that
    speedscope, which keys frames by name and args, aggregates them by name.

    Raises :class:`OSError` when ``path`` cannot be written, :class:`TypeError` when it is not
    a ``str`` or ``os.PathLike``, when one of ``profilers`` is not an
    :class:`~eventapi.EventProfiler` or ``slice_args`` not a ``bool``.
    """
    _check_profilers(profilers, "export_chrome_trace")
    check_bool(slice_args, "export_chrome_trace: slice_args")
    with replacing(check_path(path, "the trace's path")) as file:
        _write(file, profilers, slice_args)


def _write(file: IO[str], profilers: Sequence[EventProfiler[Any, Any]], slice_args: bool) -> None:
    trace = TraceFile(file, process_info(), slice_args=slice_args)
    for profiler in profilers:
        spans = profiler.spans
        trace.add(
            _track(profiler.api, profiler.label),
            spans,
            # A profiler that holds spans has an anchor; reading it then takes none.
            anchor_uncertainty_ns=profiler.anchor.uncertainty_ns if spans else None,
            dropped_spans=profiler.dropped_spans,
        )
    trace.finish()


# Every TraceWriter open in this process, so that a forked child can disown the parent's.
_open_writers: weakref.WeakSet[TraceWriter] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # Runs in the child right after fork(), on its only thread, before anything else can touch
    # a trace the parent was writing.
    for writer in list(_open_writers):
        writer._forked_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)


@final
class TraceWriter:
    """A trace file written span by span, for profilers' ``sink``.

    ::

        with eventapi.trace.TraceWriter("run.json") as trace:
            prof = eventapi.EventProfiler(api, sink=trace.sink(api))
            ...                       # every collect() appends its spans to run.json
            prof.close()

    The file is valid JSON once :meth:`close` ran; a file cut short (the process died) is
    still read by :func:`merge` and :func:`write_report`, up to its last whole span. Memory
    stays bounded: nothing but the file's buffer and each track's open nesting is held.
    Several profilers, on several threads, may share one writer. Unlike the other writers here
    it writes ``path`` in place, as the spans arrive. ``slice_args``: as for
    :func:`export_chrome_trace`. Raises :class:`OSError` when ``path`` cannot be written, at
    construction or from the ``collect()`` that writes; :class:`TypeError` when it is not a
    ``str`` or ``os.PathLike`` (or ``slice_args`` not a ``bool``).

    A writer belongs to the process that created it. In a child forked after, it is refused:
    its sinks, :meth:`sink` and :meth:`flush` raise :class:`~eventapi.EventStateError` naming
    ``fork()``, and :meth:`close` (leaving its ``with`` block) does nothing; nothing of the
    child, its exit included, reaches the parent's file. The child writes its own spans
    through a writer it creates.
    """

    __slots__ = ("__weakref__", "_file", "_forked", "_lock", "_path", "_trace")

    def __init__(self, path: PathLike, *, slice_args: bool = True) -> None:
        check_bool(slice_args, "TraceWriter: slice_args")
        self._path = check_path(path, "the trace's path")
        self._file = open(self._path, "w", encoding="utf-8")  # noqa: SIM115 - closed by close()
        self._trace = TraceFile(self._file, process_info(), slice_args=slice_args)
        # Writes are serialized, so sinks of profilers on several threads may share the file.
        self._lock = threading.Lock()
        self._forked = False
        _open_writers.add(self)

    def _forked_in_child(self) -> None:
        # The lock may have been held at the fork by a parent thread that does not exist here.
        self._lock = threading.Lock()
        self._forked = True
        # The child's descriptor shares the parent's file offset: whatever the child wrote or
        # flushed (the buffered file's own close when collected at exit included) would land
        # in the middle of the parent's trace, and the buffer's own lock may be held too.
        # Closing the raw file underneath closes only this process's descriptor and marks the
        # whole stack closed, so nothing above it ever flushes or takes that lock.
        with contextlib.suppress(OSError):
            cast("io.BufferedWriter", self._file.buffer).raw.close()

    def _check_owner(self, call: str) -> None:
        if self._forked:
            raise EventStateError(
                f"{call} refused: the trace {self._path} was opened before fork(), by the parent "
                f"process, which still writes it; it is not writable from this process "
                f"(pid {os.getpid()}), and closing it here does nothing. Write this process's "
                "spans to a TraceWriter on a file of its own, or start worker processes with "
                "multiprocessing's 'spawn' or 'forkserver' method"
            )

    def sink(self, api: EventApi[Any, Any]) -> Callable[[Span], None]:
        """A ``sink`` for an :class:`~eventapi.EventProfiler` on ``api``.

        Each span goes on the track of its stream (``Span.stream``, the profiler's label) of
        ``api``'s backend and device. Raises :class:`TypeError` when ``api`` is not a backend
        object. The sink raises :class:`ValueError` when called after :meth:`close`, and
        :class:`TypeError` for anything but a :class:`~eventapi.Span`; both raise
        :class:`~eventapi.EventStateError` in a forked child.
        """
        capabilities_of(api, "TraceWriter.sink")  # TypeError for a non-backend
        self._check_owner("TraceWriter.sink")

        def write(span: Span) -> None:
            check_span(span, "a TraceWriter's sink")
            track = _track(api, span.stream)
            with self._lock:
                self._check_owner("a span")
                if self._file.closed:
                    raise ValueError("this trace was closed; write spans before closing it")
                with naming(self._path):
                    self._trace.add(track, (span,))

        return write

    def flush(self) -> None:
        """Push what was written so far to the operating system (refused in a forked child)."""
        with self._lock:
            self._check_owner("flush()")
            with naming(self._path):
                self._file.flush()

    def close(self) -> None:
        """Finish the file (idempotent); spans given to a sink afterwards raise ValueError.

        In a child forked after the writer was created, it does nothing: the file is the parent's.
        """
        with self._lock:
            if self._file.closed or self._forked:  # a forked child's: the parent's file, untouched
                return
            with naming(self._path):
                try:
                    self._trace.finish()
                finally:
                    self._file.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def merge(paths: Sequence[PathLike], out: PathLike, *, slice_args: bool = True) -> None:
    """Write one trace to ``out`` holding every trace in ``paths`` on one time axis.

    Traces of one host's processes keep their times exactly; traces of several hosts are
    placed through each host's wall clock (see ``docs/traces.md`` for the error). The result is
    strict JSON, written completely or not at all. ``slice_args=False`` drops the slices' args
    (see :func:`export_chrome_trace`).

    Raises :class:`ValueError`, in one line naming the file, for a file that is not a trace
    written by eventapi, a file given twice, or an ``out`` that is one of ``paths``;
    :class:`OSError` when a file cannot be read or written; :class:`TypeError` when ``paths``
    is not a list of ``str`` or ``os.PathLike`` (a single path included), or ``slice_args``
    not a ``bool``.
    """
    merge_files(paths, out, slice_args=slice_args)


def write_report(path: PathLike, out: PathLike | None = None) -> None:
    """Write one self-contained HTML page for the trace at ``path``: a timeline and statistics.

    ``out`` defaults to ``path`` with its extension replaced by ``.html``. The page loads
    nothing from the network, and draws whatever strings the trace holds. It is written
    completely or not at all. Raises :class:`ValueError` for a file that is not a Trace Event
    JSON document or an ``out`` that is ``path``, :class:`OSError` when a file cannot be read
    or written, :class:`TypeError` when a path is not a ``str`` or ``os.PathLike``.
    """
    from ._report import write_report_file

    write_report_file(path, out)


def gather_chrome_trace(
    path: PathLike, *profilers: EventProfiler[Any, Any], group: Any = None, dst: int = 0
) -> None:
    """Gather every rank's spans through ``torch.distributed``; rank ``dst`` writes the merge.

    Every rank of ``group`` (default: the whole job) must call it, as with any collective; each
    contributes the spans its ``profilers`` retain, with its own clock, and rank ``dst`` (a
    global rank) writes one trace to ``path`` with one process track per rank, placed as
    :func:`merge` places files. The other ranks write nothing. Blocks until every rank has
    called it. Reading the spans collects first, and hands what it collects to each
    profiler's sink: a sink that raises on one rank raises there before the gather, and the
    other ranks wait in it, as in any collective a rank leaves; call ``collect()`` before, so
    that a sink's error comes from there.

    Raises :class:`RuntimeError` when ``torch.distributed`` is not installed or not
    initialised: without torch, write one file per process with :func:`export_chrome_trace`
    and merge them with :func:`merge` (``eventapi trace merge``). Raises :class:`TypeError`
    or :class:`ValueError` for arguments :func:`export_chrome_trace` refuses, and a ``dst``
    that is not a rank (an ``int``, 0 or more).
    """
    # Refused on every rank, before the collective.
    out = check_path(path, "path")
    _check_profilers(profilers, "gather_chrome_trace")
    check_int(dst, "gather_chrome_trace: dst", minimum=0)
    try:
        import torch.distributed as dist
    except ImportError:
        raise RuntimeError(
            "gather_chrome_trace needs torch.distributed; without it, write one trace per process "
            "with eventapi.trace.export_chrome_trace and merge them with `eventapi trace merge`"
        ) from None
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            "torch.distributed is not initialised; call torch.distributed.init_process_group "
            "first, or write one trace per process and merge the files"
        )
    import torch

    # The local trace, built exactly as a file would be, travels as bytes in tensors, not by
    # gather_object, which needs NumPy (a CPU-only torch does not pull it in). Tensors live where
    # the group's backend moves them (a CUDA device for NCCL, else the CPU).
    local = io.StringIO()
    _write(local, profilers, slice_args=True)
    payload = local.getvalue().encode()
    device = "cuda" if dist.get_backend(group) == "nccl" else "cpu"  # "cuda": the current device
    world = dist.get_world_size(group)
    size = torch.tensor([len(payload)], dtype=torch.int64, device=device)
    sizes = [torch.zeros_like(size) for _ in range(world)]
    dist.all_gather(sizes, size, group=group)
    lengths = [int(s.item()) for s in sizes]
    buffer = torch.zeros(max(lengths), dtype=torch.uint8, device=device)
    buffer[: len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
    mine = dist.get_rank() == dst
    received = [torch.empty_like(buffer) for _ in range(world)] if mine else None
    dist.gather(buffer, received, dst=dst, group=group)
    if received is None:
        return  # every rank's trace is at rank dst
    gathered = [
        json.loads(bytes(tensor[:length].cpu().tolist()))
        for tensor, length in zip(received, lengths, strict=True)
    ]
    merged = merge_documents(gathered, [f"rank {i}" for i in range(len(gathered))])
    dump(merged, out)
