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
   read back in batches) through eventapi, through the raw binding (``cuda.bindings.driver``),
   and through the events of PyTorch, CuPy and cuda.core where they import; a framework that
   does not import is reported as a skipped line.

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
from functools import partial
from pathlib import Path
from typing import Any

import eventapi
from eventapi import EventProfiler

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


def torch_costs(n: int, reps: int) -> Result:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("torch.cuda.is_available() is False")
    stream = torch.cuda.Stream()

    def fence() -> None:
        for _ in range(n):
            event = torch.cuda.Event()
            event.record(stream)
            event.synchronize()

    def window() -> None:
        pairs = []
        for _ in range(n):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
            end.record(stream)
            pairs.append((start, end))
        pairs[-1][1].synchronize()
        for start, end in pairs:
            start.elapsed_time(end)

    return {"fence_ns": _time(fence, n, reps), "window_ns": _time(window, n, reps)}


def cupy_costs(n: int, reps: int) -> Result:
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)

    def fence() -> None:
        for _ in range(n):
            event = cupy.cuda.Event(disable_timing=True)
            event.record(stream)
            event.synchronize()

    def window() -> None:
        pairs = []
        for _ in range(n):
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record(stream)
            end.record(stream)
            pairs.append((start, end))
        pairs[-1][1].synchronize()
        for start, end in pairs:
            cupy.cuda.get_elapsed_time(start, end)

    return {"fence_ns": _time(fence, n, reps), "window_ns": _time(window, n, reps)}


def cuda_core_costs(n: int, reps: int) -> Result:
    try:
        from cuda.core import Device, EventOptions
    except ImportError:  # cuda-core releases before 0.4 keep them in cuda.core.experimental
        from cuda.core.experimental import Device, EventOptions  # type: ignore[no-redef,unused-ignore]

    device = Device()
    device.set_current()
    stream = device.create_stream()
    timing = EventOptions(enable_timing=True)

    def fence() -> None:
        for _ in range(n):
            event = stream.record()
            event.sync()
            event.close()

    def window() -> None:
        pairs = []
        for _ in range(n):
            pairs.append((stream.record(options=timing), stream.record(options=timing)))
        pairs[-1][1].sync()
        for start, end in pairs:
            _ = end - start
            start.close()
            end.close()

    try:
        return {"fence_ns": _time(fence, n, reps), "window_ns": _time(window, n, reps)}
    finally:
        stream.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="GPU measurements for eventapi")
    parser.add_argument("--backend", default="cuda")
    parser.add_argument("--out", default=".", help="directory for measure.json")
    parser.add_argument("--trials", type=int, default=50, help="anchor trials")
    parser.add_argument("--n", type=int, default=300, help="operations per timed run")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args(argv)
    results: Result = {"backend": args.backend}

    results["anchor"] = anchor = anchor_error(args.backend, args.trials)
    print(
        f"anchor: uncertainty median {anchor['uncertainty_ns_median'] / 1000:.1f} us "
        f"(max {anchor['uncertainty_ns_max'] / 1000:.1f}); error against the host function's "
        f"stamp median {anchor['error_ns_median'] / 1000:.1f} us "
        f"(min {anchor['error_ns_min'] / 1000:.1f}, max {anchor['error_ns_max'] / 1000:.1f})"
    )

    ours = fence_window.measure(args.backend, args.n, args.reps, batch=args.n)["median_ns"]
    results["eventapi"] = {"fence_ns": ours["fence/eventapi"], "window_ns": ours["window/eventapi"]}
    if "fence/raw" in ours:
        results["raw"] = {"fence_ns": ours["fence/raw"], "window_ns": ours["window/raw"]}
    frameworks: dict[str, Callable[[int, int], Result]] = {
        "torch": torch_costs,
        "cupy": cupy_costs,
        "cuda.core": cuda_core_costs,
    }
    for name, costs in frameworks.items():
        try:
            results[name] = costs(args.n, args.reps)
        except Exception as exc:  # optional: one missing framework must not stop the rest
            results[name] = {"skipped": f"{type(exc).__name__}: {exc}"}
    for name in ("eventapi", "raw", *frameworks):
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
