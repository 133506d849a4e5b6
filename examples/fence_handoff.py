"""A fence guarding a buffer handed to another thread.

The producer enqueues work that fills a buffer, records a fence after it and hands both to a
consumer thread through a queue; the consumer waits for the fence (not for the whole stream)
before it reads. ``keep_alive`` keeps the buffer referenced until the device is done with it,
even if the producer drops its own reference at once.

Run: ``python examples/fence_handoff.py`` (``EVENTAPI_BACKEND=cuda`` to choose a backend).
"""

from __future__ import annotations

import functools
import queue
import threading
from typing import Any

import eventapi


def fill(buffer: bytearray) -> None:
    buffer[:] = b"\1" * len(buffer)


def main() -> None:
    api = eventapi.backend()
    stream = api.stream_create_non_blocking()
    handoff: queue.Queue[tuple[bytearray, eventapi.EventFence[Any, Any]]] = queue.Queue()
    results: list[int] = []

    def consumer() -> None:
        buffer, fence = handoff.get()
        with fence:
            fence.wait(timeout=30.0)  # the device has finished writing `buffer`
            results.append(sum(buffer))

    thread = threading.Thread(target=consumer)
    thread.start()
    try:
        buffer = bytearray(1024)
        if isinstance(api, eventapi.SupportsHostFunc):
            # Stands for a kernel writing the buffer: runs when the stream reaches it.
            api.stream_launch_host_func(stream, functools.partial(fill, buffer))
        else:
            fill(buffer)  # no host functions here: the "device" wrote it already
        fence = eventapi.EventFence.record(api, stream, keep_alive=(buffer,))
        handoff.put((buffer, fence))
        del buffer  # the fence keeps it alive until the device is done with it
        thread.join()
    finally:
        api.stream_destroy(stream)
    assert results == [1024], results
    print(f"{api.BACKEND}: consumer read {results[0]} bytes after the fence")


if __name__ == "__main__":
    main()
