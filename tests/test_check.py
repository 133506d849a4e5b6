"""``eventapi check``: the checks, the table, ``--json``, ``--trace``, exit status."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, final

import pytest
from protocol_only import ProtocolOnly

from eventapi._cli._check import DELAY_OVER_NS, BackendReport, check_backend
from eventapi._cli._main import main
from eventapi._cli._report import report
from eventapi.host import HostBackend

CHECKS = [
    "fence_cross_thread",
    "stream_dependency",
    "window_delay",
    "anchor",
    "overhead_event_record",
    "overhead_event_query",
    "overhead_fence",
    "overhead_window",
    "handles",
]


def results(rep: BackendReport) -> dict[str, str]:
    return {r.check: r.result for r in rep.results}


def test_every_check_passes_on_host() -> None:
    api = HostBackend()
    rep = check_backend(api)
    assert [r.check for r in rep.results] == CHECKS
    assert set(results(rep).values()) == {"PASS"}, rep.results
    assert not rep.failed
    assert api.live_handles() == (0, 0)
    by_check = {r.check: r for r in rep.results}
    assert by_check["anchor"].values["uncertainty_us"] > 0
    assert by_check["window_delay"].values["median_ms"] >= 20.0
    assert by_check["overhead_window"].values["us_per_call"] > 0


def test_check_prints_an_aligned_table_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "host"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["BACKEND", "CHECK", "RESULT", "DETAIL"]
    assert len(lines) == 1 + len(CHECKS)
    result_column = lines[0].index("RESULT")
    for line, check in zip(lines[1:], CHECKS, strict=True):
        assert line.startswith("host ")
        assert line.split()[1] == check
        assert line[result_column : result_column + 4] == "PASS"


def test_json_is_a_list_of_objects(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "host", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert isinstance(rows, list)
    assert [row["check"] for row in rows] == CHECKS
    for row in rows:
        assert set(row) == {"backend", "check", "result", "detail", "values"}
        assert row["backend"] == "host"
        assert row["result"] == "PASS"
        assert all(isinstance(v, float) for v in row["values"].values())


def test_a_failing_backend_exits_one_and_says_which_check() -> None:
    api = HostBackend()
    api.inject_fault("stream_wait_event")
    rep = check_backend(api)
    assert results(rep)["stream_dependency"] == "FAIL"
    assert [c for c, r in results(rep).items() if r != "PASS"] == ["stream_dependency"]
    assert results(rep)["handles"] == "PASS"  # a failed check still released everything
    out = io.StringIO()
    assert report([rep], out=out) == 1
    (failed,) = [line for line in out.getvalue().splitlines() if " FAIL " in line]
    assert "stream_dependency" in failed
    assert "INJECTED_FAULT" in failed


def test_a_backend_that_cannot_load_is_a_failed_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "no-such-backend", "--json"]) == 1
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["backend"], row["check"], row["result"]) == ("no-such-backend", "load", "FAIL")
    assert "no-such-backend" in row["detail"]


def test_nothing_checked_is_a_failure() -> None:
    out = io.StringIO()
    assert report([], out=out) == 1
    assert "no backend" in out.getvalue()


def test_the_trace_is_chrome_trace_event_json(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    assert main(["check", "host", "--trace", str(trace)]) == 0
    document = json.loads(trace.read_text())
    events = document["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    assert [e["name"] for e in spans] == ["known delays"] + ["host sleep 20 ms"] * 3
    tracks = [e["args"] for e in events if e["name"] == "thread_name"]
    assert [track["backend"] for track in tracks] == ["host"]
    parent, *children = spans
    for child in children:
        assert (child["pid"], child["tid"]) == (parent["pid"], parent["tid"])
        # Microseconds: each sleep lasts at least 20,000 us and lies inside its parent.
        assert child["dur"] >= 20_000
        assert parent["ts"] <= child["ts"]
        assert child["ts"] + child["dur"] <= parent["ts"] + parent["dur"]
        assert child["args"]["depth"] == 1


def test_an_unwritable_trace_exits_one(tmp_path: Path) -> None:
    rep = check_backend(HostBackend())
    missing = tmp_path / "no" / "such" / "dir" / "trace.json"
    assert report([rep], trace=str(missing), out=io.StringIO()) == 1


def test_missing_capabilities_skip_with_a_reason() -> None:
    inner = HostBackend()
    rep = check_backend(ProtocolOnly(inner))
    skipped = {r.check: r.detail for r in rep.results if r.result == "SKIP"}
    assert set(skipped) == {
        "stream_dependency",
        "window_delay",
        "overhead_event_query",
        "handles",
    }
    assert "SupportsHostFunc" in skipped["stream_dependency"]
    assert not rep.failed, rep.results
    assert report([rep], out=io.StringIO()) == 0
    assert inner.live_handles() == (0, 0)


@final
class Distorted:
    """host with host functions, over a real HostBackend, reading or dispatching wrongly.

    ``scale`` multiplies every elapsed reading (a unit error); ``late_ns`` spins on the
    stream's worker before each host function runs (a slow dispatch: time in the window that
    the function does not see).
    """

    BACKEND = "distorted"

    def __init__(self, inner: HostBackend, *, scale: float = 1.0, late_ns: int = 0) -> None:
        self.inner = inner
        self.scale = scale
        self.late_ns = late_ns

    def event_create(self) -> Any:
        return self.inner.event_create()

    def event_destroy(self, event: Any) -> None:
        self.inner.event_destroy(event)

    def event_record(self, event: Any, stream: Any) -> None:
        self.inner.event_record(event, stream)

    def event_wait(self, event: Any) -> None:
        self.inner.event_wait(event)

    def event_elapsed(self, start: Any, end: Any) -> int:
        return round(self.inner.event_elapsed(start, end) * self.scale)

    def stream_wait_event(self, stream: Any, event: Any) -> None:
        self.inner.stream_wait_event(stream, event)

    def stream_synchronize(self, stream: Any) -> None:
        self.inner.stream_synchronize(stream)

    def stream_create_non_blocking(self) -> Any:
        return self.inner.stream_create_non_blocking()

    def stream_destroy(self, stream: Any) -> None:
        self.inner.stream_destroy(stream)

    def stream_launch_host_func(self, stream: Any, fn: Callable[[], None]) -> None:
        late_ns = self.late_ns

        def late() -> None:
            deadline = time.perf_counter_ns() + late_ns
            while time.perf_counter_ns() < deadline:
                pass
            fn()

        self.inner.stream_launch_host_func(stream, late)


@pytest.mark.parametrize(
    ("distortion", "says"),
    [
        ({"scale": 0.5}, "over a host function that slept"),
        ({"late_ns": 2 * DELAY_OVER_NS}, "above what the host function slept"),
    ],
    ids=["readings-short", "dispatch-late"],
)
def test_window_delay_fails_on_readings_that_are_not_what_the_function_slept(
    distortion: dict[str, Any], says: str
) -> None:
    # The known delay is a sleep the host function times itself: readings shorter than it, or
    # longer by more than a dispatch, fail the check whatever the sleep's own length.
    inner = HostBackend()
    rep = check_backend(Distorted(inner, **distortion))
    (window,) = [r for r in rep.results if r.check == "window_delay"]
    assert window.result == "FAIL"
    assert says in window.detail
    assert inner.live_handles() == (0, 0)
