"""Timing CuPy work on its own stream.

CuPy streams carry ``__cuda_stream__``, so the ``cuda`` backend times work on them directly.
:func:`time_matmul` is the part to copy: it takes the stream and the work, so it runs on any
stream the backend accepts (the test suite runs it on a cuda.core stream over the emulated
driver, with a host function as the work).

Run on an NVIDIA GPU: ``python examples/cupy_stream.py``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import eventapi

SKIP = 77  # the exit status that tells a test runner "skipped", as automake's does
REPEATS = 5


def time_matmul(
    api: eventapi.EventApi[Any, Any],
    stream: object,
    work: Callable[[], object],
    *,
    repeats: int = REPEATS,
) -> eventapi.Stats:
    """Run ``work`` (which enqueues onto ``stream``) ``repeats`` times, each in a window.

    Returns the windows' statistics. The profiler reads the windows back when it closes, so
    the summary is read after the ``with``; the stream stays the caller's.
    """
    with eventapi.EventProfiler(api, stream) as prof:
        for _ in range(repeats):
            with prof.window("matmul"):
                work()
    return prof.summary()["matmul"]


def main() -> int:
    try:
        import cupy
    except ImportError:
        print("skipped: cupy is not installed")
        return SKIP
    try:
        devices = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        print(f"skipped: cupy sees no CUDA device ({exc})")
        return SKIP
    if devices == 0:
        print("skipped: cupy sees no CUDA device")
        return SKIP
    api = eventapi.backend("cuda")
    stream = cupy.cuda.Stream(non_blocking=True)
    # The matrix is made on `stream` too: a non-blocking stream does not wait for the default
    # stream, so a matrix made there could still be being written when the products read it.
    with stream:
        a = cupy.random.random((2048, 2048), dtype=cupy.float32)
        stats = time_matmul(api, stream, lambda: a @ a)
    print(f"cuda: cupy matmul 2048x2048 median {stats.median_ns / 1e3:.1f} us over {stats.count}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
