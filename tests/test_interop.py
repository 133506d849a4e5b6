"""Streams crossing between eventapi and another library, through ``__cuda_stream__``.

The foreign library is a real one: NVIDIA's cuda.core, running through the real
``cuda.bindings`` on the emulated libcuda, in both directions: a cuda.core stream fenced and
timed by eventapi, and an eventapi stream adopted by cuda.core. HIP has no such library that
runs here, so its side is checked with a stream object that speaks only the protocol, as
PyTorch and CuPy built for ROCm do. Every test ends with as many live events and streams in
the emulated driver as it started with.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from emulated_driver import DriverName, EmulatedDriver, load
from threads import JOIN_S

import eventapi
from eventapi import EventFence, EventProfiler, EventStateError
from eventapi.host import HostBackend

_UINT64 = (1 << 64) - 1


@pytest.fixture
def device() -> Any:
    from cuda.core import Device

    dev = Device(0)
    dev.set_current()
    return dev


def _hold(api: Any, stream: object) -> threading.Event:
    """Hold ``stream`` with a host function until the returned gate is set."""
    gate = threading.Event()
    api.stream_launch_host_func(stream, lambda: gate.wait(JOIN_S))
    return gate


def test_a_cuda_core_stream_is_fenced_and_timed_by_eventapi(
    emu_cuda: EmulatedDriver, device: Any
) -> None:
    api: Any = eventapi.backend("cuda")
    theirs = device.create_stream()
    try:
        # The emulated handles have the top bit set, and cuda.core gives them as a negative
        # int: the handle eventapi adopts must still be the stream's own address.
        _, exported = theirs.__cuda_stream__()
        adopted = api.adopt_stream(theirs)
        assert int(adopted.raw) == exported & _UINT64
        gate = _hold(api, theirs)
        fence = EventFence.record(api, theirs)
        with EventProfiler(api, theirs) as profiler:
            with profiler.window("theirs"):
                pass
            assert not fence.reached(), "the fence went into another stream than cuda.core's"
            gate.set()
            fence.wait()
            fence.close()
            (span,) = profiler.collect()
        assert span.name == "theirs"
        assert span.duration_ns >= 0
        theirs.sync()  # cuda.core still owns a working stream: eventapi destroyed nothing
    finally:
        theirs.close()
    assert api.live_handles() == (0, 0)


def test_an_eventapi_stream_is_adopted_by_cuda_core(emu_cuda: EmulatedDriver, device: Any) -> None:
    api: Any = eventapi.backend("cuda")
    ours = api.stream_create_non_blocking()
    try:
        assert ours.__cuda_stream__() == (0, int(ours.raw))
        theirs = device.create_stream(ours)
        gate = _hold(api, ours)
        event = theirs.record()
        # cuda.core's event went into eventapi's stream, behind the held host function.
        assert not event.is_done
        gate.set()
        event.sync()
        assert event.is_done
        event.close()
        # The stream is eventapi's: cuda.core's close releases its wrapper, not the stream,
        # which eventapi can still use and then destroys.
        theirs.close()
        with EventFence.record(api, ours) as fence:
            fence.wait()
    finally:
        api.stream_destroy(ours)


class _ProtocolOnly:
    """A framework's stream as eventapi sees it; ``sign`` makes its handle negative."""

    def __init__(self, handle: int, *, negative: bool) -> None:
        self._handle = handle - (1 << 64) if negative else handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self._handle)


@pytest.mark.parametrize("kind", ["cuda", "hip"])
@pytest.mark.parametrize("negative", [False, True], ids=["unsigned", "signed"])
def test_a_stream_handed_out_comes_back_as_the_same_stream(
    kind: DriverName, negative: bool
) -> None:
    """What one library exports, another adopts as the same stream, however it signs it."""
    emu = load(kind)
    before = emu.live_handles()
    api: Any = eventapi.backend(kind)
    ours = api.stream_create_non_blocking()
    try:
        version, handle = ours.__cuda_stream__()
        assert version == 0
        # Emulated handles have the top bit set: the signed spelling really is negative.
        assert handle >= 1 << 63
        foreign = _ProtocolOnly(handle, negative=negative)
        assert int(api.adopt_stream(foreign).raw) == int(ours.raw)
        gate = _hold(api, ours)
        with EventFence.record(api, foreign) as fence:
            assert not fence.reached(), "the fence went into another stream"
            gate.set()
            fence.wait()
    finally:
        api.stream_destroy(ours)
    after = emu.live_handles()
    assert (after.events, after.streams) == (before.events, before.streams)


@pytest.mark.parametrize("kind", ["cuda", "hip"])
def test_a_destroyed_stream_refuses_to_export_its_handle(kind: DriverName) -> None:
    load(kind)
    api: Any = eventapi.backend(kind)
    ours = api.stream_create_non_blocking()
    export = ours.__cuda_stream__
    api.stream_destroy(ours)
    with pytest.raises(EventStateError, match="destroyed"):
        export()
    with pytest.raises(EventStateError, match="destroyed"):
        ours.__cuda_stream__()


def test_a_host_stream_does_not_claim_the_protocol() -> None:
    api = HostBackend()
    ours = api.stream_create_non_blocking()
    try:
        # A framework tests for the attribute: a host stream must not pass for a CUDA one.
        assert not hasattr(ours, "__cuda_stream__")
    finally:
        api.stream_destroy(ours)
