"""Timing PyTorch work on its own CUDA stream.

The ``cuda`` backend accepts any object with ``__cuda_stream__`` (and raw handles), so a
profiler times work on the stream PyTorch launches it on, and never destroys that stream.
:func:`time_matmul` is the part to copy: it takes the stream and the work, so it runs on any
stream the backend accepts (the test suite runs it on a cuda.core stream over the emulated
driver, with a host function as the work).

Run on an NVIDIA GPU: ``python examples/torch_stream.py``.
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
        import torch
    except ImportError:
        print("skipped: torch is not installed")
        return SKIP
    if not torch.cuda.is_available():
        print(f"skipped: torch {torch.__version__} sees no CUDA device (torch.cuda unavailable)")
        return SKIP
    api = eventapi.backend("cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):  # the matrix and the products, all on `stream`
        a = torch.randn(2048, 2048, device="cuda")
        stats = time_matmul(api, stream, lambda: a @ a)
    print(f"cuda: torch matmul 2048x2048 median {stats.median_ns / 1e3:.1f} us over {stats.count}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
