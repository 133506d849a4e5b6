"""Every finalizer of the core tolerates an object whose ``__init__`` never ran, or stopped early.

An interrupt (Ctrl-C) can land anywhere in a constructor, and the half-built object is then
collected like any other: its ``__del__`` must neither raise (Python would print "Exception
ignored in ...") nor release what it does not hold.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest

from eventapi import EventFence, EventProfiler
from eventapi.driverkit import Event, Stream
from eventapi.host import HostBackend


@pytest.fixture
def unraisable(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """What finalizers failed with ("Exception ignored in ..."), collected instead of printed."""
    seen: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    return seen


def _partial(cls: type, **slots: object) -> Any:
    obj: Any = object.__new__(cls)
    for name, value in slots.items():
        object.__setattr__(obj, name, value)
    return obj


HALF_BUILT: dict[str, Callable[[HostBackend], object]] = {
    "EventFence, nothing set": lambda host: _partial(EventFence),
    "EventFence, api only": lambda host: _partial(EventFence, _api=host),
    "EventProfiler, nothing set": lambda host: _partial(EventProfiler),
    "EventProfiler, api only": lambda host: _partial(EventProfiler, _api=host),
    "Event, nothing set": lambda host: _partial(Event),
    "Event, owner only": lambda host: _partial(Event, _owner=host),
    "Stream, owner only": lambda host: _partial(Stream, _owner=host),
    "Stream, owner and closed": lambda host: _partial(Stream, _owner=host, _closed=False),
    "HostBackend, nothing set": lambda host: _partial(HostBackend),
}


@pytest.mark.parametrize("what", sorted(HALF_BUILT))
def test_a_half_built_object_is_finalized_silently(
    host: HostBackend, unraisable: list[object], what: str
) -> None:
    obj = HALF_BUILT[what](host)
    obj.__del__()  # type: ignore[attr-defined]
    del obj
    assert unraisable == []
    assert host.live_handles() == (0, 0)  # nothing it did not hold was released, or counted
