"""A plugin that misbehaves where ``EVENTAPI_FAKE_HOSTILE`` says: ``STAGE:ACT[,STAGE:ACT]``.

STAGE is ``import``, ``hook``, ``probe`` or ``load``; ACT is ``raise``, ``exit`` (``sys.exit(3)``),
``print`` (to ``sys.stdout`` and to file descriptor 1, then carries on), ``hang`` (until the test
sets ``eventapi_fake_hostile_gate.RELEASE``), ``wait`` (writes ``hostile plugin waits in STAGE``
to file descriptor 2, then hangs: a slow, healthy plugin that another process can see is
running), ``gate`` (writes ``hostile plugin waits in STAGE (pid PID)`` to file descriptor 2,
then waits for one byte from the named pipe ``EVENTAPI_FAKE_HOSTILE_GATE``: a healthy plugin
that a test in another process releases, one process at a time), ``crash`` (a segfault in
native code) or ``crash-thread`` (a segfault on a thread it starts and waits for, as a driver's
own worker thread). Without the variable it is a sound backend of priority 80.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

import eventapi_fake_hostile_gate as gate  # type: ignore[import-not-found]

import eventapi

LOADS: list[int | None] = []


def _misbehave(stage: str) -> None:
    for part in os.environ.get("EVENTAPI_FAKE_HOSTILE", "").split(","):
        where, _, act = part.strip().partition(":")
        if where != stage:
            continue
        if act == "raise":
            raise RuntimeError(f"hostile plugin fails in {stage}")
        if act == "exit":
            sys.exit(3)
        if act == "print":
            print(f"hostile plugin prints from {stage}")
            sys.stdout.flush()
            os.write(1, f"hostile plugin writes to fd 1 from {stage}\n".encode())
        if act == "wait":
            os.write(2, f"hostile plugin waits in {stage}\n".encode())
        if act in ("hang", "wait"):
            gate.ENTERED.set()
            gate.RELEASE.wait()
        if act == "gate":
            os.write(2, f"hostile plugin waits in {stage} (pid {os.getpid()})\n".encode())
            with open(os.environ["EVENTAPI_FAKE_HOSTILE_GATE"], "rb") as pipe:
                pipe.read(1)
        if act == "crash":
            ctypes.string_at(0)  # reads address 0: SIGSEGV
        if act == "crash-thread":
            worker = threading.Thread(target=ctypes.string_at, args=(0,), name="driver-worker")
            worker.start()
            worker.join()


_misbehave("import")


def _load(device: int | None) -> Any:
    from eventapi.host import HostBackend

    _misbehave("load")
    LOADS.append(device)
    return HostBackend()


def _probe() -> str | None:
    _misbehave("probe")
    return None


@eventapi.hookimpl
def eventapi_backends() -> Iterator[eventapi.BackendSpec]:
    _misbehave("hook")
    yield eventapi.BackendSpec(name="hostile", load=_load, priority=80, probe=_probe)
