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
million off, and NTP slews the host's). Two anchors measure the rate between them: the device
time from one anchor event to the other over the host time between them. Events are placed
back from the latest anchor at the rate measured over the earlier anchor (of the last
:data:`RATE_HISTORY`) that measures it best. Before a second anchor exists, the rate is taken
as 1 and the bound assumes :data:`ASSUMED_DRIFT`. :class:`Placement` does the arithmetic and
states a bound for each window it places.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Final, NamedTuple, TypeVar, final

from .._protocol import EventApi

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
    "sample_anchor",
]

E = TypeVar("E")
S = TypeVar("S")


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

A placement assumes the rate the anchors measured held since the event; an oscillator warming
up, or NTP adjusting the host's frequency, changes it by less than a part per million over the
seconds to minutes between collects. The bound adds this much of an event's distance to the
anchor it is placed from.
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


def sample_anchor(api: EventApi[E, S], stream: S, events: Sequence[E]) -> tuple[Anchor, E]:
    """Take one bracketed sample per event in ``events`` on ``stream``; keep the tightest.

    Returns the anchor and the event it belongs to (the one to read device time against).
    Blocks the calling thread until ``stream`` reaches each event in turn, so the first sample
    also waits for whatever was queued before it. The events stay owned by the caller; each is
    re-recorded. Raises :class:`~eventapi.DriverError` from the record or the wait.
    """
    if not events:
        raise ValueError("sample_anchor needs at least one event to record")
    samples = []
    for event in events:
        before = time.perf_counter_ns()
        api.event_record(event, stream)
        api.event_wait(event)
        samples.append((time.perf_counter_ns() - before, before, event))
    bracket, before, event = min(samples, key=itemgetter(0))  # the first of the tightest
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
    ``anchor``. Windows are given by their device distance before ``anchor``'s event, and are
    placed back from it at the rate measured over the earlier anchor that measures it best (or,
    with none, at rate 1 with :data:`ASSUMED_DRIFT`): the bound is this anchor's error plus the
    distance times the rate's own error, plus the readings.

    One rate for every window of a collect, not an interpolation between the two latest
    anchors: an interpolation would bound a window midway between them by the anchors' errors
    weighted by nearness rather than this anchor's plus a share of both, under half as much at
    best, and cost every window a second placement (``docs/profiling.md`` gives the figures).
    """

    # Everything spans() needs, precomputed: collect() places every window it reads.
    __slots__ = ("_base", "_host_ns", "_readout", "_slope", "_to_host")

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
            # host's (which the anchors' own errors widen). The rate may also change while
            # the window lies back there (:data:`RATE_WANDER`).
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
        self._to_host = 1.0 / rate
        # A window's own distance is a reading too, off by up to a tick plus its readout share;
        # the true rate turns that into host time, and it lies within rate_error of the one
        # measured.
        worst_rate = self._to_host + rate_error
        # The bound's growth per device ns of distance: the distance's readout, at the worst
        # rate, and the rate's own error.
        self._slope = READOUT_ERROR * worst_rate + rate_error
        # A window's end lies two readings from the anchor (its start's distance less its
        # duration), each off by a tick and its readout. Its start's bound is this anchor's
        # error, one tick, and the slope over its distance; the end's is at most that plus a
        # tick and the readout of the duration twice (once in each reading), at the worst
        # rate, since its distance is the shorter. The window's bound is the end's: over the
        # start's by less than two ticks, for a window shorter than a second.
        self._base = anchor.uncertainty_ns + 2 * TIMER_RESOLUTION_NS * worst_rate
        self._readout = 2 * READOUT_ERROR * worst_rate

    def spans(
        self, befores: Sequence[int], durations: Sequence[int]
    ) -> tuple[list[int], list[int], list[int]]:
        """Each window's ``start_ns``, ``end_ns`` and ``bound_ns`` on the host clock, as three
        lists in the windows' order.

        ``befores[i]`` is the device time from window ``i``'s start event to the anchor event,
        ``durations[i]`` from its start event to its end event. Each true host time lies within
        ``bound_ns`` of the one returned, and ``end_ns - start_ns`` is ``durations[i]`` at the
        measured rate. Raises :class:`ValueError` when the two sequences differ in length.
        """
        # An end distance is clamped at zero, as the readings are: an end the readings put
        # after the anchor lies at it. Distances are converted and rounded half up (so a host
        # time half down) by floor(x + 0.5), exact below 2**52 ns of distance: round() looks
        # its method up on every call, at twice the cost. They are taken from the anchor's
        # host time in integers: a float holds a host time to the nanosecond only below
        # 2**53 ns (104 days of a clock counting from boot).
        host_ns, to_host, base = self._host_ns, self._to_host, self._base
        slope, readout, ceil, floor = self._slope, self._readout, math.ceil, math.floor
        return (
            [host_ns - floor(before_ns * to_host + 0.5) for before_ns in befores],
            [
                host_ns
                - floor((before_ns - duration_ns if before_ns > duration_ns else 0) * to_host + 0.5)
                for before_ns, duration_ns in zip(befores, durations, strict=True)
            ],
            [
                ceil(base + slope * before_ns + readout * duration_ns)
                for before_ns, duration_ns in zip(befores, durations, strict=True)
            ],
        )
