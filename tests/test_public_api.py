"""The public surface of ``eventapi``: exactly the names of the design, and the error tree."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import pickle
import subprocess
import sys

import pytest
from emulated_driver import preload_env

import eventapi
from eventapi import (
    BackendError,
    BackendNotFoundError,
    BackendUnavailableError,
    CaptureError,
    DriverError,
    EventApiError,
    EventStateError,
    UnsupportedError,
)

# The public names the design fixes; third-party backends and users depend on each.
PUBLIC = {
    "EventApi",
    "SupportsEventQuery",
    "SupportsCaptureCheck",
    "SupportsHostFunc",
    "SupportsFastPath",
    # Windows inside captured graphs (docs/profiling.md, "Windows inside captured graphs").
    "SupportsGraphs",
    "SupportsGraphRecord",
    # What eventapi.bench asks of a backend for a cold cache and the clocks (docs/bench.md).
    "SupportsCacheFlush",
    "SupportsClocks",
    "DeviceClocks",
    "EventFence",
    "EventProfiler",
    "Window",
    "Span",
    "Stats",
    "Anchor",
    "EventApiError",
    "DriverError",
    "EventStateError",
    "CaptureError",
    "UnsupportedError",
    "BackendError",
    "BackendNotFoundError",
    "BackendUnavailableError",
    "BackendSpec",
    "BackendInfo",
    "backend",
    "backends",
    "hookimpl",
    "hookspec",
    "PLUGIN_API",
    "bench",
    "register_backend",
    "unregister_backend",
}


def test_all_is_exactly_the_public_names_and_sorted() -> None:
    assert set(eventapi.__all__) == PUBLIC
    assert len(eventapi.__all__) == len(PUBLIC)
    # Sorted as isort sorts imports: constants, then classes, then functions.
    kind = {True: 0, False: 1}
    assert eventapi.__all__ == sorted(
        eventapi.__all__, key=lambda n: (kind[n.isupper()] if n[0].isupper() else 2, n)
    )
    for name in eventapi.__all__:
        assert getattr(eventapi, name) is not None


def test_nothing_else_public_by_accident() -> None:
    # dir(), not vars(): the public names are imported on first use, so vars() holds only those
    # read so far, and dir() is what a reader (and tab completion) sees.
    public = {
        name
        for name in dir(eventapi)
        if not name.startswith("_") and not isinstance(getattr(eventapi, name), type(eventapi))
    }
    assert public - {"annotations"} == PUBLIC


def test_an_unknown_name_is_an_attribute_error_naming_the_module() -> None:
    with pytest.raises(AttributeError, match="module 'eventapi' has no attribute 'Nope'"):
        eventapi.Nope  # type: ignore[attr-defined]  # noqa: B018
    assert not hasattr(eventapi, "TYPE_CHECKING")


def fresh_modules(code: str) -> dict[str, list[str]]:
    """Run ``code`` in a fresh interpreter; the modules each ``# mark`` line added, by mark."""
    script = (
        "import json, sys\n"
        "seen = set(sys.modules)\n"
        "added = {}\n"
        "def mark(label):\n"
        "    global seen\n"
        "    added[label] = sorted(set(sys.modules) - seen)\n"
        "    seen = set(sys.modules)\n" + code + "\nprint(json.dumps(added))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    added: dict[str, list[str]] = json.loads(done.stdout)
    return added


def test_import_eventapi_imports_nothing_but_itself() -> None:
    # What a process pays for `import eventapi` is this one module: every public name is
    # imported when it is first read. (`from __future__ import annotations` is the one import
    # the module itself runs; the interpreter may have loaded it already.)
    added = fresh_modules("import eventapi\nmark('import')")
    assert set(added["import"]) <= {"eventapi", "__future__"}


def test_each_name_imports_only_what_it_needs() -> None:
    added = fresh_modules(
        "import eventapi\nmark('import')\n"
        "eventapi.DriverError\nmark('error')\n"
        "eventapi.EventFence\nmark('fence')\n"
    )
    # An error class is one small module, with no pluggy and no discovery.
    assert [m for m in added["error"] if m.startswith("eventapi")] == ["eventapi._errors"]
    assert "pluggy" not in added["error"]
    # The fence needs no plugin machinery: no pluggy, no discovery, no entry point scanner.
    for module in ("pluggy", "eventapi._plugins._discovery", "importlib.metadata", "eventapi.host"):
        assert module not in added["fence"]


def test_a_name_read_once_is_then_a_plain_attribute() -> None:
    fence = eventapi.EventFence
    assert vars(eventapi)["EventFence"] is fence
    from eventapi import EventFence

    assert EventFence is fence


@pytest.mark.parametrize(
    ("error", "bases"),
    [
        (DriverError, (EventApiError,)),
        (EventStateError, (EventApiError, ValueError)),
        (CaptureError, (EventApiError,)),
        (UnsupportedError, (EventApiError, NotImplementedError)),
        (BackendError, (EventApiError,)),
        (BackendNotFoundError, (BackendError, LookupError)),
        (BackendUnavailableError, (BackendError,)),
    ],
)
def test_the_error_tree(error: type[Exception], bases: tuple[type[Exception], ...]) -> None:
    for base in bases:
        assert issubclass(error, base)


@pytest.mark.parametrize("name", sorted(n for n in PUBLIC if n.endswith("Error")))
def test_errors_print_under_their_public_name(name: str) -> None:
    error = getattr(eventapi, name)
    # What a traceback prints, and where pickle finds the class: never a private module.
    assert f"{error.__module__}.{error.__qualname__}" == f"eventapi.{name}"
    assert pickle.loads(pickle.dumps(error)) is error


def test_a_driver_error_reads_like_the_driver_and_survives_pickling() -> None:
    err = DriverError(
        "cuda", "cuEventRecord", 400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"
    )
    assert str(err) == (
        "cuda: cuEventRecord failed: CUDA_ERROR_INVALID_HANDLE (400): invalid resource handle"
    )
    assert not err.not_ready

    ready = DriverError(
        "hip", "hipEventElapsedTime", 600, "hipErrorNotReady", "not ready", not_ready=True
    )
    copy = pickle.loads(pickle.dumps(ready))
    assert (copy.backend, copy.call, copy.code, copy.name, copy.message, copy.not_ready) == (
        "hip",
        "hipEventElapsedTime",
        600,
        "hipErrorNotReady",
        "not ready",
        True,
    )
    assert str(copy) == str(ready)


def test_plugin_api_is_a_major_minor_pair() -> None:
    major, minor = eventapi.PLUGIN_API
    assert isinstance(major, int)
    assert isinstance(minor, int)
    assert eventapi.BackendSpec("x", load=lambda device: None).api_version == eventapi.PLUGIN_API


# -- every public module's names, and what a backend object shows ---------------------------------

# What each public submodule exports (API.md lists the modules; their docs list these names).
MODULE_NAMES = {
    "eventapi.driverkit": {
        "CaptureCheckMixin",
        "DriverBackend",
        "DriverCalls",
        "Event",
        "EventQueryMixin",
        "HostFuncMixin",
        "LiveHandles",
        "Stream",
        "c_int_out",
        "foreign_stream_handle",
        "launch_host_func",
        "ms_to_ns",
        "open_driver_library",
    },
    "eventapi.driverkit.probe": {"c_int_out", "installed_version", "open_driver_library"},
    "eventapi.host": {"HostBackend"},
    "eventapi.testing": {"Hold", "Kit", "Waiter"},
}


@pytest.mark.parametrize("module", sorted(MODULE_NAMES))
def test_each_public_module_exports_exactly_its_documented_names(module: str) -> None:
    imported = importlib.import_module(module)
    assert set(imported.__all__) == MODULE_NAMES[module]
    assert len(imported.__all__) == len(MODULE_NAMES[module])
    for name in imported.__all__:
        assert getattr(imported, name) is not None


def test_driverkits_face_shows_only_what_it_exports() -> None:
    # Its names are imported when first read, as eventapi's are: dir() is what a reader sees.
    import eventapi.driverkit

    public = {n for n in dir(eventapi.driverkit) if n.isidentifier() and not n.startswith("_")}
    assert public - {"annotations", "probe"} == MODULE_NAMES["eventapi.driverkit"]


# The public attributes of every backend object eventapi.backend() returns: the protocol, the
# optional capabilities it has, the fast path, and the documented extras. Nothing else, so that
# nothing becomes public by accident (a helper of the fast path, a test aid).
PROTOCOL = {
    "BACKEND",
    "event_create",
    "event_destroy",
    "event_record",
    "event_wait",
    "event_elapsed",
    "stream_wait_event",
    "stream_synchronize",
    "stream_create_non_blocking",
    "stream_destroy",
}
CAPABILITIES = {"event_query", "stream_is_capturing", "stream_launch_host_func"}
FAST_PATH = {
    "adopt_stream",
    "event_record_new",
    "event_record_unless_capturing",
    "event_elapsed_many",
}
GRAPHS = {"stream_begin_capture", "stream_end_capture", "graph_launch", "graph_destroy"}
GRAPH_RECORD = {"event_record_in_graph"}
CACHE_FLUSH = {
    "cache_size_bytes",
    "cache_flush_create",
    "stream_flush_cache",
    "cache_flush_destroy",
}
# The cuda backend reads its clocks through NVML where nvidia-ml-py is installed (the tests
# install it: requirements-test.txt).
CLOCKS = {"device_clocks"} if importlib.util.find_spec("pynvml") else set()
EXTRAS = {"device", "live_handles"}
BACKEND_ATTRIBUTES = {
    "host": PROTOCOL
    | CAPABILITIES
    | FAST_PATH
    | GRAPHS
    | GRAPH_RECORD
    | EXTRAS
    | {"begin_capture", "end_capture", "inject_fault", "stamp_ns"},
    "cuda": PROTOCOL
    | CAPABILITIES
    | FAST_PATH
    | GRAPHS
    | GRAPH_RECORD
    | CACHE_FLUSH
    | CLOCKS
    | EXTRAS,
    # The emulated runtime is HIP 7.15, which stamps external records in graphs.
    "hip": PROTOCOL | CAPABILITIES | FAST_PATH | GRAPHS | GRAPH_RECORD | CACHE_FLUSH | EXTRAS,
}


@pytest.mark.parametrize("name", sorted(BACKEND_ATTRIBUTES))
def test_a_backend_object_shows_only_its_documented_attributes(name: str) -> None:
    # In a fresh interpreter with the emulated driver preloaded, as a user's process would be.
    env = os.environ.copy()
    if name != "host":
        env = preload_env(name)  # type: ignore[arg-type]
    code = (
        "import json, eventapi\n"
        f"api = eventapi.backend({name!r})\n"
        "print(json.dumps(sorted(n for n in dir(api) if not n.startswith('_'))))"
    )
    command = [sys.executable, "-c", code]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout)) == BACKEND_ATTRIBUTES[name]


def test_the_version_is_the_installed_distributions() -> None:
    import importlib.metadata

    assert eventapi.__version__ == importlib.metadata.version("eventapi-core")


def test_public_submodules_are_attributes_of_a_bare_import() -> None:
    added = fresh_modules(
        "import eventapi\nmark('import')\n"
        "assert callable(eventapi.trace.export_chrome_trace)\n"
        "assert eventapi.host.HostBackend is not None\nmark('trace')"
    )
    assert set(added["import"]) <= {"eventapi", "__future__"}
    assert "eventapi.trace" in added["trace"]
