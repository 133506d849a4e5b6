"""A Ctrl-C during the first cuda profiler's nvtx import leaves no other thread waiting forever.

The first ``cuda`` profiler of a process decides whether its windows are NVTX ranges, which
imports ``nvtx`` when a tool is attached. A signal landing in that import on the main thread,
while other threads build their first profilers, could leave CPython's import locks held
against them. The decision runs on a thread of its own, which a signal never reaches: the
interrupted constructor raises ``KeyboardInterrupt`` from its wait and the others go on.

A stand-in ``nvtx`` package (first on ``sys.path``) holds its import until the test lets it
go, and says which thread imported it; the storm runs in a child on emulated cuda, three times.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from child import run_json
from emulated_driver import build, preload_env

# The stand-in: the import is held until the storm's gate opens.
NVTX = textwrap.dedent(
    """
    import builtins, threading

    builtins.nvtx_imports.append(threading.current_thread().name)
    builtins.nvtx_entered.set()
    builtins.nvtx_gate.wait(30)


    class _Domain:
        def get_event_attributes(self, *, message):
            return message

        def start_range(self, attributes):
            return 1

        def end_range(self, range_id):
            pass


    def enabled():
        return True


    def get_domain(name):
        return _Domain()
    """
)

STORM = textwrap.dedent(
    """
    import builtins, json, signal, sys, threading, time
    builtins.nvtx_imports = []
    builtins.nvtx_entered = threading.Event()
    builtins.nvtx_gate = threading.Event()
    import eventapi
    from eventapi import EventProfiler

    api = eventapi.backend("cuda")
    main = threading.main_thread()
    built = []


    def first_profiler():
        with EventProfiler(api) as prof:
            with prof.window("w"):
                pass
            built.append(len(prof.collect()))


    def interrupt_main_while_it_waits():
        builtins.nvtx_entered.wait(30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until its first profiler blocks in a wait
            frame = sys._current_frames().get(main.ident)
            names = set()
            while frame is not None:
                names.add(frame.f_code.co_name)
                frame = frame.f_back
            if "first_profiler" in names and names & {"wait", "acquire"}:
                break
            time.sleep(0.001)
        signal.pthread_kill(main.ident, signal.SIGINT)
        # The main thread lets the import go once interrupted; this is for when it never is.
        time.sleep(30)
        builtins.nvtx_gate.set()


    others = [threading.Thread(target=first_profiler) for _ in range(4)]
    for thread in others:
        thread.start()
    threading.Thread(target=interrupt_main_while_it_waits, daemon=True).start()
    try:
        first_profiler()
        interrupted = False
    except KeyboardInterrupt:
        interrupted = True
        builtins.nvtx_gate.set()
    for thread in others:
        thread.join(30)
    first_profiler()  # and the main thread builds one after
    print(json.dumps({
        "imported_on": builtins.nvtx_imports,
        "interrupted": interrupted,
        "stuck": sum(thread.is_alive() for thread in others),
        "built": built,
    }))
    """
)


def test_an_interrupt_in_the_first_profilers_nvtx_import_strands_no_thread(
    tmp_path: Path,
) -> None:
    build()
    (tmp_path / "nvtx").mkdir()
    (tmp_path / "nvtx" / "__init__.py").write_text(NVTX)
    env = preload_env("cuda")
    env["PYTHONPATH"] = f"{tmp_path}:{env.get('PYTHONPATH', '')}"
    env["NVTX_INJECTION64_PATH"] = str(tmp_path / "no-tool.so")  # a tool, as far as we check
    env.pop("NVTX_DISABLE", None)
    for _ in range(3):
        outcome = run_json(STORM, env)
        # Imported once, on the thread that decides, never on a constructor's.
        assert outcome["imported_on"] == ["eventapi-nvtx"], outcome
        assert outcome["interrupted"], outcome
        assert outcome["stuck"] == 0, outcome
        assert outcome["built"] == [1] * 5, outcome
