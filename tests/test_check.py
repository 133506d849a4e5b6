"""``eventapi check`` as a function: the checks, the table, ``--json``, ``--trace``, exit status."""

from __future__ import annotations

import io
import json
from pathlib import Path

from protocol_only import ProtocolOnly

from eventapi._cli._check import BackendReport, check_backend
from eventapi._cli._main import run_check
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


def test_run_check_prints_an_aligned_table_and_exits_zero() -> None:
    out = io.StringIO()
    assert run_check(["host"], out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["BACKEND", "CHECK", "RESULT", "DETAIL"]
    assert len(lines) == 1 + len(CHECKS)
    result_column = lines[0].index("RESULT")
    for line, check in zip(lines[1:], CHECKS, strict=True):
        assert line.startswith("host ")
        assert line.split()[1] == check
        assert line[result_column : result_column + 4] == "PASS"


def test_json_is_a_list_of_objects() -> None:
    out = io.StringIO()
    assert run_check(["host"], as_json=True, out=out) == 0
    rows = json.loads(out.getvalue())
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


def test_a_backend_that_cannot_load_is_a_failed_row() -> None:
    out = io.StringIO()
    assert run_check(["no-such-backend"], as_json=True, out=out) == 1
    (row,) = json.loads(out.getvalue())
    assert (row["backend"], row["check"], row["result"]) == ("no-such-backend", "load", "FAIL")
    assert "no-such-backend" in row["detail"]


def test_nothing_checked_is_a_failure() -> None:
    out = io.StringIO()
    assert report([], out=out) == 1
    assert "no backend" in out.getvalue()


def test_the_trace_is_chrome_trace_event_json(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    assert run_check(["host"], trace=str(trace), out=io.StringIO()) == 0
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
