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
from dataclasses import dataclass
from typing import Any, Final, final

from .._arguments import bounded_repr, check_bool, check_int, check_real
from .._errors import CaptureError, UnsupportedError
from .._profiling._anchor import TIMER_RESOLUTION_NS
from .._profiling._profiler import EventProfiler
from .._profiling._span import Span
from .._protocol import EventApi, SupportsHostFunc, capabilities_of
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

_HOST_TIMER: Final = "time it with a host timer (time.perf_counter_ns, timeit) instead"


@final
class _Hold:
    """A host function that blocks its stream until released, or until its timeout."""

    __slots__ = ("_released", "_timeout_s", "timed_out_ns")

    def __init__(self, timeout_s: float) -> None:
        self._released = threading.Event()
        self._timeout_s = timeout_s
        self.timed_out_ns: int | None = None

    def __call__(self) -> None:
        if not self._released.wait(self._timeout_s):
            self.timed_out_ns = time.perf_counter_ns()

    def release(self) -> None:
        self._released.set()


@final
class _Batch:
    """One readback batch: per window, in time order."""

    __slots__ = ("device", "gaps", "host", "lags", "setups", "wall_ns")

    def __init__(self) -> None:
        self.device: list[int] = []
        self.host: list[int] = []
        self.gaps: list[int | None] = []
        self.lags: list[int] = []  # end stamped minus end recorded, on the host clock
        self.setups: list[int] = []
        self.wall_ns = 0


def _sync_error(timeout_s: float) -> ValueError:
    return ValueError(
        f"bench(hold_stream=True): fn did not return while the stream was held (the hold let "
        f"go after {timeout_s:.3g} s): fn waits for its own stream (a stream_synchronize, an "
        "event_wait, a blocking copy), which would wait for the hold forever. Remove the wait "
        "from fn, or pass hold_stream=False"
    )


@final
class _Runner:
    __slots__ = ("_api", "_fn", "_per_window", "_prof", "_setup", "_target", "host_each_ns")

    def __init__(
        self,
        prof: EventProfiler[Any, Any],
        fn: Callable[[Any], object],
        setup: Callable[[Any], object] | None,
    ) -> None:
        self._prof = prof
        self._api = prof.api
        self._target = prof.stream
        self._fn = fn
        self._setup = setup
        self._per_window = 1
        self.host_each_ns = 1.0  # host time per call, refined as batches are read

    def first_call(self) -> None:
        if self._setup is not None:
            self._setup(self._target)
        self._fn(self._target)
        self._api.stream_synchronize(self._target)

    def set_per_window(self, calls: int) -> None:
        self._per_window = calls

    def probe_hold(self) -> None:
        """One call behind a hold: ValueError if ``fn`` waits for its own stream."""
        timeout_s = max(HOLD_TIMEOUT_S, 20 * self.host_each_ns / 1e9)
        hold = _Hold(timeout_s)
        self._launch(hold)
        try:
            if self._setup is not None:
                self._setup(self._target)
            self._fn(self._target)
        finally:
            hold.release()
        self._api.stream_synchronize(self._target)
        if hold.timed_out_ns is not None:
            raise _sync_error(timeout_s)

    def _launch(self, hold: _Hold) -> None:
        api = self._api
        assert isinstance(api, SupportsHostFunc)  # checked by bench before any hold
        api.stream_launch_host_func(self._target, hold)

    def batch(self, count: int, *, held: bool, empty: bool = False) -> _Batch:
        """Run ``count`` windows, read them back in one wait, per window in time order.

        ``empty`` windows hold no call and no setup: what a window of no work reads.
        """
        prof = self._prof
        fn = self._fn
        setup = None if empty else self._setup
        target = self._target
        per_window = 0 if empty else self._per_window
        window = prof.window
        now = time.perf_counter_ns
        out = _Batch()
        hold: _Hold | None = None
        timeout_s = 0.0
        if held:
            expected_s = count * per_window * self.host_each_ns / 1e9
            timeout_s = max(HOLD_TIMEOUT_S, 20 * expected_s)
            hold = _Hold(timeout_s)
        began = now()
        if hold is not None:
            self._launch(hold)
        ends: list[int] = []
        host = out.host
        try:
            for _ in range(count):
                if setup is not None:
                    with window("setup"):
                        setup(target)
                opened = now()
                with window("call"):
                    for _ in range(per_window):
                        fn(target)
                closed = now()
                host.append(closed - opened)
                ends.append(closed)
        finally:
            if hold is not None:
                hold.release()
        spans = prof.collect()
        out.wall_ns = now() - began
        if hold is not None and hold.timed_out_ns is not None:
            raise _sync_error(timeout_s)
        _read(out, spans, ends, count, with_setup=setup is not None)
        if per_window:
            self.host_each_ns = max(1.0, sum(host) / (count * per_window))
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
    previous: Span | None = None
    for i, span in enumerate(calls):
        out.device.append(span.duration_ns)
        out.lags.append(span.end_ns - ends[i])
        if previous is None:
            out.gaps.append(None)
        else:
            idle = span.start_ns - previous.end_ns
            if setups:
                idle -= setups[i].end_ns - setups[i].start_ns
            out.gaps.append(max(0, idle))
        previous = span
    out.setups = [s.duration_ns for s in setups]


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
    readings.sort()
    return slopes[len(slopes) // 2] < LAG_GROWTH * nearest_rank(readings, 0.5)


def _per_call(values: list[int], calls: int) -> list[int]:
    if calls == 1:
        return values
    half = calls // 2
    return [(v + half) // calls for v in values]


@final
@dataclass(frozen=True, slots=True)
class _Arguments:
    """bench's numbers and flags, checked and converted: plain floats, ints and a bool."""

    warmup_ms: float
    rep_ms: float
    noise_target: float
    min_n: int
    calls_per_window: int | None
    hold_stream: bool


def _check_arguments(
    fn: object,
    warmup_ms: object,
    rep_ms: object,
    noise_target: object,
    min_n: object,
    calls_per_window: object,
    setup: object,
    hold_stream: object,
) -> _Arguments:
    for what, value in (("fn", fn), ("setup", setup)):
        if not callable(value) and (what == "fn" or value is not None):
            raise TypeError(
                f"bench: {what} must be callable (it is called as {what}(stream)), not "
                f"{type(value).__qualname__} {bounded_repr(value)}"
            )
    checked = _Arguments(
        warmup_ms=check_real(warmup_ms, "bench: warmup_ms", unit="milliseconds"),
        rep_ms=check_real(rep_ms, "bench: rep_ms", unit="milliseconds"),
        noise_target=check_real(noise_target, "bench: noise_target"),
        min_n=check_int(min_n, "bench: min_n"),
        calls_per_window=(
            None
            if calls_per_window is None
            else check_int(calls_per_window, "bench: calls_per_window")
        ),
        hold_stream=check_bool(hold_stream, "bench: hold_stream"),
    )
    if not (checked.warmup_ms >= 0.0 and checked.rep_ms > 0.0):
        raise ValueError(
            f"bench needs warmup_ms >= 0 and rep_ms > 0 (milliseconds), got "
            f"{bounded_repr(warmup_ms)} and {bounded_repr(rep_ms)}"
        )
    if not checked.noise_target >= 0.0:
        raise ValueError(
            f"bench needs noise_target >= 0 (a fraction: 0.01 is 1 %), got "
            f"{bounded_repr(noise_target)}"
        )
    if checked.min_n < MIN_N:
        raise ValueError(
            f"bench needs min_n >= {MIN_N}: below that no 95 % interval of the median exists, "
            f"got {bounded_repr(checked.min_n)}"
        )
    if checked.calls_per_window is not None:
        if checked.calls_per_window < 1:
            raise ValueError(
                f"calls_per_window must be >= 1, got {bounded_repr(checked.calls_per_window)}"
            )
        if checked.calls_per_window > 1 and setup is not None:
            raise ValueError(
                "bench: setup runs before every call outside its window, and batch mode puts "
                f"{calls_per_window} calls in one window; pass calls_per_window=1 or no setup"
            )
    return checked


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

    The run ends within ``warmup_ms`` + 10 x ``rep_ms`` of wall time after its first call and
    estimate (at most nine windows; held, a probing call, eight held windows and 32 empty
    ones more), unless one window alone is longer than that.

    Blocks the calling thread. Returns a :class:`BenchResult`. Raises :class:`TypeError` for an
    argument of the wrong type (a budget that is not a number, a count that is not an ``int``,
    a ``hold_stream`` that is not a ``bool``, an ``fn`` or ``setup`` that is not callable, an
    ``api`` that is not a backend object); :class:`ValueError` for a bad budget or option (a
    NaN or infinite one included), or when ``hold_stream`` is given an ``fn`` that waits for
    its own stream (found in one probing call, within a second; never a hang);
    :class:`~eventapi.UnsupportedError` for ``hold_stream`` on a backend without host
    functions; :class:`~eventapi.CaptureError` on a capturing stream. Whatever ``fn`` or
    ``setup`` raise, and :class:`~eventapi.DriverError`, propagate after the profiler and the
    stream it made were released.
    """
    checked = _check_arguments(
        fn, warmup_ms, rep_ms, noise_target, min_n, calls_per_window, setup, hold_stream
    )
    warmup_ms, rep_ms, noise_target = checked.warmup_ms, checked.rep_ms, checked.noise_target
    min_n, calls_per_window = checked.min_n, checked.calls_per_window
    hold_stream = checked.hold_stream
    if api is None:
        from .._plugins._selection import backend

        api = backend()
    else:
        capabilities_of(api, "bench(api=...)")  # TypeError for a non-backend
    if hold_stream and not isinstance(api, SupportsHostFunc):
        raise UnsupportedError(
            f"bench(hold_stream=True) needs a backend with host functions (SupportsHostFunc); "
            f"{api.BACKEND} has none: pass hold_stream=False"
        )
    warnings: list[str] = []
    # The profiler keeps no spans and no summary: the readings are kept here, exactly.
    with EventProfiler(api, stream, label="bench", max_names=2, max_spans=0) as prof:
        run = _Runner(prof, fn, setup)
        run.first_call()
        plan = _estimate(run, rep_ms, hold_stream, calls_per_window, with_setup=setup is not None)
        _warm_up(run, plan, warmup_ms, warnings)
        timed = _Timed(plan.per_window)
        stopped = timed.run(run, plan, rep_ms, noise_target, min_n)
    return _result(api, plan, timed, stopped, rep_ms, noise_target, warnings)


@final
class _Plan:
    """What the estimate decided, and what later phases add to it."""

    __slots__ = (
        "device_each",
        "each_ns",
        "empty",
        "free",
        "held",
        "per_window",
        "steady",
        "warmup_n",
    )

    def __init__(self, held: bool) -> None:
        self.held = held
        self.free: list[_Batch] = []  # batches on a stream left running free, for the verdict
        self.empty: list[int] = []  # held: sorted readings of windows with nothing in them
        self.device_each = 0
        self.per_window = 1
        self.each_ns = 1.0  # a window's wall time, readback included
        self.warmup_n = 0
        self.steady = False


def _estimate(
    run: _Runner, rep_ms: float, held: bool, calls_per_window: int | None, *, with_setup: bool
) -> _Plan:
    plan = _Plan(held)
    # One window alone first, so that a long call costs one call here, not eight.
    first = run.batch(1, held=False)
    plan.free.append(first)
    # The rest unless they alone would spend rep_ms; held, the verdict needs them.
    if held or first.wall_ns * ESTIMATE_CALLS <= rep_ms * 1e6:
        plan.free.append(run.batch(ESTIMATE_CALLS, held=False))
    if held:
        run.probe_hold()
        sizing = [run.batch(ESTIMATE_CALLS, held=True)]
        plan.empty = sorted(run.batch(EMPTY_WINDOWS, held=True, empty=True).device)
    else:
        sizing = plan.free
    plan.device_each = nearest_rank(sorted(d for b in sizing for d in b.device), 0.5)
    per_window = calls_per_window
    if per_window is None:
        per_window = 1
        if not with_setup and plan.device_each < BATCH_BELOW_NS:
            per_window = min(MAX_PER_WINDOW, -(-BATCH_WINDOW_NS // max(plan.device_each, 1)))
            # The host's time counts too: MIN_N windows of these calls fit in rep_ms.
            each_call = max(run.host_each_ns, float(plan.device_each), 1.0)
            per_window = max(1, min(per_window, int(rep_ms * 1e6 / MIN_N / each_call)))
    run.set_per_window(per_window)
    plan.per_window = per_window
    per_read = sum(b.wall_ns for b in sizing) / sum(len(b.device) for b in sizing)
    plan.each_ns = max(float(plan.device_each), run.host_each_ns, per_read) * per_window
    return plan


def _warm_up(run: _Runner, plan: _Plan, warmup_ms: float, warnings: list[str]) -> None:
    """Windows until the last readings show no trend, or ``warmup_ms`` is spent."""
    now = time.perf_counter_ns
    end = now() + int(warmup_ms * 1e6)
    recent: list[int] = []
    while True:
        fits = int((end - now()) / plan.each_ns)
        if fits < 1:
            break
        batch = run.batch(min(TREND_WINDOWS, fits), held=plan.held)
        plan.each_ns = batch.wall_ns / len(batch.device)
        plan.warmup_n += len(batch.device)
        if not plan.held:
            plan.free.append(batch)
        recent = (recent + batch.device)[-TREND_WINDOWS:]
        if len(recent) >= TREND_WINDOWS // 2 and not trend(recent):
            plan.steady = True
            return
    if warmup_ms > 0:
        warnings.append(
            f"warm-up ended by its {warmup_ms:g} ms cap after {plan.warmup_n} windows without "
            f"a steady state (a trend in the last {len(recent)} readings, or too few to test): "
            "raise warmup_ms"
        )


@final
class _Timed:
    """The timed windows' readings, per call, in time order."""

    __slots__ = ("device", "elapsed_ns", "gaps", "host", "resolution_ns", "setups")

    def __init__(self, per_window: int) -> None:
        self.device: list[int] = []
        self.host: list[int] = []
        self.gaps: list[int | None] = []
        self.setups: list[int] = []
        self.resolution_ns = -(-TIMER_RESOLUTION_NS // per_window)
        self.elapsed_ns = 0

    def run(
        self, run: _Runner, plan: _Plan, rep_ms: float, noise_target: float, min_n: int
    ) -> StoppedBy:
        """Timed batches until a stopping rule holds; which one it was."""
        now = time.perf_counter_ns
        start = now()
        deadline = start + int(rep_ms * 1e6)
        limit = start + int(LONGER_RUN * rep_ms * 1e6)
        try:
            while True:
                n = len(self.device)
                relative = self._relative_noise()
                if n >= min_n and relative <= noise_target:
                    return "noise"
                left = now()
                if n >= MIN_N and left + plan.each_ns > deadline:
                    return "time"
                if n >= 1 and left + plan.each_ns > limit:
                    return "limit"
                if n < min_n:
                    want = min_n - n
                elif relative < math.inf and noise_target > 0:
                    # The noise of a median shrinks as 1/sqrt(n): ask for the n that would
                    # reach the target, at most doubling (an early noise is a rough guide).
                    want = min(n, max(1, math.ceil(n * (relative / noise_target) ** 2) - n))
                else:
                    want = n
                fits = int((deadline - left) / plan.each_ns)
                if n < MIN_N:  # past rep_ms only as far as 6 readings take, within the limit
                    fits = min(max(fits, MIN_N - n), int((limit - left) / plan.each_ns))
                self._add(run, plan, max(1, min(want, fits, READ_BATCH)))
        finally:
            self.elapsed_ns = now() - start

    def _relative_noise(self) -> float:
        if len(self.device) < MIN_N:
            return math.inf
        _, median, noise, _ = summarize(self.device, self.resolution_ns)
        assert noise is not None  # n >= MIN_N
        return noise / median if median > 0 else math.inf

    def _add(self, run: _Runner, plan: _Plan, count: int) -> None:
        batch = run.batch(count, held=plan.held)
        plan.each_ns = batch.wall_ns / count
        if not plan.held:
            plan.free.append(batch)
        calls = plan.per_window
        self.device += _per_call(batch.device, calls)
        self.host += _per_call(batch.host, calls)
        self.gaps += [None if g is None else (g + calls // 2) // calls for g in batch.gaps]
        self.setups += batch.setups


def _result(
    api: EventApi[Any, Any],
    plan: _Plan,
    timed: _Timed,
    stopped: StoppedBy,
    rep_ms: float,
    noise_target: float,
    warnings: list[str],
) -> BenchResult:
    ordered, median, noise, interval = summarize(timed.device, timed.resolution_ns)
    n = len(ordered)
    if noise is None:
        warnings.append(
            f"only {n} readings (a call of about {plan.device_each / 1e6:.3g} ms against "
            f"rep_ms={rep_ms:g}): below {MIN_N} no distribution-free 95 % interval of the "
            f"median exists; the readings range from {ordered[0]} to {ordered[-1]} ns. "
            "Raise rep_ms"
        )
    elif stopped != "noise" and noise_target > 0:
        warnings.append(
            f"stopped by the time cap ({rep_ms:g} ms) at a noise of "
            f"{noise / max(median, 1):.2%}, above the {noise_target:.2%} target: raise "
            "rep_ms for a quieter median"
        )
    launch_bound = _launch_bound(plan.free)
    host_median = nearest_rank(sorted(timed.host), 0.5)
    escaped: bool | None
    if plan.held:
        why = _escape(plan, median, host_median)
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
                if isinstance(api, SupportsHostFunc)
                else f"bench cannot hold {api.BACKEND}'s stream to time it alone (no host "
                "functions)"
            )
            per_call = duration_text(host_median)
            warnings.append(
                "launch-bound: the stream waited for the host between calls, so each reading "
                f"is the host's time to make a call (its median {per_call}), not the stream's "
                f"work. If fn enqueues its work on stream, {hold}; if fn does its work on the "
                f"calling thread, {_HOST_TIMER}"
            )
    known_gaps = sorted(g for g in timed.gaps if g is not None)
    return BenchResult(
        n=n,
        min_ns=ordered[0],
        median_ns=median,
        mean_ns=sum(ordered) // n,
        max_ns=ordered[-1],
        noise_ns=noise,
        mad_ns=nearest_rank(sorted(abs(d - median) for d in ordered), 0.5),
        resolution_ns=timed.resolution_ns,
        backend=api.BACKEND,
        interval_ns=interval,
        readings_ns=tuple(timed.device),
        host_ns=tuple(timed.host),
        gaps_ns=tuple(timed.gaps),
        host_median_ns=host_median,
        gap_median_ns=nearest_rank(known_gaps, 0.5) if known_gaps else None,
        setup_median_ns=nearest_rank(sorted(timed.setups), 0.5) if timed.setups else None,
        calls_per_window=plan.per_window,
        held=plan.held,
        launch_bound=launch_bound,
        escaped=escaped,
        stopped_by=stopped,
        noise_target=noise_target,
        warmup_n=plan.warmup_n,
        steady=plan.steady,
        elapsed_ns=timed.elapsed_ns,
        warnings=tuple(warnings),
        _sorted=ordered,
    )


def _escape(plan: _Plan, median_ns: int, host_median_ns: int) -> str | None:
    """Why ``fn``'s work escaped a held stream, or ``None`` when the stream timed it.

    Its windows (``median_ns`` per call) read no longer than empty windows (the upper end of
    the 95 % interval of their median) plus a timer tick: nothing it enqueued took time the
    stream could see. Or its calls took :data:`ESCAPE_RATIO` times longer on the host than on
    the stream.
    """
    window_ns = median_ns * plan.per_window
    empty = median_interval(plan.empty)
    if empty is not None and window_ns <= empty[1] + TIMER_RESOLUTION_NS:
        return (
            f"its windows read no longer than empty ones, so it enqueued nothing the stream "
            f"could time, while each call took {duration_text(host_median_ns)} on the host"
        )
    if host_median_ns >= ESCAPE_RATIO * max(median_ns, 1):
        return (
            f"each call took {duration_text(host_median_ns)} on the host and "
            f"{duration_text(median_ns)} on the stream, "
            f"{host_median_ns // max(median_ns, 1)} times less, so the readings time only a "
            "sliver of it"
        )
    return None
