"""What the NVTX and roctx tests share: the windows a child opens, and how their ranges nest.

Both marker APIs are checked the same way: a child process opens the same windows (nested, a
start/stop window among them, one abandoned by an exception, one left open at close), a
recorder library notes every range it receives, and the test rebuilds the nesting from the
ranges' starts and ends. Each test turns its recorder's lines into ``(kind, range_id, name)``
events, ``kind`` being ``"start"`` or ``"end"``.
"""

from __future__ import annotations

from collections.abc import Iterable


def windows_case(backend: str) -> str:
    """The child's code: windows on ``backend``, then what the recorder received, as JSON."""
    return f"""
with eventapi.EventProfiler(eventapi.backend({backend!r})) as prof:
    with prof.window("step"):
        with prof.window("forward"):
            pass
        w = prof.start("backward")
        with prof.window("grad"):
            pass
        w.stop()
    try:
        with prof.window("failing"):
            prof.start("left open")  # abandoned when the block raises
            raise RuntimeError
    except RuntimeError:
        pass
    prof.start("open at close")
print(json.dumps(received()))
"""


NESTED = [
    ("step", 0),
    ("forward", 1),
    ("backward", 1),
    ("grad", 2),
    ("failing", 0),
    ("left open", 1),
    ("open at close", 0),
]
"""The ranges :func:`windows_case` opens, as ``(name, depth)`` in start order."""


def tree(events: Iterable[tuple[str, str, str]]) -> list[tuple[str, int]]:
    """(name, depth) of each range in start order, rebuilt from its start and end events.

    Fails when an end does not close the innermost open range (the ranges did not nest), or
    ranges are left open.
    """
    open_ids: list[str] = []
    out: list[tuple[str, int]] = []
    for kind, range_id, name in events:
        if kind == "start":
            out.append((name, len(open_ids)))
            open_ids.append(range_id)
        else:
            assert open_ids, f"range {range_id} ends without a start"
            assert open_ids[-1] == range_id, f"range {range_id} does not end the innermost"
            open_ids.pop()
    assert not open_ids, "ranges left open"
    return out
