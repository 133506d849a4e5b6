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

import json
import subprocess
import sys

from emulated_driver import REPO_ROOT, build, preload_env

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
    spans = prof.collect()
    anchor = prof.anchor
    rows = []
    for span in spans:
        i = marks[span.name]
        before, between, after = stamps[i], stamps[i + 1], stamps[i + 2]
        rows.append([span.name, span.start_ns, span.end_ns, span.uncertainty_ns,
                     before, between, after])
    trials.append({{"anchor_uncertainty_ns": anchor.uncertainty_ns, "spans": rows}})
prof.close()
print(json.dumps({{"trials": trials, "live": list(emu.live_handles())[:2]}}))
"""


def test_a_drifting_ticking_clock_stays_within_each_spans_bound() -> None:
    build()
    env = preload_env("cuda")
    env["EMU_CLOCK_PPM"] = "50"
    env["EMU_CLOCK_RESOLUTION_NS"] = "500"
    done = subprocess.run(
        [sys.executable, "-c", _CHILD.format(tests=str(REPO_ROOT / "tests"))],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["live"] == [0, 0]
    trials = result["trials"]
    assert len(trials) == 5
    for trial in trials:
        anchor_u = trial["anchor_uncertainty_ns"]
        assert len(trial["spans"]) == 3
        for name, start, end, u, before, between, after in trial["spans"]:
            # The start event was stamped between `before` and `between`, the end between
            # `between` and `after`: each placement must reach its interval within u.
            assert before - u <= start <= between + u, (name, start - before, u, trial)
            assert between - u <= end <= after + u, (name, end - between, u, trial)
            # Every trial's collect follows an earlier anchor, so the rate is measured, and
            # the bound stays near the anchor's own uncertainty.
            assert u <= 4 * anchor_u, (name, u, anchor_u)
