"""``eventapi bench module:function``: one line or JSON on stdout, errors on stderr."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from eventapi._cli._main import main

TARGET = textwrap.dedent(
    """
    import time

    import eventapi


    def spin():
        deadline = time.perf_counter_ns() + 200_000
        while time.perf_counter_ns() < deadline:
            pass


    def fn(stream):
        eventapi.backend().stream_launch_host_func(stream, spin)


    def boom(stream):
        raise RuntimeError("nope")


    def busy(stream):
        deadline = time.perf_counter_ns() + 300_000
        while time.perf_counter_ns() < deadline:
            pass
    """
)


@pytest.fixture
def target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "bench_target.py").write_text(TARGET)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("EVENTAPI_BACKEND", raising=False)
    return "bench_target"


def test_one_line(target: str, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["bench", f"{target}:fn", "--backend", "host", "--rep-ms", "20"])
    out = capsys.readouterr().out
    assert status == 0
    assert out.count("\n") == 1
    assert out.startswith(f"{target}:fn on host: ")
    assert "(95 %)" in out
    assert "stopped by " in out


def test_json(target: str, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["bench", f"{target}:fn", "--backend", "host", "--json", "--rep-ms", "20"])
    result = json.loads(capsys.readouterr().out)
    assert status == 0
    assert result["target"] == f"{target}:fn"
    assert result["backend"] == "host"
    assert len(result["readings_ns"]) == result["n"] == len(result["host_ns"])
    # The 200 us spin, within its interval's reach of the readings.
    assert result["min_ns"] >= 200_000
    assert result["stopped_by"] in {"noise", "time", "limit"}


def test_a_raising_function_and_a_bad_target(
    target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", f"{target}:boom", "--backend", "host"]) == 1
    assert "raised RuntimeError: nope" in capsys.readouterr().err
    assert main(["bench", "no_such_module_here:fn"]) == 2
    assert "cannot import 'no_such_module_here'" in capsys.readouterr().err
    assert main(["bench", f"{target}:missing"]) == 2
    assert "has no attribute 'missing'" in capsys.readouterr().err
    assert main(["bench", "no-colon"]) == 2
    assert "expected module:function" in capsys.readouterr().err


def test_work_that_escaped_the_stream_is_named_not_timed(
    target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["bench", f"{target}:busy", "--backend", "host", "--hold-stream", "--rep-ms", "20"]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith(f"{target}:busy on host: fn's work escaped the stream")
    assert "\u00b1" not in captured.out  # no interval of readings the work was not in
    assert "warning: fn's work escaped the stream" in captured.err
    assert main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["escaped"] is True
