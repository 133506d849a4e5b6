"""eventapi.bench on host: a known delay is measured within the noise the result states.

The known delay is a host function on the stream that spins on ``time.perf_counter_ns`` for
exactly ``DELAY_NS`` (a spin, not a sleep: a sleeping thread wakes late by a scheduler's
whim, a spinning one leaves within a loop iteration of its deadline). Around it, the host
backend adds the dispatch of a host function; a bench of a host function that does nothing
measures that floor, and the delay's median must lie between the delay and the delay plus the
floor, within the two results' stated noise.
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


def launch(api: HostBackend, delay_ns: int) -> Callable[[object], None]:
    def fn(stream: object) -> None:
        api.stream_launch_host_func(stream, spin(delay_ns))

    return fn


def test_a_known_delay_is_measured_within_the_stated_noise(host: HostBackend) -> None:
    floor = eventapi.bench(launch(host, 0), api=host, warmup_ms=5, rep_ms=20)
    delay = eventapi.bench(launch(host, DELAY_NS), api=host, warmup_ms=5, rep_ms=50)
    assert delay.backend == "host"
    # Never shorter than the spin: both events bracket it on the stream.
    assert delay.min_ns >= DELAY_NS
    # Above it by at most the dispatch floor, within the two results' stated noise. (The floor
    # is an upper bound, not an offset to subtract: with a 1 ms call the worker thread is
    # always busy, so the call pays no wake-up; the empty calls of the floor often do.)
    noise = delay.noise_ns + floor.noise_ns
    assert DELAY_NS - noise <= delay.median_ns <= DELAY_NS + floor.median_ns + noise
    # The repetitions fill rep_ms: about 50 calls of 1 ms (the estimate may double on a
    # loaded machine, halving the count; it can never exceed the budget's 50).
    assert 20 <= delay.n <= 50
    assert delay.min_ns <= delay.median_ns <= delay.max_ns
    assert delay.min_ns <= delay.mean_ns <= delay.max_ns
    assert delay.mad_ns <= delay.max_ns - delay.min_ns
    assert delay.noise_ns >= delay.resolution_ns


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

    result = eventapi.bench(fn, api=host, setup=setup, warmup_ms=0, rep_ms=10)
    assert calls == ["setup", "fn"] * (len(calls) // 2)
    # Setup's 4 ms are not in the readings: each is the 1 ms call and its dispatch. (The
    # median: one reading may be stretched by the spinning thread losing its CPU.)
    assert result.median_ns < 2 * DELAY_NS


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
        eventapi.bench(launch(host, 0), api=host, warmup_ms=float("nan"))

    def failing(stream: object) -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        eventapi.bench(failing, api=host)
    # The fixture checks that no event or stream is left live.
