"""One plugin run alone in a separate process, to see whether it ends that process too.

The quarantine (:mod:`eventapi._plugins._quarantine`) asks for this after a process ended while
the plugin's code ran in it: whatever ended that process (a crash of the plugin on any thread,
a crash of the program's own code, an ``os._exit``, a kill from outside) left the same trace, and
this tells them apart. The separate process is a fresh interpreter on this one's ``sys.path``
and environment. It goes as far as the dead process went: the plugin's import, hook and probe,
as discovery runs them (:func:`eventapi._plugins._plugin.resolve`), and its ``load`` as well when
that process died loading it. It has :mod:`faulthandler` enabled for itself, to say where a
crash happened. What the plugin prints there goes where this process's output goes, as it would
here. It is in a session of its own (a Ctrl-C at the terminal is not its end), ends when this
process ends (it watches its stdin), and is killed when the time given runs out.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from importlib.metadata import EntryPoint
from typing import Any, Final, NoReturn

from ._plugin import Plugin, describe, resolve
from ._spec import ENTRY_POINT_GROUP

__all__ = ["main", "run"]

_CODE: Final = (
    "import json, sys\n"
    "args = json.loads(sys.argv[1])\n"
    "sys.path[:] = args['path']\n"
    "from eventapi._plugins._alone import main\n"
    "main(args)\n"
)

# What ends a process that crashed in native code; what else ends it is not the plugin's doing
# or, for an exit, is seen as no "returned" line.
_CRASHES: Final = frozenset(
    {signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGABRT}
)
_DUMP: Final = "Fatal Python error: "
_CURRENT: Final = "Current thread 0x"
_MAX_BYTES: Final = 1 << 20  # the report with every thread's stack is a few KiB


def run(plugin: Plugin, load: str, timeout: float) -> tuple[str, str, int]:
    """Run ``plugin`` alone in a new process and wait at most ``timeout`` seconds for it.

    ``load`` is ``""`` to stop after the probe, else the backend whose ``load`` to call after
    it, as it was selected: ``"NAME"`` for ``load(None)``, ``"NAME:DEVICE"``. Never raises.

    Returns how the plugin ended that process, ``(verdict, how, priority)``. The verdict is
    ``"crashed"`` (a fatal signal, or the process ended without the plugin returning, while the
    plugin ran: ``how`` says how, and where the plugin was), ``"returned"`` (it ran to the end),
    or ``"unknown"`` (not run to an end: ``how`` says why); the priority is what the plugin
    declared (0 if it did not get that far).
    """
    # The parent of eventapi's own folder first: the child must import this eventapi.
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    status: int | None = None  # killed when the time ran out
    try:
        with tempfile.TemporaryFile() as report:
            args = {
                # The import system skips entries that are not str; so does json.
                "path": [root, *(entry for entry in sys.path if isinstance(entry, str))],
                "plugin": plugin[:4],  # name, distribution, version, target
                "load": load,
                "report": report.fileno(),
            }
            with subprocess.Popen(
                [sys.executable, "-S", "-c", _CODE, json.dumps(args)],
                stdin=subprocess.PIPE,  # closed on leaving the block: the child's cue to end
                pass_fds=(report.fileno(),),
                start_new_session=True,
            ) as child:
                try:
                    status = child.wait(timeout)
                except subprocess.TimeoutExpired:
                    child.kill()
            report.seek(0)
            text = report.read(_MAX_BYTES).decode("utf-8", errors="replace")
    except (OSError, ValueError) as exc:  # no temporary file, no interpreter to start
        return "unknown", f"it could not be run: {describe(exc)}", 0
    return _outcome(status, text, timeout)


def _outcome(status: int | None, text: str, timeout: float) -> tuple[str, str, int]:
    head, found, dump = text.partition(_DUMP)
    lines = (line.partition("\t") for line in head.split("\n"))
    said = {kind: value for kind, _, value in lines}  # the last value said of each kind
    stage = said.get("stage", "")
    priority = int(said.get("priority", 0))  # the spec's, which the checks found an int
    if status is None:
        return "unknown", f"it did not end within {timeout:g} s", priority
    if "returned" in said and status == 0:
        return "returned", "", priority
    ended = _status(status)
    if not stage:  # eventapi's own failure there, which its traceback on stderr explains
        return "unknown", f"that process ended ({ended}) before the plugin ran", priority
    if status < 0 and -status in _CRASHES:
        where = _where(dump) if found else ended
        return "crashed", f"a crash in native code ({where}) {stage}", priority
    if status >= 0:
        return "crashed", f"it ended that process ({ended}) {stage}", priority
    return "unknown", f"that process was ended from outside ({ended})", priority


def _status(status: int) -> str:
    if status >= 0:
        return f"exit status {status}"
    try:
        return signal.Signals(-status).name
    except ValueError:
        return f"signal {-status}"


def _where(dump: str) -> str:
    """What faulthandler says crashed, and the innermost frame of the crashed thread outside the
    standard library: the plugin's own line, usually."""
    what = dump.split("\n", 1)[0].strip()
    # A crashed thread with no Python frames (a driver's own, say) has no stack here: no frame.
    _, _, rest = dump.partition(_CURRENT)
    stdlib = os.path.dirname(os.__file__)
    for line in rest.split("\n")[1:]:
        frame = line.strip()
        if not frame.startswith("File "):
            break  # the end of this thread's stack
        if not frame.startswith(f'File "{stdlib}{os.sep}') or "-packages" in frame:
            return f"{what}, {frame}"
    return what


# -- in the separate process ------------------------------------------------------------------


def main(args: dict[str, Any]) -> NoReturn:
    """Run the plugin as ``args`` says, reporting to the descriptor ``args["report"]``; exit."""
    fd: int = args["report"]

    def say(kind: str, value: object = "") -> None:
        os.write(fd, f"{kind}\t{' '.join(str(value).split())}\n".encode())

    def advance(stage: str, priority: int) -> None:
        say("priority", priority)
        say("stage", stage)

    faulthandler.enable(file=fd, all_threads=True)
    threading.Thread(target=_exit_with_parent, daemon=True).start()
    name, distribution, version, target = args["plugin"]
    load = EntryPoint(name, target, ENTRY_POINT_GROUP).load
    entry = resolve(Plugin(name, distribution, version, target, load), advance)  # never raises
    selected = args["load"]
    if selected and entry.spec is not None:
        advance(f"in its load ({selected})", entry.spec.priority)
        device = selected.partition(":")[2]
        with contextlib.suppress(BaseException):  # the plugin's failure, not a crash
            entry.spec.load(int(device) if device else None)
    say("returned")
    os._exit(0)  # no finalizers, no joining the plugin's threads: it returned, that is all


def _exit_with_parent() -> None:
    sys.stdin.buffer.read()  # returns at end of file: the parent closed it, or is gone
    os._exit(0)
