"""Timing CuPy work on its own stream.

CuPy streams carry ``__cuda_stream__``, so the ``cuda`` backend times work on them directly.

Run on an NVIDIA GPU: ``python examples/cupy_stream.py``.
"""

from __future__ import annotations

import sys

import eventapi

SKIP = 77  # the exit status that tells a test runner "skipped", as automake's does


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
    a = cupy.random.random((2048, 2048), dtype=cupy.float32)
    with stream, eventapi.EventProfiler(api, stream) as prof:
        for _ in range(5):
            with prof.window("matmul"):
                a @ a
        stats = prof.summary()["matmul"]
    print(f"cuda: cupy matmul 2048x2048 median {stats.median_ns / 1e3:.1f} us over {stats.count}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
