"""The duration summary's sketch: its merge walks old entries and slices runs of new values.

``DurationSummary._merge`` is written to give exactly what the plain one-pass walk of the
Greenwald-Khanna merge gives (every entry and new value in one sorted list, walked from the
top, each merged into the one above while the pair stays within the bound). That walk is
:func:`walked` here, and the summary is held to it, entry for entry, over batches whose
values repeat a lot, a little or not at all, and come sorted, reversed or in any order.
"""

from __future__ import annotations

import random
from array import array
from bisect import bisect_left, bisect_right

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventapi._profiling._sketch import EXACT_UP_TO, RANK_ERROR, DurationSummary, quantile_of
from eventapi._ranks import rank_of

Entries = tuple[list[int], list[int], list[int]]


def walked(
    values: array[int], gs: array[int], deltas: array[int], new: array[int], bound: int
) -> Entries:
    """The merge as the plain walk: one sorted list of every entry, walked once from the top."""
    entries = list(zip(values, gs, deltas, strict=True))
    for v in new:
        # Below every entry or at or above the last: an exact rank. Else at most as uncertain
        # as the gap it falls in: g + delta - 1 of the entry above it.
        above = bisect_right(values, v)
        exact = above in (0, len(values))
        entries.append((v, 1, 0 if exact else gs[above] + deltas[above] - 1))
    entries.sort(key=lambda entry: entry[0])  # stable: a new value after an equal entry
    kept: list[tuple[int, int, int]] = []
    v, g, d = entries[-1]
    for value, weight, delta in reversed(entries[1:-1]):
        if weight + g + d <= bound:
            g += weight
            continue
        kept.append((v, g, d))
        v, g, d = value, weight, delta
    kept.append((v, g, d))
    kept.append(entries[0])
    kept.reverse()
    return [e[0] for e in kept], [e[1] for e in kept], [e[2] for e in kept]


def state(summary: DurationSummary) -> Entries:
    assert summary.gs is not None
    assert summary.deltas is not None
    return list(summary.values), list(summary.gs), list(summary.deltas)


# How the durations of one name come: few distinct values (a fixed kernel on a coarse timer),
# a narrow spread, a wide one, and sorted either way.
SHAPES = ("few", "narrow", "wide", "rising", "falling")


def durations(rng: random.Random, shape: str, count: int) -> list[int]:
    if shape == "few":
        return [rng.choice((2124, 2144, 2154, 4000)) for _ in range(count)]
    if shape == "narrow":
        return [rng.randint(2000, 2300) for _ in range(count)]
    values = [rng.randint(0, 10**9) for _ in range(count)]
    if shape == "rising":
        values.sort()
    elif shape == "falling":
        values.sort(reverse=True)
    return values


def assert_ranks_hold(summary: DurationSummary, seen: list[int]) -> None:
    """Every entry within the bound, and its rank range meeting its value's true ranks."""
    assert summary.gs is not None
    assert summary.deltas is not None
    ordered = sorted(seen)
    bound = summary._bound()
    least = 0
    for value, g, delta in zip(summary.values, summary.gs, summary.deltas, strict=True):
        least += g
        assert g + delta <= bound, (value, g, delta, bound)
        # Its copies hold ranks first..last among the values seen (1-based).
        first, last = bisect_left(ordered, value) + 1, bisect_right(ordered, value)
        assert first <= least + delta, (value, least, delta, first)
        assert least <= last, (value, least, last)
    assert least == len(seen) == summary.count


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    shape=st.sampled_from(SHAPES),
    batches=st.lists(st.integers(1, 999), min_size=1, max_size=12),
)
def test_the_merge_keeps_what_the_plain_walk_keeps(
    seed: int, shape: str, batches: list[int]
) -> None:
    rng = random.Random(seed)
    summary = DurationSummary()
    seen = durations(rng, shape, EXACT_UP_TO)
    summary.extend(seen)  # exact so far
    for size in batches:  # fewer than MERGE_EVERY each: buffered until ranks() merges them
        batch = durations(rng, shape, size)
        summary.extend(batch)
        seen += batch
        assert summary.gs is not None
        assert summary.deltas is not None
        expected = walked(
            summary.values, summary.gs, summary.deltas, summary.buffer, summary._bound()
        )
        summary.ranks()
        assert state(summary) == expected
        assert not summary.buffer
        assert_ranks_hold(summary, seen)


@pytest.mark.parametrize("shape", SHAPES)
def test_every_quantile_lies_within_the_rank_error(shape: str) -> None:
    rng = random.Random(shape)
    summary = DurationSummary()
    seen: list[int] = []
    for _ in range(60):
        batch = durations(rng, shape, 100)  # as a collect of 100 windows gives them
        summary.extend(batch)
        seen.extend(batch)
    seen.sort()
    ranks = summary.ranks()
    error = summary.rank_error
    assert error == int(RANK_ERROR * len(seen)) > 0
    for q in (0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999):
        value = quantile_of(ranks, len(seen), q)
        target = rank_of(len(seen), q)
        # Some rank of `value` among the true values lies within the error of the target.
        lowest = seen.index(value) + 1
        highest = len(seen) - seen[::-1].index(value)
        assert lowest - error <= target <= highest + error, (q, value, target, lowest, highest)
