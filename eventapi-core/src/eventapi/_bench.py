"""``eventapi.bench``: time a callable on a stream, as Triton's ``do_bench`` does, on any backend.

The phases, all on one :class:`~eventapi.EventProfiler`:

1. one untimed call and a stream synchronization (a first call that compiles or allocates
   is not a sample);
2. an estimate: :data:`ESTIMATE_CALLS` calls in windows, read back; the cost of one
   iteration is the larger of their median device time and the host time each took to
   enqueue (so that the budgets hold where a call costs more on the host than on the device);
3. warm-up: as many calls as fit in ``warmup_ms``, untimed;
4. repetitions: as many as fit in ``rep_ms``, each ``setup(stream)`` then a window around
   ``fn(stream)``; the windows are read back in batches of :data:`BATCH`, one wait per batch.

``setup`` work is enqueued before its window opens, so it is not in the reading. Every
reading is the device's own time from the window's start event to its end event.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, final

from ._profiling._anchor import TIMER_RESOLUTION_NS
from ._profiling._profiler import EventProfiler
from ._protocol import EventApi

__all__ = ["BATCH", "ESTIMATE_CALLS", "BenchResult", "bench"]

ESTIMATE_CALLS: Final = 5
"""Calls timed to size the budgets (Triton's choice: enough to skip one outlier)."""

BATCH: Final = 500
"""Windows read back per wait: each wait costs an anchor (well under a millisecond), and the
events of at most this many windows are held at once."""

_Z95: Final = 1.959964
"""The normal quantile of a two-sided 95 % interval."""


@final
@dataclass(frozen=True, slots=True)
class BenchResult:
    """What :func:`eventapi.bench` measured: ``n`` device readings of one call, in nanoseconds.

    ``min_ns``, ``median_ns`` (nearest rank: the lower middle of an even count), ``mean_ns``
    (integer division) and ``max_ns`` are exact over the ``n`` readings; :meth:`quantile` is
    nearest-rank too. The noise, stated two ways:

    * ``noise_ns``: half-width of a 95 % confidence interval of ``median_ns`` as an estimate
      of the typical call's time (distribution-free: the order statistics at ranks
      ``n/2 -+ 1.96 sqrt(n)/2``), plus the timer's resolution (``resolution_ns``). Two results
      whose medians differ by more than the sum of their ``noise_ns`` differ by more than
      noise.
    * ``mad_ns``: the median absolute deviation of the readings: their typical spread.

    The readings include what the backend adds between two events around the call (on the
    host backend, a few microseconds of worker-thread dispatch); time an empty ``fn`` to see
    that floor. Users receive results; they never build one.
    """

    n: int
    min_ns: int
    median_ns: int
    mean_ns: int
    max_ns: int
    noise_ns: int
    mad_ns: int
    resolution_ns: int
    backend: str
    _sorted: tuple[int, ...] = field(default=(), repr=False, compare=False)

    def quantile(self, q: float) -> int:
        """The reading at quantile ``q`` (0 to 1), nearest rank. ValueError outside [0, 1]."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"a quantile lies in [0, 1], got {q!r}")
        return _rank(self._sorted, q)


def _rank(ordered: tuple[int, ...], q: float) -> int:
    return ordered[max(1, math.ceil(len(ordered) * q)) - 1]


def _result(durations: list[int], backend: str) -> BenchResult:
    ordered = tuple(sorted(durations))
    n = len(ordered)
    median = _rank(ordered, 0.5)
    half = _Z95 * math.sqrt(n) / 2
    low = ordered[max(0, math.floor(n / 2 - half) - 1)]
    high = ordered[min(n - 1, math.ceil(n / 2 + half))]
    deviations = sorted(abs(d - median) for d in ordered)
    return BenchResult(
        n=n,
        min_ns=ordered[0],
        median_ns=median,
        mean_ns=sum(ordered) // n,
        max_ns=ordered[-1],
        noise_ns=max(median - low, high - median) + TIMER_RESOLUTION_NS,
        mad_ns=deviations[max(1, math.ceil(n / 2)) - 1],
        resolution_ns=TIMER_RESOLUTION_NS,
        backend=backend,
        _sorted=ordered,
    )


def bench(
    fn: Callable[[Any], object],
    *,
    api: EventApi[Any, Any] | None = None,
    stream: Any = None,
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    setup: Callable[[Any], object] | None = None,
) -> BenchResult:
    """Call ``fn(stream)`` repeatedly and time each call with events on ``stream``.

    ``api`` defaults to :func:`eventapi.backend` (its default selection); ``stream`` to a new
    non-blocking stream of it, destroyed before returning. ``warmup_ms`` and ``rep_ms`` are
    budgets of time (milliseconds) for the untimed warm-up and the timed repetitions; at
    least one repetition always runs. ``setup(stream)``, when given, runs before each call,
    outside its timing: flush a cache or reset state there. ``fn`` must enqueue its work on
    ``stream`` (a call that runs elsewhere reads as empty).

    Blocks the calling thread for about ``warmup_ms + rep_ms`` plus one wait per
    :data:`BATCH` calls. Returns a :class:`BenchResult`. Raises :class:`ValueError` for a
    negative budget or a non-positive ``rep_ms``; whatever ``fn`` or ``setup`` raise, and
    :class:`~eventapi.DriverError` from the backend, propagate after the profiler and the
    stream it made were released.
    """
    if not (warmup_ms >= 0.0 and rep_ms > 0.0):
        raise ValueError(
            f"bench needs warmup_ms >= 0 and rep_ms > 0 (milliseconds), got {warmup_ms!r} and "
            f"{rep_ms!r}"
        )
    if api is None:
        from ._plugins._selection import backend

        api = backend()
    # The profiler keeps no spans and no summary: the readings are kept here, exactly.
    with EventProfiler(api, stream, label="bench", max_names=1, max_spans=0) as prof:
        target = prof.stream

        def call() -> None:
            if setup is not None:
                setup(target)
            fn(target)

        call()
        api.stream_synchronize(target)

        began = time.perf_counter_ns()
        for _ in range(ESTIMATE_CALLS):
            if setup is not None:
                setup(target)
            with prof.window("bench"):
                fn(target)
        # The host's cost of enqueuing one iteration; the wait below is paid once per batch.
        host_each = (time.perf_counter_ns() - began) / ESTIMATE_CALLS
        estimate = prof.collect()
        device_each = sorted(s.duration_ns for s in estimate)[ESTIMATE_CALLS // 2]
        each_ns = max(host_each, device_each, 1.0)

        for _ in range(int(warmup_ms * 1e6 / each_ns)):
            call()

        durations: list[int] = []
        repetitions = max(1, int(rep_ms * 1e6 / each_ns))
        for done in range(1, repetitions + 1):
            if setup is not None:
                setup(target)
            with prof.window("bench"):
                fn(target)
            if done % BATCH == 0 or done == repetitions:
                durations.extend(s.duration_ns for s in prof.collect())
    return _result(durations, api.BACKEND)
