"""What a thread waiting on a fence costs in CPU time, next to how long it waited.

Usage: ``python benchmarks/wait_cpu.py BACKEND [--wait-ms MS] [--trials N] [--json FILE]``.

A host function holds the stream until a timer releases it ``--wait-ms`` milliseconds later;
a fence recorded behind it is waited for with ``fence.wait()``, and the CPU time the wait
burned is set against its wall time. Two waiters, since ``wait()`` takes two paths:

* on the main thread, where an untimed wait that outlasts its first query-spin runs the
  driver's wait on a helper thread (to stay interruptible): the whole process's CPU time
  (:func:`time.process_time_ns`) counts, the helper included;
* on another thread, which calls the driver's wait itself: that thread's own CPU time
  (:func:`time.thread_time_ns`).

A driver that spins while it waits (CUDA's and HIP's default for an event created without the
blocking-sync flag) shows a CPU share near 100 %; one that sleeps, near 0 %. Also reported:
the wake-up latency of a short (0.5 ms) wait on each path, from the release to the return of
``wait()``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from typing import Any

import eventapi
from eventapi import EventFence, SupportsHostFunc


def _gated(api: Any, stream: Any) -> threading.Event:
    """Hold ``stream`` behind a host function until the returned event is set."""
    if not isinstance(api, SupportsHostFunc):
        raise SystemExit(f"{api.BACKEND}: needs stream_launch_host_func to hold a stream")
    gate = threading.Event()
    api.stream_launch_host_func(stream, gate.wait)
    return gate


def one_wait(api: Any, stream: Any, wait_s: float, *, main: bool) -> tuple[int, int, int]:
    """(wall ns, CPU ns, ns from release to return) of one fence wait.

    ``main``: wait on the calling (main) thread and count the process's CPU time; otherwise
    wait on a new thread and count that thread's own.
    """
    if not main:
        out: list[tuple[int, int, int]] = []
        waiter = threading.Thread(target=lambda: out.append(_wait(api, stream, wait_s, False)))
        waiter.start()
        waiter.join()
        return out[0]
    return _wait(api, stream, wait_s, True)


def _wait(api: Any, stream: Any, wait_s: float, process: bool) -> tuple[int, int, int]:
    clock = time.process_time_ns if process else time.thread_time_ns
    gate = _gated(api, stream)
    fence = EventFence.record(api, stream)
    released: list[int] = []

    def release() -> None:
        released.append(time.perf_counter_ns())
        gate.set()

    timer = threading.Timer(wait_s, release)
    try:
        cpu0 = clock()
        wall0 = time.perf_counter_ns()
        timer.start()
        fence.wait()
        wall1 = time.perf_counter_ns()
        cpu1 = clock()
    finally:
        timer.join()
        fence.close()
    return wall1 - wall0, cpu1 - cpu0, wall1 - released[0]


def measure(backend: str, wait_ms: float, trials: int) -> dict[str, Any]:
    api: Any = eventapi.backend(backend)
    stream = api.stream_create_non_blocking()
    try:
        one_wait(api, stream, 0.001, main=True)  # warm-up: threads, symbol resolution
        one_wait(api, stream, 0.001, main=False)
        runs = {
            (main, length): [one_wait(api, stream, length, main=main) for _ in range(trials)]
            for main in (True, False)
            for length in (wait_ms / 1000, 0.0005)
        }
    finally:
        api.stream_destroy(stream)
    result: dict[str, Any] = {"backend": backend, "wait_ms": wait_ms, "trials": trials}
    for main, prefix in ((True, ""), (False, "thread_")):
        long = runs[main, wait_ms / 1000]
        wall = statistics.median(w for w, _, _ in long)
        cpu = statistics.median(c for _, c, _ in long)
        result[f"{prefix}wall_ms"] = wall / 1e6
        result[f"{prefix}cpu_ms"] = cpu / 1e6
        result[f"{prefix}cpu_share"] = cpu / wall
        result[f"{prefix}wake_us"] = statistics.median(r for _, _, r in runs[main, 0.0005]) / 1e3
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("backend", help="host, cuda or hip")
    parser.add_argument("--wait-ms", type=float, default=50.0, help="length of the long wait")
    parser.add_argument("--trials", type=int, default=5, help="waits of each kind (median)")
    parser.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    args = parser.parse_args(argv)
    result = measure(args.backend, args.wait_ms, args.trials)
    for prefix, where in (("", "main thread"), ("thread_", "other thread")):
        print(
            f"{args.backend} ({where}): a {result[prefix + 'wall_ms']:.1f} ms fence wait used "
            f"{result[prefix + 'cpu_ms']:.2f} ms of CPU "
            f"({100 * result[prefix + 'cpu_share']:.1f} % of a core); a short wait woke "
            f"{result[prefix + 'wake_us']:.1f} us after its release"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
