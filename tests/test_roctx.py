"""roctx: windows on hip reach a ROCm profiler as roctx ranges, named and nested as the windows.

No GPU and no rocprofv3: the roctx library is ``build/emulated/roctx/libroctx64.so`` (built
from ``tests/roctx/``), a stand-in that records every call it receives, found the way the real
one is: by the dynamic loader on ``LD_LIBRARY_PATH``, or already in the process, as
``rocprofv3 --marker-trace`` preloads its own. Marker tracing is on as rocprofv3 turns it on,
with ``ROCPROF_MARKER_API_TRACE=1``. Each case runs in a fresh process (the decision is taken
once per process) on the emulated HIP driver.
"""

from __future__ import annotations

import os
import textwrap

import pytest
from child import run_json
from emulated_driver import REPO_ROOT, build, library_path
from marker_ranges import NESTED, tree, windows_case

RECORDER = REPO_ROOT / "build" / "emulated" / "roctx" / "libroctx64.so"

# What the child runs before the case: a function that returns what the recorder received
# (opening it then: dlopen returns the handle the profiler loaded) and whether it was loaded.
PRELUDE = f"""
import ctypes, json, sys
import eventapi
def loaded():
    with open("/proc/self/maps") as maps:
        return {str(RECORDER)!r} in maps.read()
def received():
    recorder = ctypes.CDLL({str(RECORDER)!r})
    recorder.roctx_recorder_line.restype = ctypes.c_char_p
    count = recorder.roctx_recorder_count()
    return [recorder.roctx_recorder_line(i).decode() for i in range(count)]
"""


def run(case: str, *, tracing: bool = True, found: str | None = "path") -> object:
    """Run ``case`` after the prelude in a fresh process on emulated hip; its JSON line.

    ``tracing``: marker tracing on, as rocprofv3 sets it. ``found``: where the roctx library
    is, ``"path"`` on ``LD_LIBRARY_PATH``, ``"preloaded"`` in the process, None nowhere.
    """
    build()
    assert RECORDER.exists(), (
        f"{RECORDER} is missing: `make emulated` builds it from tests/roctx/roctx_recorder.c"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("ROCPROF_")}
    env.pop("LD_LIBRARY_PATH", None)
    env["ROCM_PATH"] = str(RECORDER.parent / "no-rocm-here")
    preload = [str(library_path("hip"))]
    if found == "path":
        env["LD_LIBRARY_PATH"] = str(RECORDER.parent)
    elif found == "preloaded":
        preload.append(str(RECORDER))
    env["LD_PRELOAD"] = " ".join(preload)
    if tracing:
        env["ROCPROF_MARKER_API_TRACE"] = "1"
    return run_json(PRELUDE + textwrap.dedent(case), env)


def events(lines: list[str]) -> list[tuple[str, str, str]]:
    """The recorder's lines (``start ID NAME``, ``stop ID``) as range events."""
    out: list[tuple[str, str, str]] = []
    for line in lines:
        kind, range_id, *rest = line.split(" ", 2)
        assert kind in {"start", "stop"}, f"{line}: only start/stop ranges are expected"
        out.append(("start", range_id, rest[0]) if kind == "start" else ("end", range_id, ""))
    return out


@pytest.mark.parametrize("found", ["path", "preloaded"])
def test_windows_on_hip_are_roctx_ranges_nested_as_the_windows(found: str) -> None:
    lines = run(windows_case("hip"), found=found)
    assert isinstance(lines, list)
    assert tree(events(lines)) == NESTED


@pytest.mark.parametrize(
    ("tracing", "found"),
    [(False, "path"), (True, None)],
    ids=["without-marker-tracing", "tracing-finds-no-library"],
)
def test_no_library_is_loaded_and_the_windows_still_work(tracing: bool, found: str | None) -> None:
    # No profiler listening, or none to be found: the library is not even loaded.
    result = run(
        """
        with eventapi.EventProfiler(eventapi.backend("hip")) as prof:
            with prof.window("w"):
                pass
            spans = [s.name for s in prof.collect()]
        print(json.dumps([loaded(), spans]))
        """,
        tracing=tracing,
        found=found,
    )
    assert result == [False, ["w"]]


def test_no_ranges_on_another_backend() -> None:
    result = run(
        """
        with eventapi.EventProfiler(eventapi.backend("host")) as prof:
            with prof.window("w"):
                pass
        print(json.dumps([loaded(), received()]))
        """
    )
    assert result == [False, []]
