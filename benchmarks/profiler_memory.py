"""Memory of one long-running profiler: it must stay flat however many windows it reads.

Usage: ``python benchmarks/profiler_memory.py [--windows N] [--batch B] [--names K]
[--no-tracemalloc]``

Opens ``N`` windows (default 1,000,000) through one ``host`` profiler, collecting every ``B``
(default 1000), the names cycling through ``K`` (default 4). At every tenth of the run it
prints the Python heap that tracemalloc traces (current and peak since the start) and the
process's resident set size, so a summary, a retention buffer or a pool that grew with the
windows would show as a rising column. Without tracemalloc (``--no-tracemalloc``) the run is
about twice as fast and only RSS is shown.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import eventapi
from eventapi import EventProfiler


def rss_kib() -> int:
    """The process's resident set size now, from /proc (Linux)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--names", type=int, default=4)
    parser.add_argument("--no-tracemalloc", action="store_true")
    args = parser.parse_args()
    trace = not args.no_tracemalloc
    names = [f"step{k}" for k in range(args.names)]
    api = eventapi.backend("host")
    if trace:
        tracemalloc.start()
    began = time.perf_counter()
    print("| windows | traced now (KiB) | traced peak (KiB) | RSS (KiB) |")
    print("|---:|---:|---:|---:|")
    with EventProfiler(api) as prof:
        done = 0
        report_every = max(args.windows // 10, args.batch)
        while done < args.windows:
            for i in range(args.batch):
                with prof.window(names[i % len(names)]):
                    pass
            prof.collect()
            done += args.batch
            if done % report_every == 0 or done >= args.windows:
                now, peak = tracemalloc.get_traced_memory() if trace else (0, 0)
                print(f"| {done:,} | {now // 1024:,} | {peak // 1024:,} | {rss_kib():,} |")
        stats = prof.summary()
        print(
            f"\n{done:,} windows in {time.perf_counter() - began:.0f} s; "
            f"{stats[names[0]].count:,} spans of {names[0]!r}, rank error "
            f"{stats[names[0]].rank_error:,}; {len(prof.spans):,} spans retained, "
            f"{prof.dropped_spans:,} dropped"
        )


if __name__ == "__main__":
    main()
