"""A plugin that misbehaves where ``EVENTAPI_FAKE_HOSTILE`` says: ``STAGE:ACT[,STAGE:ACT]``.

STAGE is ``import``, ``hook``, ``probe`` or ``load``; ACT is ``raise``, ``exit`` (``sys.exit(3)``),
``print`` (to ``sys.stdout`` and to file descriptor 1, then carries on), ``hang`` (until the test
sets ``eventapi_fake_hostile_gate.RELEASE``), ``wait`` (writes ``hostile plugin waits in STAGE``
to file descriptor 2, then hangs: a slow, healthy plugin that another process can see is
running) or ``crash`` (a segfault in native code). Without the variable it is a sound backend
of priority 80.
"""

from __future__ import annotations

import ctypes
import os
import sys
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
        if act == "crash":
            ctypes.string_at(0)  # reads address 0: SIGSEGV


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
