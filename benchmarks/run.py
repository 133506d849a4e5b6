"""Every performance figure eventapi tracks, as ratios measured side by side in one run.

Usage (``make bench ARGS="..."``)::

    python benchmarks/run.py [--load N] [--json FILE] [--quick]

* imports: ``import eventapi`` against ``import pluggy``, and the first ``eventapi.backends()``
  against ``import pluggy`` plus one entry-point scan, each a fresh interpreter, interleaved
  (``import_cost.py``);
* fence and window against the raw binding calls on the emulated ``cuda`` and ``hip`` drivers
  (``fence_window.py``, one process per backend with its driver preloaded), and on the instant
  device, where only the host's cost is left, timed by the process's CPU time (``--clock cpu``: a
  busy process's time slice is not in it); beside them, cuda.core's fence and window, and the
  backend's own calls alone (the floor no implementation of the contract goes below), with the
  instant rows read against their goals;
* the Python bytecodes and frames a window and a fence cost on cuda and hip (``bytecodes.py``):
  counts, which neither the machine's speed nor its load move;
* the ``host`` backend's anchor uncertainty (median and worst of many collects);
* the CPU time of a thread waiting 50 ms on a fence, next to the wall time, on ``host``,
  ``cuda`` and ``hip`` (``wait_cpu.py``).

``--load N`` runs the same with N busy processes beside it (each spinning a core), because a
ratio that moves when another process runs means eventapi adds a cost the raw calls do not pay
(an extra hand-off, an extra wake-up). The report counts, per window, how often a call woke
the emulated stream's sleeping worker thread (a host-side cost of the emulation, which grows
on a loaded machine; a real device has no thread to wake). ``--json FILE`` writes every figure
for comparison across commits. Run ``make emulated`` first (``make bench`` does).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

HERE: Final = Path(__file__).resolve().parent
EMULATED: Final = HERE.parent / "build" / "emulated"
LIBRARIES: Final = {"cuda": EMULATED / "libcuda.so.1", "hip": EMULATED / "libamdhip64.so"}

# The goals the figures are read against (docs/benchmarks.md says where they come from).
GOALS: Final = {
    "window": 2.0,
    "fence": 1.10,
    # On the instant device, where only the host's cost is left, against the raw binding calls,
    # both in CPU time.
    "cuda instant window": 1.2,
    "cuda instant fence": 0.7,
    "hip instant window": 0.8,
    "hip instant fence": 0.8,
    "import": 1.10,
    "backends": 1.15,
    "anchor_us": 20.0,
    "wait_cpu_share": 0.05,
}


@contextmanager
def busy(n: int) -> Iterator[None]:
    """N processes that each keep a core busy for as long as the block runs."""
    procs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(n)
    ]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def _environment(preload: Path | None = None, instant: bool = False) -> dict[str, str]:
    # A benchmark of the default path must not inherit a backend choice.
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTAPI_")}
    env.pop("EMU_INSTANT", None)
    if preload is not None:
        env["LD_PRELOAD"] = str(preload)
    if instant:
        # The emulated device completes a record at once (tests/emulated/README.md): what is
        # left is the host's cost per call.
        env["EMU_INSTANT"] = "1"
    return env


def _script(
    name: str,
    args: list[str],
    preload: Path | None = None,
    instant: bool = False,
) -> dict[str, Any]:
    """Run ``benchmarks/NAME`` with ``--json`` and return what it wrote."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "result.json"
        subprocess.run(
            [sys.executable, str(HERE / name), *args, "--json", str(out)],
            env=_environment(preload, instant),
            check=True,
            stdout=subprocess.DEVNULL,
        )
        result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
        return result


def imports(repeat: int) -> dict[str, float]:
    medians: dict[str, float] = _script("import_cost.py", ["--repeat", str(repeat)])["median_ns"]
    return {
        "import_ms": medians["import eventapi"] / 1e6,
        "pluggy_ms": medians["import pluggy"] / 1e6,
        "import_ratio": medians["import eventapi"] / medians["import pluggy"],
        "backends_ms": medians["eventapi.backends()"] / 1e6,
        "scan_ms": medians["pluggy + entry-point scan"] / 1e6,
        "backends_ratio": medians["eventapi.backends()"] / medians["pluggy + entry-point scan"],
    }


def fence_window(backend: str, reps: int, instant: bool = False) -> dict[str, Any]:
    # On the instant device every call completes on the calling thread and no wait sleeps: the
    # process's CPU time is the whole host cost (fence_window.py says why; the wake-ups per
    # operation show it, and the report says so).
    args = [backend, "--reps", str(reps), "--clock", "cpu" if instant else "wall"]
    result = _script("fence_window.py", args, LIBRARIES[backend], instant)
    medians: dict[str, float] = result["median_ns"]
    figures: dict[str, Any] = {
        f"{op}_{variant}_us": medians[f"{op}/{variant}"] / 1e3
        for op in ("fence", "window")
        for variant in ("eventapi", "raw")
    }
    figures["clock"] = result["clock"]
    figures["fence_ratio"] = medians["fence/eventapi"] / medians["fence/raw"]
    figures["window_ratio"] = medians["window/eventapi"] / medians["window/raw"]
    for op in ("fence", "window"):
        peer = medians.get(f"{op}/cuda.core")
        if peer is not None:
            figures[f"{op}_cuda.core_us"] = peer / 1e3
        floor = medians.get(f"{op}/driver calls")  # the backend's own calls alone
        if floor is not None:
            figures[f"{op}_driver_us"] = floor / 1e3
    # Wake-ups of the emulated device's worker thread per operation: see fence_window.py.
    for variant, count in result.get("wakeups_per_op", {}).items():
        figures[f"wakeups_{variant}"] = count
    return figures


def host_anchor(collects: int) -> dict[str, float]:
    import eventapi
    from eventapi.host import HostBackend

    api = HostBackend()
    uncertainties: list[int] = []
    with eventapi.EventProfiler(api) as profiler:
        for _ in range(collects):
            with profiler.window("w"):
                pass
            profiler.collect()
            uncertainties.append(profiler.anchor.uncertainty_ns)
    return {
        "anchor_median_us": statistics.median(uncertainties) / 1e3,
        "anchor_max_us": max(uncertainties) / 1e3,
    }


def wait_cpu(backend: str, trials: int) -> dict[str, float]:
    preload = LIBRARIES.get(backend)
    result = _script("wait_cpu.py", [backend, "--trials", str(trials)], preload)
    return {k: float(v) for k, v in result.items() if isinstance(v, int | float)}


def measure(load: int, quick: bool) -> dict[str, Any]:
    repeat, reps, collects, trials = (8, 3, 50, 3) if quick else (30, 7, 200, 5)
    with busy(load):
        figures: dict[str, Any] = {"load": load, "imports": imports(repeat)}
        for backend in ("cuda", "hip"):
            figures[backend] = fence_window(backend, reps)
            figures[f"{backend} instant"] = fence_window(backend, reps, instant=True)
            figures[f"{backend} bytecodes"] = _script(
                "bytecodes.py", [backend], LIBRARIES[backend], instant=True
            )
        figures["host"] = host_anchor(collects)
        figures["wait"] = {b: wait_cpu(b, trials) for b in ("host", "cuda", "hip")}
    return figures


def _row(figure: str, value: float, goal: float, unit: str = "x") -> str:
    mark = "ok" if value <= goal else "OVER"
    return f"| {figure} | {value:.2f}{unit} | <= {goal:g}{unit} | {mark} |"


def _fence_window_rows(figures: dict[str, Any]) -> list[str]:
    return ["cuda", "hip", "cuda instant", "hip instant"]


def _label(backend: str, fw: dict[str, Any]) -> str:
    return f"{backend} (CPU time)" if fw["clock"] == "cpu" else backend


def _floor_pair(backend: str, fw: dict[str, float]) -> str:
    # Shown on the instant device only: there the calls cost the host alone, and the figure is
    # a floor; on the polling device a wait's cost is the emulation's hand-off, which eventapi's
    # own query spin ahead of the driver's wait happens to shorten.
    fence, window = fw.get("fence_driver_us"), fw.get("window_driver_us")
    if "instant" not in backend or fence is None or window is None:
        return "-"
    return f"{fence:.2f} / {window:.2f}"


def _bytecode_rows(figures: dict[str, Any]) -> list[str]:
    from bytecodes import BUDGETS  # beside this file

    rows = []
    for backend in ("cuda", "hip"):
        counts = figures[f"{backend} bytecodes"]
        for name, budget in BUDGETS.items():
            rows.append(_row(f"{backend} {name.replace('_', ' ')}", counts[name], budget, ""))
    return rows


def report(figures: dict[str, Any]) -> str:
    imp = figures["imports"]
    rows = [
        f"load: {figures['load']} busy processes beside the run",
        "",
        "| figure | measured | goal | | |",
        "|---|---:|---:|---|---|",
    ]
    for backend in _fence_window_rows(figures):
        fw = figures[backend]
        instant = "instant" in backend
        window, fence = fw["window_ratio"], fw["fence_ratio"]
        rows.append(
            _row(
                f"{_label(backend, fw)} window vs two raw records",
                window,
                GOALS[f"{backend} window"] if instant else GOALS["window"],
            )
        )
        rows.append(
            _row(
                f"{_label(backend, fw)} fence vs raw",
                fence,
                GOALS[f"{backend} fence"] if instant else GOALS["fence"],
            )
        )
    rows += _bytecode_rows(figures)
    rows.append(_row("import eventapi vs import pluggy", imp["import_ratio"], GOALS["import"]))
    rows.append(
        _row("first backends() vs pluggy + one scan", imp["backends_ratio"], GOALS["backends"])
    )
    host = figures["host"]
    rows.append(_row("host anchor uncertainty (median)", host["anchor_median_us"], 20.0, " us"))
    rows += [
        "",
        "| backend | fence us (raw) | window us (raw) | cuda.core fence us | cuda.core window us "
        "| backend's calls alone: fence / window us |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for backend in _fence_window_rows(figures):
        fw = figures[backend]
        peer_fence = fw.get("fence_cuda.core_us")
        peer_window = fw.get("window_cuda.core_us")
        rows.append(
            f"| {_label(backend, fw)} | {fw['fence_eventapi_us']:.2f} ({fw['fence_raw_us']:.2f}) | "
            f"{fw['window_eventapi_us']:.2f} ({fw['window_raw_us']:.2f}) | "
            f"{'-' if peer_fence is None else f'{peer_fence:.2f}'} | "
            f"{'-' if peer_window is None else f'{peer_window:.2f}'} | "
            f"{_floor_pair(backend, fw)} |"
        )
    wakeup_rows = []
    for backend in ("cuda", "hip"):
        counts = ", ".join(
            f"{key.removeprefix('wakeups_window/')} {count:.2f}"
            for key, count in figures[backend].items()
            if key.startswith("wakeups_window/")
        )
        if counts:
            wakeup_rows.append(f"{backend}: emulated worker wake-ups per window: {counts}")
    for backend in ("cuda instant", "hip instant"):
        # CPU time is the whole host cost only where no call waits for a worker.
        woken = [v for k, v in figures[backend].items() if k.startswith("wakeups_")]
        if figures[backend]["clock"] == "cpu" and woken:
            meaning = "the CPU time is the whole host cost" if not any(woken) else "WAITS LEFT OUT"
            wakeup_rows.append(
                f"{backend}: emulated worker wake-ups per operation at most {max(woken):.2f} "
                f"({meaning})"
            )
    if wakeup_rows:
        rows += ["", *wakeup_rows]
    rows += [
        "",
        f"imports: eventapi {imp['import_ms']:.1f} ms, pluggy {imp['pluggy_ms']:.1f} ms; "
        f"first backends() {imp['backends_ms']:.1f} ms, pluggy + scan {imp['scan_ms']:.1f} ms; "
        f"host anchor worst {host['anchor_max_us']:.1f} us",
        "",
        "| backend | 50 ms fence wait: wall ms | CPU ms | share of a core | short wait wakes us |",
        "|---|---:|---:|---:|---:|",
    ]
    for backend, wait in figures["wait"].items():
        rows.append(
            f"| {backend} | {wait['wall_ms']:.1f} | {wait['cpu_ms']:.2f} | "
            f"{100 * wait['cpu_share']:.1f} % | {wait['wake_us']:.1f} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--load", type=int, default=0, help="busy processes beside the run")
    parser.add_argument("--json", metavar="FILE", help="also write every figure as JSON")
    parser.add_argument("--quick", action="store_true", help="fewer rounds: a smoke run")
    args = parser.parse_args(argv)
    missing = [str(lib) for lib in LIBRARIES.values() if not lib.exists()]
    if missing:
        parser.error(f"build the emulated drivers first (make emulated): {', '.join(missing)}")
    figures = measure(args.load, args.quick)
    print(report(figures))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
