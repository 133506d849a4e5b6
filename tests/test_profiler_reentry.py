"""A window stopped is a span delivered, even when a signal handler or a finalizer stopped it.

A handler runs on the main thread between two bytecodes, wherever that thread is: inside
``collect()`` too, while it waits for the stream. Windows the handler (or a finalizer it sets
off) opens and stops there are kept for the next collect, never dropped with the batch being
read; a reader the handler calls is refused, naming the one it interrupted. The scenario runs
on ``host`` and on emulated ``cuda`` and ``hip``, in a child each, where an
unread window's events are real driver events (reading one too early says "not ready").
"""

from __future__ import annotations

import textwrap
from typing import cast

import pytest
from child import run_json
from emulated_driver import DriverName, build, preload_env

# Run as written on every backend: ``api`` is the backend object, and it prints the outcome.
SCENARIO = textwrap.dedent(
    """
    import json, signal, threading
    from eventapi import EventProfiler, EventStateError

    sunk = []
    stream = api.stream_create_non_blocking()
    prof = EventProfiler(api, stream, sink=sunk.append)
    gate, handled = threading.Event(), threading.Event()
    refusals = []


    class OpensAWindowWhenCollected:
        def __del__(self):
            with prof.window("finalizer"):
                pass


    def handler(signo, frame):
        # Inside collect(), which waits for the stream the gate holds.
        with prof.window("handler"):
            prof.start("handler-inner").stop()
        OpensAWindowWhenCollected()  # dropped at once: its finalizer runs here
        try:
            prof.summary()
        except EventStateError as exc:
            refusals.append(str(exc))
        handled.set()


    signal.signal(signal.SIGUSR1, handler)
    main = threading.main_thread().ident


    def interrupt():
        # Once the main thread waits inside collect() (its read of what is pending done), signal
        # it and release the stream.
        import linecache, sys, time
        deadline = time.monotonic() + 30
        waiting = False
        while not waiting and time.monotonic() < deadline:
            frame = sys._current_frames().get(main)
            while frame is not None and not waiting:
                code = frame.f_code
                line = linecache.getline(code.co_filename, frame.f_lineno)
                waiting = code.co_name == "_collect" and "event_wait(" in line
                frame = frame.f_back
            time.sleep(0.001)
        # The handler runs at the main thread's next bytecode: inside the wait where the
        # backend's wait is Python, else as soon as it returns, still inside collect().
        signal.pthread_kill(main, signal.SIGUSR1)
        gate.set()


    outer = prof.start("outer")  # open across the collects: the handler's windows nest in it
    with prof.window("before"):
        api.stream_launch_host_func(stream, lambda: gate.wait(30))
    helper = threading.Thread(target=interrupt)
    helper.start()
    first = [s.name for s in prof.collect()]
    helper.join()
    assert handled.is_set()
    outer.stop()
    second = [(s.name, s.depth) for s in prof.collect()]
    counts = {name: stats.count for name, stats in prof.summary().items()}
    prof.close()
    api.stream_destroy(stream)
    print(json.dumps({
        "first": first,
        "second": second,
        "counts": counts,
        "sunk": [s.name for s in sunk],
        "refusals": refusals,
    }))
    """
)

EXPECTED = {
    "first": ["before"],
    # In the order they opened: outer first, then what the handler opened inside it.
    "second": [["outer", 0], ["handler", 1], ["handler-inner", 2], ["finalizer", 1]],
    "counts": {"before": 1, "outer": 1, "handler": 1, "handler-inner": 1, "finalizer": 1},
    "sunk": ["before", "outer", "handler", "handler-inner", "finalizer"],
}


def _check(outcome: dict[str, object]) -> None:
    refusals = outcome.pop("refusals")
    assert outcome == EXPECTED
    assert isinstance(refusals, list)
    assert len(refusals) == 1
    assert (
        "EventProfiler.summary refused: EventProfiler.collect is running on this thread"
        in (refusals[0])
    )


@pytest.mark.parametrize("backend", ["host", "cuda", "hip"])
def test_windows_a_handler_and_a_finalizer_stop_inside_collect_all_come_back(backend: str) -> None:
    # In a child on every backend: the handler is a setting of the whole process.
    env = None
    if backend != "host":
        build()
        env = preload_env(cast("DriverName", backend))
    _check(run_json(f"import eventapi\napi = eventapi.backend({backend!r})\n" + SCENARIO, env))
