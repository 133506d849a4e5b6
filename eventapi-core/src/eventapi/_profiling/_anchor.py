"""The anchor: where a device timestamp lies on the host clock, and how sure we are.

A device stamps events with its own clock; the host reads :func:`time.perf_counter_ns`. The
two are tied together by a *bracketed sample*: read the host clock (``before``), record an
event, wait for it, read the host clock again (``after``). The device stamped the event at some
instant between the two reads, so the event's host time is ``(before + after) / 2`` give or
take half the bracket. Several samples are taken and the tightest bracket wins, as NTP keeps the
round trip with the least delay: a bracket widened by a preempted thread or a slow wake-up says
nothing about the clocks, only about the scheduler.

Any other event already reached on the same stream is then placed without a further wait:
its host time is the anchor's host time minus the device time from that event to the anchor
event. Readings are clamped at zero, so the anchor must lie *after* the events it places;
:class:`~eventapi.EventProfiler` takes it in ``collect()``, after the windows it reads.

The device clock does not run at the host clock's rate (its oscillator is a few parts per
million off, and NTP slews the host's). Two successive anchors measure the rate between them:
the device time from one anchor event to the next over the host time between them. An event
that lies between the two is placed by interpolating between them, so its error is the
anchors' own, weighted by how near it lies to each; an event before the earlier anchor is
placed from the later one at the measured rate. Before a second anchor exists, the rate is
taken as 1 and the bound assumes :data:`ASSUMED_DRIFT`. :class:`Placement` does the
arithmetic and states a bound for each window it places.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple, Protocol, TypeVar, final

__all__ = [
    "ANCHOR_SAMPLES",
    "ASSUMED_DRIFT",
    "RATE_HISTORY",
    "RATE_WANDER",
    "READOUT_ERROR",
    "TIMER_RESOLUTION_NS",
    "Anchor",
    "Earlier",
    "Placement",
    "Recorder",
    "sample_anchor",
]

E = TypeVar("E")
S = TypeVar("S")
E_contra = TypeVar("E_contra", contravariant=True)
S_contra = TypeVar("S_contra", contravariant=True)


class Recorder(Protocol[E_contra, S_contra]):
    """What a sample needs of a backend object: a record and a wait."""

    def event_record(self, event: E_contra, stream: S_contra, /) -> None: ...

    def event_wait(self, event: E_contra, /) -> None: ...


ANCHOR_SAMPLES: Final = 5
"""Bracketed samples per anchor.

The first round trip after a burst of work often pays for a cold path (the driver thread or
the stream's worker waking up); a handful more make it likely that one sample ran without
being preempted. Each costs one record and one wait on an idle stream, tens of microseconds,
so five keep an anchor well under a millisecond while the best bracket stops improving.
"""

ASSUMED_DRIFT: Final = 100e-6
"""How far apart the device's and the host's clock rates are assumed to be before measured.

100 parts per million: a quartz oscillator is specified to tens of ppm, the device's and the
host's may err in opposite directions, and NTP slews the host's clock on top. An event placed
before the rate is measured is off by at most this much of its distance to the anchor (100 us
for a window one second before its collect).
"""

TIMER_RESOLUTION_NS: Final = 1_000
"""The coarsest event timer resolution assumed: 1 us (CUDA's is about 0.5 us, HIP's 1 us).

The core cannot ask a backend for it; the bound counts it once per device reading.
"""

READOUT_ERROR: Final = 2.0**-23
"""Relative error of one device-time reading: the drivers return float32 milliseconds.

A float32 keeps 24 significant bits, so a reading is rounded to within 2**-24 of itself
(60 ns at one second); twice that covers the conversion to integer nanoseconds as well.
"""

RATE_WANDER: Final = 1e-6
"""How much the clocks' relative rate is assumed to change between two successive anchors.

Placement between two anchors assumes the rate they measured held throughout; an oscillator
warming up, or NTP adjusting the host's frequency, changes it by less than a part per million
over the seconds to minutes between collects. The bound adds this much of an event's distance
to the nearer anchor, which is where a change of rate would show.
"""


@final
@dataclass(frozen=True, slots=True)
class Anchor:
    """A point on the host clock where the device's clock was read.

    ``host_ns`` is a :func:`time.perf_counter_ns` value: the host time at which the device
    stamped the anchor event, taken as the middle of the tightest bracket. The true instant lies
    within ``uncertainty_ns`` of it (half the bracket, rounded up), so a timestamp placed from
    this anchor is within ``uncertainty_ns`` of the host time at which the device stamped it,
    plus what its distance from the anchor adds (see :attr:`Span.uncertainty_ns`, which states
    the whole bound for each span). Users receive anchors; they never build one.
    """

    host_ns: int
    uncertainty_ns: int


def sample_anchor(api: Recorder[E, S], stream: S, events: Sequence[E]) -> tuple[Anchor, E]:
    """Take one bracketed sample per event in ``events`` on ``stream``; keep the tightest.

    Returns the anchor and the event it belongs to (the one to read device time against).
    Blocks the calling thread until ``stream`` reaches each event in turn, so the first sample
    also waits for whatever was queued before it. The events stay owned by the caller; each is
    re-recorded. Raises :class:`~eventapi.DriverError` from the record or the wait.
    """
    if not events:
        raise ValueError("sample_anchor needs at least one event to record")
    best: tuple[int, int, E] | None = None
    for event in events:
        before = time.perf_counter_ns()
        api.event_record(event, stream)
        api.event_wait(event)
        after = time.perf_counter_ns()
        if best is None or after - before < best[1] - best[0]:
            best = (before, after, event)
    assert best is not None  # events is not empty
    before, after, event = best
    bracket = after - before
    # Half the bracket rounded up on both sides, so [host_ns - u, host_ns + u] covers it.
    half = bracket // 2
    return Anchor(host_ns=before + half, uncertainty_ns=bracket - half), event


RATE_HISTORY: Final = 8
"""Earlier anchors kept to measure the clock rate over: the latest eight.

A rate measured over a longer baseline is more precise (the anchors' errors are spread over
more time), but only recent anchors tell the current rate, since NTP slews the host clock.
Eight anchors keep the baseline long while letting a change of rate leave the estimate after
eight collects.
"""


class Earlier(NamedTuple):
    """An earlier anchor, seen from the latest one.

    ``device_ns`` is the device time from it to the latest anchor, summed over the intervals
    read between successive anchors; ``error_ns`` bounds that sum's error (each interval's
    reading is off by up to a tick and its readout error). A tuple: every collect builds one
    per anchor kept, which a frozen dataclass made cost microseconds.
    """

    anchor: Anchor
    device_ns: int
    error_ns: float

    def advanced(self, interval_ns: int) -> Earlier:
        """The same anchor seen from the next one, ``interval_ns`` device ns later."""
        return Earlier(
            self.anchor,
            self.device_ns + interval_ns,
            self.error_ns + _reading_error(interval_ns),
        )


def _reading_error(distance_ns: float) -> float:
    return TIMER_RESOLUTION_NS + READOUT_ERROR * distance_ns


@final
class Placement:
    """Places device events on the host clock from the latest anchor, and bounds each placement.

    ``earlier`` holds earlier anchors (newest last), each with the device time from it to
    ``anchor``. Windows are given by their device distance before ``anchor``'s event. Two ways
    of placing are tried and the one with the smaller bound wins:

    * between the previous anchor and this one: interpolation. Its error is the two anchors'
      own, weighted by nearness, plus the readings, plus a change of rate inside the interval
      (:data:`RATE_WANDER`), which would show most midway;
    * from this anchor back, at the rate measured over the earlier anchor that measures it
      best (or, with none, at rate 1 with :data:`ASSUMED_DRIFT`): this anchor's error plus the
      distance times the rate's own error.
    """

    # Everything spans() needs, precomputed: collect() places every window it reads.
    __slots__ = (
        "_back_readout",
        "_back_resolution",
        "_back_slope",
        "_base",
        "_between",
        "_between_readout",
        "_between_resolution",
        "_between_slope",
        "_between_to_host",
        "_host_ns",
        "_interval",
        "_to_host",
        "_uncertainty",
    )

    def __init__(self, anchor: Anchor, earlier: tuple[Earlier, ...] = ()) -> None:
        usable = [
            e for e in earlier if e.device_ns > e.error_ns and anchor.host_ns > e.anchor.host_ns
        ]
        rate = 1.0  # device ns per host ns
        rate_error = ASSUMED_DRIFT  # host ns per device ns of distance
        for e in usable:
            host_ns = anchor.host_ns - e.anchor.host_ns
            # The rate is read as host_ns / device_ns host ns per device ns; the true one lies
            # anywhere the two anchors' errors (u, host) and the reading's (r, device) allow:
            # (host_ns +- u) / (device_ns -+ r). Its farthest from the one read is
            # (u * device_ns + host_ns * r) / (device_ns * (device_ns - r)): per device ns of
            # a window's distance back from this anchor, so over the device time, not the
            # host's (which the anchors' own errors widen).
            u = anchor.uncertainty_ns + e.anchor.uncertainty_ns
            error = (u * e.device_ns + host_ns * e.error_ns) / (
                e.device_ns * (e.device_ns - e.error_ns)
            )
            error += RATE_WANDER
            # Once measured, a rate replaces the assumption even where its bound is wider:
            # the assumption is a guess, the measurement a bound.
            if e is usable[0] or error < rate_error:
                rate, rate_error = e.device_ns / host_ns, error
        self._host_ns = anchor.host_ns
        self._uncertainty = anchor.uncertainty_ns
        self._to_host = 1.0 / rate
        # A window's own distance is a reading too, off by up to a tick plus its readout share;
        # the true rate turns that into host time, and it lies within rate_error of the one
        # measured.
        worst_rate = self._to_host + rate_error
        self._base = anchor.uncertainty_ns + TIMER_RESOLUTION_NS * worst_rate
        # The bound's growth per device ns of distance: the distance's readout, at the worst
        # rate, and the rate's own error.
        self._back_slope = READOUT_ERROR * worst_rate + rate_error
        # A window's end lies two readings from the anchor (its start's distance less its
        # duration), each off by a tick and its readout: beyond what its own distance adds,
        # one more tick, and the readout of the duration twice (once in each reading), at the
        # worst rate.
        self._back_resolution = TIMER_RESOLUTION_NS * worst_rate
        self._back_readout = 2 * READOUT_ERROR * worst_rate
        previous = usable[-1] if usable else None
        self._between = previous is not None
        if previous is not None:
            device_ns, reading_ns = previous.device_ns, previous.error_ns
            host_ns = anchor.host_ns - previous.anchor.host_ns
            self._interval = device_ns
            self._between_to_host = host_ns / device_ns
            # The previous anchor's own error and its interval's reading, at full weight there;
            # the anchors' weighted error changes linearly from this anchor's to it. A reading
            # r off the device interval moves a placement t of the way back by t times the
            # true host interval (at most host_ns + u) times r / (device_ns - r).
            u = anchor.uncertainty_ns + previous.anchor.uncertainty_ns
            previous_base = previous.anchor.uncertainty_ns + reading_ns * (host_ns + u) / (
                device_ns - reading_ns
            )
            # The window's own reading, as on the path back, at the fastest true rate between
            # the two anchors.
            worst_between = (host_ns + u) / (device_ns - reading_ns)
            self._between_slope = (
                previous_base - anchor.uncertainty_ns
            ) / device_ns + READOUT_ERROR * worst_between
            self._between_resolution = TIMER_RESOLUTION_NS * worst_between
            self._between_readout = 2 * READOUT_ERROR * worst_between  # as _back_readout
        else:
            self._interval = 0
            self._between_to_host = 0.0
            self._between_slope = 0.0
            self._between_resolution = 0.0
            self._between_readout = 0.0

    def spans(self, befores: Sequence[int], durations: Sequence[int]) -> list[tuple[int, int, int]]:
        """``(start_ns, end_ns, bound_ns)`` of each window on the host clock, in order.

        ``befores[i]`` is the device time from window ``i``'s start event to the anchor event,
        ``durations[i]`` from its start event to its end event. Each true host time lies within
        ``bound_ns`` of the one returned. Both ends are placed the same way (whichever bounds
        the window tighter), so ``end_ns - start_ns`` is ``durations[i]`` at one rate. Raises
        :class:`ValueError` when the two sequences differ in length.
        """
        # One call for every window of a collect, with what each placement reads held in
        # locals: a call per window and its attribute reads cost as much as the arithmetic.
        host_ns, to_host, base = self._host_ns, self._to_host, self._base
        back_slope, between, interval = self._back_slope, self._between, self._interval
        u, slope, between_to_host = self._uncertainty, self._between_slope, self._between_to_host
        wander, resolution, ceil = RATE_WANDER, self._between_resolution, math.ceil
        back_resolution, back_readout = self._back_resolution, self._back_readout
        between_readout = self._between_readout
        placed: list[tuple[int, int, int]] = []
        append = placed.append
        for before_ns, duration_ns in zip(befores, durations, strict=True):
            after_ns = before_ns - duration_ns if before_ns > duration_ns else 0
            # From this anchor back at the measured (or assumed) rate; the bound grows with
            # the distance, and the end's distance is two readings (see _back_resolution):
            # the larger of the two ends' bounds is the window's.
            rate = to_host
            bound = base + back_slope * before_ns
            at_end = base + back_slope * after_ns + back_resolution + back_readout * duration_ns
            bound = at_end if at_end > bound else bound
            if between and before_ns <= interval:
                # Between the previous anchor and this one: interpolation, its error the two
                # anchors' own weighted by nearness ((1 - t) * u + t * previous,
                # t = x / interval, linear in x), plus the readings, plus a change of rate,
                # most visible midway.
                worst = (
                    u
                    + slope * before_ns
                    + wander * (before_ns if 2 * before_ns < interval else interval - before_ns)
                )
                at_end = (
                    u
                    + slope * after_ns
                    + wander * (after_ns if 2 * after_ns < interval else interval - after_ns)
                    + resolution
                    + between_readout * duration_ns
                )
                worst = (worst if worst > at_end else at_end) + resolution
                if worst < bound:
                    rate, bound = between_to_host, worst
            # Both ends at the one rate chosen, so end - start is the duration at that rate.
            start, end = host_ns - before_ns * rate, host_ns - after_ns * rate
            append((round(start), round(end), ceil(bound)))
        return placed
