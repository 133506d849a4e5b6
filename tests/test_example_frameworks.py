"""The framework examples' profiling code, run on the emulated ``cuda`` driver.

``examples/torch_stream.py`` and ``examples/cupy_stream.py`` need a GPU for their framework,
so their scripts exit 77 here; the part of them that uses eventapi is a function taking the
stream and the work, and this runs that same function. The stream is a foreign one, as
PyTorch's and CuPy's are: a cuda.core stream (a real library speaking ``__cuda_stream__``, on
the real binding over the emulated libcuda) or a raw driver handle. The work is a host function
of known duration on that stream, standing in for the matmul kernel.
"""

from __future__ import annotations

import functools
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

SLACK_S = 1.0
"""How much longer than the work a window may read: a loaded 2-core machine can leave the
emulated stream's worker unscheduled for a while between the sleep and the end event."""

_UINT64 = (1 << 64) - 1

TICK_NS = 500
"""The emulated driver's timer resolution (0.5 us, as CUDA's), by which a reading may fall
short of the sleep."""

EXAMPLES: dict[str, Callable[..., eventapi.Stats]] = {
    "torch_stream": torch_stream.time_matmul,
    "cupy_stream": cupy_stream.time_matmul,
}


def sleep_on(api: Any, stream: object) -> Callable[[], None]:
    """The stand-in for the example's matmul: enqueue a known delay onto ``stream``."""
    return lambda: api.stream_launch_host_func(stream, functools.partial(time.sleep, WORK_S))


def assert_timed_the_work(stats: eventapi.Stats, repeats: int) -> None:
    # Each window holds one sleep: a window on any other stream would read about zero.
    assert stats.count == repeats
    assert stats.min_ns >= WORK_S * 1e9 - TICK_NS, stats
    assert stats.max_ns < (WORK_S + SLACK_S) * 1e9, stats


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
        stats = EXAMPLES[example](api, stream, sleep_on(api, stream), repeats=4)
        theirs.sync()  # the stream is still the framework's, and it works
    finally:
        theirs.close()
    assert_timed_the_work(stats, 4)
