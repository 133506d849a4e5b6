"""How the way a fence is waited for changes its cost on the emulated drivers, idle and loaded.

Usage: ``python benchmarks/wait_styles.py BACKEND [--load N] [--n N] [--reps R]`` with BACKEND
``cuda`` or ``hip`` and its emulated driver preloaded
(``LD_PRELOAD=$PWD/build/emulated/libamdhip64.so``).

The same raw fence as ``fence_window.py`` (capture check, create, record, wait, destroy, with
the binding's calls and a default event), waited for three ways, interleaved:

* ``synchronize``: the driver's own wait, which the emulated driver spins for a default event,
  yielding the core between looks as each driver's default does (HIP; CUDA only when contexts
  outnumber processors; ``EMU_SPIN_YIELD=1`` or ``0`` forces it either way);
* ``query + select``: a query loop that lets go of the GIL without giving the core away, as
  eventapi's fence spins (``eventapi._gil``);
* ``query + sched_yield``: a query loop that hands the core to any runnable thread.

On an emulated driver the device is a worker thread of this process: a waiter that yields its
core hands it to that thread, which a real device does not need. Beside ``--load N`` spinning
processes that difference is what separates eventapi's fence from the raw one
(``docs/benchmarks.md``).
"""

from __future__ import annotations

import argparse
import os
import select
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from fence_window import ok, raw_calls
from run import busy


def _query(backend: str) -> Callable[[Any], bool]:
    """True once the device reached the event; raises on a failure other than not-ready."""
    call: Callable[[Any], Any]
    if backend == "cuda":
        from cuda.bindings import driver as cu

        call, not_ready = cu.cuEventQuery, cu.CUresult.CUDA_ERROR_NOT_READY
    else:
        from hip import hip

        binding: Any = hip
        call, not_ready = binding.hipEventQuery, binding.hipError_t.hipErrorNotReady

    def query(event: Any) -> bool:
        status = call(event)[0]
        if status and status != not_ready:
            raise RuntimeError(f"{backend} event query failed: {status!r}")
        return not status

    return query


def measure(backend: str, n: int, reps: int) -> dict[str, float]:
    """Median microseconds per fence for each way to wait."""
    raw = raw_calls(backend)
    if raw is None:
        raise SystemExit(f"{backend}: no raw binding to time (cuda or hip)")
    query = _query(backend)
    if backend == "cuda":
        from cuda.bindings import driver as cu

        ok(cu.cuInit(0))
        context = ok(cu.cuDevicePrimaryCtxRetain(ok(cu.cuDeviceGet(0))))
        ok(cu.cuCtxSetCurrent(context))
        stream = ok(cu.cuStreamCreate(1))
    else:
        from hip import hip

        binding: Any = hip
        stream = ok(binding.hipStreamCreateWithFlags(1))

    def spin_select(event: Any) -> None:
        while not query(event):
            select.select((), (), (), 0)

    def spin_yield(event: Any) -> None:
        while not query(event):
            os.sched_yield()

    waits: dict[str, Callable[[Any], None]] = {
        "synchronize": lambda event: ok(raw.synchronize(event)),
        "query + select": spin_select,
        "query + sched_yield": spin_yield,
    }

    def fences(wait: Callable[[Any], None]) -> float:
        begin = time.perf_counter_ns()
        for _ in range(n):
            if int(ok(raw.is_capturing(stream))):
                raise RuntimeError("the benchmark's stream is capturing a graph")
            event = ok(raw.create())
            ok(raw.record(event, stream))
            wait(event)
            ok(raw.destroy(event))
        return (time.perf_counter_ns() - begin) / n / 1000

    samples: dict[str, list[float]] = {name: [] for name in waits}
    for wait in waits.values():  # warm-up
        fences(wait)
    for _ in range(reps):
        for name, wait in waits.items():
            samples[name].append(fences(wait))
    return {name: statistics.median(values) for name, values in samples.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("backend", choices=("cuda", "hip"))
    parser.add_argument("--load", type=int, default=0, help="busy processes beside the run")
    parser.add_argument("--n", type=int, default=500, help="fences per timed run")
    parser.add_argument("--reps", type=int, default=7, help="interleaved repetitions")
    args = parser.parse_args(argv)
    with busy(args.load):
        medians = measure(args.backend, args.n, args.reps)
    print(f"{args.backend}, {args.load} busy processes: median us per fence")
    for name, value in medians.items():
        print(f"  {name:20s} {value:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
