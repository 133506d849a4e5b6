"""Profile nested windows on two streams and write a trace Perfetto opens.

    python examples/trace_windows.py [OUT.json]

On the backend ``eventapi.backend()`` selects (set ``EVENTAPI_BACKEND`` to choose); OUT
defaults to ``trace.json``. Each
profiler writes its spans as they are collected through a TraceWriter (the complete run, in
bounded memory); open OUT at ui.perfetto.dev or chrome://tracing, or run
``eventapi trace report OUT -o report.html``.
"""

from __future__ import annotations

import sys

import eventapi
from eventapi.trace import TraceWriter


def main(argv: list[str]) -> None:
    api = eventapi.backend()
    out = argv[0] if argv else "trace.json"
    with (
        TraceWriter(out) as trace,
        eventapi.EventProfiler(api, label="compute", sink=trace.sink(api)) as compute,
        eventapi.EventProfiler(api, label="copy", sink=trace.sink(api)) as copy,
    ):
        for _ in range(3):
            with compute.window("step"):
                with compute.window("forward"):
                    pass  # launch work on compute.stream here
                with compute.window("backward"):
                    pass
            with copy.window("upload"):
                pass  # and copies on copy.stream
        compute.collect()
        copy.collect()
    print(f"{api.BACKEND}: wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
