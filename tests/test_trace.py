"""Traces: what export_chrome_trace and TraceWriter write, checked against the format."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import child
import pytest
from emulated_driver import REPO_ROOT, build, preload_env

import eventapi
from eventapi.host import HostBackend
from eventapi.trace import TraceWriter, export_chrome_trace

# The metadata event names the Trace Event format defines (viewers ignore others).
METADATA = {"process_name", "process_sort_index", "thread_name", "thread_sort_index", "trace_end"}


def valid_trace(path: Path) -> dict[str, Any]:
    """Load ``path`` and check it is Trace Event JSON a viewer draws as written; return it.

    The object form (``traceEvents``), each event with the fields its phase requires, and on
    each (pid, tid) track the complete events nest: two slices either do not overlap or one
    holds the other, which is how Perfetto stacks them.
    """
    document: dict[str, Any] = json.loads(path.read_text())
    assert isinstance(document["traceEvents"], list)
    assert document["displayTimeUnit"] in ("ms", "ns")
    tracks: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for event in document["traceEvents"]:
        assert isinstance(event["name"], str)
        assert isinstance(event["pid"], int)
        assert isinstance(event["tid"], int)
        if event["ph"] == "M":
            assert event["name"] in METADATA
            assert isinstance(event["args"], dict)
            continue
        assert event["ph"] == "X"
        assert isinstance(event["ts"], float | int)
        assert isinstance(event["dur"], float | int)
        assert event["dur"] >= 0
        tracks.setdefault((event["pid"], event["tid"]), []).append(
            (event["ts"], event["ts"] + event["dur"])
        )
    for slices in tracks.values():
        open_ends: list[float] = []
        for start, end in sorted(slices, key=lambda s: (s[0], -s[1])):
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1], "slices overlap without nesting"
            open_ends.append(end)
    return document


def slices(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in document["traceEvents"] if e["ph"] == "X"]


def track_names(document: dict[str, Any]) -> dict[int, str]:
    return {
        e["tid"]: e["args"]["name"] for e in document["traceEvents"] if e["name"] == "thread_name"
    }


def test_export_writes_nested_windows_of_two_streams_on_their_own_tracks(
    host: HostBackend, tmp_path: Path
) -> None:
    with (
        eventapi.EventProfiler(host, label="compute") as compute,
        eventapi.EventProfiler(host, label="copy") as copy,
    ):
        with compute.window("step"):
            with compute.window("forward"):
                pass
            with compute.window("backward"):
                pass
        with copy.window("upload"):
            pass
        spans = compute.collect() + copy.collect()
        path = tmp_path / "trace.json"
        export_chrome_trace(path, compute, copy)

    document = valid_trace(path)
    names = track_names(document)
    assert sorted(names.values()) == ["host compute", "host copy"]
    by_name = {e["name"]: e for e in slices(document)}
    assert names[by_name["step"]["tid"]] == "host compute"
    assert names[by_name["upload"]["tid"]] == "host copy"
    step, forward = by_name["step"], by_name["forward"]
    assert (forward["args"]["depth"], step["args"]["depth"]) == (1, 0)
    assert step["ts"] <= forward["ts"]
    assert forward["ts"] + forward["dur"] <= step["ts"] + step["dur"]
    # The spans' own host times, in microseconds, and their bounds in the args.
    for span in spans:
        event = by_name[span.name]
        assert event["ts"] == span.start_ns / 1000
        assert event["args"]["duration_ns"] == span.duration_ns
        assert event["args"]["uncertainty_ns"] == span.uncertainty_ns
        assert event["pid"] == os.getpid()


def _offset_bracket() -> tuple[int, int]:
    """The wall clock's offset from the monotonic one, bracketed: the lowest and highest it can
    be, from a wall-clock read between two monotonic reads."""
    before = time.perf_counter_ns()
    wall = time.time_ns()
    after = time.perf_counter_ns()
    return wall - after, wall - before


def test_the_metadata_says_what_clock_and_process_the_times_belong_to(
    host: HostBackend, tmp_path: Path
) -> None:
    with eventapi.EventProfiler(host, label="s") as prof:
        with prof.window("w"):
            pass
        prof.collect()
        before = _offset_bracket()
        prof.export_chrome_trace(tmp_path / "t.json")
        after = _offset_bracket()
        anchor = prof.anchor

    info = valid_trace(tmp_path / "t.json")["otherData"]["eventapi"]
    assert info["eventapi"] == eventapi.__version__
    assert info["pid"] == os.getpid()
    clock = info["clock"]
    assert clock["kind"] == "monotonic"
    # The offset lies within its stated bound of the ones bracketed around the export; each
    # bracket is as wide as this run measured it, so a thread preempted mid-read widens it.
    u = clock["wall_offset_uncertainty_ns"]
    low, high = min(before[0], after[0]), max(before[1], after[1])
    assert low - u <= clock["wall_offset_ns"] <= high + u, (before, after, clock)
    (track,) = [
        e["args"]
        for e in valid_trace(tmp_path / "t.json")["traceEvents"]
        if e["name"] == "thread_name"
    ]
    assert (track["backend"], track["device"], track["stream"]) == ("host", None, "s")
    assert track["anchor_uncertainty_ns"] == anchor.uncertainty_ns
    assert track["dropped_spans"] == 0


def test_a_profiler_exports_only_the_spans_it_retains_and_says_how_many_it_dropped(
    host: HostBackend, tmp_path: Path
) -> None:
    with eventapi.EventProfiler(host, max_spans=2) as prof:
        for name in "abcd":
            with prof.window(name):
                pass
        prof.collect()
        prof.export_chrome_trace(tmp_path / "t.json")
    document = valid_trace(tmp_path / "t.json")
    assert [e["name"] for e in slices(document)] == ["c", "d"]
    (track,) = [e["args"] for e in document["traceEvents"] if e["name"] == "thread_name"]
    assert track["dropped_spans"] == 2


def test_a_trace_writer_sink_gets_every_span_however_few_the_profiler_keeps(
    host: HostBackend, tmp_path: Path
) -> None:
    path = tmp_path / "stream.json"
    with TraceWriter(path) as trace:
        with eventapi.EventProfiler(host, label="long", max_spans=1, sink=trace.sink(host)) as prof:
            for i in range(5):
                with prof.window(f"w{i}"), prof.window("inner"):
                    pass
                prof.collect()
            with prof.window("at close"):
                pass
        assert len(prof.spans) == 1
    document = valid_trace(path)
    assert [e["name"] for e in slices(document)] == [
        *(n for i in range(5) for n in (f"w{i}", "inner")),
        "at close",
    ]


def test_a_trace_cut_short_is_read_up_to_its_last_whole_span(
    host: HostBackend, tmp_path: Path
) -> None:
    path = tmp_path / "cut.json"
    trace = TraceWriter(path)
    with eventapi.EventProfiler(host, sink=trace.sink(host)) as prof:
        for name in ("a", "b"):
            with prof.window(name):
                pass
    trace.flush()
    # As if the process died now: no tail, and half a line more.
    with open(path, "a", encoding="utf-8") as file:
        file.write('{"name":"c","ph":"X","pi')
    from eventapi.trace import merge

    merge([path], tmp_path / "whole.json")
    assert [e["name"] for e in slices(valid_trace(tmp_path / "whole.json"))] == ["a", "b"]
    trace.close()


def test_a_closed_writer_refuses_more_spans(host: HostBackend, tmp_path: Path) -> None:
    trace = TraceWriter(tmp_path / "t.json")
    sink = trace.sink(host)
    trace.close()
    trace.close()  # idempotent
    with eventapi.EventProfiler(host, sink=sink) as prof:
        with prof.window("late"):
            pass
        with pytest.raises(ValueError, match="closed"):
            prof.collect()


@pytest.mark.parametrize("backend", ["host", "cuda"])
def test_the_example_script_writes_a_trace_on_host_and_on_emulated_cuda(
    backend: str, tmp_path: Path
) -> None:
    build()
    out = tmp_path / "trace.json"
    env = preload_env("cuda") if backend == "cuda" else dict(os.environ)
    env["EVENTAPI_BACKEND"] = backend
    subprocess.run(
        [sys.executable, str(REPO_ROOT / "examples" / "trace_windows.py"), str(out)],
        env=env,
        check=True,
        timeout=60,
        capture_output=True,
    )
    document = valid_trace(out)
    names = track_names(document)
    device = "" if backend == "host" else ":0"
    assert sorted(names.values()) == [f"{backend}{device} compute", f"{backend}{device} copy"]
    events = slices(document)
    assert [e["name"] for e in events if names[e["tid"]].endswith("compute")] == [
        "step",
        "forward",
        "backward",
    ] * 3
    assert [e["args"]["depth"] for e in events if e["name"] == "forward"] == [1, 1, 1]


# The parent's script: a thread writes spans through the sink without pause while the main
# thread forks ten children. Each child leaves the with block of the writer it inherited and
# closes it, then exits; the parent waits for each with a bound, then closes its own writer.
# The verdict of a child is its exit status; what went wrong in it is on its stderr.
_FORK_WHILE_WRITING = """
import json, os, select, signal, sys, threading, traceback
from eventapi import EventStateError, Span
from eventapi.host import HostBackend
from eventapi.trace import TraceWriter

CHILDREN = 10
HANG_S = 20.0  # a child that closes a writer and exits takes milliseconds; this is a hang

api = HostBackend()
writer = TraceWriter(sys.argv[1])
sink = writer.sink(api)
stop = threading.Event()
writing = threading.Event()
written = 0


def write_spans():
    global written
    while not stop.is_set():
        start = written * 10
        sink(Span(f"s{written}", start, start + 5, 5, 0, "writer", 1))
        written += 1
        writing.set()


def refused(action, what):
    try:
        action()
    except EventStateError as exc:
        assert "fork()" in str(exc), exc
    else:
        raise AssertionError(f"{what} was not refused in the child")


def in_child():
    with writer:
        pass
    writer.close()
    refused(lambda: sink(Span("child", 0, 1, 1, 0, "writer", 1)), "a span from the child")
    refused(writer.flush, "a flush in the child")
    refused(lambda: writer.sink(api), "a new sink in the child")


thread = threading.Thread(target=write_spans)
thread.start()
assert writing.wait(30)
outcomes = []
for _ in range(CHILDREN):
    pid = os.fork()
    if pid == 0:
        status = 0
        try:
            in_child()
        except BaseException:
            traceback.print_exc()
            status = 1
        sys.stderr.flush()
        raise SystemExit(status)
    pidfd = os.pidfd_open(pid)
    exited, _, _ = select.select([pidfd], [], [], HANG_S)
    os.close(pidfd)
    if not exited:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        outcomes.append("hung")
        break
    outcomes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
stop.set()
thread.join()
writer.close()
print(json.dumps({"children": outcomes, "written": written}))
"""


def test_a_writer_inherited_by_a_fork_is_refused_there_and_the_parents_trace_stays_whole(
    tmp_path: Path,
) -> None:
    path = tmp_path / "parent.json"
    done = child.command([sys.executable, "-c", _FORK_WHILE_WRITING, path])
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["children"] == [0] * 10, done.stderr
    # The parent's file: strict JSON (nothing of a child's close or exit in it), and every span
    # the parent's thread wrote, each once.
    names = [e["name"] for e in slices(valid_trace(path))]
    assert len(names) == result["written"]
    assert set(names) == {f"s{i}" for i in range(result["written"])}


# A process with no other thread: its writer's buffer holds a span at each fork. One child
# exits without touching the writer (its interpreter collects it at exit), one leaves its with
# block, one closes it and leaves at once (os._exit).
_FORK_WITH_A_BUFFERED_SPAN = """
import json, os, sys
from eventapi import Span
from eventapi.host import HostBackend
from eventapi.trace import TraceWriter

api = HostBackend()
writer = TraceWriter(sys.argv[1])
sink = writer.sink(api)
statuses = []
for i, ending in enumerate(("exit", "with", "close")):
    sink(Span(f"s{i}", i * 10, i * 10 + 5, 5, 0, "main", 1))
    pid = os.fork()
    if pid == 0:
        if ending == "with":
            with writer:
                pass
        elif ending == "close":
            writer.close()
            os._exit(0)
        raise SystemExit(0)
    statuses.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
sink(Span("last", 100, 105, 5, 0, "main", 1))
writer.close()
print(json.dumps(statuses))
"""


def test_a_forked_child_that_closes_or_exits_writes_nothing_to_the_parents_trace(
    tmp_path: Path,
) -> None:
    path = tmp_path / "parent.json"
    done = child.command([sys.executable, "-c", _FORK_WITH_A_BUFFERED_SPAN, path])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [0, 0, 0], done.stderr
    # Strict JSON (no tail of a child's close in the middle), each span once (no buffer a
    # child flushed as it exited).
    assert [e["name"] for e in slices(valid_trace(path))] == ["s0", "s1", "s2", "last"]
