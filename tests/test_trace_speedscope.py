"""speedscope reads our traces: nested, and with ``slice_args=False`` one row per name.

speedscope (npm package ``speedscope`` 1.25, installed globally: ``npm install -g
speedscope@1.25``) keys a frame by its name and its args. The test loads a trace into its own
offline page (``dist/release/index.html``, the page its command opens) in headless Chromium, in
the Sandwich view, and reads the table of frames from the DOM. Skipped, with the reason, where
npm, the package or ``chromium`` is missing.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import eventapi
from eventapi.host import HostBackend
from eventapi.trace import export_chrome_trace, merge

# A browser test (docs/testing.md: the browser tier); what it checks does not depend on the
# interpreter.
pytestmark = [pytest.mark.browser, pytest.mark.single_interpreter]

BROWSER_S = 60.0  # generous: a cold browser start on a busy machine takes a few seconds
STEPS = 12


def _speedscope_page() -> Path:
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed (Debian: apt-get install npm)")
    root = subprocess.run(
        [npm, "root", "-g"], capture_output=True, text=True, timeout=60, check=False
    ).stdout.strip()
    package = Path(root) / "speedscope"
    if not (package / "package.json").is_file():
        pytest.skip("speedscope is not installed (npm install -g speedscope@1.25)")
    version = json.loads((package / "package.json").read_text())["version"]
    if not version.startswith("1.25."):
        pytest.skip(f"speedscope {version} is installed; this test reads 1.25's page")
    if shutil.which("chromium") is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium)")
    return package / "dist" / "release" / "index.html"


def _sandwich(trace: Path, tmp_path: Path) -> list[tuple[str, str, str]]:
    """speedscope's Sandwich table for ``trace``: (total, self, frame name) per row."""
    page = _speedscope_page()
    # What `speedscope FILE` does: a script that hands the file to the page, named in the URL.
    loader = tmp_path / "load.js"
    encoded = base64.b64encode(trace.read_bytes()).decode()
    loader.write_text(f"speedscope.loadFileFromBase64({json.dumps(trace.name)}, '{encoded}')")
    chromium = shutil.which("chromium")
    assert chromium is not None
    result = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1400,2000",
            "--virtual-time-budget=10000",
            "--dump-dom",
            f"{page.as_uri()}#localProfilePath={loader}&view=sandwich",
        ],
        capture_output=True,
        text=True,
        timeout=BROWSER_S,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    rows = re.findall(
        r"<tr[^>]*><td[^>]*>([^<]*)<div.*?</td><td[^>]*>([^<]*)<div.*?</td>"
        r"<td[^>]*>(?:<span[^>]*></span>)?(.*?)</td></tr>",
        result.stdout,
    )
    assert rows, "speedscope drew no Sandwich table"
    return rows


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("speedscope")
    api = HostBackend()
    with eventapi.EventProfiler(api, label="compute") as prof:
        for _ in range(STEPS):
            with prof.window("step"):
                with prof.window("forward"):
                    pass
                with prof.window("backward"):
                    pass
        prof.collect()
        export_chrome_trace(tmp / "with-args.json", prof)
        export_chrome_trace(tmp / "by-name.json", prof, slice_args=False)
    return tmp / "with-args.json", tmp / "by-name.json"


def test_slices_without_args_aggregate_by_name(traces: tuple[Path, Path], tmp_path: Path) -> None:
    rows = _sandwich(traces[1], tmp_path)
    assert sorted(name for _, _, name in rows) == ["backward", "forward", "step"]
    # Nested: a step's own time is less than its total (its children are inside it).
    (step,) = [(total, own) for total, own, name in rows if name == "step"]
    assert step[0] != step[1]


def test_the_default_export_keys_each_slice_apart(
    traces: tuple[Path, Path], tmp_path: Path
) -> None:
    # Why the option exists: each slice's own args make its own frame.
    rows = _sandwich(traces[0], tmp_path)
    assert len({name for _, _, name in rows}) > 3
    assert all(name.split(" {")[0] in ("step", "forward", "backward") for _, _, name in rows)


def test_a_merge_without_slice_args_aggregates_too(
    traces: tuple[Path, Path], tmp_path: Path
) -> None:
    out = tmp_path / "merged.json"
    merge([traces[0]], out, slice_args=False)
    rows = _sandwich(out, tmp_path)
    assert sorted(name for _, _, name in rows) == ["backward", "forward", "step"]
