"""Letting other threads run between the queries of a spin, without giving the core away.

A spin that queries an event must let go of the GIL between queries: the stream it waits for
may need it to make progress (the ``host`` backend's worker is a Python thread). The obvious
spellings cost more than the spin saves: ``os.sched_yield()`` hands the core to any other
runnable process for a whole slice (beside two busy processes on two cores, a 0.5 ms wait woke
3.4 ms late), and ``time.sleep(0)`` sleeps for the timer slack (about 80 µs here). A ``select``
on nothing with a zero timeout drops the GIL around a system call that returns at once: under
a microsecond, and the core stays this thread's.
"""

from __future__ import annotations

import select

__all__ = ["release_gil"]


def release_gil() -> None:
    """Drop the GIL and take it back at once; other Python threads may run meanwhile."""
    select.select((), (), (), 0)
