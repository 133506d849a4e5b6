"""eventapi's own Python per window and per fence, beside the cheapest Python that does the job.

Usage::

    python benchmarks/floor.py [--repeat N] [--json FILE]

Every driver call is a no-op here, so what is left is the host's cost in Python alone:

* **floor**: the least a Python profiler can do per window, written plainly: two records from a
  free list into a list of pending pairs, and at each collect of 100 one batched reading and a
  tuple per span; a fence is create, record, wait and destroy, four calls.
* **eventapi, bare protocol**: ``EventProfiler`` and ``EventFence`` over a backend object whose
  methods do nothing (the core's own Python: windows, pooling, placement, statistics; a fence's
  lifetime and bookkeeping).
* **eventapi, driverkit**: the same over a :class:`~eventapi.driverkit.DriverBackend` whose raw
  calls do nothing (the core plus the handle layer every backend written in Python pays, host
  and third-party ones: closed and foreign handles refused, live handles counted; cuda and hip
  own their handles in C instead).

The ratios are read against the floor, measured side by side in one run (interleaved, best of
``--repeat`` rounds). ``docs/benchmarks.md`` records the figures and the command.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import callgrind

import eventapi
from eventapi.driverkit import CaptureCheckMixin, DriverBackend, EventQueryMixin

WINDOWS: Final = 100  # windows per collect, as make bench reads them
ROUNDS: Final = 50  # collects per timed run
FENCES: Final = 5_000


class Bare:
    """The protocol and the event query, each a no-op: eventapi's core alone."""

    BACKEND = "bare"

    def __init__(self) -> None:
        self._ids = itertools.count()

    def event_create(self) -> int:
        return next(self._ids)

    def event_destroy(self, event: int) -> None:
        pass

    def event_record(self, event: int, stream: int) -> None:
        pass

    def event_wait(self, event: int) -> None:
        pass

    def event_query(self, event: int) -> bool:
        return True

    def event_elapsed(self, start: int, end: int) -> int:
        return 1_000

    def stream_wait_event(self, stream: int, event: int) -> None:
        pass

    def stream_synchronize(self, stream: int) -> None:
        pass

    def stream_create_non_blocking(self) -> int:
        return next(self._ids)

    def stream_destroy(self, stream: int) -> None:
        pass


class NoopDriver(EventQueryMixin[int, int], CaptureCheckMixin[int, int], DriverBackend[int, int]):
    """A driverkit backend whose raw calls do nothing: the core and the handle layer."""

    BACKEND = "noop"

    def __init__(self) -> None:
        super().__init__()
        self._ids = itertools.count(1)

    def _raw_event_create(self) -> int:
        return next(self._ids)

    def _raw_event_destroy(self, event: int) -> None:
        pass

    def _raw_event_record(self, event: int, stream: int) -> None:
        pass

    def _raw_event_wait(self, event: int) -> None:
        pass

    def _raw_event_query(self, event: int) -> bool:
        return True

    def _raw_event_elapsed_ns(self, start: int, end: int) -> int:
        return 1_000

    def _raw_event_elapsed_ns_many(self, starts: list[int], ends: list[int]) -> list[int]:
        return [1_000] * len(starts)

    def _raw_stream_wait_event(self, stream: int, event: int) -> None:
        pass

    def _raw_stream_synchronize(self, stream: int) -> None:
        pass

    def _raw_stream_create_non_blocking(self) -> int:
        return 1_000_000 + next(self._ids)

    def _raw_stream_destroy(self, stream: int) -> None:
        pass

    def _raw_stream_is_capturing(self, stream: int) -> bool:
        return False

    def _raw_event_record_unless_capturing(self, event: int, stream: int) -> bool:
        return True


# -- the floor ------------------------------------------------------------------------------------


def _noop(*args: object) -> None:
    pass


def _elapsed_many(starts: Sequence[object], ends: Sequence[object]) -> list[int]:
    return [1_000] * len(starts)


def floor_windows() -> None:
    """ROUNDS collects of WINDOWS windows, the plainest way: pairs, one batch, a tuple a span."""
    record, wait = _noop, _noop
    free: list[object] = [object() for _ in range(2 * WINDOWS + 2)]
    stream = object()
    kept: list[tuple[str, int, int, int]] = []
    for _ in range(ROUNDS):
        pending: list[tuple[str, object, object]] = []
        for _ in range(WINDOWS):
            start = free.pop()
            record(start, stream)
            end = free.pop()
            record(end, stream)
            pending.append(("w", start, end))
        wait(pending[-1][2])
        anchor = time.perf_counter_ns()
        durations = _elapsed_many([p[1] for p in pending], [p[2] for p in pending])
        befores = _elapsed_many([p[1] for p in pending], [p[2] for p in pending])
        for (name, start, end), duration, before in zip(pending, durations, befores, strict=True):
            kept.append((name, anchor - before, anchor - before + duration, duration))
            free.append(start)
            free.append(end)


def floor_fences() -> None:
    """FENCES fences: create, record, wait, destroy."""
    create, record, wait, destroy = itertools.count().__next__, _noop, _noop, _noop
    stream = object()
    for _ in range(FENCES):
        event = create()
        record(event, stream)
        wait(event)
        destroy(event)


# -- eventapi ---------------------------------------------------------------------------------


def eventapi_windows(api: Any) -> Callable[[], None]:
    def run() -> None:
        with eventapi.EventProfiler(api) as prof:
            window = prof.window
            for _ in range(ROUNDS):
                for _ in range(WINDOWS):
                    with window("w"):
                        pass
                prof.collect()

    return run


def eventapi_fences(api: Any) -> Callable[[], None]:
    def run() -> None:
        stream = api.stream_create_non_blocking()
        record = eventapi.EventFence.record
        for _ in range(FENCES):
            fence = record(api, stream)
            fence.wait()
            fence.close()
        api.stream_destroy(stream)

    return run


def best_of(fns: dict[str, Callable[[], None]], repeat: int) -> dict[str, float]:
    """Each function's best time in seconds over ``repeat`` interleaved rounds."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeat):
        for name, fn in fns.items():
            gc.collect()
            started = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - started)
    return best


def workloads() -> dict[str, dict[str, Callable[[], None]]]:
    """Every workload, by kind (window, fence) and by name; each call runs one timed round."""
    bare, noop = Bare(), NoopDriver()
    return {
        "window": {
            "floor": floor_windows,
            "eventapi, bare protocol": eventapi_windows(bare),
            "eventapi, driverkit": eventapi_windows(noop),
        },
        "fence": {
            "floor": floor_fences,
            "eventapi, bare protocol": eventapi_fences(bare),
            "eventapi, driverkit": eventapi_fences(noop),
        },
    }


OPERATIONS: Final = {"window": ROUNDS * WINDOWS, "fence": FENCES}  # per round


# -- instructions, counted by valgrind (see callgrind.py) ----------------------------------------
#
# Each workload runs in a process of its own, once with one round and once with three after the
# same warm-up round: read these counts to compare the core with itself, and the timed figures
# to compare it with anything else.


def _run_rounds(kind: str, name: str, rounds: int) -> None:
    run = workloads()[kind][name]
    for _ in range(1 + rounds):  # one round to warm up
        run()


def instructions() -> dict[str, dict[str, float]]:
    """Instructions per operation of every workload (see the comment above)."""
    return {
        kind: {
            name: callgrind.per_operation([__file__, "--rounds", kind, name], 1, 3)
            / OPERATIONS[kind]
            for name in by_name
        }
        for kind, by_name in workloads().items()
    }


def _print_instructions(json_path: str | None) -> None:
    callgrind.require_valgrind()
    counted = instructions()
    print("instructions per operation, every driver call a no-op (valgrind callgrind)")
    print(f"{'':28}{'window (open+stop, collect/100)':>34}{'fence (record, wait, close)':>30}")
    for name in counted["window"]:
        w, f = counted["window"][name], counted["fence"][name]
        w_ratio, f_ratio = w / counted["window"]["floor"], f / counted["fence"]["floor"]
        print(f"{name:28}{w:>27,.0f} ({w_ratio:4.1f}x){f:>23,.0f} ({f_ratio:4.1f}x)")
    if json_path:
        figures = {"window_instructions": counted["window"], "fence_instructions": counted["fence"]}
        Path(json_path).write_text(json.dumps(figures, indent=2), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions per operation under valgrind instead of timing",
    )
    parser.add_argument("--rounds", nargs=3, metavar=("KIND", "NAME", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rounds:
        kind, name, rounds = args.rounds
        _run_rounds(kind, name, int(rounds))
        return
    if args.instructions:
        _print_instructions(args.json)
        return
    by_kind = workloads()
    window_s = best_of(by_kind["window"], args.repeat)
    fence_s = best_of(by_kind["fence"], args.repeat)
    figures: dict[str, dict[str, float]] = {"window_us": {}, "fence_us": {}}
    print(f"host cost in Python, every driver call a no-op (best of {args.repeat} rounds)")
    print(f"{'':28}{'window (open+stop, collect/100)':>34}{'fence (record, wait, close)':>30}")
    for name in window_s:
        w = window_s[name] / OPERATIONS["window"] * 1e6
        f = fence_s[name] / OPERATIONS["fence"] * 1e6
        figures["window_us"][name] = w
        figures["fence_us"][name] = f
        w_ratio = w / (window_s["floor"] / OPERATIONS["window"] * 1e6)
        f_ratio = f / (fence_s["floor"] / OPERATIONS["fence"] * 1e6)
        print(f"{name:28}{w:>24.2f} us ({w_ratio:4.1f}x){f:>20.2f} us ({f_ratio:4.1f}x)")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(figures, out, indent=2)


if __name__ == "__main__":
    main()
