"""What ``eventapi.bench`` reports for real kernels, beside the timers kernel authors trust.

Usage: ``python benchmarks/gpu/kernel_bench.py [--out DIR]`` (default ``./gpu-results``)

Kernel authors time a kernel with Triton's ``do_bench`` (a pair of CUDA events around each
call, a 256 MB write before each to empty the L2 cache), its ``do_bench_cudagraph`` (the calls
captured into a CUDA graph through PyTorch and replayed: no launch gaps, a warm cache) or a
loop of ``torch.cuda.Event`` pairs (a warm cache, the launch gaps in the reading). A figure of
``eventapi.bench`` is believed when it stands beside theirs and differs only where the method
does: the cache the call finds, the launches between calls, the clock the device ran at.

So three PyTorch kernels of different kinds, on one eventapi stream of the ``cuda`` backend
that PyTorch sees as a ``torch.cuda.ExternalStream``: an fp16 matmul of 4096x4096 (bound by
compute), an add of 1M floats (launch-bound: it costs the host more to enqueue than the device
to run) and a copy of 256 MiB (bound by memory). Each is timed, in pairs of figures that time
alike, every tool with its defaults (bench's budgets are do_bench's: 25 ms to warm up, 100 ms
of timed calls):

1. cold cache: ``eventapi.bench(fn, api=api, stream=s)`` as it runs by default, the cache
   flushed before each window where the backend can (a write of the L2's size, outside the
   window), beside Triton's ``do_bench``;
2. warm cache: ``eventapi.bench`` with ``cold_cache=False``, beside 100 ``torch.cuda.Event``
   pairs around 100 calls (after 10 untimed ones);
3. graph replay: ``eventapi.bench`` with ``graph=True``, which captures ``fn`` into a graph of
   eventapi's and times each launch of it, beside ``do_bench_cudagraph``. PyTorch's work
   captured through a stream PyTorch did not make may not capture (its allocator does not know
   of the capture): the error is recorded in place of the figure. The graph pair runs last.

``fn(stream)`` is the kernel under ``with torch.cuda.stream(...)`` of the stream it is handed;
Triton and the event loop are given the kernel alone, run under the same stream. eventapi's
readings of a launch-bound call are the host's time per call, so for the add they hold that
stream switch too. Every figure is the median in microseconds per call, with what its tool
says of its noise: eventapi's 95 % interval of the median (``noise_us``, its larger
half-width), and for every tool the 20 % and 80 % quantiles of the readings (do_bench's usual
``quantiles=[0.5, 0.2, 0.8]``; a ``do_bench_cudagraph`` without ``quantiles`` gives its mean).
eventapi's figures carry what bench says of the run: the calls per window, launch-bound, the
clock range and throttling where the clocks are read (nvidia-ml-py installed), its warnings.
Triton, where it does not import, is recorded as not installed; one figure's failure is
recorded and the others still run.

Prints one line per figure and writes ``kernel_bench.json`` under ``--out``. Exit status 77
(skipped) without PyTorch or without a CUDA device it sees; 1 when ``eventapi.bench`` failed on
a kernel with the cache cold or warm (everything is written all the same); else 0.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import json
import statistics
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import eventapi
from eventapi._bench import BenchResult  # what bench returns; not exported by name

SKIP = 77  # the exit status that tells a test runner "skipped", as the examples' does
EVENT_CALLS = 100
EVENT_WARMUP = 10
QUANTILES = (0.5, 0.2, 0.8)  # the median, then the quantiles kernel authors ask do_bench for

Result = dict[str, Any]

# (key, pair, what) in the order they run and print: each pair times alike, and the graph
# captures, which may leave a framework's state behind them, come last.
VARIANTS = (
    ("eventapi", "cold cache", "eventapi.bench"),
    ("do_bench", "", "triton do_bench"),
    ("eventapi_warm", "warm cache", "eventapi.bench cold_cache=False"),
    ("torch_events", "", f"torch.cuda.Event x{EVENT_CALLS}"),
    ("eventapi_graph", "graph replay", "eventapi.bench graph=True"),
    ("do_bench_cudagraph", "", "triton do_bench_cudagraph"),
)
MUST_RUN = ("eventapi", "eventapi_warm")  # a failure of these fails the script


@dataclass(frozen=True)
class Kernel:
    """One kernel: ``work()`` enqueues it on PyTorch's current stream, into preallocated
    outputs (no allocation in a call, so a capture has none to refuse)."""

    name: str
    what: str
    work: Callable[[], object]


def kernels(torch: Any) -> list[Kernel]:
    """The three kernels and their tensors, made on the default stream and synchronized."""
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    c = torch.empty_like(a)
    x = torch.randn(1 << 20, device="cuda")
    y = torch.randn(1 << 20, device="cuda")
    z = torch.empty_like(x)
    source = torch.ones(64 << 20, device="cuda")  # 256 MiB of float32
    target = torch.empty_like(source)
    torch.cuda.synchronize()
    return [
        Kernel(
            "matmul",
            "fp16 matmul 4096x4096 (torch.matmul, out=)",
            partial(torch.matmul, a, b, out=c),
        ),
        Kernel(
            "add",
            "add of 1M float32 (torch.add, out=): launch-bound",
            partial(torch.add, x, y, out=z),
        ),
        Kernel(
            "copy", "copy of 256 MiB (Tensor.copy_): memory-bound", partial(target.copy_, source)
        ),
    ]


@functools.cache
def _external(torch: Any, address: int) -> Any:
    return torch.cuda.ExternalStream(address)


def torch_stream_for(torch: Any, stream: Any) -> Any:
    """PyTorch's view of a stream the cuda backend accepts.

    A ``torch.cuda.Stream`` as it is; any other (an eventapi stream, a cuda.core one) as a
    ``torch.cuda.ExternalStream`` over the address its ``__cuda_stream__()`` gives (the
    protocol's ``(version, address)``), one per address, so a call pays a lookup, not a new
    object. PyTorch never destroys an external stream: it stays its maker's.
    """
    if isinstance(stream, torch.cuda.Stream):
        return stream
    _, address = stream.__cuda_stream__()
    return _external(torch, address)


def quantile_figures(readings_us: list[float]) -> Result:
    """The median and the 20 % and 80 % quantiles of readings in microseconds (interpolated
    between readings, as ``torch.quantile`` does for do_bench)."""
    fifths = statistics.quantiles(readings_us, n=5, method="inclusive")
    return {
        "median_us": statistics.median(readings_us),
        "p20_us": fifths[0],
        "p80_us": fifths[3],
        "n": len(readings_us),
    }


def bench_figures(result: BenchResult) -> Result:
    """A bench result in microseconds, with the whole result but its readings."""
    interval = result.interval_ns
    details = {
        name: value
        for name, value in result.as_dict().items()
        if name not in ("readings_ns", "host_ns", "gaps_ns")
    }
    return {
        "median_us": result.median_ns / 1e3,
        "noise_us": None if result.noise_ns is None else result.noise_ns / 1e3,
        "interval_us": None if interval is None else [interval[0] / 1e3, interval[1] / 1e3],
        "p20_us": result.quantile(0.2) / 1e3,
        "p80_us": result.quantile(0.8) / 1e3,
        "n": result.n,
        "describe": result.describe(),
        "result": details,
    }


def torch_events(torch: Any, work: Callable[[], object]) -> Result:
    """``EVENT_CALLS`` calls on PyTorch's current stream, each between two timing events,
    after ``EVENT_WARMUP`` untimed ones; read once all are enqueued."""
    for _ in range(EVENT_WARMUP):
        work()
    pairs = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(EVENT_CALLS)
    ]
    for start, end in pairs:
        start.record()
        work()
        end.record()
    torch.cuda.current_stream().synchronize()
    return quantile_figures([start.elapsed_time(end) * 1e3 for start, end in pairs])


def triton_figures(measure: Callable[..., Any], work: Callable[[], object]) -> Result:
    """Triton's figure for ``work`` (milliseconds, given here in microseconds)."""
    if "quantiles" not in inspect.signature(measure).parameters:
        # An older Triton's do_bench_cudagraph: its one figure is the mean of its replays.
        return {"mean_us": float(measure(work)) * 1e3}
    median, p20, p80 = measure(work, quantiles=list(QUANTILES))
    return {"median_us": median * 1e3, "p20_us": p20 * 1e3, "p80_us": p80 * 1e3}


def _failure(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


@contextmanager
def _on(torch: Any, stream: Any) -> Iterator[None]:
    with torch.cuda.stream(torch_stream_for(torch, stream)):
        yield


def measure_kernel(
    api: Any, torch: Any, triton: Any, triton_missing: str, kernel: Kernel
) -> dict[str, Result]:
    """Every variant's figure for ``kernel``, on a stream of eventapi's made for it.

    ``triton`` is the module, or ``None`` (then ``triton_missing`` says why).
    """
    stream = api.stream_create_non_blocking()

    def fn(on: Any) -> None:
        with torch.cuda.stream(torch_stream_for(torch, on)):
            kernel.work()

    run = partial(eventapi.bench, fn, api=api, stream=stream)
    work = kernel.work
    measures: dict[str, Callable[[], Result]] = {
        "eventapi": lambda: bench_figures(run()),
        "do_bench": lambda: triton_figures(triton.testing.do_bench, work),
        "eventapi_warm": lambda: bench_figures(run(cold_cache=False)),
        "torch_events": lambda: torch_events(torch, work),
        "eventapi_graph": lambda: bench_figures(run(graph=True)),
        "do_bench_cudagraph": lambda: triton_figures(triton.testing.do_bench_cudagraph, work),
    }
    figures: dict[str, Result] = {}
    try:
        for key, _, _ in VARIANTS:
            if triton is None and key.startswith("do_bench"):
                figures[key] = {"skipped": triton_missing}
                continue
            try:
                with _on(torch, stream):  # Triton and the event loop time PyTorch's current one
                    figures[key] = measures[key]()
                    torch.cuda.synchronize()
            except Exception as exc:  # one variant's failure must not stop the others
                figures[key] = {"error": _failure(exc)}
    finally:
        torch.cuda.synchronize()
        api.stream_destroy(stream)
    return figures


def line(figure: Result) -> str:
    """One figure for the table: the median and what its tool says of its noise."""
    if "skipped" in figure:
        return f"skipped ({figure['skipped']})"
    if "error" in figure:
        error: str = figure["error"]
        return "failed: " + (error if len(error) <= 110 else error[:107] + "...")
    if "median_us" not in figure:
        return f"{figure['mean_us']:10.2f} us mean (no quantiles in this triton)"
    text = f"{figure['median_us']:10.2f} us"
    noise = figure.get("noise_us")
    text += f"  ± {noise:.2f} (95 %)" if noise is not None else " " * 15
    text += f"  p20-p80 {figure['p20_us']:.2f}-{figure['p80_us']:.2f}"
    result: Result | None = figure.get("result")
    if result is not None:
        notes = [f"n={result['n']}"]
        if result["calls_per_window"] > 1:
            notes.append(f"x{result['calls_per_window']} calls")
        if result["launch_bound"]:
            notes.append("launch-bound")
        if result["clock_mhz"] is not None:
            low, high = result["clock_mhz"]
            notes.append(f"clock {low}-{high} MHz" if low != high else f"clock {low} MHz")
        if result["throttled"]:
            notes.append("throttled")
        text += "  " + ", ".join(notes)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="eventapi.bench beside do_bench and torch events")
    parser.add_argument("--out", default="./gpu-results", help="directory for kernel_bench.json")
    args = parser.parse_args(argv)
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        print("skipped: torch is not installed")
        return SKIP
    if not torch.cuda.is_available():
        print(f"skipped: torch {torch.__version__} sees no CUDA device (torch.cuda unavailable)")
        return SKIP
    triton: Any = None
    triton_missing = "triton not installed"
    try:
        triton = importlib.import_module("triton")
        importlib.import_module("triton.testing")
    except ImportError:
        triton = None
    except Exception as exc:  # installed but broken (no compiler, a mismatched CUDA): say so
        triton_missing = f"triton does not import ({_failure(exc)})"
        triton = None
    api = eventapi.backend("cuda")
    results: Result = {
        "backend": api.BACKEND,
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "triton": triton_missing if triton is None else triton.__version__,
        "kernels": {},
    }
    print(f"{results['device']}, torch {torch.__version__}, triton {results['triton']}")
    print(f"  {'':<13}{'timer':<33}{'median':>10}     per call, then its noise (us)")
    failed = 0
    for kernel in kernels(torch):
        figures = measure_kernel(api, torch, triton, triton_missing, kernel)
        results["kernels"][kernel.name] = {"what": kernel.what, **figures}
        failed += any("error" in figures[key] for key in MUST_RUN)
        print(f"{kernel.name}: {kernel.what}")
        for key, pair, what in VARIANTS:
            print(f"  {pair:<13}{what:<33}{line(figures[key])}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "kernel_bench.json").write_text(json.dumps(results, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
