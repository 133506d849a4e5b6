"""Running a blocking call on its own thread, for tests that wait from other threads.

A :class:`Waiter` starts at once, notes the host time its call returned or the exception it
raised, and :meth:`Waiter.join` fails the test if the call never comes back. Tests release
whatever holds the call (a gate a host function blocks on) and then join: no sleeps.
"""

from __future__ import annotations

import gc
import sys
import threading
import time
from collections.abc import Callable, Iterable
from types import FrameType
from typing import final

JOIN_S = 10.0  # generous: every call here is released by the test itself, not by time


@final
class Waiter:
    """``fn()`` on a new daemon thread; ``value`` and ``returned_ns``, or ``error``, once done."""

    __slots__ = ("error", "returned_ns", "thread", "value")

    def __init__(self, fn: Callable[[], object]) -> None:
        self.value: object = None
        self.returned_ns: int | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn: Callable[[], object]) -> None:
        try:
            self.value = fn()
        except BaseException as exc:  # handed to the test by result()
            self.error = exc
            return
        self.returned_ns = time.perf_counter_ns()

    def join(self) -> None:
        """Wait for the call; fail if it has not returned within :data:`JOIN_S`."""
        self.thread.join(JOIN_S)
        assert not self.thread.is_alive(), f"the call on {self.thread.name} never returned"

    def result(self) -> int:
        """Join, re-raise what the call raised, else return when it returned."""
        self.join()
        if self.error is not None:
            raise self.error
        assert self.returned_ns is not None
        return self.returned_ns


def release_and_join(gate: threading.Event, waiters: Iterable[Waiter]) -> tuple[int, list[int]]:
    """Open ``gate`` and wait for every waiter; return the release time and their return times."""
    released = time.perf_counter_ns()
    gate.set()
    return released, [waiter.result() for waiter in waiters]


def _frame_of(thread: threading.Thread) -> FrameType | None:
    # sys._current_frames() with the garbage collector off: CPython 3.11 holds its lock on the
    # list of thread states while it builds the frames' objects, and a collection started by one
    # of those allocations that frees a threading.local (a backend's, in a reference cycle)
    # takes that lock again, and the interpreter deadlocks (seen in this suite).
    enabled = gc.isenabled()
    gc.disable()
    try:
        return sys._current_frames().get(thread.ident or 0)
    finally:
        if enabled:
            gc.enable()


def blocked_in(thread: threading.Thread, function: str) -> bool:
    """True once ``thread`` is inside a function named ``function``; False after :data:`JOIN_S`.

    Polls the thread's stack: for a call that blocks where no event of the test's own can say
    it got there (inside a backend's wait, say).
    """
    deadline = time.monotonic() + JOIN_S
    while time.monotonic() < deadline:
        frame = _frame_of(thread)
        while frame is not None:
            if frame.f_code.co_name == function:
                return True
            frame = frame.f_back
        time.sleep(0.001)
    return False


def settles(condition: Callable[[], bool]) -> bool:
    """True once ``condition()`` holds; False if it still does not after :data:`JOIN_S`.

    For what another thread finishes on its own after the test's last call returned (a host
    function an earlier test left queued behind a stream's work, say): the deadline only
    bounds a hang.
    """
    deadline = time.monotonic() + JOIN_S
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)
    return True
