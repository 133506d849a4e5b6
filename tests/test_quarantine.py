"""Probe containment: a plugin is quarantined for a crash only when it crashed.

Every case runs the real ``eventapi backends`` (or ``eventapi.backend``) in real processes, with
the ``hostile`` fake distribution on the path and a cache directory of the test's own. A process
is ended from outside while the plugin's probe is running (the plugin writes a line to stderr as
it starts waiting, so the test signals it then, not after a sleep), or crashes in native code
there, and a fresh process then lists the plugin.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import eventapi

PLUGINS = Path(__file__).parent / "plugins"
SCRIPT = Path(sys.executable).parent / "eventapi"
# The processes run the eventapi this test imported, wherever the interpreter's own points.
SOURCE = Path(eventapi.__file__).parent.parent


def environment(cache: Path, hostile: str = "", **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("EVENTAPI_", "PYTHONFAULTHANDLER")) and k != "PYTHONPATH"
    }
    env.update(
        XDG_CACHE_HOME=str(cache),
        PYTHONPATH=os.pathsep.join([str(PLUGINS / "hostile"), str(SOURCE)]),
        EVENTAPI_DISABLE_PLUGINS="cuda,hip",  # not needed here; their probes cost time
        EVENTAPI_FAKE_HOSTILE=hostile,
        **extra,
    )
    return env


def probing(cache: Path) -> Path:
    return cache / "eventapi" / "probing"


def listing(cache: Path, *args: str, **extra: str) -> tuple[dict[str, dict[str, Any]], str]:
    """The rows of ``eventapi backends --json`` in a fresh process, by name; and its stderr."""
    done = subprocess.run(
        [str(SCRIPT), "backends", "--json", *args],
        env=environment(cache, **extra),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return {row["name"]: row for row in json.loads(done.stdout)}, done.stderr


def _no_core_dump() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def crash(cache: Path, act: str = "probe:crash", **extra: str) -> None:
    """A listing whose hostile plugin segfaults as ``act`` says; the process ends there."""
    done = subprocess.run(
        [str(SCRIPT), "backends", "--json"],
        env=environment(cache, act, **extra),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=_no_core_dump,
    )
    assert done.returncode == -signal.SIGSEGV, done.stderr


def journals(cache: Path) -> list[Path]:
    return sorted(probing(cache).glob("*.probing"))


SIGNALS = [
    (signal.SIGTERM, -signal.SIGTERM),  # `timeout`, `kill`, a batch system's time limit
    (signal.SIGHUP, -signal.SIGHUP),  # a closed terminal
    (signal.SIGKILL, -signal.SIGKILL),  # an out-of-memory killer, `kill -9`
    (signal.SIGINT, 130),  # Ctrl-C: KeyboardInterrupt, the program ends normally
]


@pytest.mark.parametrize(("sig", "status"), SIGNALS, ids=[s[0].name for s in SIGNALS])
def test_a_process_ended_from_outside_while_probing_is_no_crash(
    tmp_path: Path, sig: signal.Signals, status: int
) -> None:
    child = subprocess.Popen(
        [str(SCRIPT), "backends"],
        env=environment(tmp_path, "probe:wait"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stderr is not None
        # Blocks until the probe runs: the plugin writes this line as it starts waiting.
        assert child.stderr.readline() == "hostile plugin waits in probe\n"
        child.send_signal(sig)
        assert child.wait(timeout=60) == status
    finally:
        child.kill()
        child.wait()
    if sig is not signal.SIGINT:
        assert len(journals(tmp_path)) == 1  # it died while running the plugin
    rows, stderr = listing(tmp_path)
    assert rows["hostile"]["status"] == "ok"
    assert "ended while running" not in stderr  # known to be no crash: not even a warning
    assert journals(tmp_path) == []  # judged and removed
    assert sorted(p.name for p in probing(tmp_path).iterdir()) == []


def test_a_native_crash_quarantines_until_retried(tmp_path: Path) -> None:
    crash(tmp_path)
    rows, _ = listing(tmp_path, hostile="probe:crash")  # not run again: this would crash
    reason = rows["hostile"]["reason"]
    assert rows["hostile"]["status"] == f"broken: {reason}"
    assert "a crash in native code (Segmentation fault, File " in reason
    assert "eventapi_fake_hostile.py" in reason  # where it crashed: the plugin's own line
    assert "in its probe, so it is not run again" in reason
    assert rows["hostile"]["priority"] == 80  # the priority it declared before its probe
    record = probing(tmp_path) / "hostile.quarantined"
    assert reason.endswith(
        f"run 'eventapi backends --retry hostile' or delete {record} to try it again"
    )
    rows, _ = listing(tmp_path, hostile="probe:crash")
    assert rows["hostile"]["reason"] == reason  # stays quarantined

    rows, stderr = listing(tmp_path, "--retry", "hostile")  # fixed, here: no longer crashes
    assert f"eventapi: hostile runs again; removed {record}" in stderr
    assert rows["hostile"]["status"] == "ok"
    assert list(probing(tmp_path).iterdir()) == []


def test_a_crash_of_another_thread_does_not_quarantine_the_plugin_then_running(
    tmp_path: Path,
) -> None:
    # The main thread crashes while the plugin's probe waits on a thread of its own.
    code = (
        "import ctypes, threading, eventapi\n"
        "threading.Thread(target=eventapi.backends, daemon=True).start()\n"
        "import eventapi_fake_hostile_gate as gate\n"
        "gate.ENTERED.wait()\n"
        "ctypes.string_at(0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=environment(tmp_path, "probe:hang"),
        capture_output=True,
        timeout=60,
        check=False,
        preexec_fn=_no_core_dump,
    )
    assert done.returncode == -signal.SIGSEGV
    assert len(journals(tmp_path)) == 1
    rows, _ = listing(tmp_path)
    assert rows["hostile"]["status"] == "ok"
    assert list(probing(tmp_path).iterdir()) == []


def test_with_the_programs_faulthandler_one_crash_quarantines(tmp_path: Path) -> None:
    # faulthandler enabled by the program (here PYTHONFAULTHANDLER) is the program's, and left
    # alone; the next process still tells the crash from a kill, and does not crash again.
    crash(tmp_path, PYTHONFAULTHANDLER="1")
    rows, _ = listing(tmp_path, hostile="probe:crash", PYTHONFAULTHANDLER="1")
    reason = rows["hostile"]["reason"]
    assert rows["hostile"]["status"] == f"broken: {reason}"
    assert reason.startswith("the process running its import, hook or probe ended there (pid ")
    assert "a crash in native code (Segmentation fault, File " in reason
    assert sorted(p.name for p in probing(tmp_path).iterdir()) == ["hostile.quarantined"]


def test_a_crash_on_a_thread_the_probe_started_quarantines(tmp_path: Path) -> None:
    # A driver's own worker thread, started by the probe, segfaults while the probe waits for
    # it: the plugin's crash, though not on the thread that ran the plugin.
    crash(tmp_path, "probe:crash-thread")
    rows, _ = listing(tmp_path, hostile="probe:crash-thread")  # does not crash again
    reason = rows["hostile"]["reason"]
    assert rows["hostile"]["status"] == f"broken: {reason}"
    assert "a crash in native code (Segmentation fault" in reason
    assert "in its probe, so it is not run again" in reason
    assert rows["hostile"]["priority"] == 80
    assert rows["host"]["status"] == "ok"
    assert sorted(p.name for p in probing(tmp_path).iterdir()) == ["hostile.quarantined"]


SELECT = """
import json, eventapi
try:
    eventapi.backend("hostile")
except eventapi.BackendError as exc:
    print(json.dumps([type(exc).__name__, str(exc)]))
else:
    print(json.dumps(None))
"""


def test_a_crash_in_load_quarantines_for_selection(tmp_path: Path) -> None:
    env = environment(tmp_path, "load:crash")
    command = [sys.executable, "-c", SELECT]
    first = subprocess.run(
        command, env=env, capture_output=True, timeout=60, check=False, preexec_fn=_no_core_dump
    )
    assert first.returncode == -signal.SIGSEGV, first.stderr

    again = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert again.returncode == 0, again.stderr  # did not load it, so did not crash
    kind, message = json.loads(again.stdout)
    assert kind == "BackendError"
    assert message.startswith(
        "backend 'hostile' (eventapi-hostile 0.9) is broken: the process running its load "
        "ended there (pid "
    )
    assert "a crash in native code (Segmentation fault, File " in message
    assert "in its load (hostile), so it is not run again" in message
    rows, _ = listing(tmp_path, hostile="load:crash")
    assert rows["hostile"]["status"] == f"broken: {message.split(' is broken: ', 1)[1]}"


def _killed_in_its_own_probe(
    child: subprocess.Popen[str], sig: int, release: Callable[[], None]
) -> None:
    """Send ``sig`` to ``child`` while its own probe waits; release any other process's probe.

    The plugin says which process it waits in; another one is a process the child started.
    """
    assert child.stderr is not None
    for line in child.stderr:
        waiting = re.fullmatch(r"hostile plugin waits in probe \(pid (\d+)\)\n", line)
        if waiting is None:
            continue
        if int(waiting[1]) != child.pid:
            release()
            continue
        child.send_signal(sig)
        assert child.wait(timeout=60) == -sig
        return
    pytest.fail(f"the listing ended ({child.wait()}) before its probe ran")


@pytest.mark.parametrize("faulthandler", [False, True], ids=["", "-X faulthandler"])
def test_a_healthy_probe_killed_from_outside_twice_in_a_row_is_not_quarantined(
    tmp_path: Path, faulthandler: bool
) -> None:
    # A batch system's time limit, twice: SIGKILL, then SIGTERM, each while the probe waits.
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    env = environment(tmp_path, "probe:gate", EVENTAPI_FAKE_HOSTILE_GATE=str(gate))
    option = ["-X", "faulthandler"] if faulthandler else []
    with contextlib.ExitStack() as stack:
        writer: list[int] = []

        def release() -> None:
            # One byte lets one waiting probe go on; the pipe stays open for the next waiter.
            if not writer:
                writer.append(os.open(gate, os.O_WRONLY))
                stack.callback(os.close, writer[0])
            os.write(writer[0], b"x")

        for sig in (signal.SIGKILL, signal.SIGTERM):
            child = subprocess.Popen(
                [sys.executable, *option, "-m", "eventapi", "backends"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            try:
                _killed_in_its_own_probe(child, sig, release)
            finally:
                child.kill()
                child.wait()
    rows, stderr = listing(tmp_path)
    assert rows["hostile"]["status"] == "ok"
    assert "run alone in a separate process it returned" in stderr  # says what it decided
    assert sorted(p.name for p in probing(tmp_path).iterdir()) == []


def _edit(journal: Path, field: str, value: str) -> None:
    """Put ``value`` where ``journal`` records this machine's ``field``: the host name, the pid
    namespace or the boot id, each one tab-separated field of the journal's line."""
    here = {
        "host": os.uname().nodename,
        "pidns": str(os.stat("/proc/self/ns/pid").st_ino),
        "boot": Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
    }[field]
    text = journal.read_text()
    assert text.count(f"\t{here}\t") == 1, text
    journal.write_text(text.replace(f"\t{here}\t", f"\t{value}\t"))


@pytest.mark.parametrize(
    ("field", "kept"),
    [("host", True), ("pidns", True), ("boot", False)],
    ids=["another host", "another pid namespace", "before a reboot"],
)
def test_a_journal_of_another_host_namespace_or_boot_is_no_crash_here(
    tmp_path: Path, field: str, kept: bool
) -> None:
    crash(tmp_path)  # a real crash's journal, as a process elsewhere would leave it
    (journal,) = journals(tmp_path)
    _edit(journal, field, "elsewhere")
    rows, _ = listing(tmp_path)
    assert rows["hostile"]["status"] == "ok"
    # Another host's or namespace's process may still run: left to its own readers. One from
    # before a reboot is certainly gone, and a reboot is no crash: removed.
    assert journal.exists() is kept
    assert not (probing(tmp_path) / "hostile.quarantined").exists()


def test_markers_never_follow_links(tmp_path: Path) -> None:
    # A real quarantine record, from a crash in another cache directory.
    crash(tmp_path / "other")
    listing(tmp_path / "other", hostile="probe:crash")
    record = (probing(tmp_path / "other") / "hostile.quarantined").read_text()
    secret = tmp_path / "secret.txt"
    secret.write_text(record)
    cache = tmp_path / "cache"
    probing(cache).mkdir(parents=True, mode=0o700)
    planted = probing(cache) / "hostile.quarantined"
    planted.symlink_to(secret)
    journal = probing(cache) / "1.abcd.probing"
    journal.symlink_to(secret)

    # Read: a link is not followed (what it points to would quarantine), and is removed.
    rows, _ = listing(cache)
    assert rows["hostile"]["status"] == "ok"
    assert not planted.is_symlink()
    assert not journal.is_symlink()

    # Written: a record replaces a link planted where it goes, and never writes through it.
    secret.write_text("not eventapi's\n")
    crash(cache)
    planted.symlink_to(secret)
    rows, _ = listing(cache, hostile="probe:crash")
    assert rows["hostile"]["status"].startswith("broken: ")  # the real crash still counts
    assert secret.read_text() == "not eventapi's\n"
    assert not planted.is_symlink()


def test_unparsable_markers_are_removed(tmp_path: Path) -> None:
    directory = probing(tmp_path)
    directory.mkdir(parents=True, mode=0o700)
    for name, text in [
        ("1.abcd.probing", "garbage\n"),
        ("hostile.quarantined", "eventapi-record 1\nno priority\n"),
        ("hostile.ended", ""),
    ]:
        (directory / name).write_text(text)
    rows, _ = listing(tmp_path)
    assert rows["hostile"]["status"] == "ok"
    assert list(directory.iterdir()) == []


def test_a_directory_that_is_not_ours_is_not_used(tmp_path: Path) -> None:
    real = tmp_path / "real"
    crash(real)
    listing(real, hostile="probe:crash")  # judges the crash: a quarantine record
    elsewhere = probing(real)
    assert [p.name for p in elsewhere.iterdir()] == ["hostile.quarantined"]
    linked = tmp_path / "linked"
    probing(linked).parent.mkdir(parents=True)
    probing(linked).symlink_to(elsewhere, target_is_directory=True)
    rows, stderr = listing(linked)
    # A directory reached through a link may be anyone's: its records do not quarantine, and
    # nothing is written there; plugins run unguarded, with a warning saying why.
    assert rows["hostile"]["status"] == "ok"
    assert [p.name for p in elsewhere.iterdir()] == ["hostile.quarantined"]
    assert stderr.count("is a link or not this user's own directory") == 1


def test_a_directory_wider_than_0700_is_narrowed(tmp_path: Path) -> None:
    directory = probing(tmp_path)
    directory.mkdir(parents=True)
    directory.chmod(0o755)  # as an older eventapi created it, with the umask's mode
    listing(tmp_path)
    assert directory.stat().st_mode & 0o777 == 0o700


FAULTHANDLER = """
import faulthandler, json, sys, eventapi
before = faulthandler.is_enabled()
eventapi.backends()
print(json.dumps([before, faulthandler.is_enabled()]))
"""


@pytest.mark.parametrize("enabled", [False, True], ids=["not enabled", "enabled by the program"])
def test_faulthandler_is_left_as_the_program_had_it(tmp_path: Path, enabled: bool) -> None:
    extra = {"PYTHONFAULTHANDLER": "1"} if enabled else {}
    done = subprocess.run(
        [sys.executable, "-c", FAULTHANDLER],
        env=environment(tmp_path, **extra),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(done.stdout) == [enabled, enabled]
