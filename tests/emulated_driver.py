"""Typed access to the emulated CUDA and HIP drivers' control API (test support).

The emulated drivers are C libraries built from ``tests/emulated/`` by ``make emulated`` into
``build/emulated/libcuda.so.1`` and ``build/emulated/libamdhip64.so``. They implement, on CPU
threads, the driver calls the ``cuda`` and ``hip`` backends make, so the real bindings
(``cuda.bindings.driver``, ``hip.hip``) run against them. Besides the driver functions each
library exports a control API (``emu_*``) that tests use to count live handles, count calls,
inject faults and shape the emulated machine; :class:`EmulatedDriver` wraps it.

Import it from any test module as ``from emulated_driver import EmulatedDriver, load``:
pytest's default ``prepend`` import mode puts ``tests/`` (which has no ``__init__.py``) on
``sys.path``.

Two ways to run a binding on an emulated driver:

* in this process: :func:`load` the library (it is opened with ``RTLD_GLOBAL``) *before* the
  binding's first driver call. The binding's own ``dlopen("libcuda.so.1")`` (or
  ``"libamdhip64.so"``) then finds the loaded library by its soname.
* in a subprocess: run it with :func:`preload_env`, which sets ``LD_PRELOAD``.

Every library keeps its state for the life of the process, and both the binding and the
control API see the same state, so tests compare live counts with a baseline or expect zero
after releasing what they made, and undo any setting they change (device count, driver
version, faults).
"""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Literal, NamedTuple, final

__all__ = [
    "NVML_PATH",
    "REPO_ROOT",
    "DriverName",
    "EmulatedDriver",
    "EmulatedHandles",
    "EmulatedNvml",
    "LoggedOp",
    "build",
    "library_path",
    "load",
    "load_nvml",
    "preload_env",
]

DriverName = Literal["cuda", "hip"]

REPO_ROOT = Path(__file__).resolve().parent.parent
"""The repository root (the directory holding the Makefile)."""

_LIBRARY_FILES: dict[DriverName, str] = {
    "cuda": "libcuda.so.1",
    "hip": "libamdhip64.so",
}

NVML_PATH = REPO_ROOT / "build" / "emulated" / "libnvidia-ml.so.1"
"""The emulated NVML library (``tests/emulated/emu_nvml.c``), which nvidia-ml-py opens by its
soname: its devices are the emulated CUDA driver's, by UUID and PCI bus id."""

_build_lock = threading.Lock()
_built = False
_loaded: dict[DriverName, EmulatedDriver] = {}


class EmulatedHandles(NamedTuple):
    """Handles an emulated driver holds live: created and not destroyed (or retained)."""

    events: int
    streams: int
    graphs: int
    contexts: int
    """Primary-context references retained and not released (always 0 for HIP)."""


def library_path(name: DriverName) -> Path:
    """The path of the emulated driver library ``name`` (``"cuda"`` or ``"hip"``).

    The file exists only after :func:`build` (or ``make emulated``) ran.
    """
    return REPO_ROOT / "build" / "emulated" / _LIBRARY_FILES[name]


def build() -> None:
    """Build both emulated libraries with ``make -s emulated`` (up to date: does nothing).

    Runs at most once per process; thread-safe. Raises ``RuntimeError`` carrying make's
    output when the build fails.
    """
    global _built
    with _build_lock:
        if _built:
            return
        done = subprocess.run(
            ["make", "-s", "emulated"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"`make emulated` failed in {REPO_ROOT} (exit {done.returncode}):\n"
                f"{done.stdout}{done.stderr}"
            )
        _built = True


def load(name: DriverName) -> EmulatedDriver:
    """Build if needed, load the library ``name`` into this process and wrap its control API.

    The library is opened with ``RTLD_GLOBAL``, so a binding whose first driver call comes
    after this uses it. Cached: every call for one name returns the same object.

    Discovery caches its rows for the process: a row listed before the library was loaded
    says the backend has no driver. So a library loaded here makes discovery forget what it
    found (its ``refresh``), and the next listing or selection probes again and finds it.
    """
    with _build_lock:
        cached = _loaded.get(name)
    if cached is not None:
        return cached
    build()
    driver = EmulatedDriver(name, library_path(name))
    with _build_lock:
        driver = _loaded.setdefault(name, driver)
    # Discovery not imported yet has found nothing; importing it here would put it in the
    # processes that test what `import eventapi` imports.
    discovery = sys.modules.get("eventapi._plugins._discovery")
    if discovery is not None:
        discovery.refresh()
    return driver


def preload_env(
    name: DriverName, base: dict[str, str] | None = None, *, nvml: bool = False
) -> dict[str, str]:
    """An environment for a subprocess that runs with the emulated driver ``name`` preloaded.

    ``base`` defaults to this process's environment; ``LD_PRELOAD`` is set to the library's
    absolute path (replacing any value), and with ``nvml`` the emulated NVML library's too, so
    that nvidia-ml-py finds it. Call :func:`build` first.
    """
    env = dict(os.environ if base is None else base)
    env["LD_PRELOAD"] = str(library_path(name)) + (f" {NVML_PATH}" if nvml else "")
    return env


def load_nvml() -> EmulatedNvml:
    """Build if needed and load the emulated NVML library into this process, before pynvml's
    first call (pynvml then opens it by its soname)."""
    build()
    return EmulatedNvml(ctypes.CDLL(str(NVML_PATH), mode=ctypes.RTLD_GLOBAL))


@final
class EmulatedNvml:
    """The control API of the loaded emulated NVML library."""

    __slots__ = ("_lib",)

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib
        lib.emu_nvml_set_clock.restype = ctypes.c_int
        lib.emu_nvml_set_clock.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_ulonglong]
        lib.emu_nvml_clock_reads.restype = ctypes.c_long
        lib.emu_nvml_clock_reads.argtypes = []

    def set_clock(self, ordinal: int, mhz: int = 0, *, reasons: int = 0) -> None:
        """Set CUDA device ``ordinal``'s SM clock (0 keeps it) and its clock event reasons (a
        mask of NVML's ``nvmlClocksEventReason*``: 0x4 power cap, 0x20 thermal slowdown ...)."""
        if self._lib.emu_nvml_set_clock(ordinal, mhz, reasons) != 0:
            raise ValueError(f"no emulated device {ordinal}")

    def clock_reads(self) -> int:
        """How many times a device's current clock was read."""
        return int(self._lib.emu_nvml_clock_reads())


class LoggedOp(NamedTuple):
    """An operation a stream completed (:meth:`EmulatedDriver.op_log`)."""

    stream: int
    """The stream's raw handle (0 for an implicit stream)."""
    kind: Literal["record", "wait", "host", "memset"]
    timed: bool
    """A record of an event with timing (a window's; a stream synchronize records one without)."""
    began_ns: int
    """On the device clock, as events are stamped."""
    ended_ns: int
    bytes: int
    """A memset's byte count (0 for the others)."""


_OP_KINDS: dict[int, Literal["record", "wait", "host", "memset"]] = {
    1: "record",
    2: "wait",
    3: "host",
    4: "memset",
}


@final
class EmulatedDriver:
    """The control API of one loaded emulated driver library.

    Every method is a direct C call into the library; all are thread-safe and none blocks.
    ``lib`` is the ``ctypes.CDLL`` itself, for tests that call driver functions directly.
    """

    __slots__ = ("_lib", "name", "path")

    name: DriverName
    path: Path

    def __init__(self, name: DriverName, path: Path) -> None:
        """Open the library at ``path`` with ``RTLD_GLOBAL``. Prefer :func:`load`.

        Raises ``OSError`` when the library cannot be opened.
        """
        self.name = name
        self.path = path
        self._lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        lib = self._lib
        for counter in ("emu_live_events", "emu_live_streams", "emu_live_graphs"):
            getattr(lib, counter).restype = ctypes.c_long
            getattr(lib, counter).argtypes = []
        lib.emu_live_contexts.restype = ctypes.c_long
        lib.emu_live_contexts.argtypes = []
        lib.emu_inject_fault.restype = ctypes.c_int
        lib.emu_inject_fault.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
        lib.emu_clear_faults.restype = None
        lib.emu_clear_faults.argtypes = []
        lib.emu_signal_calls.restype = ctypes.c_int
        lib.emu_signal_calls.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
        lib.emu_set_device_count.restype = ctypes.c_int
        lib.emu_set_device_count.argtypes = [ctypes.c_int]
        lib.emu_set_driver_version.restype = None
        lib.emu_set_driver_version.argtypes = [ctypes.c_int]
        lib.emu_set_negative_elapsed.restype = None
        lib.emu_set_negative_elapsed.argtypes = [ctypes.c_int]
        lib.emu_set_sticky_error.restype = None
        lib.emu_set_sticky_error.argtypes = [ctypes.c_int]
        lib.emu_calls.restype = ctypes.c_long
        lib.emu_calls.argtypes = [ctypes.c_char_p]
        lib.emu_reset_counters.restype = None
        lib.emu_reset_counters.argtypes = []
        lib.emu_live_allocations.restype = ctypes.c_long
        lib.emu_live_allocations.argtypes = []
        for setter in (lib.emu_set_l2_cache_bytes, lib.emu_set_memset_rate):
            setter.restype = None
            setter.argtypes = [ctypes.c_longlong]
        lib.emu_set_op_log.restype = ctypes.c_int
        lib.emu_set_op_log.argtypes = [ctypes.c_long]
        lib.emu_op_log_count.restype = ctypes.c_long
        lib.emu_op_log_count.argtypes = []
        lib.emu_op_log_get.restype = ctypes.c_int
        lib.emu_op_log_get.argtypes = [
            ctypes.c_long,
            ctypes.POINTER(ctypes.c_uint64),
            ctypes.POINTER(ctypes.c_int),
            ctypes.POINTER(ctypes.c_int),
            ctypes.POINTER(ctypes.c_int64),
            ctypes.POINTER(ctypes.c_int64),
            ctypes.POINTER(ctypes.c_longlong),
        ]

    @property
    def lib(self) -> ctypes.CDLL:
        """The loaded library (driver functions and control API)."""
        return self._lib

    def live_handles(self, *, spares: bool = False) -> EmulatedHandles:
        """Events, streams and graphs created and not destroyed; context references held.

        A stream destroyed with work still queued stops counting at once, as its handle is
        invalid at once (its worker drains the queue in the background). Unless ``spares``,
        the driver events that live backend objects of this driver keep from closed fences (at
        most 16 each, reused by the next fences) are left out, so that the count is what the
        program holds.
        """
        lib = self._lib
        kept = 0 if spares else spare_events(self.name)
        return EmulatedHandles(
            events=int(lib.emu_live_events()) - kept,
            streams=int(lib.emu_live_streams()),
            graphs=int(lib.emu_live_graphs()),
            contexts=int(lib.emu_live_contexts()),
        )

    def inject_fault(self, call: str, *, code: int, count: int = 1) -> None:
        """Make the next ``count`` calls of driver function ``call`` return ``code``.

        ``call`` is the function's base name (``"cuEventRecord"``, ``"hipEventQuery"``); a
        versioned spelling (``"cuEventDestroy_v2"``) means the same function. A faulted call
        is counted by :meth:`calls` and returns ``code`` (the driver's own error number, e.g.
        700 for an illegal address) before doing anything else. A later call for the same
        function replaces the pending fault; ``count=0`` cancels it.

        Raises ``ValueError`` for an empty name, a negative count or ``code`` 0.
        """
        if self._lib.emu_inject_fault(call.encode(), count, code) != 0:
            raise ValueError(
                f"emulated {self.name} driver refused the fault {call!r} x{count} -> {code}: "
                "give a function name, a count >= 0 and a non-zero error code"
            )

    def clear_faults(self) -> None:
        """Cancel every pending injected fault."""
        self._lib.emu_clear_faults()

    def signal_calls(self, call: str, signo: int, *, count: int = 1) -> None:
        """Make the next ``count`` calls of driver function ``call`` raise ``signo`` on the
        calling thread as they enter (the call then goes on): a signal landing inside it."""
        if self._lib.emu_signal_calls(call.encode(), signo, count) != 0:
            raise ValueError(f"emu_signal_calls refused {call!r}, {signo}, {count}")

    def set_device_count(self, count: int) -> None:
        """Set how many devices the emulated machine has (0 to 16; default 2).

        The default can also be set for a whole process with the environment variable
        ``EMU_DEVICE_COUNT``, read on the library's first call. With 0, ``cuInit`` and
        ``hipGetDeviceCount`` (and every HIP call that needs a device) report no device.
        Raises ``ValueError`` outside 0..16.
        """
        if self._lib.emu_set_device_count(count) != 0:
            raise ValueError(f"device count must be within 0..16, not {count}")

    def set_driver_version(self, version: int | None) -> None:
        """Set the version ``cuDriverGetVersion`` / ``hipDriverGetVersion`` reports.

        ``None`` restores the default (CUDA 13000; HIP 71500000, for HIP 7.15). The bindings
        resolved their functions when they loaded; this changes only the reported number.
        """
        self._lib.emu_set_driver_version(0 if version is None else version)

    def set_negative_elapsed(self, count: int) -> None:
        """Make the next ``count`` successful elapsed-time readings return -0.0005 ms.

        Some drivers report a slightly negative duration for near-simultaneous events; this
        lets a test prove a backend clamps it.
        """
        self._lib.emu_set_negative_elapsed(count)

    def set_sticky_error(self, code: int) -> None:
        """Fault the device for good: every later driver call returns ``code``.

        A real device that hits an illegal address (700 on both drivers) poisons its context,
        and every later call of the process, destroys included, returns the same error. The
        calls that only describe the driver (error names, versions, symbol lookup) keep
        working. Process-wide and permanent for the backends (they remember a lost context), so
        use it in a subprocess; ``0`` ends it in the library.
        """
        self._lib.emu_set_sticky_error(code)

    def calls(self, call: str) -> int:
        """How many times driver function ``call`` was called since the last reset.

        Counts every entry, failed and faulted calls included, under the base name (see
        :meth:`inject_fault`). A function never called reads 0.
        """
        return int(self._lib.emu_calls(call.encode()))

    def reset_counters(self) -> None:
        """Set every call count to zero (live handle counts and faults are untouched)."""
        self._lib.emu_reset_counters()

    def live_allocations(self) -> int:
        """Device allocations made and not freed."""
        return int(self._lib.emu_live_allocations())

    def set_l2_cache_bytes(self, nbytes: int | None) -> None:
        """Set the L2 cache size every device reports; ``None`` restores the default (4 MiB,
        or ``EMU_L2_CACHE_BYTES``)."""
        self._lib.emu_set_l2_cache_bytes(nbytes or 0)

    def set_memset_rate(self, bytes_per_us: int | None) -> None:
        """Set how many bytes a memset writes per microsecond of device time; ``None``
        restores the default (100,000, or ``EMU_MEMSET_BYTES_PER_US``)."""
        self._lib.emu_set_memset_rate(bytes_per_us or 0)

    def start_op_log(self, capacity: int = 65536) -> None:
        """Log every operation a stream completes from now on, the last ``capacity`` kept."""
        if self._lib.emu_set_op_log(capacity) != 0:
            raise ValueError(f"the operation log refused a capacity of {capacity}")

    def op_log(self, *, stop: bool = True) -> list[LoggedOp]:
        """The operations logged since :meth:`start_op_log`, in the order they completed; with
        ``stop``, logging stops."""
        lib = self._lib
        entries = []
        stream, kind, timed = ctypes.c_uint64(), ctypes.c_int(), ctypes.c_int()
        began, ended, nbytes = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_longlong()
        for i in range(lib.emu_op_log_count()):
            refs = (stream, kind, timed, began, ended, nbytes)
            if lib.emu_op_log_get(i, *(ctypes.byref(ref) for ref in refs)) == 0:
                entries.append(
                    LoggedOp(
                        stream.value,
                        _OP_KINDS[kind.value],
                        bool(timed.value),
                        began.value,
                        ended.value,
                        nbytes.value,
                    )
                )
        if stop:
            lib.emu_set_op_log(0)
        return entries

    def __repr__(self) -> str:
        return f"<EmulatedDriver {self.name} {self.path}>"


def spare_events(backend: str) -> int:
    """The driver events every live backend object named ``backend`` keeps from closed fences.

    A cuda or hip backend object keeps them (its compiled type counts them in the third field
    of ``_live_counts()``) until it is garbage-collected.
    """
    native = sys.modules.get(f"eventapi_{backend}._native")  # None: no backend object was built
    if native is None:
        return 0
    return sum(obj._live_counts()[2] for obj in gc.get_objects() if isinstance(obj, native.Backend))


def begin_capture(kind: DriverName, raw_stream: Any) -> None:
    """Start a graph capture on the stream whose binding handle is ``raw_stream``, relaxed mode."""
    if kind == "cuda":
        from cuda.bindings import driver

        mode = driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
        err = driver.cuStreamBeginCapture(raw_stream, mode)[0]
    else:
        hip = _hip()
        mode = hip.hipStreamCaptureMode.hipStreamCaptureModeRelaxed
        err = hip.hipStreamBeginCapture(raw_stream, mode)[0]
    assert not err, err


def end_capture(kind: DriverName, raw_stream: Any) -> None:
    """End the capture :func:`begin_capture` started, and destroy the graph it made."""
    if kind == "cuda":
        from cuda.bindings import driver

        err, graph = driver.cuStreamEndCapture(raw_stream)
        assert not err, err
        assert not driver.cuGraphDestroy(graph)[0]
    else:
        hip = _hip()
        err, graph = hip.hipStreamEndCapture(raw_stream)
        assert not err, err
        assert not hip.hipGraphDestroy(graph)[0]


def _hip() -> Any:
    # hip-python's stubs leave its functions untyped; the helpers use the results as Any.
    from hip import hip

    return hip
