"""Ctrl-C every millisecond or less on the main thread, while two threads use the backend.

``python tests/native_storm.py cuda`` (or ``hip``), with that backend's emulated driver
preloaded (``LD_PRELOAD``); ``tests/test_native_storm.py`` runs it in a fresh process per
backend. ``EVENTAPI_STORM_SECONDS`` sets how long the storm lasts (default 20 s).

A second process (this file, run as ``native_storm.py signals PID SECONDS``) sends this one a
SIGINT, then another 0 to 1 ms later (at random), until the storm is over. Every other thread
blocks SIGINT, so each lands on the main thread, where its handler raises KeyboardInterrupt.
Meanwhile:

* the main thread, in a loop, creates an event and a stream, records the event, records a
  fence, makes a profiler with its own stream and opens a window on it, makes a profiler on
  the stream and times a window there, and drops them all to their finalizers (no close, no
  destroy), catching the KeyboardInterrupt wherever it lands: in a create, in a fence's or a
  profiler's constructor, in a finalizer (where Python reports it as unraisable), or in the
  loop's own code;
* one thread records fences into a stream of its own, waits on each and closes it;
* one thread opens and stops profiler windows, and collects them.

Once the storm is over and the threads are joined, nothing is left: the backend object (built
directly) counts nothing live after a collection, and once it is dropped and collected (its
spare events go with it, and CUDA's primary context), the driver holds as many events, streams
and context references as before. Prints one line of JSON (what was made, where the interrupts
landed, the counts) and exits 1 when anything failed.
"""

from __future__ import annotations

import faulthandler
import gc
import json
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections import Counter
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, cast

from emulated_driver import DriverName, EmulatedDriver

import eventapi
from eventapi import EventFence, EventProfiler

if TYPE_CHECKING:
    # Typed as cuda's: HipBackend has the same calls.
    from eventapi_cuda import CudaBackend as Backend

SECONDS = float(os.environ.get("EVENTAPI_STORM_SECONDS", "20"))
GAP_S = 0.001  # the longest gap between two signals
HANG_S = 60.0  # beyond the storm: far more than the rest takes (seconds)
SONAMES: dict[DriverName, str] = {"cuda": "libcuda.so.1", "hip": "libamdhip64.so"}
# The one warning the storm makes on purpose: each profiler the main thread drops.
DROPPED_PROFILER = "EventProfiler dropped without close()"
EVENTAPI = eventapi.__path__[0]  # where its modules are: an interrupt there is "in eventapi"


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


class Interrupts:
    """The main thread's SIGINT handler: KeyboardInterrupt, as Python's own, while armed.

    Armed only inside the loop's ``try`` (the first statement in it arms, the first in its
    ``except`` and its ``finally`` disarm; CPython runs a handler only at a call, a backward
    jump or a function's start, never between those stores and the ``try``'s edges), so every
    KeyboardInterrupt is raised where the loop catches it. A signal handled while disarmed, in
    the loop's own bookkeeping, is counted and ignored.
    """

    def __init__(self) -> None:
        self.armed = False
        self.ignored = 0

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.armed:
            raise KeyboardInterrupt
        self.ignored += 1


def _where(traceback: TracebackType | None) -> str:
    # The frame the interrupt landed in, the one the handler (the innermost frame) ran from:
    # eventapi's code, or the loop's.
    filenames = []
    while traceback is not None:
        filenames.append(traceback.tb_frame.f_code.co_filename)
        traceback = traceback.tb_next
    return "in eventapi" if filenames[-2].startswith(EVENTAPI) else "in the loop"


def _make_and_drop(api: Backend) -> None:
    # Everything dropped, none closed: the finalizers release it (some of them interrupted).
    event = api.event_create()
    stream = api.stream_create_non_blocking()
    api.event_record(event, stream)
    fence = EventFence.record(api, stream)
    own = EventProfiler(api)
    window = own.start("open")
    shared = EventProfiler(api, stream)
    with shared.window("stopped"):
        pass
    del event, fence, window, own, shared, stream


def _storm(api: Backend, interrupts: Interrupts, deadline: float, made: Counter[str]) -> None:
    while time.monotonic() < deadline:
        try:
            interrupts.armed = True
            _make_and_drop(api)
            made["iterations"] += 1
        except KeyboardInterrupt as exc:
            interrupts.armed = False
            made[_where(exc.__traceback__)] += 1
        finally:
            interrupts.armed = False


def _blocking_sigint() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def _fences(api: Backend, stop: threading.Event, made: Counter[str]) -> None:
    _blocking_sigint()
    stream = api.stream_create_non_blocking()
    while not stop.is_set():
        fence = EventFence.record(api, stream)
        fence.wait()
        fence.close()
        made["fences"] += 1
    api.stream_destroy(stream)


def _windows(api: Backend, stop: threading.Event, made: Counter[str]) -> None:
    _blocking_sigint()
    with EventProfiler(api) as profiler:
        while not stop.is_set():
            with profiler.window("worker"):
                pass
            made["windows"] += 1
            if made["windows"] % 16 == 0:
                made["spans"] += len(profiler.collect())


class Lines(logging.Handler):
    """eventapi's log lines, kept without the lock a handler takes: a KeyboardInterrupt between
    its acquire and its try would leave that lock held for good."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: Counter[str] = Counter()

    def handle(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        self.lines[DROPPED_PROFILER if DROPPED_PROFILER in message else message] += 1
        return True

    def emit(self, record: logging.LogRecord) -> None:
        self.handle(record)


def send(pid: int, seconds: float) -> None:
    """The storm: SIGINT to ``pid``, 0 to 1 ms apart, for ``seconds`` from the line on stdin."""
    sys.stdin.readline()
    rng = random.Random()
    sent = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        os.kill(pid, signal.SIGINT)
        sent += 1
        time.sleep(rng.uniform(0, GAP_S))  # spaces the signals out; nothing waits on it
    print(sent)


class Observed:
    """What no call returns: eventapi's log lines, the exceptions finalizers raised (an
    interrupt landing in one is reported as unraisable) and those a thread let escape."""

    def __init__(self) -> None:
        self.lines = Lines()
        logger = logging.getLogger("eventapi")
        logger.addHandler(self.lines)
        logger.propagate = False
        logger.isEnabledFor(logging.WARNING)  # cached now, not under the logging lock mid-storm
        # A hook in C: a Python one would run the handler at its first line, and raise there.
        self.unraisable: list[sys.UnraisableHookArgs] = []
        sys.unraisablehook = self.unraisable.append
        self.escaped: list[str] = []
        threading.excepthook = lambda hook: self.escaped.append(
            f"{hook.exc_type.__name__}: {hook.exc_value}"
        )

    def finalizers(self) -> Counter[str]:
        """The exceptions finalizers raised, by type; what they held (a finalizer's frame and
        the objects in it) is let go."""
        raised = Counter(hook.exc_type.__name__ for hook in self.unraisable)
        sys.unraisablehook = sys.__unraisablehook__
        self.unraisable.clear()
        return raised

    def failures(self, finalizers: Counter[str]) -> list[str]:
        failures = [f"a thread raised {line}" for line in self.escaped]
        failures += [
            f"unraisable {name} x{count}"
            for name, count in finalizers.items()
            if name != "KeyboardInterrupt"
        ]
        failures += [
            f"logged {line!r} x{count}"
            for line, count in self.lines.lines.items()
            if line != DROPPED_PROFILER
        ]
        return failures


def _storm_beside_threads(api: Backend) -> tuple[Counter[str], int, int]:
    """The storm, the two threads beside it; what was made, the signals sent, and ignored."""
    interrupts = Interrupts()
    signal.signal(signal.SIGINT, interrupts)
    made: Counter[str] = Counter()
    stop = threading.Event()
    workers = [
        threading.Thread(target=work, args=(api, stop, made), name=work.__name__)
        for work in (_fences, _windows)
    ]
    for worker in workers:
        worker.start()
    sender = subprocess.Popen(
        [sys.executable, __file__, "signals", str(os.getpid()), str(SECONDS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert sender.stdin is not None
    assert sender.stdout is not None
    sender.stdin.write("go\n")
    sender.stdin.close()
    _storm(api, interrupts, time.monotonic() + SECONDS, made)
    sent = int(sender.stdout.read())
    sender.wait()
    signal.signal(signal.SIGINT, signal.default_int_handler)  # the storm is over
    stop.set()
    for worker in workers:
        worker.join()
    return made, sent, interrupts.ignored


def main(kind: DriverName) -> int:
    preloaded = os.environ.get("LD_PRELOAD", "")
    if SONAMES[kind] not in preloaded:
        sys.exit(f"run with the emulated {kind} driver preloaded (LD_PRELOAD), not {preloaded!r}")
    faulthandler.dump_traceback_later(SECONDS + HANG_S, exit=True)
    # The library already loaded (preloaded), found by its soname: its counts are the driver's.
    emu = EmulatedDriver(kind, Path(SONAMES[kind]))
    observed = Observed()
    before = _driver_counts(emu)
    api = _backend(kind)
    # Once before the storm, and before the threads: what the first profiler imports (nvtx,
    # numpy) is imported now. importlib's own Python code is not safe against an interrupt: one
    # landing between its take of the import lock and its try leaves the lock held, and the
    # next thread to import waits for it for good.
    _make_and_drop(api)
    made, sent, ignored = _storm_beside_threads(api)
    finalizers = observed.finalizers()
    gc.collect()
    live = list(api.live_handles())
    gone = weakref.ref(api)
    del api
    gc.collect()
    after = _driver_counts(emu)

    failures = observed.failures(finalizers)
    if not made["in eventapi"] or not finalizers["KeyboardInterrupt"]:
        failures.append("no interrupt landed in eventapi's code, or none in a finalizer")
    if not made["iterations"] or not made["fences"] or not made["windows"]:
        failures.append(f"a thread made nothing: {dict(made)}")
    if live != [0, 0]:
        failures.append(f"the backend object counts {live} live (events, streams)")
    if gone() is not None:
        failures.append("the backend object outlived its last reference")
    if after != before:
        failures.append(f"the driver holds {after} (events, streams, contexts), not {before}")
    print(
        json.dumps(
            {
                "kind": kind,
                "seconds": SECONDS,
                "signals": sent,
                "ignored": ignored,
                "made": dict(made),
                "unraisable": dict(finalizers),
                "driver_before": before,
                "driver_after": after,
                "failures": failures,
            }
        )
    )
    return 1 if failures else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["signals"]:
        send(int(sys.argv[2]), float(sys.argv[3]))
    elif len(sys.argv) == 2 and sys.argv[1] in SONAMES:
        sys.exit(main(sys.argv[1]))
    else:
        sys.exit(f"usage: {sys.argv[0]} cuda|hip")
