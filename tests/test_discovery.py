"""Backend discovery and selection, against real (fake) installed distributions.

Each folder under tests/plugins/ is a site directory with a ``.dist-info`` and a plugin module;
a test puts it on ``sys.path`` and discovery finds it through the real ``importlib.metadata``.
The real ``cuda`` and ``hip`` entry points of this checkout are discovered too; tests read only
the rows of the names they install, and block ``cuda`` and ``hip`` where priorities matter.
"""

from __future__ import annotations

import copy
import json
import os
import pickle
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from child import run_json
from threads import JOIN_S, Waiter

import eventapi
from eventapi import (
    BackendError,
    BackendInfo,
    BackendNotFoundError,
    BackendSpec,
    BackendUnavailableError,
)
from eventapi._plugins import _discovery, _selection

PLUGINS = Path(__file__).parent / "plugins"
NOT_HERE = "cuda,hip"  # the real GPU plugins: their state must not steer these tests

AddSites = Callable[..., None]


@pytest.fixture
def sites(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[AddSites]:
    """Put fake distributions on sys.path; discovery starts afresh with a clean environment."""
    for var in (
        "EVENTAPI_BACKEND",
        "EVENTAPI_DISABLE_PLUGIN_AUTOLOAD",
        "EVENTAPI_PLUGIN_TIMEOUT",
        "EVENTAPI_FAKE_HOSTILE",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("EVENTAPI_DISABLE_PLUGINS", NOT_HERE)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # quarantine markers
    # A plugin import an earlier test released from a hang finishes after that test, and puts
    # its module back: drop it, so that this test imports its plugins afresh.
    for name in [name for name in sys.modules if name.startswith("eventapi_fake_")]:
        del sys.modules[name]
    before = set(sys.modules)

    def add(*folders: str) -> None:
        for folder in folders:
            monkeypatch.syspath_prepend(str(PLUGINS / folder))
        _discovery.refresh()

    _discovery.refresh()
    yield add
    gate = sys.modules.get("eventapi_fake_hostile_gate")
    if gate is not None:
        gate.RELEASE.set()  # end any hang a test left behind
    _discovery.refresh()
    for name in set(sys.modules) - before:
        if name.startswith("eventapi_fake_"):
            del sys.modules[name]


def set_env(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    _discovery.refresh()


def row(name: str) -> BackendInfo:
    (found,) = [r for r in eventapi.backends() if r.name == name]
    return found


def fake(module: str) -> Any:
    """A fake plugin module, imported by discovery; typed Any for its test attributes."""
    return sys.modules[module]


def assert_others_work() -> None:
    """host and alpha, when installed, are still listed as ok and selectable."""
    rows = {r.name: r for r in eventapi.backends()}
    assert rows["host"].status == "ok"
    assert eventapi.backend("host").BACKEND == "host"
    if "alpha" in rows and rows["alpha"].distribution == "eventapi-alpha":
        assert rows["alpha"].status == "ok"
        assert eventapi.backend("alpha") is eventapi.backend("alpha")


# -- laziness -------------------------------------------------------------------------------


def run_python(code: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return json.loads(done.stdout)


def test_import_scans_nothing_and_imports_no_binding() -> None:
    state = run_python(
        "import json, sys, eventapi\nprint(json.dumps({'modules': sorted(sys.modules)}))"
    )
    # The entry point scanner is not even imported (it costs more than eventapi itself), so
    # nothing was scanned.
    assert "importlib.metadata" not in state["modules"]
    loaded = [
        m
        for m in state["modules"]
        if m.split(".")[0] in {"cuda", "hip", "rocm", "eventapi_cuda", "eventapi_hip"}
        or m in {"eventapi._plugins._host", "eventapi.host"}
    ]
    assert loaded == []


def test_listing_imports_no_driver_binding_and_loads_no_backend() -> None:
    # A probe may use pure-Python helpers of a binding's distribution (a path resolver, the
    # bare namespace package); what it must not import is compiled binding code, or a
    # backend module, which imports it.
    state = run_python(
        "import json, sys, eventapi\n"
        "rows = eventapi.backends()\n"
        "compiled = [name for name, module in list(sys.modules.items())\n"
        "            if name.split('.')[0] in {'cuda', 'hip', 'rocm'}\n"
        "            and str(getattr(module, '__file__', '')).endswith('.so')]\n"
        "print(json.dumps({'modules': sorted(sys.modules), 'compiled': compiled,\n"
        "                  'names': [r.name for r in rows]}))"
    )
    assert {"host", "cuda", "hip"} <= set(state["names"])
    assert state["compiled"] == []
    loaded = set(state["modules"]) & {
        "cuda.bindings.driver",
        "hip.hip",
        "rocm.bindings.hip",
        "eventapi_cuda._backend",
        "eventapi_hip._backend",
        "eventapi.host",
    }
    assert loaded == set()


def test_listing_imports_only_what_the_rows_need() -> None:
    # The rows need discovery, the plugins' hook modules and their probes (eventapi.driverkit's
    # light face and its probe module): not the handle layer, not the fence or the profiler, not
    # logging, which discovery imports only to report a plugin that misbehaves, and not the
    # email parser behind importlib.metadata's version() (about 0.7 ms, against the 7 ms
    # listing may add to pluggy's own import and scan).
    state = run_python(
        "import json, sys, eventapi\n"
        "eventapi.backends()\n"
        "print(json.dumps({'modules': sorted(sys.modules)}))"
    )
    heavy = {
        "eventapi.driverkit._backend",
        "eventapi.driverkit._handles",
        "eventapi.driverkit._calls",
        "eventapi._fence",
        "eventapi._profiling._profiler",
        "eventapi._profiling._anchor",
        "eventapi._plugins._selection",
        "eventapi.host",
        "logging",
        "email.parser",
        "difflib",  # only a name not found needs its suggestions
    }
    assert heavy & set(state["modules"]) == set()


def test_specs_and_rows_are_immutable_values() -> None:
    def load(device: int | None) -> object:
        return object()

    spec = BackendSpec("toy", load, priority=60)
    same = BackendSpec(name="toy", load=load, priority=60)
    assert spec == same
    assert hash(spec) == hash(same)
    assert spec != BackendSpec("toy", load, priority=61)
    assert (spec.probe(), spec.install_hint, spec.api_version, spec.default_device) == (
        None,
        "",
        eventapi.PLUGIN_API,
        None,
    )
    assert repr(spec).startswith("BackendSpec(name='toy', load=")
    with pytest.raises(AttributeError):
        spec.priority = 1  # type: ignore[misc]
    row = BackendInfo("toy", "eventapi-toy", "1.0", 60, "ok", "", "")
    assert pickle.loads(pickle.dumps(row)) == row
    assert copy.deepcopy(row) == row
    assert row.usable
    with pytest.raises(AttributeError):
        del row.status


def test_selecting_by_name_imports_only_that_plugin(sites: AddSites) -> None:
    sites("alpha", "beta")
    eventapi.backend("alpha")
    assert "eventapi_fake_alpha" in sys.modules
    assert "eventapi_fake_beta" not in sys.modules


# -- the rows ---------------------------------------------------------------------------------


def test_host_is_listed_ok_at_priority_zero(sites: AddSites) -> None:
    host = row("host")
    assert host == BackendInfo(
        name="host",
        distribution="eventapi-core",
        version=eventapi.__version__,
        priority=0,
        status="ok",
        reason="",
        install_hint="",
    )
    assert host.usable


def test_rows_sorted_by_priority_then_name(sites: AddSites) -> None:
    sites("alpha", "beta", "widget", "flaky")
    rows = eventapi.backends()
    keys = [(-r.priority, r.name) for r in rows]
    assert keys == sorted(keys)
    assert [r.name for r in rows if r.name in {"alpha", "beta", "widget", "flaky", "host"}] == [
        "widget",
        "alpha",
        "beta",
        "flaky",
        "host",
    ]


def test_plugin_row_carries_its_distribution(sites: AddSites) -> None:
    sites("alpha", "widget")
    assert row("alpha") == BackendInfo("alpha", "eventapi-alpha", "1.0", 70, "ok", "", "")
    widget = row("widget")
    assert widget.status == (
        "unavailable: no widget driver found (libwidget.so.3); install the widget driver"
    )
    assert widget.reason == "no widget driver found (libwidget.so.3); install the widget driver"
    assert widget.install_hint == "pip install eventapi-widget"
    assert not widget.usable


# -- broken plugins ---------------------------------------------------------------------------

BROKEN = [
    # (folder, name, version, what the reason must say)
    ("badimport", "badimport", "0.3", "cannot import eventapi_fake_badimport: ModuleNotFoundError"),
    ("badhook", "badhook", "0.4", "eventapi_backends raised RuntimeError: the badhook plugin"),
    ("badname", "badname", "0.5", "yielded a BackendSpec named 'othername'"),
    ("garbage", "garbage", "0.6", "yielded {'name': 'garbage', 'priority': 50} (dict)"),
    ("nohook", "nohook", "0.7", "decorated with @eventapi.hookimpl"),
    ("badprobe", "badprobe", "0.8", "probe raised KeyError: 'WIDGET_HOME'"),
    ("future", "future", "2.0.0", "built for plugin API 2.x, this eventapi-core speaks 1.1"),
]


@pytest.mark.parametrize(("folder", "name", "version", "says"), BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_plugin_is_reported_and_others_work(
    sites: AddSites, folder: str, name: str, version: str, says: str
) -> None:
    sites("alpha", folder)
    broken = row(name)
    assert broken.status.startswith("broken: ")
    assert says in broken.status
    assert broken.reason == broken.status.removeprefix("broken: ")
    assert (broken.distribution, broken.version) == (f"eventapi-{name}", version)
    assert not broken.usable

    with pytest.raises(BackendError) as raised:
        eventapi.backend(name)
    # Broken is neither "not installed" nor "cannot run here": the plugin itself must be fixed.
    assert type(raised.value) is BackendError
    assert says in str(raised.value)
    assert f"eventapi-{name} {version}" in str(raised.value)

    assert_others_work()
    assert eventapi.backend() is eventapi.backend("alpha")  # auto-selection skips it


def test_plugin_for_another_major_names_both_versions(sites: AddSites) -> None:
    sites("future")
    assert row("future").reason == (
        "built for plugin API 2.x, this eventapi-core speaks 1.1; install a version of "
        "eventapi-future built for plugin API 1.x (or an eventapi-core that speaks its version)"
    )


def test_probe_that_raises_keeps_its_priority(sites: AddSites) -> None:
    sites("badprobe")
    assert row("badprobe").priority == 60


def test_two_distributions_claiming_one_name_conflict(sites: AddSites) -> None:
    sites("alpha", "alpha_fork", "beta")
    claims = [r for r in eventapi.backends() if r.name == "alpha"]
    assert sorted(r.distribution for r in claims) == ["eventapi-alpha", "eventapi-alpha-fork"]
    for claim in claims:
        assert claim.status.startswith("broken: conflict: name claimed by ")
        assert "eventapi-alpha 1.0" in claim.status
        assert "eventapi-alpha-fork 2.0" in claim.status
        assert claim.status.endswith("; uninstall one")
    assert len({r.status for r in claims}) == 1

    with pytest.raises(BackendError, match="uninstall one"):
        eventapi.backend("alpha")
    # Neither claimant was imported: the conflict is known from metadata alone.
    assert "eventapi_fake_alpha" not in sys.modules
    assert eventapi.backend() is eventapi.backend("beta")


# -- selection --------------------------------------------------------------------------------


def test_default_is_highest_priority_usable(sites: AddSites) -> None:
    # widget (90) cannot run here and flaky (40) is lower: alpha (70) wins over host (0).
    sites("alpha", "widget", "flaky", "badimport")
    assert _selection.choose() == ("alpha", None, "priority")
    assert eventapi.backend() is eventapi.backend("alpha")
    assert fake("eventapi_fake_widget").LOADS == []


def test_default_is_host_when_nothing_else_is_usable(sites: AddSites) -> None:
    sites("widget", "badhook")
    # badhook could not say its priority, so it might have been chosen: never silently.
    with pytest.warns(RuntimeWarning, match=r"chose 'host' by priority, but 'badhook' \("):
        assert eventapi.backend() is eventapi.backend("host")


def test_passing_over_a_broken_backend_of_higher_priority_warns(
    sites: AddSites, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVENTAPI_FAKE_HOSTILE", "probe:raise")
    sites("alpha", "hostile")
    with pytest.warns(RuntimeWarning) as caught:
        assert eventapi.backend() is eventapi.backend("alpha")
    (warning,) = caught
    assert str(warning.message).startswith(
        "eventapi.backend() chose 'alpha' by priority, but 'hostile' (eventapi-hostile 0.9, "
        "priority 80) is broken: probe raised RuntimeError: hostile plugin fails in probe."
    )
    assert warning.filename == __file__  # points at the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        eventapi.backend("alpha")  # an explicit choice passes over nothing
        monkeypatch.setenv("EVENTAPI_BACKEND", "alpha")
        eventapi.backend()
        monkeypatch.delenv("EVENTAPI_BACKEND")
        # Lower than the chosen one (badhook could not say its priority: 0) is no loss.
        set_env(monkeypatch, "EVENTAPI_DISABLE_PLUGINS", f"{NOT_HERE},hostile")
        sites("badhook")
        assert eventapi.backend() is eventapi.backend("alpha")


def test_tie_at_the_top_says_how_to_choose(
    sites: AddSites, monkeypatch: pytest.MonkeyPatch
) -> None:
    sites("alpha", "beta")
    with pytest.raises(BackendError) as raised:
        eventapi.backend()
    message = str(raised.value)
    assert "alpha (eventapi-alpha 1.0)" in message
    assert "beta (eventapi-beta 1.0)" in message
    assert "eventapi.backend('alpha')" in message
    assert "EVENTAPI_BACKEND=alpha" in message
    assert fake("eventapi_fake_alpha").LOADS == []  # nothing was loaded to find out

    monkeypatch.setenv("EVENTAPI_BACKEND", "beta")
    assert eventapi.backend() is eventapi.backend("beta")


def test_variable_selects(sites: AddSites, monkeypatch: pytest.MonkeyPatch) -> None:
    sites("alpha", "beta")
    monkeypatch.setenv("EVENTAPI_BACKEND", "alpha:2")
    assert _selection.choose() == ("alpha", 2, "EVENTAPI_BACKEND")
    chosen = eventapi.backend()
    assert chosen is eventapi.backend("alpha:2")
    assert fake("eventapi_fake_alpha").LOADS == [2]


def test_argument_beats_variable(sites: AddSites, monkeypatch: pytest.MonkeyPatch) -> None:
    sites("alpha", "beta")
    monkeypatch.setenv("EVENTAPI_BACKEND", "beta")
    assert eventapi.backend("alpha") is not eventapi.backend("beta")
    assert _selection.choose("alpha") == ("alpha", None, "argument")


def test_one_object_per_name_and_device(sites: AddSites) -> None:
    sites("alpha")
    default = eventapi.backend("alpha")
    one = eventapi.backend("alpha:1")
    zero = eventapi.backend("alpha:0")
    assert eventapi.backend("alpha") is default
    assert eventapi.backend("alpha:1") is one
    # alpha's objects report no device, so "alpha" (its default) is not known to be "alpha:0".
    assert len({id(default), id(one), id(zero)}) == 3
    assert fake("eventapi_fake_alpha").LOADS == [None, 1, 0]


def test_refresh_builds_new_objects(sites: AddSites) -> None:
    sites("alpha")
    first = eventapi.backend("alpha")
    _discovery.refresh()
    assert eventapi.backend("alpha") is not first


def test_concurrent_first_selection_loads_once(sites: AddSites) -> None:
    sites("alpha")
    row("alpha")  # import the plugin so its gate can be set before the race
    alpha = fake("eventapi_fake_alpha")
    gate = threading.Event()
    alpha.GATE = gate
    alpha.ENTERED.clear()
    threads_n = 8
    start = threading.Barrier(threads_n + 1)
    got: list[object] = []

    def select() -> None:
        start.wait()
        got.append(eventapi.backend("alpha"))

    threads = [threading.Thread(target=select) for _ in range(threads_n)]
    for thread in threads:
        thread.start()
    start.wait()
    # One load is under way and holds; every other thread asks while it does.
    assert alpha.ENTERED.wait(timeout=10)
    gate.set()
    for thread in threads:
        thread.join(timeout=10)
    assert len(got) == threads_n
    assert all(obj is got[0] for obj in got)
    assert alpha.LOADS == [None]


@pytest.mark.parametrize("bad", ["alpha:", "alpha:x", ":1", "alpha:-1", "", "al pha", "a:1:2"])
def test_malformed_name_says_the_expected_form(sites: AddSites, bad: str) -> None:
    with pytest.raises(ValueError, match=r"NAME or NAME:DEVICE, for example 'cuda' or 'cuda:1'"):
        eventapi.backend(bad)


def test_malformed_variable_names_the_variable(
    sites: AddSites, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVENTAPI_BACKEND", "cuda:first")
    with pytest.raises(ValueError, match=r"EVENTAPI_BACKEND='cuda:first' is not of the form"):
        eventapi.backend()


def test_name_must_be_a_string(sites: AddSites) -> None:
    with pytest.raises(TypeError, match="backend name must be a str, got int"):
        eventapi.backend(1)  # type: ignore[arg-type]


# -- explicit choices that cannot be satisfied never fall back -------------------------------


def test_unavailable_choice_raises_with_the_probe_reason(
    sites: AddSites, monkeypatch: pytest.MonkeyPatch
) -> None:
    sites("alpha", "widget")
    with pytest.raises(BackendUnavailableError) as raised:
        eventapi.backend("widget")
    message = str(raised.value)
    assert "backend 'widget' (eventapi-widget 1.2) cannot be used here" in message
    assert "no widget driver found (libwidget.so.3); install the widget driver" in message
    assert "Usable here: alpha, host" in message
    assert fake("eventapi_fake_widget").LOADS == []

    monkeypatch.setenv("EVENTAPI_BACKEND", "widget")
    with pytest.raises(BackendUnavailableError, match=r"'widget' \(from EVENTAPI_BACKEND\)"):
        eventapi.backend()
    assert_others_work()


def test_load_that_raises_is_chained(sites: AddSites, monkeypatch: pytest.MonkeyPatch) -> None:
    sites("alpha", "flaky")
    assert row("flaky").status == "ok"  # the probe cannot know; the load finds out
    with pytest.raises(BackendUnavailableError) as raised:
        eventapi.backend("flaky:1")
    assert str(raised.value) == (
        "backend 'flaky:1' failed to load: OSError: widget driver initialisation failed: "
        "device busy"
    )
    assert isinstance(raised.value.__cause__, OSError)

    monkeypatch.setenv("EVENTAPI_BACKEND", "flaky")
    with pytest.raises(BackendUnavailableError, match="failed to load"):
        eventapi.backend()
    assert_others_work()


def test_host_has_no_devices(sites: AddSites) -> None:
    with pytest.raises(BackendUnavailableError, match="select it as 'host'") as raised:
        eventapi.backend("host:1")
    assert isinstance(raised.value.__cause__, ValueError)


def test_unknown_name_lists_installed_backends(sites: AddSites) -> None:
    sites("alpha")
    with pytest.raises(BackendNotFoundError) as raised:
        eventapi.backend("nosuch")
    message = str(raised.value)
    assert isinstance(raised.value, LookupError)
    assert "backend 'nosuch' is not installed" in message
    assert "alpha (ok)" in message
    assert "host (ok)" in message
    assert "entry point 'nosuch' in the group 'eventapi.backends'" in message


def test_unknown_project_backend_gives_the_pip_command(
    sites: AddSites, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With autoload off the editable eventapi-cuda of this checkout is not scanned: as if absent.
    set_env(monkeypatch, "EVENTAPI_DISABLE_PLUGIN_AUTOLOAD", "1")
    for name in ("cuda", "hip"):
        with pytest.raises(BackendNotFoundError) as raised:
            eventapi.backend(f"{name}:0")
        message = str(raised.value)
        assert f'Install it with: pip install "eventapi-core[{name}]"' in message
        assert "EVENTAPI_DISABLE_PLUGIN_AUTOLOAD is set" in message


# -- the variables ----------------------------------------------------------------------------


# eventapi.register_backend and eventapi.unregister_backend: exported by eventapi/__init__.py.
@pytest.fixture
def registered() -> Iterator[Callable[[str, Callable[[int | None], Any]], None]]:
    names: list[str] = []

    def register(name: str, load: Callable[[int | None], Any]) -> None:
        eventapi.register_backend(BackendSpec(name=name, load=load, priority=20))
        names.append(name)

    yield register
    for name in names:
        eventapi.unregister_backend(name)


def host_backend(device: int | None) -> Any:
    from eventapi.host import HostBackend

    return HostBackend()


def test_autoload_disabled_keeps_host_and_code_plugins(
    sites: AddSites,
    registered: Callable[[str, Callable[[int | None], Any]], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sites("alpha", "badimport")
    registered("coded", host_backend)
    monkeypatch.setenv("EVENTAPI_DISABLE_PLUGINS", "")
    set_env(monkeypatch, "EVENTAPI_DISABLE_PLUGIN_AUTOLOAD", "1")
    assert [(r.name, r.distribution, r.status) for r in eventapi.backends()] == [
        ("coded", "(registered in code)", "ok"),
        ("host", "eventapi-core", "ok"),
    ]
    assert eventapi.backend() is eventapi.backend("coded")
    with pytest.raises(BackendNotFoundError, match="EVENTAPI_DISABLE_PLUGIN_AUTOLOAD is set"):
        eventapi.backend("alpha")
    assert "eventapi_fake_alpha" not in sys.modules

    set_env(monkeypatch, "EVENTAPI_DISABLE_PLUGIN_AUTOLOAD", "0")
    assert row("alpha").status == "ok"


def test_host_is_one_plugin_though_declared_twice(sites: AddSites) -> None:
    # Registered in code and by eventapi-core's entry point: the same plugin, not a conflict.
    assert [r.name for r in eventapi.backends()].count("host") == 1


def test_blocked_plugin_is_listed_not_imported(
    sites: AddSites, monkeypatch: pytest.MonkeyPatch
) -> None:
    sites("alpha", "beta")
    set_env(monkeypatch, "EVENTAPI_DISABLE_PLUGINS", f"{NOT_HERE}, alpha")
    alpha = row("alpha")
    assert (alpha.status, alpha.reason) == ("blocked", "listed in EVENTAPI_DISABLE_PLUGINS")
    assert alpha.distribution == "eventapi-alpha"
    assert "eventapi_fake_alpha" not in sys.modules

    with pytest.raises(BackendUnavailableError) as raised:
        eventapi.backend("alpha")
    assert "blocked by EVENTAPI_DISABLE_PLUGINS='cuda,hip, alpha'" in str(raised.value)
    assert "remove 'alpha' from that variable" in str(raised.value)
    assert eventapi.backend() is eventapi.backend("beta")


def test_code_registered_load_must_return_a_backend(
    sites: AddSites, registered: Callable[[str, Callable[[int | None], Any]], None]
) -> None:
    registered("hollow", lambda device: object())
    with pytest.raises(BackendError, match=r"lacks BACKEND, event_create, .*eventapi\.EventApi"):
        eventapi.backend("hollow")
    assert_others_work()


def test_registering_a_name_twice_in_code_is_refused(
    sites: AddSites, registered: Callable[[str, Callable[[int | None], Any]], None]
) -> None:
    registered("coded", host_backend)
    with pytest.raises(ValueError, match="already registered"):
        eventapi.register_backend(BackendSpec(name="coded", load=host_backend))
    for name, owner in [("host", "eventapi-core"), ("cuda", "eventapi-cuda")]:
        with pytest.raises(ValueError, match=f"'{name}' is reserved for {owner}"):
            eventapi.register_backend(BackendSpec(name=name, load=host_backend))


# -- one object per device --------------------------------------------------------------------


class OnDevice:
    """A host backend that reports a device, as a backend with devices does."""

    def __init__(self, device: int) -> None:
        from eventapi.host import HostBackend

        self.device = device
        self._host = HostBackend()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._host, name)


@pytest.mark.parametrize("first", ["devs", "devs:0"])
def test_the_default_device_and_its_index_are_one_object(
    sites: AddSites,
    registered: Callable[[str, Callable[[int | None], Any]], None],
    monkeypatch: pytest.MonkeyPatch,
    first: str,
) -> None:
    # A plugin that declares no default_device: selection learns it from the object's device.
    loads: list[int | None] = []

    def load(device: int | None) -> Any:
        loads.append(device)
        return OnDevice(0 if device is None else device)

    registered("devs", load)
    one = eventapi.backend(first)
    monkeypatch.setenv("EVENTAPI_BACKEND", "devs")
    assert eventapi.backend() is one
    assert eventapi.backend("devs") is one
    assert eventapi.backend("devs:0") is one
    other: Any = eventapi.backend("devs:1")
    assert other is not one
    assert other.device == 1
    # "devs:0" first, then "devs": load(None) had to run to learn the device, and its object
    # was dropped; a plugin that declares default_device avoids even that (cuda, hip: below).
    assert loads == ([None, 1] if first == "devs" else [0, None, 1])


DEVICE_IDENTITY = """
import json, os, sys
sys.path.insert(0, {tests!r})
from emulated_driver import load
import eventapi
from eventapi._plugins import _discovery

name, count_call = {name!r}, {count_call!r}
driver = load(name)
results = []
for order in ([name, name + ":0", "env"], [name + ":0", name, "env"], ["env", name + ":0", name]):
    _discovery.refresh()
    got = []
    for spelling in order:
        if spelling == "env":
            os.environ["EVENTAPI_BACKEND"] = name
            got.append(eventapi.backend())
            del os.environ["EVENTAPI_BACKEND"]
        else:
            got.append(eventapi.backend(spelling))
        if len(got) == 1:
            constructed = driver.calls(count_call)
    a, b, c = got
    # Each spelling's handles go to the others: one object, so none is foreign.
    stream = a.stream_create_non_blocking()
    event = b.event_create()
    c.event_record(event, stream)
    a.event_wait(event)
    b.event_destroy(event)
    c.stream_destroy(stream)
    constructed_again = driver.calls(count_call) - constructed
    other = eventapi.backend(name + ":1")
    results.append({{
        "one_object": a is b is c,
        "device": a.device,
        "constructed_again": constructed_again,
        "other_is_another": other is not a and other.device == 1,
    }})
print(json.dumps(results))
"""


@pytest.mark.parametrize(
    ("name", "count_call"), [("cuda", "cuDevicePrimaryCtxRetain"), ("hip", "hipGetDeviceCount")]
)
def test_every_spelling_of_one_device_is_one_object_on_the_emulated_drivers(
    name: str, count_call: str
) -> None:
    from emulated_driver import build, preload_env

    build()
    env = preload_env(name)  # type: ignore[arg-type]
    env["EMU_DEVICE_COUNT"] = "2"
    env["EVENTAPI_DISABLE_PLUGINS"] = "hip" if name == "cuda" else "cuda"
    env.pop("EVENTAPI_BACKEND", None)
    tests = str(Path(__file__).parent)
    code = DEVICE_IDENTITY.format(tests=tests, name=name, count_call=count_call)
    # Orders: "NAME" first, "NAME:0" first, the variable first.
    expected = {"one_object": True, "device": 0, "constructed_again": 0, "other_is_another": True}
    assert run_json(code, env) == [expected] * 3


# -- slow and hostile plugins -----------------------------------------------------------------


def hostile_gate() -> Any:
    """The events the hostile plugin hangs on (its site must be on sys.path)."""
    import importlib

    return importlib.import_module("eventapi_fake_hostile_gate")


def test_a_hanging_plugin_holds_up_no_other_backend(
    sites: AddSites, monkeypatch: pytest.MonkeyPatch
) -> None:
    sites("alpha", "hostile")
    alpha = eventapi.backend("alpha")
    monkeypatch.setenv("EVENTAPI_FAKE_HOSTILE", "probe:hang")
    gate = hostile_gate()
    listing = Waiter(eventapi.backends)
    assert gate.ENTERED.wait(timeout=JOIN_S)
    # While hostile's probe hangs (within the default budget of 30 s): alpha, already loaded,
    # comes back at once, and host loads.
    again = Waiter(lambda: eventapi.backend("alpha"))
    host = Waiter(lambda: eventapi.backend("host"))
    again.result()
    host.result()
    assert again.value is alpha
    assert host.value is not None
    assert listing.thread.is_alive()
    gate.RELEASE.set()
    listing.result()
    assert row("hostile").status == "ok"


def test_only_callers_of_the_same_backend_wait_for_its_load(sites: AddSites) -> None:
    sites("alpha", "beta")
    row("alpha")  # import the plugin so its gate can be set before the load
    alpha = fake("eventapi_fake_alpha")
    gate = threading.Event()
    alpha.GATE = gate
    alpha.ENTERED.clear()
    loading = Waiter(lambda: eventapi.backend("alpha"))
    assert alpha.ENTERED.wait(timeout=JOIN_S)
    same = Waiter(lambda: eventapi.backend("alpha"))
    others = [
        Waiter(lambda: eventapi.backend("beta")),
        Waiter(lambda: eventapi.backend("host")),
        Waiter(eventapi.backends),
    ]
    for other in others:
        other.result()
    assert loading.thread.is_alive()
    gate.set()
    loading.result()
    same.result()
    assert same.value is loading.value
    assert alpha.LOADS == [None]


EXITS = [
    ("import:exit", "cannot import eventapi_fake_hostile: SystemExit: 3"),
    ("hook:exit", "eventapi_backends raised SystemExit: 3"),
    ("probe:exit", "probe raised SystemExit: 3"),
    ("import:raise", "cannot import eventapi_fake_hostile: RuntimeError: hostile plugin fails"),
]


@pytest.mark.parametrize(("act", "says"), EXITS, ids=[e[0] for e in EXITS])
def test_a_plugin_that_exits_is_a_broken_row(
    sites: AddSites, monkeypatch: pytest.MonkeyPatch, act: str, says: str
) -> None:
    monkeypatch.setenv("EVENTAPI_FAKE_HOSTILE", act)
    sites("alpha", "hostile")
    hostile = row("hostile")  # never SystemExit into the caller
    assert hostile.status.startswith(f"broken: {says}")
    with pytest.raises(BackendError, match=r"eventapi-hostile 0\.9"):
        eventapi.backend("hostile")
    assert_others_work()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert eventapi.backend() is eventapi.backend("alpha")
    # Passed over with a warning where its priority (80) was known, before its probe ran.
    assert len(caught) == (1 if act.startswith("probe") else 0)


def test_a_load_that_exits_raises_backend_error(
    sites: AddSites, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVENTAPI_FAKE_HOSTILE", "load:exit")
    sites("alpha", "hostile")
    with pytest.raises(BackendError, match=r"its load\(\) called sys.exit\(3\)") as raised:
        eventapi.backend("hostile")
    assert isinstance(raised.value.__cause__, SystemExit)
    assert_others_work()


HANGS = [
    ("import", "importing eventapi_fake_hostile"),
    ("hook", "in its eventapi_backends hook"),
    ("probe", "in its probe"),
]


@pytest.mark.parametrize(("stage", "where"), HANGS, ids=[h[0] for h in HANGS])
def test_a_plugin_that_hangs_times_out(
    sites: AddSites, monkeypatch: pytest.MonkeyPatch, stage: str, where: str
) -> None:
    monkeypatch.setenv("EVENTAPI_FAKE_HOSTILE", f"{stage}:hang")
    monkeypatch.setenv("EVENTAPI_PLUGIN_TIMEOUT", "0.2")
    sites("alpha", "hostile")
    started = time.monotonic()
    rows = {r.name: r for r in eventapi.backends()}
    took = time.monotonic() - started
    hostile = rows["hostile"]
    assert hostile.status.startswith(f"broken: timed out after 0.2 s {where}; ")
    assert "raise EVENTAPI_PLUGIN_TIMEOUT" in hostile.reason
    # Not before the budget ran out. No upper bound: the hang lasts until the test ends, so a
    # listing that ignored the budget could never return, and pytest-timeout fails the test.
    assert took >= 0.2
    assert rows["alpha"].status == "ok"
    assert row("hostile") == hostile  # one answer, cached
    with pytest.raises(BackendError, match=r"timed out after 0\.2 s"):
        eventapi.backend("hostile")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert eventapi.backend() is eventapi.backend("alpha")
    assert len(caught) == (1 if stage == "probe" else 0)  # priority 80 known in the probe


@pytest.mark.parametrize("value", ["soon", "0", "-1", "inf", "nan"])
def test_a_budget_that_is_not_a_positive_number_is_refused_with_a_warning(
    sites: AddSites, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, value: str
) -> None:
    monkeypatch.setenv("EVENTAPI_PLUGIN_TIMEOUT", value)
    monkeypatch.setenv("EVENTAPI_FAKE_HOSTILE", "probe:hang")
    sites("hostile")
    with caplog.at_level("WARNING", logger="eventapi"):
        listing = Waiter(eventapi.backends)
        assert hostile_gate().ENTERED.wait(timeout=JOIN_S)
    assert f"EVENTAPI_PLUGIN_TIMEOUT={value!r} is not a positive number of seconds; using 30" in (
        caplog.text
    )
    hostile_gate().RELEASE.set()  # the default budget, 30 s, has not run out
    listing.result()
    assert row("hostile").status == "ok"


def test_a_budget_longer_than_a_thread_can_wait_is_clamped_with_a_warning(
    sites: AddSites, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # 1e10 s is a positive number, and more than threading.TIMEOUT_MAX on Linux: waiting for a
    # plugin still running raised OverflowError from backends(), backend() and the CLI.
    assert threading.TIMEOUT_MAX < 1e10
    monkeypatch.setenv("EVENTAPI_PLUGIN_TIMEOUT", "1e10")
    monkeypatch.setenv("EVENTAPI_FAKE_HOSTILE", "probe:hang")
    sites("hostile")
    with caplog.at_level("WARNING", logger="eventapi"):
        listing = Waiter(eventapi.backends)
        selecting = Waiter(lambda: eventapi.backend("hostile"))
        assert hostile_gate().ENTERED.wait(timeout=JOIN_S)
    assert (
        f"EVENTAPI_PLUGIN_TIMEOUT='1e10' is more seconds than a thread can wait; using "
        f"{threading.TIMEOUT_MAX:g}" in caplog.text
    )
    hostile_gate().RELEASE.set()
    listing.result()  # raises what the listing raised
    selecting.result()
    assert row("hostile").status == "ok"
    assert selecting.value is eventapi.backend("hostile")


@pytest.mark.parametrize(("value", "off"), [("1", True), ("yes", True), ("off", False)])
def test_the_autoload_flag_takes_the_usual_spellings(
    sites: AddSites, monkeypatch: pytest.MonkeyPatch, value: str, off: bool
) -> None:
    sites("alpha")
    set_env(monkeypatch, "EVENTAPI_DISABLE_PLUGIN_AUTOLOAD", value)
    assert ("alpha" not in {r.name for r in eventapi.backends()}) is off


def test_an_autoload_flag_of_another_spelling_is_taken_as_set_with_a_warning(
    sites: AddSites, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    sites("alpha")
    set_env(monkeypatch, "EVENTAPI_DISABLE_PLUGIN_AUTOLOAD", "please")
    with caplog.at_level("WARNING", logger="eventapi"):
        names = {r.name for r in eventapi.backends()}
    assert "alpha" not in names
    assert "EVENTAPI_DISABLE_PLUGIN_AUTOLOAD='please' is not one of 1, true, yes, on" in (
        caplog.text
    )


def test_a_blocked_list_entry_that_is_no_name_warns(
    sites: AddSites, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    sites("alpha", "beta")
    set_env(monkeypatch, "EVENTAPI_DISABLE_PLUGINS", "cuda,hip,alpha beta,beta:0")
    with caplog.at_level("WARNING", logger="eventapi"):
        rows = {r.name: r.status for r in eventapi.backends()}
    assert rows["alpha"] == rows["beta"] == "ok"  # neither is blocked by those entries
    assert "'alpha beta', 'beta:0' not a backend name, so it blocks nothing" in caplog.text


def test_the_variable_may_carry_blanks_the_argument_may_not(
    sites: AddSites, monkeypatch: pytest.MonkeyPatch
) -> None:
    sites("alpha")
    monkeypatch.setenv("EVENTAPI_BACKEND", " alpha\n")
    assert eventapi.backend() is eventapi.backend("alpha")
    for bad in ("alpha\n", " alpha", "alpha "):
        with pytest.raises(ValueError, match="is not of the form NAME or NAME:DEVICE"):
            eventapi.backend(bad)


# -- names ------------------------------------------------------------------------------------


def test_reserved_names_stay_with_this_projects_backends(sites: AddSites) -> None:
    sites("impostor")
    rows = eventapi.backends()
    claims = {(r.name, r.distribution): r for r in rows if r.name in {"host", "cuda"}}
    assert set(claims) == {
        ("host", "eventapi-core"),
        ("host", "eventapi-impostor"),
        ("cuda", "eventapi-cuda"),
        ("cuda", "eventapi-impostor"),
    }
    assert claims["host", "eventapi-core"].status == "ok"
    assert claims["host", "eventapi-impostor"].status == (
        "broken: the name 'host' is reserved for eventapi-core, this project's own backend; "
        "rename the entry point (for example host-eventapi-impostor)"
    )
    assert claims["cuda", "eventapi-impostor"].status.startswith(
        "broken: the name 'cuda' is reserved for eventapi-cuda"
    )
    assert claims["cuda", "eventapi-cuda"].status == "blocked"  # by the fixture; not a conflict
    # Neither name is a conflict: the built-in host stays the default of a machine without a GPU,
    # and passes over nothing: an impostor could never be selected under those names.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert eventapi.backend() is eventapi.backend("host")
    assert "eventapi_fake_impostor" not in sys.modules


def test_an_entry_point_that_is_not_a_backend_name_is_broken(sites: AddSites) -> None:
    sites("badepname")
    (bad,) = [r for r in eventapi.backends() if r.distribution == "eventapi-badepname"]
    assert bad.name == "fancy gpu"
    assert bad.status.startswith("broken: entry point name 'fancy gpu' is not a backend name")
    assert not bad.usable
    with pytest.warns(RuntimeWarning, match="but 'fancy gpu'"):
        assert eventapi.backend() is eventapi.backend("host")  # not the default, at priority 95
    assert "eventapi_fake_badepname" not in sys.modules


def test_an_entry_point_whose_value_is_no_module_is_broken_by_name(sites: AddSites) -> None:
    sites("badvalue")
    bad = row("emptyval")
    assert bad.status == (
        "broken: entry point 'emptyval' has the value '', which is not a module "
        "('package.module', or 'package.module:attribute'); set it to the plugin's module"
    )
    with pytest.raises(BackendError, match="has the value ''"):
        eventapi.backend("emptyval")


SUGGESTIONS = [
    ("ALPHA", "alpha"),  # the case
    ("apla", "alpha"),  # a typo
    ("hots", "host"),
    ("cdua", "cuda"),  # a published backend, blocked here: still a name to suggest
]


@pytest.mark.parametrize(("typed", "meant"), SUGGESTIONS)
def test_a_name_not_found_suggests_the_close_one(sites: AddSites, typed: str, meant: str) -> None:
    sites("alpha")
    with pytest.raises(BackendNotFoundError) as raised:
        eventapi.backend(typed)
    assert f"backend {typed!r} is not installed; did you mean {meant!r}?" in str(raised.value)


def test_the_variable_not_found_suggests_the_variable_spelled_right(
    sites: AddSites, monkeypatch: pytest.MonkeyPatch
) -> None:
    sites("alpha")
    monkeypatch.setenv("EVENTAPI_BACKEND", "Alpha:0")
    with pytest.raises(BackendNotFoundError, match=r"did you mean EVENTAPI_BACKEND=alpha\?"):
        eventapi.backend()


def test_a_name_like_no_other_suggests_nothing(sites: AddSites) -> None:
    sites("alpha")
    with pytest.raises(BackendNotFoundError) as raised:
        eventapi.backend("zzzzzz")
    assert "did you mean" not in str(raised.value)


# -- processes --------------------------------------------------------------------------------

FORK = """
import json, os, eventapi
parent = eventapi.backend("host")
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    child = eventapi.backend("host")
    stream = child.stream_create_non_blocking()
    event = child.event_create()
    child.event_record(event, stream)
    child.event_wait(event)
    child.event_destroy(event)
    child.stream_destroy(stream)
    report = {"fresh": child is not parent, "cached": child is eventapi.backend("host")}
    os.write(write, json.dumps(report).encode())
    os._exit(0)
os.close(write)
print(os.read(read, 4096).decode())
os.waitpid(pid, 0)
"""


def test_a_forked_child_builds_its_own_backend_objects() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTAPI_")}
    done = subprocess.run(
        [sys.executable, "-c", FORK],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"fresh": True, "cached": True}
