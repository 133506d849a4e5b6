"""eventapi.bench on host: known delays are measured within the noise the result states.

A known delay is a host function on the stream that spins on ``time.perf_counter_ns`` for
exactly its length (a spin, not a sleep: a sleeping thread wakes late by a scheduler's whim, a
spinning one leaves within a loop iteration of its deadline). Around it, the host backend adds
the dispatch of a host function.

The host backend's device is a Python thread on a shared CPU: when the machine is loaded, the
operating system takes that CPU away mid-spin, and a spin whose deadline passes meanwhile
ends late; the dispatch around it stretches too. Both are the device's own time, which no
method can take out, by as much as the load makes it. So each spin times itself on the
stream's thread (:class:`Spins`), whose clock the host backend stamps its events with: a
window around a spin reads at least the spin, and at most the time from the end of the spin
before it to the start of the spin after it, whatever the load.

Where a test bounds a duration, it bounds it by what the run measured (its readings, the spins'
own times, the times of ``fn``'s calls), never by a fixed wall-clock figure: a loaded machine
stretches both sides alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

import eventapi
from eventapi.host import HostBackend

DELAY_NS = 1_000_000  # 1 ms: long beside the dispatch floor (about a microsecond)


def spin(delay_ns: int) -> Callable[[], None]:
    def run() -> None:
        deadline = time.perf_counter_ns() + delay_ns
        while time.perf_counter_ns() < deadline:
            pass

    return run


class Spins:
    """Known delays that time themselves: when each began and ended, in stream order."""

    def __init__(self) -> None:
        self.began: list[int] = []
        self.ended: list[int] = []

    def launch(self, api: HostBackend, delay_ns: int) -> Callable[[object], None]:
        def run() -> None:
            began = time.perf_counter_ns()
            while time.perf_counter_ns() < began + delay_ns:
                pass
            self.ended.append(time.perf_counter_ns())
            self.began.append(began)

        def fn(stream: object) -> None:
            api.stream_launch_host_func(stream, run)

        return fn

    def brackets(self, n: int) -> list[tuple[int, int]]:
        """What a window around each of the last ``n`` spins, one window a spin, may read.

        At least the spin as it timed itself; at most the time from the previous spin's end to
        the next one's start, since the window's two events are stamped between them. The last
        spin has no next one and no bracket: one bracket for each of the first ``n - 1``.
        """
        first = len(self.began) - n
        return [
            (self.ended[i] - self.began[i], self.began[i + 1] - self.ended[i - 1])
            for i in range(first, len(self.began) - 1)
        ]


def median(values: list[int]) -> int:
    """Nearest rank, the lower middle of an even count, as a result's ``median_ns``."""
    return sorted(values)[(len(values) + 1) // 2 - 1]


def within(readings: tuple[int, ...], brackets: list[tuple[int, int]]) -> bool:
    """Whether every reading lies in its bracket (the last reading has none)."""
    return all(low <= r <= high for r, (low, high) in zip(readings, brackets, strict=False))


def launch(api: HostBackend, delay_ns: int) -> Callable[[object], None]:
    def fn(stream: object) -> None:
        api.stream_launch_host_func(stream, spin(delay_ns))

    return fn


def test_a_known_delay_is_measured_within_the_stated_noise(host: HostBackend) -> None:
    spins = Spins()
    delay = eventapi.bench(spins.launch(host, DELAY_NS), api=host, warmup_ms=5, rep_ms=50)
    assert delay.backend == "host"
    assert delay.escaped is False  # the spins are on the stream
    assert delay.noise_ns is not None
    assert delay.calls_per_window == 1
    # Never shorter than the spin: both events bracket it on the stream.
    assert delay.min_ns >= DELAY_NS
    # Each reading is its own spin and its dispatch, nothing of the spins around it (the
    # module docstring), and the median lies within the stated noise of the same bounds.
    brackets = spins.brackets(delay.n)
    assert within(delay.readings_ns, brackets)
    assert median([low for low, _ in brackets]) - delay.noise_ns <= delay.median_ns
    assert delay.median_ns <= median([high for _, high in brackets]) + delay.noise_ns
    # At most the budget's 50 calls of 1 ms; at least the 6 of a 95 % interval (the time
    # cap stops a run below min_n when a loaded machine stretches the calls).
    assert 6 <= delay.n <= 50
    assert delay.calls_per_window == 1
    assert delay.min_ns <= delay.median_ns <= delay.max_ns
    assert delay.min_ns <= delay.mean_ns <= delay.max_ns
    assert delay.mad_ns <= delay.max_ns - delay.min_ns
    assert delay.noise_ns >= delay.resolution_ns
    assert delay.interval_ns is not None
    low, high = delay.interval_ns
    assert low <= delay.median_ns <= high
    assert max(delay.median_ns - low, high - delay.median_ns) == delay.noise_ns


def test_readings_are_public_in_time_order_with_host_time_and_gaps(host: HostBackend) -> None:
    # noise_target=0: no early stop, and so no warning about the target not reached.
    result = eventapi.bench(launch(host, 200_000), api=host, warmup_ms=0, rep_ms=20, noise_target=0)
    assert len(result.readings_ns) == len(result.host_ns) == len(result.gaps_ns) == result.n
    ordered = sorted(result.readings_ns)
    assert (ordered[0], ordered[-1]) == (result.min_ns, result.max_ns)
    assert ordered[(result.n + 1) // 2 - 1] == result.median_ns
    assert result.gaps_ns[0] is None  # the first window follows the estimate's wait
    assert all(g is None or g >= 0 for g in result.gaps_ns)
    # The host only enqueues: far less than the device spins, as its readings measure it.
    assert result.host_median_ns < result.median_ns / 2
    assert result.launch_bound is False
    assert result.warmup_n == 0
    assert not result.steady
    assert result.stopped_by == "time"
    assert result.warnings == ()


def test_quantiles_are_nearest_rank_readings(host: HostBackend) -> None:
    result = eventapi.bench(launch(host, 0), api=host, warmup_ms=0, rep_ms=5)
    assert result.quantile(0.0) == result.min_ns
    assert result.quantile(1.0) == result.max_ns
    assert result.quantile(0.5) == result.median_ns
    assert result.quantile(0.25) <= result.quantile(0.75)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        result.quantile(1.5)
    with pytest.raises(AttributeError):
        result.n = 0  # type: ignore[misc]  # frozen


def test_setup_runs_before_every_call_and_outside_its_timing(host: HostBackend) -> None:
    calls: list[str] = []

    def setup(stream: object) -> None:
        calls.append("setup")
        host.stream_launch_host_func(stream, spin(4 * DELAY_NS))

    def fn(stream: object) -> None:
        calls.append("fn")
        launch(host, DELAY_NS)(stream)

    result = eventapi.bench(fn, api=host, setup=setup, warmup_ms=0, rep_ms=30)
    assert calls == ["setup", "fn"] * (len(calls) // 2)
    # Setup's 4 ms are not in the readings: each is the 1 ms call and its dispatch, shorter
    # than setup's own reading, which a reading holding it could not be. (The median: one
    # reading may be stretched by the spinning thread losing its CPU.)
    assert result.setup_median_ns is not None
    assert result.setup_median_ns >= 4 * DELAY_NS
    assert result.median_ns < result.setup_median_ns
    # Nor in the gaps: the device idles only between windows, not through setup's work (a
    # gap holding it would be at least as long as it).
    assert result.gap_median_ns is not None
    assert result.gap_median_ns < result.setup_median_ns
    # Setup's time counts in the budget: 30 ms buys 6 iterations of 5 ms, not 30 calls (the
    # run goes past rep_ms only as far as reaching 6 readings takes; fewer when a loaded
    # machine stretches the spins past the longer run's limit).
    assert result.n <= 6


def test_the_stream_given_is_used_and_left_open(host: HostBackend) -> None:
    stream = host.stream_create_non_blocking()
    seen: list[object] = []
    eventapi.bench(seen.append, api=host, stream=stream, warmup_ms=0, rep_ms=1)
    assert set(map(id, seen)) == {id(stream)}
    host.stream_destroy(stream)  # still ours: bench did not destroy it


def test_bad_budgets_and_a_failing_fn_leave_nothing_behind(host: HostBackend) -> None:
    with pytest.raises(ValueError, match="rep_ms > 0"):
        eventapi.bench(launch(host, 0), api=host, rep_ms=0)
    with pytest.raises(ValueError, match="warmup_ms >= 0"):
        eventapi.bench(launch(host, 0), api=host, warmup_ms=-1)
    with pytest.raises(ValueError, match="warmup_ms must be a finite number"):
        eventapi.bench(launch(host, 0), api=host, warmup_ms=float("nan"))
    with pytest.raises(ValueError, match="noise_target >= 0"):
        eventapi.bench(launch(host, 0), api=host, noise_target=-1)
    with pytest.raises(ValueError, match="min_n >= 6"):
        eventapi.bench(launch(host, 0), api=host, min_n=5)
    with pytest.raises(ValueError, match="calls_per_window=1 or no setup"):
        eventapi.bench(launch(host, 0), api=host, setup=launch(host, 0), calls_per_window=2)

    def failing(stream: object) -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        eventapi.bench(failing, api=host)
    # The fixture checks that no event or stream is left live.
