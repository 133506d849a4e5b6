"""The emulated drivers' memory, memset and L2 attribute, their operation log, and the emulated
NVML library, through the real bindings (cuda-bindings, hip-python, nvidia-ml-py) in a child.

What ``eventapi.bench``'s cold cache, graph replay and clocks are tested on: a memset takes its
bytes over the memset rate on the stream's worker, is captured into a graph as a node each
launch runs, and is logged with the records around it; NVML's devices are the CUDA driver's by
UUID and PCI bus id, listed in the other order.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import child
import pytest
from emulated_driver import build, preload_env

pytestmark = pytest.mark.support

TESTS = Path(__file__).resolve().parent


def _env(name: str) -> dict[str, str]:
    # The child imports emulated_driver from this folder, as the tests do.
    build()
    env = preload_env(name)  # type: ignore[arg-type]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    return env


CUDA = textwrap.dedent(
    """
    import json, time
    from cuda.bindings import driver as d
    from emulated_driver import load
    emu = load("cuda")
    emu.set_memset_rate(1000)  # bytes per microsecond: 50,000 bytes take 50 us
    out = {}
    def ok(result):
        assert not result[0], result
        return result[1] if len(result) > 1 else None
    ok(d.cuInit(0))
    device = ok(d.cuDeviceGet(0))
    attribute = d.CUdevice_attribute
    out["l2"] = ok(d.cuDeviceGetAttribute(attribute.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 0))
    out["bad_attribute"] = int(
        d.cuDeviceGetAttribute(attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0)[0]
    )
    ok(d.cuCtxSetCurrent(ok(d.cuDevicePrimaryCtxRetain(device))))
    stream = ok(d.cuStreamCreate(1))
    out["no_context_free"] = int(d.cuMemFree(12345)[0])
    pointer = ok(d.cuMemAlloc(100_000))
    out["allocations"] = emu.live_allocations()
    out["past_the_end"] = int(d.cuMemsetD8Async(int(pointer) + 60_000, 0, 50_000, stream)[0])
    start, end = ok(d.cuEventCreate(0)), ok(d.cuEventCreate(0))
    emu.start_op_log()
    ok(d.cuEventRecord(start, stream))
    ok(d.cuMemsetD8Async(pointer, 7, 50_000, stream))
    ok(d.cuEventRecord(end, stream))
    ok(d.cuStreamSynchronize(stream))
    out["memset_ms"] = ok(d.cuEventElapsedTime(start, end))
    # Captured, the memset is a node each launch runs.
    ok(d.cuStreamBeginCapture(stream, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED))
    ok(d.cuMemsetD8Async(pointer, 1, 50_000, stream))
    graph = ok(d.cuGraphInstantiate(ok(d.cuStreamEndCapture(stream)), 0))
    for _ in range(2):
        ok(d.cuGraphLaunch(graph, stream))
    ok(d.cuStreamSynchronize(stream))
    out["log"] = [[op.kind, op.bytes, op.ended_ns - op.began_ns] for op in emu.op_log()]
    out["stream_logged"] = all(op.stream == int(stream) for op in emu.op_log())
    ok(d.cuMemFree(pointer))
    out["freed"] = emu.live_allocations()
    out["second_free"] = int(d.cuMemFree(pointer)[0])
    out["uuid"] = [bytes(ok(d.cuDeviceGetUuid(n)).bytes).hex() for n in range(2)]
    out["bus"] = [ok(d.cuDeviceGetPCIBusId(32, n)).split(b"\\0")[0].decode() for n in range(2)]
    import pynvml
    from emulated_driver import load_nvml
    nvml = load_nvml()
    nvml.set_clock(1, 700, reasons=0x40)
    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    out["nvml_uuids"] = [pynvml.nvmlDeviceGetUUID(h) for h in handles]
    by_bus = pynvml.nvmlDeviceGetHandleByPciBusId(out["bus"][1])
    out["by_bus"] = pynvml.nvmlDeviceGetUUID(by_bus)
    out["clocks"] = [
        [pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
         pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
         pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)] for h in handles
    ]
    out["reads"] = nvml.clock_reads()
    print(json.dumps(out))
    """
)


def test_cuda_memory_memsets_in_graphs_the_log_and_nvml() -> None:
    out = child.run_json(CUDA, env=_env("cuda"))
    assert out["l2"] == 4 << 20
    assert out["bad_attribute"] == 1  # CUDA_ERROR_INVALID_VALUE: only the L2 size is emulated
    assert (out["allocations"], out["freed"]) == (1, 0)
    assert (out["past_the_end"], out["second_free"]) == (1, 1)
    assert out["no_context_free"] == 1
    # 50,000 bytes at 1,000 a microsecond: at least 50 us between the records around it.
    assert out["memset_ms"] >= 0.05
    kinds = [(kind, size) for kind, size, _ in out["log"]]
    assert kinds == [("record", 0), ("memset", 50_000), ("record", 0)] + [("memset", 50_000)] * 2
    assert all(took >= 50_000 for kind, _, took in out["log"] if kind == "memset")
    assert out["stream_logged"]
    # NVML lists the devices the other way round, each under the CUDA device's UUID.
    uuids = [f"GPU-{u[:8]}-{u[8:12]}-{u[12:16]}-{u[16:20]}-{u[20:]}" for u in out["uuid"]]
    assert out["nvml_uuids"] == uuids[::-1]
    assert out["by_bus"] == uuids[1]
    assert out["bus"] == ["0000:41:00.0", "0000:42:00.0"]
    assert out["clocks"] == [[700, 1980, 0x40], [1980, 1980, 0]]
    assert out["reads"] == 2


HIP = textwrap.dedent(
    """
    import json
    from hip import hip
    from emulated_driver import load
    emu = load("hip")
    emu.set_memset_rate(1000)
    def ok(result):
        assert not result[0], result
        return result[1] if len(result) > 1 else None
    out = {}
    out["l2"] = ok(hip.hipDeviceGetAttribute(
        hip.hipDeviceAttribute_t.hipDeviceAttributeL2CacheSize, 0))
    stream = ok(hip.hipStreamCreate())
    pointer = ok(hip.hipMalloc(100_000))
    emu.start_op_log()
    ok(hip.hipMemsetAsync(pointer, 3, 20_000, stream))
    ok(hip.hipStreamSynchronize(stream))
    out["log"] = [[op.kind, op.bytes] for op in emu.op_log()]
    out["allocations"] = emu.live_allocations()
    ok(hip.hipFree(pointer))
    out["freed"] = emu.live_allocations()
    ok(hip.hipStreamDestroy(stream))
    print(json.dumps(out))
    """
)


def test_hip_memory_and_memsets() -> None:
    out = child.run_json(HIP, env=_env("hip"))
    assert out["l2"] == 4 << 20
    assert out["log"] == [["memset", 20_000]]
    assert (out["allocations"], out["freed"]) == (1, 0)
