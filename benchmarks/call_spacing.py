"""How far apart a window's driver calls are changes what they cost on the emulated drivers.

Usage: ``python benchmarks/call_spacing.py BACKEND [--load N] [--gap-ns NS] [--n N] [--reps R]``
with BACKEND ``cuda`` or ``hip`` and its emulated driver preloaded
(``LD_PRELOAD=$PWD/build/emulated/libcuda.so.1``).

Times the opening and closing of a profiling window (no collect) three ways, interleaved:

* ``eventapi``: ``with prof.window(...)``, which checks the stream for a capture and records
  at the open, and again at the close;
* ``raw, back to back``: the raw variant of ``fence_window.py``, one capture check and two
  records in a row through the binding;
* ``raw, spaced``: eventapi's calls (a capture check and a record at each end) made through the
  binding, with ``--gap-ns`` of busy waiting after each pair in place of eventapi's Python
  (about 1.1 us each with the binding's calls made no-ops, on the machine of
  ``docs/benchmarks.md``); the gaps are subtracted from its time.

and counts how often each woke the emulated stream's sleeping worker thread. The emulated device
is a thread of this process that sleeps when its queue is empty: calls spaced apart find it
asleep more often, and waking it costs the caller, the more so when busy processes hold the
cores. Where ``raw, spaced`` costs what ``eventapi`` does, the difference from ``raw, back to
back`` is the emulation's answer to the spacing, not eventapi's own work.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from fence_window import interleaved, ok, raw_calls, wakeup_counter
from run import busy

import eventapi
from eventapi import EventProfiler


def _busy_wait(ns: int) -> None:
    end = time.perf_counter_ns() + ns
    while time.perf_counter_ns() < end:
        pass


def measure(backend: str, n: int, reps: int, gap_ns: int) -> dict[str, tuple[float, float]]:
    """Per variant: median microseconds per window (open and close), and wake-ups per window."""
    raw = raw_calls(backend)
    if raw is None:
        raise SystemExit(f"{backend}: no raw binding to time (cuda or hip)")
    api: Any = eventapi.backend(backend)
    stream = api.stream_create_non_blocking()
    native = stream.raw
    profiler: EventProfiler[Any, Any] = EventProfiler(api, stream)
    start, end = ok(raw.create()), ok(raw.create())

    def screened_record(event: Any) -> None:
        if int(ok(raw.is_capturing(native))):
            raise RuntimeError("the benchmark's stream is capturing a graph")
        ok(raw.record(event, native))

    def with_eventapi() -> float:
        begin = time.perf_counter_ns()
        for _ in range(n):
            with profiler.window("w"):
                pass
        elapsed = time.perf_counter_ns() - begin
        profiler.collect()  # untimed: keeps the pool at its size
        return elapsed / n

    def back_to_back() -> float:
        begin = time.perf_counter_ns()
        for _ in range(n):
            screened_record(start)
            ok(raw.record(end, native))
        elapsed = time.perf_counter_ns() - begin
        ok(raw.synchronize(end))
        return elapsed / n

    def spaced() -> float:
        begin = time.perf_counter_ns()
        for _ in range(n):
            screened_record(start)
            _busy_wait(gap_ns)
            screened_record(end)
            _busy_wait(gap_ns)
        elapsed = time.perf_counter_ns() - begin
        ok(raw.synchronize(end))
        return elapsed / n - 2 * gap_ns

    variants: dict[str, Callable[[], float]] = {
        "eventapi": with_eventapi,
        "raw, back to back": back_to_back,
        "raw, spaced": spaced,
    }
    counts: dict[str, float] = {}
    try:
        samples = interleaved(variants, reps)
        counter = wakeup_counter()
        for name, run in variants.items():  # counted apart, so counting cannot perturb timing
            before = counter() if counter is not None else 0
            run()
            counts[name] = (counter() - before) / n if counter is not None else float("nan")
    finally:
        profiler.close()
        ok(raw.destroy(start))
        ok(raw.destroy(end))
        api.stream_destroy(stream)
    return {
        name: (statistics.median(values) / 1000, counts[name]) for name, values in samples.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("backend", choices=("cuda", "hip"))
    parser.add_argument("--load", type=int, default=0, help="busy processes beside the run")
    parser.add_argument("--gap-ns", type=int, default=1100, help="busy wait after each pair")
    parser.add_argument("--n", type=int, default=500, help="windows per timed run")
    parser.add_argument("--reps", type=int, default=7, help="interleaved repetitions")
    args = parser.parse_args(argv)
    with busy(args.load):
        result = measure(args.backend, args.n, args.reps, args.gap_ns)
    print(
        f"{args.backend}, {args.load} busy processes, gap {args.gap_ns} ns: "
        "median us per window (open and close), worker wake-ups per window"
    )
    for name, (us, wakeups) in result.items():
        print(f"  {name:20s} {us:7.2f}   {wakeups:5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
