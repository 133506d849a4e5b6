"""The opencl backend doing real OpenCL work: a fence around a kernel, windows around a copy.

Run with ``python -m pytest tests`` where eventapi-opencl is installed. The conformance kit
covers the protocol itself (``python -m pytest --pyargs eventapi.testing
--eventapi-backend=opencl``); these tests show the backend on the work users time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
import pyopencl as cl
import pytest

import eventapi
from eventapi_opencl import OpenCLBackend

SIZE = 8 * 1024 * 1024  # bytes: long enough to be measured, short enough for a CPU device

SOURCE = """
__kernel void scale(__global float *x, float factor) {
    size_t i = get_global_id(0);
    x[i] = x[i] * factor;
}
"""


@pytest.fixture
def api() -> Iterator[OpenCLBackend]:
    backend = eventapi.backend("opencl")
    assert isinstance(backend, OpenCLBackend)
    yield backend
    assert backend.live_handles() == (0, 0), "a test leaked an event or a stream"


@pytest.fixture
def queue(api: OpenCLBackend) -> Iterator[cl.CommandQueue]:
    """A queue of the user's own, as pyopencl code has one: the backend adopts it."""
    queue = cl.CommandQueue(api.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    yield queue
    queue.finish()


@pytest.fixture
def scale(api: OpenCLBackend) -> cl.Kernel:
    try:
        program = cl.Program(api.context, SOURCE).build()
    except cl.RuntimeError as exc:
        # PoCL 3.0's compiler does not know some virtualised CPUs ("unknown target CPU
        # 'generic'"); the rest of the backend needs no compiler.
        errors = [line for line in str(exc).splitlines() if line.startswith("error:")]
        reason = errors[0] if errors else str(exc).splitlines()[0]
        pytest.skip(f"{api.device_name} cannot compile kernels here: {reason}")
    return program.scale


def test_backend_is_selected_by_name_and_is_one_object_per_device(api: OpenCLBackend) -> None:
    assert eventapi.backend("opencl:0") is api
    assert api.BACKEND == "opencl"
    (row,) = [row for row in eventapi.backends() if row.name == "opencl"]
    assert row.status == "ok"


def test_a_fence_guards_a_buffer_a_copy_writes(api: OpenCLBackend, queue: cl.CommandQueue) -> None:
    host: npt.NDArray[np.float32] = np.arange(SIZE // 4, dtype=np.float32)
    device = cl.Buffer(api.context, cl.mem_flags.READ_WRITE, size=SIZE)
    back = np.zeros_like(host)
    cl.enqueue_copy(queue, device, host, is_blocking=False)
    cl.enqueue_copy(queue, back, device, is_blocking=False)
    seen: list[bool] = []
    with eventapi.EventFence.record(api, queue, keep_alive=(host, device, back)) as fence:
        # Waited on another thread than the one that recorded it.
        def wait() -> None:
            fence.wait(timeout=30.0)
            seen.append(True)

        waiter = threading.Thread(target=wait)
        waiter.start()
        waiter.join()
        assert seen == [True]
        assert fence.reached()
    np.testing.assert_array_equal(back, host)


def test_a_fence_around_a_kernel(
    api: OpenCLBackend, queue: cl.CommandQueue, scale: cl.Kernel
) -> None:
    host: npt.NDArray[np.float32] = np.ones(SIZE // 4, dtype=np.float32)
    device = cl.Buffer(
        api.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host
    )
    scale(queue, host.shape, None, device, np.float32(3.0))
    with eventapi.EventFence.record(api, queue, keep_alive=(device,)) as fence:
        fence.wait(timeout=30.0)
    result = np.empty_like(host)
    cl.enqueue_copy(queue, result, device)  # blocking
    np.testing.assert_array_equal(result, np.full_like(host, 3.0))


def test_another_queue_waits_for_the_fence_on_the_device(
    api: OpenCLBackend, queue: cl.CommandQueue
) -> None:
    host: npt.NDArray[np.float32] = np.arange(SIZE // 4, dtype=np.float32)
    device = cl.Buffer(api.context, cl.mem_flags.READ_WRITE, size=SIZE)
    back = np.zeros_like(host)
    other = api.stream_create_non_blocking()
    try:
        cl.enqueue_copy(queue, device, host, is_blocking=False)
        with eventapi.EventFence.record(api, queue, keep_alive=(host,)) as fence:
            fence.wait_on(other)  # the other queue's copy starts after the write, host free
            cl.enqueue_copy(other.raw, back, device, is_blocking=False)
            api.stream_synchronize(other)
    finally:
        api.stream_destroy(other)
    np.testing.assert_array_equal(back, host)


def test_windows_time_a_copy_and_a_kernel(api: OpenCLBackend, queue: cl.CommandQueue) -> None:
    host: npt.NDArray[np.float32] = np.ones(SIZE // 4, dtype=np.float32)
    src = cl.Buffer(api.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)
    dst = cl.Buffer(api.context, cl.mem_flags.READ_WRITE, size=SIZE)
    try:
        program: cl.Program | None = cl.Program(api.context, SOURCE).build()
    except cl.RuntimeError:
        program = None  # see the `scale` fixture: the copy windows still run
    with eventapi.EventProfiler(api, queue) as prof:
        with prof.window("step"):
            with prof.window("copy"):
                cl.enqueue_copy(queue, dst, src)
            if program is not None:
                with prof.window("kernel"):
                    program.scale(queue, host.shape, None, dst, np.float32(2.0))
        spans = {span.name: span for span in prof.collect()}
    expected = {"step", "copy"} | ({"kernel"} if program is not None else set())
    assert set(spans) == expected
    step, copy = spans["step"], spans["copy"]
    assert (step.depth, copy.depth) == (0, 1)
    assert copy.duration_ns > 0, "a copy of 8 MiB takes device time"
    # Device counters of one queue: the inner window lies within the outer one. The bound is
    # each span's own stated uncertainty of its host placement, nothing more.
    assert step.duration_ns >= copy.duration_ns
    assert copy.start_ns + copy.uncertainty_ns >= step.start_ns - step.uncertainty_ns
