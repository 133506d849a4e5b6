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
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, TypeVar, final

from ._protocol import EventApi

__all__ = ["ANCHOR_SAMPLES", "Anchor", "sample_anchor"]

E = TypeVar("E")
S = TypeVar("S")

ANCHOR_SAMPLES: Final = 5
"""Bracketed samples per anchor.

The first round trip after a burst of work often pays for a cold path (the driver thread or
the stream's worker waking up); a handful more make it likely that one sample ran without
being preempted. Each costs one record and one wait on an idle stream, tens of microseconds,
so five keep an anchor well under a millisecond while the best bracket stops improving.
"""


@final
@dataclass(frozen=True, slots=True)
class Anchor:
    """A point on the host clock where the device's clock was read.

    ``host_ns`` is a :func:`time.perf_counter_ns` value: the host time at which the device
    stamped the anchor event, taken as the middle of the tightest bracket. The true instant lies
    within ``uncertainty_ns`` of it (half the bracket, rounded up), so a timestamp placed from
    this anchor is within ``uncertainty_ns`` of the host time at which the device stamped it,
    plus the device clock's own resolution. Users receive anchors; they never build one.
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
