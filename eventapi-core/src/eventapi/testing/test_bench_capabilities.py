"""What :func:`eventapi.bench` asks of a backend: a cold cache and the device's clocks.

``SupportsCacheFlush`` and ``SupportsClocks``, each tested where the backend declares it.
"""

from __future__ import annotations

import pytest

from eventapi import DeviceClocks, EventStateError, UnsupportedError

from ._kit import Kit

FLUSHES = 3


def test_a_cache_flush_is_enqueued_in_order_and_its_buffer_released(
    eventapi_kit: Kit, eventapi_stream: object
) -> None:
    eventapi_kit.require("SupportsCacheFlush")
    api = eventapi_kit.api
    size = eventapi_kit.call(api.cache_size_bytes)
    assert type(size) is int, f"cache_size_bytes returned {size!r}, not an int"
    assert size > 0, f"cache_size_bytes returned {size}: a device's L2 holds some bytes"
    buffer = eventapi_kit.call(api.cache_flush_create)
    try:
        if eventapi_kit.has("SupportsHostFunc"):
            # Enqueued, not run: behind a held stream the flush returns, and what follows it
            # waits for it.
            hold = eventapi_kit.hold(eventapi_stream)
            eventapi_kit.call(api.stream_flush_cache, eventapi_stream, buffer)
            after = eventapi_kit.recorded(eventapi_stream)
            eventapi_kit.assert_unreached(after, hold)
            hold.release()
            eventapi_kit.call(api.event_wait, after)
        for _ in range(FLUSHES):
            eventapi_kit.call(api.stream_flush_cache, eventapi_stream, buffer)
        eventapi_kit.reached(eventapi_stream)
        eventapi_kit.call(api.stream_synchronize, eventapi_stream)
    finally:
        eventapi_kit.call(api.cache_flush_destroy, buffer)
    eventapi_kit.call(api.cache_flush_destroy, buffer)  # a second destroy is a no-op
    with pytest.raises(EventStateError):
        eventapi_kit.call(api.stream_flush_cache, eventapi_stream, buffer)


def test_a_cache_flush_refuses_what_is_no_buffer_of_the_backend(
    eventapi_kit: Kit, eventapi_stream: object
) -> None:
    eventapi_kit.require("SupportsCacheFlush")
    api = eventapi_kit.api
    with pytest.raises(EventStateError):
        eventapi_kit.call(api.stream_flush_cache, eventapi_stream, object())
    with pytest.raises(EventStateError):
        eventapi_kit.call(api.cache_flush_destroy, object())


def test_the_device_clocks_read_as_megahertz_and_reasons(eventapi_kit: Kit) -> None:
    eventapi_kit.require("SupportsClocks")
    api = eventapi_kit.api
    try:
        clocks = eventapi_kit.call(api.device_clocks)
    except UnsupportedError as exc:  # the capability's own way to say it cannot here
        pytest.skip(str(exc))
    assert isinstance(clocks, DeviceClocks), f"device_clocks returned {clocks!r}"
    for mhz in (clocks.clock_mhz, clocks.max_clock_mhz):
        assert type(mhz) is int, clocks
        assert mhz > 0, clocks
    assert isinstance(clocks.throttle_reasons, tuple), clocks
    assert all(isinstance(r, str) and r for r in clocks.throttle_reasons), clocks
    again = eventapi_kit.call(api.device_clocks)
    assert again.max_clock_mhz == clocks.max_clock_mhz, "the maximum clock moved between reads"
