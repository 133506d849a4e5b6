"""Windows recorded into captured graphs, read at each collect from the graph's latest launch.

An :class:`~eventapi.EventProfiler` made with ``in_graphs=True`` records a window opened while
its stream captures a graph as two event-record nodes of that graph
(:class:`~eventapi.SupportsGraphRecord`): every launch of the graph stamps both events again.
Such a window is read again and again: each collect reads it if the graph ran since the collect
that last read it, and gives one span, of the latest launch. An event keeps only its latest
stamp, and neither CUDA nor HIP counts how often a node ran, so launches between two collects
but the last are not seen.

Telling a launch from none. Each window keeps a *mark*: an event recorded and waited for by the
collect that last read it, after the launch it read. A start stamped after the mark was stamped
by a later launch; one stamped before it is the launch already read. A window never read has no
mark: its two events were created for it, never recorded, so until a launch stamps them a
reading fails, which says the graph has not run yet.

The events stay with the profiler until it closes, read or not: the graph may be launched
again at any time, and records into them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast, final

from .._errors import DriverError, EventStateError
from .._protocol import EventApi, SupportsCaptureCheck, SupportsGraphRecord

__all__ = ["GraphWindows", "InGraph"]

E = TypeVar("E")


@final
class InGraph(Generic[E]):
    """One window recorded into a graph: its name and depth, its two events and its mark."""

    __slots__ = ("depth", "end", "mark", "name", "start")

    def __init__(self, name: str, depth: int, start: E) -> None:
        self.name = name
        self.depth = depth
        self.start = start
        self.end: E | None = None  # None while the window is open
        self.mark: E | None = None  # see the module docstring


@final
class GraphWindows(Generic[E]):
    """The windows one profiler recorded into graphs, and every event a graph may stamp.

    ``capturing(stream)`` tells whether ``stream`` captures a graph; ``record(event, stream)``
    records ``event``, never recorded before, as a node of that graph. A window is known by the
    profiler's own object for it.
    """

    __slots__ = ("_elapsed", "_held", "_marks", "_wait", "_windows", "capturing", "record")

    def __init__(self, api: EventApi[E, Any]) -> None:
        self.capturing = cast("SupportsCaptureCheck[Any]", api).stream_is_capturing
        self.record = cast("SupportsGraphRecord[E, Any]", api).event_record_in_graph
        self._elapsed = api.event_elapsed
        self._wait = api.event_wait
        self._windows: dict[object, InGraph[E]] = {}  # in a graph, in the order they opened
        self._held: list[E] = []  # in a graph, of no window read: skipped or discarded ones
        self._marks: list[E] = []  # the marks windows hold

    def open(self, window: object, name: str, depth: int, start: E) -> None:
        """``window`` opened in a graph, its start ``start``: read once it stopped there."""
        self._windows[window] = InGraph(name, depth, start)

    def stop(self, window: object, end: E) -> None:
        """``window`` stopped in the graph, its end ``end``."""
        self._windows[window].end = end

    def drop(self, window: object) -> None:
        """``window`` stopped elsewhere, or was discarded: never read.

        Its start stays until :meth:`release`: the graph may stamp it at any launch.
        """
        self._held.append(self._windows.pop(window).start)

    def stamped(self, read_pairs: Callable[[list[E], list[E]], list[int]]) -> list[InGraph[E]]:
        """The windows a launch stamped since the collect that last read them, after waiting
        for their latest launch; ``read_pairs`` reads ``elapsed(firsts[i], seconds[i])`` for
        each ``i``. Blocks until each window's end is reached."""
        wait, elapsed = self._wait, self._elapsed
        stamped: list[InGraph[E]] = []
        for window in self._windows.values():
            if window.end is None:  # open
                continue
            wait(window.end)
            if window.mark is None:
                try:
                    elapsed(window.start, window.end)
                except (EventStateError, DriverError):
                    # Never stamped: the graph has not run yet. (An event recorded only as a
                    # node reads as never recorded, which the backend refuses or the driver.)
                    continue
            stamped.append(window)
        # Of those read before, a start at or before its mark is the launch already read: the
        # reading, clamped at 0, says so.
        marked = [w for w in stamped if w.mark is not None]
        since = iter(read_pairs([cast("E", w.mark) for w in marked], [w.start for w in marked]))
        return [w for w in stamped if w.mark is None or next(since) > 0]

    def read(self, windows: list[InGraph[E]], mark: E) -> list[E]:
        """``windows`` were read now; ``mark``, reached after the launch they were read from,
        becomes their mark. Returns the marks no window holds any more, for the caller's pool."""
        for window in windows:
            window.mark = mark
        self._marks.append(mark)
        held = {id(w.mark) for w in self._windows.values()}
        free = [m for m in self._marks if id(m) not in held]
        self._marks = [m for m in self._marks if id(m) in held]
        return free

    def release(self) -> list[E]:
        """Every event of this object: the caller destroys them (the graphs are done with)."""
        events = [e for w in self._windows.values() for e in (w.start, w.end) if e is not None]
        events += self._held + self._marks
        self._windows, self._held, self._marks = {}, [], []
        return events
