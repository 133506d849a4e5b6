"""Backends registered in code: ``eventapi.register_backend`` and ``unregister_backend``.

An application's own backend, given as a :class:`eventapi.BackendSpec`, is listed and selected
as an installed one is, and registering or unregistering it changes nothing of any other
backend. (These two names are exported by ``eventapi/__init__.py``.)
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import eventapi
from eventapi import BackendNotFoundError, BackendSpec, BackendUnavailableError
from eventapi._plugins import _discovery

PLUGINS = Path(__file__).parent / "plugins"


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Discovery afresh, without the real GPU plugins, and nothing left registered after."""
    for var in ("EVENTAPI_BACKEND", "EVENTAPI_DISABLE_PLUGIN_AUTOLOAD", "EVENTAPI_PLUGIN_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("EVENTAPI_DISABLE_PLUGINS", "cuda,hip")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _discovery.refresh()
    yield
    for name in ("mine", "other", "alpha"):
        eventapi.unregister_backend(name)
    _discovery.refresh()
    sys.modules.pop("eventapi_fake_alpha", None)


def host(device: int | None) -> Any:
    from eventapi.host import HostBackend

    return HostBackend()


def rows() -> dict[str, eventapi.BackendInfo]:
    return {row.name: row for row in eventapi.backends()}


def test_a_registered_backend_is_listed_and_selected_and_unregistering_undoes_it() -> None:
    probes: list[str] = []

    def probe() -> None:
        probes.append(threading.current_thread().name)

    spec = BackendSpec(name="mine", load=host, priority=60, probe=probe)
    eventapi.register_backend(spec)
    mine = rows()["mine"]
    assert (mine.distribution, mine.version, mine.priority, mine.status) == (
        "(registered in code)",
        "",
        60,
        "ok",
    )
    assert len(probes) == 1
    assert probes[0] != threading.current_thread().name  # off the caller's thread
    api = eventapi.backend("mine")
    assert eventapi.backend() is api  # 60 beats host's 0
    assert eventapi.backend("mine") is api

    assert eventapi.unregister_backend("mine") is True
    assert "mine" not in rows()
    with pytest.raises(BackendNotFoundError, match="backend 'mine' is not installed"):
        eventapi.backend("mine")
    assert api.BACKEND == "host"  # the object handed out keeps working
    assert eventapi.unregister_backend("mine") is False  # nothing left to undo


def test_registering_one_name_keeps_every_other_backends_objects() -> None:
    host_api = eventapi.backend("host")
    eventapi.register_backend(BackendSpec(name="mine", load=host))
    mine = eventapi.backend("mine")
    eventapi.register_backend(BackendSpec(name="other", load=host))
    assert eventapi.backend("host") is host_api
    assert eventapi.backend("mine") is mine
    eventapi.unregister_backend("other")
    assert eventapi.backend("host") is host_api
    assert eventapi.backend("mine") is mine
    # Registered again: a new registration, a new object.
    eventapi.unregister_backend("mine")
    eventapi.register_backend(BackendSpec(name="mine", load=host))
    assert eventapi.backend("mine") is not mine


BAD_SPECS = [
    (BackendSpec(name="host", load=host), "'host' is reserved for eventapi-core"),
    (BackendSpec(name="cuda", load=host), "'cuda' is reserved for eventapi-cuda"),
    (BackendSpec(name="my gpu", load=host), "'my gpu' is not a backend name"),
    (BackendSpec(name="mine\n", load=host), "is not a backend name"),
    (
        BackendSpec(name="mine", load=host, api_version=(2, 0)),
        "BackendSpec 'mine': built for plugin API 2.x",
    ),
    (BackendSpec(name="mine", load=host, priority="high"), "priority 'high' is not an int"),  # type: ignore[arg-type]
    (BackendSpec(name="mine", load=None), "must be callables"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("spec", "says"), BAD_SPECS, ids=[s[1][:24] for s in BAD_SPECS])
def test_an_unsound_spec_is_refused_on_the_callers_thread(spec: BackendSpec, says: str) -> None:
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        eventapi.register_backend(spec)
    assert {"mine", "my gpu"} & set(rows()) == set()


def test_only_a_backend_spec_is_taken() -> None:
    with pytest.raises(TypeError, match=r"takes an eventapi.BackendSpec, got str"):
        eventapi.register_backend("mine")  # type: ignore[arg-type]


def test_a_registered_backend_survives_autoload_off_and_can_be_blocked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    eventapi.register_backend(BackendSpec(name="mine", load=host, priority=60))
    monkeypatch.setenv("EVENTAPI_DISABLE_PLUGIN_AUTOLOAD", "1")
    _discovery.refresh()
    assert [row.name for row in eventapi.backends()] == ["mine", "host"]
    monkeypatch.setenv("EVENTAPI_DISABLE_PLUGINS", "mine")
    _discovery.refresh()
    assert rows()["mine"].status == "blocked"
    with pytest.raises(BackendUnavailableError, match="blocked by EVENTAPI_DISABLE_PLUGINS"):
        eventapi.backend("mine")


def test_a_name_an_installed_distribution_claims_is_a_conflict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(PLUGINS / "alpha"))
    _discovery.refresh()
    assert rows()["alpha"].status == "ok"
    eventapi.register_backend(BackendSpec(name="alpha", load=host))
    statuses = sorted((r.distribution, r.status) for r in eventapi.backends() if r.name == "alpha")
    assert [d for d, _ in statuses] == ["(registered in code)", "eventapi-alpha"]
    assert all(s.startswith("broken: conflict: name claimed by ") for _, s in statuses)
    eventapi.unregister_backend("alpha")
    assert rows()["alpha"].status == "ok"  # the installed one alone again
