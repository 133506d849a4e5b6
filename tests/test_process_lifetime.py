"""What happens to backends and handles over a process's life: exit, fork, and a lost device.

Each test runs a real Python subprocess, on ``host`` or on an emulated driver (preloaded), since
what it checks only exists across a process boundary (a fork, an interpreter shutdown) or
poisons the driver for the rest of the process (a sticky device fault). A subprocess that
hangs fails the test through its timeout; a forked child arms an alarm so that it cannot
outlive the test.
"""

from __future__ import annotations

import subprocess
import textwrap

import child
import pytest
from emulated_driver import REPO_ROOT, DriverName, build, preload_env

KINDS: tuple[DriverName, ...] = ("cuda", "hip")


def run(script: str, kind: DriverName | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a fresh interpreter (on the emulated driver ``kind``, if given)."""
    if kind is not None:
        build()
    env = preload_env(kind) if kind is not None else None
    if env is not None:
        env["PYTHONPATH"] = str(REPO_ROOT / "tests")
    return child.run(textwrap.dedent(script), env, REPO_ROOT)


# -- exit ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["host", *KINDS])
def test_a_process_exiting_with_live_handles_prints_nothing(kind: str) -> None:
    done = run(
        f"""
        import eventapi

        api = eventapi.backend({kind!r})
        stream = api.stream_create_non_blocking()
        events = [api.event_create() for _ in range(3)]
        for event in events:
            api.event_record(event, stream)
        fence = eventapi.EventFence.record(api, stream)
        fence.wait()
        profiler = eventapi.EventProfiler(api)
        with profiler.window("left open at exit"):
            pass
        print("exiting")
        """,
        None if kind == "host" else kind,  # type: ignore[arg-type]
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "exiting\n", "")


def test_a_handle_dropped_after_its_modules_globals_were_cleared_is_silent() -> None:
    # At shutdown the interpreter sets module globals to None, and a handle can outlive them
    # (one in a reference cycle is collected after). This reproduces that order directly: an
    # exit handler clears the handle module's `sys`, and a later one drops the last handles.
    done = run(
        """
        import atexit
        import eventapi.driverkit
        from eventapi.host import HostBackend

        api = HostBackend()
        kept = [api.stream_create_non_blocking(), api.event_create()]
        atexit.register(kept.clear)  # runs last (exit handlers run in reverse order)
        atexit.register(setattr, eventapi.driverkit, "sys", None)
        """
    )
    assert (done.returncode, done.stderr) == (0, "")


# -- fork ----------------------------------------------------------------------------------------

# The child's verdict is its exit status; what went wrong is printed on its stderr.
_FORK_HARNESS = """
import gc, os, signal, sys, traceback, warnings
import eventapi
from eventapi import EventFence, EventStateError


def in_child(body):
    # Python 3.12+ warns about forking a process with threads; that is the case under test.
    warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
    pid = os.fork()
    if pid == 0:
        signal.alarm(20)  # a hang in the child must not outlive the test
        status = 0
        try:
            body()
        except BaseException:
            traceback.print_exc()
            status = 1
        sys.stderr.flush()
        os._exit(status)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def refused(action, what):
    try:
        action()
    except EventStateError as exc:
        assert "fork()" in str(exc), exc
    else:
        raise AssertionError(f"{what} was not refused in the child")
"""


def test_a_host_backend_from_before_fork_is_refused_in_the_child_and_a_new_one_works() -> None:
    done = run(
        _FORK_HARNESS
        + """
from eventapi.host import HostBackend

api = HostBackend()
stream = api.stream_create_non_blocking()
event = api.event_create()
api.event_record(event, stream)
api.event_wait(event)


def child():
    global stream, event
    # The parent's worker thread does not exist here: a record then a wait would hang.
    refused(lambda: api.event_record(event, stream), "a record into the parent's stream")
    refused(lambda: api.event_wait(event), "a wait on the parent's event")
    refused(api.stream_create_non_blocking, "a create through the parent's object")
    api.event_destroy(event)  # releasing is a no-op: the parent owns the real handles
    del stream, event
    gc.collect()
    fresh = HostBackend()
    own = fresh.stream_create_non_blocking()
    fence = EventFence.record(fresh, own)
    fence.wait(timeout=10)
    fence.close()
    fresh.stream_destroy(own)
    assert fresh.live_handles() == (0, 0), fresh.live_handles()


print("child", in_child(child))
api.event_record(event, stream)  # the parent is untouched
api.event_wait(event)
api.event_destroy(event)
api.stream_destroy(stream)
print("parent", tuple(api.live_handles()))
"""
    )
    assert done.stderr == ""
    assert done.stdout.split("\n") == ["child 0", "parent (0, 0)", ""]


@pytest.mark.parametrize("kind", KINDS)
def test_a_driver_initialized_before_fork_is_refused_in_the_child(kind: DriverName) -> None:
    destroy = "cuEventDestroy" if kind == "cuda" else "hipEventDestroy"
    done = run(
        _FORK_HARNESS
        + f"""
from emulated_driver import load

emu = load({kind!r})
api = eventapi.backend({kind!r})
stream = api.stream_create_non_blocking()
event = api.event_create()
api.event_record(event, stream)
api.event_wait(event)
spare = eventapi.EventFence.record(api, stream)  # its driver event stays, as a spare
spare.wait()
spare.close()
api.stream_synchronize(stream)  # the emulator's workers idle: none holds its lock at the fork


def child():
    global event, stream
    refused(lambda: api.event_wait(event), "a wait on the parent's event")
    refused(api.event_create, "a create through the parent's object")
    # The fast path's calls are refused as the plain ones are.
    refused(lambda: api.event_query(event), "a query of the parent's event")
    refused(
        lambda: api.event_record_unless_capturing(event, stream), "a record of the parent's event"
    )
    refused(lambda: api.event_elapsed_many([event], [event]), "a reading of the parent's event")
    try:
        type(api)(0)
    except eventapi.BackendUnavailableError as exc:
        assert "forked" in str(exc), exc
    else:
        raise AssertionError("a new backend object was built in the child")
    destroys = emu.calls({destroy!r})
    del event, stream
    gc.collect()
    assert emu.calls({destroy!r}) == destroys, "a parent's handle reached the driver"


print("child", in_child(child))
api.event_destroy(event)
api.stream_destroy(stream)
print("parent", tuple(api.live_handles()))
""",
        kind,
    )
    assert done.stderr == ""
    assert done.stdout.split("\n") == ["child 0", "parent (0, 0)", ""]


def test_a_fork_while_the_cuda_driver_initializes_is_refused_in_the_child() -> None:
    # Another thread forks while the parent's first backend object is between cuInit and the
    # end of its start-up (here, as the compiled calls are configured): the child must refuse
    # CUDA as it does after a finished initialization.
    done = run(
        _FORK_HARNESS
        + """
from emulated_driver import load
from eventapi_cuda import _backend

emu = load("cuda")
configure = _backend._configure_native
verdict = []


def child():
    try:
        _backend.CudaBackend(0)
    except eventapi.BackendUnavailableError as exc:
        assert "forked" in str(exc), exc
    else:
        raise AssertionError("a backend object was built in a child forked mid-initialization")


def configure_after_a_fork():
    verdict.append(in_child(child))
    configure()


_backend._configure_native = configure_after_a_fork
api = _backend.CudaBackend(0)
api.stream_destroy(api.stream_create_non_blocking())
print("child", verdict[0])
print("parent", tuple(api.live_handles()))
""",
        "cuda",
    )
    assert done.stderr == ""
    assert done.stdout.split("\n") == ["child 0", "parent (0, 0)", ""]


# -- a backend object collected in a reference cycle -----------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_handles_collected_with_their_backend_in_a_cycle_go_before_its_context(
    kind: DriverName,
) -> None:
    # A fresh process, where the collected object holds the only reference to the device's
    # primary context. In a reference cycle the finalizers of the fence and the stream run in
    # no set order, but the object goes after both (each handle holds it): the fence's event,
    # kept as a spare, reaches the driver as the object goes, and on cuda every handle goes
    # before the context.
    done = run(
        f"""
        import gc, logging, sys, threading
        import eventapi
        from emulated_driver import load

        logging.basicConfig(stream=sys.stdout, format="LOG %(message)s")
        emu = load({kind!r})
        if {kind!r} == "cuda":
            from eventapi_cuda import CudaBackend as Backend
        else:
            from eventapi_hip import HipBackend as Backend

        def cycle():
            # On a thread of its own, so that no thread keeps the released context current.
            cycle = {{"api": Backend(0)}}
            cycle["self"] = cycle
            cycle["stream"] = cycle["api"].stream_create_non_blocking()
            cycle["fence"] = eventapi.EventFence.record(cycle["api"], cycle["stream"])
            cycle["fence"].wait()  # seen reached: its driver event could be kept
            print("held", tuple(emu.live_handles(spares=True))[:2])
            del cycle
            gc.collect()

        thread = threading.Thread(target=cycle)
        thread.start()
        thread.join()
        print("left", tuple(emu.live_handles(spares=True)))
        """,
        kind,
    )
    assert done.stderr == ""
    assert done.stdout.splitlines() == ["held (1, 1)", "left (0, 0, 0, 0)"]


# -- a device that faults stays faulted --------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_fault_a_binding_call_finds_stops_the_compiled_calls_too(kind: DriverName) -> None:
    # The host-function launch goes through cuda-python or hip-python, the record through
    # _native.c: a context lost in the first is lost to the second, which calls nothing.
    record = "cuEventRecord" if kind == "cuda" else "hipEventRecord"
    done = run(
        f"""
        import eventapi
        from emulated_driver import load

        emu = load({kind!r})
        api = eventapi.backend({kind!r})
        stream = api.stream_create_non_blocking()
        event = api.event_create()
        emu.set_sticky_error(700)  # an illegal address: the context is poisoned
        try:
            api.stream_launch_host_func(stream, lambda: None)
        except eventapi.DriverError as exc:
            print("launch", exc.code, "context is lost" in exc.message)
        records = emu.calls({record!r})
        try:
            api.event_record(event, stream)
        except eventapi.DriverError as exc:
            print("record", exc.code, exc.call, "lost earlier" in exc.message)
        print("records reaching the driver", emu.calls({record!r}) - records)
        api.event_destroy(event)
        api.stream_destroy(stream)
        print("live", tuple(api.live_handles()))
        """,
        kind,
    )
    lines = [line for line in done.stdout.splitlines() if not line.startswith("LOG ")]
    assert lines == [
        "launch 700 True",
        f"record 700 {record} True",
        "records reaching the driver 0",
        "live (0, 0)",
    ], done.stdout + done.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_a_sticky_device_fault_is_reported_once_and_then_fails_fast(kind: DriverName) -> None:
    record = "cuEventRecord" if kind == "cuda" else "hipEventRecord"
    destroy = "cuEventDestroy" if kind == "cuda" else "hipEventDestroy"
    done = run(
        f"""
        import gc, logging, sys
        import eventapi
        from emulated_driver import load

        logging.basicConfig(stream=sys.stdout, format="LOG %(message)s")
        emu = load({kind!r})
        api = eventapi.backend({kind!r})
        stream = api.stream_create_non_blocking()
        events = [api.event_create() for _ in range(4)]
        fence = eventapi.EventFence.record(api, stream)
        fence.wait()
        spare = eventapi.EventFence.record(api, stream)  # its driver event stays, as a spare
        spare.wait()
        spare.close()

        emu.set_sticky_error(700)  # an illegal address in a kernel: the context is poisoned
        try:
            api.event_record(events[0], stream)
        except eventapi.DriverError as exc:
            print("first", exc.code, "context is lost" in exc.message, "restart" in exc.message)
        records = emu.calls({record!r})
        try:
            api.event_record(events[1], stream)
        except eventapi.DriverError as exc:
            print("later", exc.code, exc.call, "lost earlier" in exc.message)
        print("driver calls after the first", emu.calls({record!r}) - records)

        destroys = emu.calls({destroy!r})
        fence.close()
        del events
        gc.collect()
        api.stream_destroy(stream)
        print("destroys reaching the driver", emu.calls({destroy!r}) - destroys)
        print("live", tuple(api.live_handles()))
        """,
        kind,
    )
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    logged = [line for line in lines if line.startswith("LOG ")]
    assert len(logged) == 1, logged  # once, not once per handle
    assert "device context is lost" in logged[0]
    assert [line for line in lines if not line.startswith("LOG ")] == [
        "first 700 True True",
        f"later 700 {record} True",
        "driver calls after the first 0",
        "destroys reaching the driver 0",
        "live (0, 0)",
    ]
