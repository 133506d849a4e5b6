"""Does ``eventapi.bench``'s stated 95 % interval cover the true median 95 % of the time?

Usage: ``python benchmarks/bench_coverage.py [--reps N] [--seed S] [--host-ms MS] [--json FILE]``.

Two parts:

* **Synthetic readings** (the statistics alone, no backend): for each distribution of known
  median and each n from 1 to 1,000, ``--reps`` draws of n integer readings go through the
  very function a result is made with (resolution 0, so that only the order statistics are
  tested); the share of draws whose stated interval ``median_ns ± noise_ns`` holds the true
  median is the coverage. Beside it, the exact coverage of the ranks chosen (binomial, for a
  continuous distribution) and the interval of the old normal-rank rule at the same n.
  Below n = 6 the result must state no interval (``noise_ns is None``) and give the range.
* **A real delay on host**: one long ``eventapi.bench`` of a 50 us spin (``--host-ms`` of
  timed calls, no early stop); its median over all readings stands for the true median; the
  readings, in time order, are cut into consecutive runs of n, each summarized as a result
  of n readings would be (the timer's resolution included), and the share whose interval
  holds the long median is counted. Consecutive readings share the machine's state, so this
  is harder than independent draws: a drift of the load shows as under-coverage.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections.abc import Callable
from typing import Any

import eventapi
from eventapi._bench._result import summarize
from eventapi._bench._stats import median_ranks

NS = (1, 2, 3, 5, 6, 7, 8, 10, 15, 20, 30, 50, 100, 200, 500, 1000)
HOST_NS = (6, 10, 20, 50, 100)


def _normal(rng: random.Random) -> int:
    return round(rng.gauss(100_000, 5_000))


def _lognormal(rng: random.Random) -> int:
    return round(100_000 * rng.lognormvariate(0.0, 0.5))  # heavy right tail


def _exponential(rng: random.Random) -> int:
    return 50_000 + round(rng.expovariate(1 / 20_000))


def _preempted(rng: random.Random) -> int:
    # 85 % steady calls, 15 % that lost the CPU for up to 5 ms: a loaded machine's readings.
    base = rng.gauss(100_000, 1_000)
    return round(base + (rng.uniform(0, 5_000_000) if rng.random() < 0.15 else 0))


def _ticks(rng: random.Random) -> int:
    # A 2.4 us call read by a 1 us timer: readings of 2 or 3 ticks, heavy ties.
    return 1_000 * math.floor(2.4 + rng.random())


def _preempted_median() -> int:
    # Solve F(m) = 1/2 for the mixture, by bisection on its CDF.
    def cdf(x: float) -> float:
        steady = 0.5 * (1 + math.erf((x - 100_000) / (1_000 * math.sqrt(2))))
        stretched = 0.0
        if x > 100_000:
            stretched = min(1.0, (x - 100_000) / 5_000_000)  # the base's spread is negligible
        return 0.85 * steady + 0.15 * stretched

    low, high = 90_000.0, 200_000.0
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if cdf(mid) < 0.5 else (low, mid)
    return round(low)


# Each: a draw, and the true median of the integer readings it makes.
DISTRIBUTIONS: dict[str, tuple[Callable[[random.Random], int], int]] = {
    "normal": (_normal, 100_000),
    "lognormal": (_lognormal, 100_000),
    "exponential": (_exponential, 50_000 + round(20_000 * math.log(2))),
    "preempted": (_preempted, _preempted_median()),
    "2-3 ticks": (_ticks, 2_000),  # P(3 ticks) = 0.4 < 1/2: the median is 2 ticks
}


def _exact(n: int) -> float | None:
    ranks = median_ranks(n)
    if ranks is None:
        return None
    below: float = sum(math.comb(n, j) for j in range(ranks[0])) / 2**n
    return 1.0 - 2.0 * below


def _old_rule_covers(ordered: tuple[int, ...], truth: int) -> bool:
    """The rule bench used before: ranks n/2 -+ 1.96 sqrt(n)/2, nearest-rank median."""
    n = len(ordered)
    median = ordered[max(1, math.ceil(n / 2)) - 1]
    half = 1.959964 * math.sqrt(n) / 2
    low = ordered[max(0, math.floor(n / 2 - half) - 1)]
    high = ordered[min(n - 1, math.ceil(n / 2 + half))]
    noise = max(median - low, high - median)
    return median - noise <= truth <= median + noise


def synthetic(reps: int, seed: int) -> list[dict[str, Any]]:
    rows = []
    for name, (draw, truth) in DISTRIBUTIONS.items():
        rng = random.Random(f"{seed}:{name}")
        for n in NS:
            covered = old = flagged = 0
            for _ in range(reps):
                readings = [draw(rng) for _ in range(n)]
                ordered, median, noise, _ = summarize(readings, 0)
                old += _old_rule_covers(ordered, truth)
                if noise is None:
                    flagged += 1
                elif median - noise <= truth <= median + noise:
                    covered += 1
            rows.append(
                {
                    "distribution": name,
                    "n": n,
                    "coverage": covered / reps,
                    "flagged": flagged / reps,
                    "exact": _exact(n),
                    "old_rule": old / reps,
                }
            )
    return rows


def on_host(host_ms: float) -> list[dict[str, Any]]:
    from eventapi.host import HostBackend

    api = HostBackend()

    def spin() -> None:
        deadline = time.perf_counter_ns() + 50_000
        while time.perf_counter_ns() < deadline:
            pass

    def fn(stream: Any) -> None:
        api.stream_launch_host_func(stream, spin)

    result = eventapi.bench(fn, api=api, rep_ms=host_ms, noise_target=0)
    readings = list(result.readings_ns)
    truth = result.median_ns
    rows = []
    for n in HOST_NS:
        chunks = [readings[i : i + n] for i in range(0, len(readings) - n + 1, n)]
        covered = 0
        for chunk in chunks:
            _, median, noise, _ = summarize(chunk, result.resolution_ns)
            assert noise is not None
            covered += median - noise <= truth <= median + noise
        rows.append(
            {"n": n, "runs": len(chunks), "coverage": covered / len(chunks), "median_ns": truth}
        )
    small = summarize(readings[:5], result.resolution_ns)
    assert small[2] is None  # five readings: no interval stated
    api_stats = {"readings": len(readings), "median_ns": truth, "noise_ns": result.noise_ns}
    print(f"host: {api_stats}", file=sys.stderr, flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--host-ms", type=float, default=3000.0)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    began = time.perf_counter()
    rows = synthetic(args.reps, args.seed)
    print(f"synthetic, {args.reps} draws each (coverage of median ± noise_ns; '-': flagged)")
    print(f"{'n':>5}  " + "  ".join(f"{name:>11}" for name in DISTRIBUTIONS) + "  exact  old rule")
    for n in NS:
        cells = [r for r in rows if r["n"] == n]
        text = ["-".rjust(11) if r["flagged"] == 1.0 else f"{r['coverage']:>11.1%}" for r in cells]
        exact = cells[0]["exact"]
        worst_old = min(r["old_rule"] for r in cells)
        exact_text = "  -  " if exact is None else f"{exact:.1%}"
        print(f"{n:>5}  " + "  ".join(text) + f"  {exact_text}  {worst_old:.1%}")
    ok = all(
        (r["flagged"] == 1.0) if r["n"] < 6 else (r["flagged"] == 0 and r["coverage"] >= 0.95)
        for r in rows
    )
    host = on_host(args.host_ms)
    print("\nhost, a 50 us spin: consecutive runs of n readings against the long run's median")
    for r in host:
        print(f"{r['n']:>5}  {r['coverage']:.1%} of {r['runs']} runs")
    print(f"\n{time.perf_counter() - began:.1f} s; synthetic >= 95 % and flagged below 6: {ok}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"synthetic": rows, "host": host}, f, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
