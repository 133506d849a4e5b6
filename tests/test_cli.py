"""The ``eventapi`` command line, run as users run it: the installed script and ``python -m``.

Each test starts the program in a subprocess with this interpreter's environment, so what is
checked is the real entry point, the real discovery and the real exit status.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import eventapi

PLUGINS = Path(__file__).parent / "plugins"
SCRIPT = Path(sys.executable).parent / "eventapi"
KEYS = ["name", "distribution", "version", "priority", "status", "reason", "install_hint"]


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


def test_backends_shows_the_install_hint_of_each_backend_not_usable_here() -> None:
    rows = json.loads(run("backends", "--json").stdout)
    table = run("backends")
    assert table.returncode == 0, table.stderr
    wanted = [
        f"{row['name']} {row['install_hint']}"
        for row in rows
        if row["status"] not in ("ok", "blocked") and row["install_hint"]
    ]
    if wanted:
        assert _hint_lines(table.stdout) == wanted
    else:
        assert "install hints:" not in table.stdout


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
    assert chosen.stdout.splitlines()[-1] == "default: host (from EVENTAPI_BACKEND)"
    # A malformed variable is reported, not a crash: the listing is what the user asked for.
    malformed = run("backends", extra_env={"EVENTAPI_BACKEND": "cuda:first"})
    assert malformed.returncode == 0, malformed.stderr
    assert malformed.stdout.splitlines()[-1].startswith(
        "default: none (EVENTAPI_BACKEND='cuda:first' is not of the form NAME or NAME:DEVICE"
    )


def test_check_runs_and_reports_failure_in_the_exit_status() -> None:
    ok = run("check", "host")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "host" in ok.stdout
    missing = run("check", "nosuch")
    assert missing.returncode != 0
    assert "nosuch" in missing.stdout + missing.stderr


@pytest.mark.parametrize("args", [[], ["frobnicate"], ["backends", "--bogus"]])
def test_usage_errors_exit_2(args: list[str]) -> None:
    done = run(*args)
    assert done.returncode == 2
    assert "usage: eventapi" in done.stderr
