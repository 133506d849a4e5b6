"""The ``cuda`` and ``hip`` plugins' probes and what a user sees when a backend cannot work.

A probe decides without importing the binding; the reasons it gives are the user's first
hint, so their wording is asserted. The no-driver cases run in a subprocess without the
emulated library (a binding loads its driver once per process); the no-device and old-driver
cases run here on the emulated drivers, whose settings are restored afterwards.
"""

from __future__ import annotations

import importlib.metadata
import os
import textwrap
from collections.abc import Iterator

import pytest
from child import run_json_and_stderr
from emulated_driver import EmulatedDriver, build, library_path, load

import eventapi
from eventapi_cuda import _plugin as cuda_plugin
from eventapi_hip import _plugin as hip_plugin

# Runs with neither driver library anywhere: this machine has no GPU driver, and the emulated
# ones are not preloaded. Prints what a user would see, as JSON.
_NO_DRIVER_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import eventapi
    from eventapi_cuda import _plugin as cuda_plugin
    from eventapi_hip import _plugin as hip_plugin

    out = {
        "probes": {"cuda": cuda_plugin.probe(), "hip": hip_plugin.probe()},
        "rows": {row.name: row.status for row in eventapi.backends()},
        "bindings_imported": sorted(
            m for m in ("cuda.bindings.driver", "hip", "rocm.bindings.hip") if m in sys.modules
        ),
    }
    for name in ("cuda", "hip"):
        try:
            eventapi.backend(name)
        except eventapi.BackendUnavailableError as exc:
            out["select_" + name] = str(exc)
    from eventapi_cuda import CudaBackend
    from eventapi_hip import HipBackend
    for name, factory in (("cuda", CudaBackend), ("hip", HipBackend)):
        try:
            factory()
        except eventapi.BackendUnavailableError as exc:
            out["direct_" + name] = str(exc)
    print(json.dumps(out))
    """
)


def _run(script: str, env: dict[str, str]) -> tuple[dict[str, object], str]:
    result: dict[str, object]
    result, stderr = run_json_and_stderr(script, env)
    return result, stderr


def _env_without_drivers() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.pop("EVENTAPI_BACKEND", None)
    return env


def test_without_a_driver_each_backend_says_what_is_missing_and_imports_no_binding() -> None:
    out, stderr = _run(_NO_DRIVER_SCRIPT, _env_without_drivers())
    cuda_reason = "no NVIDIA driver library (libcuda.so.1) found; install the NVIDIA driver"
    hip_reason = (
        "no HIP runtime library (libamdhip64.so) found; install ROCm and set ROCM_PATH or "
        "LD_LIBRARY_PATH to its lib directory"
    )
    assert out["probes"] == {"cuda": cuda_reason, "hip": hip_reason}
    assert out["bindings_imported"] == [], "listing backends must not import a binding"
    rows = out["rows"]
    assert isinstance(rows, dict)
    # The listing and an explicit selection give the same reason.
    assert rows["cuda"] == f"unavailable: {cuda_reason}"
    assert rows["hip"] == f"unavailable: {hip_reason}"
    assert cuda_reason in str(out["select_cuda"])
    assert "libamdhip64.so" in str(out["select_hip"])
    assert hip_reason in str(out["select_hip"])
    # Constructing directly: the binding's own failure, translated, with what to do.
    assert str(out["direct_cuda"]).startswith("cuda: device 0 cannot be used: ")
    assert "install the NVIDIA driver" in str(out["direct_cuda"])
    direct_hip = str(out["direct_hip"])
    assert direct_hip.startswith("hip: device 0 cannot be used: ")
    assert "libamdhip64.so" in direct_hip
    assert "None" not in direct_hip
    # hip-python prints "Exception ignored" when its error-name lookup runs without the
    # library; the backend never lets it get that far.
    assert "Exception ignored" not in stderr


def test_without_a_device_both_report_no_device_in_a_fresh_process() -> None:
    build()
    env = _env_without_drivers()
    env["LD_PRELOAD"] = f"{library_path('cuda')}:{library_path('hip')}"
    env["EMU_DEVICE_COUNT"] = "0"
    out, _ = _run(_NO_DRIVER_SCRIPT, env)
    assert out["probes"] == {
        "cuda": "no CUDA device visible (cuInit returned CUDA_ERROR_NO_DEVICE)",
        "hip": "no HIP device visible (hipGetDeviceCount found none)",
    }
    assert "no CUDA device visible" in str(out["select_cuda"])
    assert "no HIP device visible" in str(out["select_hip"])
    rows = out["rows"]
    assert isinstance(rows, dict)
    probes = out["probes"]
    assert isinstance(probes, dict)
    for name in ("cuda", "hip"):
        assert rows[name] == f"unavailable: {probes[name]}"
        assert str(probes[name]) in str(out[f"select_{name}"])


@pytest.fixture(params=["cuda", "hip"])
def emu(request: pytest.FixtureRequest) -> Iterator[EmulatedDriver]:
    driver = load(request.param)
    yield driver
    driver.set_device_count(2)
    driver.set_driver_version(None)


def test_probes_pass_on_the_emulated_drivers(emu: EmulatedDriver) -> None:
    probe = cuda_plugin.probe if emu.name == "cuda" else hip_plugin.probe
    assert probe() is None


def test_no_device_after_initialization_is_unavailable(emu: EmulatedDriver) -> None:
    probe = cuda_plugin.probe if emu.name == "cuda" else hip_plugin.probe
    load_backend = cuda_plugin.load if emu.name == "cuda" else hip_plugin.load
    eventapi.backend(emu.name)  # initialized first, as a long-running process would be
    emu.set_device_count(0)
    reason = probe()
    assert reason is not None
    assert reason.startswith(f"no {'CUDA' if emu.name == 'cuda' else 'HIP'} device visible")
    with pytest.raises(eventapi.BackendUnavailableError, match=r"no .* device visible"):
        load_backend(0)


def _binding_short() -> tuple[str, str]:
    """The installed cuda-bindings as ("13", "13.5")."""
    binding = importlib.metadata.version("cuda-bindings")
    return binding.split(".")[0], ".".join(binding.split(".")[:2])


@pytest.mark.parametrize(
    ("driver", "fix"),
    [
        # A 12.x driver under a 13.x binding: the extra that pins the 12.x binding fixes it.
        (12040, 'pip install "eventapi-core[cuda12]" for this driver, or update the driver'),
        # No extra fits a CUDA 11 driver: only a newer driver does.
        (11080, "update the NVIDIA driver (CUDA 12.0 or newer)"),
    ],
)
def test_a_driver_older_than_the_binding_names_the_fix(driver: int, fix: str) -> None:
    emu = load("cuda")
    major, short = _binding_short()
    if int(major) * 1000 <= driver:
        pytest.skip(f"cuda-bindings {short} runs on a CUDA {driver} driver")
    emu.set_driver_version(driver)
    try:
        reason = cuda_plugin.probe()
    finally:
        emu.set_driver_version(None)
    shown = f"{driver // 1000}.{driver % 1000 // 10}"
    assert reason == f"driver supports CUDA {shown}, cuda-bindings {short} needs {major}.0; {fix}"


def _hip_binding_version() -> tuple[int, int]:
    from rocm.version import HIP_VERSION_TUPLE

    return int(HIP_VERSION_TUPLE[0]), int(HIP_VERSION_TUPLE[1])


@pytest.mark.parametrize(
    ("runtime", "fix"),
    [
        (60241133, 'pip install "hip-python~=6.2.0" for this runtime, or update ROCm'),
        (70200000, 'pip install "hip-python~=7.2.0" for this runtime, or update ROCm'),
        (60041133, "update ROCm (eventapi-hip needs 6.2 or newer)"),
    ],
)
def test_a_hip_runtime_older_than_the_binding_names_the_fix(runtime: int, fix: str) -> None:
    emu = load("hip")
    major, minor = _hip_binding_version()
    emu.set_driver_version(runtime)
    try:
        reason = hip_plugin.probe()
    finally:
        emu.set_driver_version(None)
    shown = f"{runtime // 10_000_000}.{runtime // 100_000 % 100}"
    assert reason == f"HIP runtime {shown}, hip-python built for HIP {major}.{minor}; {fix}"


def test_a_hip_runtime_as_new_as_the_binding_is_usable() -> None:
    emu = load("hip")
    major, minor = _hip_binding_version()
    for runtime in (major * 10_000_000 + minor * 100_000 + 26333, (major + 1) * 10_000_000):
        emu.set_driver_version(runtime)
        try:
            assert hip_plugin.probe() is None, runtime
        finally:
            emu.set_driver_version(None)


def test_the_driver_version_is_chosen_for_a_whole_process_by_the_environment() -> None:
    # What a machine with an older driver shows from its first call, as the packaging tests
    # use it for a fresh venv's `eventapi` command.
    build()
    env = _env_without_drivers()
    env["LD_PRELOAD"] = f"{library_path('cuda')}:{library_path('hip')}"
    env["EMU_CUDA_DRIVER_VERSION"] = "12040"
    env["EMU_HIP_RUNTIME_VERSION"] = "60241133"
    out, _ = _run(_NO_DRIVER_SCRIPT, env)
    probes = out["probes"]
    assert isinstance(probes, dict)
    major, _ = _binding_short()
    if int(major) > 12:
        assert str(probes["cuda"]).startswith("driver supports CUDA 12.4, ")
        assert 'pip install "eventapi-core[cuda12]"' in str(probes["cuda"])
    assert str(probes["hip"]).startswith("HIP runtime 6.2, ")
    assert 'pip install "hip-python~=6.2.0"' in str(probes["hip"])


@pytest.mark.parametrize("name", ["cuda", "hip"])
def test_the_hook_declares_priority_100_and_the_install_hint(name: str) -> None:
    plugin = cuda_plugin if name == "cuda" else hip_plugin
    (spec,) = plugin.eventapi_backends()
    assert (spec.name, spec.priority) == (name, 100)
    assert spec.install_hint == f'pip install "eventapi-core[{name}]"'
