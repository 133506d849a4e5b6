"""eventapi.bench's device modes: a cold cache, graph replay, and the device's clocks.

Each is a capability a backend offers (``SupportsCacheFlush``, ``SupportsGraphs``,
``SupportsClocks``), found by the one rule: so the rules are tested on ``host`` through small
wrappers that add a capability, and the real thing on the emulated cuda driver, in a child
process, where the emulator logs what each stream ran (a write between two windows' records is
outside both), a memset takes a set time on the device, and an emulated NVML reports a clock a
test sets for one device.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import child
import pytest
from emulated_driver import build, preload_env

import eventapi
from eventapi import DeviceClocks, UnsupportedError
from eventapi.host import HostBackend

TESTS = Path(__file__).resolve().parent
SPIN_NS = 200_000

# The cuda backend reads clocks through nvidia-ml-py, which requirements-test.txt installs.
needs_nvml = pytest.mark.skipif(
    importlib.util.find_spec("pynvml") is None,
    reason="nvidia-ml-py is not installed (requirements-test.txt installs it)",
)


class Wrapped:
    """A host backend with whatever a subclass adds: every other attribute is the host's."""

    BACKEND = "wrapped"

    def __init__(self, host: HostBackend) -> None:
        self.host = host
        self.log: list[tuple[str, int]] = []  # what the stream ran, in order, when

    def __getattr__(self, name: str) -> Any:
        return getattr(self.host, name)

    def mark(self, stream: object, what: str) -> None:
        self.host.stream_launch_host_func(
            stream, lambda: self.log.append((what, time.perf_counter_ns()))
        )


class Flushing(Wrapped):
    """With ``SupportsCacheFlush``: a flush is a host function that logs itself."""

    def cache_size_bytes(self) -> int:
        return 1 << 20

    def cache_flush_create(self) -> list[str]:
        return ["buffer"]

    def stream_flush_cache(self, stream: object, buffer: list[str]) -> None:
        assert buffer == ["buffer"], "flushed with a buffer destroyed already"
        self.mark(stream, "flush")

    def cache_flush_destroy(self, buffer: list[str]) -> None:
        buffer.clear()


class Clocked(Wrapped):
    """With ``SupportsClocks``: each reading is the next of ``readings``, the last one repeated."""

    def __init__(self, host: HostBackend) -> None:
        super().__init__(host)
        self.readings: list[DeviceClocks | Exception] = []

    def device_clocks(self) -> DeviceClocks:
        self.log.append(("clocks", time.perf_counter_ns()))
        reads = sum(kind == "clocks" for kind, _ in self.log)
        reading = self.readings[min(reads, len(self.readings)) - 1]
        if isinstance(reading, Exception):
            raise reading
        return reading


def spin_call(api: Wrapped) -> Callable[[object], None]:
    def spin() -> None:
        deadline = time.perf_counter_ns() + SPIN_NS
        while time.perf_counter_ns() < deadline:
            pass
        api.log.append(("call", time.perf_counter_ns()))

    return lambda stream: api.host.stream_launch_host_func(stream, spin)


def test_a_cold_cache_is_flushed_before_every_window_after_its_setup(host: HostBackend) -> None:
    api = Flushing(host)
    result = eventapi.bench(
        spin_call(api), api=api, setup=lambda stream: api.mark(stream, "setup"), rep_ms=20
    )
    assert result.cold_cache
    assert result.flush_bytes == 1 << 20
    assert result.calls_per_window == 1
    kinds = [kind for kind, _ in api.log]
    # The first call is untimed, with its setup and no flush; every window after it is a
    # setup, then the flush, then the call: the flush is in no window, setup's or the call's.
    assert kinds[:2] == ["setup", "call"]
    windows = kinds[2:]
    assert windows == ["setup", "flush", "call"] * (len(windows) // 3)
    assert len(windows) // 3 >= result.n
    assert "cold cache (1 MiB flushed)" in result.describe()


def test_the_cold_cache_is_where_the_backend_offers_it_and_asks_one_call_a_window(
    host: HostBackend,
) -> None:
    warm = eventapi.bench(spin_call(Wrapped(host)), api=host, rep_ms=10)
    assert not warm.cold_cache
    assert warm.flush_bytes == 0
    with pytest.raises(UnsupportedError, match="SupportsCacheFlush"):
        eventapi.bench(spin_call(Wrapped(host)), api=host, cold_cache=True)
    api = Flushing(host)
    with pytest.raises(ValueError, match="calls_per_window=1 or no cold_cache=True"):
        eventapi.bench(spin_call(api), api=api, cold_cache=True, calls_per_window=4)
    # Left to bench, more calls in a window than one go without it; asked not to, none.
    batched = eventapi.bench(spin_call(api), api=api, calls_per_window=4, rep_ms=10)
    assert not batched.cold_cache
    api.log.clear()
    off = eventapi.bench(spin_call(api), api=api, cold_cache=False, rep_ms=10)
    assert not off.cold_cache
    assert "flush" not in {kind for kind, _ in api.log}


def test_results_measured_differently_are_not_compared(host: HostBackend) -> None:
    result = eventapi.bench(spin_call(Wrapped(host)), api=host, rep_ms=10)
    for field, other in (
        ("cold_cache", dataclasses.replace(result, cold_cache=True)),
        ("graph", dataclasses.replace(result, graph=True)),
    ):
        with pytest.raises(ValueError, match=f"{field}=False and the other with {field}=True"):
            result.compare(other)
    assert result.compare(result).verdict == "same"


def test_a_throttled_device_is_reported_and_clocks_are_read_around_each_batch(
    host: HostBackend,
) -> None:
    api = Clocked(host)
    # At least two reads (before the first timed batch, after the last): cool, then not.
    api.readings = [
        DeviceClocks(1980, 1980, ()),
        DeviceClocks(1200, 1980, ("power cap", "thermal slowdown")),
    ]
    result = eventapi.bench(spin_call(api), api=api, rep_ms=20)
    reads = [t for kind, t in api.log if kind == "clocks"]
    calls = [t for kind, t in api.log if kind == "call"]
    assert len(reads) >= 2
    # Read only after the warm-up, before the first timed call; the last after the last one.
    assert reads[0] < calls[-result.n]
    assert reads[-1] > calls[-1]
    assert result.throttled is True
    assert result.throttle_reasons == ("power cap", "thermal slowdown")
    assert result.clock_mhz == (1200, 1980)
    assert any(w.startswith("the device was throttled") for w in result.warnings)
    assert "throttled (power cap, thermal slowdown)" in result.describe()
    # A clock under 75 % of its maximum is throttled whatever the reasons say.
    api.readings = [DeviceClocks(1000, 1980, ())]
    api.log.clear()
    slow = eventapi.bench(spin_call(api), api=api, rep_ms=10)
    assert slow.throttled is True
    assert slow.throttle_reasons == ()
    # A backend that cannot read them here says so once, and the run goes on without them.
    api.readings = [UnsupportedError("no management library")]
    api.log.clear()
    unread = eventapi.bench(spin_call(api), api=api, rep_ms=10)
    assert unread.throttled is None
    assert unread.clock_mhz is None
    assert [kind for kind, _ in api.log].count("clocks") == 1


def test_graph_mode_names_an_fn_that_cannot_be_captured(host: HostBackend) -> None:
    # The host backend refuses a host function in a capture (it would run at the first launch
    # only): what fn raised during the capture is the cause, named with what to do.
    with pytest.raises(ValueError, match=r"could not be captured into a graph \(CaptureError") as e:
        eventapi.bench(spin_call(Wrapped(host)), api=host, graph=True, rep_ms=10)
    assert "torch.cuda.graph" in str(e.value)
    assert isinstance(e.value.__cause__, eventapi.CaptureError)
    assert host.live_handles() == (0, 0)


# -- on the emulated cuda driver -------------------------------------------------------------

PRELUDE = textwrap.dedent(
    """
    import json, time
    import eventapi
    from cuda.bindings import driver
    from emulated_driver import load, load_nvml

    emu = load("cuda")
    emu.set_memset_rate(1000)  # bytes per microsecond of device time


    def memset_call(api, nbytes, host_ns=0):
        # fn: host_ns of host time, then a memset of nbytes on the stream (a kernel's stand-in),
        # into memory of the backend's device.
        err, context = driver.cuDevicePrimaryCtxRetain(api.device)
        driver.cuCtxPushCurrent(context)
        err, pointer = driver.cuMemAlloc(1 << 20)
        assert not err, err
        driver.cuCtxPopCurrent()

        def fn(stream):
            deadline = time.perf_counter_ns() + host_ns
            while time.perf_counter_ns() < deadline:
                pass
            raw = driver.CUstream(api.adopt_stream(stream).raw)
            (err,) = driver.cuMemsetD8Async(pointer, 1, nbytes, raw)
            assert not err, err

        return fn
    """
)


def _cuda(code: str, **variables: str) -> Any:
    build()
    env = preload_env("cuda", nvml=True)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    env.update(variables)
    return child.run_json(PRELUDE + textwrap.dedent(code), env=env)


COLD = """
api = eventapi.backend("cuda")
emu.set_l2_cache_bytes(100_000)  # a flush of 100 us
fn = memset_call(api, 20_000)  # 20 us of work a call
stream = api.stream_create_non_blocking()
emu.start_op_log()
result = eventapi.bench(fn, api=api, stream=stream, rep_ms=30)
# What the stream ran: the windows' records (a synchronize's own record times nothing).
log = emu.op_log()
ops = [[op.kind, op.bytes] for op in log if op.stream == stream.raw and (op.timed or op.bytes)]
print(json.dumps({"result": result.as_dict(), "ops": ops}))
"""


def test_on_cuda_the_flush_runs_on_the_stream_between_windows() -> None:
    out = _cuda(COLD)
    result, ops = out["result"], out["ops"]
    assert result["cold_cache"] is True
    assert result["flush_bytes"] == 100_000
    # What the stream ran, in order: each window is a record, the call's memset, a record. A
    # flush (the 100,000-byte memset) only ever runs with no window open, before each window.
    assert ops[0] == ["memset", 20_000]  # the first call, untimed, before any window
    open_window = False
    flushes = calls = 0
    for kind, nbytes in ops[1:]:
        if kind == "record":
            open_window = not open_window
        elif nbytes == 100_000:
            assert not open_window, "a flush ran inside a timed window"
            flushes += 1
        elif nbytes == 20_000:
            assert open_window, "a call's work ran outside its window"
            calls += 1
    assert not open_window
    assert flushes == calls >= result["n"]
    # And the readings hold the call's 20 us, never the flush's 100 us beside it.
    assert 20_000 <= result["median_ns"] < 100_000


GRAPH = """
api = eventapi.backend("cuda")
# 50 us of work behind 300 us of host time a call: free, the stream waits for the host.
fn = memset_call(api, 50_000, host_ns=300_000)
plain = eventapi.bench(fn, api=api, rep_ms=40, cold_cache=False)
graph = eventapi.bench(fn, api=api, rep_ms=40, cold_cache=False, graph=True, calls_per_window=4)
print(json.dumps({"plain": plain.as_dict(), "graph": graph.as_dict(),
                  "graphs": emu.live_handles().graphs}))
"""


def test_on_cuda_graph_replay_reads_the_work_without_the_launch_gaps() -> None:
    out = _cuda(GRAPH)
    plain, graph = out["plain"], out["graph"]
    assert plain["launch_bound"] is True
    assert plain["median_ns"] >= 250_000  # the host's 300 us a call, the flush-free gap in it
    assert graph["graph"] is True
    assert graph["calls_per_window"] == 4
    # Each call's 50 us of work, and what the emulated device adds to a launch, well under the
    # host's time that the plain reading holds.
    assert 50_000 <= graph["median_ns"] < plain["median_ns"] / 2
    assert out["graphs"] == 0  # the graph bench captured is gone


CLOCKS = """
load_nvml().set_clock(1, 900, reasons=0x20)  # CUDA device 1: thermal slowdown, at 900 MHz
fn0 = memset_call(eventapi.backend("cuda:0"), 10_000)
fn1 = memset_call(eventapi.backend("cuda:1"), 10_000)
cool = eventapi.bench(fn0, api=eventapi.backend("cuda:0"), rep_ms=10)
hot = eventapi.bench(fn1, api=eventapi.backend("cuda:1"), rep_ms=10)
print(json.dumps({"cool": cool.as_dict(), "hot": hot.as_dict(), "hot_line": hot.describe()}))
"""


@needs_nvml
def test_on_cuda_a_throttled_device_is_reported_matched_by_uuid() -> None:
    # NVML lists the emulated devices the other way round: matched by index, device 0 would
    # read device 1's clock.
    out = _cuda(CLOCKS)
    cool, hot = out["cool"], out["hot"]
    assert cool["throttled"] is False
    assert cool["clock_mhz"] == [1980, 1980]
    assert hot["throttled"] is True
    assert hot["throttle_reasons"] == ["thermal slowdown"]
    assert hot["clock_mhz"] == [900, 900]
    assert "throttled (thermal slowdown)" in out["hot_line"]


@needs_nvml
def test_the_command_line_reports_a_throttled_device(tmp_path: Path) -> None:
    (tmp_path / "kernels.py").write_text(
        textwrap.dedent(
            """
            import eventapi
            from cuda.bindings import driver

            api = eventapi.backend("cuda")
            api.stream_destroy(api.stream_create_non_blocking())
            _, pointer = driver.cuMemAlloc(1 << 20)


            def fill(stream):
                raw = driver.CUstream(api.adopt_stream(stream).raw)
                driver.cuMemsetD8Async(pointer, 0, 100_000, raw)
            """
        )
    )
    build()
    env = preload_env("cuda", nvml=True)
    env["EMU_NVML_REASONS"] = "0x4"  # power cap, on every device
    argv = [sys.executable, "-m", "eventapi", "bench", "kernels:fill", "--backend", "cuda"]
    done = child.command([*argv, "--rep-ms", "10"], env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("kernels:fill on cuda: ")
    assert "throttled (power cap)" in done.stdout
    assert "cold cache (4 MiB flushed)" in done.stdout
    assert "warning: the device was throttled during the timed calls (power cap" in done.stderr
