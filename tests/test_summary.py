"""summary(): exact sums, quantiles exact up to 1000 spans a name and within the stated rank
error after, a bounded number of names, and memory that does not grow with the spans."""

from __future__ import annotations

import gc
import logging
import math
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest

from eventapi import EventProfiler
from eventapi._profiling._sketch import EXACT_UP_TO, MERGE_EVERY
from eventapi.host import HostBackend


@pytest.fixture
def prof(host: HostBackend) -> Iterator[EventProfiler[Any, Any]]:
    with EventProfiler(host, max_spans=0) as profiler:
        yield profiler


def _windows(prof: EventProfiler[Any, Any], name: str, n: int) -> list[int]:
    """Open and close ``n`` windows named ``name``; return their durations as collected."""
    durations = []
    for start in range(0, n, 500):
        for _ in range(min(500, n - start)):
            with prof.window(name):
                pass
        durations += [span.duration_ns for span in prof.collect()]
    return durations


def _rank_miss(ordered: list[int], value: int, rank: int) -> int:
    """How many ranks ``value`` is from ``rank`` in ``ordered`` (0 when one of its ranks)."""
    lowest = ordered.index(value) + 1
    highest = lowest + ordered.count(value) - 1
    return 0 if lowest <= rank <= highest else min(abs(rank - lowest), abs(rank - highest))


QUANTILES = (0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99)


def test_up_to_1000_spans_everything_is_exact(prof: EventProfiler[Any, Any]) -> None:
    durations = sorted(_windows(prof, "w", 1000))
    stats = prof.summary()["w"]
    assert (stats.count, stats.total_ns) == (1000, sum(durations))
    assert (stats.min_ns, stats.max_ns) == (durations[0], durations[-1])
    assert stats.mean_ns == sum(durations) // 1000
    assert stats.rank_error == 0
    assert stats.median_ns == durations[499]  # the lower middle value
    for q in QUANTILES:
        assert stats.quantile(q) == durations[math.ceil(q * 1000) - 1]
    assert (stats.quantile(0), stats.quantile(1)) == (durations[0], durations[-1])


def test_past_1000_quantiles_stay_within_the_stated_rank_error(
    prof: EventProfiler[Any, Any],
) -> None:
    # Past EXACT_UP_TO and then MERGE_EVERY more: a merge inside a collect, one in summary().
    count = EXACT_UP_TO + MERGE_EVERY + 1000
    durations = sorted(_windows(prof, "w", count))
    stats = prof.summary()["w"]
    assert (stats.count, stats.total_ns) == (count, sum(durations))
    assert (stats.min_ns, stats.max_ns) == (durations[0], durations[-1])
    assert stats.mean_ns == sum(durations) // count
    assert stats.rank_error == count // 200  # 0.5 % of the count
    assert _rank_miss(durations, stats.median_ns, math.ceil(count / 2)) <= stats.rank_error
    for q in QUANTILES:
        target = math.ceil(q * count)
        assert _rank_miss(durations, stats.quantile(q), target) <= stats.rank_error


def test_names_interleaved_in_one_collect_are_summarised_apart(
    prof: EventProfiler[Any, Any],
) -> None:
    for i in range(30):
        with prof.window("a" if i % 3 else "b"):
            pass
    spans = prof.collect()
    stats = prof.summary()
    assert list(stats) == ["b", "a"]  # in first-collected order
    for name, count in (("a", 20), ("b", 10)):
        durations = sorted(span.duration_ns for span in spans if span.name == name)
        assert (stats[name].count, stats[name].total_ns) == (count, sum(durations))
        assert stats[name].median_ns == durations[(count - 1) // 2]


def test_a_quantile_outside_0_to_1_is_refused(prof: EventProfiler[Any, Any]) -> None:
    _windows(prof, "w", 3)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        prof.summary()["w"].quantile(1.5)


def test_names_past_max_names_are_counted_not_summarised(
    host: HostBackend, caplog: pytest.LogCaptureFixture
) -> None:
    with EventProfiler(host, max_names=2) as prof, caplog.at_level(logging.WARNING, "eventapi"):
        for name in ("a", "b", "c", "a", "d", "c"):
            with prof.window(name):
                pass
        spans = prof.collect()
        assert [span.name for span in spans] == ["a", "b", "c", "a", "d", "c"]
        assert list(prof.summary()) == ["a", "b"]
        assert prof.summary()["a"].count == 2
        assert prof.unsummarized == 3
    assert caplog.text.count("max_names=2") == 1


class SteadyDurations:
    """The host backend, every reading a fixed sequence of durations instead of the clock's.

    How many entries the quantile sketch keeps depends on the durations it is given; read off
    the host clock they depend on how loaded the machine is. A fixed, well spread sequence makes
    the memory the test measures the same on any machine.
    """

    def __init__(self, inner: HostBackend) -> None:
        self.inner = inner
        self._next = 0

    def _reading(self) -> int:
        self._next += 1
        return 1_000 + (self._next * 7_919) % 100_003

    def event_elapsed(self, start: Any, end: Any) -> int:
        self.inner.event_elapsed(start, end)  # refused, or not ready, as the real reading is
        return self._reading()

    def event_elapsed_many(self, starts: Any, ends: Any) -> list[int]:
        self.inner.event_elapsed_many(starts, ends)
        return [self._reading() for _ in starts]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_memory_stays_flat_while_spans_accumulate(host: HostBackend) -> None:
    # Two names, 1,000 windows each per round: after the first rounds every structure has
    # reached its size (the sketch's entries, the pool); later rounds must not grow it. A
    # summary that kept every duration would grow by 8 bytes a span even in a packed array,
    # 32 kB over the last two rounds (36 bytes a span in a list of ints); 16 kB leaves room
    # for the allocator's own noise and the sketch's slow (logarithmic) growth, a few kB. The
    # durations are a fixed sequence (SteadyDurations), so the sketch's size does not depend on
    # how loaded the machine is.
    prof: EventProfiler[Any, Any] = EventProfiler(SteadyDurations(host), max_spans=0)
    tracemalloc.start()
    try:
        sizes = []
        for _ in range(4):
            for name in ("a", "b"):
                _windows(prof, name, 1000)
            prof.summary()
            # A full collection also empties the interpreter's free lists: freed tuples (the
            # sketch's merge makes thousands) would otherwise still count as traced, up to
            # 2,000 of a size, and step the total by over 100 kB depending on test order.
            gc.collect()
            sizes.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    assert sizes[3] - sizes[1] < 16_000, sizes
    assert prof.summary()["a"].count == 4000
    prof.close()
