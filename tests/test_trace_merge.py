"""Merging traces: real processes on one host merge exactly; other hosts go through wall clocks."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest

import eventapi
from eventapi.trace import merge

PROCESSES = 4
JOIN_S = 60.0  # generous: four interpreters starting on a busy two-core machine


def _rank(rank: int, path: str, inbox: Connection | None, outbox: Connection | None) -> None:
    """One process of the chain: wait for the previous one, time a window, pass the baton.

    The window opens only after the previous process's message arrived, and that message is
    sent only after the previous window's end was stamped (its collect() returned): the
    windows are ordered across processes, whatever the scheduler does.
    """
    api = eventapi.backend("host")
    with eventapi.EventProfiler(api, label=f"rank{rank}") as prof:
        if inbox is not None:
            inbox.recv()
        with prof.window(f"rank {rank}"):
            pass
        prof.collect()
        if outbox is not None:
            outbox.send(rank)
        prof.export_chrome_trace(path)


def ns(event: dict[str, Any]) -> tuple[int, int]:
    start = round(event["ts"] * 1000)
    return start, start + round(event["dur"] * 1000)


def load(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def chain_traces(tmp_path: Path) -> list[Path]:
    """Run :data:`PROCESSES` processes in a chain; return their traces, in chain order."""
    context = multiprocessing.get_context("spawn")
    pipes = [context.Pipe(duplex=False) for _ in range(PROCESSES - 1)]
    paths = [tmp_path / f"rank{i}.json" for i in range(PROCESSES)]
    workers = [
        context.Process(
            target=_rank,
            args=(
                i,
                str(paths[i]),
                pipes[i - 1][0] if i > 0 else None,
                pipes[i][1] if i < PROCESSES - 1 else None,
            ),
        )
        for i in range(PROCESSES)
    ]
    for worker in reversed(workers):  # the last in the chain first: the order is the pipes'
        worker.start()
    for worker in workers:
        worker.join(JOIN_S)
        assert worker.exitcode == 0, f"a traced process failed (exit code {worker.exitcode})"
    return paths


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return chain_traces(tmp_path_factory.mktemp("chain"))


def test_four_processes_merge_onto_one_axis_in_the_order_they_ran(
    traces: list[Path], tmp_path: Path
) -> None:
    out = tmp_path / "all.json"
    # The command line, as a user runs it.
    subprocess.run(
        [sys.executable, "-m", "eventapi", "trace", "merge", *map(str, traces), "-o", str(out)],
        check=True,
        timeout=60,
    )
    merged = load(out)
    info = merged["otherData"]["eventapi"]
    assert info["clock"]["kind"] == "monotonic"  # one host: times kept exactly
    assert info["hosts"] == 1
    windows = {e["name"]: e for e in merged["traceEvents"] if e["ph"] == "X"}
    assert len({e["pid"] for e in windows.values()}) == PROCESSES
    for rank in range(1, PROCESSES):
        before, after = windows[f"rank {rank - 1}"], windows[f"rank {rank}"]
        # Each end and start is placed within its own stated bound; the true end came first.
        bound = before["args"]["uncertainty_ns"] + after["args"]["uncertainty_ns"]
        assert ns(after)[0] - ns(before)[1] >= -bound
    # Exactly: merging one host's traces moves nothing.
    for path in traces:
        for event in load(path)["traceEvents"]:
            if event["ph"] == "X":
                assert windows[event["name"]]["ts"] == event["ts"]


def test_another_hosts_trace_is_placed_through_the_wall_clocks(
    traces: list[Path], tmp_path: Path
) -> None:
    # The last rank's trace as another host would have written it: its monotonic clock 1000 s
    # behind this one's (it booted later), its wall-clock offset 1000 s larger to match.
    shift_ns = 1_000 * 10**9
    other = load(traces[-1])
    clock = other["otherData"]["eventapi"]["clock"]
    clock["boot_id"] = "another-host"
    clock["wall_offset_ns"] += shift_ns
    for event in other["traceEvents"]:
        if event["ph"] == "X":
            event["ts"] = (round(event["ts"] * 1000) - shift_ns) / 1000
    moved = tmp_path / "other.json"
    moved.write_text(json.dumps(other))

    out = tmp_path / "all.json"
    merge([*traces[:-1], moved], out)
    merged = load(out)
    info = merged["otherData"]["eventapi"]
    assert info["clock"]["kind"] == "wall"
    assert info["hosts"] == 2
    windows = {e["name"]: e for e in merged["traceEvents"] if e["ph"] == "X"}
    # The offsets of the two "hosts" were measured apart; each is stated within its bound.
    slack = 2 * info["clock"]["wall_offset_uncertainty_ns"]
    for rank in range(1, PROCESSES):
        before, after = windows[f"rank {rank - 1}"], windows[f"rank {rank}"]
        bound = before["args"]["uncertainty_ns"] + after["args"]["uncertainty_ns"] + slack
        assert ns(after)[0] - ns(before)[1] >= -bound
    # Same-host traces stay exact among themselves inside a multi-host merge.
    first, second = windows["rank 0"], windows["rank 1"]
    original = [load(traces[i])["traceEvents"] for i in (0, 1)]
    (a,) = [e for e in original[0] if e["ph"] == "X"]
    (b,) = [e for e in original[1] if e["ph"] == "X"]
    assert ns(second)[0] - ns(first)[0] == ns(b)[0] - ns(a)[0]


def test_two_processes_with_one_pid_keep_separate_tracks(
    traces: list[Path], tmp_path: Path
) -> None:
    # Two runs of one process id: the second a copy of the first (one file given twice is
    # refused, see test_trace_files.py).
    again = tmp_path / "again.json"
    again.write_bytes(traces[0].read_bytes())
    out = tmp_path / "twice.json"
    merge([traces[0], again], out)
    windows = [e for e in load(out)["traceEvents"] if e["ph"] == "X"]
    assert len(windows) == 2
    assert windows[0]["pid"] != windows[1]["pid"]


def test_a_file_eventapi_did_not_write_is_refused_with_what_to_do(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps({"traceEvents": [{"name": "x", "ph": "X", "ts": 1, "dur": 1}]}))
    with pytest.raises(ValueError, match="does not say which clock"):
        merge([foreign], tmp_path / "out.json")
    garbage = tmp_path / "garbage.json"
    garbage.write_text("not json")
    result = subprocess.run(
        [sys.executable, "-m", "eventapi", "trace", "merge", str(garbage), "-o", "x.json"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == 1
    assert "not a Trace Event JSON file" in result.stderr
