"""How a profiler is used: as a decorator, from one thread at a time, read as a table, closed.

Each behaviour here is one a PyTorch or CuPy user expects (``record_function`` works as a
decorator, ``key_averages().table()`` prints) or one a server needs (a collector thread that is
handed the profiler, a Ctrl-C during ``close()``), on the ``host`` backend.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from threads import JOIN_S, Waiter, blocked_in

from eventapi import EventProfiler, EventStateError
from eventapi.host import HostBackend


@pytest.fixture
def api() -> Iterator[HostBackend]:
    backend = HostBackend()
    yield backend
    assert backend.live_handles() == (0, 0), "the test leaked handles"


def _hold(api: HostBackend, stream: object) -> threading.Event:
    """Hold ``stream`` in a host function until the returned event is set."""
    gate = threading.Event()
    api.stream_launch_host_func(stream, lambda: gate.wait(JOIN_S))
    return gate


# -- window(): opened when entered, and a decorator ---------------------------------------------


def test_a_window_records_when_entered_not_when_made(api: HostBackend) -> None:
    with EventProfiler(api) as prof:
        made = prof.window("later")
        assert not made.stopped
        assert api.live_handles().events == 0  # nothing recorded, nothing created
        with pytest.raises(EventStateError, match="never opened"):
            made.stop()
        with made:
            assert api.live_handles().events == 1
            assert made.depth == 0
        assert [span.name for span in prof.collect()] == ["later"]


def test_a_window_decorates_a_function_with_a_fresh_window_per_call(api: HostBackend) -> None:
    with EventProfiler(api) as prof:

        @prof.window("step")
        def step(n: int) -> int:
            """Double n."""
            return 2 * n

        assert step.__name__ == "step"
        assert step.__doc__ == "Double n."
        with prof.window("epoch"):
            assert [step(n) for n in range(3)] == [0, 2, 4]
        spans = prof.collect()
    assert [(span.name, span.depth) for span in spans] == [
        ("epoch", 0),
        ("step", 1),
        ("step", 1),
        ("step", 1),
    ]


def test_only_a_window_not_opened_decorates(api: HostBackend) -> None:
    with EventProfiler(api) as prof:
        opened = prof.start("open")
        with pytest.raises(TypeError, match=r"@profiler.window\(name\)"):
            opened(lambda: None)
        opened.stop()


def test_a_decorated_call_that_raises_still_closes_its_window(api: HostBackend) -> None:
    with EventProfiler(api) as prof:

        @prof.window("fails")
        def fails() -> None:
            raise RuntimeError("boom")

        with pytest.raises(RuntimeError, match="boom"):
            fails()
        assert [span.name for span in prof.collect()] == ["fails"]


# -- one thread at a time ---------------------------------------------------------------------


@contextmanager
def _on_a_stream_of_its_own(api: HostBackend) -> Iterator[tuple[EventProfiler[Any, Any], Any]]:
    """A profiler on a stream the test creates, yielded with it; the stream is destroyed after."""
    stream = api.stream_create_non_blocking()
    try:
        with EventProfiler(api, stream) as prof:
            yield prof, stream
    finally:
        api.stream_destroy(stream)


def test_a_second_thread_is_refused_while_one_is_inside_and_nothing_is_lost(
    api: HostBackend,
) -> None:
    with _on_a_stream_of_its_own(api) as (prof, stream):
        prof.start("before").stop()
        gate = _hold(api, stream)
        prof.start("held").stop()  # its end waits behind the host function
        collector = Waiter(prof.collect)  # blocks in the wait, inside the profiler
        # The collector is inside collect() once the profiler refuses this thread.
        deadline = time.monotonic() + JOIN_S
        while True:
            try:
                prof.start("racing").stop()
            except EventStateError as exc:
                refused = str(exc)
                break
            assert time.monotonic() < deadline, "the collector never entered collect()"
        assert "EventProfiler.start refused" in refused
        assert "EventProfiler.collect" in refused
        with pytest.raises(EventStateError, match=r"summary refused.*collect"):
            prof.summary()
        gate.set()
        collector.result()
        # Every window that was stopped is read back, once: those before the refusals,
        # and any "racing" one that got in before the collector did.
        names = [span.name for span in prof.spans]
        assert names[:2] == ["before", "held"]
        assert set(names[2:]) <= {"racing"}
        assert sum(stats.count for stats in prof.summary().values()) == len(names)


def test_a_window_exit_refused_while_another_thread_collects_changes_nothing(
    api: HostBackend,
) -> None:
    # A with block left by an exception abandons the windows still open inside it; while
    # another thread is inside the profiler that exit is refused, and so is the abandon.
    with _on_a_stream_of_its_own(api) as (prof, stream):
        gate = _hold(api, stream)
        prof.start("held").stop()  # its end waits behind the host function
        outer = prof.start("outer")
        inner = prof.start("inner")
        collector = Waiter(prof.collect)
        assert blocked_in(collector.thread, "event_wait"), "the collector never waited"
        error = ValueError("raised inside the with block")
        with pytest.raises(EventStateError, match=r"Window.stop refused.*collect"):
            outer.__exit__(ValueError, error, None)
        assert not inner.stopped
        assert not outer.stopped
        gate.set()
        collector.result()
        inner.stop()
        outer.stop()
        assert [span.name for span in prof.collect()] == ["outer", "inner"]


def test_a_profiler_handed_to_another_thread_works_there(api: HostBackend) -> None:
    prof = EventProfiler(api)
    for _ in range(3):
        with prof.window("step"):
            pass
    collected = Waiter(prof.collect)
    collected.result()
    assert isinstance(collected.value, list)
    assert [span.name for span in collected.value] == ["step"] * 3
    closer = Waiter(prof.close)
    closer.result()
    assert prof.closed


# -- close, interrupted ---------------------------------------------------------------------------


class InterruptOnce:
    """The host backend, whose next ``event_wait`` raises KeyboardInterrupt: Ctrl-C in a wait."""

    def __init__(self, inner: HostBackend) -> None:
        self.inner = inner
        self.armed = False

    def event_wait(self, event: Any) -> None:
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt
        self.inner.event_wait(event)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_an_interrupted_close_keeps_what_was_stopped(api: HostBackend) -> None:
    wrapped = InterruptOnce(api)
    prof: EventProfiler[Any, Any] = EventProfiler(wrapped)
    for name in ("a", "b"):
        prof.start(name).stop()
    wrapped.armed = True
    with pytest.raises(KeyboardInterrupt):
        prof.close()
    closed: bool = prof.closed  # read through a name: mypy would narrow the property
    assert not closed  # nothing was released: a later close reads the windows
    assert {name: stats.count for name, stats in prof.summary().items()} == {"a": 1, "b": 1}
    prof.close()
    closed = prof.closed
    assert closed
    assert {name: stats.count for name, stats in prof.summary().items()} == {"a": 1, "b": 1}


# -- the table ------------------------------------------------------------------------------------


def _sleeper(seconds: float) -> Callable[[], None]:
    return lambda: time.sleep(seconds)


def test_the_table_lists_names_by_total_with_a_unit_per_column(api: HostBackend) -> None:
    with EventProfiler(api, label="train") as prof:
        for name, repeats, delay_s in (("short", 3, 0.0), ("long", 1, 0.002)):
            for _ in range(repeats):
                with prof.window(name):
                    api.stream_launch_host_func(prof.stream, _sleeper(delay_s))
        text = prof.table()
        totals = {name: stats.total_ns for name, stats in prof.summary().items()}
        lines = text.splitlines()
    assert lines[0] == "train: 2 names, 4 windows"
    header = lines[1].split()
    assert header[:2] == ["name", "count"]
    assert "total" in header
    # The largest total first. Which one that is, is the device's: the three empty windows
    # usually take less than the one 2 ms sleep, but a loaded machine can stretch them past it.
    first, second = sorted(totals, key=totals.__getitem__, reverse=True)
    counts = {"short": "3", "long": "1"}
    assert lines[3].split()[:2] == [first, counts[first]], totals
    assert lines[4].split()[:2] == [second, counts[second]], totals
    # The largest total sets the total column's unit: milliseconds for the 2 ms sleep, or
    # seconds where a stalled machine stretched one name's windows past a second.
    unit = "s" if max(totals.values()) >= 1_000_000_000 else "ms"
    assert f"total ({unit})" in lines[1], totals
    by_count = prof.table(sort_by="count", limit=1).splitlines()
    assert by_count[3].split()[0] == "short"
    assert by_count[-1] == "(1 more names not shown)"
    with pytest.raises(ValueError, match="sort_by must be one of"):
        prof.table(sort_by="speed")


def test_the_table_of_nothing_says_so(api: HostBackend) -> None:
    with EventProfiler(api) as prof:
        assert prof.table().splitlines()[-1] == "(no window collected yet)"


# -- labels ---------------------------------------------------------------------------------------


def test_the_default_label_cannot_be_read_as_a_device(api: HostBackend) -> None:
    with EventProfiler(api) as one, EventProfiler(api) as two:
        assert one.label.startswith("profiler-")
        assert two.label.startswith("profiler-")
        assert one.label != two.label
        assert ":" not in one.label


def test_a_label_that_is_not_a_string_is_refused_at_once(api: HostBackend) -> None:
    with pytest.raises(TypeError, match="label must be a str"):
        EventProfiler(api, label=object())  # type: ignore[arg-type]
