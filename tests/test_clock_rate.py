"""A device clock that drifts and ticks: spans stay within their own stated bound.

The emulated drivers' device clock can run fast by some parts per million and tick coarsely
(``EMU_CLOCK_PPM``, ``EMU_CLOCK_RESOLUTION_NS``), as a real GPU's does. A child process on the
emulated ``cuda`` driver with a clock 50 ppm fast and 0.5 us ticks opens windows, waits a
second, and collects. Host functions on the stream stamp the host clock just before and just
after each of a window's events, so each event's true host time lies between two stamps; the
placed time must lie within the span's own ``uncertainty_ns`` of that interval. Uncorrected,
a second at 50 ppm is 50 us off: more than a measured bound allows.
"""

from __future__ import annotations

import pytest
from child import run_json
from emulated_driver import REPO_ROOT, DriverName, build, preload_env

_CHILD = """
import json, sys, time
sys.path.insert(0, {tests!r})
from emulated_driver import load
import eventapi

TRIALS = 5
GAP_S = 1.0  # from a trial's first window to its collect
emu = load("cuda")
api = eventapi.backend("cuda")
prof = eventapi.EventProfiler(api)
stamps = []

def stamp():
    api.stream_launch_host_func(prof.stream, lambda: stamps.append(time.perf_counter_ns()))

def window(name):
    first = len(stamps)
    stamp()
    w = prof.start(name)
    stamp()
    w.stop()
    stamp()
    # Let the stream run the three host functions back to back while this thread holds no
    # GIL, so that each pair of stamps is microseconds apart.
    api.stream_synchronize(prof.stream)
    return first

def until(t):
    remaining = t - time.perf_counter()
    if remaining > 0:
        time.sleep(remaining)

_ = prof.anchor  # an anchor before the first trial: the first collect can measure the rate
trials = []
for trial in range(TRIALS):
    begin = time.perf_counter()
    marks = {{}}
    # One window a second before the collect, others nearer to it.
    for k, at in enumerate((0.0, 0.5, 0.9)):
        until(begin + at * GAP_S)
        marks[f"{{trial}}.{{k}}"] = window(f"{{trial}}.{{k}}")
    until(begin + GAP_S)
    previous = prof.anchor  # the earlier end of the baseline the rate is measured over
    spans = prof.collect()
    anchor = prof.anchor
    rows = []
    for span in spans:
        i = marks[span.name]
        before, between, after = stamps[i], stamps[i + 1], stamps[i + 2]
        rows.append([span.name, span.start_ns, span.end_ns, span.uncertainty_ns,
                     before, between, after])
    trials.append({{"anchor_uncertainty_ns": anchor.uncertainty_ns,
                   "previous_uncertainty_ns": previous.uncertainty_ns, "spans": rows}})
prof.close()
print(json.dumps({{"trials": trials, "live": list(emu.live_handles())[:2]}}))
"""


def test_a_drifting_ticking_clock_stays_within_each_spans_bound() -> None:
    build()
    env = preload_env("cuda")
    env["EMU_CLOCK_PPM"] = "50"
    env["EMU_CLOCK_RESOLUTION_NS"] = "500"
    result = run_json(_CHILD.format(tests=str(REPO_ROOT / "tests")), env)
    assert result["live"] == [0, 0]
    trials = result["trials"]
    assert len(trials) == 5
    for trial in trials:
        # The rate is measured between two anchors, so its error, and the bound of a span a
        # second away, follow both: the worse of the two is the one that counts (a preempted
        # sample on a loaded machine widens one anchor's bracket, not the other's).
        anchor_u = max(trial["anchor_uncertainty_ns"], trial["previous_uncertainty_ns"])
        assert len(trial["spans"]) == 3
        for name, start, end, u, before, between, after in trial["spans"]:
            # The start event was stamped between `before` and `between`, the end between
            # `between` and `after`: each placement must reach its interval within u.
            assert before - u <= start <= between + u, (name, start - before, u, trial)
            assert between - u <= end <= after + u, (name, end - between, u, trial)
            # Every trial's collect follows an earlier anchor, so the rate is measured, and
            # the bound stays near the anchor's own uncertainty.
            assert u <= 4 * anchor_u, (name, u, anchor_u)


_CLOCK_CHILD = """
import json, time
import eventapi

api = eventapi.backend({kind!r})
stream = api.stream_create_non_blocking()
first, second = api.event_create(), api.event_create()
stamps = []
api.stream_launch_host_func(stream, lambda: stamps.append(time.perf_counter_ns()))
api.event_record(first, stream)
api.stream_launch_host_func(stream, lambda: stamps.append(time.perf_counter_ns()))
api.stream_launch_host_func(stream, lambda: time.sleep(0.2))
api.stream_launch_host_func(stream, lambda: stamps.append(time.perf_counter_ns()))
api.event_record(second, stream)
api.stream_launch_host_func(stream, lambda: stamps.append(time.perf_counter_ns()))
api.stream_synchronize(stream)
elapsed = api.event_elapsed(first, second)
for event in (first, second):
    api.event_destroy(event)
api.stream_destroy(stream)
print(json.dumps({{"elapsed": elapsed, "stamps": stamps}}))
"""


@pytest.mark.parametrize("kind", ["cuda", "hip"])
def test_the_emulated_device_clock_runs_at_its_rate_and_ticks(kind: DriverName) -> None:
    build()
    env = preload_env(kind)
    env["EMU_CLOCK_PPM"] = "2000"  # 400 us fast over the 200 ms below: far beyond the stamps
    env["EMU_CLOCK_RESOLUTION_NS"] = "50000"  # a tick coarse enough to see through float ms
    result = run_json(_CLOCK_CHILD.format(kind=kind), env)
    elapsed = result["elapsed"]
    a, b, c, d = result["stamps"]
    # The first event was stamped between a and b, the second between c and d; on a clock
    # 2000 ppm fast the device time between them is the host time scaled by 1.002, give or
    # take a tick (each stamp is truncated to one). The driver's float32 milliseconds round a
    # 200 ms reading to within 12 ns, so it shows a whole number of ticks to within 32 ns.
    tick = 50_000
    assert min(elapsed % tick, tick - elapsed % tick) <= 32, elapsed
    assert (c - b) * 1.002 - tick - 2 <= elapsed <= (d - a) * 1.002 + tick + 2, (
        elapsed,
        a,
        b,
        c,
        d,
    )
    assert elapsed > (c - b) + 300_000  # the host's own rate would fall 350 us short
