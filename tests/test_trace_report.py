"""The HTML report: self-contained, and what a real browser renders from it.

The page is loaded by Debian's Chromium, headless, from a file URL with networking switched
off as far as Chromium's switches go; the test reads the DOM after the page's script ran
(``--dump-dom``) and keeps a screenshot under ``build/test-artifacts/``. Without a
``chromium`` on PATH (the Debian package of that name) the browser test is skipped.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from emulated_driver import REPO_ROOT

import eventapi
from eventapi.host import HostBackend
from eventapi.trace import export_chrome_trace, write_report

ARTIFACTS = REPO_ROOT / "build" / "test-artifacts"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1200,600",
)
BROWSER_S = 60.0  # generous: a cold browser start on a busy machine takes a few seconds


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A report of two streams: 3 steps with forward and backward inside, and 2 uploads."""
    tmp = tmp_path_factory.mktemp("report")
    api = HostBackend()
    with (
        eventapi.EventProfiler(api, label="compute") as compute,
        eventapi.EventProfiler(api, label="copy") as copy,
    ):
        for _ in range(3):
            with compute.window("step"):
                with compute.window("forward"):
                    pass
                with compute.window("</script><b>backward</b>"):  # escaped, never markup
                    pass
        for _ in range(2):
            with copy.window("upload"):
                pass
        compute.collect()
        copy.collect()
        export_chrome_trace(tmp / "trace.json", compute, copy)
    assert api.live_handles() == (0, 0)
    out = tmp / "report.html"
    # The command line, as a user runs it.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "eventapi",
            "trace",
            "report",
            str(tmp / "trace.json"),
            "-o",
            str(out),
        ],
        check=True,
        timeout=60,
    )
    return out


def test_the_page_loads_nothing_from_elsewhere(report: Path) -> None:
    page = report.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "@import" not in page
    assert "url(" not in page


def test_the_table_has_count_and_quantiles_per_name(report: Path) -> None:
    page = report.read_text()
    rows = re.findall(r"<tr><th scope='row'>(.*?)</th>((?:<td>.*?</td>)+)</tr>", page)
    counts = {name: re.findall(r"<td>(.*?)</td>", cells)[0] for name, cells in rows}
    assert counts == {
        "step": "3",
        "forward": "3",
        "&lt;/script&gt;&lt;b&gt;backward&lt;/b&gt;": "3",
        "upload": "2",
    }
    for heading in ("count", "total", "min", "median", "p90", "p99", "max"):
        assert f"<th scope='col'>{heading}</th>" in page


def test_chromium_renders_every_track_and_slice_without_errors(
    report: Path, tmp_path: Path
) -> None:
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium)")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "trace-report.png"
    result = subprocess.run(
        [
            chromium,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}",
            "--dump-dom",
            report.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=BROWSER_S,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    dom = result.stdout
    # The script ran to its end and nothing raised (the page records errors on <body>).
    assert 'data-rendered="11"' in dom
    assert "data-errors" not in dom
    assert "Uncaught" not in result.stderr
    labels = re.findall(r'<div class="label" title="([^"]*)"', dom)
    assert [label.split(" \u00b7 ")[1] for label in labels] == ["host compute", "host copy"]
    drawn = re.findall(r'<div class="slice"[^>]*>(.*?)</div>', dom)
    assert sorted(drawn) == sorted(
        ["step", "forward", "&lt;/script&gt;&lt;b&gt;backward&lt;/b&gt;"] * 3 + ["upload"] * 2
    )
    assert shot.stat().st_size > 0


def test_a_report_of_an_empty_trace_says_so(tmp_path: Path) -> None:
    with eventapi.EventProfiler(HostBackend()) as prof:
        prof.export_chrome_trace(tmp_path / "empty.json")
    write_report(tmp_path / "empty.json", tmp_path / "empty.html")
    page = (tmp_path / "empty.html").read_text()
    assert "0 slices on 0 tracks of 1 process" in page
