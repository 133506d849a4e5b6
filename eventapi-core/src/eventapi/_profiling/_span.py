"""The values a profiler hands back: :class:`Span` (one window) and :class:`Stats` (one name).

Frozen dataclasses: users receive them and never build one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from itertools import repeat
from typing import Final, final

from .._arguments import bounded_repr, check_real
from ._sketch import quantile_of

__all__ = ["Span", "Stats", "spans_of"]


@final
@dataclass(frozen=True, slots=True)
class Span:
    """One profiling window as read back by :meth:`EventProfiler.collect`.

    ``start_ns`` and ``end_ns`` are :func:`time.perf_counter_ns` values: where the window's two
    events lie on the host clock. Each lies within ``uncertainty_ns`` of the host time at which
    the device stamped its event: the bound adds the anchor's uncertainty, the timer's resolution
    and readout error, and what the distance to the anchor adds through the clock-rate
    estimate (or, before the rate is measured, through the assumed drift; see
    ``docs/profiling.md``).

    ``duration_ns`` is the device's own reading between the two events. ``end_ns - start_ns``
    is that reading converted at the measured clock rate, so the two differ by
    ``duration_ns * |1 - 1/rate|`` (50 ns per millisecond on a device clock 50 ppm fast) plus
    the readout error of the two distances to the anchor (``2**-23`` of each) and a nanosecond
    of rounding; before the rate is measured, ``end_ns - start_ns`` differs from
    ``duration_ns`` only by that readout error and rounding.

    ``depth`` is the number of windows of the same profiler that were open when this one
    opened (0 for an outermost window); ``stream`` is the profiler's label. Users receive
    spans; they never build one.
    """

    name: str
    start_ns: int
    end_ns: int
    duration_ns: int
    depth: int
    stream: str
    uncertainty_ns: int


@final
@dataclass(frozen=True, slots=True)
class Stats:
    """Durations of every collected span of one name, in integer nanoseconds.

    ``count``, ``total_ns``, ``min_ns``, ``max_ns`` and ``mean_ns`` (``total_ns // count``)
    are exact however many spans were collected. ``median_ns`` and :meth:`quantile` use the
    nearest-rank definition (the median of an even count is the lower of the two middle
    values: a duration that was actually measured, never an average of two). They are exact
    up to 1,000 spans of the name; past that they come from a deterministic sketch
    (Greenwald-Khanna) and the value returned has a rank within ``rank_error`` of the true one,
    where ``rank_error`` is 0.5 % of ``count`` (0 while exact).
    """

    count: int
    total_ns: int
    min_ns: int
    median_ns: int
    mean_ns: int
    max_ns: int
    rank_error: int = 0
    _ranks: tuple[tuple[int, int, int], ...] = field(default=(), repr=False, compare=False)

    def quantile(self, q: float) -> int:
        """The duration at quantile ``q`` (0 to 1), within ``rank_error`` ranks.

        ``quantile(0.5)`` is ``median_ns``; ``quantile(0)`` and ``quantile(1)`` are ``min_ns`` and
        ``max_ns``. Raises :class:`ValueError` for ``q`` outside [0, 1].
        """
        number = check_real(q, "Stats.quantile: q")
        if not 0.0 <= number <= 1.0:
            raise ValueError(f"a quantile lies in [0, 1], got {bounded_repr(q)}")
        return quantile_of(self._ranks, self.count, number)


_SETTERS: Final = tuple(Span.__dict__[f.name].__set__ for f in fields(Span))


def spans_of(
    names: Sequence[str],
    starts: Iterable[int],
    ends: Iterable[int],
    durations: Iterable[int],
    depths: Iterable[int],
    stream: str,
    bounds: Iterable[int],
) -> list[Span]:
    """The spans whose fields are given column by column: row ``i`` is what
    ``Span(names[i], starts[i], ...)`` builds, with ``stream`` in every row.

    A collect builds its spans in one batch: each field is set on every span by one pass of
    the field's slot descriptor, which is what a frozen dataclass's ``__init__`` does per field
    through ``object.__setattr__``, without a Python frame per span.
    """
    spans: list[Span] = list(map(object.__new__, repeat(Span, len(names))))
    columns = (names, starts, ends, durations, depths, repeat(stream), bounds)
    for setter, column in zip(_SETTERS, columns, strict=True):
        deque(map(setter, spans, column), maxlen=0)
    return spans
