"""Timing PyTorch work on its own CUDA stream.

The ``cuda`` backend accepts any object with ``__cuda_stream__`` (and raw handles), so a
profiler times work on the stream PyTorch launches it on, and never destroys that stream.

Run on an NVIDIA GPU: ``python examples/torch_stream.py``.
"""

from __future__ import annotations

import sys

import eventapi

SKIP = 77  # the exit status that tells a test runner "skipped", as automake's does


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
    a = torch.randn(2048, 2048, device="cuda")
    with torch.cuda.stream(stream), eventapi.EventProfiler(api, stream) as prof:
        for _ in range(5):
            with prof.window("matmul"):
                a @ a
        stats = prof.summary()["matmul"]
    print(f"cuda: torch matmul 2048x2048 median {stats.median_ns / 1e3:.1f} us over {stats.count}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
