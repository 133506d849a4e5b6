"""A soak: fences and profiling windows from many threads for a fixed time, watched for growth.

Usage: ``python benchmarks/soak.py BACKEND [--seconds S] [--threads N] [--json F]``
(``make soak`` runs it on ``host`` and on ``cuda`` over the emulated driver, ``SOAK_SECONDS``
each).

Each of ``--threads`` threads (8) loops until the time is up, on a stream of its own:

* records a fence, hands it to whichever thread comes next through a shared queue, and takes
  one recorded by another thread, which it makes its stream wait on (``wait_on``), then waits
  for (alternately untimed, with a timeout, and by polling ``reached()`` where the backend has
  ``event_query``) and closes;
* opens a window with another nested in it on a profiler that lives as long as the thread (the
  shape of a training job's step), and collects every 64 windows;
* every 256 rounds, creates and destroys a stream and a short-lived profiler.

The main thread samples, 30 times over the run: Python's traced memory
(:mod:`tracemalloc`), the process's resident set (RSS, from ``/proc/self/statm``), the backend's
live handles (``live_handles()``, where it counts them) and, under an emulated driver, the
driver's own. It prints one line per sample and a summary, and exits 1 when:

* traced memory grew by more than ``MAX_TRACED_GROWTH`` from the median of the samples after
  warm-up (the second fifth of the run) to the median of the last fifth; traced memory is what
  Python objects hold, so it measures a leak in eventapi or the binding, not the allocator;
* RSS grew steadily: by more than ``MAX_RSS_STEP`` from the second fifth to the third *and*
  from the fourth to the last. RSS also moves with the allocator's arenas and its cache of
  thread stacks, which step up once and then stay (seen: +67 MiB at one sample of a ten-minute
  host soak, flat for the rest, with traced memory flat throughout); a leak grows in both
  halves, a step in one;
* live handles in flight grew the same way by more than the threads can hold at once, or are
  not back where they started once every thread closed what it made;
* any thread raised.

Figures from a run are in ``docs/conformance.md``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import queue
import statistics
import sys
import threading
import time
import tracemalloc
from dataclasses import asdict, dataclass
from typing import Any, Final

import eventapi
from eventapi import EventFence, EventProfiler, SupportsEventQuery

MAX_TRACED_GROWTH: Final = 1 << 20  # 1 MiB
MAX_RSS_STEP: Final = 8 << 20  # 8 MiB per fifth of the run, in both halves
COLLECT_EVERY: Final = 64  # windows between two collects of a thread's long-lived profiler
CHURN_EVERY: Final = 256  # rounds between a stream's and a short profiler's create + destroy
HANDOFF_DEPTH: Final = 16  # fences waiting in the shared queue at most
# The spans each long-lived profiler retains (its max_spans). The default, 10,000 a thread, takes
# about 25 s of this loop to fill, and traced memory rises until it is full: a soak shorter than
# a few minutes would read the fill as a leak. A thousand fill within the first seconds, so the
# growth measured after the warm-up is what a leak adds, and the bound is crossed all along.
RETAINED_SPANS: Final = 1_000
WAIT_TIMEOUT_S: Final = 10.0  # a timed wait that expires is a hang here, not load

GROWTH_SITES: Final = 5  # source lines shown when traced memory grew

_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Sample:
    """One reading of the process, ``t_s`` seconds into the run."""

    t_s: float
    fences: int
    windows: int
    traced_bytes: int
    rss_bytes: int
    live: tuple[int, int] | None  # the backend's (events, streams)
    driver: tuple[int, int] | None  # the emulated driver's (events, streams)


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE


def emulated_counters() -> tuple[Any, Any] | None:
    """The preloaded emulated driver's live-count functions, or None without one."""
    process = ctypes.CDLL(None)
    try:
        events, streams = process.emu_live_events, process.emu_live_streams
    except AttributeError:
        return None
    events.restype = streams.restype = ctypes.c_long
    return events, streams


_EMULATED = emulated_counters()


def emulated_counts() -> tuple[int, int] | None:
    """The preloaded emulated driver's live (events, streams), or None without one."""
    if _EMULATED is None:
        return None
    events, streams = _EMULATED
    return int(events()), int(streams())


def live_counts(api: Any) -> tuple[int, int] | None:
    method = getattr(api, "live_handles", None)
    if method is None:
        return None
    events, streams = method()
    return int(events), int(streams)


class Soak:
    """The threads' shared state: the deadline, counters, the hand-off queue, errors."""

    def __init__(self, api: Any, deadline: float) -> None:
        self.api = api
        self.deadline = deadline
        self.query = isinstance(api, SupportsEventQuery)
        self.handoff: queue.Queue[EventFence[Any, Any]] = queue.Queue(HANDOFF_DEPTH)
        self.lock = threading.Lock()
        self.fences = 0
        self.windows = 0
        self.errors: list[BaseException] = []

    def worker(self, index: int) -> None:
        try:
            self._loop(index)
        except BaseException as exc:  # reported by the main thread
            with self.lock:
                self.errors.append(exc)

    def _loop(self, index: int) -> None:
        api = self.api
        stream = api.stream_create_non_blocking()
        profiler: EventProfiler[Any, Any] = EventProfiler(
            api, label=f"soak-{index}", max_spans=RETAINED_SPANS
        )
        try:
            rounds = 0
            while time.monotonic() < self.deadline and not self.errors:
                rounds += 1
                self._fence_round(stream, rounds)
                with profiler.window("step"), profiler.window("inner"):
                    pass
                if rounds % COLLECT_EVERY == 0:
                    profiler.collect()
                if rounds % CHURN_EVERY == 0:
                    api.stream_destroy(api.stream_create_non_blocking())
                    with EventProfiler(api) as short, short.window("short"):
                        pass
                with self.lock:
                    self.fences += 1
                    self.windows += 2
        finally:
            profiler.close()
            api.stream_synchronize(stream)
            api.stream_destroy(stream)

    def _fence_round(self, stream: Any, rounds: int) -> None:
        mine = EventFence.record(self.api, stream)
        try:
            self.handoff.put_nowait(mine)
        except queue.Full:
            mine.wait()
            mine.close()
        try:
            theirs = self.handoff.get_nowait()
        except queue.Empty:
            return
        try:
            theirs.wait_on(stream)  # recorded on another thread's stream
            style = rounds % 3 if self.query else 0
            if style == 0:
                theirs.wait()
            elif style == 1:
                theirs.wait(timeout=WAIT_TIMEOUT_S)
            else:
                while not theirs.reached():
                    time.sleep(0)  # yields the GIL to the thread that will reach it
        finally:
            theirs.close()

    def drain(self) -> None:
        while True:
            try:
                fence = self.handoff.get_nowait()
            except queue.Empty:
                return
            fence.wait()
            fence.close()


def median_of(samples: list[Sample], start: float, end: float, key: str) -> float:
    """The median of ``key`` over the samples between fractions ``start`` and ``end``."""
    chosen = samples[int(len(samples) * start) : max(int(len(samples) * end), 1)]
    values: list[float] = []
    for sample in chosen or samples[-1:]:
        value = getattr(sample, key)
        values.append(float(sum(value)) if isinstance(value, tuple) else float(value))
    return statistics.median(values)


def traced_by_line() -> dict[str, int]:
    """Traced bytes per source line now; the snapshot behind it is dropped at once."""
    stats = tracemalloc.take_snapshot().statistics("lineno")
    return {f"{stat.traceback[0].filename}:{stat.traceback[0].lineno}": stat.size for stat in stats}


def growth(samples: list[Sample], key: str) -> float:
    """From the median after warm-up (the second fifth) to the median of the last fifth."""
    return median_of(samples, 0.8, 1.0, key) - median_of(samples, 0.2, 0.4, key)


@dataclass
class Run:
    """What a soak saw: its samples, and the snapshots that show where memory went."""

    samples: list[Sample]
    # Traced bytes per source line, after warm-up and near the end, threads running. Kept as
    # these small sums, not as snapshots: a snapshot holds a copy of every trace (tens of MiB
    # here, outside what tracemalloc counts), and holding one stepped RSS up by that much.
    warm: dict[str, int] | None = None
    late: dict[str, int] | None = None


def sample_until_done(soak: Soak, threads: list[threading.Thread], seconds: float) -> Run:
    interval = max(seconds / 30, 0.2)
    started = soak.deadline - seconds
    run = Run([])
    print(
        f"{'t_s':>7} {'fences':>10} {'windows':>10} {'traced_MiB':>11} {'rss_MiB':>8} "
        f"{'live':>10} {'driver':>10}"
    )
    while any(thread.is_alive() for thread in threads):
        # A sampling period, not synchronization: the threads stop on their own at the deadline.
        time.sleep(interval)
        traced, _ = tracemalloc.get_traced_memory()
        sample = Sample(
            round(time.monotonic() - started, 2),
            soak.fences,
            soak.windows,
            traced,
            rss_bytes(),
            live_counts(soak.api),
            emulated_counts(),
        )
        run.samples.append(sample)
        if run.warm is None and sample.t_s >= seconds * 0.3:
            run.warm = traced_by_line()
        if run.late is None and sample.t_s >= seconds * 0.9:
            run.late = traced_by_line()
        print(
            f"{sample.t_s:7.1f} {sample.fences:10d} {sample.windows:10d} "
            f"{traced / 2**20:11.2f} {sample.rss_bytes / 2**20:8.1f} "
            f"{sample.live!s:>10} {sample.driver!s:>10}"
        )
    return run


def judge(
    run: Run,
    threads: int,
    live: tuple[tuple[int, int] | None, tuple[int, int] | None],
    driver: tuple[tuple[int, int] | None, tuple[int, int] | None],
) -> list[str]:
    """What grew, or was left behind, beyond the bounds in the module docstring."""
    problems: list[str] = []
    samples = run.samples
    traced = growth(samples, "traced_bytes")
    rss_first = median_of(samples, 0.4, 0.6, "rss_bytes") - median_of(
        samples, 0.2, 0.4, "rss_bytes"
    )
    rss_second = median_of(samples, 0.8, 1.0, "rss_bytes") - median_of(
        samples, 0.6, 0.8, "rss_bytes"
    )
    if traced > MAX_TRACED_GROWTH:
        problems.append(f"traced memory grew by {traced / 2**20:.2f} MiB")
        if run.warm is not None and run.late is not None:
            print("soak: where traced memory grew from warm-up to near the end:")
            grown = sorted(
                ((size - run.warm.get(line, 0), line) for line, size in run.late.items()),
                reverse=True,
            )
            for delta, line in grown[:GROWTH_SITES]:
                print(f"  {line}: {delta / 2**10:+.1f} KiB")
    if min(rss_first, rss_second) > MAX_RSS_STEP:
        problems.append(
            f"RSS grew steadily: {rss_first / 2**20:+.1f} MiB and then "
            f"{rss_second / 2**20:+.1f} MiB a fifth of the run"
        )
    if live[0] is not None and samples[0].live is not None:
        # Each thread holds a few fences, its pooled window events and an anchor's at once;
        # what a thread holds is steady, so growth beyond a few handles a thread is a leak.
        in_flight = growth(samples, "live")
        if in_flight > 8 * threads:
            problems.append(f"live handles in flight grew by {in_flight:g}")
        if live[1] != live[0]:
            problems.append(f"live handles were {live[0]} at the start, {live[1]} at the end")
    if driver[0] is not None and driver[1] != driver[0]:
        problems.append(
            f"the emulated driver held {driver[0]} at the start, {driver[1]} at the end"
        )
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("backend", help="a backend name for eventapi.backend(): host, cuda, hip")
    parser.add_argument("--seconds", type=float, default=600.0, help="run time (default 600)")
    parser.add_argument("--threads", type=int, default=8, help="worker threads (default 8)")
    parser.add_argument("--json", metavar="FILE", help="also write the samples and verdict")
    args = parser.parse_args(argv)

    api: Any = eventapi.backend(args.backend)
    tracemalloc.start()
    start_live, start_driver = live_counts(api), emulated_counts()
    soak = Soak(api, time.monotonic() + args.seconds)
    threads = [
        threading.Thread(target=soak.worker, args=(i,), name=f"soak-{i}", daemon=True)
        for i in range(args.threads)
    ]
    for thread in threads:
        thread.start()
    print(f"soak: {args.backend}, {args.threads} threads, {args.seconds:g} s")
    run = sample_until_done(soak, threads, args.seconds)
    for thread in threads:
        thread.join()
    soak.drain()
    end_live, end_driver = live_counts(api), emulated_counts()
    # cuda and hip keep up to 16 driver events of closed fences for the next fences, a bounded
    # number the samples see as flat; they are the object's, not a leak.
    if end_driver is not None and hasattr(api, "_live_counts"):
        end_driver = (end_driver[0] - api._live_counts()[2], end_driver[1])
    elapsed = time.monotonic() - (soak.deadline - args.seconds)

    problems = [f"a thread raised {exc!r}" for exc in soak.errors]
    problems += judge(run, args.threads, (start_live, end_live), (start_driver, end_driver))
    print(
        f"soak: {soak.fences} fences and {soak.windows} windows in {elapsed:.1f} s "
        f"({soak.fences / elapsed:.0f} fences/s, {soak.windows / elapsed:.0f} windows/s); "
        f"growth from warm-up to the end: traced "
        f"{growth(run.samples, 'traced_bytes') / 2**20:+.2f} MiB, "
        f"RSS {growth(run.samples, 'rss_bytes') / 2**20:+.1f} MiB; "
        f"live handles {start_live} -> {end_live}, driver {start_driver} -> {end_driver}"
    )
    print("soak: FAIL: " + "; ".join(problems) if problems else "soak: PASS")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(
                {
                    "backend": args.backend,
                    "threads": args.threads,
                    "seconds": elapsed,
                    "samples": [asdict(sample) for sample in run.samples],
                    "problems": problems,
                },
                out,
                indent=1,
            )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
