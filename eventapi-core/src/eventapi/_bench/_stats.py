"""The statistics of a benchmark, on readings alone: no backend, no clock.

* :func:`median_ranks`: the order statistics that bound a distribution-free confidence
  interval of the median, from the exact binomial distribution (the count of readings below
  the true median is Binomial(n, 1/2) whatever the readings' distribution, for continuous
  readings; with ties the closed interval only covers more often).
* :func:`trend`: the Mann-Kendall test, distribution-free too, for the warm-up's steady state.

Nothing here knows what a reading is; the coverage study in ``benchmarks/bench_coverage.py``
checks these functions on draws of known distributions.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache
from typing import Final

__all__ = ["CONFIDENCE", "MIN_N", "median_interval", "median_ranks", "trend"]

CONFIDENCE: Final = 0.95
"""The confidence of every interval a result states."""

MIN_N: Final = 6
"""The fewest readings with a distribution-free 95 % interval of the median: with ``n``
readings the widest one, from the smallest to the largest, covers with probability
``1 - 2**(1 - n)``, which first reaches 95 % at n = 6 (96.9 %; n = 5 gives 93.8 %)."""

_Z_TRENDS: Final = 1.959964
"""The normal quantile of a two-sided 5 % test."""


@lru_cache(maxsize=256)
def median_ranks(n: int, confidence: float = CONFIDENCE) -> tuple[int, int] | None:
    """The 1-based ranks ``(l, n + 1 - l)`` of the shortest symmetric interval of the median.

    ``[x(l), x(n+1-l)]`` covers the true median with probability
    ``1 - 2 P(B <= l - 1)``, ``B ~ Binomial(n, 1/2)``, at least ``confidence``, and ``l`` is the
    largest rank for which it does. ``None`` when no such interval exists (n < 6 at 95 %).
    """
    k = _last_tail_rank(n, (1.0 - confidence) / 2.0)
    return None if k < 0 else (k + 1, n - k)


def _last_tail_rank(n: int, alpha: float) -> int:
    """The largest ``k`` with ``P(B <= k) <= alpha``, or -1 if even ``P(B = 0)`` exceeds it.

    The binomial terms are summed in floats, through ``lgamma``: their relative error (about
    1e-12) cannot move a rank. (Summed in exact integers instead, every rank for n up to 1,000
    is the same, at 78 confidences from 50 % to 99.9 %.)
    """
    # Terms below n/2 - 8 sqrt(n)/2 add less than 1e-28: start there, in log space.
    start = max(0, math.floor(n / 2 - 4 * math.sqrt(n)))
    log_half = n * math.log(2.0)
    lg_n = math.lgamma(n + 1)
    total = 0.0
    for j in range(start, n + 1):
        total += math.exp(lg_n - math.lgamma(j + 1) - math.lgamma(n - j + 1) - log_half)
        if total > alpha:
            return j - 1
    return n  # unreachable for alpha < 1/2


def median_interval(
    ordered: tuple[int, ...] | list[int], confidence: float = CONFIDENCE, widen: int = 0
) -> tuple[int, int] | None:
    """The readings that bound the median's interval at ``confidence``, each moved ``widen``
    further out (the low end may then lie below zero), or ``None`` (n < 6)."""
    ranks = median_ranks(len(ordered), confidence)
    if ranks is None:
        return None
    return ordered[ranks[0] - 1] - widen, ordered[ranks[1] - 1] + widen


def trend(readings: list[int]) -> bool:
    """Whether the readings, in time order, trend up or down (Mann-Kendall, two-sided 5 %).

    ``S`` counts the pairs that rise minus those that fall; under no trend it is centred on 0
    with variance ``n (n - 1) (2n + 5) / 18``. Ties lower the true variance, so leaving out
    their correction makes the test slower to call a trend, never quicker. Needs n >= 3.
    """
    n = len(readings)
    s = sum((y > x) - (y < x) for x, y in itertools.combinations(readings, 2))
    if s == 0:  # as many pairs rise as fall (none do below 2 readings)
        return False
    variance = n * (n - 1) * (2 * n + 5) / 18
    z = (abs(s) - 1) / math.sqrt(variance)  # continuity correction
    return z > _Z_TRENDS
