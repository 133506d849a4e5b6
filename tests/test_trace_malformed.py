"""Malformed inputs to ``eventapi trace merge``: one line naming the file and the fault, exit 1.

Each case starts from a real trace and breaks one thing, or is a file that is no trace at all.
The command runs in this process through its entry point (``eventapi._cli:main``, what the
``eventapi`` script calls), so that 60 cases take a second; one case also runs as a real
``python -m eventapi``. Whatever the input, the command prints exactly one line on stderr and
no traceback, writes nothing, and the library raises only ``ValueError`` or ``OSError``.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import eventapi
from eventapi._cli import main
from eventapi.host import HostBackend
from eventapi.trace import export_chrome_trace, merge

Doc = dict[str, Any]


def _set(path: str, value: object) -> Callable[[Doc], object]:
    """Set ``path`` (keys and indexes separated by ``/``; ``X`` is the first slice) to ``value``."""

    def change(doc: Doc) -> object:
        *parents, last = path.split("/")
        node: Any = doc
        for key in parents:
            node = _step(doc, node, key)
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
        return doc

    return change


def _drop(path: str) -> Callable[[Doc], object]:
    def change(doc: Doc) -> object:
        *parents, last = path.split("/")
        node: Any = doc
        for key in parents:
            node = _step(doc, node, key)
        del node[last]
        return doc

    return change


def _step(doc: Doc, node: Any, key: str) -> Any:
    if key == "X":
        return next(e for e in doc["traceEvents"] if e["ph"] == "X")
    return node[int(key)] if isinstance(node, list) else node[key]


def _nested(depth: int) -> object:
    value: object = 0
    for _ in range(depth):
        value = [value]
    return value


INFO = "otherData/eventapi"
CLOCK = f"{INFO}/clock"

# (id, change to the document or the file's bytes, a word the one line must hold)
CASES: list[tuple[str, Callable[[Doc], object] | bytes, str]] = [
    ("not-json", b"this is not json", "not a Trace Event JSON file"),
    ("empty-file", b"", "is empty"),
    ("whitespace-only", b"  \n\t\n", "is empty"),
    ("not-utf8", b'{"traceEvents": ["\xff\xfe"]}', "not UTF-8"),
    ("json-string", b'"a trace"', "holds a JSON string"),
    ("json-number", b"42", "holds a JSON number"),
    ("json-null", b"null", "holds a JSON null"),
    ("json-true", b"true", "holds a JSON boolean"),
    ("bare-array-of-events", lambda d: d["traceEvents"], "does not say which clock"),
    ("array-of-numbers", b"[1, 2, 3]", "does not say which clock"),
    ("no-trace-events", _drop("traceEvents"), "no traceEvents list"),
    ("trace-events-number", _set("traceEvents", 5), "a JSON number as traceEvents"),
    ("trace-events-object", _set("traceEvents", {}), "a JSON object as traceEvents"),
    ("trace-events-null", _set("traceEvents", None), "no traceEvents list"),
    ("other-data-list", _set("otherData", []), "otherData is a JSON array"),
    ("no-eventapi", _set("otherData", {}), "does not say which clock"),
    ("eventapi-string", _set(INFO, "1.0"), "otherData.eventapi is a JSON string"),
    ("no-clock", _drop(f"{INFO}/clock"), "does not say which clock"),
    ("clock-list", _set(CLOCK, []), "clock is a JSON array"),
    ("clock-kind-missing", _drop(f"{CLOCK}/kind"), "clock.kind is None"),
    ("clock-kind-number", _set(f"{CLOCK}/kind", 7), "clock.kind is 7"),
    ("clock-kind-unknown", _set(f"{CLOCK}/kind", "sundial"), "not 'monotonic' or 'wall'"),
    ("boot-id-number", _set(f"{CLOCK}/boot_id", 5), "boot_id is not a string"),
    ("offset-missing", _drop(f"{CLOCK}/wall_offset_ns"), "has no wall_offset_ns"),
    ("offset-string", _set(f"{CLOCK}/wall_offset_ns", "12"), "wall_offset_ns is a JSON string"),
    ("offset-float", _set(f"{CLOCK}/wall_offset_ns", 1.5), "not an integer"),
    ("offset-bool", _set(f"{CLOCK}/wall_offset_ns", True), "JSON boolean"),
    ("offset-huge", _set(f"{CLOCK}/wall_offset_ns", 10**30), "outside -2^63 .. 2^63"),
    ("uncertainty-negative", _set(f"{CLOCK}/wall_offset_uncertainty_ns", -1), "outside 0"),
    ("format-string", _set(f"{INFO}/format", "1"), "format is a JSON string"),
    ("format-newer", _set(f"{INFO}/format", 99), "newer eventapi"),
    ("format-negative", _set(f"{INFO}/format", -1), "outside 0"),
    ("sources-string", _set(f"{INFO}/sources", "all"), "sources is a JSON string"),
    ("source-number", _set(f"{INFO}/sources", [5]), "sources[0] is a JSON number"),
    ("source-shift-string", _set(f"{INFO}/sources", [{"shift_ns": "x"}]), "shift_ns"),
    ("info-nan", _set(f"{INFO}/python", float("nan")), "python is nan"),
    ("event-number", _set("traceEvents/0", 3), "event 0 is a JSON number"),
    ("event-list", _set("traceEvents/0", []), "event 0 is a JSON array"),
    ("event-null", _set("traceEvents/0", None), "event 0 is a JSON null"),
    ("ph-missing", _drop("X/ph"), "has no ph"),
    ("ph-number", _set("X/ph", 1), "a JSON number as ph"),
    ("name-number", _set("X/name", 12), "name is a JSON number"),
    ("name-object", _set("X/name", {"a": 1}), "name is a JSON object"),
    ("pid-string", _set("X/pid", "12"), "pid is a JSON string"),
    ("pid-huge", _set("X/pid", 10**40), "pid is"),
    ("tid-float", _set("X/tid", 1.5), "tid is a JSON number, not an integer"),
    ("ts-string", _set("X/ts", "12"), "ts is a JSON string"),
    ("ts-null", _set("X/ts", None), "ts is a JSON null"),
    ("ts-nan", _set("X/ts", float("nan")), "ts is nan"),
    ("ts-infinity", _set("X/ts", float("inf")), "ts is inf"),
    ("ts-minus-infinity", _set("X/ts", float("-inf")), "ts is -inf"),
    ("ts-1e400", b"1e400", "ts is inf"),  # spliced into the text: JSON reads it as infinity
    ("ts-huge-int", _set("X/ts", 10**400), "outside"),
    ("ts-missing", _drop("X/ts"), "has no ts"),
    ("dur-negative", _set("X/dur", -1.0), "dur is -1.0 us, outside 0"),
    ("dur-nan", _set("X/dur", float("nan")), "dur is nan"),
    ("dur-missing", _drop("X/dur"), "has no dur"),
    ("dur-bool", _set("X/dur", False), "dur is a JSON boolean"),
    ("args-list", _set("X/args", [1]), "args is a JSON array"),
    ("args-nan", _set("X/args/duration_ns", float("nan")), "args.duration_ns is nan"),
    ("args-deep", _set("X/args/deep", _nested(100)), "nests deeper than"),
    ("extra-field-infinity", _set("X/extra", float("-inf")), "extra is -inf"),
    ("document-deep", b"[" * 100_000 + b"]" * 100_000, "too deeply"),
    ("integer-5000-digits", b'{"traceEvents": [], "x": ' + b"9" * 5000 + b"}", "digits"),
    ("cut-in-the-header", b'{"otherData": {"eventapi": {"format": 1, "clo', "not a Trace Event"),
]


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Doc:
    path = tmp_path_factory.mktemp("good") / "good.json"
    api = HostBackend()
    with eventapi.EventProfiler(api, label="compute") as prof:
        with prof.window("step"), prof.window("inner"):
            pass
        prof.collect()
        export_chrome_trace(path, prof)
    document: Doc = json.loads(path.read_text())
    return document


def _write(case: Callable[[Doc], object] | bytes, good: Doc, path: Path, name: str) -> None:
    if name == "ts-1e400":  # a number JSON writes but Python reads as infinity
        text = json.dumps(good)
        slice_ts = next(e["ts"] for e in good["traceEvents"] if e["ph"] == "X")
        path.write_text(text.replace(f'"ts": {slice_ts!r}', '"ts": 1e400', 1))
    elif isinstance(case, bytes):
        path.write_bytes(case)
    else:
        path.write_text(json.dumps(case(copy.deepcopy(good))))


def test_there_are_at_least_forty_cases() -> None:
    assert len(CASES) >= 40
    assert len({name for name, _, _ in CASES}) == len(CASES)


@pytest.mark.parametrize(("name", "case", "expected"), CASES, ids=[c[0] for c in CASES])
def test_a_malformed_input_is_one_line_naming_the_file(
    name: str,
    case: Callable[[Doc], object] | bytes,
    expected: str,
    good: Doc,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bad = tmp_path / f"{name}.json"
    _write(case, good, bad, name)
    fine = tmp_path / "fine.json"
    fine.write_text(json.dumps(good))
    out = tmp_path / "out.json"
    assert main(["trace", "merge", str(fine), str(bad), "-o", str(out)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith("eventapi trace merge: error: ")
    assert str(bad) in line
    assert expected in line
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    with pytest.raises(ValueError, match=re.escape(str(bad))):
        merge([bad], out)


@pytest.mark.parametrize("kind", ["directory", "missing"])
def test_a_path_that_is_not_a_readable_file_is_one_line(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "traces"
    if kind == "directory":
        bad.mkdir()
    assert main(["trace", "merge", str(bad), "-o", str(tmp_path / "out.json")]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    reason = "Is a directory" if kind == "directory" else "No such file or directory"
    assert line == f"eventapi trace merge: error: cannot read {bad}: {reason}"
    with pytest.raises(OSError, match=reason):
        merge([bad], tmp_path / "out.json")


def test_the_real_command_prints_one_line_and_no_traceback(good: Doc, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    _write(_set("X/ts", float("nan")), good, bad, "ts-nan")
    result = subprocess.run(
        [sys.executable, "-m", "eventapi", "trace", "merge", str(bad), "-o", "out.json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr
    assert f"{bad}: event" in result.stderr
    assert "ts is nan" in result.stderr
