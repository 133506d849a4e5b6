"""Profiling windows on a stream: device durations read back in one batch, placed on the host clock.

A window is two events recorded into the profiler's stream, one when it opens and one when it
stops. Nothing waits while windows open and close; :meth:`EventProfiler.collect` waits once for
everything closed so far, takes a fresh :class:`~eventapi.Anchor` after it (on a stream of the
profiler's own, so it waits for nothing queued after the windows), and reads each window's
device duration and its place on the host clock. Events come from a pool and go back to it
after readout, so a window costs two records, not two creations; all other work (placement,
statistics, retention) is done in ``collect()``.

A long-running program stays in bounded memory: :meth:`EventProfiler.summary` keeps exact
sums and a bounded sketch per name (:mod:`eventapi._profiling._sketch`) for at most
``max_names`` names, and at most ``max_spans`` collected spans are retained for export.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import sys
import threading
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Any, Final, Generic, NoReturn, ParamSpec, TypeVar, cast, final

from .._errors import EventStateError
from .._protocol import (
    Capabilities,
    EventApi,
    SupportsCaptureCheck,
    SupportsFastPath,
    capabilities_of,
)
from .._single_owner import SingleOwner
from ._anchor import (
    ANCHOR_SAMPLES,
    RATE_HISTORY,
    Anchor,
    Earlier,
    Placement,
    sample_anchor,
)
from ._nvtx import Ranges, ranges_for
from ._pool import EventPool
from ._sketch import DurationSummary, quantile_of
from ._span import Span, Stats, make_span
from ._table import stats_table

__all__ = ["EventProfiler", "Span", "Stats", "Window"]

_log = logging.getLogger("eventapi")

E = TypeVar("E")
S = TypeVar("S")

# Window states. A skipped window goes from _OPEN to _DONE without ever holding an event.
_NEW: Final = -1  # made by window(), opened when its with block is entered
_OPEN: Final = 0  # start recorded, end not yet
_CLOSED: Final = 1  # both recorded, waiting for collect()
_DONE: Final = 2  # read back, skipped, abandoned or discarded: holds no event

_labels = itertools.count()

P = ParamSpec("P")
R = TypeVar("R")


def _opened(window: Window[Any]) -> int:
    return window._seq


@final
class Window(SingleOwner, Generic[E]):
    """One profiling window, made by :meth:`EventProfiler.window` or :meth:`EventProfiler.start`.

    A window from :meth:`EventProfiler.start` is open at once; one from
    :meth:`EventProfiler.window` opens when its ``with`` block is entered, and as a decorator
    (``@prof.window("step")``) opens a fresh window around each call of the function. One-shot:
    :meth:`stop` once, or leave the ``with`` block. A window opened while the stream was
    capturing a graph is *skipped*: it holds no event and its :meth:`stop` and ``with`` exit do
    nothing. A window a capture began inside of is skipped too, when it stops: its end is not
    recorded. Use it on the thread that uses its profiler. It holds its profiler's events:
    ``copy``, ``deepcopy`` and ``pickle`` raise :class:`TypeError`.
    """

    _COPY_HINT = "stop this window once and open a new one with profiler.window(name)"

    __slots__ = ("_depth", "_end", "_name", "_profiler", "_seq", "_skipped", "_start", "_state")

    def __init__(self, profiler: EventProfiler[E, Any], name: str) -> None:
        # Not open yet: EventProfiler._open_window records the start and fills in the rest.
        self._profiler = profiler
        self._name = name
        self._depth = 0
        self._seq = 0
        self._start: E | None = None
        self._end: E | None = None
        self._skipped = False
        self._state = _NEW

    @property
    def name(self) -> str:
        """The name the window was opened with."""
        return self._name

    @property
    def depth(self) -> int:
        """How many windows of the same profiler were open when this one opened."""
        return self._depth

    @property
    def skipped(self) -> bool:
        """True when the window was not (or not wholly) recorded because the stream was
        capturing a graph: as it opened, or (known once it stopped) as it stopped."""
        return self._skipped

    @property
    def stopped(self) -> bool:
        """True once :meth:`stop` ran (or the window was skipped and stopped, or discarded)."""
        return self._state > _OPEN

    def stop(self) -> None:
        """Record the window's end into the stream; never waits for the device.

        Raises :class:`~eventapi.EventStateError` when the window was already stopped, when a
        window opened inside it is still open (windows nest like ``with`` blocks: stop the
        inner one first), or when its profiler was closed; :class:`~eventapi.DriverError` when
        the capture check or the record fails, in which case the window is discarded and its
        event reused.
        """
        self._profiler._stop(self)

    def __enter__(self) -> Window[E]:
        state = self._state
        if state == _NEW:
            self._profiler._open_window(self, "window")
        elif state != _OPEN:
            raise EventStateError(
                f"window {self._name!r} was already stopped; a window is one-shot, "
                "open a new one with profiler.window(name)"
            )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None and self._state == _OPEN:
            # An exception skipped the stop() of windows started inside this block; abandon
            # them rather than hide the exception under an out-of-order error.
            self._profiler._stop_abandoning_above(self)
        else:
            self._profiler._stop(self)

    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]:
        """Decorate ``fn``: each call runs inside a fresh window of this name, as a ``with`` would.

        Only a window not opened yet (from :meth:`EventProfiler.window`) decorates; the window
        itself is never opened, it names the ones each call opens.
        """
        if self._state != _NEW or not callable(fn):
            raise TypeError(
                f"window {self._name!r} cannot decorate {fn!r}: decorate a function with "
                "@profiler.window(name), whose window is not opened yet"
            )
        profiler, name = self._profiler, self._name

        @functools.wraps(fn)
        def timed(*args: P.args, **kwargs: P.kwargs) -> R:
            with profiler.window(name):
                return fn(*args, **kwargs)

        return timed

    def __repr__(self) -> str:
        if self._state == _NEW:
            state = "not opened"
        elif self._skipped:
            state = "skipped"
        else:
            state = ("open", "stopped", "done")[self._state]
        return f"<Window {self._name!r} depth={self._depth} {state}>"


def _read_fused(
    elapsed_many: Callable[[list[E], list[E]], list[int]], starts: list[E], ends: list[E], later: E
) -> tuple[list[int], list[int]]:
    """Each window's duration, then how far its start lies before ``later``: one call."""
    count = len(starts)
    readings = elapsed_many(starts + starts, ends + [later] * count)
    return readings[:count], readings[count:]


def _read_apart(
    elapsed: Callable[[E, E], int], starts: list[E], ends: list[E], later: E
) -> tuple[list[int], list[int]]:
    """Each window's duration, then how far its start lies before ``later``."""
    durations = [elapsed(start, end) for start, end in zip(starts, ends, strict=True)]
    return durations, [elapsed(start, later) for start in starts]


@final
class EventProfiler(SingleOwner, Generic[E, S]):
    """Profiling windows on one stream of any :class:`~eventapi.EventApi` backend.

    ``stream=None`` makes the profiler create its own non-blocking stream (see :attr:`stream`,
    to launch work on) and destroy it on :meth:`close`; a stream passed in stays its owner's.
    ``label`` names the stream in every :class:`Span` (default ``"profiler-<n>"``, numbered in
    the process; a backend's name and device are the trace track's, so the default never reads
    like a device).

    Bounded memory for long-running programs: :meth:`summary` tracks at most ``max_names``
    distinct names (default 1000; spans of later names are still returned and retained, but
    left out of the summary, counted by :attr:`unsummarized` and warned about once), and the
    profiler retains at most ``max_spans`` collected spans (default 10,000) for export
    (:attr:`spans`; older ones are dropped and counted by :attr:`dropped_spans`). ``sink``, when
    given, is called with every span as :meth:`collect` reads it, in order, on the collecting
    thread, so a long job can write all of them out; an exception it raises propagates from
    that collect, and the spans after it in that batch are not passed to it.

    The anchor is taken on a second stream that the profiler creates (at the first anchor) and
    destroys on :meth:`close`: it compares events of two streams of one device, which CUDA,
    HIP and the host backend allow, and so never waits for work queued after the windows.

    Threads: a profiler is used by one thread at a time. It may move between threads (a server
    hands it from the thread that launches the work to a collector, say), but two threads in
    its methods at once are refused: the second raises :class:`~eventapi.EventStateError`
    naming both calls, and nothing is lost or changed by the refused call. To share one between
    threads, hold a lock of your own around each use (``docs/profiling.md`` shows both).
    Opening and stopping windows never blocks; :meth:`collect`, :meth:`close` and reading the
    results (:meth:`summary`, :attr:`spans`, :meth:`table`, :meth:`export_chrome_trace`) wait
    for the last window stopped, and the first read of :attr:`anchor` for the anchor's own
    events.

    A profiler owns its events and streams: ``copy``, ``deepcopy`` and ``pickle`` raise
    :class:`TypeError`. Raises :class:`TypeError` when ``api`` is not a backend object,
    :class:`~eventapi.DriverError` when the backend refuses the stream or an event, and (on a
    driverkit backend, which checks the stream when the profiler is made)
    :class:`~eventapi.EventStateError` for a stream that is destroyed or not the backend's.
    """

    _COPY_HINT = "share the profiler itself, or create another EventProfiler"

    __slots__ = (
        "__weakref__",
        "_anchor",
        "_anchor_event",
        "_anchor_stream",
        "_anchor_target",
        "_api",
        "_busy",
        "_capture_check",
        "_closed",
        "_earlier",
        "_elapsed",
        "_fast",
        "_guard",
        "_label",
        "_max_names",
        "_nvtx",
        "_open",
        "_owns_stream",
        "_pending",
        "_pool",
        "_read_windows",
        "_record_into",
        "_screened",
        "_seq",
        "_sink",
        "_skipped",
        "_spans",
        "_spans_seen",
        "_stream",
        "_summaries",
        "_target",
        "_unsummarized",
    )

    def __init__(
        self,
        api: EventApi[E, S],
        stream: S | None = None,
        *,
        label: str | None = None,
        max_names: int = 1000,
        max_spans: int = 10_000,
        sink: Callable[[Span], object] | None = None,
    ) -> None:
        capable = capabilities_of(api, "EventProfiler")  # TypeError for a non-backend
        if max_names < 0 or max_spans < 0:
            raise ValueError(
                f"max_names and max_spans must be >= 0, got {max_names} and {max_spans}"
            )
        # Every slot is set before anything else can fail, so the finalizer always finds them.
        self._api = api
        self._closed = True
        self._owns_stream = False
        # Held by the call in progress: another thread's call is refused instead of interleaved.
        # Re-entrant, so a sink that reads the summary from inside a collect is not refused.
        self._guard = threading.RLock()
        self._busy = ""  # the call holding the guard, named in the refusal
        self._bind_calls(api, capable)
        self._open: list[Window[E]] = []
        self._pending: list[Window[E]] = []
        self._summaries: dict[str, DurationSummary] = {}
        self._max_names = max_names
        self._unsummarized = 0
        self._spans: deque[Span] = deque(maxlen=max_spans)
        self._spans_seen = 0
        self._sink = sink
        self._anchor: Anchor | None = None
        self._anchor_event: E | None = None  # the latest anchor's event, kept out of the pool
        self._anchor_stream: S | None = None  # created at the first anchor
        self._anchor_target: Any = None  # what the anchor records into (see _target)
        # Earlier anchors, seen from the latest one, to measure the clock rate over.
        self._earlier: deque[Earlier] = deque(maxlen=RATE_HISTORY)
        self._seq = 0
        self._skipped = 0
        # Decided once: None unless NVTX ranges are on (cuda, with the nvtx package).
        self._nvtx: Ranges | None = ranges_for(api.BACKEND)
        if label is not None and type(label) is not str:
            raise TypeError(f"label must be a str, got {label!r}")
        self._label = label if label is not None else f"profiler-{next(_labels)}"
        self._target: Any = None
        if stream is None:
            self._stream: S = api.stream_create_non_blocking()
            self._owns_stream = True
        else:
            self._stream = stream
        # What windows record into: the stream itself, or with the fast path the backend's own
        # handle for it (resolved once, so a foreign stream is refused here rather than at the
        # first window, and a framework's stream is not adopted again at every window).
        try:
            fast = self._fast
            self._target = self._stream if fast is None else fast.adopt_stream(self._stream)
        except EventStateError as exc:
            self._release_everything()
            raise EventStateError(f"EventProfiler(api, stream): {exc}") from exc
        except BaseException:
            self._release_everything()
            raise
        self._closed = False

    def _bind_calls(self, api: EventApi[E, S], capable: Capabilities) -> None:
        # The calls the hot path makes, bound once: the fused ones where the backend has
        # SupportsFastPath (a window opens with one call, a collect reads in one), else the
        # plain protocol calls.
        fast = cast("SupportsFastPath[E, Any]", api) if capable.fast_path else None
        self._fast: SupportsFastPath[E, Any] | None = fast
        self._record_into: Callable[[E, Any], None] = api.event_record
        self._elapsed: Callable[[E, E], int] = api.event_elapsed
        # Bound to the api's calls, not to this object: a bound method of its own kept in an
        # attribute would hold the profiler in a reference cycle, and one dropped without
        # close() would keep its stream and events until the cyclic collector ran.
        self._read_windows: Callable[[list[E], list[E], E], tuple[list[int], list[int]]] = (
            functools.partial(_read_apart, api.event_elapsed)
            if fast is None
            else functools.partial(_read_fused, fast.event_elapsed_many)
        )
        self._capture_check: Callable[[Any], bool] | None = (
            cast("SupportsCaptureCheck[Any]", api).stream_is_capturing
            if capable.capture_check
            else None
        )
        self._screened: Callable[[E, Any], bool] | None = (
            None if fast is None else fast.event_record_unless_capturing
        )
        self._pool: EventPool[E] = EventPool(api.event_create, api.event_destroy, api.BACKEND)

    # -- what users read -------------------------------------------------------------------------

    @property
    def api(self) -> EventApi[E, S]:
        """The backend object the profiler records through."""
        return self._api

    @property
    def stream(self) -> S:
        """The stream windows are recorded into; launch the work to be timed on it."""
        return self._stream

    @property
    def label(self) -> str:
        """The stream's label, as each :class:`Span` carries it."""
        return self._label

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._closed

    @property
    def skipped(self) -> int:
        """Windows not recorded because the stream was capturing a graph."""
        return self._skipped

    @property
    def unsummarized(self) -> int:
        """Spans left out of :meth:`summary`: their name came after ``max_names`` others."""
        return self._unsummarized

    @property
    def spans(self) -> tuple[Span, ...]:
        """The spans retained for export, oldest first: at most ``max_spans``.

        Collects first what was stopped and not collected yet (one wait, as :meth:`collect`
        does), so it holds every window stopped so far.
        """
        with self._using("spans"):
            self._collect_pending()
            return tuple(self._spans)

    @property
    def dropped_spans(self) -> int:
        """Collected spans no longer retained, because ``max_spans`` newer ones were."""
        return self._spans_seen - len(self._spans)

    @property
    def anchor(self) -> Anchor:
        """The anchor the latest :meth:`collect` placed its spans with.

        Before the first collect that read any window, reading it takes an anchor now on the
        profiler's anchor stream, which blocks for the anchor's own events only (tens of
        microseconds), not for work queued on :attr:`stream`. Raises
        :class:`~eventapi.EventStateError` after :meth:`close` when no anchor was ever taken.
        """
        if self._anchor is None:
            self._check_usable("anchor")
            with self._using("anchor"):
                anchor, samples = self._take_anchor()
                self._keep_anchor(anchor, samples)  # the first anchor: nothing earlier to measure
        assert self._anchor is not None
        return self._anchor

    def export_chrome_trace(self, path: str | os.PathLike[str], *, slice_args: bool = True) -> None:
        """Write the spans this profiler retains (:attr:`spans`) to ``path`` as a Chrome trace.

        The same as ``eventapi.trace.export_chrome_trace(path, self)``: Trace Event JSON that
        Perfetto and ``chrome://tracing`` open. Collects first what was stopped and not
        collected yet, as :attr:`spans` does. ``slice_args=False`` leaves each slice's own
        values (depth, bound, duration) out of it, for viewers that group slices by their
        arguments (speedscope; see ``docs/traces.md``). The file is written whole or not at all;
        raises :class:`OSError` when ``path`` cannot be written.
        """
        from ..trace import export_chrome_trace  # the trace machinery is loaded on first use

        with self._using("export_chrome_trace"):
            export_chrome_trace(path, self, slice_args=slice_args)

    def table(self, *, sort_by: str = "total", limit: int | None = None) -> str:
        """:meth:`summary` as a text table for people: one row per name, a header, units.

        Rows are sorted by ``sort_by`` (``"total"``, ``"count"``, ``"mean"``, ``"median"``,
        ``"min"``, ``"max"`` or ``"name"``; largest first but for ``"name"``), at most ``limit``
        of them. Each duration column has one unit, chosen for its largest value, so the
        column reads down. Collects what is pending first, as :meth:`summary` does.
        """
        with self._using("table"):
            return stats_table(self.summary(), label=self._label, sort_by=sort_by, limit=limit)

    # -- windows ---------------------------------------------------------------------------------

    def window(self, name: str) -> Window[E]:
        """A window named ``name``, opened when its ``with`` block is entered.

        ``with prof.window("step"):`` records the start as the block is entered and the end as
        it is left; ``@prof.window("step")`` decorates a function so that each call runs in a
        window of its own, as torch's ``record_function`` does. Nothing is recorded until then.
        Raises :class:`TypeError` for a name that is not a ``str``.
        """
        if type(name) is not str and not isinstance(name, str):
            raise TypeError(f"a window name must be a str, got {name!r}")
        return Window(self, name)

    def start(self, name: str) -> Window[E]:
        """Open a window named ``name`` now: one event record into the stream, no wait.

        Returns the open :class:`Window`; stop it with :meth:`Window.stop`. When the stream is
        capturing a graph the window is skipped: nothing is recorded and :attr:`skipped` counts
        it. Raises :class:`~eventapi.EventStateError` after :meth:`close` and
        :class:`~eventapi.DriverError` when the backend's capture check or record fails
        (nothing is left open and the event goes back to the pool).
        """
        if type(name) is not str and not isinstance(name, str):
            raise TypeError(f"a window name must be a str, got {name!r}")
        window: Window[E] = Window(self, name)
        self._open_window(window, "start")
        return window

    def _open_window(self, window: Window[E], call: str) -> None:
        guard = self._guard
        if not guard.acquire(False):
            self._refuse_concurrent(call)
        try:
            self._busy = call
            if self._closed:
                self._check_usable(call)
            opened = self._open
            window._depth = len(opened)
            window._seq = self._seq = self._seq + 1
            event = self._record_edge()
            if event is None:
                self._skip(window)
                return
            window._start = event
            window._state = _OPEN
            opened.append(window)
            if self._nvtx is not None:
                self._nvtx.start(window._name)
        finally:
            guard.release()

    def _skip(self, window: Window[E]) -> None:
        window._skipped = True
        window._state = _OPEN  # open, holding nothing: its stop does nothing
        self._skipped += 1

    def _stop(self, window: Window[E]) -> None:
        guard = self._guard
        if not guard.acquire(False):
            self._refuse_concurrent("Window.stop")
        try:
            self._busy = "Window.stop"
            self._stop_held(window)
        finally:
            guard.release()

    def _stop_held(self, window: Window[E]) -> None:
        if self._closed or window._state != _OPEN or window._skipped:
            self._stop_unusual(window)
            return
        opened = self._open
        top = opened[-1]
        if top is not window:
            raise EventStateError(
                f"window {window.name!r} stopped while {top.name!r}, opened inside it, is still "
                f"open; stop {top.name!r} first (windows nest like with blocks)"
            )
        # Checked again, not left to collect(): a record into a capture would become part of
        # the user's graph, a dependency there and no timestamp.
        try:
            event = self._record_edge()
        except BaseException:
            # A window without an end can never be read; dropping it keeps the windows
            # around it stoppable. The check and the record fail alike: one fused call makes
            # both, and neither recorded anything.
            self._drop_top(window)
            raise
        if event is None:
            # The capture began while the window was open: its end is not recorded.
            self._drop_top(window)
            window._skipped = True
            self._skipped += 1
            return
        window._end = event
        opened.pop()
        if self._nvtx is not None:
            self._nvtx.end()
        window._state = _CLOSED
        self._pending.append(window)

    def _drop_top(self, window: Window[E]) -> None:
        """Close the innermost open window, ``window``, without recording its end."""
        self._open.pop()
        if self._nvtx is not None:
            self._nvtx.end()
        self._discard(window)

    def _stop_unusual(self, window: Window[E]) -> None:
        # A closed profiler, a window stopped twice, or a skipped window.
        if self._closed:
            raise EventStateError(
                f"window {window.name!r} cannot stop: its profiler was closed, which discarded "
                "every window still open"
            )
        if window._state == _NEW:
            raise EventStateError(
                f"window {window.name!r} cannot stop: it was never opened; enter it with "
                "`with profiler.window(name):`, or open one with profiler.start(name)"
            )
        if window._state != _OPEN:
            raise EventStateError(
                f"window {window.name!r} was already stopped; a window is one-shot, "
                "open a new one with profiler.window(name)"
            )
        window._state = _DONE  # skipped: nothing was recorded, nothing to record now

    def _stop_abandoning_above(self, window: Window[E]) -> None:
        """Discard the windows still open inside ``window``, then stop it: one guarded call."""
        with self._using("Window.stop"):
            self._abandon_above(window)
            self._stop_held(window)

    def _abandon_above(self, window: Window[E]) -> None:
        # Windows nest: those opened after ``window`` and still open are the top of the stack.
        # A skipped window is not on it, but the windows opened inside it once a capture
        # ended are.
        opened = self._open
        index = len(opened)
        while index and opened[index - 1]._seq > window._seq:
            index -= 1
        above = opened[index:]
        del opened[index:]
        if self._nvtx is not None:
            self._nvtx.end(len(above))
        for inner in above:
            self._discard(inner)
        if above:
            _log.warning(
                "%s: window %r exited with an exception while %s opened inside it were still "
                "open; those were discarded",
                self._label,
                window.name,
                ", ".join(repr(w.name) for w in above),
            )

    # -- readout ---------------------------------------------------------------------------------

    def collect(self) -> list[Span]:
        """Read back every window stopped since the last collect, in the order they opened.

        Blocks once, until the stream reaches the last end recorded, then takes a fresh anchor
        (:attr:`anchor`) and places each window on the host clock from it. Windows still open
        stay pending for a later collect. With nothing stopped, returns ``[]`` without waiting.

        Raises :class:`~eventapi.DriverError` from the wait, the anchor or a reading; the
        stopped windows then stay pending, so a later collect reads them again.
        :class:`~eventapi.EventStateError` after :meth:`close`.
        """
        self._check_usable("collect")
        with self._using("collect"):
            return self._collect()

    def summary(self) -> dict[str, Stats]:
        """Statistics of every window stopped so far, by name, in first-collected order.

        Collects first what was stopped and not collected yet (one wait, as :meth:`collect`
        does; the spans that collect reads go to :attr:`spans` and the sink, not returned), so
        it is never silently empty inside the profiler's ``with`` block. Windows still open
        are not in it. At most ``max_names`` names (see :attr:`unsummarized`); each in bounded
        memory, with the exactness :class:`Stats` states.
        """
        with self._using("summary"):
            self._collect_pending()
            return self._stats()

    def _stats(self) -> dict[str, Stats]:
        stats: dict[str, Stats] = {}
        for name, summary in self._summaries.items():
            ranks = summary.ranks()
            count = summary.count
            stats[name] = Stats(
                count=count,
                total_ns=summary.total_ns,
                min_ns=summary.min_ns,
                median_ns=quantile_of(ranks, count, 0.5),
                mean_ns=summary.total_ns // count,
                max_ns=summary.max_ns,
                rank_error=summary.rank_error,
                _ranks=ranks,
            )
        return stats

    def _collect(self) -> list[Span]:
        pending = self._pending
        if not pending:
            return []
        last_end = pending[-1]._end
        assert last_end is not None  # a pending window holds both events
        # One stream, in order: reaching the last end means every earlier record was reached.
        # The anchor, on the profiler's own stream, is recorded only after this returns, so it
        # lies after every window and waits for nothing queued behind them.
        self._api.event_wait(last_end)
        anchor, samples = self._take_anchor()
        try:
            reference = samples[0]
            earlier = self._earlier_than(reference)
            # Windows are pending in the order they stopped; spans go out in the order they
            # opened (the same order unless windows nest, and sorting sorted runs is linear).
            windows = sorted(pending, key=_opened)
            # The anchor lies after every window, so no reading of how far before it a window
            # started is clamped.
            starts: list[E] = [w._start for w in windows]  # type: ignore[misc]
            ends: list[E] = [w._end for w in windows]  # type: ignore[misc]
            durations, befores = self._read_windows(starts, ends, reference)
            placed = Placement(anchor, earlier).spans(befores, durations)
            label = self._label
            spans = [
                make_span(window._name, start_ns, end_ns, duration_ns, window._depth, label, bound)
                for window, duration_ns, (start_ns, end_ns, bound) in zip(
                    windows, durations, placed, strict=True
                )
            ]
        except BaseException:
            self._release_all(samples)
            raise
        self._keep_anchor(anchor, samples, earlier)
        self._finish(pending, starts, ends, spans)
        return spans

    def _finish(
        self, pending: list[Window[E]], starts: list[E], ends: list[E], spans: list[Span]
    ) -> None:
        """Every reading succeeded: only now do the windows give their events back."""
        free = self._pool.free
        free.extend(starts)
        free.extend(ends)
        for window in pending:
            window._start = window._end = None
            window._state = _DONE
        pending.clear()
        self._account(spans)

    def _account(self, spans: list[Span]) -> None:
        """Add ``spans`` to the summary and the retained spans, then hand them to the sink."""
        # Grouped by name first: each name's summary then takes its durations in one call.
        durations: dict[str, list[int]] = {}
        for span in spans:
            of_name = durations.get(span.name)
            if of_name is None:
                of_name = durations[span.name] = []
            of_name.append(span.duration_ns)
        summaries = self._summaries
        for name, of_name in durations.items():
            summary = summaries.get(name)
            if summary is None:
                if len(summaries) >= self._max_names:
                    if self._unsummarized == 0:
                        _log.warning(
                            "%s: summary() already tracks max_names=%d names; spans of further "
                            "names (first: %r) are left out of it and counted in unsummarized",
                            self._label,
                            self._max_names,
                            name,
                        )
                    self._unsummarized += len(of_name)
                    continue
                summary = summaries[name] = DurationSummary()
            summary.extend(of_name)
        self._spans.extend(spans)
        self._spans_seen += len(spans)
        sink = self._sink
        if sink is not None:
            for span in spans:
                sink(span)

    def _take_anchor(self) -> tuple[Anchor, list[E]]:
        """Sample an anchor; returns it and the sample events, the anchor's own one first."""
        if self._anchor_target is None:
            # The stream is kept as soon as it exists (close destroys it); the target only once
            # adopted, so that a failed adopt is tried again by the next collect.
            if self._anchor_stream is None:
                self._anchor_stream = self._api.stream_create_non_blocking()
            stream, fast = self._anchor_stream, self._fast
            self._anchor_target = stream if fast is None else fast.adopt_stream(stream)
        samples: list[E] = []
        try:
            for _ in range(ANCHOR_SAMPLES):
                samples.append(self._pool.acquire())
            anchor, best = sample_anchor(self._api, self._anchor_target, samples)
        except BaseException:
            self._release_all(samples)
            raise
        samples.remove(best)
        samples.insert(0, best)
        return anchor, samples

    def _earlier_than(self, reference: E) -> tuple[Earlier, ...]:
        """The earlier anchors as seen from the new anchor event ``reference``."""
        previous, kept = self._anchor, self._anchor_event
        if previous is None or kept is None:
            return ()
        interval = self._elapsed(kept, reference)
        return (
            *(e.advanced(interval) for e in self._earlier),
            Earlier(previous, 0, 0.0).advanced(interval),
        )

    def _keep_anchor(
        self, anchor: Anchor, samples: list[E], earlier: tuple[Earlier, ...] = ()
    ) -> None:
        """Make ``anchor`` the latest; keep its event (``samples[0]``) to measure the next one."""
        if self._anchor_event is not None:
            self._pool.release(self._anchor_event)
        self._anchor_event = samples.pop(0)
        self._release_all(samples)
        self._anchor = anchor
        self._earlier.clear()
        self._earlier.extend(earlier)

    # -- lifecycle -------------------------------------------------------------------------------

    def close(self) -> None:
        """Read back what is pending, then release every event and the streams it created.

        Blocks until the stream reaches what was recorded. Windows stopped but not collected
        are collected into :meth:`summary`, the retained spans and the sink (their spans are
        not returned: call :meth:`collect` first to get them). Windows still open are
        discarded with a warning on the ``eventapi`` logger: a window without an end has no
        duration. Idempotent; also runs on ``with`` exit. A driver error from the final
        readout (or an exception from the sink) is raised after everything was released; a
        failed destroy is only logged.
        """
        if self._closed:
            return
        with self._using("close"):
            try:
                if self._open and not self._pending:
                    # Nothing else will wait: let the stream reach what was recorded before
                    # its events are destroyed.
                    newest = self._open[-1]._start
                    assert newest is not None
                    self._api.event_wait(newest)
                self._collect()
            except Exception:
                self._close_now()
                raise
            # An interrupt (KeyboardInterrupt, SystemExit) propagates with nothing released: the
            # windows stopped stay pending, so a later close() (or summary()) still reads them.
            self._close_now()

    def _close_now(self) -> None:
        self._closed = True
        if self._open:
            _log.warning(
                "%s: profiler closed with windows still open (%s); they were discarded",
                self._label,
                ", ".join(repr(w.name) for w in self._open),
            )
        self._release_everything()

    def __enter__(self) -> EventProfiler[E, S]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        # Safety net for a profiler dropped without close(): release without waiting and log.
        if getattr(self, "_closed", True) or sys.is_finalizing():
            return
        self._closed = True
        try:
            _log.warning(
                "%s: EventProfiler dropped without close(); its events were released unread",
                self._label,
            )
            self._release_everything()
        except Exception:  # a finalizer has nowhere to raise to
            _log.warning("%s: releasing a dropped profiler failed", self._label, exc_info=True)

    def __repr__(self) -> str:
        state = (
            "closed" if self._closed else f"{len(self._open)} open, {len(self._pending)} pending"
        )
        return f"<EventProfiler {self._label} {state}>"

    # -- bookkeeping -----------------------------------------------------------------------------

    def _collect_pending(self) -> None:
        """What the readers do first: collect what was stopped and not collected yet."""
        if self._pending and not self._closed:
            self._collect()

    def _using(self, call: str) -> _Using:
        """A ``with`` holding the profiler for ``call``; refuses it while another thread is in."""
        return _Using(self, call)

    def _refuse_concurrent(self, call: str) -> NoReturn:
        raise EventStateError(
            f"{self._label}: EventProfiler.{call} refused: another thread is inside "
            f"EventProfiler.{self._busy or 'a call'} on the same profiler. A profiler is used by "
            "one thread at a time: hand it from one thread to the other between calls, or hold "
            "a lock of your own around every use of it (see docs/profiling.md)"
        )

    def _check_usable(self, call: str) -> None:
        if self._closed:
            raise EventStateError(
                f"{self._label}: {call} on a closed EventProfiler; create a new profiler"
            )

    def _record_edge(self) -> E | None:
        """A pool event recorded into the stream: a window's start or end.

        None, recording nothing and taking no event, while the stream is capturing a graph.
        With the fast path and a free event, the capture check and the record are one backend
        call, back to back; otherwise the check comes first, so that a window skipped or refused
        creates no event. A failure gives the event back to the pool and raises.
        """
        free = self._pool.free
        screened = self._screened
        if screened is not None and free:
            event = free.pop()
            try:
                recorded = screened(event, self._target)
            except BaseException:
                free.append(event)
                raise
            if recorded:
                return event
            free.append(event)
            return None
        capture_check = self._capture_check
        if capture_check is not None and capture_check(self._target):
            return None
        pool = self._pool
        event = pool.acquire()
        try:
            self._record_into(event, self._target)
        except BaseException:
            pool.release(event)
            raise
        return event

    def _discard(self, window: Window[E]) -> None:
        """Mark ``window`` done and give its events back to the pool."""
        window._state = _DONE
        for event in (window._start, window._end):
            if event is not None:
                self._pool.release(event)
        window._start = window._end = None

    def _release_all(self, events: list[E]) -> None:
        for event in events:
            self._pool.release(event)
        events.clear()

    def _release_everything(self) -> None:
        if self._nvtx is not None:
            self._nvtx.end_all()
        for window in (*self._open, *self._pending):
            self._discard(window)
        self._open.clear()
        self._pending.clear()
        if self._anchor_event is not None:
            self._pool.release(self._anchor_event)
            self._anchor_event = None
        self._pool.close()
        streams = [self._anchor_stream] if self._anchor_stream is not None else []
        self._anchor_stream = None
        if self._owns_stream:
            self._owns_stream = False
            streams.append(self._stream)
        for stream in streams:
            try:
                self._api.stream_destroy(stream)
            except Exception:
                _log.warning(
                    "%s: destroying a stream of the profiler failed", self._label, exc_info=True
                )


@final
class _Using:
    """Holds a profiler's guard for one call; see :meth:`EventProfiler._using`."""

    __slots__ = ("_call", "_profiler")

    def __init__(self, profiler: EventProfiler[Any, Any], call: str) -> None:
        self._profiler = profiler
        self._call = call

    def __enter__(self) -> None:
        profiler = self._profiler
        if not profiler._guard.acquire(False):
            profiler._refuse_concurrent(self._call)
        profiler._busy = self._call

    def __exit__(self, *exc: object) -> None:
        self._profiler._guard.release()
