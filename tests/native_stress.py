"""Eight threads race destroys against the compiled calls on shared handles, on one backend.

``python tests/native_stress.py cuda`` (or ``hip``), with that backend's emulated driver
preloaded (``LD_PRELOAD``): ``tests/test_native_stress.py`` runs it in a fresh process per
backend, and ``make sanitize`` runs it again with the extension and the drivers built with
AddressSanitizer and UndefinedBehaviorSanitizer.

One backend object, built directly (so that it and its spare events go at the end), gives out a
pool of :data:`EVENTS` events and :data:`STREAMS` streams that :data:`THREADS` threads share.
Each thread makes :data:`OPERATIONS` operations picked at random: destroying a pooled handle and
putting a new one in its place (or dropping it to its finalizer), recording (plain, screened, a
fence's record into a spare), querying, waiting, a stream's synchronize and wait, readings
(``event_elapsed``, ``event_elapsed_many``), and windows and collects of a profiler of its own
on a pooled stream. The emulated device is left asynchronous: a stream's worker thread stamps
each record, so a query may answer False, a reading may be not ready, and a wait or a
synchronize blocks with the GIL released while another thread destroys the handle it holds.

Every call must end in one of three ways; anything else is a wrong outcome:

* it returns a plausible value: a query a ``bool``; a reading an ``int`` from 0 to the time
  this process has run (the emulated device clock is the host's monotonic clock), the reading
  of an event against itself 0, and readings taken in one call consistent with one set of
  timestamps (of two opposite readings one is 0; a to c is a to b plus b to c); a fence's event
  recorded; a span's duration within the same bounds;
* it raises :class:`~eventapi.EventStateError` saying the handle was already destroyed
  (another thread destroyed it first);
* a reading raises :class:`~eventapi.DriverError` with ``not_ready``.

Then every pooled handle is destroyed: the object counts nothing live, and once it is dropped
and collected (its spare events go with it, and CUDA's primary context), the driver holds as
many events, streams and context references as before it was built. A crash or a hang ends the
process (a hang after :data:`HANG_S`, with every thread's traceback on stderr).

Prints one line of JSON (the count of each operation's outcomes, what was wrong, the counts)
and exits 1 when anything failed.
"""

from __future__ import annotations

import faulthandler
import gc
import json
import logging
import os
import random
import sys
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, cast

from emulated_driver import DriverName, EmulatedDriver

from eventapi import DriverError, EventProfiler, EventStateError, Span

if TYPE_CHECKING:
    # Typed as cuda's: HipBackend has the same calls, and one stub serves both extensions
    # (eventapi_hip's _native.pyi links to cuda's).
    from eventapi_cuda import CudaBackend as Backend
    from eventapi_cuda._native import Event, Stream

THREADS = 8
OPERATIONS = 15_000  # per thread: 120,000 per backend, about 4 s here
EVENTS = 16
STREAMS = 4
COLLECT_EVERY = 4  # a profiler's windows between two collects
HANG_S = 100.0  # far beyond a run (seconds); below the test's bound on the process
SEED = 20_240_601

SONAMES: dict[DriverName, str] = {"cuda": "libcuda.so.1", "hip": "libamdhip64.so"}
READINGS = frozenset({"elapsed", "elapsed_many"})  # may be not ready; nothing else may
RACED = frozenset(  # the operations that take a pooled handle another thread may destroy
    {
        "record",
        "record_screened",
        "fence",
        "query",
        "wait",
        "stream_synchronize",
        "stream_wait",
        "elapsed",
        "elapsed_many",
        "profile",
    }
)


class WrongValueError(Exception):
    """A call returned what it may not."""


def _backend(kind: DriverName) -> Backend:
    if kind == "cuda":
        from eventapi_cuda import CudaBackend

        return CudaBackend(0)
    from eventapi_hip import HipBackend

    return cast("Backend", HipBackend(0))


def _driver_counts(emu: EmulatedDriver) -> list[int]:
    # Spares included: every driver event and stream, and the context references held.
    live = emu.live_handles(spares=True)
    return [live.events, live.streams, live.contexts]


class Run:
    """What the threads share: the backend object, the pools, the clock and the verdicts."""

    def __init__(self, api: Backend, started_ns: int) -> None:
        self.api = api
        self.started_ns = started_ns
        self.homes = [api.stream_create_non_blocking() for _ in range(THREADS)]
        self.events = [self.recorded_event(self.homes[0]) for _ in range(EVENTS)]
        self.streams = [api.stream_create_non_blocking() for _ in range(STREAMS)]
        self.lock = threading.Lock()  # guards the lists below, not the handles
        self.outcomes: Counter[tuple[str, str]] = Counter()
        self.wrong: list[str] = []

    def recorded_event(self, home: Stream) -> Event:
        # Pooled events are always recorded: a never-recorded one is refused for another reason.
        event = self.api.event_create()
        self.api.event_record(event, home)
        return event

    def bound_ns(self) -> int:
        # No two stamps of this run lie further apart than the time it has run; 2**-22 of it
        # covers the reading's float32 milliseconds (2**-24 each).
        run_ns = time.perf_counter_ns() - self.started_ns
        return run_ns + (run_ns >> 22) + 2

    def reading(self, value: object) -> int:
        if type(value) is not int or not 0 <= value <= self.bound_ns():
            raise WrongValueError(f"a reading of {value!r}")
        return value


class Worker:
    """One thread's operations; its own random sequence, home stream and profiler."""

    def __init__(self, run: Run, index: int) -> None:
        self.run = run
        self.api = run.api
        self.index = index
        self.rng = random.Random(SEED + index)
        self.home = run.homes[index]
        self.profiler: EventProfiler[Event, Stream] | None = None
        self.windows = 0
        self.outcomes: Counter[tuple[str, str]] = Counter()
        self.wrong: list[str] = []

    # -- picking pooled handles: the pool may change between the pick and the call -------------

    def event(self) -> Event:
        return self.run.events[self.rng.randrange(EVENTS)]

    def stream(self) -> Stream:
        return self.run.streams[self.rng.randrange(STREAMS)]

    # -- the operations ------------------------------------------------------------------------

    def destroy_event(self) -> None:
        slot = self.rng.randrange(EVENTS)
        old = self.run.events[slot]
        if self.rng.random() < 0.75:
            self.api.event_destroy(old)  # else dropped below, to its finalizer
        self.run.events[slot] = self.run.recorded_event(self.home)

    def destroy_stream(self) -> None:
        slot = self.rng.randrange(STREAMS)
        old = self.run.streams[slot]
        if self.rng.random() < 0.75:
            self.api.stream_destroy(old)
        self.run.streams[slot] = self.api.stream_create_non_blocking()

    def record(self) -> None:
        self.api.event_record(self.event(), self.stream())

    def record_screened(self) -> None:
        recorded = self.api.event_record_unless_capturing(self.event(), self.stream())
        if recorded is not True:  # nothing captures here
            raise WrongValueError(f"event_record_unless_capturing returned {recorded!r}")

    def fence(self) -> None:
        # A fence's record takes a spare driver event when the object keeps one: the events
        # that go back among the spares are pooled fence events seen reached, then destroyed.
        event = self.api.event_record_new(self.stream())
        if event is None or not event.recorded or event.closed:
            raise WrongValueError(f"event_record_new returned {event!r}")
        slot = self.rng.randrange(EVENTS)
        old, self.run.events[slot] = self.run.events[slot], event
        self.api.event_destroy(old)

    def query(self) -> None:
        answer = self.api.event_query(self.event())
        if type(answer) is not bool:
            raise WrongValueError(f"event_query returned {answer!r}")

    def wait(self) -> None:
        event = self.event()
        self.api.event_wait(event)
        if event.closed:  # destroyed while the wait was in the driver (or just after)
            self.outcomes["wait", "destroyed meanwhile"] += 1

    def stream_synchronize(self) -> None:
        stream = self.stream()
        self.api.stream_synchronize(stream)
        if stream.closed:
            self.outcomes["stream_synchronize", "destroyed meanwhile"] += 1

    def stream_wait(self) -> None:
        self.api.stream_wait_event(self.stream(), self.event())

    def elapsed(self) -> None:
        start, end = self.event(), self.event()
        self.run.reading(self.api.event_elapsed(start, end))
        if self.run.reading(self.api.event_elapsed(start, start)) != 0:
            raise WrongValueError("an event read against itself is not 0")

    def elapsed_many(self) -> None:
        # One call reads one set of timestamps (nothing can record while it holds the GIL):
        # a to b, b to c, a to c, then the opposite ways, then a to a.
        a, b, c = self.event(), self.event(), self.event()
        readings = self.api.event_elapsed_many([a, b, a, b, c, c, a], [b, c, c, a, b, a, a])
        if type(readings) is not list or len(readings) != 7:
            raise WrongValueError(f"event_elapsed_many returned {readings!r}")
        ab, bc, ac, ba, cb, ca, aa = (self.run.reading(value) for value in readings)
        if aa != 0 or min(ab, ba) != 0 or min(bc, cb) != 0 or min(ac, ca) != 0:
            raise WrongValueError(f"readings of no one set of timestamps: {readings}")
        # Signed differences; a to c is a to b plus b to c, within each reading's rounding.
        tolerance = 3 * max(ab, ba, bc, cb, ac, ca) * 2**-23 + 3
        if abs((ac - ca) - ((ab - ba) + (bc - cb))) > tolerance:
            raise WrongValueError(f"readings that do not add up: {readings}")

    def profile(self) -> None:
        # A window on a pooled stream; once the stream was destroyed, the window is refused
        # (destroyed), and the profiler is read back, closed and replaced. One whose stream
        # left the pool undestroyed (dropped, but the profiler holds it) is replaced too.
        if self.profiler is not None and self.profiler.stream not in self.run.streams:
            self.retire_profiler()
        if self.profiler is None:
            self.profiler = EventProfiler(self.api, self.stream(), label=f"thread-{self.index}")
        try:
            with self.profiler.window("step"):
                pass
        except EventStateError:
            self.retire_profiler()
            raise
        self.windows += 1
        if self.windows % COLLECT_EVERY == 0:
            self.check_spans(self.profiler.collect())

    def retire_profiler(self) -> None:
        profiler, self.profiler = self.profiler, None
        if profiler is not None:
            self.check_spans(profiler.collect())
            profiler.close()

    def check_spans(self, spans: list[Span]) -> None:
        for span in spans:
            if span.name != "step":
                raise WrongValueError(f"a span of another window: {span!r}")
            self.run.reading(span.duration_ns)
        self.outcomes["collect", "ok"] += 1
        self.outcomes["collect", "spans read"] += len(spans)

    # -- running -------------------------------------------------------------------------------

    def attempt(self, name: str, operation: Callable[[], None]) -> None:
        try:
            operation()
        except EventStateError as exc:
            if "already destroyed" not in str(exc):
                self.note_wrong(name, exc)
                return
            self.outcomes[name, "destroyed"] += 1
        except DriverError as exc:
            if not (exc.not_ready and name in READINGS):
                self.note_wrong(name, exc)
                return
            self.outcomes[name, "not ready"] += 1
        except Exception as exc:  # a wrong value, or an exception no call may raise
            self.note_wrong(name, exc)
        else:
            self.outcomes[name, "ok"] += 1

    def note_wrong(self, name: str, exc: Exception) -> None:
        self.outcomes[name, "wrong"] += 1
        if len(self.wrong) < 20:
            self.wrong.append(f"{name}: {type(exc).__name__}: {exc}")

    def __call__(self) -> None:
        weights = {
            self.destroy_event: 3,
            self.destroy_stream: 1,
            self.record: 3,
            self.record_screened: 2,
            self.fence: 2,
            self.query: 3,
            self.wait: 3,
            self.stream_synchronize: 1,
            self.stream_wait: 1,
            self.elapsed: 2,
            self.elapsed_many: 2,
            self.profile: 2,
        }
        operations = list(weights)
        picks = self.rng.choices(operations, weights=list(weights.values()), k=OPERATIONS)
        for operation in picks:
            self.attempt(operation.__name__, operation)
        self.attempt("profiler_close", self.retire_profiler)
        with self.run.lock:
            self.run.outcomes.update(self.outcomes)
            self.run.wrong.extend(self.wrong)


class Complaints(logging.Handler):
    """Every eventapi log line of WARNING and above."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname}: {record.getMessage()}")


class Observed:
    """What no call returns: eventapi's log lines (a destroy that failed in a finalizer or
    after a wait is logged), unraisable exceptions (a finalizer's) and a thread's escapes."""

    def __init__(self) -> None:
        self.complaints = Complaints()
        logger = logging.getLogger("eventapi")
        logger.addHandler(self.complaints)
        logger.propagate = False
        self.lines: list[str] = []
        sys.unraisablehook = lambda hook: self.lines.append(
            f"unraisable {hook.exc_type.__name__}: {hook.exc_value}"
        )
        threading.excepthook = lambda hook: self.lines.append(
            f"a thread raised {hook.exc_type.__name__}: {hook.exc_value}"
        )

    def failures(self) -> list[str]:
        return [*(f"logged {line}" for line in self.complaints.lines), *self.lines]


def _race(api: Backend, started_ns: int) -> tuple[Counter[tuple[str, str]], list[str]]:
    """The threads' run, over, every pooled handle destroyed: the outcomes, what was wrong."""
    run = Run(api, started_ns)
    threads = [
        threading.Thread(target=Worker(run, index), name=f"stress-{index}")
        for index in range(THREADS)
    ]
    # Threads switch every 100 us rather than every 5 ms, so that a thread is often stopped
    # between taking a handle from the pool and calling with it, while another destroys it.
    sys.setswitchinterval(1e-4)
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sys.setswitchinterval(0.005)
    for event in run.events:
        api.event_destroy(event)
    for stream in [*run.streams, *run.homes]:
        api.stream_destroy(stream)
    return run.outcomes, run.wrong


def _verdict(
    outcomes: Counter[tuple[str, str]],
) -> tuple[int, dict[str, dict[str, int]], list[str]]:
    """How many operations were made, their outcomes by operation, and what they lacked."""
    by_operation: dict[str, dict[str, int]] = {}
    for (name, outcome), count in sorted(outcomes.items()):
        by_operation.setdefault(name, {})[outcome] = count
    operations = sum(
        count
        for (name, outcome), count in outcomes.items()
        if name != "collect" and "meanwhile" not in outcome
    )
    failures = []
    if operations < THREADS * OPERATIONS:
        failures.append(f"{operations} operations made, not {THREADS * OPERATIONS}")
    for name in sorted(RACED):
        if not by_operation.get(name, {}).get("ok") or not by_operation[name].get("destroyed"):
            failures.append(f"{name} never both succeeded and met a destroyed handle")
    if not by_operation.get("wait", {}).get("destroyed meanwhile"):
        failures.append("no wait saw its event destroyed while it waited")
    return operations, by_operation, failures


def main(kind: DriverName) -> int:
    started_ns = time.perf_counter_ns()
    preloaded = os.environ.get("LD_PRELOAD", "")
    if SONAMES[kind] not in preloaded:
        sys.exit(f"run with the emulated {kind} driver preloaded (LD_PRELOAD), not {preloaded!r}")
    faulthandler.dump_traceback_later(HANG_S, exit=True)
    # The library already loaded (preloaded), found by its soname: its counts are the driver's.
    emu = EmulatedDriver(kind, Path(SONAMES[kind]))
    observed = Observed()
    before = _driver_counts(emu)
    api = _backend(kind)
    outcomes, wrong = _race(api, started_ns)
    gc.collect()
    live = list(api.live_handles())
    gone = weakref.ref(api)
    del api
    gc.collect()
    after = _driver_counts(emu)

    operations, by_operation, failures = _verdict(outcomes)
    failures += [*wrong, *observed.failures()]
    if live != [0, 0]:
        failures.insert(0, f"the backend object counts {live} live (events, streams)")
    if gone() is not None:
        failures.insert(0, "the backend object outlived its last reference")
    if after != before:
        failures.insert(0, f"the driver holds {after} (events, streams, contexts), not {before}")
    print(
        json.dumps(
            {
                "kind": kind,
                "operations": operations,
                "seconds": round((time.perf_counter_ns() - started_ns) / 1e9, 2),
                "outcomes": by_operation,
                "driver_before": before,
                "driver_after": after,
                "failures": failures[:40],
            }
        )
    )
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in SONAMES:
        sys.exit(f"usage: {sys.argv[0]} cuda|hip")
    sys.exit(main(sys.argv[1]))
