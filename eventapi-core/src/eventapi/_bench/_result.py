"""What :func:`eventapi.bench` hands back: :class:`BenchResult`, and :class:`Comparison`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Final, Literal, final

from .._arguments import bounded_repr, check_real
from .._ranks import nearest_rank
from ._stats import CONFIDENCE, MIN_N, median_interval

__all__ = ["BenchResult", "Comparison", "StoppedBy", "duration_text", "summarize"]

StoppedBy = Literal["noise", "time", "limit"]
"""Which rule ended the timed calls: the target noise was reached (``"noise"``), the time cap
``rep_ms`` was (``"time"``), or the longer run taken to reach 6 readings was (``"limit"``)."""

_EACH_SIDE: Final = math.sqrt(CONFIDENCE)
"""A comparison's two medians each get an interval at this confidence, so that both cover at
once with probability at least ``CONFIDENCE`` (the two runs are independent)."""


@final
@dataclass(frozen=True, slots=True)
class Comparison:
    """``a.compare(b)``: how ``a``'s median time relates to ``b``'s, with a 95 % interval.

    ``ratio`` is ``a.median_ns / b.median_ns``; ``[low, high]`` covers the true ratio of the
    typical calls with probability at least 95 % (each median's distribution-free interval at
    97.5 %, widened by its timer resolution, divided crosswise). ``None`` bounds when either
    result has fewer than 7 readings (no 97.5 % interval exists). ``high`` may be ``inf`` when
    ``b``'s interval reaches zero. Users receive comparisons; they never build one.
    """

    ratio: float
    low: float | None
    high: float | None

    @property
    def verdict(self) -> Literal["faster", "slower", "same"]:
        """``"faster"`` when ``a`` is faster than ``b`` at 95 % (``high < 1``), ``"slower"``
        when ``low > 1``, else ``"same"`` (the interval holds 1, or there is none)."""
        if self.high is not None and self.high < 1.0:
            return "faster"
        if self.low is not None and self.low > 1.0:
            return "slower"
        return "same"


@final
@dataclass(frozen=True, slots=True)
class BenchResult:
    """What :func:`eventapi.bench` measured: ``n`` device readings of one call, in nanoseconds.

    Each reading is one window's device time divided by ``calls_per_window`` (rounded), so
    every ``*_ns`` field is per call. ``min_ns``, ``median_ns`` (nearest rank: the lower
    middle of an even count), ``mean_ns`` (integer division) and ``max_ns`` are exact over
    the readings; :meth:`quantile` is nearest-rank too.

    The noise: ``interval_ns`` is a 95 % confidence interval of the typical call's time (the
    true median), distribution-free: the readings at the exact binomial ranks, widened by the
    timer's resolution per call (``resolution_ns``). ``noise_ns`` is its larger half-width
    around ``median_ns``. Below 6 readings no distribution-free 95 % interval exists: both are
    ``None``, ``warnings`` says so, and ``min_ns``/``max_ns`` are all that bounds the median.
    ``mad_ns`` is the readings' median absolute deviation (their typical spread, not the
    median's noise).

    Beside each reading, in time order: ``host_ns``, the host's time to enqueue the call
    (``fn`` plus the window's two records, per call), and ``gaps_ns``, how long the device sat
    idle between the previous window's end and this one's start (``setup``'s device work left
    out, per call; ``None`` for the first window of each readback batch, which follows a
    wait). ``launch_bound`` is the verdict that the device waited for the host (see
    ``docs/bench.md``; ``None`` with too few unheld windows to tell).

    ``escaped`` is the verdict that ``fn``'s work escaped the stream, so the readings are not
    its time: ``True`` when, on a held stream, its windows read no longer than empty ones (it
    enqueued nothing the stream could time) or its calls took at least 100 times longer
    on the host than on the stream; ``False`` when the stream timed its work; ``None``
    when the run cannot tell, a launch-bound run on a free stream, whose readings are the
    host's time per call.

    ``cold_cache`` says whether a write of ``flush_bytes`` (the device's L2 size) ran before
    each window, outside it; ``graph`` whether each window launched a graph of
    ``calls_per_window`` captured calls. ``clock_mhz`` is the lowest and highest clock read
    around the timed batches (``None`` where the backend cannot read it), ``throttled`` whether
    any reading gave a throttle reason (``throttle_reasons``, all of them) or a clock below 75 %
    of its maximum (``None`` without readings). Users receive results; they never build one.
    """

    n: int
    min_ns: int
    median_ns: int
    mean_ns: int
    max_ns: int
    noise_ns: int | None
    mad_ns: int
    resolution_ns: int
    backend: str
    interval_ns: tuple[int, int] | None = None
    readings_ns: tuple[int, ...] = field(default=(), repr=False)
    host_ns: tuple[int, ...] = field(default=(), repr=False)
    gaps_ns: tuple[int | None, ...] = field(default=(), repr=False)
    host_median_ns: int = 0
    gap_median_ns: int | None = None
    setup_median_ns: int | None = None
    calls_per_window: int = 1
    held: bool = False
    launch_bound: bool | None = None
    escaped: bool | None = None
    stopped_by: StoppedBy = "time"
    noise_target: float = 0.0
    warmup_n: int = 0
    steady: bool = False
    elapsed_ns: int = 0
    warnings: tuple[str, ...] = ()
    cold_cache: bool = False
    flush_bytes: int = 0
    graph: bool = False
    clock_mhz: tuple[int, int] | None = None
    throttled: bool | None = None
    throttle_reasons: tuple[str, ...] = ()

    @property
    def relative_noise(self) -> float | None:
        """``noise_ns / median_ns`` (``inf`` for a zero median), or ``None`` without noise."""
        if self.noise_ns is None:
            return None
        return self.noise_ns / self.median_ns if self.median_ns > 0 else math.inf

    def quantile(self, q: float) -> int:
        """The reading at quantile ``q`` (0 to 1), nearest rank.

        Raises :class:`ValueError` outside [0, 1] (NaN included), :class:`TypeError` for a
        ``q`` that is not a number.
        """
        number = check_real(q, "quantile: q")
        if not 0.0 <= number <= 1.0:
            raise ValueError(f"a quantile lies in [0, 1], got {bounded_repr(q)}")
        return nearest_rank(sorted(self.readings_ns), number)

    def compare(self, other: BenchResult) -> Comparison:
        """This result's median time over ``other``'s, with its 95 % interval.

        Raises :class:`TypeError` when ``other`` is not a :class:`BenchResult`, and
        :class:`ValueError` when the two were measured differently, one with a cold cache and
        one warm, or one from a graph and one not: the ratio would be the method's.
        """
        if not isinstance(other, BenchResult):
            raise TypeError(
                f"compare: other must be a BenchResult (what eventapi.bench returns), not "
                f"{type(other).__qualname__} {bounded_repr(other)}"
            )
        for what in ("cold_cache", "graph"):
            this, that = getattr(self, what), getattr(other, what)
            if this != that:
                raise ValueError(
                    f"compare: this result ran with {what}={this} and the other with {what}="
                    f"{that}, so the ratio would measure that difference, not the calls; run "
                    f"both with the same {what}"
                )
        mine = median_interval(sorted(self.readings_ns), _EACH_SIDE, self.resolution_ns)
        theirs = median_interval(sorted(other.readings_ns), _EACH_SIDE, other.resolution_ns)
        ratio = self.median_ns / other.median_ns if other.median_ns > 0 else math.inf
        if mine is None or theirs is None:
            return Comparison(ratio=ratio, low=None, high=None)
        low = max(0, mine[0]) / theirs[1] if theirs[1] > 0 else 0.0
        high = mine[1] / theirs[0] if theirs[0] > 0 else math.inf
        return Comparison(ratio=ratio, low=low, high=high)

    def describe(self) -> str:
        """The result in one line, as ``eventapi bench`` prints it.

        The readings lead only where they are the stream's time for ``fn``'s work. A
        launch-bound run on a free stream says they are the host's time per call; a run whose
        work escaped the stream gives the host's time per call and no figure of the readings.
        """
        batch = self.calls_per_window
        calls = f" x {batch} calls" if batch > 1 else ""
        if self.escaped:
            host = duration_text(self.host_median_ns)
            parts = [
                f"fn's work escaped the stream: each call took {host} on the host, far more "
                "than its work on the stream; time host code with a host timer, or enqueue "
                "its work on stream",
                f"{self.n} windows{calls}",
            ]
        else:
            if self.noise_ns is None:
                low, high = duration_text(self.min_ns), duration_text(self.max_ns)
                spread = f"(no 95 % interval below {MIN_N} readings; range {low} to {high})"
            else:
                spread = f"± {duration_text(self.noise_ns)} (95 %)"
            headline = f"{duration_text(self.median_ns)} {spread}"
            if self.launch_bound and not self.held:
                headline += " of the host's time per call, not the stream's work (launch-bound)"
            parts = [
                headline,
                f"median of {self.n}{calls}",
                f"min {duration_text(self.min_ns)}",
                f"max {duration_text(self.max_ns)}",
                f"host {duration_text(self.host_median_ns)}/call",
            ]
            if self.gap_median_ns is not None:
                parts.append(f"gap {duration_text(self.gap_median_ns)}")
            if self.launch_bound and self.held:
                parts.append("launch-bound")
            if self.clock_mhz is not None:
                slowest, fastest = self.clock_mhz
                clock = f"{slowest}-{fastest}" if slowest != fastest else f"{slowest}"
                parts.append(f"clock {clock} MHz")
            if self.throttled:
                parts.append(f"throttled ({', '.join(self.throttle_reasons) or 'slow clock'})")
        if self.cold_cache:
            parts.append(f"cold cache ({self.flush_bytes / 2**20:.3g} MiB flushed)")
        if self.graph:
            parts.append("graph replay")
        if self.held:
            parts.append("stream held")
        parts.append(f"stopped by {self.stopped_by} after {self.elapsed_ns / 1e9:.2f} s")
        parts.append(f"warm-up {self.warmup_n}" + (" (steady)" if self.steady else " (not steady)"))
        return f"{self.backend}: " + ", ".join(parts)

    def as_dict(self) -> dict[str, object]:
        """Every field, JSON-ready (tuples as lists)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return {name: list(v) if isinstance(v, tuple) else v for name, v in values.items()}


def duration_text(ns: int) -> str:
    """A duration for a person: three significant figures in ns, us, ms or s."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns} ns"


def summarize(
    readings: list[int], resolution_ns: int
) -> tuple[tuple[int, ...], int, int | None, tuple[int, int] | None]:
    """Sorted readings, the median, its noise and its interval (``None`` below 6 readings)."""
    ordered = tuple(sorted(readings))
    median = nearest_rank(ordered, 0.5)
    # Widened by the resolution, the low end below zero if so: the noise is measured around the
    # median before the interval is clamped at zero.
    widened = median_interval(ordered, widen=resolution_ns)
    if widened is None:
        return ordered, median, None, None
    low, high = widened
    return ordered, median, max(median - low, high - median), (max(0, low), high)
