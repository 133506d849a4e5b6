"""Files eventapi writes are whole or untouched; paths are paths; the commands say what they wrote.

A failed write is made real with a file-size limit (``RLIMIT_FSIZE``) in a child process: the
kernel refuses the bytes past it (``EFBIG``; CPython ignores ``SIGXFSZ``), as a full disk would.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import child
import pytest

import eventapi
from eventapi.host import HostBackend
from eventapi.trace import TraceWriter, export_chrome_trace, merge, write_report


def _trace(api: HostBackend, path: Path, windows: int = 3) -> Path:
    with eventapi.EventProfiler(api, label="compute") as prof:
        for i in range(windows):
            with prof.window(f"w{i}"):
                pass
        prof.collect()
        export_chrome_trace(path, prof)
    return path


def _eventapi(*args: str, cwd: Path, limit: int | None = None) -> subprocess.CompletedProcess[str]:
    def cap() -> None:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return child.command([sys.executable, "-m", "eventapi", *args], cwd=cwd, preexec_fn=cap)


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


@pytest.fixture
def big(host: HostBackend, tmp_path: Path) -> Path:
    """A trace of 2,000 windows: about 200 kB, far past the limit the failing writes get."""
    return _trace(host, tmp_path / "big.json", windows=2_000)


LIMIT = 64 * 1024  # bytes: the small traces fit, the big one's merge and report do not


def test_a_merge_that_cannot_be_written_leaves_the_old_output(
    host: HostBackend, big: Path, tmp_path: Path
) -> None:
    old = _trace(host, tmp_path / "all.json")
    before = old.read_bytes()
    result = _eventapi("trace", "merge", str(big), "-o", str(old), cwd=tmp_path, limit=LIMIT)
    assert result.returncode == 1, result
    assert result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr
    assert "cannot write" in result.stderr
    assert str(old) in result.stderr
    assert "File too large" in result.stderr
    assert old.read_bytes() == before  # the previous merge is still there, whole
    assert _leftovers(tmp_path) == []


def test_a_report_that_cannot_be_written_leaves_the_old_page(big: Path, tmp_path: Path) -> None:
    page = tmp_path / "big.html"
    page.write_text("<p>last week's report</p>")
    result = _eventapi("trace", "report", str(big), cwd=tmp_path, limit=LIMIT)
    assert result.returncode == 1, result
    assert "File too large" in result.stderr
    assert "Traceback" not in result.stderr
    assert page.read_text() == "<p>last week's report</p>"
    assert _leftovers(tmp_path) == []


EXPORT = """
import sys, resource, eventapi
from eventapi.host import HostBackend
from eventapi.trace import export_chrome_trace
api = HostBackend()
with eventapi.EventProfiler(api, label="s") as prof:
    for _ in range(2000):
        with prof.window("w"):
            pass
    prof.collect()
    resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))
    try:
        export_chrome_trace(sys.argv[1], prof)
    except OSError as exc:
        print(exc)
        sys.exit(3)
"""


def test_an_export_that_cannot_be_written_leaves_the_old_trace(
    host: HostBackend, tmp_path: Path
) -> None:
    old = _trace(host, tmp_path / "t.json")
    before = old.read_bytes()
    result = child.command([sys.executable, "-c", EXPORT, old])
    assert result.returncode == 3, result
    assert f"cannot write {old}: File too large" in result.stdout
    assert old.read_bytes() == before
    assert _leftovers(tmp_path) == []


def test_an_export_that_fails_while_building_leaves_the_old_trace(
    host: HostBackend, tmp_path: Path
) -> None:
    old = _trace(host, tmp_path / "t.json")
    before = old.read_bytes()
    with eventapi.EventProfiler(host, label="s") as prof:
        with prof.window("w"):
            pass
        prof.collect()
        # The first profiler's track is written before the second one fails.
        with pytest.raises(RuntimeError, match="unreadable"):
            export_chrome_trace(old, prof, _BreaksMidway())  # type: ignore[arg-type]
        assert old.read_bytes() == before
        assert _leftovers(tmp_path) == []
        # Something that is no profiler at all is refused before any file is opened.
        with pytest.raises(TypeError, match=r"profilers\[1\] is str"):
            export_chrome_trace(old, prof, "not a profiler")  # type: ignore[arg-type]
    assert old.read_bytes() == before
    assert _leftovers(tmp_path) == []


class _BreaksMidway:
    """Has what an export reads of a profiler, and fails as its spans are read."""

    label = "broken"
    dropped_spans = 0
    api = anchor = None

    @property
    def spans(self) -> tuple[()]:
        raise RuntimeError("spans unreadable")


def test_an_output_that_is_an_input_is_refused_and_the_input_kept(
    host: HostBackend, tmp_path: Path
) -> None:
    trace = _trace(host, tmp_path / "t.json")
    before = trace.read_bytes()
    (tmp_path / "link.json").symlink_to(trace)
    for args in (
        ("merge", "t.json", "-o", "t.json"),
        ("merge", "t.json", "-o", "./link.json"),  # another spelling of the same file
        ("report", "t.json", "-o", "t.json"),
        ("report", "link.json", "-o", str(trace)),
    ):
        result = _eventapi("trace", *args, cwd=tmp_path)
        assert result.returncode == 1, (args, result)
        assert "is the input" in result.stderr, args
        assert result.stderr.count("\n") == 1
        assert trace.read_bytes() == before, args
    with pytest.raises(ValueError, match="is the input"):
        merge([trace], trace)
    with pytest.raises(ValueError, match="is the input"):
        write_report(trace, trace)


def test_a_file_given_twice_is_refused(host: HostBackend, tmp_path: Path) -> None:
    _trace(host, tmp_path / "a.json")
    result = _eventapi("trace", "merge", "a.json", "./a.json", "-o", "out.json", cwd=tmp_path)
    assert result.returncode == 1
    assert "a.json is given twice as a.json" in result.stderr
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize(
    "call",
    [
        lambda fd, good: export_chrome_trace(fd, *()),
        lambda fd, good: merge([good], fd),
        lambda fd, good: merge([fd], "out.json"),
        lambda fd, good: write_report(good, fd),
        lambda fd, good: write_report(fd),
        lambda fd, good: TraceWriter(fd),
    ],
    ids=["export", "merge-out", "merge-in", "report-out", "report-in", "writer"],
)
def test_an_int_is_not_taken_as_a_file_descriptor(
    call: Callable[[int, Path], object], host: HostBackend, tmp_path: Path
) -> None:
    good = _trace(host, tmp_path / "good.json")
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    fd = os.open(victim, os.O_RDWR)
    try:
        with pytest.raises(TypeError, match=r"str or os\.PathLike"):
            call(fd, good)
        os.fstat(fd)  # still open: nothing closed it
        assert os.pread(fd, 100, 0) == b"keep me"
    finally:
        os.close(fd)


def test_merge_wants_a_list_of_paths(host: HostBackend, tmp_path: Path) -> None:
    good = _trace(host, tmp_path / "good.json")
    with pytest.raises(TypeError, match=r"a list of paths, not a single str: pass \["):
        merge(str(good), tmp_path / "out.json")
    with pytest.raises(TypeError, match="a list of paths, not a single PosixPath"):
        merge(good, tmp_path / "out.json")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="nothing to merge"):
        merge([], tmp_path / "out.json")
    assert not (tmp_path / "out.json").exists()


def test_the_commands_say_what_they_wrote_and_the_report_goes_beside_its_trace(
    host: HostBackend, tmp_path: Path
) -> None:
    _trace(host, tmp_path / "a.json", windows=3)
    _trace(host, tmp_path / "b.json", windows=2)
    merged = _eventapi("trace", "merge", "a.json", "b.json", "-o", "all.json", cwd=tmp_path)
    assert merged.returncode == 0, merged
    # Two files of one process id (this test's): two processes in the merge.
    assert merged.stdout == "wrote all.json: 5 slices on 2 tracks of 2 processes\n"
    report = _eventapi("trace", "report", "all.json", cwd=tmp_path)
    assert report.returncode == 0, report
    assert report.stdout == "wrote all.html: 5 slices on 2 tracks of 2 processes\n"
    assert (tmp_path / "all.html").read_text().startswith("<!DOCTYPE html>")
    # A name without .json gets .html added, not its own name replaced.
    (tmp_path / "trace").write_bytes((tmp_path / "a.json").read_bytes())
    assert _eventapi("trace", "report", "trace", cwd=tmp_path).returncode == 0
    assert (tmp_path / "trace.html").exists()
    assert _leftovers(tmp_path) == []


def test_a_replaced_file_keeps_its_mode_a_new_one_follows_the_umask_and_links_stay(
    host: HostBackend, tmp_path: Path
) -> None:
    trace = _trace(host, tmp_path / "t.json")
    old = os.umask(0o027)
    try:
        write_report(trace, tmp_path / "new.html")
    finally:
        os.umask(old)
    assert (tmp_path / "new.html").stat().st_mode & 0o777 == 0o640
    kept = tmp_path / "kept.html"
    kept.write_text("old")
    kept.chmod(0o604)
    write_report(trace, kept)
    assert kept.stat().st_mode & 0o777 == 0o604
    target = tmp_path / "real.html"
    target.write_text("old")
    (tmp_path / "link.html").symlink_to(target)
    write_report(trace, tmp_path / "link.html")
    assert (tmp_path / "link.html").is_symlink()
    assert target.read_text().startswith("<!DOCTYPE html>")


def test_a_merge_is_strict_json(host: HostBackend, tmp_path: Path) -> None:
    _trace(host, tmp_path / "a.json")
    merge([tmp_path / "a.json"], tmp_path / "out.json")

    def refuse(constant: str) -> object:
        raise AssertionError(f"{constant} in a merged trace")

    document = json.loads((tmp_path / "out.json").read_text(), parse_constant=refuse)
    assert any(e["ph"] == "X" for e in document["traceEvents"])
