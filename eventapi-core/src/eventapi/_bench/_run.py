"""The loop of :func:`eventapi.bench`: estimate, warm up until steady, time until a rule stops.

The phases, all on one :class:`~eventapi.EventProfiler`, every call ``setup(stream)`` then a
window around ``fn(stream)`` (``calls_per_window`` calls in batch mode):

1. one untimed call and a stream synchronization (a first call that compiles or allocates
   is not a sample);
2. an estimate: up to :data:`ESTIMATE_CALLS` windows on a stream left running free, read
   back at once; they size everything after, pick batch mode for a call below
   :data:`BATCH_BELOW_NS`, and (when the stream is to be held) give the launch-bound verdict;
   held, as many held windows size the run, and :data:`EMPTY_WINDOWS` empty ones (nothing
   between their two records) say what a window of no work reads;
3. warm-up: windows read back in groups of :data:`TREND_WINDOWS` until the last ones show no
   trend (:func:`~._stats.trend`) or ``warmup_ms`` of wall time is spent;
4. timed windows, read back in batches sized from the noise so far, until the median's
   relative noise is at most ``noise_target`` with at least ``min_n`` readings (``"noise"``),
   or ``rep_ms`` of wall time is spent with at least 6 readings (``"time"``), or
   :data:`LONGER_RUN` times ``rep_ms`` is (``"limit"``).

With ``hold_stream``, each batch is enqueued behind a host function that blocks the stream
until the whole batch is queued, so the calls run back to back as on a busy device.

A cold cache (:class:`~eventapi.SupportsCacheFlush`) is a write of the device's L2 size enqueued
before each window's call, after its ``setup``, outside every window. In graph mode
(:class:`~eventapi.SupportsGraphs`) a window is one launch of a graph of ``calls_per_window``
captured calls. The device's clocks (:class:`~eventapi.SupportsClocks`) are read before and
after each timed batch.

The phases after the estimate start a batch only when its windows, at the pace of the last
ones, fit in their budget, so a run ends within ``warmup_ms`` + :data:`LONGER_RUN` times
``rep_ms`` after its estimate, unless a single window is longer than that; batch mode never
makes one that long (:data:`BATCH_BELOW_NS`).
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from typing import Any, Final, final

from .._arguments import bounded_repr, check_bool, check_int, check_real
from .._errors import CaptureError, DriverError, UnsupportedError
from .._profiling._anchor import TIMER_RESOLUTION_NS
from .._profiling._profiler import EventProfiler
from .._profiling._span import Span
from .._protocol import Capabilities, DeviceClocks, EventApi, capabilities_of
from .._ranks import nearest_rank
from ._result import BenchResult, StoppedBy, duration_text, summarize
from ._stats import MIN_N, median_interval, trend

__all__ = [
    "BATCH_BELOW_NS",
    "EMPTY_WINDOWS",
    "ESCAPE_RATIO",
    "ESTIMATE_CALLS",
    "LONGER_RUN",
    "READ_BATCH",
    "TREND_WINDOWS",
    "bench",
]

ESTIMATE_CALLS: Final = 8
"""Windows timed to size the run, read back at once; with the stream held, the only windows
on a free stream, which the launch-bound verdict reads the lag's growth through."""

BATCH_BELOW_NS: Final = 10 * TIMER_RESOLUTION_NS
"""A call shorter than ten timer ticks is timed in batch mode: at one call per window the
timer's resolution alone would be 10 % of the reading or more. A window's calls cost the host
their time as well as the device theirs, so batch mode puts in one window no more calls than
let ``MIN_N`` windows fit in ``rep_ms``: a call whose work is on the host (nanoseconds on the
stream, a millisecond on the host) would otherwise fill one window with seconds of it."""

BATCH_WINDOW_NS: Final = 100 * TIMER_RESOLUTION_NS
"""Batch mode puts enough calls in a window for it to last a hundred ticks (the resolution
then weighs 1 % of a reading); at most :data:`MAX_PER_WINDOW`."""

EMPTY_WINDOWS: Final = 32
"""Held, windows with nothing in them, read once (two records each, no call of ``fn``): enough
that the 95 % interval of their median leaves out the few a loaded machine stretches."""

ESCAPE_RATIO: Final = 100
"""On a held stream, ``fn``'s work escaped the stream when its calls take at least this many
times longer on the host than on the stream (or its windows read no longer than empty ones):
what the readings time is then a sliver of the call, or nothing of it. A launch-bound call,
whose host time to enqueue exceeds its device time by a few times, stays well under it."""

MAX_PER_WINDOW: Final = 10_000

READ_BATCH: Final = 500
"""Windows read back per wait at most: each wait costs an anchor (well under a millisecond),
and the events of at most this many windows are held at once."""

TREND_WINDOWS: Final = 16
"""The warm-up tests the last this many readings for a trend (at least half as many)."""

LONGER_RUN: Final = 10
"""How far past ``rep_ms`` the run goes to reach 6 readings, the fewest with a 95 % interval."""

LAG_GROWTH: Final = 0.2
"""The launch-bound verdict's threshold: the device's lag behind the host growing by less than
this share of a reading per call. A call whose device time exceeds its host time by a quarter
or more is seen as device-bound."""

_SLOPE_WINDOWS: Final = 32

HOLD_TIMEOUT_S: Final = 1.0
"""The least time a hold waits for its batch to be enqueued before it lets the stream go; it
also waits 20 times the batch's expected enqueue time, so only an ``fn`` that waits for the
stream, or one a hundred times slower than it was, outlives it."""

THROTTLED_BELOW: Final = 0.75
"""A clock read below this share of its maximum counts as throttled, whatever the backend says
of the reasons: nvbench's rule (it compares with the default clock)."""

_HOST_TIMER: Final = "time it with a host timer (time.perf_counter_ns, timeit) instead"


@final
@dataclass(frozen=True, slots=True)
class _Options:
    """bench's numbers and flags, checked and converted: plain floats, ints and bools.

    Built from values :func:`bench` converted (a :class:`TypeError` for a wrong type is
    theirs); refuses a value out of range with :class:`ValueError`.
    """

    warmup_ms: float
    rep_ms: float
    noise_target: float
    min_n: int
    held: bool
    calls_per_window: int | None
    with_setup: bool
    cold: bool | None
    graph: bool

    def __post_init__(self) -> None:
        if not (self.warmup_ms >= 0.0 and self.rep_ms > 0.0):
            raise ValueError(
                f"bench needs warmup_ms >= 0 and rep_ms > 0 (milliseconds), got "
                f"{self.warmup_ms:g} and {self.rep_ms:g}"
            )
        if not self.noise_target >= 0.0:
            raise ValueError(
                "bench needs noise_target >= 0 (a fraction: 0.01 is 1 %), got "
                f"{self.noise_target:g}"
            )
        if self.min_n < MIN_N:
            raise ValueError(
                f"bench needs min_n >= {MIN_N}: below that no 95 % interval of the median exists, "
                f"got {self.min_n}"
            )
        for what, on in (("setup", self.with_setup), ("cold_cache=True", self.cold)):
            if on and self.calls_per_window not in (None, 1):
                raise ValueError(
                    f"bench: {what} acts before every window, outside it, and calls_per_window="
                    f"{self.calls_per_window} puts that many calls in one window, all but the "
                    f"first without it; pass calls_per_window=1 or no {what}"
                )


@final
@dataclass(slots=True)
class _Batch:
    """Windows read back, in time order: per window in one readback, per call once timed."""

    device: list[int] = field(default_factory=list)
    host: list[int] = field(default_factory=list)
    gaps: list[int | None] = field(default_factory=list)
    lags: list[int] = field(default_factory=list)  # end stamped minus end recorded, host clock
    setups: list[int] = field(default_factory=list)
    wall_ns: int = 0


@final
@dataclass(slots=True)
class _Runner:
    """One run: its profiler, its calls and options, and what its phases learned of the call.

    ``release`` destroys what the run made (its graphs, its flush's buffer) when the run ends.
    """

    prof: EventProfiler[Any, Any]
    fn: Callable[[Any], object]
    setup: Callable[[Any], object] | None
    options: _Options
    capable: Capabilities
    release: ExitStack
    per_window: int = 1
    host_each_ns: float = 1.0  # host time per call, refined as batches are read
    each_ns: float = 1.0  # a window's wall time, readback included: the pace of the next batch
    device_each: int = 0  # the estimate's median reading of one call
    free: list[_Batch] = field(default_factory=list)  # batches on a free stream, for the verdict
    empty: list[int] = field(default_factory=list)  # held: sorted readings of empty windows
    warmup_n: int = 0
    steady: bool = False
    warnings: list[str] = field(default_factory=list)
    flush: Any = None  # the cache flush's buffer, while the cache is to be cold
    flush_bytes: int = 0
    graph: Any = None  # in graph mode, the graph of per_window calls a window launches
    clocks: list[DeviceClocks] | None = field(default_factory=list)  # None: none to be had

    @property
    def resolution_ns(self) -> int:
        """The timer's resolution per call: one tick, shared by a window's calls."""
        return -(-TIMER_RESOLUTION_NS // self.per_window)

    def batch(self, count: int, *, held: bool) -> _Batch:
        """Run ``count`` windows, read them back in one wait, per window in time order.

        ``held`` puts a host function ahead of them that blocks the stream until they are
        enqueued, or until its timeout: then ``fn`` waited for its own stream, a
        :class:`ValueError`. The batch sets the pace (:attr:`each_ns`), and one on a free
        stream joins :attr:`free`.
        """
        fn = self.fn
        target = self.prof.stream
        per_window = self.per_window
        window = self.prof.window
        api: Any = self.prof.api
        graph = self.graph
        now = time.perf_counter_ns
        out = _Batch()
        ends: list[int] = []
        released = threading.Event()
        timed_out = False
        timeout_s = max(HOLD_TIMEOUT_S, 20 * count * per_window * self.host_each_ns / 1e9)

        def hold() -> None:
            nonlocal timed_out
            timed_out = not released.wait(timeout_s)

        began = now()
        if held:
            api.stream_launch_host_func(target, hold)  # bench checked SupportsHostFunc
        try:
            for _ in range(count):
                if self.setup is not None:
                    with window("setup"):
                        self.setup(target)
                if self.flush is not None:
                    api.stream_flush_cache(target, self.flush)
                opened = now()
                with window("call"):
                    if graph is not None:
                        api.graph_launch(graph, target)
                    else:
                        for _ in range(per_window):
                            fn(target)
                closed = now()
                out.host.append(closed - opened)
                ends.append(closed)
        finally:
            released.set()
        spans = self.prof.collect()
        out.wall_ns = now() - began
        if timed_out:
            raise ValueError(
                f"bench(hold_stream=True): fn did not return while the stream was held (the hold "
                f"let go after {timeout_s:.3g} s): fn waits for its own stream (a "
                "stream_synchronize, an event_wait, a blocking copy), which would wait for the "
                "hold forever. Remove the wait from fn, or pass hold_stream=False"
            )
        _read(out, spans, ends, count, with_setup=self.setup is not None)
        if per_window:
            self.host_each_ns = max(1.0, sum(out.host) / (count * per_window))
        self.each_ns = out.wall_ns / count
        if not held:
            self.free.append(out)
        return out


def _read(out: _Batch, spans: list[Span], ends: list[int], count: int, *, with_setup: bool) -> None:
    """Fill ``out`` from a batch's spans (in the order opened) and its windows' host ends."""
    calls = [s for s in spans if s.name == "call"]
    setups = [s for s in spans if s.name == "setup"]
    if len(calls) != count or (with_setup and len(setups) != count):
        raise CaptureError(
            f"bench: {count - len(calls)} of {count} windows were skipped because the "
            "stream is capturing a graph; graph capture has no timing, so bench a stream "
            "that runs its work (launch the graph in fn instead)"
        )
    out.device = [s.duration_ns for s in calls]
    out.lags = [s.end_ns - end for s, end in zip(calls, ends, strict=True)]
    out.setups = [s.duration_ns for s in setups]
    # The device's idle from one window's end to the next one's start, its setup's window left
    # out; the first window follows a wait and has none.
    idle = [later.start_ns - earlier.end_ns for earlier, later in itertools.pairwise(calls)]
    if setups:
        idle = [i - (s.end_ns - s.start_ns) for i, s in zip(idle, setups[1:], strict=True)]
    out.gaps = [None, *(max(0, i) for i in idle)]


def _launch_bound(batches: list[_Batch]) -> bool | None:
    """Whether the device kept pace with the host rather than the host with the device.

    The lag of a window's end behind its record (device stamp minus host record, on the host
    clock) grows through a batch by ``device - host`` time per call when the device is the
    slower, and stays flat when the device drains each call before the next is queued. The
    growth per call is the median of the slopes between neighbouring windows (within each
    batch, its first :data:`_SLOPE_WINDOWS` windows). That is robust to what a loaded machine
    does to a launch-bound run: an odd late stamp (one step up and one down), and a stall of
    the stream (one step up, then the drain back, each step down). The slopes of all pairs
    (Theil-Sen) read a stall late in a batch as growth, since every pair across it sees the
    step: a held run, whose verdict has one batch of :data:`ESTIMATE_CALLS`, was called not
    launch-bound about once in 30 beside two busy processes. Launch-bound when the growth is
    under :data:`LAG_GROWTH` of a window's reading. ``None`` without a batch of 3 windows on a
    free stream.
    """
    slopes: list[float] = []
    readings: list[int] = []
    for batch in batches:
        lags = batch.lags[:_SLOPE_WINDOWS]
        if len(lags) < 3:
            continue
        readings += batch.device[:_SLOPE_WINDOWS]
        slopes += [later - earlier for earlier, later in itertools.pairwise(lags)]
    if not slopes:
        return None
    slopes.sort()
    return slopes[len(slopes) // 2] < LAG_GROWTH * _median(readings)


def _per_call(ns: int, calls: int) -> int:
    return (ns + calls // 2) // calls


def _median(values: list[int]) -> int:
    return nearest_rank(sorted(values), 0.5)


def bench(
    fn: Callable[[Any], object],
    *,
    api: EventApi[Any, Any] | None = None,
    stream: Any = None,
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    setup: Callable[[Any], object] | None = None,
    noise_target: float = 0.01,
    min_n: int = 10,
    hold_stream: bool = False,
    calls_per_window: int | None = None,
    cold_cache: bool | None = None,
    graph: bool = False,
) -> BenchResult:
    """Call ``fn(stream)`` repeatedly and time each call with events on ``stream``.

    ``api`` defaults to :func:`eventapi.backend` (its default selection); ``stream`` to a new
    non-blocking stream of it, destroyed before returning. ``fn`` must enqueue its work on
    ``stream`` (a call that runs elsewhere reads as empty). ``setup(stream)``, when given, runs
    before each call, outside its timing (its device time is measured and left out of the
    gaps, and its wall time counts in the budgets): flush a cache or reset state there.

    Budgets are wall time in milliseconds, ``setup`` and readback included. ``warmup_ms`` caps
    the warm-up, which ends earlier once the recent readings show no trend. ``rep_ms`` caps the
    timed calls, which end earlier once the median's 95 % half-width is at most
    ``noise_target`` of it (a fraction; 0 never stops early) with at least ``min_n`` readings;
    to reach the 6 readings a 95 % interval needs, the run may go on to 10 times ``rep_ms``.
    ``calls_per_window`` puts that many calls in each window (reported per call; default:
    automatic, more than one only for a call under 10 timer ticks and without ``setup``).
    ``hold_stream=True`` holds the stream with a host function until each batch is enqueued,
    so calls run back to back and launch gaps drop out of the readings; it needs
    :class:`~eventapi.SupportsHostFunc`. An ``fn`` that does its work on the calling thread
    (host code, a CPU library) is not timed: held, the result says its work escaped the stream
    (``escaped``); free, that its readings are the host's time per call (launch-bound). Time
    host code with a host timer.

    ``cold_cache`` writes over the device's L2 cache before each window, outside it
    (:class:`~eventapi.SupportsCacheFlush`): ``None`` (the default) where the backend can and a
    window holds one call, ``True`` always (one call per window), ``False`` never.
    ``graph=True`` captures ``calls_per_window`` calls of ``fn`` into a graph and times each
    launch of it (:class:`~eventapi.SupportsGraphs`): the launch gaps between the calls are
    gone. Where the backend can read the device's clock (:class:`~eventapi.SupportsClocks`),
    it is read before and after each timed batch, and a throttled device is reported.

    The run ends within ``warmup_ms`` + 10 x ``rep_ms`` of wall time after its first call and
    estimate (at most nine windows; held, a probing call, eight held windows and 32 empty
    ones more), unless one window alone is longer than that.

    Blocks the calling thread. Returns a :class:`BenchResult`. Raises :class:`TypeError` for an
    argument of the wrong type (a budget that is not a number, a count that is not an ``int``,
    a ``hold_stream`` that is not a ``bool``, an ``fn`` or ``setup`` that is not callable, an
    ``api`` that is not a backend object); :class:`ValueError` for a bad budget or option (a
    NaN or infinite one included), or when ``hold_stream`` is given an ``fn`` that waits for
    its own stream (found in one probing call, within a second; never a hang);
    :class:`~eventapi.UnsupportedError` for ``hold_stream``, ``cold_cache=True`` or
    ``graph=True`` on a backend without what it needs; :class:`ValueError` too when ``graph``
    is given an ``fn`` that cannot be captured; :class:`~eventapi.CaptureError` on a capturing
    stream. Whatever ``fn`` or
    ``setup`` raise, and :class:`~eventapi.DriverError`, propagate after the profiler and the
    stream it made were released.
    """
    for what, value in (("fn", fn), ("setup", setup)):
        if not callable(value) and (what == "fn" or value is not None):
            raise TypeError(
                f"bench: {what} must be callable (it is called as {what}(stream)), not "
                f"{type(value).__qualname__} {bounded_repr(value)}"
            )
    options = _Options(
        warmup_ms=check_real(warmup_ms, "bench: warmup_ms", unit="milliseconds"),
        rep_ms=check_real(rep_ms, "bench: rep_ms", unit="milliseconds"),
        noise_target=check_real(noise_target, "bench: noise_target"),
        min_n=check_int(min_n, "bench: min_n"),
        held=check_bool(hold_stream, "bench: hold_stream"),
        calls_per_window=(
            None
            if calls_per_window is None
            else check_int(calls_per_window, "bench: calls_per_window", minimum=1)
        ),
        with_setup=setup is not None,
        cold=None if cold_cache is None else check_bool(cold_cache, "bench: cold_cache"),
        graph=check_bool(graph, "bench: graph"),
    )
    if api is None:
        from .._plugins._selection import backend

        api = backend()
    capable = capabilities_of(api, "bench(api=...)")  # TypeError for a non-backend
    for wanted, has, what, protocol in (
        (options.held, capable.host_func, "hold_stream", "SupportsHostFunc"),
        (options.cold, capable.cache_flush, "cold_cache", "SupportsCacheFlush"),
        (options.graph, capable.graphs, "graph", "SupportsGraphs"),
    ):
        if wanted and not has:
            raise UnsupportedError(
                f"bench({what}=True) needs a backend with {protocol}; {api.BACKEND} has none: "
                f"pass {what}=False"
            )
    # The profiler keeps no spans and no summary: the readings are kept here, exactly. What the
    # run made is released before the profiler closes.
    profiler = EventProfiler(api, stream, label="bench", max_names=2, max_spans=0)
    with profiler as prof, ExitStack() as release:
        run = _Runner(prof, fn, setup, options, capable, release)
        _estimate(run)
        _warm_up(run)
        timed, stopped = _time(run)
    return _result(run, timed, stopped)


def _capture(run: _Runner, calls: int) -> Any:
    """A graph of ``calls`` calls of ``fn``, captured from the stream, destroyed with the run;
    ValueError if it cannot be."""
    api: Any = run.prof.api
    stream = run.prof.stream
    failure: Exception | None = None
    api.stream_begin_capture(stream)
    try:
        for _ in range(calls):
            run.fn(stream)
    except Exception as exc:
        failure = exc
    finally:
        try:
            graph = api.stream_end_capture(stream)
            run.release.callback(api.graph_destroy, graph)
        except DriverError as exc:  # a call the capture could not take invalidated it
            failure = failure or exc
    if failure is None:
        return graph
    raise ValueError(
        f"bench(graph=True): fn could not be captured into a graph ({type(failure).__name__}: "
        f"{failure}). A capture takes only work enqueued on the stream: no synchronize, no "
        "host callback, no allocation. A framework that captures through its own API "
        "(torch.cuda.graph, CuPy's Stream.begin_capture) must make the graph itself: capture "
        "fn with it and bench a function that launches that graph, with graph=False"
    ) from failure


def _read_clocks(run: _Runner) -> None:
    """One reading of the device's clock, where the backend can take one."""
    api: Any = run.prof.api
    if not run.capable.clocks or run.clocks is None:
        return
    try:
        run.clocks.append(api.device_clocks())
    except UnsupportedError:
        run.clocks = None  # the backend cannot read them here: no more tries


def _estimate(run: _Runner) -> None:
    """The first call, untimed, then the windows that size the run (the module docstring)."""
    options = run.options
    stream = run.prof.stream
    api: Any = run.prof.api
    if run.setup is not None:
        run.setup(stream)
    run.fn(stream)
    api.stream_synchronize(stream)
    cold = options.cold
    if cold is None:  # where it can, unless the caller put more calls in a window
        cold = run.capable.cache_flush and options.calls_per_window in (None, 1)
    if cold and (size := api.cache_size_bytes()) > 0:
        run.flush, run.flush_bytes = api.cache_flush_create(), size
        run.release.callback(api.cache_flush_destroy, run.flush)
        # Run first (last in, first out): the buffer goes once the stream ran every flush.
        run.release.callback(api.stream_synchronize, stream)
    capture_ns = 0
    if options.graph:
        began = time.perf_counter_ns()
        run.graph = _capture(run, 1)
        capture_ns = time.perf_counter_ns() - began
    # One window alone first, so that a long call costs one call here, not eight.
    first = run.batch(1, held=False)
    # The rest unless they alone would spend rep_ms; held, the verdict needs them.
    if options.held or first.wall_ns * ESTIMATE_CALLS <= options.rep_ms * 1e6:
        run.batch(ESTIMATE_CALLS, held=False)
    sizing = run.free
    if options.held:
        run.batch(1, held=True)  # the probing call: ValueError if fn waits for its own stream
        sizing = [run.batch(ESTIMATE_CALLS, held=True)]
        # The same run with nothing in its windows: no setup, no flush, no call.
        nothing = replace(run, setup=None, flush=None, graph=None, per_window=0)
        run.empty = sorted(nothing.batch(EMPTY_WINDOWS, held=True).device)
    run.device_each = _median([d for b in sizing for d in b.device])
    per_window = options.calls_per_window
    if per_window is None:
        per_window = 1
        if not options.with_setup and run.flush is None and run.device_each < BATCH_BELOW_NS:
            per_window = min(MAX_PER_WINDOW, -(-BATCH_WINDOW_NS // max(run.device_each, 1)))
            # The host's time counts too: MIN_N windows of these calls fit in rep_ms (in graph
            # mode, capturing them does).
            each_call = max(run.host_each_ns, float(run.device_each), capture_ns, 1.0)
            per_window = max(1, min(per_window, int(options.rep_ms * 1e6 / MIN_N / each_call)))
    run.per_window = per_window
    if run.graph is not None and per_window > 1:
        run.graph = _capture(run, per_window)  # the graph of one call goes with the run
    per_read = sum(b.wall_ns for b in sizing) / sum(len(b.device) for b in sizing)
    run.each_ns = max(float(run.device_each), run.host_each_ns, per_read) * per_window


def _warm_up(run: _Runner) -> None:
    """Windows until the last readings show no trend, or ``warmup_ms`` is spent."""
    warmup_ms = run.options.warmup_ms
    end = time.perf_counter_ns() + int(warmup_ms * 1e6)
    recent: list[int] = []
    while (fits := int((end - time.perf_counter_ns()) / run.each_ns)) >= 1:
        batch = run.batch(min(TREND_WINDOWS, fits), held=run.options.held)
        run.warmup_n += len(batch.device)
        recent = (recent + batch.device)[-TREND_WINDOWS:]
        if len(recent) >= TREND_WINDOWS // 2 and not trend(recent):
            run.steady = True
            return
    if warmup_ms > 0:
        run.warnings.append(
            f"warm-up ended by its {warmup_ms:g} ms cap after {run.warmup_n} windows without "
            f"a steady state (a trend in the last {len(recent)} readings, or too few to test): "
            "raise warmup_ms"
        )


def _time(run: _Runner) -> tuple[_Batch, StoppedBy]:
    """Timed batches until a stopping rule holds: their readings, per call, and which rule.

    The readings' ``wall_ns`` is how long the timed batches took.
    """
    options = run.options
    timed = _Batch()
    now = time.perf_counter_ns
    start = now()
    deadline = start + int(options.rep_ms * 1e6)
    limit = start + int(LONGER_RUN * options.rep_ms * 1e6)
    _read_clocks(run)
    try:
        while True:
            n = len(timed.device)
            relative = _relative_noise(timed.device, run.resolution_ns)
            if n >= options.min_n and relative <= options.noise_target:
                return timed, "noise"
            left = now()
            if n >= MIN_N and left + run.each_ns > deadline:
                return timed, "time"
            if n >= 1 and left + run.each_ns > limit:
                return timed, "limit"
            if n < options.min_n:
                want = options.min_n - n
            elif relative < math.inf and options.noise_target > 0:
                # The noise of a median shrinks as 1/sqrt(n): ask for the n that would
                # reach the target, at most doubling (an early noise is a rough guide).
                want = min(n, max(1, math.ceil(n * (relative / options.noise_target) ** 2) - n))
            else:
                want = n
            fits = int((deadline - left) / run.each_ns)
            if n < MIN_N:  # past rep_ms only as far as 6 readings take, within the limit
                fits = min(max(fits, MIN_N - n), int((limit - left) / run.each_ns))
            batch = run.batch(max(1, min(want, fits, READ_BATCH)), held=options.held)
            _read_clocks(run)
            calls = run.per_window
            timed.device += [_per_call(d, calls) for d in batch.device]
            timed.host += [_per_call(h, calls) for h in batch.host]
            timed.gaps += [None if g is None else _per_call(g, calls) for g in batch.gaps]
            timed.setups += batch.setups
    finally:
        timed.wall_ns = now() - start


def _relative_noise(readings: list[int], resolution_ns: int) -> float:
    if len(readings) < MIN_N:
        return math.inf
    _, median, noise, _ = summarize(readings, resolution_ns)
    return noise / median if noise is not None and median > 0 else math.inf


def _result(run: _Runner, timed: _Batch, stopped: StoppedBy) -> BenchResult:
    options = run.options
    warnings = run.warnings
    ordered, median, noise, interval = summarize(timed.device, run.resolution_ns)
    n = len(ordered)
    if noise is None:
        warnings.append(
            f"only {n} readings (a call of about {run.device_each / 1e6:.3g} ms against "
            f"rep_ms={options.rep_ms:g}): below {MIN_N} no distribution-free 95 % interval of the "
            f"median exists; the readings range from {ordered[0]} to {ordered[-1]} ns. Raise rep_ms"
        )
    elif stopped != "noise" and options.noise_target > 0:
        warnings.append(
            f"stopped by the time cap ({options.rep_ms:g} ms) at a noise of "
            f"{noise / max(median, 1):.2%}, above the {options.noise_target:.2%} target: raise "
            "rep_ms for a quieter median"
        )
    api = run.prof.api
    launch_bound = _launch_bound(run.free)
    host_median = _median(timed.host)
    escaped: bool | None
    if options.held:
        why = _escape(run, median, host_median)
        escaped = why is not None
        if why is not None:
            # The other warnings advise on timing the stream better; there is nothing of fn's
            # on it to time.
            warnings[:] = [
                f"fn's work escaped the stream: {why}. bench times the work fn enqueues on "
                f"stream: if fn does its work on the calling thread, {_HOST_TIMER}; if that "
                "work belongs on the device, enqueue it on stream"
            ]
    else:
        escaped = None if launch_bound in (True, None) else False
        if launch_bound:
            hold = (
                "pass hold_stream=True to time that work alone"
                if run.capable.host_func
                else f"bench cannot hold {api.BACKEND}'s stream to time it alone (no host "
                "functions)"
            )
            warnings.append(
                "launch-bound: the stream waited for the host between calls, so each reading "
                f"is the host's time to make a call (its median {duration_text(host_median)}), "
                f"not the stream's work. If fn enqueues its work on stream, {hold}; if fn does "
                f"its work on the calling thread, {_HOST_TIMER}"
            )
    gaps = [g for g in timed.gaps if g is not None]
    clocks = run.clocks or []
    mhz = [c.clock_mhz for c in clocks]
    reasons = tuple(sorted({r for c in clocks for r in c.throttle_reasons}))
    slow = any(c.clock_mhz < THROTTLED_BELOW * c.max_clock_mhz for c in clocks)
    if reasons or slow:
        why = ", ".join(reasons) or f"a clock below {THROTTLED_BELOW:.0%} of its maximum"
        warnings.append(
            f"the device was throttled during the timed calls ({why}; its clock read {min(mhz)} to "
            f"{max(mhz)} MHz of {max(c.max_clock_mhz for c in clocks)} MHz), so the readings are "
            "those of a slowed device: check its cooling and power limit, and run again"
        )
    return BenchResult(
        n=n,
        min_ns=ordered[0],
        median_ns=median,
        mean_ns=sum(ordered) // n,
        max_ns=ordered[-1],
        noise_ns=noise,
        mad_ns=_median([abs(d - median) for d in ordered]),
        resolution_ns=run.resolution_ns,
        backend=api.BACKEND,
        interval_ns=interval,
        readings_ns=tuple(timed.device),
        host_ns=tuple(timed.host),
        gaps_ns=tuple(timed.gaps),
        host_median_ns=host_median,
        gap_median_ns=_median(gaps) if gaps else None,
        setup_median_ns=_median(timed.setups) if timed.setups else None,
        calls_per_window=run.per_window,
        held=options.held,
        launch_bound=launch_bound,
        escaped=escaped,
        stopped_by=stopped,
        noise_target=options.noise_target,
        warmup_n=run.warmup_n,
        steady=run.steady,
        elapsed_ns=timed.wall_ns,
        warnings=tuple(warnings),
        cold_cache=run.flush is not None,
        flush_bytes=run.flush_bytes,
        graph=options.graph,
        clock_mhz=(min(mhz), max(mhz)) if mhz else None,
        throttled=bool(reasons or slow) if clocks else None,
        throttle_reasons=reasons,
    )


def _escape(run: _Runner, median_ns: int, host_median_ns: int) -> str | None:
    """Why ``fn``'s work escaped a held stream, or ``None`` when the stream timed it.

    Its windows (``median_ns`` per call) read no longer than empty windows (the upper end of
    the 95 % interval of their median) plus a timer tick: nothing it enqueued took time the
    stream could see. Or its calls took :data:`ESCAPE_RATIO` times longer on the host than on
    the stream.
    """
    empty = median_interval(run.empty)
    if empty is not None and median_ns * run.per_window <= empty[1] + TIMER_RESOLUTION_NS:
        return (
            f"its windows read no longer than empty ones, so it enqueued nothing the stream "
            f"could time, while each call took {duration_text(host_median_ns)} on the host"
        )
    if host_median_ns >= ESCAPE_RATIO * max(median_ns, 1):
        return (
            f"each call took {duration_text(host_median_ns)} on the host and "
            f"{duration_text(median_ns)} on the stream, {host_median_ns // max(median_ns, 1)} "
            "times less, so the readings time only a sliver of it"
        )
    return None
