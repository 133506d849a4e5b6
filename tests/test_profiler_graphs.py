"""Windows inside captured graphs: ``EventProfiler(..., in_graphs=True)``, read at each launch.

On ``host`` in this process, the rules (docs/profiling.md, "Windows inside captured graphs"):
one span per window per collect after a launch, of the latest launch; nothing for a collect with
no launch since, nor for a graph never launched; a window half in a capture skipped; the events
released at close. On the emulated ``cuda`` and ``hip`` drivers, in a child process each, a
window around a host node of known delay, launched three times.
"""

from __future__ import annotations

import os
import sys
import textwrap
import time
from typing import Any

import pytest
from child import run_json_and_stderr
from emulated_driver import REPO_ROOT, DriverName, build, preload_env

from eventapi import (
    EventProfiler,
    Span,
    SupportsGraphRecord,
    UnsupportedError,
)
from eventapi.host import HostBackend

LAUNCHES = 3


@pytest.fixture
def host() -> Any:
    api = HostBackend()
    yield api
    assert api.live_handles() == (0, 0), "the test left handles behind"


def _capture(api: HostBackend, stream: Any, prof: EventProfiler[Any, Any], *names: str) -> Any:
    """A graph of one window per name, nested in order; the graph, not launched."""
    api.stream_begin_capture(stream)
    windows = [prof.start(name) for name in names]
    for window in reversed(windows):
        window.stop()
    return api.stream_end_capture(stream)


def test_each_collect_reads_the_latest_launch_once(host: HostBackend) -> None:
    stream = host.stream_create_non_blocking()
    seen: list[Span] = []
    with EventProfiler(host, stream, in_graphs=True, sink=seen.append) as prof:
        graph = _capture(host, stream, prof, "step", "inner")
        assert prof.collect() == [], "a graph never launched gave spans"
        for _ in range(LAUNCHES):
            launched = time.perf_counter_ns()
            host.graph_launch(graph, stream)
            spans = prof.collect()
            assert [(s.name, s.depth) for s in spans] == [("step", 0), ("inner", 1)]
            for span in spans:  # this launch's, not an earlier one's
                assert span.start_ns + span.uncertainty_ns >= launched
        assert prof.collect() == [], "a collect with no launch since gave spans"
        # Overwritten: of three launches between two collects, the latest is read, once.
        for _ in range(3):
            latest = time.perf_counter_ns()
            host.graph_launch(graph, stream)
        (step, _inner) = prof.collect()
        assert step.start_ns + step.uncertainty_ns >= latest
        assert prof.summary()["step"].count == LAUNCHES + 1
        host.graph_destroy(graph)
    assert [s.name for s in seen].count("step") == LAUNCHES + 1
    host.stream_destroy(stream)


def test_a_plain_profiler_still_skips_and_records_nothing(host: HostBackend) -> None:
    stream = host.stream_create_non_blocking()
    marker = host.event_create()
    with EventProfiler(host, stream) as plain:
        host.stream_begin_capture(stream)
        with plain.window("skipped") as window:
            host.event_record_in_graph(marker, stream)  # the graph's only node
        graph = host.stream_end_capture(stream)
        assert window.skipped
        assert plain.skipped == 1
        host.graph_launch(graph, stream)
        assert plain.collect() == []
        assert "1 event-record nodes" in repr(graph)
        host.graph_destroy(graph)
    host.event_destroy(marker)
    host.stream_destroy(stream)


def test_windows_eager_and_in_a_graph_on_one_profiler(host: HostBackend) -> None:
    stream = host.stream_create_non_blocking()
    with EventProfiler(host, stream, in_graphs=True) as prof:
        with prof.window("eager"):
            pass
        graph = _capture(host, stream, prof, "captured")
        with prof.window("after"):
            pass
        host.graph_launch(graph, stream)
        assert [s.name for s in prof.collect()] == ["eager", "after", "captured"]
        host.graph_destroy(graph)
    host.stream_destroy(stream)


def test_a_window_half_in_a_capture_is_skipped(host: HostBackend) -> None:
    stream = host.stream_create_non_blocking()
    with EventProfiler(host, stream, in_graphs=True) as prof:
        before = prof.start("opened before")
        host.stream_begin_capture(stream)
        before.stop()  # its end would be in the graph, its start not
        inside = prof.start("opened inside")
        graph = host.stream_end_capture(stream)
        inside.stop()  # its start is in the graph, its end not
        assert before.skipped
        assert inside.skipped
        assert prof.skipped == 2
        host.graph_launch(graph, stream)
        assert prof.collect() == []
        host.graph_destroy(graph)
    host.stream_destroy(stream)


def test_a_window_in_a_graph_an_exception_left_is_discarded(host: HostBackend) -> None:
    stream = host.stream_create_non_blocking()
    with EventProfiler(host, stream, in_graphs=True) as prof:
        host.stream_begin_capture(stream)

        def fail() -> None:
            with prof.window("outer"):
                prof.start("left open")
                raise RuntimeError("the captured code failed")

        with pytest.raises(RuntimeError):
            fail()
        with prof.window("kept"):
            pass
        graph = host.stream_end_capture(stream)
        host.graph_launch(graph, stream)
        assert [s.name for s in prof.collect()] == ["outer", "kept"]
        host.graph_destroy(graph)
    host.stream_destroy(stream)


def test_close_releases_the_events_of_graphs_launched_or_not(host: HostBackend) -> None:
    stream = host.stream_create_non_blocking()
    prof = EventProfiler(host, stream, in_graphs=True)
    launched = _capture(host, stream, prof, "launched")
    never = _capture(host, stream, prof, "never launched")
    host.graph_launch(launched, stream)
    prof.collect()
    host.graph_launch(launched, stream)
    for graph in (launched, never):
        host.graph_destroy(graph)  # the graphs first, then their profiler
    prof.close()  # reads the last launch into the summary
    assert prof.summary()["launched"].count == 2
    assert "never launched" not in prof.summary()
    host.stream_destroy(stream)


def test_a_collect_inside_a_capture_leaves_its_windows_for_the_next(host: HostBackend) -> None:
    stream = host.stream_create_non_blocking()
    with EventProfiler(host, stream, in_graphs=True) as prof:
        graph = _capture(host, stream, prof, "first")
        host.graph_launch(graph, stream)
        host.stream_begin_capture(stream)
        with prof.window("second"):
            pass
        second = host.stream_end_capture(stream)
        assert [s.name for s in prof.collect()] == ["first"]
        host.graph_launch(second, stream)
        assert [s.name for s in prof.collect()] == ["second"]
        for g in (graph, second):
            host.graph_destroy(g)
    host.stream_destroy(stream)


def test_in_graphs_needs_a_backend_that_records_into_graphs(host: HostBackend) -> None:
    class NoGraphRecord:
        # The host backend's calls with the capability switched off, as a protocol reads None.
        event_record_in_graph = None

    stand_in: Any = NoGraphRecord()
    for name in (
        "BACKEND",
        "event_create",
        "event_destroy",
        "event_record",
        "event_wait",
        "event_elapsed",
        "stream_wait_event",
        "stream_synchronize",
        "stream_create_non_blocking",
        "stream_destroy",
        "stream_is_capturing",
    ):
        setattr(stand_in, name, getattr(host, name))
    assert not isinstance(stand_in, SupportsGraphRecord)
    with pytest.raises(UnsupportedError, match="SupportsGraphRecord"):
        EventProfiler(stand_in, in_graphs=True)
    with pytest.raises(TypeError, match="in_graphs must be a bool"):
        EventProfiler(host, in_graphs=1)  # type: ignore[arg-type]


# -- on the emulated drivers ------------------------------------------------------------------

DELAY_S = 0.005
# The device reads the host node at least as long as the node measured itself, less two ticks
# and the clock's rate over 5 ms (the kit's allowance, test_elapsed.py): 20 us.
DELAY_TOLERANCE_NS = 20_000

# A host node of known delay, launched into the capture through the driver itself (the backend
# refuses a host function on a capturing stream: its own would run once, not at each launch).
_CHILD = textwrap.dedent(
    """
    import ctypes, json, logging, sys, time
    import eventapi
    from eventapi import EventProfiler, SupportsGraphRecord, UnsupportedError

    KIND, BY_CLASS = sys.argv[1], sys.argv[4]
    DELAY_S, LAUNCHES = float(sys.argv[2]), int(sys.argv[3])
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    if BY_CLASS == "1":  # discovery refuses a runtime older than the binding; the class does not
        from eventapi_hip import HipBackend
        api = HipBackend()
    else:
        api = eventapi.backend(KIND)
    out = {"module": eventapi.__file__, "graph_record": isinstance(api, SupportsGraphRecord)}
    stream = api.stream_create_non_blocking()
    try:
        EventProfiler(api, stream, in_graphs=True).close()
    except UnsupportedError as exc:
        out["refused"] = str(exc)
        print(json.dumps(out))
        sys.exit(0)
    lib = ctypes.CDLL("libcuda.so.1" if KIND == "cuda" else "libamdhip64.so")
    emu_calls = lib.emu_calls
    emu_calls.restype = ctypes.c_long
    emu_calls.argtypes = [ctypes.c_char_p]
    prefix = "cu" if KIND == "cuda" else "hip"
    def records():
        names = ("EventRecord", "EventRecordWithFlags")
        return sum(emu_calls(f"{prefix}{n}".encode()) for n in names)
    launch_host_func = getattr(lib, f"{prefix}LaunchHostFunc")
    HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
    launch_host_func.argtypes = [ctypes.c_void_p, HOST_FN, ctypes.c_void_p]
    slept = []

    def node(_):
        begun = time.perf_counter_ns()
        time.sleep(DELAY_S)
        slept.append((begun, time.perf_counter_ns()))

    callback = HOST_FN(node)  # alive while the graph may run it
    plain = EventProfiler(api, stream)
    prof = EventProfiler(api, stream, in_graphs=True)
    api.stream_begin_capture(stream)
    before = records()
    with plain.window("plain"):
        assert launch_host_func(stream.raw, callback, None) == 0
    out["plain_records"] = records() - before
    before = records()
    with prof.window("node"):
        assert launch_host_func(stream.raw, callback, None) == 0
    out["window_records"] = records() - before
    graph = api.stream_end_capture(stream)
    out["plain_skipped"] = plain.skipped
    out["unlaunched"] = len(prof.collect())
    out["launches"] = []
    for _ in range(LAUNCHES):
        launched = time.perf_counter_ns()
        api.graph_launch(graph, stream)
        spans = prof.collect()
        collected = time.perf_counter_ns()
        out["launches"].append({
            "spans": [
                [s.name, s.start_ns, s.end_ns, s.duration_ns, s.uncertainty_ns] for s in spans
            ],
            "slept": slept[-2:],  # the plain window's node and the profiled one, in order
            "launched": launched,
            "collected": collected,
        })
    out["again"] = len(prof.collect())
    out["plain_spans"] = len(plain.collect())
    api.graph_destroy(graph)
    prof.close()
    plain.close()
    api.stream_destroy(stream)
    out["live"] = list(api.live_handles())
    print(json.dumps(out))
    """
)


def _run(kind: DriverName, extra: dict[str, str] | None = None, by_class: bool = False) -> Any:
    build()
    env = preload_env(kind)
    env.update(extra or {})
    argv = f"import sys; sys.argv = ['', {kind!r}, '{DELAY_S}', '{LAUNCHES}', '{int(by_class)}']\n"
    result, stderr = run_json_and_stderr(argv + _CHILD, env)
    # The child ran this checkout's code, not another installed copy.
    assert os.path.realpath(result["module"]).startswith(str(REPO_ROOT)), result["module"]
    return result, stderr


def _check_launches(result: Any) -> None:
    assert result["graph_record"] is True
    assert result["plain_skipped"] == 1
    assert result["plain_records"] == 0, "a plain profiler recorded into the capture"
    assert result["window_records"] == 2, "a window in a graph is two event-record nodes"
    assert result["unlaunched"] == 0
    assert len(result["launches"]) == LAUNCHES
    for launch in result["launches"]:
        ((name, start_ns, end_ns, duration_ns, bound_ns),) = launch["spans"]
        assert name == "node"
        # The graph runs the plain window's node, then the window's: the second one is timed.
        begun, ended = launch["slept"][-1]
        assert duration_ns >= (ended - begun) - DELAY_TOLERANCE_NS, launch
        # Placed within its stated bound: it began before the node began, ended after it ended,
        # and lies between the launch and the collect that read it.
        assert start_ns - bound_ns <= begun, launch
        assert end_ns + bound_ns >= ended, launch
        assert start_ns + bound_ns >= launch["launched"], launch
        assert end_ns - bound_ns <= launch["collected"], launch
    assert result["again"] == 0, "a collect with no launch since gave spans"
    assert result["plain_spans"] == 0
    assert result["live"] == [0, 0]


def test_cuda_a_window_around_a_host_node_reads_each_launch() -> None:
    result, _ = _run("cuda")
    _check_launches(result)


def test_hip_7_stamps_windows_in_graphs() -> None:
    result, _ = _run("hip")
    _check_launches(result)


def test_hip_before_7_refuses_windows_in_graphs_and_says_why() -> None:
    result, stderr = _run("hip", {"EMU_HIP_RUNTIME_VERSION": "60241133"}, by_class=True)
    assert result["graph_record"] is False
    assert "does not implement SupportsGraphRecord" in result["refused"]
    assert "ROCm 7" in result["refused"]
    # Why, on the eventapi logger: the runtime, what the probe graph did, where it is fixed.
    assert "HIP runtime (6.2)" in stderr
    assert "rocm-systems#2380" in stderr


def test_a_profiler_without_the_opt_in_takes_the_short_way() -> None:
    # Its windows' edges are one frame each, as before (benchmarks/bytecodes.py counts them):
    # nothing of the opt-in is on a plain profiler's path.
    host = HostBackend()
    prof = EventProfiler(host)
    frames: list[str] = []

    def trace(frame: Any, event: str, arg: object) -> None:
        if event == "call":
            frames.append(frame.f_code.co_name)

    with prof.window("warm"):
        pass
    sys.setprofile(trace)
    try:
        with prof.window("w"):
            pass
    finally:
        sys.setprofile(None)
    prof.close()
    assert "_open_unusually" not in frames, frames
    assert "_stop_unusually" not in frames, frames
