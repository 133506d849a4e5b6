"""NVTX: windows on cuda reach an NVTX tool as ranges, named and nested as the windows are.

No GPU and no Nsight: the tool is ``build/emulated/libnvtx_recorder.so`` (built from
``tests/nvtx/``), loaded by NVTX itself through ``NVTX_INJECTION64_PATH`` as Nsight's is, and
recording every range it receives. Each case runs in a fresh process (NVTX loads its tool once
per process) on the emulated CUDA driver; skipped without the ``nvtx`` package.
"""

from __future__ import annotations

import importlib.util
import textwrap

import pytest
from child import run_json
from emulated_driver import REPO_ROOT, build, preload_env
from marker_ranges import NESTED, tree, windows_case

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("nvtx") is None,
    reason="the nvtx package is not installed (pip install nvtx)",
)

RECORDER = REPO_ROOT / "build" / "emulated" / "libnvtx_recorder.so"

# What the child runs before the case: the recorder opened (the same handle NVTX holds), and
# a function that returns what it received.
PRELUDE = f"""
import ctypes, json, sys
import eventapi
recorder = ctypes.CDLL({str(RECORDER)!r})
recorder.nvtx_recorder_line.restype = ctypes.c_char_p
def received():
    return [recorder.nvtx_recorder_line(i).decode() for i in range(recorder.nvtx_recorder_count())]
"""


def run(case: str, *, tool: bool = True) -> list[str]:
    """Run ``case`` after the prelude in a fresh process on emulated cuda; its printed lines.

    ``tool``: NVTX loads the recorder as it loads Nsight's; without, no tool is attached.
    """
    build()
    env = preload_env("cuda")
    env.pop("NVTX_INJECTION64_PATH", None)
    if tool:
        env["NVTX_INJECTION64_PATH"] = str(RECORDER)
    env.pop("NVTX_DISABLE", None)
    result: list[str] = run_json(PRELUDE + textwrap.dedent(case), env)
    return result


def events(lines: list[str]) -> list[tuple[str, str, str]]:
    """The recorder's lines (``start ID DOMAIN NAME``, ``end ID``) as range events."""
    out: list[tuple[str, str, str]] = []
    for line in lines:
        kind, range_id, *rest = line.split(" ", 3)
        assert kind in {"start", "end"}, f"{line}: only start/end ranges are expected"
        if kind == "start":
            domain, name = rest
            assert domain == "eventapi", line
            out.append(("start", range_id, name))
        else:
            out.append(("end", range_id, ""))
    return out


def test_windows_on_cuda_are_nvtx_ranges_nested_as_the_windows() -> None:
    assert tree(events(run(windows_case("cuda")))) == NESTED


def test_no_ranges_on_another_backend_or_without_the_package() -> None:
    on_host = run(
        """
        with eventapi.EventProfiler(eventapi.backend("host")) as prof:
            with prof.window("w"):
                pass
        print(json.dumps(received()))
        """
    )
    assert on_host == []
    without_package = run(
        """
        sys.modules["nvtx"] = None  # as if not installed: importing it raises ImportError
        with eventapi.EventProfiler(eventapi.backend("cuda")) as prof:
            with prof.window("w"):
                pass
            spans = prof.collect()
        print(json.dumps(received() + [s.name for s in spans]))
        """
    )
    assert without_package == ["w"]


def test_no_nvtx_calls_without_a_tool_attached() -> None:
    # NVTX would drop every range at once; the profiler does not even make the calls.
    calls = run(
        """
        import nvtx
        calls = []
        for name in ("get_domain", "start_range", "end_range"):
            def spy(*args, _real=getattr(nvtx, name), _name=name, **kwargs):
                calls.append(_name)
                return _real(*args, **kwargs)
            setattr(nvtx, name, spy)
        with eventapi.EventProfiler(eventapi.backend("cuda")) as prof:
            with prof.window("w"):
                pass
            assert [s.name for s in prof.collect()] == ["w"]
        print(json.dumps(calls))
        """,
        tool=False,
    )
    assert calls == []
