"""Profiling windows on a stream: device durations read back in one batch, placed on the host clock.

A window is two events recorded into the profiler's stream, one when it opens and one when it
stops. Nothing waits while windows open and close; :meth:`EventProfiler.collect` waits once for
everything closed so far, takes a fresh :class:`~eventapi.Anchor` after it (on a stream of the
profiler's own, so it waits for nothing queued after the windows), and reads each window's
device duration and its place on the host clock. Events come from a pool and go back to it
after readout, so a window costs two records, not two creations; all other work (placement,
spans, statistics, retention) is done in batches in ``collect()``.

A window's two edges are one frame of Python each around the backend's call (``__enter__`` and
``__exit__``, or ``start()`` and ``stop()``): the state of a window is its own ``__slots__``,
and the profiler's is a stack of the windows open (they nest like ``with`` blocks), a list of
those not read back yet in the order they opened, and the pool.

Threads and re-entry. A profiler is used by one thread at a time. Its readers (``collect``,
``close``, ``summary``, ``spans``, ``table``, ``export_chrome_trace``, the first ``anchor``)
claim it for the call; a window opened or stopped by another thread meanwhile is refused with
:class:`~eventapi.EventStateError` naming both calls, and so is a second reader. On the
profiler's own thread, a signal handler or a finalizer that runs inside a reader may open and
stop windows: the reader reads what was stopped when it began, and those windows wait for the
next collect, never dropped; a reader called from such a handler is refused, naming the one it
interrupted. The sink is called once the profiler is released. Two threads opening and stopping
windows at once, with no reader between them, is not detected: hold a lock of your own around
each use to share a profiler (``docs/profiling.md``).

A long-running program stays in bounded memory: :meth:`EventProfiler.summary` keeps exact
sums and a bounded sketch per name (:mod:`eventapi._profiling._sketch`) for at most
``max_names`` names, and at most ``max_spans`` collected spans are retained for export.

Windows inside captured graphs (``in_graphs=True``) always take the long way: an edge on a
capturing stream records a node of the graph (:mod:`eventapi._profiling._graphs` keeps them and
reads them at each collect), any other edge is made as on a profiler at rest.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import sys
import threading
from collections import defaultdict, deque
from collections.abc import Callable
from functools import partial, wraps
from typing import Any, Final, Generic, ParamSpec, TypeVar, cast, final

from .._arguments import bounded_repr, check_int
from .._errors import EventStateError, UnsupportedError
from .._protocol import (
    Capabilities,
    EventApi,
    SupportsCaptureCheck,
    SupportsFastPath,
    capabilities_of,
)
from .._single_owner import SingleOwner
from ._anchor import ANCHOR_SAMPLES, RATE_HISTORY, Anchor, Earlier, Placement, sample_anchor
from ._graphs import GraphWindows
from ._nvtx import Ranges, ranges_for
from ._sketch import DurationSummary, quantile_of
from ._span import Span, Stats, spans_of
from ._table import stats_table

__all__ = ["EventProfiler", "Span", "Stats", "Window"]

_log = logging.getLogger("eventapi")

E = TypeVar("E")
S = TypeVar("S")
P = ParamSpec("P")
R = TypeVar("R")

# A window's state. A skipped one opened or stopped while the stream captured a graph: it holds
# no event, and is on neither the stack nor the pending list. One in a graph (in_graphs=True)
# is on the stack while open, then with the profiler's GraphWindows, never pending.
_NEW: Final = 0  # made by window(), opened when its with block is entered
_OPEN: Final = 1  # start recorded, on the stack and the pending list
_STOPPED: Final = 2  # end recorded, pending until collect() reads it
_DONE: Final = 3  # read back, or discarded
_IN_GRAPH: Final = 4  # open, its start a node of the graph being captured
_GRAPH_STOPPED: Final = 5  # both edges nodes of the graph, read at each collect after a launch
_SKIPPED: Final = 6  # open, but skipped: its stop records nothing
_SKIPPED_DONE: Final = 7

# Why a window's edges go the long way (EventProfiler._detour), besides a reader's
# ``(call, thread ident)``: each edge then opens or ends a tool range too, or may record into a
# graph, or is refused.
_UNUSUAL: Final = "tool ranges or windows in graphs"
_CLOSED: Final = "closed"

_labels = itertools.count()
_new: Final = object.__new__


@final
class Window(SingleOwner, Generic[E]):
    """One profiling window, made by :meth:`EventProfiler.window` or :meth:`EventProfiler.start`.

    A window from :meth:`EventProfiler.start` is open at once; one from
    :meth:`EventProfiler.window` opens when its ``with`` block is entered, and as a decorator
    (``@prof.window("step")``) opens a fresh window around each call of the function. One-shot:
    :meth:`stop` once, or leave the ``with`` block. A window opened while the stream was
    capturing a graph is *skipped*: it holds no event and its :meth:`stop` and ``with`` exit do
    nothing, unless its profiler was made with ``in_graphs=True``, which records it into the
    graph. A window a capture began inside of, or ended inside of, is skipped too, when it
    stops: its end is not recorded. Use it on the thread that uses its profiler. It holds its
    profiler's events: ``copy``, ``deepcopy`` and ``pickle`` raise :class:`TypeError`. Users
    receive windows; they never build one.
    """

    _COPY_HINT = "stop this window once and open a new one with profiler.window(name)"

    # _outer: the innermost window open when this one opened (None for an outermost one); the
    # profiler's innermost open window links to the others through it, as a stack.
    # Set by EventProfiler.window, the one place that makes a window: _profiler, _name and
    # _state at once, the others as the window opens and stops.
    __slots__ = ("_end", "_name", "_outer", "_profiler", "_start", "_state")
    _profiler: EventProfiler[E, Any]
    _name: str
    _state: int

    @property
    def name(self) -> str:
        """The name the window was opened with."""
        return self._name

    @property
    def depth(self) -> int:
        """How many windows of the same profiler were open when this one opened."""
        return len(_chain(self._outer)) if self._state else 0

    @property
    def skipped(self) -> bool:
        """True when the window was not (or not wholly) recorded because the stream was
        capturing a graph: as it opened, or (known once it stopped) as it stopped."""
        return self._state >= _SKIPPED

    @property
    def stopped(self) -> bool:
        """True once :meth:`stop` ran (or the window was skipped and stopped, or discarded)."""
        return self._state in (_STOPPED, _DONE, _GRAPH_STOPPED, _SKIPPED_DONE)

    def stop(self) -> None:
        """Record the window's end into the stream; never waits for the device.

        Raises :class:`~eventapi.EventStateError` when the window was already stopped, when a
        window opened inside it is still open (windows nest like ``with`` blocks: stop the
        inner one first), or when its profiler was closed; :class:`~eventapi.DriverError` when
        the capture check or the record fails, in which case the window is discarded and its
        event reused.
        """
        self.__exit__(None, None, None)

    def __enter__(self) -> Window[E]:
        # One frame around the backend's fused call (see the module docstring): the checks
        # that a window not opened yet, on a profiler at rest, passes.
        prof = self._profiler
        if self._state or prof._detour is not None:
            prof._open_unusually(self)
            return self
        try:
            event = prof._free.pop()
        except IndexError:  # the pool is empty
            event = prof._create()
        try:
            recorded = prof._record(event, prof._target)
        except BaseException:
            prof._free.append(event)
            raise
        if recorded:
            self._start = event
            self._outer = prof._top
            # On the stack first, then pending: a collect on another thread that sees the
            # window pending sees a window open, and reads only stopped ones.
            prof._top = self
            prof._pending.append(self)
            self._state = _OPEN
        else:
            # Skipped: not on the stack, but what was open when it opened is known, so that an
            # exception leaving its block abandons what opened inside it.
            prof._free.append(event)
            self._outer = prof._top
            self._state = _SKIPPED
            prof._skipped += 1
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        # The innermost open window of a profiler at rest stops here, an exception leaving its
        # block or not (the block ended: so did the window). Anything else goes the long way.
        prof = self._profiler
        if prof._top is not self or prof._detour is not None:
            prof._stop_unusually(self, exc)
            return
        try:
            event = prof._free.pop()
        except IndexError:
            event = prof._create()
        try:
            # Checked again, not left to collect(): a record into a capture would become part
            # of the user's graph, a dependency there and no timestamp.
            recorded = prof._record(event, prof._target)
        except BaseException:
            # A window without an end can never be read; dropping it keeps the windows around
            # it stoppable. The check and the record fail alike: one fused call makes both.
            prof._free.append(event)
            prof._drop_top(self, _DONE)
            raise
        if not recorded:  # the capture began while the window was open
            prof._free.append(event)
            prof._drop_top(self, _SKIPPED_DONE)
            return
        self._end = prof._last_end = event
        self._state = _STOPPED
        prof._top = self._outer

    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]:
        """Decorate ``fn``: each call runs inside a fresh window of this name, as a ``with`` would.

        Only a window not opened yet (from :meth:`EventProfiler.window`) decorates; the window
        itself is never opened, it names the ones each call opens.
        """
        if self._state != _NEW or not callable(fn):
            raise TypeError(
                f"window {self._name!r} cannot decorate {bounded_repr(fn)}: decorate a function "
                "with @profiler.window(name), whose window is not opened yet"
            )
        profiler, name = self._profiler, self._name

        @wraps(fn)
        def timed(*args: P.args, **kwargs: P.kwargs) -> R:
            with profiler.window(name):
                return fn(*args, **kwargs)

        return timed

    def __repr__(self) -> str:
        state = (
            "not opened",
            "open",
            "stopped",
            "done",
            "open in a graph",
            "stopped in a graph",
            "skipped",
        )[min(self._state, _SKIPPED)]  # a skipped window reads so, stopped or not
        return f"<Window {self._name!r} depth={self.depth} {state}>"


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
    thread, once the profiler is free again, so a long job can write all of them out; an
    exception it raises propagates from that collect, and the spans after it in that batch are
    not passed to it.

    The anchor is taken on a second stream that the profiler creates (at the first anchor) and
    destroys on :meth:`close`: it compares events of two streams of one device, which CUDA,
    HIP and the host backend allow, and so never waits for work queued after the windows.

    Graphs: by default a window opened while the stream captures a graph is skipped (counted in
    :attr:`skipped`), and nothing of the profiler enters the graph. With ``in_graphs=True`` it is
    recorded into the graph instead, as event-record nodes that each launch of the graph
    stamps, and every :meth:`collect` after a launch reads it again: one span per window, of the
    latest launch (``docs/profiling.md`` states the rules: what a collect with no launch since
    the last one gives, a window half in a capture, a graph never launched, and why the
    profiler must be closed after the graph's last launch). That needs a backend with
    :class:`~eventapi.SupportsCaptureCheck` and :class:`~eventapi.SupportsGraphRecord`
    (:class:`~eventapi.UnsupportedError` otherwise); its windows always take the long way.

    Threads: a profiler is used by one thread at a time. It may move between threads (a server
    hands it from the thread that launches the work to a collector, say). While one thread is
    inside a reader (:meth:`collect`, :meth:`close`, :meth:`summary`, :attr:`spans`,
    :meth:`table`, :meth:`export_chrome_trace`, the first read of :attr:`anchor`), another
    thread's call is refused with :class:`~eventapi.EventStateError` naming both calls, and
    nothing is lost or changed by the refused call. A signal handler or a finalizer that runs
    on the profiler's own thread inside a reader may open and stop windows, which the next
    collect reads. To share one profiler between threads, hold a lock of your own around each
    use (``docs/profiling.md`` shows both). Opening and stopping windows never blocks;
    :meth:`collect`, :meth:`close` and reading the results wait for the last window stopped,
    and the first read of :attr:`anchor` for the anchor's own events.

    A profiler owns its events and streams: ``copy``, ``deepcopy`` and ``pickle`` raise
    :class:`TypeError`. Raises :class:`TypeError` when ``api`` is not a backend object, or for a
    ``label``, ``max_names``, ``max_spans`` or ``in_graphs`` of the wrong type;
    :class:`ValueError` for a negative one; :class:`~eventapi.DriverError` when the backend
    refuses the stream or an event; :class:`~eventapi.EventStateError` for a stream the backend
    refuses (destroyed, or not one it can use); and :class:`~eventapi.UnsupportedError` for
    ``in_graphs=True`` on a backend without what it needs.
    """

    _COPY_HINT = "share the profiler itself, or create another EventProfiler"

    __slots__ = (
        "__weakref__",
        "_anchor",
        "_anchor_event",
        "_anchor_stream",
        "_anchor_target",
        "_api",
        "_at_rest",
        "_claim",
        "_closed",
        "_create",
        "_detour",
        "_earlier",
        "_free",
        "_graphs",
        "_label",
        "_last_end",
        "_max_names",
        "_owns_stream",
        "_pending",
        "_ranges",
        "_read_pairs",
        "_record",
        "_sink",
        "_skipped",
        "_spans",
        "_spans_seen",
        "_stream",
        "_summaries",
        "_target",
        "_top",
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
        in_graphs: bool = False,
    ) -> None:
        capable = capabilities_of(api, "EventProfiler")  # TypeError for a non-backend
        max_names, max_spans = _checked(label, max_names, max_spans, sink, in_graphs)
        # Every slot is set before anything else can fail, so the finalizer always finds them.
        self._api = api
        self._closed = True
        self._owns_stream = False
        self._label = label if label is not None else f"profiler-{next(_labels)}"
        self._claim = threading.Lock()  # held by a reader for its call (see _Reading)
        # Why a window's edges go the long way, None when they need not (see _UNUSUAL): the
        # reader holding the profiler and its thread, tool ranges to open and end, or a close.
        # Between readers it is _at_rest.
        self._detour: object = _CLOSED
        self._at_rest: object = _CLOSED
        self._top: Window[E] | None = None  # the innermost open window
        self._pending: list[Window[E]] = []
        # The pool: free events, taken by windows and anchors and given back once read, so that
        # a window costs records, not creations. It grows to the most ever in flight at once.
        self._free: list[E] = []
        self._last_end: E | None = None
        self._summaries: dict[str, DurationSummary] = {}
        self._max_names = max_names
        self._unsummarized = 0
        self._spans: deque[Span] = deque(maxlen=max_spans)
        self._spans_seen = 0
        self._sink = sink
        self._anchor: Anchor | None = None
        self._anchor_event: E | None = None  # the latest anchor's event, kept out of the pool
        self._anchor_stream: S | None = None  # created at the first anchor
        self._anchor_target: Any = None  # what the anchor records into (see _target_of)
        # Earlier anchors, seen from the latest one, to measure the clock rate over.
        self._earlier: tuple[Earlier, ...] = ()
        self._skipped = 0
        self._ranges: Ranges | None = ranges_for(api.BACKEND)
        # Before the stream: UnsupportedError for a backend without what it needs.
        self._graphs = _graph_windows(api, capable) if in_graphs else None
        # The calls a window's edges and a collect make, bound once: the backend's fused ones
        # where it has SupportsFastPath, else the plain calls they stand for. Bound to the
        # api's calls, never to this object: a bound method of its own kept in an attribute
        # would hold the profiler in a reference cycle.
        self._create = api.event_create
        if capable.fast_path:
            fused = cast("SupportsFastPath[E, Any]", api)
            self._record: Callable[[E, Any], bool] = fused.event_record_unless_capturing
            self._read_pairs: Callable[[list[E], list[E]], list[int]] = fused.event_elapsed_many
        else:
            capturing = (
                cast("SupportsCaptureCheck[Any]", api).stream_is_capturing
                if capable.capture_check
                else None
            )
            self._record = partial(_record_unless_capturing, api.event_record, capturing)
            self._read_pairs = lambda firsts, seconds: list(map(api.event_elapsed, firsts, seconds))
        self._stream: S = api.stream_create_non_blocking() if stream is None else stream
        self._owns_stream = stream is None
        try:
            self._target = self._target_of(self._stream)
        except BaseException as exc:
            self._release_everything()
            if isinstance(exc, EventStateError):
                raise EventStateError(f"EventProfiler(api, stream): {exc}") from exc
            raise
        self._closed = False
        usual = self._ranges is None and self._graphs is None
        self._detour = self._at_rest = None if usual else _UNUSUAL

    def _target_of(self, stream: S) -> Any:
        """What windows (or anchors) on ``stream`` record into: the stream itself, or with the
        fast path the backend's own handle for it, adopted once (so a foreign stream is refused
        here rather than at the first record, and a framework's is not adopted at every one)."""
        if capabilities_of(self._api, "EventProfiler").fast_path:
            return cast("SupportsFastPath[E, Any]", self._api).adopt_stream(stream)
        return stream

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
        with _Reading(self, "spans"):
            collected = self._collect_pending()
            spans = tuple(self._spans)
        self._to_sink(collected)
        return spans

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
            with _Reading(self, "anchor"):
                if self._anchor is None:
                    anchor, samples = self._take_anchor()
                    self._keep_anchor(anchor, samples)  # the first: nothing earlier to measure
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

        export_chrome_trace(path, self, slice_args=slice_args)

    def table(self, *, sort_by: str = "total", limit: int | None = None) -> str:
        """:meth:`summary` as a text table for people: one row per name, a header, units.

        Rows are sorted by ``sort_by`` (``"total"``, ``"count"``, ``"mean"``, ``"median"``,
        ``"min"``, ``"max"`` or ``"name"``; largest first but for ``"name"``), at most ``limit``
        of them. Each duration column has one unit, chosen for its largest value, so the
        column reads down. Collects what is pending first, as :meth:`summary` does.
        """
        return stats_table(self.summary(), label=self._label, sort_by=sort_by, limit=limit)

    # -- windows ---------------------------------------------------------------------------------

    def window(self, name: str) -> Window[E]:
        """A window named ``name``, opened when its ``with`` block is entered.

        ``with prof.window("step"):`` records the start as the block is entered and the end as
        it is left; ``@prof.window("step")`` decorates a function so that each call runs in a
        window of its own, as torch's ``record_function`` does. Nothing is recorded until then.
        Raises :class:`TypeError` for a name that is not a ``str``.
        """
        if not isinstance(name, str):
            raise TypeError(f"a window name must be a str, got {bounded_repr(name)}")
        # No __init__: a constructor would be a frame of its own on every window's path.
        window: Window[E] = _new(Window)
        window._profiler = self
        window._name = name
        window._state = _NEW
        return window

    def start(self, name: str) -> Window[E]:
        """Open a window named ``name`` now: one event record into the stream, no wait.

        Returns the open :class:`Window`; stop it with :meth:`Window.stop`. When the stream is
        capturing a graph the window is skipped: nothing is recorded and :attr:`skipped` counts
        it. Raises :class:`~eventapi.EventStateError` after :meth:`close` and
        :class:`~eventapi.DriverError` when the backend's capture check or record fails
        (nothing is left open and the event goes back to the pool).
        """
        return self.window(name).__enter__()

    def _open_unusually(self, window: Window[E]) -> None:
        # A window opened twice or after its stop, or a profiler not at rest: closed, with
        # tool ranges, or held by a reader. On the reader's own thread (a signal handler or a
        # finalizer inside it) the window opens as any other; on another it is refused.
        self._check_usable(f"opening window {window._name!r}")
        if window._state != _NEW:
            raise EventStateError(
                f"window {window._name!r} was already opened; a window is one-shot, open a new "
                "one with profiler.window(name)"
            )
        self._refuse_other_thread("EventProfiler.start")
        graphs = self._graphs
        start = None if graphs is None else self._graph_edge(graphs)
        if graphs is None or start is None:
            self._as_edge(window.__enter__)
        else:
            window._start = start
            window._outer = self._top
            self._top = window
            window._state = _IN_GRAPH
            graphs.open(window, window._name, window.depth, start)
        if self._ranges is not None and window._state in (_OPEN, _IN_GRAPH):
            self._ranges.start(window._name)

    def _stop_unusually(self, window: Window[E], exc: BaseException | None) -> None:
        # A closed profiler, a window stopped twice or never opened, a skipped one, an inner
        # window still open, or a profiler not at rest.
        state = window._state
        if self._closed:
            raise EventStateError(
                f"window {window._name!r} cannot stop: its profiler was closed, which discarded "
                "every window still open"
            )
        if state == _NEW:
            raise EventStateError(
                f"window {window._name!r} cannot stop: it was never opened; enter it with "
                "`with profiler.window(name):`, or open one with profiler.start(name)"
            )
        if state == _SKIPPED:
            window._state = _SKIPPED_DONE  # nothing was recorded, nothing to record now
            if exc is not None:
                self._abandon_inside(window, window._outer)
            return
        if state not in (_OPEN, _IN_GRAPH):
            raise EventStateError(
                f"window {window._name!r} was already stopped; a window is one-shot, "
                "open a new one with profiler.window(name)"
            )
        self._refuse_other_thread("Window.stop")
        top = self._top
        if exc is not None:
            # An exception skipped the stop() of windows started inside this block: abandon
            # them rather than hide the exception under an out-of-order error.
            self._abandon_inside(window, window)
        elif top is not window:
            assert top is not None  # the window is open, so on the stack
            raise EventStateError(
                f"window {window._name!r} stopped while {top._name!r}, opened inside it, is "
                f"still open; stop {top._name!r} first (windows nest like with blocks)"
            )
        if state == _IN_GRAPH:
            self._stop_in_graph(window)
        else:
            self._as_edge(window.stop)
        if self._ranges is not None and window._state in (_STOPPED, _GRAPH_STOPPED):
            self._ranges.end()

    def _graph_edge(self, graphs: GraphWindows[E]) -> E | None:
        """A window's edge as a node of the graph the stream captures; None, recording
        nothing, when it captures none. The event is a new one, never recorded: until a launch
        stamps it, a reading fails, which tells a graph not run yet."""
        if not graphs.capturing(self._target):
            return None
        event = self._create()
        try:
            graphs.record(event, self._target)
        except BaseException:
            self._free.append(event)  # not recorded: as good as any pooled event
            raise
        return event

    def _stop_in_graph(self, window: Window[E]) -> None:
        # The end as a node of the same capture; a window whose capture ended while it was open
        # is half in a graph, and skipped (its start stays with the graph, which may stamp it).
        graphs = self._graphs
        assert graphs is not None  # in_graphs=True
        try:
            end = self._graph_edge(graphs)
        except BaseException:
            # As a window's stop that fails: dropped, so the windows around it still stop.
            self._drop_top(window, _DONE)
            raise
        if end is None:
            self._drop_top(window, _SKIPPED_DONE)
            return
        window._end = end
        window._state = _GRAPH_STOPPED
        self._top = window._outer
        graphs.stop(window, end)

    def _as_edge(self, edge: Callable[[], object]) -> None:
        # The edge's own frame, run as on a profiler at rest: the caller took the long way's
        # decisions (a reader on this thread, tool ranges).
        detour, self._detour = self._detour, None
        try:
            edge()
        finally:
            self._detour = detour

    def _drop_top(self, window: Window[E], state: int) -> None:
        """Close the innermost open window, ``window``, without recording its end."""
        self._unwind(window._outer)
        if state == _SKIPPED_DONE:
            window._state = _SKIPPED_DONE
            self._skipped += 1

    def _abandon_inside(self, window: Window[E], outer: Window[E] | None) -> None:
        # Windows nest: those opened inside ``window`` and still open lie above ``outer`` on
        # the stack (``window`` itself, or for a skipped one what was open when it opened).
        if outer is not None and outer not in _chain(self._top):
            return  # what was open around it was stopped since: nothing inside is open
        above = self._unwind(outer)
        if above:
            _log.warning(
                "%s: window %r exited with an exception while %s opened inside it were still "
                "open; those were discarded",
                self._label,
                window._name,
                ", ".join(repr(w._name) for w in reversed(above)),
            )

    def _unwind(self, outer: Window[E] | None) -> list[Window[E]]:
        """Discard the windows open inside ``outer`` (every one, for None) and end their tool
        ranges, recording no end; returns them, innermost first."""
        opened = _chain(self._top)
        above = opened[: opened.index(outer)] if outer is not None else opened
        self._top = outer
        if self._ranges is not None:
            self._ranges.end(len(above))
        for window in above:
            self._discard(window)
        return above

    def _discard(self, window: Window[E]) -> None:
        """Mark ``window`` done, take it off the pending list, and give its events back.

        Once: a window open is also pending, and a close discards both kinds.
        """
        state = window._state
        if state == _DONE:
            return
        window._state = _DONE
        if state == _IN_GRAPH:
            # Its start is in a graph, which may stamp it at any launch: kept until close.
            assert self._graphs is not None
            self._graphs.drop(window)
            return
        with contextlib.suppress(ValueError):  # a collect on another thread read it already
            self._pending.remove(window)
        self._free.append(window._start)
        if state == _STOPPED:
            self._free.append(window._end)

    # -- readout ---------------------------------------------------------------------------------

    def collect(self) -> list[Span]:
        """Read back every window stopped since the last collect, in the order they opened.

        Blocks once, until the stream reaches the last end recorded, then takes a fresh anchor
        (:attr:`anchor`) and places each window on the host clock from it. Windows still open
        stay pending for a later collect. With nothing stopped, returns ``[]`` without waiting.

        With ``in_graphs=True``, the windows recorded into graphs follow, in the order they
        opened: one span each of those whose graph ran since the collect that last read them,
        from its latest launch (this waits for that launch). A graph launched several times
        between two collects gives its latest launch only; one not launched since, or never,
        gives nothing.

        Raises :class:`~eventapi.DriverError` from the wait, the anchor or a reading; the
        stopped windows then stay pending, so a later collect reads them again.
        :class:`~eventapi.EventStateError` after :meth:`close`.
        """
        self._check_usable("collect")
        with _Reading(self, "collect"):
            spans = self._collect()
        self._to_sink(spans)
        return spans

    def summary(self) -> dict[str, Stats]:
        """Statistics of every window stopped so far, by name, in first-collected order.

        Collects first what was stopped and not collected yet (one wait, as :meth:`collect`
        does; the spans that collect reads go to :attr:`spans` and the sink, not returned), so
        it is never silently empty inside the profiler's ``with`` block. Windows still open
        are not in it. At most ``max_names`` names (see :attr:`unsummarized`); each in bounded
        memory, with the exactness :class:`Stats` states.
        """
        with _Reading(self, "summary"):
            spans = self._collect_pending()
            stats = {name: _stats_of(summary) for name, summary in self._summaries.items()}
        self._to_sink(spans)
        return stats

    def _collect(self) -> list[Span]:
        # With the profiler claimed. Reads the windows stopped when it began: windows a signal
        # handler or a finalizer opens or stops meanwhile, on this thread, stay pending.
        pending = self._pending
        taken = len(pending)
        graphs = self._graphs
        if not taken and graphs is None:
            return []
        if self._top is not None:  # windows still open stay pending
            windows = [w for w in pending[:taken] if w._state == _STOPPED]
        else:
            windows = pending[:taken]
        # One stream, in order: reaching the last end recorded means every earlier record was
        # reached. The anchor, on the profiler's own stream, is recorded only after this
        # returns, so it lies after every window and waits for nothing queued behind them.
        if windows:
            self._api.event_wait(self._last_end)  # type: ignore[arg-type]
        # Windows in graphs: those a launch stamped since they were last read, after their
        # latest launch was waited for.
        in_graphs = graphs.stamped(self._read_pairs) if graphs is not None else None
        if not windows and not in_graphs:
            return []
        anchor, samples = self._take_anchor()
        try:
            reference = samples[0]
            earlier = self._earlier_than(reference)
            # A column of each field, the windows in graphs after the others. own_starts and
            # own_ends stay lists of their own: their events go back to the pool, and the
            # graphs' events must not.
            own_starts: list[E] = [w._start for w in windows]
            own_ends: list[E] = [w._end for w in windows]
            starts, ends = own_starts, own_ends
            names = [w._name for w in windows]
            depths = _depths(windows)
            if in_graphs:
                starts = own_starts + [w.start for w in in_graphs]
                ends = own_ends + [cast("E", w.end) for w in in_graphs]
                names += [w.name for w in in_graphs]
                depths += [w.depth for w in in_graphs]
            # Each window's duration, then how far its start lies before the anchor: one call.
            count = len(starts)
            readings = self._read_pairs(starts + starts, ends + [reference] * count)
            durations = readings[:count]
            starts_ns, ends_ns, bounds = Placement(anchor, earlier).spans(
                readings[count:], durations
            )
            spans = spans_of(names, starts_ns, ends_ns, durations, depths, self._label, bounds)
        except BaseException:
            self._free.extend(samples)
            raise
        if in_graphs:
            # A sample of this anchor, reached after every launch read: those windows' mark.
            assert graphs is not None
            self._free.extend(graphs.read(in_graphs, samples.pop()))
        self._keep_anchor(anchor, samples, earlier)
        # Every reading succeeded: only now do the windows leave the list and give their
        # events back. What a handler added to the list meanwhile stays.
        if len(windows) == taken:
            del pending[:taken]
        else:
            for w in windows:
                w._state = _DONE
            pending[:taken] = [w for w in pending[:taken] if w._state != _DONE]
        self._free.extend(own_starts)
        self._free.extend(own_ends)
        self._account(names, durations, spans)
        return spans

    def _account(self, names: list[str], durations: list[int], spans: list[Span]) -> None:
        """Add the spans read, ``names[i]`` lasting ``durations[i]``, to the summary and the
        retained spans."""
        # Grouped by name first: each name's summary then takes its durations in one call.
        by_name: dict[str, list[int]]
        if names.count(names[0]) == len(names):  # one name, as a collect often has
            by_name = {names[0]: durations}
        else:
            by_name = defaultdict(list)
            for name, duration_ns in zip(names, durations, strict=True):
                by_name[name].append(duration_ns)
        summaries = self._summaries
        for name, of_name in by_name.items():
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

    def _to_sink(self, spans: list[Span]) -> None:
        # Once the profiler is free: a sink may read the profiler, or open windows.
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
            self._anchor_target = self._target_of(self._anchor_stream)
        samples: list[E] = []
        try:
            for _ in range(ANCHOR_SAMPLES):
                samples.append(self._free.pop() if self._free else self._create())
            anchor, best = sample_anchor(self._api, self._anchor_target, samples)
        except BaseException:
            self._free.extend(samples)
            raise
        samples.remove(best)
        samples.insert(0, best)
        return anchor, samples

    def _earlier_than(self, reference: E) -> tuple[Earlier, ...]:
        """The earlier anchors as seen from the new anchor event ``reference``."""
        previous, kept = self._anchor, self._anchor_event
        if previous is None or kept is None:
            return ()
        interval = self._api.event_elapsed(kept, reference)
        return (
            *(e.advanced(interval) for e in self._earlier),
            Earlier(previous, 0, 0.0).advanced(interval),
        )

    def _keep_anchor(
        self, anchor: Anchor, samples: list[E], earlier: tuple[Earlier, ...] = ()
    ) -> None:
        """Make ``anchor`` the latest; keep its event (``samples[0]``) to measure the next one."""
        if self._anchor_event is not None:
            self._free.append(self._anchor_event)
        self._anchor_event = samples.pop(0)
        self._free.extend(samples)
        self._anchor = anchor
        self._earlier = earlier[-RATE_HISTORY:]

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
        with _Reading(self, "close"):
            try:
                # The latest start of a window still open: the stream reaches it before its
                # events are destroyed (the collect waits for the ends). Not one in a graph:
                # its capture may go on, where a wait would spoil it.
                opened = [w for w in _chain(self._top) if w._state == _OPEN]
                if opened:
                    self._api.event_wait(opened[0]._start)
                spans = self._collect()
            except Exception:
                self._close_now()
                raise
            # An interrupt (KeyboardInterrupt, SystemExit) propagates with nothing released:
            # the windows stopped stay pending, so a later close() (or summary()) reads them.
            self._close_now()
        self._to_sink(spans)

    def _close_now(self) -> None:
        self._closed = True
        opened = _chain(self._top)
        if opened:
            _log.warning(
                "%s: profiler closed with windows still open (%s); they were discarded",
                self._label,
                ", ".join(repr(w._name) for w in reversed(opened)),
            )
        self._release_everything()

    def __enter__(self) -> EventProfiler[E, S]:
        return self

    def __exit__(self, *exc_info: object) -> None:
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
        if self._closed:
            return f"<EventProfiler {self._label} closed>"
        opened = len(_chain(self._top))
        return f"<EventProfiler {self._label} {opened} open, {len(self._pending)} pending>"

    # -- bookkeeping -----------------------------------------------------------------------------

    def _collect_pending(self) -> list[Span]:
        """What the readers do first: collect what was stopped and not collected yet."""
        return [] if self._closed else self._collect()

    def _refuse_other_thread(self, call: str) -> None:
        # An edge while a reader holds the profiler: allowed on the reader's own thread (a
        # handler or a finalizer inside it), refused on another.
        held = self._detour
        if type(held) is tuple and held[1] != threading.get_ident():
            raise EventStateError(_refusal(self._label, call, held[0]))

    def _check_usable(self, call: str) -> None:
        if self._closed:
            raise EventStateError(
                f"{self._label}: {call} on a closed EventProfiler; create a new profiler"
            )

    def _release_everything(self) -> None:
        # Every later edge goes the long way, and is refused there.
        self._detour = self._at_rest = _CLOSED
        self._unwind(None)
        for window in tuple(self._pending):
            self._discard(window)
        if self._anchor_event is not None:
            self._free.append(self._anchor_event)
            self._anchor_event = None
        if self._graphs is not None:  # the graphs are done with them: see docs/profiling.md
            self._free.extend(self._graphs.release())
        free, self._free = self._free, []
        streams = [self._anchor_stream] if self._anchor_stream is not None else []
        self._anchor_stream = None
        if self._owns_stream:
            self._owns_stream = False
            streams.append(self._stream)
        _destroy_each(self._api.event_destroy, free, f"{self._label}: destroying a pooled event")
        _destroy_each(
            self._api.stream_destroy, streams, f"{self._label}: destroying a stream of the profiler"
        )


@final
class _Reading:
    """A ``with`` claiming ``profiler`` for the reader ``call`` (see the module docstring)."""

    __slots__ = ("call", "profiler")

    def __init__(self, profiler: EventProfiler[Any, Any], call: str) -> None:
        self.profiler = profiler
        self.call = call

    def __enter__(self) -> None:
        profiler = self.profiler
        if not profiler._claim.acquire(False):
            held = profiler._detour
            holder = held[0] if type(held) is tuple else "a reader"
            if type(held) is tuple and held[1] == threading.get_ident():
                raise EventStateError(
                    f"{profiler._label}: EventProfiler.{self.call} refused: EventProfiler."
                    f"{holder} is running on this thread, and a signal handler or a finalizer "
                    "called this from inside it; make the call after it returned"
                )
            raise EventStateError(_refusal(profiler._label, f"EventProfiler.{self.call}", holder))
        profiler._detour = (self.call, threading.get_ident())

    def __exit__(self, *exc_info: object) -> None:
        profiler = self.profiler
        profiler._detour = profiler._at_rest
        profiler._claim.release()


def _stats_of(summary: DurationSummary) -> Stats:
    ranks = summary.ranks()
    return Stats(
        count=summary.count,
        total_ns=summary.total_ns,
        min_ns=summary.min_ns,
        median_ns=quantile_of(ranks, summary.count, 0.5),
        mean_ns=summary.total_ns // summary.count,
        max_ns=summary.max_ns,
        rank_error=summary.rank_error,
        _ranks=ranks,
    )


def _graph_windows(api: EventApi[E, Any], capable: Capabilities) -> GraphWindows[E]:
    """What windows recorded into graphs need of ``api``; UnsupportedError when it lacks it."""
    if capable.capture_check and capable.graph_record:
        return GraphWindows(api)
    lacks = "SupportsGraphRecord" if capable.capture_check else "SupportsCaptureCheck"
    raise UnsupportedError(
        f"EventProfiler(in_graphs=True): the {api.BACKEND} backend does not implement {lacks}, "
        "which windows recorded into captured graphs need (cuda has it; hip where its runtime "
        "stamps an event recorded into a graph, from ROCm 7); use in_graphs=False, whose "
        "windows on a capturing stream are skipped"
    )


def _record_unless_capturing(
    record: Callable[[Any, Any], None],
    capturing: Callable[[Any], bool] | None,
    event: Any,
    stream: Any,
) -> bool:
    """A window's edge by the plain calls: the capture check (where the backend has one), then
    the record; False, recording nothing, while the stream captures a graph."""
    if capturing is not None and capturing(stream):
        return False
    record(event, stream)
    return True


def _checked(
    label: object, max_names: object, max_spans: object, sink: object, in_graphs: object
) -> tuple[int, int]:
    """The constructor's bounds, once its arguments are checked (TypeError, ValueError)."""
    if type(in_graphs) is not bool:
        raise TypeError(f"EventProfiler: in_graphs must be a bool, got {bounded_repr(in_graphs)}")
    names = check_int(max_names, "EventProfiler: max_names", minimum=0)
    spans = check_int(max_spans, "EventProfiler: max_spans", minimum=0)
    if spans > sys.maxsize:  # what a deque can hold
        raise ValueError(f"EventProfiler: max_spans must be at most {sys.maxsize}")
    if label is not None and type(label) is not str:
        raise TypeError(f"EventProfiler: label must be a str, got {bounded_repr(label)}")
    if sink is not None and not callable(sink):
        raise TypeError(f"EventProfiler: sink must be callable, got {bounded_repr(sink)}")
    return names, spans


def _destroy_each(destroy: Callable[[Any], object], handles: list[Any], what: str) -> None:
    """``destroy`` each of ``handles``; a failure is logged (``what`` failed), as close() and
    the finalizer have nowhere to raise it and nothing to retry."""
    for handle in handles:
        try:
            destroy(handle)
        except Exception:
            _log.warning("%s failed", what, exc_info=True)


def _refusal(label: str, call: str, holder: str) -> str:
    """Why ``call`` is refused while another thread is inside the reader ``holder``."""
    return (
        f"{label}: {call} refused: another thread is inside EventProfiler.{holder} on the same "
        "profiler. A profiler is used by one thread at a time: hand it from one thread to the "
        "other between calls, or hold a lock of your own around every use of it (see "
        "docs/profiling.md)"
    )


def _depths(windows: list[Window[E]]) -> list[int]:
    """Each window's depth: all zeros unless one opened inside another."""
    if not any([w._outer for w in windows]):
        return [0] * len(windows)
    return [0 if w._outer is None else len(_chain(w._outer)) for w in windows]


def _chain(window: Window[E] | None) -> list[Window[E]]:
    """``window`` and the windows open around it when it opened, innermost first: from the
    profiler's innermost open window, the windows open."""
    chain: list[Window[E]] = []
    while window is not None:
        chain.append(window)
        window = window._outer
    return chain
