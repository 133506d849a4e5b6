"""The backend contract: the event and stream calls the C-family device APIs agree on.

A backend is an object that satisfies :class:`EventApi` structurally; it does not inherit from
it. Everything above these calls (a fence's lifetime, a profiling window, the anchor that places
one on the host clock) is written once, in the classes that *hold* a backend.

Optional capabilities are protocols of their own (:class:`SupportsEventQuery`,
:class:`SupportsCaptureCheck`, :class:`SupportsHostFunc`, :class:`SupportsFastPath` for the
calls a fence and a profiler fuse, and for CUDA graphs :class:`SupportsGraphs`, which captures a
stream's work into a graph and launches it, and :class:`SupportsGraphRecord`, which records an
event into a graph as a node each launch stamps; for :func:`~eventapi.bench`,
:class:`SupportsCacheFlush`, which writes over the device's cache between timed calls, and
:class:`SupportsClocks`, which reads the device's clock and why it is held down). Which ones
a backend has is decided by one rule everywhere (the fence, the profiler, the conformance kit,
``eventapi check``): ``isinstance`` against the runtime-checkable protocol, asked once per
backend class by :func:`capabilities_of` and cached.

The contract is deliberately only what :class:`~eventapi.EventFence` and
:class:`~eventapi.EventProfiler` need. Memory, launches and module loading have their own seams;
widening this protocol to cover them would make it the device API rather than the device's
event API.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final, NamedTuple, Protocol, TypeVar, final, runtime_checkable

from ._arguments import bounded_repr

__all__ = [
    "CAPABILITY_METHODS",
    "GRAPH_METHODS",
    "PROTOCOL_METHODS",
    "Capabilities",
    "DeviceClocks",
    "EventApi",
    "SupportsCacheFlush",
    "SupportsCaptureCheck",
    "SupportsClocks",
    "SupportsEventQuery",
    "SupportsFastPath",
    "SupportsGraphRecord",
    "SupportsGraphs",
    "SupportsHostFunc",
    "capabilities_of",
]

E = TypeVar("E")
S = TypeVar("S")
G = TypeVar("G")
B = TypeVar("B")
E_contra = TypeVar("E_contra", contravariant=True)
S_contra = TypeVar("S_contra", contravariant=True)


class EventApi(Protocol[E, S]):
    """One backend's spelling of the device event calls.

    ``E`` is the backend's event handle, ``S`` its stream handle. An event is a handle into the
    driver, not thread-affine state: it is recorded on one thread and waited on any other. A
    stream stays with the code that owns it.

    Every method raises :class:`~eventapi.DriverError` when the driver refuses the call, and
    :class:`~eventapi.EventStateError` for a closed, foreign or never-recorded handle, which is
    refused before the driver sees it.
    """

    @property
    def BACKEND(self) -> str:  # noqa: N802 - the seed's constant; read-only so a plain attribute satisfies it
        """The backend's name as a log line shows it: ``"host"``, ``"cuda"``, ``"hip"``."""

    def event_create(self) -> E:
        """Create an event with timing enabled.

        Timing is the point: the flag a pure synchronization event would take to disable it is
        exactly the timestamp a profiler reads back.
        """

    def event_destroy(self, event: E) -> None:
        """Release an event. Idempotent on an already destroyed handle of this backend.

        Called from the owner's ``close()`` or finalizer, where a failure can only be logged.
        """

    def event_record(self, event: E, stream: S) -> None:
        """Enqueue the timestamp on ``stream``; return once it is queued."""

    def event_wait(self, event: E) -> None:
        """Block the calling thread until the device has reached ``event``.

        Releases the GIL while it blocks. The error it raises is the fault the wait revealed on
        the stream the event was recorded into.
        """

    def event_elapsed(self, start: E, end: E) -> int:
        """Device time from ``start`` to ``end`` in integer nanoseconds.

        Both must have been reached, else :class:`~eventapi.DriverError` with ``not_ready``
        true. A negative reading is clamped to 0: the device clock is monotonic, and a profiler
        is not worth an exception.
        """

    def stream_wait_event(self, stream: S, event: E) -> None:
        """Make ``stream`` wait for ``event`` on the device; the host does not block."""

    def stream_synchronize(self, stream: S) -> None:
        """Block the host until every operation enqueued on ``stream`` has completed."""

    def stream_create_non_blocking(self) -> S:
        """Create a stream that does not synchronize with the legacy default stream."""

    def stream_destroy(self, stream: S) -> None:
        """Release a stream created by :meth:`stream_create_non_blocking`.

        A stream this backend did not create (a framework's stream, a raw handle) is refused
        with :class:`~eventapi.EventStateError`: it is never destroyed here.
        """


@runtime_checkable
class SupportsEventQuery(Protocol[E_contra]):
    """Optional capability: ask whether an event was reached, without blocking.

    Used by :meth:`EventFence.reached` and by waits with a timeout.
    """

    def event_query(self, event: E_contra) -> bool:
        """True when the device has reached ``event``; never blocks."""


@runtime_checkable
class SupportsCaptureCheck(Protocol[S_contra]):
    """Optional capability: tell whether a stream is recording a graph.

    A record into a capturing stream is no timestamp but a dependency inside the graph, so the
    core screens for it in advance: such a stream gets no event of a fence or a window.
    """

    def stream_is_capturing(self, stream: S_contra) -> bool:
        """True while ``stream`` is capturing a graph."""


@runtime_checkable
class SupportsHostFunc(Protocol[S_contra]):
    """Optional capability: enqueue a host callable on a stream.

    Not a widening of :class:`EventApi` (launches have their own seam): it lets tests and
    ``eventapi check`` put a known delay on a stream without compiling a kernel.
    """

    def stream_launch_host_func(self, stream: S_contra, fn: Callable[[], object]) -> None:
        """Run ``fn()`` on a driver thread when ``stream`` reaches this point.

        Later work on the stream waits for ``fn`` to return. ``fn`` must not call back into the
        device API, as the drivers forbid; an exception it raises is logged, not propagated.
        """


@runtime_checkable
class SupportsFastPath(Protocol[E, S]):
    """Optional capability: the calls a fence and a profiler make, each fused into one.

    A fence records a new event into a stream; a profiling window records a pooled event unless
    the stream is capturing; a profiler's collect reads many windows at once. A backend that can
    do each in one call, cheaper than the plain calls it fuses, offers these four methods; the
    core then uses them for every fence and window (:class:`~eventapi.EventFence`,
    :class:`~eventapi.EventProfiler`), and the conformance kit requires the same readings, the
    same errors and the same live handles through them as through the plain calls.

    The fused calls take only the backend's own handle types: a stream passed in from elsewhere
    (a framework's, a raw handle) is turned into one by :meth:`adopt_stream` first, once.
    """

    def adopt_stream(self, stream: object) -> S:
        """The backend's own handle for ``stream``: itself for a stream of this backend, or a
        non-owning wrapper of a stream this backend can use but did not create (never destroyed
        by eventapi). Raises :class:`~eventapi.EventStateError` for anything else."""

    def event_record_new(self, stream: S) -> E | None:
        """``event_create()`` and ``event_record(event, stream)`` in one call: a fence.

        Returns None, creating nothing, when the backend can tell that ``stream`` is capturing a
        graph (as ``stream_is_capturing`` would say). A failed record destroys the new event
        before its :class:`~eventapi.DriverError` propagates. The event is released with
        ``event_destroy``, as any other; the backend may keep its driver event for a later
        ``event_record_new`` once it was seen reached.
        """

    def event_record_unless_capturing(self, event: E, stream: S) -> bool:
        """Unless ``stream`` is capturing a graph, ``event_record(event, stream)``: a window.

        True when recorded; False, recording nothing, when the stream was capturing.
        """

    def event_elapsed_many(self, starts: Sequence[E], ends: Sequence[E]) -> list[int]:
        """``event_elapsed(starts[i], ends[i])`` for each ``i``, in order: a collect.

        Every event is checked before any reading; the first failed reading's
        :class:`~eventapi.DriverError` is raised (``not_ready`` for one not reached).
        """


@runtime_checkable
class SupportsGraphs(Protocol[S_contra, G]):
    """Optional capability: capture a stream's work into a graph, and launch the graph.

    Stream capture as CUDA and HIP do it: between :meth:`stream_begin_capture` and
    :meth:`stream_end_capture`, work enqueued on the stream is taken into a graph instead of
    run; each :meth:`graph_launch` then runs it. ``G`` is the backend's graph handle, ready to
    launch (an executable graph: instantiated as the capture ends). Not a widening of
    :class:`EventApi` (launches have their own seam): the conformance kit and tests make graphs
    with it, to check what windows inside a graph read (:class:`SupportsGraphRecord`).

    Inside a capture, a plain ``event_record`` is a dependency of the graph, never a
    timestamp: waiting on or reading the event raises :class:`~eventapi.DriverError` (CUDA's
    ``CUDA_ERROR_CAPTURED_EVENT`` during the capture, ``CUDA_ERROR_INVALID_VALUE`` after) until
    it is recorded again outside one. A fence and a window are therefore never recorded there
    (:class:`SupportsCaptureCheck`).
    """

    def stream_begin_capture(self, stream: S_contra) -> None:
        """Start capturing ``stream`` into a graph.

        The capture may end on any thread and forbids no call of other threads (CUDA's and
        HIP's relaxed capture mode). Raises :class:`~eventapi.DriverError` when the stream is
        capturing already or cannot be captured (a legacy default stream).
        """

    def stream_end_capture(self, stream: S_contra) -> G:
        """End the capture of ``stream``; the graph of what it took, ready to launch.

        Raises :class:`~eventapi.DriverError` when the stream is not capturing, or when the
        capture was invalidated by a call it could not take (nothing is returned then, and the
        stream captures no more).
        """

    def graph_launch(self, graph: G, stream: S_contra) -> None:
        """Enqueue a run of ``graph`` on ``stream``; return once it is queued.

        A graph may be launched any number of times, on any stream of the backend object.
        """

    def graph_destroy(self, graph: G) -> None:
        """Release ``graph``; a second call is a no-op.

        Runs already launched complete. Events the graph records stay the caller's.
        """


@runtime_checkable
class SupportsGraphRecord(Protocol[E_contra, S_contra]):
    """Optional capability: record an event into a graph, as a node each launch stamps.

    CUDA's ``cuEventRecordWithFlags(event, stream, CU_EVENT_RECORD_EXTERNAL)`` and HIP's
    ``hipEventRecordExternal``: recorded into a stream that is capturing a graph, the event
    becomes an event-record node of the graph, and every launch of the graph records it when
    the launch reaches that node. An event keeps only its latest stamp, and neither driver
    counts how often a node ran. Used by :class:`~eventapi.EventProfiler` with
    ``in_graphs=True``, whose windows opened in a capture become part of the graph.
    """

    def event_record_in_graph(self, event: E_contra, stream: S_contra) -> None:
        """Record ``event`` into the graph ``stream`` is capturing, as an event-record node.

        The event is left as it was until a launch of the graph reaches the node (one never
        recorded before reads as never stamped: its readings raise). Raises
        :class:`~eventapi.EventStateError` when ``stream`` is not capturing a graph (record
        with ``event_record`` there), and :class:`~eventapi.DriverError` when the driver
        refuses the node (the capture was invalidated, say).
        """


@runtime_checkable
class SupportsCacheFlush(Protocol[S_contra, B]):
    """Optional capability: write over the device's last-level (L2) cache from a stream.

    What a benchmark puts between two timed calls so that each starts with a cold cache (Triton's
    ``do_bench`` and nvbench do the same): a write of as many bytes as the cache holds, over a
    scratch buffer the caller creates once and destroys when done. ``B`` is the buffer's handle.
    Used by :func:`~eventapi.bench` (``cold_cache``), never inside a timed window.
    """

    def cache_size_bytes(self) -> int:
        """The device's L2 cache size in bytes, as the device reports it; what a flush writes."""

    def cache_flush_create(self) -> B:
        """A scratch buffer of :meth:`cache_size_bytes` on the device, for the flushes."""

    def stream_flush_cache(self, stream: S_contra, buffer: B) -> None:
        """Enqueue a write of the whole of ``buffer`` on ``stream``; return once it is queued.

        Into a stream capturing a graph it becomes a node of the graph, as any work does.
        """

    def cache_flush_destroy(self, buffer: B) -> None:
        """Release ``buffer``; a second call is a no-op. Call it once the flushes enqueued
        with it have run (after a synchronize of their streams)."""


@final
class DeviceClocks(NamedTuple):
    """One reading of a device's clock: what :meth:`SupportsClocks.device_clocks` returns."""

    clock_mhz: int
    """The clock the device's compute units run at now (NVIDIA's SM clock), in MHz."""
    max_clock_mhz: int
    """The most that clock can reach, in MHz."""
    throttle_reasons: tuple[str, ...]
    """What holds the clock down now, in words (``"power cap"``, ``"thermal slowdown"``);
    empty when nothing does. An idle device or a clock a user set is no throttling."""


@runtime_checkable
class SupportsClocks(Protocol):
    """Optional capability: read the device's clock, and what throttles it.

    Used by :func:`~eventapi.bench` before and after each batch of timed calls, never inside a
    timed window: a device that slowed down for heat or power reads slower, and the result says
    so. A backend offers it where a management library can be asked (the cuda backend through
    NVML, with ``nvidia-ml-py`` installed).
    """

    def device_clocks(self) -> DeviceClocks:
        """The device's clock now. Raises :class:`~eventapi.UnsupportedError`, saying why, when
        the management library cannot be loaded or does not know the device."""


def _methods(*protocols: type) -> tuple[str, ...]:
    members = [item for protocol in protocols for item in vars(protocol).items()]
    return tuple(name for name, member in members if not name.startswith("_") and callable(member))


PROTOCOL_METHODS: Final[tuple[str, ...]] = _methods(EventApi)
"""The methods of :class:`EventApi`, read off the protocol so no list can drift from it."""

CAPABILITY_METHODS: Final[tuple[str, ...]] = _methods(
    SupportsEventQuery, SupportsCaptureCheck, SupportsHostFunc
)
"""The methods of the optional capability protocols, read off them likewise."""

GRAPH_METHODS: Final[tuple[str, ...]] = _methods(SupportsGraphs, SupportsGraphRecord)
"""The methods of :class:`SupportsGraphs` and :class:`SupportsGraphRecord`, read off them."""


@final
class Capabilities(NamedTuple):
    """Which optional capabilities a backend's class has, as ``isinstance`` answers."""

    event_query: bool
    capture_check: bool
    host_func: bool
    fast_path: bool
    graphs: bool
    graph_record: bool
    cache_flush: bool
    clocks: bool


# Backend classes -> their capabilities. Only grows, and only with classes, which live as long as
# their module does anyway. Asked per class, not per object: an isinstance against a runtime
# protocol reads every member each time, which would cost more than many of the calls it guards.
_by_class: dict[type, Capabilities] = {}


def capabilities_of(api: object, caller: str) -> Capabilities:
    """The optional capabilities of the backend object ``api``'s class.

    ``isinstance`` against each runtime-checkable protocol, asked of the first object of a class
    and cached for the class. Raises :class:`TypeError` naming ``caller`` when ``api`` is not a
    backend object (it lacks ``BACKEND`` or one of the protocol's methods), saying what to pass
    instead. Thread-safe: a racing first call stores the same answer.
    """
    kind = type(api)
    found = _by_class.get(kind)
    if found is None:
        missing = [name for name in ("BACKEND", *PROTOCOL_METHODS) if not _has(api, name)]
        if missing:
            raise TypeError(
                f"{caller} needs a backend object (one that satisfies eventapi.EventApi, such as "
                f"eventapi.backend() or eventapi.backend('host') returns), got "
                f"{type(api).__qualname__} {bounded_repr(api)}, which lacks {', '.join(missing)}"
            )
        found = _by_class[kind] = Capabilities(
            event_query=isinstance(api, SupportsEventQuery),
            capture_check=isinstance(api, SupportsCaptureCheck),
            host_func=isinstance(api, SupportsHostFunc),
            fast_path=isinstance(api, SupportsFastPath),
            graphs=isinstance(api, SupportsGraphs),
            graph_record=isinstance(api, SupportsGraphRecord),
            cache_flush=isinstance(api, SupportsCacheFlush),
            clocks=isinstance(api, SupportsClocks),
        )
    return found


def _has(api: object, name: str) -> bool:
    try:
        member = getattr(api, name)
    except Exception:  # a broken property or __getattr__ is as good as missing here
        return False
    return name == "BACKEND" or callable(member)
