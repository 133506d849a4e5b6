"""eventapi.bench's rules on host: when it stops, what it flags, launch gaps, the hold, batches.

Known delays are host functions that spin for their length on the stream's worker (see
``test_bench.py``). Where a test needs the host to take time enqueuing a call, that time is
spent yielding the GIL (``time.sleep(0)`` until a deadline): the host backend's device is a
Python thread, and a host that spins holding the GIL would stall the device it feeds.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable
from typing import NamedTuple

import pytest
from protocol_only import ProtocolOnly
from test_bench import Spins, launch, median, spin, within

import eventapi
from eventapi._bench import BenchResult, _run
from eventapi.host import HostBackend

FLOOR_DRIFT = 1.0  # a host function's dispatch moved between 0.8 and 1.7 us from run to run
# beside two busy loops on two cores; the bracketing runs take some of that out, not all


class Calls:
    """An ``fn``'s calls as it timed them itself: when each began, in order."""

    def __init__(self) -> None:
        self.began: list[int] = []

    def longest_spacing(self) -> int:
        """The longest time from one call's start to the next's."""
        return max(b - a for a, b in itertools.pairwise(self.began))


class LastBatch(NamedTuple):
    """A run's last readback batch, as the times of ``fn``'s calls place it (one a window)."""

    timed_ns: int
    """When the first timed window's call began."""
    began_ns: int
    """When the batch's first call began."""
    window: int
    """The index of the batch's first window among the readings."""
    pace_ns: float
    """The batch's wall time per window, at most: from its first call to after the run."""
    previous: int | None
    """The index of the batch before it's first window, or None when it was the first."""


def last_batch(result: BenchResult, calls: Calls, ended: int) -> LastBatch:
    """The last readback batch of ``result``, whose ``fn`` recorded its calls in ``calls``.

    The timed windows are ``fn``'s last ``result.n`` calls, and a batch starts at a window with
    no gap (``None``: it follows the previous batch's wait).
    """
    first = len(calls.began) - result.n
    starts = [i for i, gap in enumerate(result.gaps_ns) if gap is None]
    index = starts[-1]
    began = calls.began[first + index]
    pace = (ended - began) / (result.n - index)
    return LastBatch(calls.began[first], began, index, pace, starts[-2] if starts[1:] else None)


def busy_host(delay_ns: int) -> None:
    """Host work of ``delay_ns`` that leaves the GIL to the device thread."""
    deadline = time.perf_counter_ns() + delay_ns
    while time.perf_counter_ns() < deadline:
        time.sleep(0)


def test_a_steady_delay_reaches_the_noise_target_and_stops_early(host: HostBackend) -> None:
    result = eventapi.bench(launch(host, 1_000_000), api=host, noise_target=0.01, rep_ms=2000)
    assert result.relative_noise is not None
    # The rule, judged by the noise the run measured: tens of readings of a steady spin reach
    # 1 %, and the run stops there, early. A machine busy enough to stretch the spins unevenly
    # for the whole 2 s keeps the noise above 1 %: then the cap stops the run, and says so.
    if result.relative_noise <= 0.01:
        assert result.stopped_by == "noise"
        assert result.n >= 10  # min_n
        assert result.elapsed_ns < 2000 * 1_000_000
        assert not any("time cap" in w for w in result.warnings)
    else:
        assert result.stopped_by == "time"
        assert any("time cap" in w for w in result.warnings)


def test_a_noisy_delay_hits_the_time_cap_and_says_so(host: HostBackend) -> None:
    # Uniform over 0.5-1.5 ms: a 1 % noise of the median would take thousands of calls.
    rng = random.Random(7)
    calls = Calls()

    def noisy(stream: object) -> None:
        calls.began.append(time.perf_counter_ns())
        host.stream_launch_host_func(stream, spin(rng.randint(500_000, 1_500_000)))

    rep_ns = 40 * 1_000_000
    result = eventapi.bench(noisy, api=host, warmup_ms=0, rep_ms=40)
    ended = time.perf_counter_ns()
    assert result.stopped_by == "time"
    assert result.relative_noise is not None
    assert result.relative_noise > 0.01
    assert any("time cap (40 ms)" in w and "raise rep_ms" in w for w in result.warnings)
    # The cap is wall time, seen through the times of fn's calls (one per window).
    batch = last_batch(result, calls, ended)
    opening = result.host_ns[batch.window]  # its first window's host time: it opens before fn
    # A batch starts only when its windows, at the pace of the batch before, fit in the cap
    # (once the 6 readings of an interval are in, which the first batch of calls this short
    # brings). That pace was at least the device time of its windows, which ran one after
    # another: so the last batch began, and its windows at that pace ended, within 40 ms of
    # the timed phase's first call, give or take the opening of its first window. How much
    # slower a loaded machine then made them is the machine's, not the cap's.
    began = batch.began_ns - batch.timed_ns
    assert began <= rep_ns + opening
    if batch.previous is not None:
        before = result.readings_ns[batch.previous : batch.window]
        at_their_pace = (result.n - batch.window) * sum(before) / len(before)
        assert began + at_their_pace <= rep_ns + opening
    # And the run went on until the next window, at the last batch's pace, would have passed
    # the cap. However long a loaded machine makes the calls and their readback, both sides are
    # what this run measured.
    assert result.elapsed_ns + batch.pace_ns + opening >= rep_ns


def test_a_call_longer_than_the_budget_is_flagged_with_its_range(host: HostBackend) -> None:
    # 20 ms calls against rep_ms=5: the longer run (10 x rep_ms) buys 2 or 3 readings.
    result = eventapi.bench(launch(host, 20_000_000), api=host, warmup_ms=0, rep_ms=5)
    assert result.n < 6
    assert result.noise_ns is None
    assert result.interval_ns is None
    assert result.relative_noise is None
    assert result.stopped_by == "limit"
    assert any("no distribution-free 95 % interval" in w for w in result.warnings)
    assert f"range from {result.min_ns} to {result.max_ns} ns" in result.warnings[0]
    assert "no 95 % interval below 6 readings" in result.describe()
    assert result.compare(result).low is None


def test_the_run_goes_past_rep_ms_to_reach_six_readings(host: HostBackend) -> None:
    # 1 ms calls against rep_ms=2: one or two would fit; the longer run (20 ms) reaches the
    # 6 of an interval unless a loaded machine stretches each call threefold. A run that
    # stopped at rep_ms would read 2 and stop by time, or by the limit before it was reached.
    calls = Calls()
    spin_ms = launch(host, 1_000_000)

    def fn(stream: object) -> None:
        calls.began.append(time.perf_counter_ns())
        spin_ms(stream)

    result = eventapi.bench(fn, api=host, warmup_ms=0, rep_ms=2)
    ended = time.perf_counter_ns()
    if result.stopped_by == "time":
        assert result.n == 6
        assert result.noise_ns is not None
        # Past rep_ms: six windows that each spun 1 ms on one stream, one after another.
        assert sum(result.readings_ns) > 2 * 1_000_000
    else:  # a machine so loaded that a 1 ms spin takes over 3 ms: the limit stopped it
        assert result.stopped_by == "limit"
        assert result.n < 6
        # It went on until the next window, at the last batch's pace, would have passed the
        # limit, 10 x rep_ms: as this run measured its windows, not as a fixed figure.
        batch = last_batch(result, calls, ended)
        limit_ns = _run.LONGER_RUN * 2 * 1_000_000
        assert result.elapsed_ns + batch.pace_ns + result.host_ns[batch.window] >= limit_ns


def launch_bound_call(api: HostBackend, spins: Spins) -> Callable[[object], None]:
    """200 us of host time to enqueue 20 us of device work."""
    device = spins.launch(api, 20_000)

    def fn(stream: object) -> None:
        busy_host(200_000)
        device(stream)

    return fn


def test_a_launch_bound_call_is_reported_and_the_hold_reads_its_device_time(
    host: HostBackend,
) -> None:
    free = eventapi.bench(launch_bound_call(host, Spins()), api=host, warmup_ms=5, rep_ms=40)
    assert free.launch_bound is True
    assert free.escaped is None  # a free stream paced by the host cannot tell
    assert any("launch-bound" in w and "hold_stream=True" in w for w in free.warnings)
    # Left free, the stream waits for the host: each reading holds the 200 us of host time.
    assert free.median_ns > 200_000

    spins = Spins()
    held = eventapi.bench(
        launch_bound_call(host, spins), api=host, warmup_ms=5, rep_ms=40, hold_stream=True
    )
    assert held.held
    assert held.launch_bound is True
    assert held.escaped is False  # 200 us on the host against 20 us on the stream: launch-bound
    assert held.noise_ns is not None
    # Held, the calls run back to back: each reading is its 20 us spin and its dispatch, not
    # the 200 us of host time between calls (the spins bracket it: test_bench's docstring).
    assert held.calls_per_window == 1
    brackets = spins.brackets(held.n)
    assert within(held.readings_ns, brackets)
    assert held.median_ns >= 20_000 - held.noise_ns
    assert held.median_ns <= median([high for _, high in brackets]) + held.noise_ns
    assert held.host_median_ns > 200_000  # the host time is still reported beside it


def _batch(lags_us: list[int], device_us: list[int]) -> _run._Batch:
    batch = _run._Batch()
    batch.lags = [us * 1000 for us in lags_us]
    batch.device = [us * 1000 for us in device_us]
    return batch


def test_a_stall_of_the_stream_does_not_read_as_a_slower_device() -> None:
    # A held run's verdict batch, as a loaded machine gave it: 200 us of host time a call, the
    # stream's worker stalled 2.2 ms at the sixth window and then drained back. The slopes of
    # all pairs read that step as growth (15 of the 28 pairs straddle it); the steps from one
    # window to the next are flat but for it.
    stalled = _batch(
        [34, 32, 53, 35, 37, 2241, 1984, 1715], [317, 270, 245, 265, 284, 2432, 22, 21]
    )
    assert _run._launch_bound([stalled]) is True
    # A device slower than the host: the lag grows by about 100 us every call, stall or not.
    slower = _batch([100, 200, 300, 2600, 2700, 2800, 2900, 3000], [300] * 8)
    assert _run._launch_bound([slower]) is False


def test_a_device_bound_call_is_not_launch_bound(host: HostBackend) -> None:
    result = eventapi.bench(launch(host, 500_000), api=host, warmup_ms=0, rep_ms=20)
    assert result.launch_bound is False
    assert result.escaped is False
    assert not any("launch-bound" in w for w in result.warnings)


def test_the_hold_refuses_an_fn_that_synchronizes_its_stream(host: HostBackend) -> None:
    took: list[int] = []

    def syncing(stream: object) -> None:
        began = time.perf_counter_ns()
        launch(host, 10_000)(stream)
        host.stream_synchronize(stream)  # would wait for the hold forever
        took.append(time.perf_counter_ns() - began)

    began = time.perf_counter_ns()
    with pytest.raises(ValueError, match="waits for its own stream") as caught:
        eventapi.bench(syncing, api=host, hold_stream=True)
    spent = time.perf_counter_ns() - began
    assert "hold_stream=False" in str(caught.value)
    assert "the hold let go after 1 s" in str(caught.value)
    # Found by one probing call behind a 1 s hold, not a hang: that call alone waited for the
    # hold to let go, and everything else bench did took less than that one wait.
    hold_ns = _run.HOLD_TIMEOUT_S * 1e9
    *others, probe = sorted(took)
    assert probe >= hold_ns
    assert all(other < hold_ns for other in others)
    assert spent - probe < probe


def test_the_hold_needs_host_functions(host: HostBackend) -> None:
    from eventapi import UnsupportedError

    with pytest.raises(UnsupportedError, match="SupportsHostFunc"):
        eventapi.bench(lambda s: None, api=ProtocolOnly(host), hold_stream=True)


def test_batch_mode_times_a_sub_microsecond_call_within_its_noise(host: HostBackend) -> None:
    """A 500 ns spin on a held stream, against an empty host function and an empty ``fn``.

    The spin's floor is the same host function with a zero-length spin (its dispatch, about a
    microsecond here). That floor drifts between runs on a loaded machine by more than one
    run's noise (the noise is the median's within one run): it is measured just before and
    just after the spin, and the larger of the two, with :data:`FLOOR_DRIFT` on top, bounds
    the spin from above. The lower bound, a spin is never shorter than itself, is exact.
    """
    before = eventapi.bench(launch(host, 0), api=host, hold_stream=True, rep_ms=50)
    short = eventapi.bench(launch(host, 500), api=host, hold_stream=True, rep_ms=50)
    after = eventapi.bench(launch(host, 0), api=host, hold_stream=True, rep_ms=50)
    nothing = eventapi.bench(lambda s: None, api=host, hold_stream=True, rep_ms=50)
    for result in (before, short, after, nothing):
        assert result.calls_per_window > 1  # chosen automatically: calls under ten ticks
        assert result.resolution_ns < 1_000  # the tick, shared by the calls of a window
        assert result.noise_ns is not None
    assert short.noise_ns is not None
    floor = max(before, after, key=lambda r: r.median_ns)
    assert floor.noise_ns is not None
    assert 500 - short.noise_ns <= short.median_ns
    upper = 500 + floor.median_ns * (1 + FLOOR_DRIFT) + short.noise_ns + floor.noise_ns
    assert short.median_ns <= upper
    # Batch mode resolves an empty host function from an empty fn (a few ns per call).
    assert before.interval_ns is not None
    assert nothing.interval_ns is not None
    assert before.interval_ns[0] > nothing.interval_ns[1]
    # An empty fn enqueues nothing: its work, if any, escaped the stream; the host functions
    # are on it.
    assert [r.escaped for r in (before, short, after, nothing)] == [False, False, False, True]


def test_a_comparison_states_which_is_faster(host: HostBackend) -> None:
    # 100 and 500 us: enough readings of each in 40 ms for two 97.5 % intervals even when a
    # loaded machine stretches the spins several times over.
    short = eventapi.bench(launch(host, 100_000), api=host, warmup_ms=0, rep_ms=40)
    long = eventapi.bench(launch(host, 500_000), api=host, warmup_ms=0, rep_ms=40)
    both = short.compare(long)
    assert both.low is not None
    assert both.high is not None
    assert both.low <= both.ratio <= both.high
    assert both.verdict == "faster"
    assert long.compare(short).verdict == "slower"
    assert short.compare(short).verdict == "same"


# -- work that escapes the stream ----------------------------------------------------------


def on_host(
    delay_ns: int, calls: Calls, then: Callable[[object], None] | None = None
) -> Callable[[object], None]:
    """An fn that does its work on the calling thread: a busy loop, then ``then(stream)``."""

    def fn(stream: object) -> None:
        began = time.perf_counter_ns()
        calls.began.append(began)
        while time.perf_counter_ns() < began + delay_ns:
            pass
        if then is not None:
            then(stream)

    return fn


def estimate_calls(held: bool) -> int:
    """The most calls of fn before the budgets start (docs/bench.md): the first, untimed, and
    the estimate's windows, one and eight more; held, a probing call and eight held windows.

    Free, the eight come only where they fit in ``rep_ms``: with fewer, the call at this index
    is already a budgeted one, and a cap counted from it only the looser.
    """
    return 1 + 1 + _run.ESTIMATE_CALLS + ((1 + _run.ESTIMATE_CALLS) if held else 0)


@pytest.mark.parametrize(
    ("held", "warmup_ms", "rep_ms"),
    # Held with small budgets: before batch mode counted the host's time, one window of a few
    # hundred of these calls ran far past them. Free with enough for the launch-bound verdict
    # however much a loaded machine stretches the calls.
    [(False, 5.0, 20.0), (True, 1.0, 2.0)],
    ids=["free", "held"],
)
def test_work_on_the_calling_thread_is_named_and_the_run_keeps_its_cap(
    host: HostBackend, held: bool, warmup_ms: float, rep_ms: float
) -> None:
    # The new user's case: 500 us of work on the calling thread, nothing enqueued.
    calls = Calls()
    began = time.perf_counter_ns()
    result = eventapi.bench(
        on_host(500_000, calls), api=host, warmup_ms=warmup_ms, rep_ms=rep_ms, hold_stream=held
    )
    spent = time.perf_counter_ns() - began
    # The cap: warmup_ms + 10 x rep_ms once the estimate is done, which this run measures as
    # the time to its first call after the estimate's; past it by at most the last window and
    # its readback, which this run measures as the longest spacing of two calls' starts.
    after_estimate = calls.began[min(estimate_calls(held), len(calls.began) - 1)] - began
    cap = after_estimate + round((warmup_ms + _run.LONGER_RUN * rep_ms) * 1e6)
    assert spent <= cap + calls.longest_spacing()
    line = result.describe()
    if held:
        # Held, the stream's own time shows the work was not on it: the result says so and
        # what to do, and prints no figure of the readings as if they were fn's time.
        assert result.escaped is True
        (warning,) = result.warnings
        assert "escaped the stream" in warning
        assert "host timer" in warning
        assert "enqueue" in warning
        assert "escaped the stream" in line
        assert "\u00b1" not in line
        assert "median" not in line
        assert "min " not in line
    else:
        # Free, the stream waited for the host: each reading is the host's time to make a call.
        assert result.launch_bound is True
        assert result.escaped is None
        (warning,) = [w for w in result.warnings if "launch-bound" in w]
        assert "the host's time" in warning
        assert "not the stream's work" in warning
        assert "host timer" in warning
        assert "hold_stream=True" in warning
        assert "the host's time per call, not the stream's work" in line


def test_a_call_far_longer_on_the_host_than_on_the_stream_escaped_it(host: HostBackend) -> None:
    # 10 ms on the calling thread, then a 20 us spin on the stream: the stream sees the spin
    # and its dispatch, a few thousandths of the call (a hundredth where a loaded machine
    # stretches them).
    calls = Calls()
    result = eventapi.bench(
        on_host(10_000_000, calls, then=launch(host, 20_000)),
        api=host,
        warmup_ms=5,
        rep_ms=20,
        hold_stream=True,
    )
    assert result.host_median_ns >= _run.ESCAPE_RATIO * result.median_ns
    assert result.escaped is True
    (warning,) = result.warnings
    assert "escaped the stream" in warning
    assert "times less" in warning  # the host's time against the stream's, not empty windows
    # What the stream saw is more than empty windows read: the spins are in the readings.
    assert result.min_ns * result.calls_per_window >= 20_000
