"""The distributions as users get them: built wheels, fresh virtual environments, pip.

Builds the wheels of eventapi-core, eventapi-cuda and eventapi-hip from a copy of their folders
(so the checkout gets no build/ litter; once per state of the sources, kept in build/test-wheels
for every interpreter), installs the CUDA extras into new venvs with pip, and
asks the installed ``eventapi`` command what it finds: without a driver (this machine has none),
and on the emulated driver reporting a CUDA 12.x or 13.x version, as a user's machine would.

Third-party wheels (pluggy, cuda-bindings of each major, hip-python, pytest, setuptools for the
builds) come from build/wheelhouse, which `make wheelhouse` fills once per interpreter; every
pip command here runs with ``--no-index`` (tests/isolated.py), so no test downloads.

It also installs the third-party example backend in tests/toy_backend/ the same way and runs the
conformance kit on it: the public names and one entry point are enough to plug a backend in.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import isolated
import pytest
from emulated_driver import build, library_path
from isolated import clean_env, copy_source, require_wheels, sources_hash
from kit_run import KIT, run_pytest
from packaging.requirements import Requirement
from packaging.version import Version

import eventapi
from eventapi._plugins import _discovery

# Every test here builds or installs (docs/testing.md: the installs tier).
pytestmark = pytest.mark.installs

# The tests marked single_interpreter read the distributions' metadata and sources, or build
# sdists with `build`, which no interpreter changes: `make matrix` leaves them out (README). The
# installs into fresh venvs run on every interpreter, each with its own wheelhouse and the wheels
# the first one built.
ROOT = Path(__file__).resolve().parent.parent
DISTRIBUTIONS = ("eventapi-core", "eventapi-cuda", "eventapi-hip")
TOY = Path(__file__).resolve().parent / "toy_backend"
# The cuda-bindings release of each major the extras are proven with: the newest 12.x, and the
# 13.x requirements-test.txt pins.
BINDINGS = {12: Version("12.9.10"), 13: Version("13.5.0")}
# Generous: a build or an install from the wheelhouse takes seconds.
PIP_TIMEOUT_S = 300


def on_driver(cuda_version: int) -> dict[str, str]:
    """The environment of a machine whose NVIDIA driver supports ``cuda_version`` (12040: 12.4)."""
    build()
    return clean_env(
        LD_PRELOAD=str(library_path("cuda")), EMU_CUDA_DRIVER_VERSION=str(cuda_version)
    )


def run(*args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    return isolated.run(*args, cwd=cwd, env=env, timeout=PIP_TIMEOUT_S)


# The wheels built from the current sources, kept across runs and interpreters (see wheels()).
WHEEL_CACHE = ROOT / "build" / "test-wheels"


@contextlib.contextmanager
def one_at_a_time(cache: Path) -> Iterator[None]:
    """Hold ``cache``'s lock while the block runs.

    `make test` runs .venv's interpreter beside the others: the first one to need a cache
    fills it while the others wait, and they find it filled.
    """
    cache.parent.mkdir(parents=True, exist_ok=True)
    with (cache.parent / f".{cache.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> Path:
    """A folder with the three wheels, built by pip from copies of the folders.

    Built once for each state of the sources, by the first interpreter that asks, and kept in
    build/test-wheels: every interpreter of the matrix then installs the same ``cp311-abi3``
    and pure wheels, as users get one build from an index. What the build printed is kept
    beside them in ``build-output.txt``.
    """
    with one_at_a_time(WHEEL_CACHE):
        return _built_wheels(tmp_path_factory)


def _built_wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = WHEEL_CACHE / sources_hash(*(ROOT / name for name in DISTRIBUTIONS))
    if (out / "build-output.txt").is_file():
        return out
    base = tmp_path_factory.mktemp("packaging")
    sources = [copy_source(ROOT / name, base / "src" / name) for name in DISTRIBUTIONS]
    built = base / "wheels"
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", built, *sources]
    done = subprocess.run(
        [str(arg) for arg in command],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=PIP_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"pip wheel exited {done.returncode}\n{done.stdout}{done.stderr}"
    # Written last: a folder with it is complete. Builds of earlier sources go.
    shutil.rmtree(WHEEL_CACHE, ignore_errors=True)
    shutil.copytree(built, out)
    (out / "build-output.txt").write_text(done.stdout + done.stderr)
    return out


HIP_PYTHON = "hip-python==10.0.0.0.1.2"


@pytest.fixture(scope="module")
def wheelhouse() -> Path:
    """build/wheelhouse, holding for this interpreter what the installs below need."""
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    return require_wheels(
        "setuptools-*.whl",
        "pluggy-*.whl",
        "pytest-*.whl",
        "hypothesis-*.whl",
        *(f"cuda_bindings-{version}-{tag}-*.whl" for version in BINDINGS.values()),
        f"hip_python-{HIP_PYTHON.split('==')[1]}-*.whl",
    )


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    """A new, empty virtual environment; its python."""
    # No pip inside: this interpreter's pip installs into it (--python), which saves seconds.
    run(sys.executable, "-m", "venv", "--without-pip", tmp_path / "venv")
    return tmp_path / "venv" / "bin" / "python"


def pip_install(python: Path, *requirements: str, wheels: Path, wheelhouse: Path) -> None:
    """``pip install REQUIREMENTS`` into ``python``'s venv from the local wheels only."""
    find = ("--find-links", str(wheels), "--find-links", str(wheelhouse))
    run(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-index", *find,
        *requirements)  # fmt: skip


def installed(python: Path, distribution: str) -> Version:
    code = f"import importlib.metadata as m; print(m.version({distribution!r}))"
    return Version(run(python, "-c", code).strip())


def backends(python: Path, env: dict[str, str]) -> dict[str, dict[str, Any]]:
    """``eventapi backends --json`` of the venv, by backend name."""
    eventapi_command = python.parent / "eventapi"
    rows = json.loads(run(eventapi_command, "backends", "--json", cwd=python.parent, env=env))
    return {row["name"]: row for row in rows}


def metadata(wheels: Path, distribution: str) -> list[str]:
    """The METADATA lines of one built wheel."""
    (wheel,) = wheels.glob(f"{distribution.replace('-', '_')}-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return archive.read(name).decode().splitlines()


def field(wheels: Path, distribution: str, name: str) -> list[str]:
    """The values of one METADATA field (``Requires-Dist``, ``Classifier`` ...)."""
    prefix = f"{name}: "
    return [
        line.removeprefix(prefix)
        for line in metadata(wheels, distribution)
        if line.startswith(prefix)
    ]


def wheel_version(wheels: Path, distribution: str) -> Version:
    (wheel,) = wheels.glob(f"{distribution.replace('-', '_')}-*.whl")
    return Version(wheel.name.split("-")[1])


def extras(wheels: Path) -> dict[str, dict[str, Requirement]]:
    """eventapi-core's extras: for each, its requirements by distribution name."""
    found: dict[str, dict[str, Requirement]] = {}
    names = field(wheels, "eventapi-core", "Provides-Extra")
    for line in field(wheels, "eventapi-core", "Requires-Dist"):
        requirement = Requirement(line)
        for extra in names:
            if requirement.marker is not None and requirement.marker.evaluate({"extra": extra}):
                found.setdefault(extra, {})[requirement.name] = requirement
    return found


@pytest.mark.single_interpreter
def test_the_three_distributions_share_one_version_and_pin_each_other_to_it(
    wheels: Path,
) -> None:
    (version,) = {wheel_version(wheels, name) for name in DISTRIBUTIONS}
    for extra, requirements in extras(wheels).items():
        for name, requirement in requirements.items():
            if name.startswith("eventapi-"):
                assert str(requirement.specifier) == f"=={version}", (extra, requirement)
    for backend in ("eventapi-cuda", "eventapi-hip"):
        (on_core,) = [
            Requirement(line)
            for line in field(wheels, backend, "Requires-Dist")
            if Requirement(line).name == "eventapi-core"
        ]
        assert str(on_core.specifier) == f"=={version}"


@pytest.mark.single_interpreter
def test_each_cuda_extra_pins_its_binding_major(wheels: Path) -> None:
    found = extras(wheels)
    assert {extra: sorted(reqs) for extra, reqs in found.items()} == {
        "cuda12": ["cuda-bindings", "eventapi-cuda"],
        "cuda13": ["cuda-bindings", "eventapi-cuda"],
        "cuda": ["eventapi-cuda"],  # pip picks the newest major eventapi-cuda allows
        "nvml": ["eventapi-cuda", "nvidia-ml-py"],  # the cuda backend's clocks
        "hip": ["eventapi-hip"],
        "all": ["eventapi-cuda", "eventapi-hip"],
        "testing": ["hypothesis", "pytest"],
    }
    twelve, thirteen = (found[f"cuda{major}"]["cuda-bindings"].specifier for major in (12, 13))
    assert BINDINGS[12] in twelve
    assert BINDINGS[13] not in twelve
    assert BINDINGS[13] in thirteen
    assert BINDINGS[12] not in thirteen
    assert Version("12.0") not in twelve
    assert Version("14.0") not in thirteen
    # eventapi-cuda itself admits both majors, and nothing newer than it was tested with.
    (binding,) = [
        Requirement(line)
        for line in field(wheels, "eventapi-cuda", "Requires-Dist")
        if Requirement(line).name == "cuda-bindings"
    ]
    assert BINDINGS[12] in binding.specifier
    assert BINDINGS[13] in binding.specifier
    assert Version("14.0") not in binding.specifier


@pytest.mark.single_interpreter
def test_the_metadata_states_the_license_and_the_platforms(wheels: Path) -> None:
    output = (wheels / "build-output.txt").read_text()
    assert "deprecated" not in output.lower(), output
    for name in DISTRIBUTIONS:
        assert field(wheels, name, "License-Expression") == ["MIT"]
        assert field(wheels, name, "Requires-Python") == [">=3.11"]
        classifiers = set(field(wheels, name, "Classifier"))
        assert "Operating System :: POSIX :: Linux" in classifiers
        assert "Programming Language :: Python :: Implementation :: CPython" in classifiers
        versions = {c.rsplit(" :: ", 1)[1] for c in classifiers if c.count(".") == 1}
        assert versions == {"3.11", "3.12", "3.13"}, name


def test_fresh_venv_lists_cuda_as_unavailable_without_a_driver(
    wheels: Path, wheelhouse: Path, venv: Path
) -> None:
    pip_install(venv, "eventapi-core[cuda]", wheels=wheels, wheelhouse=wheelhouse)
    # [cuda] is the newest major: what the docs say it picks.
    assert installed(venv, "cuda-bindings").major == max(BINDINGS)
    by_name = backends(venv, clean_env())
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
    refusal = run(venv, "-c", probe, cwd=venv.parent)
    assert "cannot be used here" in refusal
    assert cuda["reason"] in refusal


def test_on_a_cuda12_driver_the_reason_names_the_command_that_makes_cuda_work(
    wheels: Path, wheelhouse: Path, venv: Path
) -> None:
    driver = on_driver(12040)
    # The backend without its binding: the reason already names the extra for this driver.
    pip_install(venv, "eventapi-core", wheels=wheels, wheelhouse=wheelhouse)
    pip_install(venv, "--no-deps", "eventapi-cuda", wheels=wheels, wheelhouse=wheelhouse)
    reason = backends(venv, driver)["cuda"]["reason"]
    assert reason == 'cuda-bindings is not installed; pip install "eventapi-core[cuda12]"'

    # The plain [cuda] extra brings the 13.x binding, which cannot run on this driver.
    pip_install(venv, "eventapi-core[cuda]", wheels=wheels, wheelhouse=wheelhouse)
    assert installed(venv, "cuda-bindings").major == 13
    cuda = backends(venv, driver)["cuda"]
    assert cuda["status"].startswith("unavailable: driver supports CUDA 12.4, cuda-bindings 13.")
    (command,) = re.findall(r'pip install "([^"]+)"', cuda["reason"])
    assert command == "eventapi-core[cuda12]"

    # The command the reason names is the fix: cuda works on this driver afterwards.
    pip_install(venv, command, wheels=wheels, wheelhouse=wheelhouse)
    assert installed(venv, "cuda-bindings") == BINDINGS[12]
    assert backends(venv, driver)["cuda"]["status"] == "ok"
    run(venv.parent / "eventapi", "check", "cuda", cwd=venv.parent, env=driver)
    # A 12.x binding keeps working when the driver is updated to 13.x.
    assert backends(venv, on_driver(13000))["cuda"]["status"] == "ok"


def test_on_a_cuda13_driver_the_cuda13_extra_works(
    wheels: Path, wheelhouse: Path, venv: Path
) -> None:
    pip_install(venv, "eventapi-core[cuda13]", wheels=wheels, wheelhouse=wheelhouse)
    assert installed(venv, "cuda-bindings") == BINDINGS[13]
    driver = on_driver(13000)
    assert backends(venv, driver)["cuda"]["status"] == "ok"
    run(venv.parent / "eventapi", "check", "cuda", cwd=venv.parent, env=driver)


# -- a third-party backend ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def toy_site(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> Path:
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


@pytest.mark.single_interpreter
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


# -- the backends' C extension ------------------------------------------------------------------


@pytest.mark.single_interpreter
def test_the_backend_wheels_are_abi3_and_carry_their_extension(wheels: Path) -> None:
    # One build against the stable ABI of 3.11 serves every supported interpreter.
    for name in ("eventapi_cuda", "eventapi_hip"):
        (wheel,) = wheels.glob(f"{name}-*.whl")
        assert "-cp311-abi3-linux_" in wheel.name, wheel.name
        with zipfile.ZipFile(wheel) as archive:
            assert f"{name}/_native.abi3.so" in archive.namelist()
            assert f"{name}/_native.pyi" in archive.namelist()


@pytest.mark.single_interpreter
def test_the_two_backends_carry_the_same_c_source() -> None:
    # One source: eventapi-hip links to eventapi-cuda's files, and each sdist stores the file
    # itself (test_each_backend_sdist_builds_its_extension_alone builds from it).
    for file in ("_native.c", "_native.pyi"):
        cuda = ROOT / "eventapi-cuda" / "src" / "eventapi_cuda" / file
        hip = ROOT / "eventapi-hip" / "src" / "eventapi_hip" / file
        assert hip.is_symlink(), f"{hip} must be a link to {cuda}, not a copy"
        assert hip.resolve() == cuda.resolve()
        assert not cuda.is_symlink()


@pytest.mark.single_interpreter
def test_each_backend_sdist_builds_its_extension_alone(tmp_path: Path) -> None:
    # The sdist, unpacked anywhere, builds with a C compiler and nothing else from the repo.
    for name in ("eventapi-cuda", "eventapi-hip"):
        source = copy_source(ROOT / name, tmp_path / "src" / name)
        run(sys.executable, "-m", "build", "-q", "--sdist", "-o", tmp_path / "sdist", source)
    for sdist in sorted((tmp_path / "sdist").glob("*.tar.gz")):
        run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp_path / "out", sdist)
    built = sorted(wheel.name.split("-")[0] for wheel in (tmp_path / "out").glob("*abi3*.whl"))
    assert built == ["eventapi_cuda", "eventapi_hip"]


def test_on_a_cuda12_driver_the_kit_passes_with_cuda_bindings_12(
    wheels: Path, wheelhouse: Path, venv: Path
) -> None:
    pip_install(venv, "eventapi-core[cuda12]", wheels=wheels, wheelhouse=wheelhouse)
    assert installed(venv, "cuda-bindings") == BINDINGS[12]
    # The kit's own tools, as a backend author installs them (here from the wheelhouse).
    pip_install(venv, "eventapi-core[testing]", wheels=wheels, wheelhouse=wheelhouse)
    env = on_driver(12040)
    done = subprocess.run(
        [str(venv), "-m", "pytest", "-p", "no:cacheprovider", "-q", *KIT,
         "--eventapi-backend=eventapi_cuda:CudaBackend"],
        cwd=venv.parent, env=env, capture_output=True, text=True, timeout=PIP_TIMEOUT_S,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed" in done.stdout.splitlines()[-1]


def test_the_hip_wheel_passes_eventapi_check_on_the_emulated_runtime(
    wheels: Path, wheelhouse: Path, venv: Path
) -> None:
    pip_install(venv, "eventapi-core[hip]", wheels=wheels, wheelhouse=wheelhouse)
    build()
    env = clean_env(LD_PRELOAD=str(library_path("hip")))
    run(venv.parent / "eventapi", "check", "hip", cwd=venv.parent, env=env)
