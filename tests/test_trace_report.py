"""The HTML report: self-contained, and what a real browser renders from it.

The page is loaded by Debian's Chromium, headless, from a file URL with networking switched
off as far as Chromium's switches go; the test reads the DOM after the page's script ran
(``--dump-dom``) and keeps a screenshot under ``build/test-artifacts/``. Without a
``chromium`` on PATH (the Debian package of that name) the browser test is skipped.
"""

from __future__ import annotations

import html
import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from emulated_driver import REPO_ROOT

import eventapi
from eventapi import Span
from eventapi.host import HostBackend
from eventapi.trace import TraceWriter, export_chrome_trace, merge, write_report

ARTIFACTS = REPO_ROOT / "build" / "test-artifacts"
# The browser tests are in the browser tier (docs/testing.md), and marked single_interpreter:
# how Chromium reads a page does not depend on the interpreter that wrote it.
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


@pytest.mark.browser
@pytest.mark.single_interpreter
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


# -- any string, any number: the page still parses and draws --------------------------------

HOSTILE = {
    "comment-script": "<!--<script>",
    "close-script": "</script><script>document.body.dataset.errors = 'injected'</script>",
    "separators": "line\u2028para\u2029end & <b>",
    "cdata-and-entities": "]]> &amp; <![CDATA[ -->",
}


def _hostile_trace(tmp: Path, payload: str) -> tuple[Path, int]:
    """A trace with ``payload`` as window name, stream label, args key and value, and host."""
    api = HostBackend()
    with eventapi.EventProfiler(api, label=payload) as prof:
        with prof.window(payload), prof.window("inner"):
            pass
        with prof.window("after"):
            pass
        prof.collect()
        export_chrome_trace(tmp / "raw.json", prof)
    document = json.loads((tmp / "raw.json").read_text())
    document["otherData"]["eventapi"]["host"] = payload
    for event in document["traceEvents"]:
        if event["name"] == "process_name":
            event["args"]["name"] = f"{payload} pid 1"
        if event["ph"] == "X":
            event["args"][payload] = payload
    path = tmp / "hostile.json"
    path.write_text(json.dumps(document))
    return path, 3


def _embedded(page: str) -> dict[str, Any]:
    match = re.search(r'<script type="application/json" id="trace-data">(.*?)</script>', page, re.S)
    assert match is not None
    payload = match.group(1)
    # Nothing in it that an HTML parser reads as markup: the data is inert text.
    assert not set(payload) & set("<>&")
    assert payload.isascii()

    def refuse(constant: str) -> object:
        raise AssertionError(f"{constant} is not JSON: the page's JSON.parse would throw")

    data: dict[str, Any] = json.loads(payload, parse_constant=refuse)
    return data


@pytest.mark.parametrize("payload", list(HOSTILE.values()), ids=list(HOSTILE))
def test_no_string_changes_how_the_page_parses(payload: str, tmp_path: Path) -> None:
    trace, _ = _hostile_trace(tmp_path, payload)
    write_report(trace, tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    data = _embedded(page)
    assert payload in data["names"]
    assert data["rows"][0]["track"] == f"host {payload}"
    # Outside the data, the payload appears only escaped.
    assert payload not in page.replace(html.escape(payload), "")
    assert len(re.findall(r"<script", page)) == 2


def test_non_finite_times_are_left_out_and_lone_surrogates_shown_escaped(
    tmp_path: Path,
) -> None:
    name = os.fsdecode(b"caf\xe9")  # a Latin-1 name as the file system hands it over
    assert name == "caf\udce9"
    trace, _ = _hostile_trace(tmp_path, name)
    document = json.loads(trace.read_text())
    spare = [e for e in document["traceEvents"] if e["ph"] == "X"][-1]
    for ts, dur in ((float("nan"), 1.0), (1.0, float("inf")), (float("-inf"), 1.0), (5.0, -1.0)):
        document["traceEvents"].append({**spare, "name": "odd", "ts": ts, "dur": dur})
    spare["args"]["ratio"] = float("nan")
    trace.write_text(json.dumps(document))  # NaN and Infinity, as Python writes them

    write_report(trace, tmp_path / "r.html")
    raw = (tmp_path / "r.html").read_bytes()
    page = raw.decode("utf-8")  # strict: the file is valid UTF-8
    assert "caf\\udce9" in page
    data = _embedded(page)
    assert "odd" not in data["names"]
    assert "4 slices left out: a ts or dur that is not a finite, non-negative number." in page
    assert data["slices"][-1][6]["ratio"] == "nan"


def _report_command(trace: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eventapi", "trace", "report", str(trace), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_command_line_says_what_it_left_out_and_why(tmp_path: Path) -> None:
    trace, slices = _hostile_trace(tmp_path, "plain")
    clean = _report_command(trace, tmp_path / "clean.html")
    assert clean.returncode == 0, clean.stderr
    assert clean.stdout == f"wrote {tmp_path / 'clean.html'}: 3 slices on 1 track of 1 process\n"
    assert clean.stderr == ""  # nothing left out, nothing said

    document = json.loads(trace.read_text())
    spare = [e for e in document["traceEvents"] if e["ph"] == "X"][-1]
    document["traceEvents"].append({**spare, "name": "odd", "dur": float("nan")})
    trace.write_text(json.dumps(document))
    out = tmp_path / "r.html"
    done = _report_command(trace, out)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"wrote {out}: {slices} slices on 1 track of 1 process\n"
    # What the page says it left out, the command says too, on stderr: the count and why.
    why = "1 slice left out: a ts or dur that is not a finite, non-negative number."
    assert why in out.read_text()
    assert done.stderr == f"eventapi trace report: {why}\n"


def _chromium(url: str, tmp_path: Path, shot: Path | None = None, size: str = "") -> str:
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium)")
    flags = [f for f in CHROMIUM_FLAGS if not (size and f.startswith("--window-size"))]
    result = subprocess.run(
        [
            chromium,
            *flags,
            *([f"--window-size={size}"] if size else []),
            f"--user-data-dir={tmp_path / 'profile'}",
            *([f"--screenshot={shot}"] if shot else []),
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=BROWSER_S,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Uncaught" not in result.stderr
    return result.stdout


@pytest.mark.browser
@pytest.mark.single_interpreter
@pytest.mark.parametrize("payload", [*HOSTILE.values(), "caf\udce9"], ids=[*HOSTILE, "surrogate"])
def test_chromium_draws_the_timeline_whatever_the_strings(payload: str, tmp_path: Path) -> None:
    trace, count = _hostile_trace(tmp_path, payload)
    write_report(trace, tmp_path / "r.html")
    dom = _chromium((tmp_path / "r.html").as_uri(), tmp_path)
    assert f'data-rendered="{count}"' in dom
    assert "data-errors" not in dom
    assert len(re.findall(r'<div class="slice"', dom)) == count


# -- a trace of 20,000 slices: axis, grid, legend, zoom, per-rank rows ------------------------

NAMES = (
    "step",
    "forward",
    *(f"layer{i} forward" for i in range(6)),
    "backward",
    *(f"layer{i} backward" for i in reversed(range(6))),
    "optimizer",
)


def _rank_spans(rank: int, steps: int) -> list[Span]:
    """A training loop's spans: steps of forward and backward layers, copies, an allreduce."""
    rnd = random.Random(rank)
    spans: list[Span] = []
    t = 1_000_000_000 + rank * 37_000
    for _ in range(steps):
        start, c = t, t + 20_000
        compute: list[Span] = []
        for phase, scale in (("forward", 1), ("backward", 2)):
            begin, inner = c, []
            layers = range(6) if phase == "forward" else reversed(range(6))
            for layer in layers:
                d = rnd.randint(300_000, 450_000) * scale * (1 + layer % 3)
                inner.append(Span(f"layer{layer} {phase}", c, c + d, d, 2, "compute", 900))
                c += d + 5_000
            compute += [Span(phase, begin, c, c - begin, 1, "compute", 800), *inner]
            c += 10_000
        d = rnd.randint(400_000, 600_000)
        compute.append(Span("optimizer", c, c + d, d, 1, "compute", 800))
        c += d + 10_000
        spans += [Span("step", start, c, c - start, 0, "compute", 700), *compute]
        spans.append(Span("h2d copy", start - 15_000, start + 600_000, 615_000, 0, "copy", 600))
        reduce_at, d = start + 6_000_000, rnd.randint(3_000_000, 6_000_000)
        spans.append(Span("allreduce", reduce_at, reduce_at + d, d, 0, "comm", 650))
        spans.append(Span("d2h copy", c - 800_000, c - 100_000, 700_000, 0, "copy", 600))
        t = c + rnd.randint(50_000, 300_000)
    return spans


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A report of four ranks' traces, merged: 19,988 slices, each written by a TraceWriter.

    About the most the timeline draws (20,000), so the page is at its heaviest.
    """
    tmp = tmp_path_factory.mktemp("large")
    api = HostBackend()
    paths = []
    with pytest.MonkeyPatch.context() as env:
        for rank in range(4):
            env.setenv("RANK", str(rank))  # as torchrun would set it
            path = tmp / f"rank{rank}.json"
            with TraceWriter(path) as trace:
                sink = trace.sink(api)
                for span in _rank_spans(rank, 263):
                    sink(span)
            paths.append(path)
    merge(paths, tmp / "all.json")
    write_report(tmp / "all.json")
    return tmp / "all.html"


def test_a_large_report_has_an_axis_a_legend_and_per_rank_rows(large: Path) -> None:
    page = large.read_text()
    data = _embedded(page)
    assert len(data["slices"]) == 4 * 263 * 19
    assert f"{4 * 263 * 19:,} slices on 12 tracks of 4 processes" in page
    assert [row["process"].split(" (")[0] for row in data["rows"][::3]] == [
        f"rank {r}" for r in range(4)
    ]
    legend = re.findall(
        r"<li><span class='swatch' style='background:(#\w+)'></span>(.*?)</li>", page
    )
    assert {name for _, name in legend} == {*NAMES, "h2d copy", "d2h copy", "allreduce"}
    assert len({colour for colour, _ in legend}) == len(legend)  # 19 names, 19 colours


@pytest.mark.browser
@pytest.mark.single_interpreter
def test_chromium_draws_20000_slices_with_ticks_and_zooms_from_the_address(
    large: Path, tmp_path: Path
) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "trace-report-20000.png"
    dom = _chromium(large.as_uri(), tmp_path, shot, size="1400,900")
    assert 'data-rendered="19988"' in dom
    assert "data-errors" not in dom
    ticks = re.findall(r'<div class="tick"[^>]*>([^<]*)</div>', dom)
    assert len(ticks) >= 5
    assert ticks[0] == "0 ms"
    assert len(re.findall(r'class="gridline"', dom)) == len(ticks)
    assert len(re.findall(r'<div class="process">rank \d', dom)) == 4
    assert shot.stat().st_size > 0
    hidden_at_full = dom.count("display: none")
    assert hidden_at_full == 0

    # The first 40 ms only: two steps per rank drawn, the rest hidden, finer ticks.
    zoomed = _chromium(
        large.as_uri() + "#view=0,40000",
        tmp_path,
        ARTIFACTS / "trace-report-zoomed.png",
        size="1400,900",
    )
    assert 'data-view="0.000,40000.000"' in zoomed
    shown = len(re.findall(r'<div class="slice"(?![^>]*display: none)', zoomed))
    assert 0 < shown < 19988 / 50
    assert re.findall(r'<div class="tick"[^>]*>([^<]*)</div>', zoomed)[:2] == ["0 ms", "5 ms"]


def test_colours_are_stable_per_name_and_distinct_beyond_ten() -> None:
    from eventapi.trace._report import colours

    names = [f"kernel {i}" for i in range(13)]
    palette = colours(names)
    assert len({background for background, _ in palette.values()}) == 13
    # The same name, the same colour, in a report of other names (and in another order).
    again = colours(["kernel 3", "something else", "kernel 7"])
    assert again["kernel 3"] == palette["kernel 3"]
    assert again["kernel 7"] == palette["kernel 7"]
    many = colours(f"n{i}" for i in range(200))
    assert len(set(many.values())) == 200
