"""The nearest-rank quantile, the one definition every summary of durations in eventapi uses.

The value of rank ``ceil(q * n)`` (at least 1) among ``n`` sorted values: always a duration
that was measured, never an average of two, so the median of an even count is the lower middle
value. The profiler's :class:`~eventapi.Stats`, :func:`eventapi.bench` and the trace report
read their quantiles through it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["nearest_rank", "rank_of"]


def rank_of(count: int, q: float) -> int:
    """The 1-based rank of quantile ``q`` (0 to 1) among ``count`` values: ``ceil(q * count)``."""
    return max(1, math.ceil(q * count))


def nearest_rank(ordered: Sequence[int], q: float) -> int:
    """The value at quantile ``q`` of the sorted, non-empty ``ordered``."""
    return ordered[rank_of(len(ordered), q) - 1]
