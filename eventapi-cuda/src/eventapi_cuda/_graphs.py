"""Graphs captured from a stream of a cuda or hip backend object: ``eventapi.SupportsGraphs``.

``eventapi_cuda._graphs`` and ``eventapi_hip._graphs`` are this one file, as ``_native.c`` is:
the backends differ only in the binding that spells the calls, which each gives as a
:class:`GraphCalls`. The calls are not hot (a graph is captured once and launched whole), so
they are made through the binding, in Python, and ``_native.c`` keeps only the record of an
event as a node of a graph (``event_record_in_graph``), which a profiling window makes.

A capture is relaxed (``CU_STREAM_CAPTURE_MODE_RELAXED``, ``hipStreamCaptureModeRelaxed``): it
may end on any thread and forbids no call of another thread. Ending it instantiates the graph
and destroys the template at once, so a :class:`Graph` is one executable graph, independent of
the template, ready to launch on any stream of its backend object.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, NoReturn, final

from eventapi import EventStateError

from ._owned import Owned

__all__ = ["Graph", "GraphCalls", "GraphCapture"]

_log = logging.getLogger("eventapi")


class GraphCalls(NamedTuple):
    """A binding's graph calls; each raises :class:`~eventapi.DriverError` when it fails."""

    begin: Callable[[int], None]
    """Begin a relaxed capture on the raw stream."""
    end: Callable[[int], Any]
    """End the capture of the raw stream; the template graph."""
    instantiate: Callable[[Any], Any]
    """The executable graph of a template (made in :attr:`on_device`)."""
    destroy_template: Callable[[Any], None]
    launch: Callable[[Any, int], None]
    """``(executable graph, raw stream)``: enqueue a launch."""
    destroy: Callable[[Any], None]
    """Destroy an executable graph (made in :attr:`on_device`)."""
    on_device: Callable[[Any], AbstractContextManager[object]]
    """``(backend object)``: its device current on the calling thread for the block."""
    unusable: Callable[[], bool]
    """True where the driver must not be called: a child forked after it was used, or after
    the device was lost (its graphs are freed with the process)."""


@final
class Graph(Owned):
    """A graph captured from a stream, ready to launch: one executable graph of the driver.

    Users receive it from ``stream_end_capture``; they never build one. It holds its backend
    object (and so the device context) until destroyed. ``copy``, ``deepcopy`` and ``pickle``
    raise :class:`TypeError`: a driver handle has exactly one owner.
    """

    _DESTROY = "graph_destroy"
    __slots__ = ("_backend", "_executable", "_lock")

    def __init__(self, backend: GraphCapture, executable: Any) -> None:
        self._backend = backend
        self._executable = executable  # None once destroyed
        self._lock = threading.Lock()  # a launch and a destroy never overlap

    @property
    def closed(self) -> bool:
        """True once the graph was destroyed."""
        return self._executable is None

    @property
    def backend(self) -> str:
        """The name of the graph's backend."""
        return self._backend.BACKEND

    def __repr__(self) -> str:
        return f"<{self._backend.BACKEND} graph{' closed' if self.closed else ''}>"

    def _destroy(self) -> None:
        self._backend.graph_destroy(self)


class GraphCapture:
    """``stream_begin_capture``, ``stream_end_capture``, ``graph_launch``, ``graph_destroy``.

    Mixed into the backend class before ``_native.Backend``, which gives ``adopt_stream`` (the
    stream's own handle, after the checks every call makes: a thread bound to the device, no
    fork, no lost device, a stream open and usable); the class sets :attr:`_GRAPH_CALLS`.
    """

    __slots__ = ()

    BACKEND: ClassVar[str]
    _GRAPH_CALLS: ClassVar[GraphCalls]

    if TYPE_CHECKING:

        def adopt_stream(self, stream: object, /) -> Any: ...  # _native.Backend's

    def stream_begin_capture(self, stream: object) -> None:
        """Start capturing ``stream`` into a graph, relaxed. See ``eventapi.SupportsGraphs``."""
        self._GRAPH_CALLS.begin(self._raw_stream(stream, "stream_begin_capture"))

    def stream_end_capture(self, stream: object) -> Graph:
        """End the capture of ``stream``; its graph, instantiated and ready to launch."""
        calls = self._GRAPH_CALLS
        template = calls.end(self._raw_stream(stream, "stream_end_capture"))
        try:
            with calls.on_device(self):
                executable = calls.instantiate(template)
        finally:
            try:
                calls.destroy_template(template)  # the executable graph does not need it
            except Exception:
                _log.warning("%s: destroying a captured graph failed", self.BACKEND, exc_info=True)
        return Graph(self, executable)

    def graph_launch(self, graph: Graph | object, stream: object) -> None:
        """Enqueue a run of ``graph`` on ``stream``. See ``eventapi.SupportsGraphs``."""
        own = self._own_graph(graph, "graph_launch")
        raw = self._raw_stream(stream, "graph_launch")
        with own._lock:
            if own._executable is None:
                self._refuse_closed(own, "graph_launch")
            self._GRAPH_CALLS.launch(own._executable, raw)

    def graph_destroy(self, graph: Graph | object) -> None:
        """Release ``graph``; a second call is a no-op.

        A destroy the driver refuses still leaves the graph closed, and raises its
        :class:`~eventapi.DriverError`.
        """
        own = self._own_graph(graph, "graph_destroy")
        with own._lock:
            executable, own._executable = own._executable, None
        calls = self._GRAPH_CALLS
        if executable is not None and not calls.unusable():
            with calls.on_device(self):
                calls.destroy(executable)

    def _raw_stream(self, stream: object, call: str) -> int:
        try:
            raw: int = self.adopt_stream(stream).raw
        except EventStateError as exc:
            raise EventStateError(f"{call}: {exc}") from exc
        return raw

    def _own_graph(self, graph: object, call: str) -> Graph:
        if type(graph) is not Graph or graph._backend is not self:
            raise EventStateError(
                f"{self.BACKEND}: {call} refused a {type(graph).__qualname__}: not a graph of "
                "this backend object; pass one its stream_end_capture() returned"
            )
        return graph

    def _refuse_closed(self, graph: Graph, call: str) -> NoReturn:
        raise EventStateError(
            f"{self.BACKEND}: {call} refused {graph!r}: it was already destroyed; capture a new one"
        )
