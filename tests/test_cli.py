"""The ``eventapi`` command line, run as users run it: the installed script and ``python -m``.

Each test starts the program in a subprocess with this interpreter's environment, so what is
checked is the real entry point, the real discovery and the real exit status.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import eventapi

PLUGINS = Path(__file__).parent / "plugins"
DOCS = Path(__file__).parent.parent / "docs"
SCRIPT = Path(sys.executable).parent / "eventapi"
KEYS = ["name", "distribution", "version", "priority", "status", "reason", "install_hint"]
CHECKS = [  # every check of `eventapi check`, in its order
    "fence_cross_thread",
    "stream_dependency",
    "window_delay",
    "anchor",
    "overhead_event_record",
    "overhead_event_query",
    "overhead_fence",
    "overhead_window",
    "handles",
]


def run(
    *args: str, extra_env: dict[str, str] | None = None, module: bool = False
) -> subprocess.CompletedProcess[str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("EVENTAPI_") and k != "PYTHONPATH"
    }
    env.update(extra_env or {})
    command = [sys.executable, "-m", "eventapi"] if module else [str(SCRIPT)]
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def test_backends_prints_a_table_and_the_default() -> None:
    done = run("backends")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["NAME", "PRIORITY", "DISTRIBUTION", "VERSION", "STATUS"]
    (host,) = [line for line in lines if line.startswith("host ")]
    assert host.split() == ["host", "0", "eventapi-core", eventapi.__version__, "ok"]
    assert lines[-1].startswith("default: ")


def test_backends_json_has_exactly_the_documented_keys() -> None:
    done = run("backends", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert isinstance(rows, list)
    assert {"host", "cuda", "hip"} <= {row["name"] for row in rows}
    for row in rows:
        assert list(row) == KEYS
        assert isinstance(row["priority"], int)
        assert all(isinstance(row[key], str) for key in KEYS if key != "priority")
    (host,) = [row for row in rows if row["name"] == "host"]
    assert host == {
        "name": "host",
        "distribution": "eventapi-core",
        "version": eventapi.__version__,
        "priority": 0,
        "status": "ok",
        "reason": "",
        "install_hint": "",
    }


def _hint_lines(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    start = lines.index("install hints:")
    end = lines.index("", start)
    return [" ".join(line.split()) for line in lines[start + 1 : end]]


def test_an_installed_backend_without_its_driver_gets_no_install_hint() -> None:
    # Here cuda and hip are installed (editable) and find no driver library: installing the
    # Python package again would fix nothing, and the status says what is missing.
    rows = {row["name"]: row for row in json.loads(run("backends", "--json").stdout)}
    assert rows["cuda"]["status"].startswith("unavailable: no NVIDIA driver library")
    assert rows["cuda"]["install_hint"]  # the row keeps the plugin's hint, as data
    table = run("backends")
    assert table.returncode == 0, table.stderr
    assert "install hints:" not in table.stdout


def test_a_backend_without_its_binding_is_unavailable_as_the_docs_define_it(
    tmp_path: Path,
) -> None:
    # A regular package named cuda ahead on the path hides the installed cuda-bindings (its
    # namespace package), as an environment without the binding has none: the cuda backend is
    # installed and its binding, a Python package, is not.
    (tmp_path / "cuda").mkdir()
    (tmp_path / "cuda" / "__init__.py").write_text('"""Not the cuda of cuda-bindings."""\n')
    hidden = {"PYTHONPATH": str(tmp_path)}
    listing = run("backends", "--json", extra_env=hidden)
    rows = {row["name"]: row for row in json.loads(listing.stdout)}
    reason = rows["cuda"]["reason"]
    assert reason == 'cuda-bindings is not installed; pip install "eventapi-core[cuda]"'
    assert rows["cuda"]["status"] == f"unavailable: {reason}"
    table = run("backends", extra_env=hidden)
    assert table.returncode == 0, table.stderr
    assert "install hints:" not in table.stdout  # the status carries the command

    # The page that defines the statuses says so: what an unavailable backend lacks may be its
    # binding, a Python package, and the fix then a pip install.
    page = (DOCS / "selecting-backends.md").read_text()
    (meaning,) = [line for line in page.splitlines() if line.startswith("| `unavailable: ")]
    assert "binding itself (a Python package" in meaning
    assert "not installed" in meaning
    assert "pip install" in meaning
    assert "outside Python" not in page


def test_backends_names_what_to_install_for_the_projects_backends_not_found() -> None:
    done = run("backends", extra_env={"EVENTAPI_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert done.returncode == 0, done.stderr
    assert _hint_lines(done.stdout) == [
        'cuda pip install "eventapi-core[cuda]" (not found)',
        'hip pip install "eventapi-core[hip]" (not found)',
    ]
    assert done.stdout.splitlines()[-1] == "default: host (the usable backend of top priority)"


def test_a_blocked_backend_gets_no_install_hint() -> None:
    done = run("backends", extra_env={"EVENTAPI_DISABLE_PLUGINS": "cuda,hip"})
    assert done.returncode == 0, done.stderr
    assert "install hints:" not in done.stdout


def test_python_dash_m_is_the_same_program() -> None:
    script = run("backends", "--json")
    module = run("backends", "--json", module=True)
    assert module.returncode == 0, module.stderr
    assert json.loads(module.stdout) == json.loads(script.stdout)
    assert run("--version", module=True).stdout.strip() == f"eventapi {eventapi.__version__}"


def test_broken_plugin_is_listed_and_the_listing_succeeds() -> None:
    done = run(
        "backends",
        "--json",
        extra_env={"PYTHONPATH": str(PLUGINS / "badhook"), "EVENTAPI_DISABLE_PLUGINS": "hip"},
    )
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert rows["badhook"]["status"].startswith("broken: eventapi_backends raised RuntimeError")
    assert rows["badhook"]["distribution"] == "eventapi-badhook"
    assert rows["hip"]["status"] == "blocked"
    assert rows["host"]["status"] == "ok"


def test_default_line_follows_the_variable() -> None:
    chosen = run("backends", extra_env={"EVENTAPI_BACKEND": "host"})
    assert chosen.returncode == 0, chosen.stderr
    assert chosen.stdout.splitlines()[-1] == "default: host (from EVENTAPI_BACKEND)"


FAILING_DEFAULTS = [
    # (EVENTAPI_BACKEND, the start of what the default line says backend() would raise)
    (
        "garbage",
        "eventapi.BackendNotFoundError: backend 'garbage' (from EVENTAPI_BACKEND) is not installed",
    ),
    (
        "cuda",
        "eventapi.BackendUnavailableError: backend 'cuda' (from EVENTAPI_BACKEND) "
        "(eventapi-cuda 0.1.0) cannot be used here: no NVIDIA driver library",
    ),
    ("cuda:first", "ValueError: EVENTAPI_BACKEND='cuda:first' is not of the form NAME"),
]


@pytest.mark.parametrize(("value", "says"), FAILING_DEFAULTS, ids=[f[0] for f in FAILING_DEFAULTS])
def test_a_default_that_would_fail_is_shown_and_fails(value: str, says: str) -> None:
    # The listing is still printed: it is what the user needs to see why.
    done = run("backends", extra_env={"EVENTAPI_BACKEND": value})
    assert done.returncode == 1
    assert done.stdout.splitlines()[0].split()[0] == "NAME"
    last = done.stdout.splitlines()[-1]
    assert last.startswith(f"default: none; eventapi.backend() would raise {says}"), last
    as_json = run("backends", "--json", extra_env={"EVENTAPI_BACKEND": value})
    assert as_json.returncode == 1
    assert {row["name"] for row in json.loads(as_json.stdout)} >= {"host", "cuda"}
    assert says in as_json.stderr


def test_a_tie_at_the_top_is_shown_and_fails() -> None:
    done = run(
        "backends",
        extra_env={"PYTHONPATH": os.pathsep.join([str(PLUGINS / "alpha"), str(PLUGINS / "beta")])},
    )
    assert done.returncode == 1
    assert "would raise eventapi.BackendError: several usable backends" in done.stdout


# -- hostile plugins --------------------------------------------------------------------------


def hostile(act: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run(
        "backends",
        *args,
        extra_env={"PYTHONPATH": str(PLUGINS / "hostile"), "EVENTAPI_FAKE_HOSTILE": act, **env},
    )


@pytest.mark.parametrize("stage", ["import", "hook", "probe"])
def test_what_a_plugin_prints_goes_to_stderr_not_into_the_json(stage: str) -> None:
    done = hostile(f"{stage}:print", "--json")
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)}  # stdout is only the JSON
    assert rows["hostile"]["status"] == "ok"
    assert f"hostile plugin prints from {stage}" in done.stderr
    assert f"hostile plugin writes to fd 1 from {stage}" in done.stderr


@pytest.mark.parametrize("stage", ["import", "probe", "load"])
def test_what_a_plugin_prints_during_a_check_goes_to_stderr_not_into_the_json(stage: str) -> None:
    done = run(
        "check",
        "hostile",
        "--json",
        extra_env={
            "PYTHONPATH": str(PLUGINS / "hostile"),
            "EVENTAPI_FAKE_HOSTILE": f"{stage}:print",
        },
    )
    rows = json.loads(done.stdout)  # stdout is only the JSON
    # The backend loaded and every check ran. Whether each passed is not this test's subject:
    # the timing checks' verdicts depend on the machine's load, so the exit status is checked
    # against the rows, not against 0.
    assert [(row["backend"], row["check"]) for row in rows] == [
        ("hostile", check) for check in CHECKS
    ], done.stderr
    failed = any(row["result"] == "FAIL" for row in rows)
    assert done.returncode == (1 if failed else 0), done.stderr
    assert f"hostile plugin prints from {stage}" in done.stderr
    assert f"hostile plugin writes to fd 1 from {stage}" in done.stderr


@pytest.mark.parametrize("stage", ["import", "hook", "probe"])
def test_a_plugin_that_exits_does_not_end_the_listing(stage: str) -> None:
    done = hostile(f"{stage}:exit", "--json")
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert "SystemExit: 3" in rows["hostile"]["status"]
    assert rows["host"]["status"] == "ok"


def test_a_plugin_that_hangs_is_reported_within_the_budget() -> None:
    done = hostile("probe:hang", EVENTAPI_PLUGIN_TIMEOUT="0.5")
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("hostile ")]
    assert "broken: timed out after 0.5 s in its probe" in line


def _no_core_dump() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def test_a_plugin_that_crashed_the_process_is_quarantined(tmp_path: Path) -> None:
    cache = {"XDG_CACHE_HOME": str(tmp_path)}
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTAPI_")}
    env.update(cache, PYTHONPATH=str(PLUGINS / "hostile"), EVENTAPI_FAKE_HOSTILE="probe:crash")
    crashed = subprocess.run(
        [str(SCRIPT), "backends", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=_no_core_dump,
    )
    assert crashed.returncode == -signal.SIGSEGV  # in-process, a native crash is the end

    # The next run does not run it again, and says how to.
    after = hostile("probe:crash", "--json", **cache)
    assert after.returncode == 0, after.stderr
    rows = {row["name"]: row for row in json.loads(after.stdout)}
    reason = rows["hostile"]["reason"]
    assert rows["hostile"]["status"] == f"broken: {reason}"
    assert reason.startswith("the process running its import, hook or probe ended there (pid ")
    assert rows["host"]["status"] == "ok"
    marker = Path(reason.rsplit("delete ", 1)[1].removesuffix(" to try it again"))
    assert marker.is_file()

    # Deleting the marker retries it (fixed, here: it no longer crashes).
    marker.unlink()
    retried = hostile("", "--json", **cache)
    assert {row["name"]: row for row in json.loads(retried.stdout)}["hostile"]["status"] == "ok"
    assert list(tmp_path.rglob("hostile.*")) == []


def test_check_runs_and_reports_failure_in_the_exit_status() -> None:
    ok = run("check", "host")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "host" in ok.stdout
    missing = run("check", "nosuch")
    assert missing.returncode != 0
    assert "nosuch" in missing.stdout + missing.stderr


UNUSABLE_CHOICES = [
    # (id, EVENTAPI_BACKEND, further variables): what it names cannot be used here
    ("not-installed", "garbage", {}),
    ("unavailable", "cuda", {}),
    ("blocked", "cuda", {"EVENTAPI_DISABLE_PLUGINS": "cuda"}),
    ("broken", "badhook", {"PYTHONPATH": str(PLUGINS / "badhook")}),
]


@pytest.mark.parametrize(
    ("value", "env"), [c[1:] for c in UNUSABLE_CHOICES], ids=[c[0] for c in UNUSABLE_CHOICES]
)
@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_check_fails_with_the_error_of_a_variable_that_names_an_unusable_backend(
    value: str, env: dict[str, str], as_json: bool
) -> None:
    # What `eventapi backends` says eventapi.backend() would raise, check fails with; it
    # never checks the usable host instead.
    variables = {"EVENTAPI_BACKEND": value, **env}
    listing = run("backends", extra_env=variables)
    assert listing.returncode == 1
    prefix = "default: none; eventapi.backend() would raise "
    last = listing.stdout.splitlines()[-1]
    assert last.startswith(prefix), last
    error = last.removeprefix(prefix)

    done = run("check", *(["--json"] if as_json else []), extra_env=variables)
    assert done.returncode == 1, done.stdout + done.stderr
    if as_json:
        (row,) = json.loads(done.stdout)
        assert (row["backend"], row["check"], row["result"]) == (value, "load", "FAIL")
        assert row["detail"] == error
    else:
        (line,) = done.stdout.splitlines()[1:]
        assert line.split()[:3] == [value, "load", "FAIL"]
        assert line.endswith(f"  {error}")


def test_check_checks_the_backend_the_variable_names_and_no_other() -> None:
    # alpha (priority 70) and host are both usable; the variable picks one of them.
    plugins = {"PYTHONPATH": str(PLUGINS / "alpha")}
    for value in ("alpha", "host"):
        done = run("check", "--json", extra_env={"EVENTAPI_BACKEND": value, **plugins})
        rows = json.loads(done.stdout)
        assert [(row["backend"], row["check"]) for row in rows] == [
            (value, check) for check in CHECKS
        ], done.stdout
        # The exit status is the checks' own (timing checks included), as for a named one.
        failed = any(row["result"] == "FAIL" for row in rows)
        assert done.returncode == (1 if failed else 0), done.stderr
    named = run("check", "--json", "host", extra_env={"EVENTAPI_BACKEND": "alpha", **plugins})
    assert {row["backend"] for row in json.loads(named.stdout)} == {"host"}  # names win


@pytest.mark.parametrize("args", [[], ["frobnicate"], ["backends", "--bogus"]])
def test_usage_errors_exit_2(args: list[str]) -> None:
    done = run(*args)
    assert done.returncode == 2
    assert "usage: eventapi" in done.stderr
