"""``eventapi trace report``: one self-contained HTML page for a trace.

The page holds everything it shows: the tables are rendered here, the timeline is drawn by a
short script from the slices embedded in the page as JSON. Nothing is loaded from the network
(no CDN, no font, no image), so the file can be mailed, attached to a CI run or opened on an
air-gapped machine. The timeline has a time axis with ticks and a grid, zooms (wheel) and pans
(drag), and a legend; Perfetto stays the tool for millions of slices.

Any trace draws, whatever its strings hold:

* The embedded JSON is pure ASCII with ``<``, ``>`` and ``&`` written as ``\\u003c`` escapes, so
  no string (``</script>``, ``<!--<script>``) can change how the HTML parser reads the page, and
  U+2028/U+2029 are escaped too.
* Only finite numbers are embedded (a slice whose ``ts`` or ``dur`` is NaN, infinite or
  negative is left out and counted), so the page's ``JSON.parse`` never throws.
* Strings that cannot be encoded (a lone surrogate, as ``os.fsdecode`` makes of a name that is
  not UTF-8) are shown escaped, as ``\\udcff``.

The timeline draws at most :data:`MAX_SLICES` slices (the longest ones) so that a browser
stays responsive; the table always counts every slice.
"""

from __future__ import annotations

import colorsys
import html
import json
import math
import os
import string
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final, NamedTuple, TypeGuard, final

from .._ranks import nearest_rank
from ._files import Written, check_path, refuse_overlap, replacing
from ._format import read_trace

__all__ = ["MAX_SLICES", "Reported", "colours", "counted", "render", "write_report_file"]

MAX_SLICES: Final = 20_000
"""Slices drawn on the timeline: a browser lays out tens of thousands of elements in well
under a second; past that the page would stall for no insight the table does not give."""

_QUANTILES: Final = (("median", 0.5), ("p90", 0.9), ("p99", 0.99))

_PALETTE: Final = 24
"""Colours in the smallest palette: eight hues 45 degrees apart at three lightnesses, so two
slots differ in hue by 45 degrees or in lightness by a step. More names double it (the
golden angle placing the added hues between the others), as often as needed."""

_LEGEND: Final = 40
"""Names in the legend, by total time; the table lists them all."""

_ARG_ITEMS: Final = 20
"""Items of one args object (or array) a tooltip shows; the rest are summarised."""


def text(value: object) -> str:
    """``value`` as a string that UTF-8 can always encode (lone surrogates escaped)."""
    return str(value).encode("utf-8", "backslashreplace").decode("utf-8")


def _whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value) if abs(value) < 1e300 else math.inf
    return number if math.isfinite(number) else None


def _clean(value: object, depth: int = 0) -> object:
    """``value`` made embeddable: finite numbers, encodable strings, bounded size."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        # Beyond 2^53 JavaScript rounds an integer; NaN and infinities are not JSON.
        keep = math.isfinite(value) if isinstance(value, float) else abs(value) < 2**53
        return value if keep else repr(value)
    if isinstance(value, dict | list) and depth < 4:
        items = list(value.items() if isinstance(value, dict) else enumerate(value))
        shown = [(text(k), _clean(v, depth + 1)) for k, v in items[:_ARG_ITEMS]]
        if len(items) > _ARG_ITEMS:
            shown.append(("\u2026", f"{len(items) - _ARG_ITEMS} more"))
        return dict(shown) if isinstance(value, dict) else [v for _, v in shown]
    return "\u2026" if isinstance(value, dict | list) else text(value)


Key = int | str
"""A pid or tid as the trace has it; anything else (a JSON array, an object) is one odd key."""


def _key(value: object) -> Key:
    return value if _whole(value) or isinstance(value, str) else f"<{type(value).__name__}>"


def _order(value: Key) -> tuple[int, int, str]:
    return (0, value, "") if isinstance(value, int) else (1, 0, value)


@dataclass(slots=True)
class _Slice:
    pid: Key
    tid: Key
    name: str
    ts: float
    dur: float
    duration_ns: int
    bound_ns: float | None
    args: object
    depth: int = 0


def _slices(events: Iterable[dict[str, Any]]) -> tuple[list[_Slice], int]:
    """The complete events that can be drawn, and how many others were left out."""
    kept: list[_Slice] = []
    left_out = 0
    for event in events:
        if event.get("ph") != "X":
            continue
        ts = _finite(event.get("ts"))
        dur = _finite(event.get("dur", 0))
        if ts is None or dur is None or dur < 0:
            left_out += 1
            continue
        args = event.get("args")
        args = args if isinstance(args, dict) else {}
        duration = args.get("duration_ns")
        if not (_whole(duration) and 0 <= duration < 2**63):
            duration = round(dur * 1000)
        pid, tid, name = _key(event.get("pid", 0)), _key(event.get("tid", 0)), event.get("name", "")
        bound = _finite(args.get("uncertainty_ns"))
        kept.append(_Slice(pid, tid, text(name), ts, dur, duration, bound, _clean(args)))
    return kept, left_out


def _nest(slices: list[_Slice]) -> None:
    """Set each slice's depth from what encloses it on its track, as Perfetto stacks them.

    Read from the times, not from an ``args.depth`` that a foreign trace may not have (or may
    state wrongly): a slice is inside another when it starts before the other ends.
    """
    by_track: dict[tuple[Key, Key], list[_Slice]] = {}
    for item in slices:
        by_track.setdefault((item.pid, item.tid), []).append(item)
    for track in by_track.values():
        track.sort(key=lambda s: (s.ts, -s.dur))
        ends: list[float] = []
        for item in track:
            while ends and ends[-1] <= item.ts:
                ends.pop()
            item.depth = len(ends)
            ends.append(item.ts + item.dur)


def _metadata(
    events: list[dict[str, Any]],
) -> tuple[dict[Key, str], dict[Key, tuple[int, int]], dict[tuple[Key, Key], str]]:
    """Process names, process order (``(0, rank)``, else ``(1, sort index)``), thread names."""
    processes: dict[Key, str] = {}
    order: dict[Key, tuple[int, int]] = {}
    threads: dict[tuple[Key, Key], str] = {}
    for event in events:
        if event.get("ph") != "M":
            continue
        args = event.get("args")
        args = args if isinstance(args, dict) else {}
        pid, kind = _key(event.get("pid", 0)), event.get("name")
        if kind == "process_name":
            processes[pid] = text(args.get("name", ""))
            if _whole(args.get("rank")):
                order[pid] = (0, args["rank"])
        elif kind == "process_sort_index" and _whole(args.get("sort_index")):
            if order.get(pid, (1, 0))[0]:  # a rank comes first
                order[pid] = (1, args["sort_index"])
            processes.setdefault(pid, "")
        elif kind == "thread_name":
            threads[(pid, _key(event.get("tid", 0)))] = text(args.get("name", ""))
    return processes, order, threads


def format_ns(ns: float) -> str:
    """``ns`` nanoseconds in the unit that keeps three or four significant digits."""
    for unit, size in (("s", 1e9), ("ms", 1e6), ("\u00b5s", 1e3)):
        if abs(ns) >= size:
            return f"{ns / size:.4g} {unit}"
    return f"{ns:.0f} ns"


def colours(names: Iterable[str]) -> dict[str, tuple[str, str]]:
    """A (background, text) colour per name, each name its own and the same in every report.

    A name's hash (CRC-32 of its UTF-8) picks its slot in a fixed palette, so it keeps its
    colour from one report to the next; two names whose hashes pick one slot in the
    same report take the next free ones, in hash order (so the order of the trace does not
    matter). The palette has 24 slots, doubled until every name has its own.
    """
    unique = sorted({(zlib.crc32(name.encode("utf-8", "surrogatepass")), name) for name in names})
    size = _PALETTE
    while size < len(unique):
        size *= 2
    taken: set[int] = set()
    chosen: dict[str, tuple[str, str]] = {}
    for digest, name in unique:
        slot = digest % size
        while slot in taken:
            slot = (slot + 1) % size
        taken.add(slot)
        chosen[name] = _slot_colour(slot)
    return chosen


def _slot_colour(slot: int) -> tuple[str, str]:
    band, rest = divmod(slot % _PALETTE, 8)
    # Slots past the first palette sit between its hues, each offset by the golden angle.
    offset = (slot // _PALETTE) * 137.50776405 + band * 15
    hue = (rest * 45 + offset) % 360
    lightness = (0.45, 0.68, 0.30)[band]
    red, green, blue = colorsys.hls_to_rgb(hue / 360, lightness, 0.65)
    luminance = 0.2126 * red**2.2 + 0.7152 * green**2.2 + 0.0722 * blue**2.2
    background = "#{:02x}{:02x}{:02x}".format(*(round(c * 255) for c in (red, green, blue)))
    return background, ("#111111" if luminance > 0.3 else "#ffffff")


def _table(table_id: str, head: Iterable[str], rows: Iterable[tuple[str, list[object]]]) -> str:
    """A table with a column heading per ``head``, and per row a heading (``name``) and cells."""
    heads = "".join(f"<th scope='col'>{heading}</th>" for heading in head)
    body = "".join(
        f"<tr><th scope='row'>{html.escape(name)}</th>"
        + "".join(f"<td>{cell}</td>" for cell in cells)
        + "</tr>"
        for name, cells in rows
    )
    return f"<table id='{table_id}'><thead><tr>{heads}</tr></thead><tbody>{body}</tbody></table>"


def _name_table(by_name: dict[str, list[int]]) -> str:
    """Per window name, in ``by_name``'s order: count, total, min, quantiles and max."""
    rows = []
    for name, durations in by_name.items():
        durations.sort()
        quantiles = [nearest_rank(durations, q) for _, q in _QUANTILES]
        times = [sum(durations), durations[0], *quantiles, durations[-1]]
        rows.append((name, [len(durations), *map(format_ns, times)]))
    head = ("name", "count", "total", "min", *(q for q, _ in _QUANTILES), "max")
    return _table("stats", head, rows)


def _process_table(
    rows: list[dict[str, str]], keys: list[tuple[Key, Key]], slices: list[_Slice]
) -> str:
    """Per process (per rank in a distributed job): tracks, slices and busy time."""
    names = {pid: row["process"] for (pid, _), row in zip(keys, rows, strict=True)}
    if len(names) < 2:
        return ""
    counts = {pid: [0, 0, 0] for pid in names}  # tracks, slices, time of the outermost
    for pid, _ in keys:
        counts[pid][0] += 1
    for item in slices:
        counts[item.pid][1] += 1
        counts[item.pid][2] += item.duration_ns if item.depth == 0 else 0
    body = [(names[pid], [c[0], f"{c[1]:,}", format_ns(c[2])]) for pid, c in counts.items()]
    head = ("process", "tracks", "slices", "busy (outermost)")
    return "<h2>Per process</h2>\n" + _table("processes", head, body)


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: ``"1,000 slices"``, ``"1 process"``."""
    plural = noun + ("es" if noun.endswith("s") else "s")
    return f"{n:,} {noun if n == 1 else plural}"


def _embed(data: object) -> str:
    """``data`` as JSON that can sit inside a ``<script>`` element whatever its strings hold."""
    payload = json.dumps(data, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return payload.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _legend(names: list[str], palette: dict[str, tuple[str, str]]) -> str:
    entries = "".join(
        f"<li><span class='swatch' style='background:{palette[name][0]}'></span>"
        f"{html.escape(name) or '<i>(no name)</i>'}</li>"
        for name in names[:_LEGEND]
    )
    if len(names) > _LEGEND:
        entries += f"<li class='more'>and {len(names) - _LEGEND:,} more (see the table)</li>"
    return f"<ul id='legend' aria-label='Colours by name'>{entries}</ul>" if entries else ""


@final
class Reported(NamedTuple):
    """What :func:`write_report_file` wrote, and the notes its page shows, one sentence each.

    ``notes`` say what the page leaves out and why: slices whose time is not a finite,
    non-negative number (left out of the page), slices past :data:`MAX_SLICES` (left off the
    timeline, counted in the table). Empty when nothing is left out.
    """

    written: Written
    notes: tuple[str, ...]


def _notes(slices: int, left_out: int) -> tuple[str, ...]:
    notes = []
    if slices > MAX_SLICES:
        notes.append(
            f"The timeline shows the {MAX_SLICES:,} longest of {slices:,} slices; the "
            "table counts them all."
        )
    if left_out:
        notes.append(
            f"{counted(left_out, 'slice')} left out: a ts or dur that is not a finite, "
            "non-negative number."
        )
    return tuple(notes)


def render(document: dict[str, Any], title: str) -> tuple[str, list[_Slice], tuple[str, ...]]:
    """The HTML page for ``document`` (a parsed trace) titled ``title``, its slices and notes.

    Total over anything :func:`~eventapi.trace._format.read_trace` returns: what cannot be
    drawn is left out and counted, never raised.
    """
    events = [e for e in document.get("traceEvents", ()) if isinstance(e, dict)]
    slices, left_out = _slices(events)
    _nest(slices)
    processes, order, threads = _metadata(events)
    keys = sorted(
        {(s.pid, s.tid) for s in slices},
        key=lambda k: (order.get(k[0], (1, 0)), _order(k[0]), _order(k[1])),
    )
    rows = [
        {
            "process": processes.get(pid) or f"pid {pid}",
            "track": threads.get((pid, tid)) or f"tid {tid}",
        }
        for pid, tid in keys
    ]
    index = {key: i for i, key in enumerate(keys)}
    by_name: dict[str, list[int]] = {}
    for item in slices:
        by_name.setdefault(item.name, []).append(item.duration_ns)
    by_name = dict(sorted(by_name.items(), key=lambda item: (-sum(item[1]), item[0])))
    palette = colours(by_name)
    drawn = sorted(slices, key=lambda s: -s.dur)[:MAX_SLICES]
    names = sorted({s.name for s in drawn})
    name_index = {name: i for i, name in enumerate(names)}
    data = {
        "rows": rows,
        "names": names,
        "colours": [palette[name] for name in names],
        # One array per slice: row, name, ts (us), dur (us), depth, bound (ns or null), args.
        "slices": [
            [index[(s.pid, s.tid)], name_index[s.name], s.ts, s.dur, s.depth, s.bound_ns, s.args]
            for s in sorted(drawn, key=lambda s: s.ts)
        ],
    }
    notes = _notes(len(slices), left_out)
    process_count = len({pid for pid, _ in keys} | set(processes)) or 1
    # The page's HTML and stylesheet, with $title, $summary, $note, $legend, $table,
    # $processes, $payload and $script to fill.
    page = string.Template(_asset("report.html")).substitute(
        title=html.escape(text(title)),
        summary=html.escape(
            f"{counted(len(slices), 'slice')} on {counted(len(rows), 'track')} of "
            f"{counted(process_count, 'process')}"
        ),
        note="".join(f"<p class='note'>{html.escape(n)}</p>" for n in notes),
        legend=_legend(list(by_name), palette),
        table=_name_table(by_name),
        processes=_process_table(rows, keys, slices),
        payload=_embed(data),
        script=_asset("report.js"),
    )
    return page, slices, notes


def write_report_file(path: object, out: object = None) -> Reported:
    """:func:`eventapi.trace.write_report`, returning what it wrote and what it left out."""
    source = check_path(path, "path")
    stem, extension = os.path.splitext(source)
    beside = (stem if extension.lower() == ".json" else source) + ".html"
    target = beside if out is None else check_path(out, "out")
    refuse_overlap([source], target)
    page, slices, notes = render(read_trace(source, lenient=True), os.path.basename(source))
    with replacing(target) as file:
        file.write(page)
    tracks = {(s.pid, s.tid) for s in slices}
    processes = {pid for pid, _ in tracks}
    return Reported(Written(target, len(processes), len(slices), len(tracks)), notes)


def _asset(name: str) -> str:
    """A file of the page that ships beside this module: its script, or its template."""
    return resources.files("eventapi.trace").joinpath(name).read_text(encoding="utf-8")
