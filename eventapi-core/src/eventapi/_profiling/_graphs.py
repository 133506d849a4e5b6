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

from typing import Any, Generic, TypeVar, cast, final

from .._errors import DriverError, EventStateError
from .._protocol import EventApi, SupportsGraphRecord

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
    """The windows one profiler recorded into graphs, and every event a graph may stamp."""

    __slots__ = ("_elapsed", "_held", "_marks", "_record", "_wait", "windows")

    def __init__(self, api: EventApi[E, Any]) -> None:
        self._record = cast("SupportsGraphRecord[E, Any]", api).event_record_in_graph
        self._elapsed = api.event_elapsed
        self._wait = api.event_wait
        self.windows: list[InGraph[E]] = []  # in a graph, in the order they opened
        self._held: list[E] = []  # in a graph, of no window read: skipped or discarded ones
        self._marks: list[E] = []  # the marks windows hold

    def record(self, event: E, stream: object) -> None:
        """Record ``event``, never recorded before, as a node of the graph ``stream`` captures."""
        self._record(event, stream)

    def open(self, name: str, depth: int, start: E) -> None:
        """A window opened in a graph, its start ``start``: read once it stopped there."""
        self.windows.append(InGraph(name, depth, start))

    def stop(self, start: E, end: E) -> None:
        """The window opened with ``start`` stopped in the graph, its end ``end``."""
        self._find(start).end = end

    def drop(self, start: E) -> None:
        """The window opened with ``start`` stopped elsewhere, or was discarded: never read.

        Its start stays until :meth:`release`: the graph may stamp it at any launch.
        """
        self.windows.remove(self._find(start))
        self._held.append(start)

    def _find(self, start: E) -> InGraph[E]:
        # The windows open are the latest: searched from the end.
        for window in reversed(self.windows):
            if window.start is start:
                return window
        raise AssertionError("a window in a graph the profiler does not hold")

    def launched(self) -> list[InGraph[E]]:
        """The windows a launch stamped at least once, after waiting for their latest launch.

        Blocks until each window's end is reached. Whether the launch is one already read is
        told by the readings :meth:`pairs` asks for.
        """
        wait, elapsed = self._wait, self._elapsed
        stamped: list[InGraph[E]] = []
        for window in self.windows:
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
        return stamped

    @staticmethod
    def pairs(windows: list[InGraph[E]], reference: E) -> tuple[list[E], list[E]]:
        """The readings :meth:`new` needs of ``windows``: each one's duration, its distance to
        ``reference`` (the anchor event), and for each read before, its mark to its start."""
        starts = [w.start for w in windows]
        marked = [w for w in windows if w.mark is not None]
        firsts = starts + starts + [cast("E", w.mark) for w in marked]
        seconds = [cast("E", w.end) for w in windows] + [reference] * len(windows)
        seconds += [w.start for w in marked]
        return firsts, seconds

    @staticmethod
    def new(
        windows: list[InGraph[E]], readings: list[int]
    ) -> tuple[list[InGraph[E]], list[int], list[int]]:
        """Of ``windows``, those a launch stamped since they were last read, with each one's
        duration and distance to the anchor, from the readings :meth:`pairs` asked for."""
        count = len(windows)
        since_mark = iter(readings[2 * count :])
        fresh: list[InGraph[E]] = []
        durations: list[int] = []
        before: list[int] = []
        for i, window in enumerate(windows):
            # Clamped at 0: a start at or before its mark is the launch already read.
            if window.mark is None or next(since_mark) > 0:
                fresh.append(window)
                durations.append(readings[i])
                before.append(readings[count + i])
        return fresh, durations, before

    def read(self, windows: list[InGraph[E]], mark: E) -> list[E]:
        """``windows`` were read now; ``mark``, reached after the launch they were read from,
        becomes their mark. Returns the marks no window holds any more, for the caller's pool."""
        for window in windows:
            window.mark = mark
        self._marks.append(mark)
        held = {id(w.mark) for w in self.windows}
        free = [m for m in self._marks if id(m) not in held]
        self._marks = [m for m in self._marks if id(m) in held]
        return free

    def release(self) -> list[E]:
        """Every event of this object: the caller destroys them (the graphs are done with)."""
        events = [e for w in self.windows for e in (w.start, w.end) if e is not None]
        events += self._held + self._marks
        self.windows, self._held, self._marks = [], [], []
        return events
