"""Python bytecodes and frames a window and a fence cost, counted rather than timed.

Usage: ``python benchmarks/bytecodes.py BACKEND [--json FILE]`` (``make bench`` runs it on the
emulated ``cuda`` and ``hip`` drivers, with the driver preloaded and ``EMU_INSTANT=1``, and
prints it). On the instant device a fence's event is reached at its first query; on a device
that takes time (the emulated driver's default, a GPU) the wait queries again and spins, and the
fence's count grows with every look, so a count is only comparable on the instant device.

``sys.settrace`` with opcode tracing counts every bytecode executed through the public API,
the caller's own ``with`` statement and every finalizer that runs included, and every Python
frame entered. A count does not move with the machine's speed or load, where a time does.

* **window**: ``with prof.window("w"): pass`` on a warmed profiler (open and stop);
* **collect**: a window's share of a collect of 100 that returns the spans and updates the
  summary (the whole ``collect()``, divided by 100);
* **window in all**: the two added;
* **fence**: ``EventFence.record(api, stream)``, ``wait()`` and ``close()`` on a reached event,
  with the fence dropped (its finalizer runs).

The backend's calls are C on cuda and hip (no Python frame), so what is counted is eventapi's
own Python: the core.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, Final

import eventapi
from eventapi import EventFence, EventProfiler

BATCH: Final = 100

# The budgets the figures are read against (docs/benchmarks.md).
BUDGETS: Final = {"window": 140, "window_frames": 4, "window in all": 320, "fence": 110}


def count(run: Callable[[], object]) -> tuple[int, int]:
    """The bytecodes and the Python frames ``run()`` executes, ``run`` itself included."""
    opcodes = frames = 0

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal opcodes, frames
        if event == "call":
            frames += 1
            frame.f_trace_opcodes = True
            frame.f_trace_lines = False
        elif event == "opcode":
            opcodes += 1
        return trace

    gc.collect()
    sys.settrace(trace)
    try:
        run()
    finally:
        sys.settrace(None)
    # settrace(None) itself is a call of run's caller's frame: not counted, nothing to take off.
    return opcodes, frames


def measure(backend: str) -> dict[str, float]:
    api: Any = eventapi.backend(backend)
    stream = api.stream_create_non_blocking()
    prof = EventProfiler(api, stream)

    def window() -> None:
        with prof.window("w"):
            pass

    def windows() -> None:
        for _ in range(BATCH):
            with prof.window("w"):
                pass

    def collect() -> None:
        prof.collect()

    def fence() -> None:
        EventFence.record(api, stream).wait()  # dropped at once: closed by its finalizer

    def fence_closed() -> None:
        done = EventFence.record(api, stream)
        done.wait()
        done.close()

    # Warm: the pool holds its events, the anchor stream exists, the spares hold a driver event.
    for _ in range(3):
        windows()
        collect()
        fence_closed()
    figures: dict[str, float] = {}
    window_ops, window_frames = count(window)
    # The caller's frame is counted as a frame (its with statement runs in it): subtract it.
    figures["window"], figures["window_frames"] = window_ops, window_frames - 1
    prof.collect()
    windows()
    collect_ops, _ = count(collect)
    figures["collect"] = collect_ops / BATCH
    figures["window in all"] = figures["window"] + figures["collect"]
    fence_ops, fence_frames = count(fence_closed)
    figures["fence"], figures["fence_frames"] = fence_ops, fence_frames - 1
    dropped_ops, _ = count(fence)
    figures["fence dropped"] = dropped_ops
    prof.close()
    api.stream_destroy(stream)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("backend", help="host, cuda or hip (cuda and hip on a driver preloaded)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    figures = measure(args.backend)
    for name, value in figures.items():
        budget = BUDGETS.get(name)
        verdict = (
            "" if budget is None else f"  (budget {budget}: {'ok' if value <= budget else 'OVER'})"
        )
        print(f"{args.backend} {name}: {value:g}{verdict}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
