"""A training loop's steps profiled in windows and written as a Chrome trace.

Each step opens a window with nested ones for its phases; ``collect()`` once per few steps reads
them back in one batch; at the end the profiler writes the spans it holds as a Chrome trace
(open it in https://ui.perfetto.dev or chrome://tracing) and prints per-phase statistics.

Run: ``python examples/training_profile.py [TRACE.json]``.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import eventapi

STEPS = 8


def phase(api: object, stream: object, seconds: float) -> None:
    """Stands for a kernel: a known delay on the stream where the backend can enqueue one."""
    if isinstance(api, eventapi.SupportsHostFunc):
        api.stream_launch_host_func(stream, lambda: time.sleep(seconds))


def main() -> int:
    api = eventapi.backend()
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "train.json"
    with eventapi.EventProfiler(api) as prof:
        for step in range(STEPS):
            with prof.window("step"):
                with prof.window("forward"):
                    phase(api, prof.stream, 0.002)
                with prof.window("backward"):
                    phase(api, prof.stream, 0.004)
            if step % 4 == 3:
                prof.collect()
        prof.collect()
        prof.export_chrome_trace(out)
        for name, stats in sorted(prof.summary().items()):
            print(f"{name:10} n={stats.count} median={stats.median_ns / 1e6:.3f} ms")
    print(f"{api.BACKEND}: trace written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
