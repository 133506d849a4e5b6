"""The framework examples' profiling code, run on the emulated ``cuda`` driver.

``examples/torch_stream.py`` and ``examples/cupy_stream.py`` need a GPU for their framework,
so their scripts exit 77 here; the part of them that uses eventapi is a function taking the
stream and the work, and this runs that same function. The stream is a foreign one, as
PyTorch's and CuPy's are: a cuda.core stream (a real library speaking ``__cuda_stream__``, on
the real binding over the emulated libcuda) or a raw driver handle. The work is a host function
of known duration on that stream, standing in for the matmul kernel.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import cupy_stream
import pytest
import torch_stream
from emulated_driver import EmulatedDriver

import eventapi

WORK_S = 0.002
"""Each piece of work: a host function sleeping this long on the stream."""

_UINT64 = (1 << 64) - 1

TICK_NS = 500
"""The emulated driver's timer resolution (0.5 us, as CUDA's), by which a reading may fall
short of the sleep."""

EXAMPLES: dict[str, Callable[..., eventapi.Stats]] = {
    "torch_stream": torch_stream.time_matmul,
    "cupy_stream": cupy_stream.time_matmul,
}


class SleepOn:
    """The stand-in for the example's matmul: each call enqueues a known delay onto ``stream``,
    a host function that notes on the host clock (the one the emulated driver stamps with)
    when its sleep began and ended."""

    def __init__(self, api: Any, stream: object) -> None:
        self.api = api
        self.stream = stream
        self.slept: list[tuple[int, int]] = []

    def __call__(self) -> None:
        self.api.stream_launch_host_func(self.stream, self._sleep)

    def _sleep(self) -> None:
        began = time.perf_counter_ns()
        time.sleep(WORK_S)
        self.slept.append((began, time.perf_counter_ns()))


def assert_timed_the_work(stats: eventapi.Stats, work: SleepOn, called: int, returned: int) -> None:
    """Each window read its own piece of work: at least the sleep, as the sleep timed itself,
    and at most from the end of the piece before (or the call) to the start of the piece after
    (or the return), the stream running in order. ``called`` and ``returned`` bracket the
    example's call on the host clock."""
    repeats = len(work.slept)
    assert stats.count == repeats
    # A window on any other stream would read about zero.
    assert stats.min_ns >= min(end - began for began, end in work.slept) - TICK_NS, stats
    ends = [called, *(end for _, end in work.slept)]
    begins = [*(began for began, _ in work.slept), returned]
    rooms = sorted(begins[i + 1] - ends[i] for i in range(repeats))
    # Bounds this run measured: a loaded machine that stalls the stream widens them too. The
    # first window's room holds the profiler's start-up, the others only their piece; each
    # reading within its room puts the k-th smallest reading within the k-th smallest room,
    # which the minimum, the median (the lower middle one) and the maximum show.
    assert stats.min_ns <= rooms[0] + TICK_NS, (stats, rooms)
    assert stats.median_ns <= rooms[(repeats - 1) // 2] + TICK_NS, (stats, rooms)
    assert stats.max_ns <= rooms[-1] + TICK_NS, (stats, rooms)


@pytest.mark.parametrize("as_handle", [False, True], ids=["stream-object", "raw-handle"])
@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_times_work_on_a_framework_stream(
    emu_cuda: EmulatedDriver, example: str, as_handle: bool
) -> None:
    from cuda.core import Device

    device = Device(0)
    device.set_current()
    api: Any = eventapi.backend("cuda")
    theirs = device.create_stream()
    try:
        # As the example passes torch's or CuPy's stream object, or its integer handle (which
        # cuda.core gives signed: the emulated handles have the top bit set).
        stream: object = theirs.__cuda_stream__()[1] & _UINT64 if as_handle else theirs
        work = SleepOn(api, stream)
        called = time.perf_counter_ns()
        stats = EXAMPLES[example](api, stream, work, repeats=4)
        returned = time.perf_counter_ns()  # the summary was read: every window was reached
        theirs.sync()  # the stream is still the framework's, and it works
    finally:
        theirs.close()
    assert len(work.slept) == 4
    assert_timed_the_work(stats, work, called, returned)
