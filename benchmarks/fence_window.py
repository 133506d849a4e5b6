"""What eventapi costs over the raw binding: a fence, and a profiler window.

Usage: ``python benchmarks/fence_window.py BACKEND [--n N] [--reps R] [--batch B] [--clock
{wall,cpu}] [--json F] [--instructions | --phases]`` with BACKEND ``cuda`` or ``hip`` (``host`` too,
for eventapi's side only: it has no binding). ``--instructions`` counts instructions per operation
of eventapi's and the raw variants instead of timing them (valgrind; see ``callgrind.py``);
``--phases`` times a window's open and close apart from its share of the collects, eventapi's and
the raw loop's.

Each operation is done through eventapi and through the same binding calls written by hand
(``cuda.bindings.driver`` or ``hip.hip``, status checked as a careful caller would), in one
process, on one stream, interleaved: every repetition runs each variant for ``--n`` operations,
the variants taking turns of 5 collects' worth (``taking_turns``), and the table reports the
median per operation and the ratio of the medians. ``--n`` is by default the windows between
two merges of the profiler's summary (``whole_merges``), so that every repetition pays one.

``--clock`` says what a turn (and each phase of ``--phases``) is timed by: ``wall`` (the
default, ``time.perf_counter_ns``) or ``cpu``, the CPU time of this process, all its threads
(``time.process_time_ns``). ``cpu`` is for the instant device (``EMU_INSTANT=1``), where every
call completes on the calling thread and no wait sleeps: there it is the whole host cost, and a
busy process's time slice, which lands on whichever turn it interrupts, is not in it (the cache
and the core that process shares still are). The report's wake-ups per operation show the
premise: a woken emulated worker means a wait the CPU time leaves out, and the report says so.
Where the device is a worker thread, or a GPU, a wait is part of the cost and only the wall
clock has it.

Both variants make every call the contract requires: one capture check before each fence and
each window (the raw variants call ``cuStreamIsCapturing`` / ``hipStreamIsCapturing`` once), so
the ratio measures what eventapi adds, not what it must do.

* fence: check the stream, create an event, record it, wait for it, destroy it. eventapi:
  ``EventFence.record(api, stream)``, ``wait()``, ``close()``.
* window: check the stream, open and close a profiling window (two records into the stream),
  with the read-back amortized: every ``--batch`` windows one collect waits for the last one,
  reads two elapsed times per window and takes the anchor (``ANCHOR_SAMPLES`` bracketed
  record-and-wait samples, the same number in both variants). eventapi: ``with
  prof.window(...)`` and ``prof.collect()``; the raw variant reuses its events from a pool, as
  the profiler does.

Beside them, on a backend with the fast path (cuda, hip), the *backend's calls alone*: the
fused calls eventapi itself makes for the same fence and window, in a bare loop (see
``driver_variants``).
That is the floor the contract sets: a capture check before every record, where the raw variant
checks once per window and cuda.core's idiom not at all, and two readings per window, where
cuda.core's idiom reads one and places nothing on the host clock. A ratio to cuda.core below
the floor's own is out of reach of any implementation of the contract.

On the emulated drivers (``LD_PRELOAD=build/emulated/libcuda.so.1``) a driver call is a few
hundred nanoseconds and a wait is a thread hand-off, so the ratio is an upper bound of what
eventapi adds on a real device, where the driver's own costs are larger.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, TypeVar

import callgrind

import eventapi
from eventapi import EventFence, EventProfiler
from eventapi._profiling._anchor import ANCHOR_SAMPLES
from eventapi._profiling._sketch import MERGE_EVERY

T = TypeVar("T")


@dataclass(frozen=True)
class Raw:
    """The binding's own calls, each returning the binding's ``(status, *values)`` tuple."""

    create: Callable[[], Any]
    is_capturing: Callable[[Any], Any]
    record: Callable[[Any, Any], Any]
    synchronize: Callable[[Any], Any]
    destroy: Callable[[Any], Any]
    elapsed: Callable[[Any, Any], Any]


def raw_calls(backend: str) -> Raw | None:
    """The raw binding calls for ``backend``, or None when it has no binding."""
    if backend == "cuda":
        from cuda.bindings import driver as cu

        return Raw(
            partial(cu.cuEventCreate, 0),
            cu.cuStreamIsCapturing,
            cu.cuEventRecord,
            cu.cuEventSynchronize,
            cu.cuEventDestroy,
            cu.cuEventElapsedTime,
        )
    if backend == "hip":
        from hip import hip

        binding: Any = hip
        return Raw(
            partial(binding.hipEventCreateWithFlags, 0),
            binding.hipStreamIsCapturing,
            binding.hipEventRecord,
            binding.hipEventSynchronize,
            binding.hipEventDestroy,
            binding.hipEventElapsedTime,
        )
    return None


def ok(result: Any) -> Any:
    """The binding's result value, raising on a non-zero status as a careful caller would."""
    if result[0]:
        raise RuntimeError(f"driver call failed: {result[0]!r}")
    return result[1] if len(result) == 2 else None


# -- the operations, each timed over n iterations ---------------------------------------------


def fence_eventapi(api: Any, stream: Any, n: int) -> None:
    for _ in range(n):
        fence = EventFence.record(api, stream)
        fence.wait()
        fence.close()


def fence_raw(raw: Raw, stream: Any, n: int) -> None:
    for _ in range(n):
        _screen(raw, stream)
        event = ok(raw.create())
        ok(raw.record(event, stream))
        ok(raw.synchronize(event))
        ok(raw.destroy(event))


def window_eventapi(profiler: EventProfiler[Any, Any], n: int, batch: int) -> None:
    for count in batches(n, batch):
        windows_eventapi(profiler, count)
        profiler.collect()


def windows_eventapi(profiler: EventProfiler[Any, Any], count: int) -> None:
    for _ in range(count):
        with profiler.window("w"):
            pass


def window_raw(raw: Raw, stream: Any, pool: list[Any], n: int, batch: int) -> None:
    pending: list[tuple[Any, Any]] = []
    for count in batches(n, batch):
        windows_raw(raw, stream, pool, pending, count)
        _collect_raw(raw, stream, pool, pending)


def windows_raw(
    raw: Raw, stream: Any, pool: list[Any], pending: list[tuple[Any, Any]], count: int
) -> None:
    for _ in range(count):
        _screen(raw, stream)
        start, end = pool.pop(), pool.pop()
        ok(raw.record(start, stream))
        ok(raw.record(end, stream))
        pending.append((start, end))


def whole_merges(batch: int) -> int:
    """Operations per timed run unless ``--n`` says otherwise: the windows of one name between
    two merges of its summary's sketch (:data:`MERGE_EVERY` durations), in whole collects.

    A merge takes a millisecond or so every few thousand windows. A run that holds one pays its
    share; shorter runs would each hold one or none, and their median would say which.
    """
    return -(-MERGE_EVERY // batch) * batch


def batches(n: int, batch: int) -> list[int]:
    """How many windows each collect of ``n`` windows reads: ``batch``, the last one the rest."""
    return [min(batch, n - first) for first in range(0, n, batch)]


def _screen(raw: Raw, stream: Any) -> None:
    # The one capture check the contract requires before a fence or a window (API.md, sections
    # 4 and 5): a stream capturing a graph gets no timing event.
    if int(ok(raw.is_capturing(stream))):
        raise RuntimeError("the benchmark's stream is capturing a graph")


def _collect_raw(raw: Raw, stream: Any, pool: list[Any], pending: list[tuple[Any, Any]]) -> None:
    ok(raw.synchronize(pending[-1][1]))
    samples = [pool.pop() for _ in range(ANCHOR_SAMPLES)]
    best: tuple[int, Any] | None = None
    for sample in samples:
        before = time.perf_counter_ns()
        ok(raw.record(sample, stream))
        ok(raw.synchronize(sample))
        bracket = time.perf_counter_ns() - before
        if best is None or bracket < best[0]:
            best = (bracket, sample)
    assert best is not None
    reference = best[1]
    for start, end in pending:
        ok(raw.elapsed(start, reference))
        ok(raw.elapsed(start, end))
        pool.extend((start, end))
    pool.extend(samples)
    pending.clear()


# -- the peer: NVIDIA's cuda.core, on its own stream of the same device ------------------------


def peer_variants(backend: str, batch: int) -> tuple[dict[str, Callable[[int], None]], Any]:
    """cuda.core's fence and window, when the backend is cuda and cuda.core imports.

    Returns the variants and a closer for what they hold. cuda.core's own idiom: a fence is a
    timing event from ``Stream.record`` that is synced and closed; a window re-records two
    pooled events (``Stream.record(event)``) and reads ``end - start`` at collect, where the
    anchor takes the same bracketed samples as the other variants.
    """
    if backend != "cuda":
        return {}, lambda: None
    try:
        from cuda.core import Device, EventOptions
    except ImportError:
        return {}, lambda: None
    device = Device(0)
    device.set_current()
    stream = device.create_stream()
    timing = EventOptions(timing_enabled=True)
    pool = [stream.record(options=timing) for _ in range(2 * batch + ANCHOR_SAMPLES)]
    stream.sync()

    def fence(n: int) -> None:
        for _ in range(n):
            event = stream.record(options=timing)
            event.sync()
            event.close()

    def window(n: int) -> None:
        pending: list[tuple[Any, Any]] = []
        for i in range(n):
            start, end = pool.pop(), pool.pop()
            stream.record(start)
            stream.record(end)
            pending.append((start, end))
            if (i + 1) % batch == 0 or i == n - 1:
                pending[-1][1].sync()
                samples = [pool.pop() for _ in range(ANCHOR_SAMPLES)]
                best: tuple[int, Any] | None = None
                for sample in samples:
                    before = time.perf_counter_ns()
                    stream.record(sample)
                    sample.sync()
                    bracket = time.perf_counter_ns() - before
                    if best is None or bracket < best[0]:
                        best = (bracket, sample)
                assert best is not None
                for first, last in pending:
                    _ = best[1] - first
                    _ = last - first
                    pool.extend((first, last))
                pool.extend(samples)
                pending.clear()

    def close() -> None:
        for event in pool:
            event.close()
        stream.close()

    return {"fence/cuda.core": fence, "window/cuda.core": window}, close


# -- the floor the contract sets: its driver calls alone ----------------------------------------


def driver_variants(
    api: Any, stream: Any, batch: int
) -> tuple[dict[str, Callable[[int], None]], Callable[[], None]]:
    """The backend calls eventapi's fence and window make, alone.

    Nothing of the core runs around them: each is the fused call the fence or the profiler
    makes (``SupportsFastPath``; on cuda and hip, C with its handle checks). A fence is one
    capture-checked record of a reused event and one wait; a window two capture-checked
    records, and at each collect a wait for the last one, the anchor's bracketed samples and two
    readings per window (its duration, and its distance to the anchor that places it on the host
    clock). What eventapi costs above these figures is its own Python; no library that keeps the
    contract (a capture check before every record, each window placed on the host clock) can
    cost less. Empty for a backend without the fast path.
    """
    if not isinstance(api, eventapi.SupportsFastPath):
        return {}, lambda: None
    fast: Any = api  # and the protocol's own calls
    record_checked = fast.event_record_unless_capturing
    record, wait = fast.event_record, fast.event_wait
    elapsed_many = fast.event_elapsed_many
    target = fast.adopt_stream(stream)
    pool = [fast.event_create() for _ in range(2 * batch + ANCHOR_SAMPLES + 1)]
    spare = [pool.pop()]

    def fence(n: int) -> None:
        for _ in range(n):
            event = spare.pop()
            if not record_checked(event, target):
                raise RuntimeError("the benchmark's stream is capturing a graph")
            wait(event)
            spare.append(event)

    def window(n: int) -> None:
        pending: list[tuple[Any, Any]] = []
        for i in range(n):
            start = pool.pop()
            record_checked(start, target)
            end = pool.pop()
            record_checked(end, target)
            pending.append((start, end))
            if (i + 1) % batch == 0 or i == n - 1:
                wait(end)
                samples = [pool.pop() for _ in range(ANCHOR_SAMPLES)]
                best: tuple[int, Any] | None = None
                for sample in samples:
                    before = time.perf_counter_ns()
                    record(sample, target)
                    wait(sample)
                    bracket = time.perf_counter_ns() - before
                    if best is None or bracket < best[0]:
                        best = (bracket, sample)
                assert best is not None
                starts = [p[0] for p in pending]
                ends = [p[1] for p in pending]
                elapsed_many(starts + starts, ends + [best[1]] * len(starts))
                for first, last in pending:
                    pool.append(first)
                    pool.append(last)
                pool.extend(samples)
                pending.clear()

    def close() -> None:
        for event in pool + spare:
            fast.event_destroy(event)

    return {"fence/driver calls": fence, "window/driver calls": window}, close


# -- the run ----------------------------------------------------------------------------------


def wakeup_counter() -> Callable[[], int] | None:
    """The emulated driver's count of worker wake-ups, when it is the driver loaded."""
    try:
        counter = ctypes.CDLL(None).emu_worker_wakeups
    except AttributeError:  # a real driver, or host
        return None
    counter.restype = ctypes.c_long
    return lambda: int(counter())


def wakeups_per_op(counter: Callable[[], int], run: Callable[[int], None], n: int) -> float:
    """How many times one run woke a sleeping stream worker of the emulated driver, per
    operation: a host-side cost of the emulation that a real device does not have, and one
    that grows on a loaded machine."""
    before = counter()
    run(n)
    return (counter() - before) / n


CLOCKS: Final = {"wall": time.perf_counter_ns, "cpu": time.process_time_ns}
"""What ``--clock`` may time a turn by: the host's wall clock, or this process's CPU time."""

TURN: Final = 5
"""Collects' worth of operations a variant runs before the next variant's turn."""


def taking_turns(
    variants: dict[str, Callable[[int], None]],
    n: int,
    reps: int,
    turn: int,
    clock: Callable[[], int] = CLOCKS["wall"],
) -> dict[str, list[float]]:
    """Nanoseconds per operation of every variant in each of ``reps`` runs of ``n`` operations.

    Within a run the variants take turns, ``turn`` operations each (whole collects), and each
    variant's turns are summed: what slows the machine for a while (a busy process's time
    slice, a change of clock speed) falls on every variant alike, where a run of ``n`` at a
    time would give it to one variant. Each turn is timed by ``clock`` (see ``CLOCKS``). Each
    variant first runs ``n`` operations to warm up (a profiler's summary then holds a sketch,
    which a run's merge goes into).
    """
    for run in variants.values():
        run(n)
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(reps):
        spent = dict.fromkeys(variants, 0)
        for count in batches(n, turn):
            for name, run in variants.items():
                begin = clock()
                run(count)
                spent[name] += clock() - begin
        for name, total in spent.items():
            samples[name].append(total / n)
    return samples


@dataclass(frozen=True)
class Setup:
    """What every variant runs on: a backend object, its raw calls, a stream, a profiler on it
    and the raw loop's pool of events."""

    api: Any
    raw: Raw | None
    stream: Any
    profiler: EventProfiler[Any, Any]
    pool: list[Any]


@contextmanager
def setup(backend: str, batch: int) -> Iterator[Setup]:
    """A :class:`Setup` for ``backend``, released on the way out."""
    api: Any = eventapi.backend(backend)
    raw = raw_calls(backend)
    stream = api.stream_create_non_blocking()
    profiler: EventProfiler[Any, Any] = EventProfiler(api, stream)
    pool = [ok(raw.create()) for _ in range(2 * batch + ANCHOR_SAMPLES)] if raw else []
    try:
        yield Setup(api, raw, stream, profiler, pool)
    finally:
        profiler.close()
        if raw is not None:
            for event in pool:
                ok(raw.destroy(event))
        api.stream_destroy(stream)


def interleaved(variants: dict[str, Callable[[], T]], reps: int) -> dict[str, list[T]]:
    """Every variant run once to warm up (first calls resolve symbols, fill pools), then
    ``reps`` rounds that each run every variant once, in turn: what each run returned."""
    for run in variants.values():
        run()
    samples: dict[str, list[T]] = {name: [] for name in variants}
    for _ in range(reps):
        for name, run in variants.items():
            samples[name].append(run())
    return samples


def own_loops(
    api: Any,
    raw: Raw | None,
    stream: Any,
    profiler: EventProfiler[Any, Any],
    pool: list[Any],
    batch: int,
) -> list[tuple[str, Callable[[int], None]]]:
    """eventapi's and the raw variants, each a loop of the number of operations it is given."""
    native = getattr(stream, "raw", stream)
    loops: list[tuple[str, Callable[[int], None]]] = [
        ("fence/eventapi", lambda n: fence_eventapi(api, stream, n)),
        ("window/eventapi", lambda n: window_eventapi(profiler, n, batch)),
    ]
    if raw is not None:
        loops.append(("fence/raw", lambda n: fence_raw(raw, native, n)))
        loops.append(("window/raw", lambda n: window_raw(raw, native, pool, n, batch)))
    return loops


def measure(backend: str, n: int, reps: int, batch: int, clock: str = "wall") -> dict[str, Any]:
    """Median ns per operation for every variant; see the module docstring."""
    with setup(backend, batch) as on:
        variants = dict(own_loops(on.api, on.raw, on.stream, on.profiler, on.pool, batch))
        peers, close_peers = peer_variants(backend, batch)
        variants.update(peers)
        floors, close_floors = driver_variants(on.api, on.stream, batch)
        variants.update(floors)
        try:
            samples = taking_turns(variants, n, reps, TURN * batch, CLOCKS[clock])
            # Counted in a run of its own, after the timed ones, so the count cannot perturb them.
            counter = wakeup_counter()
            wakeups = (
                None
                if counter is None
                else {name: wakeups_per_op(counter, run, n) for name, run in variants.items()}
            )
        finally:
            close_floors()
            close_peers()
    medians = {name: statistics.median(values) for name, values in samples.items()}
    result: dict[str, Any] = {
        "backend": backend,
        "n": n,
        "reps": reps,
        "batch": batch,
        "clock": clock,
        "median_ns": medians,
    }
    if wakeups is not None:
        result["wakeups_per_op"] = wakeups
    return result


# -- a window's two phases, timed apart -----------------------------------------------------------


def phases(
    windows: Callable[[int], None],
    collect: Callable[[], object],
    n: int,
    batch: int,
    clock: Callable[[], int],
) -> tuple[float, float]:
    """Nanoseconds per window spent opening and closing windows, and in the collects."""
    opening = collecting = 0
    for count in batches(n, batch):
        begin = clock()
        windows(count)
        middle = clock()
        collect()
        collecting += clock() - middle
        opening += middle - begin
    return opening / n, collecting / n


def print_phases(backend: str, n: int, reps: int, batch: int, clock: str) -> None:
    """A window's open-and-close and its share of a collect, eventapi's and the raw loop's."""
    timer = CLOCKS[clock]
    with setup(backend, batch) as on:
        prof = on.profiler
        variants: dict[str, Callable[[], tuple[float, float]]] = {
            "eventapi": partial(
                phases, partial(windows_eventapi, prof), prof.collect, n, batch, timer
            )
        }
        if on.raw is not None:
            pending: list[tuple[Any, Any]] = []
            native = getattr(on.stream, "raw", on.stream)
            variants["raw binding"] = partial(
                phases,
                partial(windows_raw, on.raw, native, on.pool, pending),
                partial(_collect_raw, on.raw, native, on.pool, pending),
                n,
                batch,
                timer,
            )
        samples = interleaved(variants, reps)
    print(
        f"backend {backend}: a window's phases, median of {reps} interleaved runs of {n}, "
        f"{clock} time"
    )
    print(f"| per window (us) | open+close | collect, amortized over {batch} | both |")
    print("|---|---:|---:|---:|")
    for name, runs in samples.items():
        opening = statistics.median(run[0] for run in runs) / 1000
        collecting = statistics.median(run[1] for run in runs) / 1000
        print(f"| {name} | {opening:.2f} | {collecting:.2f} | {opening + collecting:.2f} |")


# -- instructions, counted by valgrind (see callgrind.py) ----------------------------------------

WARM_UP = 200  # operations before either count starts: symbols resolved, pools filled


def run_loop(backend: str, name: str, n: int, batch: int) -> None:
    """One variant, ``WARM_UP`` then ``n`` operations, in this process (under callgrind)."""
    with setup(backend, batch) as on:
        loops = own_loops(on.api, on.raw, on.stream, on.profiler, on.pool, batch)
        loop = dict(loops)[name]
        loop(WARM_UP)
        loop(n)


def print_instructions(backend: str, n: int, batch: int) -> None:
    """Instructions per operation of eventapi's and the raw variants, and their ratio."""
    callgrind.require_valgrind()
    names = ("fence/eventapi", "fence/raw", "window/eventapi", "window/raw")
    # Whole collects in both counts: n a multiple of the batch, and a second run n larger.
    n = max(batch, n - n % batch)
    counted = {
        name: callgrind.per_operation(
            [__file__, backend, "--batch", str(batch), "--loop", name], n, 2 * n
        )
        for name in names
        if backend != "host" or name.endswith("/eventapi")
    }
    print(f"backend {backend}: instructions per operation (valgrind callgrind), {n} operations")
    print("| operation | eventapi | raw binding | ratio |")
    print("|---|---:|---:|---:|")
    for op in ("fence", "window"):
        ours, theirs = counted[f"{op}/eventapi"], counted.get(f"{op}/raw")
        raw_text, ratio = (f"{theirs:,.0f}", f"{ours / theirs:.3f}") if theirs else ("-", "-")
        print(f"| {op} | {ours:,.0f} | {raw_text} | {ratio} |")


def table(result: dict[str, Any]) -> str:
    medians: dict[str, float] = result["median_ns"]
    rows = [
        "| operation | eventapi (us) | raw binding (us) | ratio | cuda.core (us) "
        "| driver calls alone (us) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    labels = {
        "fence": "fence: create, record, wait, close",
        "window": f"window: open+close, collect amortized over {result['batch']}",
    }
    for op, label in labels.items():
        ours = medians[f"{op}/eventapi"]
        raw = medians.get(f"{op}/raw")
        raw_text = f"{raw / 1000:.2f}" if raw else "-"
        ratio = f"{ours / raw:.2f}" if raw else "-"
        peer = medians.get(f"{op}/cuda.core")
        peer_text = f"{peer / 1000:.2f}" if peer else "-"
        floor = medians.get(f"{op}/driver calls")
        floor_text = f"{floor / 1000:.2f}" if floor else "-"
        rows.append(
            f"| {label} | {ours / 1000:.2f} | {raw_text} | {ratio} | {peer_text} | {floor_text} |"
        )
    wakeups: dict[str, float] | None = result.get("wakeups_per_op")
    if wakeups is not None:
        counts = ", ".join(f"{name} {count:.2f}" for name, count in wakeups.items())
        rows.append(f"\nemulated driver, worker wake-ups per operation: {counts}")
        if result["clock"] == "cpu" and any(wakeups.values()):
            rows.append("CPU time leaves out the waits for those wake-ups: use --clock wall")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("backend", help="cuda, hip or host")
    parser.add_argument(
        "--n",
        type=int,
        help="operations per timed run (default: the windows between two of the summary's "
        "merges, in whole collects: 4,100 for batches of 100)",
    )
    parser.add_argument("--reps", type=int, default=7, help="interleaved repetitions")
    parser.add_argument("--batch", type=int, default=100, help="windows per collect")
    parser.add_argument(
        "--clock",
        choices=tuple(CLOCKS),
        default="wall",
        help="time each turn by the wall clock, or by this process's CPU time (for the instant "
        "device, where every call completes on the calling thread)",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions per operation under valgrind instead of timing",
    )
    parser.add_argument(
        "--phases",
        action="store_true",
        help="time a window's open+close and its collect apart, eventapi's and the raw loop's",
    )
    parser.add_argument("--loop", nargs=2, metavar=("VARIANT", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.n is None:
        args.n = whole_merges(args.batch)
    if args.loop:
        run_loop(args.backend, args.loop[0], int(args.loop[1]), args.batch)
        return 0
    if args.instructions:
        if args.clock != "wall":
            parser.error("--instructions counts instructions: it takes no --clock")
        print_instructions(args.backend, args.n, args.batch)
        return 0
    if args.phases:
        print_phases(args.backend, args.n, args.reps, args.batch, args.clock)
        return 0
    result = measure(args.backend, args.n, args.reps, args.batch, args.clock)
    print(
        f"backend {args.backend}: median of {args.reps} interleaved runs of {args.n} each, "
        f"{args.clock} time"
    )
    print(table(result))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
