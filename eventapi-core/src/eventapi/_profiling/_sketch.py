"""Durations of one name in bounded memory: exact sums, exact or sketched quantiles.

Count, total, minimum and maximum are kept exactly. The values themselves are kept exactly up
to :data:`EXACT_UP_TO` of them; past that they go into a Greenwald-Khanna summary (Greenwald
and Khanna, "Space-efficient online computation of quantile summaries", SIGMOD 2001), which is
deterministic: any quantile it answers has a rank within ``RANK_ERROR * count`` of the true
one, whatever the order the values came in, and it holds O(log(RANK_ERROR * count) /
RANK_ERROR) entries (a few hundred to a few thousand for any count a program reaches).

Each entry is a value ``v`` with ``g`` (how many values it stands for, beyond the entry before
it) and ``delta`` (how uncertain its rank is): the values at or below ``v`` number between
``sum(g up to it)`` and that plus ``delta``. Entries are merged while ``g + g' + delta'`` stays
within ``2 * RANK_ERROR * count``, which is what keeps every answer within the error.
"""

from __future__ import annotations

import math
from array import array
from operator import itemgetter
from typing import Final, final

from .._ranks import rank_of

__all__ = ["EXACT_UP_TO", "RANK_ERROR", "DurationSummary"]

EXACT_UP_TO: Final = 1000
"""Values kept exactly per name; quantiles of at most this many values are exact."""

RANK_ERROR: Final = 0.005
"""The sketch's rank error as a fraction of the count: 0.5 %.

A median of 1,000,000 durations is then a duration whose rank lies within 5,000 of 500,000.
"""

# New values wait in a buffer and enter the summary this many at a time: sorted, merged in one
# pass, then compressed once. The paper inserts one value at a time and compresses every
# 1 / (2 * RANK_ERROR) of them; each compression walks every entry in Python, which cost a
# few microseconds per value at the profiler's collect. Merging a sorted batch gives each new
# value the uncertainty bound of the count after the batch (more conservative than the
# count at its own insertion, so every answer stays within the error), and the summary
# holds at most this many entries more than the paper's between two merges.
_MERGE_EVERY: Final = 1000


@final
class DurationSummary:
    """Count, total, min, max and the distribution of one name's durations (integer ns).

    Not thread-safe: its profiler's thread adds to it.
    """

    __slots__ = ("buffer", "count", "deltas", "gs", "max_ns", "min_ns", "total_ns", "values")

    def __init__(self) -> None:
        self.count = 0
        self.total_ns = 0
        self.min_ns = 0
        self.max_ns = 0
        self.values = array("q")  # every value while gs is None (unsorted), else sorted entries
        self.gs: array[int] | None = None
        self.deltas: array[int] | None = None
        self.buffer = array("q")  # values not merged into the sketch yet (sketch only)

    def extend(self, values: list[int]) -> None:
        """Count ``values`` in: a collect's durations of this name, in one call.

        Count, total, minimum and maximum are taken with the builtins over the whole batch;
        values go on being kept exactly until there are :data:`EXACT_UP_TO` of them, then the
        sketch takes over and the rest wait in its buffer.
        """
        if not values:
            return
        low, high = min(values), max(values)
        if self.count == 0:
            self.min_ns, self.max_ns = low, high
        else:
            self.min_ns = min(self.min_ns, low)
            self.max_ns = max(self.max_ns, high)
        self.total_ns += sum(values)
        self.count += len(values)
        if self.gs is None:
            room = EXACT_UP_TO - len(self.values)
            self.values.extend(values[:room])  # sorted only when read, or when sketched
            if len(values) <= room:
                return
            values = values[room:]
            # From here on a value may stand for others: every exact value becomes an entry
            # of weight 1 with no uncertainty, which is what it is.
            exact = self.values
            self.values = array("q", sorted(exact))
            self.gs = array("q", [1]) * len(exact)
            self.deltas = array("q", [0]) * len(exact)
        buffer = self.buffer
        buffer.extend(values)
        if len(buffer) >= _MERGE_EVERY:
            self._merge()

    @property
    def rank_error(self) -> int:
        """The most ranks a quantile may be off by: 0 while exact."""
        return 0 if self.gs is None else math.floor(RANK_ERROR * self.count)

    def ranks(self) -> tuple[tuple[int, int, int], ...]:
        """``(value, least rank, greatest rank)`` of each entry, in value order (1-based)."""
        if self.buffer:
            self._merge()
        gs, deltas = self.gs, self.deltas
        if gs is None or deltas is None:
            return tuple((v, i, i) for i, v in enumerate(sorted(self.values), 1))
        out = []
        rank = 0
        for v, g, d in zip(self.values, gs, deltas, strict=True):
            rank += g
            out.append((v, rank, rank + d))
        return tuple(out)

    def _bound(self) -> int:
        return math.floor(2 * RANK_ERROR * self.count)

    def _merge(self) -> None:
        """Insert the buffered values into the sketch, then compress it once."""
        values, gs, deltas = self.values, self.gs, self.deltas
        assert gs is not None
        assert deltas is not None
        # A value below every entry, or at or above the last, has an exact rank (delta 0); one
        # inside is as uncertain as its neighbours may be, at the count after the batch.
        low, high = values[0], values[-1]
        inside = max(0, self._bound() - 1)
        entries = list(zip(values, gs, deltas, strict=True))
        entries += [(v, 1, 0 if v < low or v >= high else inside) for v in self.buffer]
        # Stable: a new value equal to an entry goes after it, as bisect_right inserts it.
        entries.sort(key=_value)
        self.buffer = array("q")
        # Then one pass from the top, merging each entry into the (merged) one above it when
        # the pair stays within the bound. The first entry (the minimum) is never merged away.
        bound = self._bound()
        kept: list[tuple[int, int, int]] = []
        keep = kept.append
        v, g, d = entries[-1]
        for value, weight, delta in reversed(entries[1:-1]):
            if weight + g + d <= bound:
                g += weight
                continue
            keep((v, g, d))
            v, g, d = value, weight, delta
        keep((v, g, d))
        if len(entries) > 1:
            keep(entries[0])
        kept.reverse()
        self.values = array("q", [e[0] for e in kept])
        self.gs = array("q", [e[1] for e in kept])
        self.deltas = array("q", [e[2] for e in kept])


_value = itemgetter(0)


def quantile_of(ranks: tuple[tuple[int, int, int], ...], count: int, q: float) -> int:
    """The value at quantile ``q`` of ``count`` values summarised by ``ranks``.

    The nearest-rank definition: the value of rank ``ceil(q * count)`` (at least 1), so the
    median of an even count is the lower middle value. From a sketch, the entry whose rank
    range lies nearest that rank on both sides.
    """
    target = rank_of(count, q)
    best = ranks[0][0]
    best_miss = count + 1
    for value, least, greatest in ranks:
        miss = max(target - least, greatest - target)
        if miss < best_miss:
            best, best_miss = value, miss
    return best
