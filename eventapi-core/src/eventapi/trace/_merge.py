"""Many traces on one time axis: ``eventapi trace merge``.

Every trace eventapi writes says what its times are (a :class:`~eventapi.trace._format.Clock`):
``ts`` plus the clock's ``wall_offset_ns`` is the wall-clock time, on every kind of trace. A
merge moves each trace onto the axis of the result by the difference of the two offsets:

* Traces of one boot of one host (same ``boot_id``) share ``CLOCK_MONOTONIC``: they keep their
  times unchanged, so they merge exactly, and the result is again a monotonic trace of that
  boot (it merges exactly with further traces of that host).
* Traces of several hosts go onto the wall clock, through each host's offset: the order across
  hosts is then as good as the hosts' wall clocks agree (NTP: about a millisecond on a LAN;
  PTP: about a microsecond), plus each offset's stated uncertainty. Traces of one boot inside
  such a merge share one offset (the best measured), so they stay exact among themselves.

Process ids are kept where they are unique in the result and renumbered where two processes
(of two hosts, or two runs) share one; the process track's name (``"<host> pid <pid>"``) keeps
the original.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._format import FORMAT, Clock

__all__ = ["merge_documents"]


def _info(document: dict[str, Any], where: str) -> dict[str, Any]:
    info = document.get("otherData", {}).get("eventapi")
    if not isinstance(info, dict) or "clock" not in info:
        raise ValueError(
            f"{where} was not written by eventapi: it does not say which clock its times are "
            "on, so it cannot be placed beside others; write it with "
            "eventapi.trace.export_chrome_trace or a TraceWriter"
        )
    if int(info.get("format", 0)) > FORMAT:
        raise ValueError(
            f"{where} was written by a newer eventapi (trace format {info['format']}); "
            "upgrade eventapi-core to merge it"
        )
    return info


def merge_documents(documents: Sequence[dict[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    """One trace holding every event of ``documents``, on one time axis (see the module doc).

    ``names`` label the documents in error messages. Raises :class:`ValueError` for a trace
    that eventapi did not write (its clock is unknown) or one of a newer format.
    """
    if not documents:
        raise ValueError("nothing to merge: pass at least one trace file")
    from .. import __version__

    infos = [_info(doc, name) for doc, name in zip(documents, names, strict=True)]
    clocks = [Clock.from_json(info["clock"]) for info in infos]

    offsets, out_clock, one_boot = _axis(documents, clocks)
    events: list[dict[str, Any]] = []
    used: set[int] = set()
    sources: list[dict[str, Any]] = []
    for doc, info, offset in zip(documents, infos, offsets, strict=True):
        shift_ns = offset - out_clock.wall_offset_ns
        pids: dict[Any, int] = {}
        for event in doc["traceEvents"]:
            pid = event.get("pid", 0)
            if pid not in pids:
                new = pid if isinstance(pid, int) and pid not in used else _free(used)
                used.add(new)
                pids[pid] = new
        for event in doc["traceEvents"]:
            moved = dict(event)
            moved["pid"] = pids[event.get("pid", 0)]
            ts = event.get("ts")
            if shift_ns and isinstance(ts, int | float) and event.get("ph") != "M":
                moved["ts"] = (round(ts * 1000) + shift_ns) / 1000
            events.append(moved)
        merged_from = info.get("sources")
        for source in merged_from if isinstance(merged_from, list) else [info]:
            sources.append({**source, "shift_ns": shift_ns + int(source.get("shift_ns", 0))})
    info_out: dict[str, Any] = {
        "format": FORMAT,
        "eventapi": __version__,
        "clock": out_clock.as_json(),
        "sources": sources,
        "hosts": len({c.boot_id for c in clocks if c.kind == "monotonic"})
        + sum(1 for c in clocks if c.kind != "monotonic"),
    }
    if not one_boot:
        info_out["cross_host_note"] = (
            "times of different hosts are ordered only as well as the hosts' wall clocks agree "
            "(NTP: about 1 ms, PTP: about 1 us), plus wall_offset_uncertainty_ns"
        )
    return {"otherData": {"eventapi": info_out}, "displayTimeUnit": "ns", "traceEvents": events}


def _axis(
    documents: Sequence[dict[str, Any]], clocks: list[Clock]
) -> tuple[list[int], Clock, bool]:
    """Each document's wall-clock offset, the result's clock, and whether it is one boot's."""
    # One offset per boot: the best measured, so every trace of that boot moves alike.
    best: dict[str, Clock] = {}
    for clock in clocks:
        if clock.kind != "monotonic":
            continue
        held = best.get(clock.boot_id)
        if held is None or clock.wall_offset_uncertainty_ns < held.wall_offset_uncertainty_ns:
            best[clock.boot_id] = clock
    offsets = [
        best[c.boot_id].wall_offset_ns if c.kind == "monotonic" else c.wall_offset_ns
        for c in clocks
    ]

    one_boot = len(best) == 1 and all(c.kind == "monotonic" for c in clocks)
    if one_boot:
        out_clock = next(iter(best.values()))
    else:
        # The wall clock, counted from the earliest event (whole microseconds), so that ``ts``
        # stays small and a float keeps every nanosecond.
        earliest = min(
            (
                round(event["ts"] * 1000) + offset
                for doc, offset in zip(documents, offsets, strict=True)
                for event in doc["traceEvents"]
                if event.get("ph") != "M" and isinstance(event.get("ts"), int | float)
            ),
            default=offsets[0],
        )
        uncertainty = max(
            [c.wall_offset_uncertainty_ns for c in best.values()]
            + [c.wall_offset_uncertainty_ns for c in clocks if c.kind != "monotonic"]
        )
        out_clock = Clock("wall", "", earliest // 1000 * 1000, uncertainty)
    return offsets, out_clock, one_boot


def _free(used: set[int]) -> int:
    return max(used, default=0) + 1
