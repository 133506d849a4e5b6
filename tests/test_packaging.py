"""The distributions as users get them: built wheels, a fresh virtual environment, pip.

Builds the wheels of eventapi-core, eventapi-cuda and eventapi-hip from a copy of their folders
(so the checkout gets no build/ litter), installs ``eventapi-core[cuda]`` into a new venv with
pip, and asks the installed ``eventapi`` command what it finds. This machine has no NVIDIA
driver, so ``cuda`` must be listed as unavailable with that reason, not fail. Dependencies
(pluggy, cuda-bindings) come from the configured package index, through pip's cache.

It also installs the third-party example backend in tests/toy_backend/ the same way and runs the
conformance kit on it: the public names and one entry point are enough to plug a backend in.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kit_run import KIT, run_pytest
from packaging.requirements import Requirement
from packaging.version import Version

import eventapi
from eventapi import _discovery

ROOT = Path(__file__).resolve().parent.parent
DISTRIBUTIONS = ("eventapi-core", "eventapi-cuda", "eventapi-hip")
TOY = Path(__file__).resolve().parent / "toy_backend"
# Generous: a cold pip cache downloads cuda-bindings; a warm run takes seconds.
PIP_TIMEOUT_S = 300


def clean_env() -> dict[str, str]:
    """The environment without anything that would steer eventapi or the import system."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("EVENTAPI_")
        and key not in {"PYTHONPATH", "PYTHONHOME", "LD_PRELOAD", "LD_LIBRARY_PATH", "VIRTUAL_ENV"}
    }
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run(*args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(arg) for arg in args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=clean_env() if env is None else env,
        timeout=PIP_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, (
        f"{' '.join(map(str, args))} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    )
    return done.stdout


def copy_source(source: Path, target: Path) -> Path:
    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    shutil.copytree(source, target, ignore=ignore)
    return target


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the three wheels, built by pip from copies of the folders."""
    base = tmp_path_factory.mktemp("packaging")
    sources = [copy_source(ROOT / name, base / "src" / name) for name in DISTRIBUTIONS]
    out = base / "wheels"
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", out, *sources)
    return out


def metadata(wheels: Path, distribution: str) -> list[str]:
    """The Requires-Dist values of one built wheel."""
    (wheel,) = wheels.glob(f"{distribution.replace('-', '_')}-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        text = archive.read(name).decode()
    prefix = "Requires-Dist: "
    return [line.removeprefix(prefix) for line in text.splitlines() if line.startswith(prefix)]


def wheel_version(wheels: Path, distribution: str) -> Version:
    (wheel,) = wheels.glob(f"{distribution.replace('-', '_')}-*.whl")
    return Version(wheel.name.split("-")[1])


def assert_two_sided(requirement: Requirement) -> None:
    operators = {spec.operator for spec in requirement.specifier}
    assert operators & {">=", ">", "~=", "=="}, f"{requirement} has no lower bound"
    assert operators & {"<", "<=", "~=", "=="}, f"{requirement} has no upper bound"


def test_extras_pin_the_backends_in_both_directions(wheels: Path) -> None:
    extras: dict[str, list[Requirement]] = {}
    for line in metadata(wheels, "eventapi-core"):
        requirement = Requirement(line)
        for extra in ("cuda", "hip", "all"):
            if requirement.marker is not None and requirement.marker.evaluate({"extra": extra}):
                extras.setdefault(extra, []).append(requirement)
    assert {extra: sorted(r.name for r in reqs) for extra, reqs in extras.items()} == {
        "cuda": ["eventapi-cuda"],
        "hip": ["eventapi-hip"],
        "all": ["eventapi-cuda", "eventapi-hip"],
    }
    for requirements in extras.values():
        for requirement in requirements:
            assert_two_sided(requirement)
            # The extra admits the backend built from this checkout.
            assert wheel_version(wheels, requirement.name) in requirement.specifier

    core = wheel_version(wheels, "eventapi-core")
    for backend in ("eventapi-cuda", "eventapi-hip"):
        (on_core,) = [
            Requirement(line)
            for line in metadata(wheels, backend)
            if Requirement(line).name == "eventapi-core"
        ]
        assert_two_sided(on_core)
        assert core in on_core.specifier


def test_fresh_venv_lists_cuda_as_unavailable_without_a_driver(
    wheels: Path, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    # No pip inside: this interpreter's pip installs into it (--python), which saves seconds.
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "-q",
        "--find-links",
        wheels,
        "eventapi-core[cuda]",
    )
    rows = json.loads(run(venv / "bin" / "eventapi", "backends", "--json", cwd=tmp_path))
    by_name = {row["name"]: row for row in rows}
    assert set(by_name) == {"cuda", "host"}  # the [cuda] extra brings cuda, and only cuda
    assert by_name["host"]["status"] == "ok"
    cuda = by_name["cuda"]
    assert (cuda["distribution"], cuda["priority"]) == ("eventapi-cuda", 100)
    assert cuda["status"] == f"unavailable: {cuda['reason']}"
    assert "driver library" in cuda["reason"]
    assert "libcuda" in cuda["reason"]
    assert cuda["install_hint"] == 'pip install "eventapi-core[cuda]"'

    # Asked for explicitly, it refuses with that reason instead of falling back to host.
    probe = (
        "import eventapi\n"
        "try:\n"
        "    eventapi.backend('cuda')\n"
        "except eventapi.BackendUnavailableError as exc:\n"
        "    print(exc)\n"
    )
    refusal = run(python, "-c", probe, cwd=tmp_path)
    assert "cannot be used here" in refusal
    assert cuda["reason"] in refusal


# -- a third-party backend ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def toy_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/toy_backend installed by pip into a folder of its own (no dependencies)."""
    base = tmp_path_factory.mktemp("toy")
    source = copy_source(TOY, base / "eventapi-toy")
    site = base / "site"
    run(sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site, source)
    return site


@pytest.fixture
def toy_discovered(toy_site: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in ("EVENTAPI_BACKEND", "EVENTAPI_DISABLE_PLUGINS", "EVENTAPI_DISABLE_PLUGIN_AUTOLOAD"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.syspath_prepend(str(toy_site))
    _discovery.refresh()
    yield
    _discovery.refresh()
    for name in [m for m in sys.modules if m == "eventapi_toy" or m.startswith("eventapi_toy.")]:
        del sys.modules[name]


def test_third_party_backend_is_discovered_and_selected(toy_discovered: None) -> None:
    (toy,) = [row for row in eventapi.backends() if row.name == "toy"]
    assert (toy.distribution, toy.version, toy.priority, toy.status) == (
        "eventapi-toy",
        "0.1.0",
        10,
        "ok",
    )
    assert "eventapi_toy._backend" not in sys.modules  # listed, not loaded
    api = eventapi.backend("toy")
    assert api.BACKEND == "toy"
    assert api is eventapi.backend("toy")

    stream = api.stream_create_non_blocking()
    start, end = api.event_create(), api.event_create()
    api.event_record(start, stream)
    api.event_record(end, stream)
    api.event_wait(end)
    assert api.event_elapsed(start, end) >= 0
    for event in (start, end):
        api.event_destroy(event)
    api.stream_destroy(stream)
    counted: Any = api  # live_handles() is the toy's own, beyond the protocol
    assert counted.live_handles() == (0, 0)


@pytest.mark.parametrize("selector", ["toy", "eventapi_toy:ToyBackend"])
def test_third_party_backend_passes_the_conformance_kit(
    toy_site: Path, tmp_path: Path, selector: str
) -> None:
    # By name through discovery, and by factory, which lets the kit make a second object for
    # its foreign-handle checks. Run from an empty folder with the toy on PYTHONPATH: the
    # command a backend author runs.
    env = clean_env()
    env["PYTHONPATH"] = str(toy_site)
    run = run_pytest(
        *KIT, f"--eventapi-backend={selector}", cwd=tmp_path, env=env, timeout=PIP_TIMEOUT_S
    )
    assert run.returncode == 0, run.output
    assert run.count("failed") == run.count("error") == 0, run.output
    # Most of the kit applies to a backend without host functions or capture; if it were all
    # skipped, this test would prove nothing.
    assert run.count("passed") >= 40, run.output
