"""Measurements that need a real NVIDIA GPU (they also run on the emulated driver).

Usage: ``python benchmarks/gpu/measure.py [--backend cuda] [--out DIR] [--trials N]``

1. The anchor: the profiler places device events on the host clock with a stated
   uncertainty. Its *true* error is measured against a host function enqueued right before a
   window opens: the function reads ``time.perf_counter_ns()`` when the stream reaches it, and
   the window's start event is the next thing the stream does. The difference
   ``span.start_ns - stamp`` is the placement error plus the time the host function takes to
   return (a few microseconds), so it bounds the error from above; the line reports it beside
   the anchor's own ``uncertainty_ns``.
2. Overheads per fence (create, record, wait, close) and per profiling window (open+close,
   read back in batches of ``--batch``) through eventapi, through the raw binding
   (``cuda.bindings.driver``), and through the events of cuda.core, PyTorch and CuPy where they
   import (``torch.cuda.Event``, ``cupy.cuda.Event``); a framework that does not import, or
   finds no GPU, is reported as a skipped line. Every variant does the same work: a fence is a
   timing-enabled event (eventapi's always time), a window re-records pooled events and reads
   them back with the anchor's samples (see :class:`Peer`). eventapi, the raw binding and
   cuda.core are timed interleaved in one run (``fence_window.py``); PyTorch and CuPy after
   it, each interleaving its fence and window.

Prints one line per measurement and writes ``measure.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import eventapi
from eventapi import EventProfiler
from eventapi._profiling._anchor import ANCHOR_SAMPLES

# The sibling benchmark supplies the eventapi and raw-binding loops, so both scripts time the
# same code; benchmarks/ is not a package, hence the import by path.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
fence_window: Any = importlib.import_module("fence_window")

Result = dict[str, Any]


def _stamp(into: list[int]) -> None:
    into.append(time.perf_counter_ns())


def anchor_error(backend: str, trials: int) -> Result:
    """The anchor's stated uncertainty and its error against a host function's own stamp."""
    api: Any = eventapi.backend(backend)
    profiler: EventProfiler[Any, Any] = EventProfiler(api)
    errors: list[int] = []
    uncertainties: list[int] = []
    try:
        for _ in range(trials):
            stamps: list[int] = []
            gate = threading.Event()
            # Hold the stream so the host function and the window's start run back to back on
            # the device side, not as the host happens to enqueue them.
            api.stream_launch_host_func(profiler.stream, partial(gate.wait, 5.0))
            api.stream_launch_host_func(profiler.stream, partial(_stamp, stamps))
            with profiler.window("probe"):
                pass
            gate.set()
            (span,) = profiler.collect()
            errors.append(span.start_ns - stamps[0])
            uncertainties.append(profiler.anchor.uncertainty_ns)
    finally:
        profiler.close()
    return {
        "trials": trials,
        "uncertainty_ns_median": statistics.median(uncertainties),
        "uncertainty_ns_max": max(uncertainties),
        "error_ns_median": statistics.median(errors),
        "error_ns_min": min(errors),
        "error_ns_max": max(errors),
    }


def _time(run: Callable[[], None], n: int, reps: int) -> float:
    samples = []
    for _ in range(reps):
        begin = time.perf_counter_ns()
        run()
        samples.append((time.perf_counter_ns() - begin) / n)
    return statistics.median(samples)


@dataclass(frozen=True)
class Peer:
    """One framework's event calls on a stream of its own, in its own idiom.

    The loops below do with them exactly what eventapi's fence and window do (and what
    ``fence_window.py`` does with the raw binding and cuda.core): a fence is a new
    timing-enabled event, recorded, waited for and released, since eventapi's events always
    time; a window re-records two pooled timing events, and every ``batch`` windows one wait
    for the last, the same ``ANCHOR_SAMPLES`` bracketed record-and-wait samples as eventapi's
    anchor, and two elapsed readings per window.
    """

    fence_once: Callable[[], None]
    create: Callable[[], Any]
    record: Callable[[Any], None]
    sync: Callable[[Any], None]
    elapsed: Callable[[Any, Any], object]
    release: Callable[[Any], None]
    close: Callable[[], None]


def _fence_loop(peer: Peer, n: int) -> None:
    for _ in range(n):
        peer.fence_once()


def _window_loop(peer: Peer, pool: list[Any], n: int, batch: int) -> None:
    pending: list[tuple[Any, Any]] = []
    for i in range(n):
        start, end = pool.pop(), pool.pop()
        peer.record(start)
        peer.record(end)
        pending.append((start, end))
        if (i + 1) % batch == 0 or i == n - 1:
            peer.sync(pending[-1][1])
            samples = [pool.pop() for _ in range(ANCHOR_SAMPLES)]
            best: tuple[int, Any] | None = None
            for sample in samples:
                before = time.perf_counter_ns()
                peer.record(sample)
                peer.sync(sample)
                bracket = time.perf_counter_ns() - before
                if best is None or bracket < best[0]:
                    best = (bracket, sample)
            assert best is not None
            for first, last in pending:
                peer.elapsed(first, best[1])
                peer.elapsed(first, last)
                pool.extend((first, last))
            pool.extend(samples)
            pending.clear()


def peer_costs(peer: Peer, n: int, reps: int, batch: int) -> Result:
    """Median ns per fence and per window for ``peer``, interleaved rep by rep."""
    pool = [peer.create() for _ in range(2 * batch + ANCHOR_SAMPLES)]
    try:
        for event in pool:  # the first record of an event may allocate: keep it out
            peer.record(event)
            peer.sync(event)
        fence: list[float] = []
        window: list[float] = []
        for _ in range(reps):
            fence.append(_time(partial(_fence_loop, peer, n), n, 1))
            window.append(_time(partial(_window_loop, peer, pool, n, batch), n, 1))
        return {"fence_ns": statistics.median(fence), "window_ns": statistics.median(window)}
    finally:
        for event in pool:
            peer.release(event)
        peer.close()


def torch_peer() -> Peer:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("torch.cuda.is_available() is False")
    stream = torch.cuda.Stream()

    def fence_once() -> None:
        event = torch.cuda.Event(enable_timing=True)
        event.record(stream)
        event.synchronize()
        del event  # torch destroys the CUDA event when the object goes

    return Peer(
        fence_once=fence_once,
        create=partial(torch.cuda.Event, enable_timing=True),
        record=lambda event: event.record(stream),
        sync=lambda event: event.synchronize(),
        elapsed=lambda start, end: start.elapsed_time(end),
        release=lambda event: None,
        close=lambda: None,
    )


def cupy_peer() -> Peer:
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)

    def fence_once() -> None:
        event = cupy.cuda.Event()  # timing enabled by default
        event.record(stream)
        event.synchronize()
        del event  # CuPy destroys the CUDA event when the object goes

    return Peer(
        fence_once=fence_once,
        create=cupy.cuda.Event,
        record=lambda event: event.record(stream),
        sync=lambda event: event.synchronize(),
        elapsed=cupy.cuda.get_elapsed_time,
        release=lambda event: None,
        close=lambda: None,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="GPU measurements for eventapi")
    parser.add_argument("--backend", default="cuda")
    parser.add_argument("--out", default=".", help="directory for measure.json")
    parser.add_argument("--trials", type=int, default=50, help="anchor trials")
    parser.add_argument("--n", type=int, default=300, help="operations per timed run")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=100, help="windows per collect")
    args = parser.parse_args(argv)
    results: Result = {"backend": args.backend}

    results["anchor"] = anchor = anchor_error(args.backend, args.trials)
    print(
        f"anchor: uncertainty median {anchor['uncertainty_ns_median'] / 1000:.1f} us "
        f"(max {anchor['uncertainty_ns_max'] / 1000:.1f}); error against the host function's "
        f"stamp median {anchor['error_ns_median'] / 1000:.1f} us "
        f"(min {anchor['error_ns_min'] / 1000:.1f}, max {anchor['error_ns_max'] / 1000:.1f})"
    )

    # eventapi, the raw binding and cuda.core (which fence_window.py times beside them when it
    # imports), interleaved in one run.
    ours = fence_window.measure(args.backend, args.n, args.reps, args.batch)["median_ns"]
    for name, variant in (("eventapi", "eventapi"), ("raw", "raw"), ("cuda.core", "cuda.core")):
        if f"fence/{variant}" in ours:
            results[name] = {
                "fence_ns": ours[f"fence/{variant}"],
                "window_ns": ours[f"window/{variant}"],
            }
    if "cuda.core" not in results:
        results["cuda.core"] = {"skipped": "cuda.core does not import, or the backend is not cuda"}
    frameworks: dict[str, Callable[[], Peer]] = {"torch": torch_peer, "cupy": cupy_peer}
    for name, make in frameworks.items():
        try:
            results[name] = peer_costs(make(), args.n, args.reps, args.batch)
        except Exception as exc:  # optional: one missing framework must not stop the rest
            results[name] = {"skipped": f"{type(exc).__name__}: {exc}"}
    for name in ("eventapi", "raw", "cuda.core", *frameworks):
        row = results.get(name)
        if row is None:
            continue
        if "skipped" in row:
            print(f"{name}: skipped ({row['skipped']})")
        else:
            print(
                f"{name}: {row['fence_ns'] / 1000:.2f} us per fence, "
                f"{row['window_ns'] / 1000:.2f} us per window"
            )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "measure.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
