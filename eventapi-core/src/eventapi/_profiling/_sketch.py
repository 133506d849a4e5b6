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
from bisect import bisect_left
from itertools import accumulate
from typing import Final, final

from .._ranks import rank_of

__all__ = ["EXACT_UP_TO", "MERGE_EVERY", "RANK_ERROR", "DurationSummary"]

EXACT_UP_TO: Final = 1000
"""Values kept exactly per name; quantiles of at most this many values are exact."""

RANK_ERROR: Final = 0.005
"""The sketch's rank error as a fraction of the count: 0.5 %.

A median of 1,000,000 durations is then a duration whose rank lies within 5,000 of 500,000.
"""

MERGE_EVERY: Final = 4096
"""Durations of one name that wait in a buffer before they enter its sketch, once exact ends.

They enter it this many at a time: sorted, merged in one pass, then compressed once. The paper
inserts one value at a time and compresses every ``1 / (2 * RANK_ERROR)`` of them; each
compression walks every entry in Python, which cost a few microseconds per value at the
profiler's collect. Merging a sorted batch gives each new value the uncertainty of the gap it
falls in: at most the upper entry's ``g + delta - 1`` values lie there unseen, which is within
the bound at the count after the batch, so every answer stays within the error. The summary
holds at most this many entries more than the paper's between two merges.

A merge takes a Python step per entry, and the durations of a fixed kernel on a coarse timer
(a few hundred distinct values) keep several hundred entries: with 1,000 values a batch that
walk was a quarter of a window's cost on the instant device (``benchmarks/fence_window.py``);
at 4,096 it is a quarter of that, for 32 kB of buffer per name.
"""


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
        """Count ``values`` in: a collect's durations of this name (at least one), in one call.

        Count, total, minimum and maximum are taken with the builtins over the whole batch;
        values go on being kept exactly until there are :data:`EXACT_UP_TO` of them, then the
        sketch takes over and the rest wait in its buffer.
        """
        low, high = min(values), max(values)
        if self.count == 0:
            self.min_ns, self.max_ns = low, high
        else:
            self.min_ns, self.max_ns = min(self.min_ns, low), max(self.max_ns, high)
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
            self.values = array("q", sorted(self.values))
            self.gs = array("q", [1]) * len(self.values)
            self.deltas = array("q", [0]) * len(self.values)
        self.buffer.extend(values)
        if len(self.buffer) >= MERGE_EVERY:
            self._merge()

    @property
    def rank_error(self) -> int:
        """The most ranks a quantile may be off by: 0 while exact."""
        return 0 if self.gs is None else math.floor(RANK_ERROR * self.count)

    def ranks(self) -> tuple[tuple[int, int, int], ...]:
        """``(value, least rank, greatest rank)`` of each entry, in value order (1-based)."""
        if self.buffer:
            self._merge()
        if self.gs is None or self.deltas is None:
            return tuple((v, i, i) for i, v in enumerate(sorted(self.values), 1))
        least = accumulate(self.gs)
        return tuple((v, r, r + d) for v, r, d in zip(self.values, least, self.deltas, strict=True))

    def _bound(self) -> int:
        return math.floor(2 * RANK_ERROR * self.count)

    def _merge(self) -> None:
        """Insert the buffered values into the sketch, then compress it once.

        What it computes is one list of every entry and new value, sorted (a new value equal
        to an entry after it, as bisect_right inserts it), walked once from the top: each
        entry merges into the (merged) one above it while the pair stays within the bound,
        the first one (the minimum) and the last one never merged away. A new value below
        every entry, or at or above the last, has an exact rank (delta 0); one between two
        entries is as uncertain as that gap: the upper entry's ``g + delta - 1`` values may
        lie in it unseen, and that is within the bound.

        The walk goes an old entry at a time: the new values between two old entries all
        carry the same delta, so :func:`_take_run` places them by arithmetic and slicing, and
        the walk takes a Python step per old entry, not per value (a step, a tuple and a keyed
        sort per value were most of a collect's summary). ``tests/test_sketch.py`` holds this
        walk to the plain one, entry for entry. Called with at least one value buffered.
        """
        assert self.gs is not None
        assert self.deltas is not None
        values, gs, deltas = self.values.tolist(), self.gs.tolist(), self.deltas.tolist()
        new = sorted(self.buffer)
        self.buffer = array("q")
        bound = self._bound()
        below = bisect_left(new, values[0])  # new[:below] lie under every entry: delta 0
        kept: list[tuple[int, int, int]] = []  # from the top down
        # The walk starts at the topmost value, which is never merged away.
        top = len(values) - 1
        hi = len(new)
        if new[-1] >= values[top]:
            current, hi, first = (new[-1], 1, 0), hi - 1, top
        else:
            current, first = (values[top], gs[top], deltas[top]), top - 1
        # Entry j and the run of new values above it, from the top; j = -1 stands for the run
        # under every entry but its lowest value, new[0], which is kept apart as an old
        # minimum would be.
        for j in range(first, -2, -1):
            if j < 0:
                lo, delta = 1, 0
            elif j < top and values[j] == values[j + 1]:
                lo, delta = hi, 0  # nothing lies between two equal entries
            else:
                lo = bisect_left(new, values[j], 0, hi)
                delta = 0 if j == top else gs[j + 1] + deltas[j + 1] - 1
            if hi > lo:
                current = _take_run(new, lo, hi, delta, bound, current, kept)
            hi = lo
            if j < 0 or (j == 0 and not below):
                break  # the lowest entry is kept apart
            value, g, d = current
            if gs[j] + g + d <= bound:
                current = (value, g + gs[j], d)
            else:
                kept.append(current)
                current = (values[j], gs[j], deltas[j])
        kept.append(current)
        kept.append((new[0], 1, 0) if below else (values[0], gs[0], deltas[0]))
        kept.reverse()
        columns = zip(*kept, strict=True)
        self.values, self.gs, self.deltas = (array("q", column) for column in columns)


def _take_run(
    new: list[int],
    lo: int,
    hi: int,
    delta: int,
    bound: int,
    current: tuple[int, int, int],
    kept: list[tuple[int, int, int]],
) -> tuple[int, int, int]:
    """Walk ``new[lo:hi]``, values of one ``delta`` and weight 1, from the top below ``current``.

    ``current`` (the entry the walk is merging into) takes as many as its room allows; the
    rest split, from the top, into entries of ``size`` values each (the most one entry of
    this delta can stand for), kept in ``kept``. Returns the new current: ``current`` grown,
    when the whole run fits in it; else the lowest of the new entries, which the walk may
    still merge into.
    """
    value, g, d = current
    room = bound - d - g
    if room > 0:
        taken = min(hi - lo, room)
        g += taken
        hi -= taken
    if hi == lo:
        return value, g, d
    kept.append((value, g, d))
    size = max(1, bound - delta)
    heads = new[lo:hi][::-1][::size]
    full = len(heads) - 1
    kept.extend(zip(heads[:full], [size] * full, [delta] * full, strict=True))
    return heads[full], hi - lo - full * size, delta


def quantile_of(ranks: tuple[tuple[int, int, int], ...], count: int, q: float) -> int:
    """The value at quantile ``q`` of ``count`` values summarised by ``ranks``.

    The nearest-rank definition: the value of rank ``ceil(q * count)`` (at least 1), so the
    median of an even count is the lower middle value. From a sketch, the entry whose rank
    range lies nearest that rank on both sides.
    """
    target = rank_of(count, q)
    # The first entry whose rank range misses the target by the least, on either side.
    return min(ranks, key=lambda entry: max(target - entry[1], entry[2] - target))[0]
