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

Every input is checked before anything is written (:func:`check_document`): a file that is not
what eventapi writes is refused in one line that names it, the event and what is wrong, never
with a traceback, and the result is strict JSON (no ``NaN``, no ``Infinity``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, Final

from .._arguments import check_bool
from ._files import Written, check_path, check_paths, refuse_overlap, replacing
from ._format import FORMAT, Clock, json_type, read_trace

__all__ = ["check_document", "dump", "merge_documents", "merge_files"]

_LIMIT_NS: Final = 2**63
"""Times, offsets and ids beyond a signed 64-bit count of nanoseconds (292 years) are not ones
any clock wrote; refusing them keeps every sum a merge takes finite."""

_MAX_DEPTH: Final = 64
"""Arrays and objects nested in one event's args: far more than any exporter writes, and few
enough that writing the result never nears Python's recursion limit."""

_NOT_OURS: Final = (
    "was not written by eventapi: it does not say which clock its times are on, so it cannot "
    "be placed beside others; write it with eventapi.trace.export_chrome_trace or a TraceWriter"
)


def _integer(value: object, where: str, lowest: int = -_LIMIT_NS) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{where} is a JSON {json_type(value)}, not an integer")
    if not lowest <= value < _LIMIT_NS:
        low = "0" if lowest == 0 else "-2^63"
        raise ValueError(f"{where} is {_short(value)}, outside {low} .. 2^63")
    return value


def _microseconds(value: object, where: str, lowest: float) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ValueError(f"{where} is a JSON {json_type(value)}, not a number of microseconds")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where} is {value!r}, which strict JSON cannot hold; want a number")
    if not lowest <= value < _LIMIT_NS / 1000:
        low = "0" if lowest == 0 else "-2^63 ns"
        raise ValueError(f"{where} is {_short(value)} us, outside {low} .. 2^63 ns")


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 24 else f"{text[:10]}...({len(text)} digits)"


def _plain(value: object, where: str, depth: int = 0) -> None:
    """Refuse what strict JSON cannot write back: NaN, infinities, nesting past the limit."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where} is {value!r}, which strict JSON cannot hold")
    elif isinstance(value, dict | list):
        if depth >= _MAX_DEPTH:
            raise ValueError(f"{where} nests deeper than {_MAX_DEPTH} levels")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            _plain(
                item, f"{where}.{key}" if isinstance(value, dict) else f"{where}[{key}]", depth + 1
            )


def _object(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where} is a JSON {json_type(value)}, not an object")
    return value


def check_document(document: dict[str, Any], where: str) -> Clock:
    """``document``'s clock, once every part a merge reads was checked.

    Raises :class:`ValueError`, one line starting with ``where``, naming the first thing wrong:
    a trace that eventapi did not write (its clock is unknown), one of a newer format, a value
    of the wrong type, a time that is not a finite number, an event that is not an object.
    """
    other = document.get("otherData")
    info = None if other is None else _object(other, f"{where}: otherData").get("eventapi")
    if info is None or "clock" not in _object(info, f"{where}: otherData.eventapi"):
        raise ValueError(f"{where} {_NOT_OURS}")
    at = f"{where}: otherData.eventapi"
    version = _integer(info.get("format", 0), f"{at}.format", 0)
    if version > FORMAT:
        raise ValueError(
            f"{where} was written by a newer eventapi (trace format {version}); "
            "upgrade eventapi-core to merge it"
        )
    _plain(info, at)
    clock = _object(info["clock"], f"{at}.clock")
    kind, boot_id = clock.get("kind"), clock.get("boot_id", "")
    if kind not in ("monotonic", "wall"):
        raise ValueError(f"{at}.clock.kind is {_short(kind)}, not 'monotonic' or 'wall'")
    if not isinstance(boot_id, str):
        raise ValueError(f"{at}.clock.boot_id is not a string")
    if "wall_offset_ns" not in clock:
        raise ValueError(f"{at}.clock has no wall_offset_ns")
    offset = _integer(clock["wall_offset_ns"], f"{at}.clock.wall_offset_ns")
    uncertainty = clock.get("wall_offset_uncertainty_ns", 0)
    _integer(uncertainty, f"{at}.clock.wall_offset_uncertainty_ns", 0)
    sources = info.get("sources")
    if sources is not None and not isinstance(sources, list):
        raise ValueError(f"{at}.sources is a JSON {json_type(sources)}, not an array")
    for i, source in enumerate(sources or ()):
        at_source = f"{at}.sources[{i}]"
        _integer(_object(source, at_source).get("shift_ns", 0), f"{at_source}.shift_ns")
    for i, event in enumerate(document["traceEvents"]):
        _check_event(event, f"{where}: event {i}")
    return Clock(kind, boot_id, offset, uncertainty)


def _check_event(event: object, where: str) -> None:
    event = _object(event, where)
    phase = event.get("ph")
    if not isinstance(phase, str):
        what = "no ph" if phase is None else f"a JSON {json_type(phase)} as ph"
        raise ValueError(f'{where} has {what}; each event needs its phase, such as "X"')
    if "name" in event and not isinstance(event["name"], str):
        raise ValueError(f"{where}: name is a JSON {json_type(event['name'])}, not a string")
    for key in ("pid", "tid"):
        if key in event:
            _integer(event[key], f"{where}: {key}")
    for key, lowest, needed in (("ts", -_LIMIT_NS / 1000, phase != "M"), ("dur", 0, phase == "X")):
        if key in event:
            _microseconds(event[key], f"{where}: {key}", lowest)
        elif needed:
            raise ValueError(f"{where} (ph {phase!r}) has no {key}")
    if "args" in event:
        _object(event["args"], f"{where}: args")
    for key, value in event.items():
        if key not in ("name", "ph", "pid", "tid", "ts", "dur"):
            _plain(value, f"{where}: {key}", 1)


def merge_documents(documents: Sequence[dict[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    """One trace holding every event of ``documents``, on one time axis (see the module doc).

    ``names`` label the documents in error messages. Raises :class:`ValueError` for no
    documents, or one that :func:`check_document` refuses.
    """
    if not documents:
        raise ValueError("nothing to merge: pass at least one trace file")
    from .. import __version__

    clocks = [check_document(doc, name) for doc, name in zip(documents, names, strict=True)]
    offsets, out_clock = _axis(documents, clocks)
    events: list[dict[str, Any]] = []
    used: set[int] = set()
    sources: list[dict[str, Any]] = []
    for doc, offset in zip(documents, offsets, strict=True):
        shift_ns = offset - out_clock.wall_offset_ns
        pids: dict[int, int] = {}
        for event in doc["traceEvents"]:
            pid = event.get("pid", 0)
            if pid not in pids:
                pids[pid] = pid if pid not in used else max(used) + 1
                used.add(pids[pid])
            moved = {**event, "pid": pids[pid]}
            if shift_ns and "ts" in event and event["ph"] != "M":
                moved["ts"] = (round(event["ts"] * 1000) + shift_ns) / 1000
            events.append(moved)
        info = doc["otherData"]["eventapi"]
        for source in [info] if info.get("sources") is None else info["sources"]:
            sources.append({**source, "shift_ns": shift_ns + source.get("shift_ns", 0)})
    info_out: dict[str, Any] = {
        "format": FORMAT,
        "eventapi": __version__,
        "clock": out_clock._asdict(),
        "sources": sources,
        "hosts": len({c.boot_id for c in clocks if c.kind == "monotonic"})
        + sum(c.kind != "monotonic" for c in clocks),
    }
    if out_clock.kind != "monotonic":
        info_out["cross_host_note"] = (
            "times of different hosts are ordered only as well as the hosts' wall clocks agree "
            "(NTP: about 1 ms, PTP: about 1 us), plus wall_offset_uncertainty_ns"
        )
    return {"otherData": {"eventapi": info_out}, "displayTimeUnit": "ns", "traceEvents": events}


def _axis(documents: Sequence[dict[str, Any]], clocks: list[Clock]) -> tuple[list[int], Clock]:
    """Each document's wall-clock offset, and the result's clock: monotonic when one boot's."""
    # One offset per boot: the best measured, so every trace of that boot moves alike.
    best: dict[str, Clock] = {}
    for clock in clocks:
        held = best.get(clock.boot_id)
        if clock.kind == "monotonic" and (
            held is None or clock.wall_offset_uncertainty_ns < held.wall_offset_uncertainty_ns
        ):
            best[clock.boot_id] = clock
    offsets = [
        best[c.boot_id].wall_offset_ns if c.kind == "monotonic" else c.wall_offset_ns
        for c in clocks
    ]
    walls = [c for c in clocks if c.kind != "monotonic"]
    if len(best) == 1 and not walls:
        return offsets, next(iter(best.values()))
    # The wall clock, counted from the earliest event (whole microseconds), so that ``ts``
    # stays small and a float keeps every nanosecond.
    earliest = min(
        (
            round(event["ts"] * 1000) + offset
            for doc, offset in zip(documents, offsets, strict=True)
            for event in doc["traceEvents"]
            if event["ph"] != "M" and "ts" in event
        ),
        default=offsets[0],
    )
    uncertainty = max(c.wall_offset_uncertainty_ns for c in [*best.values(), *walls])
    return offsets, Clock("wall", "", earliest // 1000 * 1000, uncertainty)


def dump(document: dict[str, Any], out: str) -> None:
    """Write ``document`` to ``out`` as strict JSON, as a whole file or not at all."""
    with replacing(out) as file:
        json.dump(document, file, separators=(",", ":"), allow_nan=False)
        file.write("\n")


def merge_files(paths: object, out: object, *, slice_args: bool = True) -> Written:
    """:func:`eventapi.trace.merge`, returning what it wrote."""
    check_bool(slice_args, "merge: slice_args")
    inputs = check_paths(paths, "paths")
    target = check_path(out, "out")
    refuse_overlap(inputs, target)
    merged = merge_documents([read_trace(path) for path in inputs], inputs)
    events = merged["traceEvents"]
    slices = [event for event in events if event["ph"] == "X"]
    if not slice_args:  # speedscope then keys its frames by name alone
        for event in slices:
            event.pop("args", None)
    dump(merged, target)
    processes = {e["pid"] for e in events if e["ph"] != "M" or e.get("name") == "process_name"}
    tracks = {(event["pid"], event.get("tid", 0)) for event in slices}
    return Written(target, len(processes), len(slices), len(tracks))
