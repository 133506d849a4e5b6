"""``eventapi trace report``: one self-contained HTML page for a trace.

The page holds everything it shows: the statistics table is rendered here, the timeline is
drawn by a short script from the slices embedded in the page as JSON. Nothing is loaded from
the network (no CDN, no font, no image), so the file can be mailed, attached to a CI run or
opened on an air-gapped machine. Perfetto stays the tool for deep zooming; the page is for a
first look: where the time went, per process and stream, and the distribution per name.

The timeline draws at most :data:`MAX_SLICES` slices (the longest ones) so that a browser
stays responsive; the table always counts every slice.
"""

from __future__ import annotations

import html
import json
from typing import Any, Final

__all__ = ["MAX_SLICES", "render"]

MAX_SLICES: Final = 20_000
"""Slices drawn on the timeline: a browser lays out tens of thousands of elements in well
under a second; past that the page would stall for no insight the table does not give."""

_QUANTILES: Final = (("median", 0.5), ("p90", 0.9), ("p99", 0.99))


def _duration_ns(event: dict[str, Any]) -> int:
    args = event.get("args")
    if isinstance(args, dict) and isinstance(args.get("duration_ns"), int):
        return int(args["duration_ns"])
    return round(float(event.get("dur", 0)) * 1000)


def _nearest_rank(ordered: list[int], q: float) -> int:
    # The same definition as Stats.quantile: a duration that was measured, never an average.
    rank = max(1, -(-len(ordered) * q // 1))
    return ordered[int(rank) - 1]


def format_ns(ns: float) -> str:
    """``ns`` nanoseconds in the unit that keeps three or four significant digits."""
    for unit, size in (("s", 1e9), ("ms", 1e6), ("\u00b5s", 1e3)):
        if abs(ns) >= size:
            return f"{ns / size:.4g} {unit}"
    return f"{ns:.0f} ns"


def _table(slices: list[dict[str, Any]]) -> str:
    by_name: dict[str, list[int]] = {}
    for event in slices:
        by_name.setdefault(str(event.get("name", "")), []).append(_duration_ns(event))
    rows = []
    for name, durations in sorted(by_name.items(), key=lambda item: -sum(item[1])):
        durations.sort()
        cells = [
            str(len(durations)),
            format_ns(sum(durations)),
            format_ns(durations[0]),
            *(format_ns(_nearest_rank(durations, q)) for _, q in _QUANTILES),
            format_ns(durations[-1]),
        ]
        rows.append(
            f"<tr><th scope='row'>{html.escape(name)}</th>"
            + "".join(f"<td>{cell}</td>" for cell in cells)
            + "</tr>"
        )
    head = "".join(
        f"<th scope='col'>{h}</th>"
        for h in ("name", "count", "total", "min", *(q for q, _ in _QUANTILES), "max")
    )
    return f"<table id='stats'><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _tracks(events: list[dict[str, Any]]) -> tuple[dict[Any, str], dict[tuple[Any, Any], str]]:
    processes: dict[Any, str] = {}
    threads: dict[tuple[Any, Any], str] = {}
    for event in events:
        if event.get("ph") != "M":
            continue
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        assert isinstance(args, dict)
        if event.get("name") == "process_name":
            processes[event.get("pid")] = str(args.get("name", ""))
        elif event.get("name") == "thread_name":
            threads[(event.get("pid"), event.get("tid"))] = str(args.get("name", ""))
    return processes, threads


def _count(n: int, noun: str) -> str:
    plural = noun + ("es" if noun.endswith("s") else "s")
    return f"{n:,} {noun if n == 1 else plural}"


def render(document: dict[str, Any], title: str) -> str:
    """The HTML page for ``document`` (a parsed trace), titled ``title``."""
    events = [e for e in document["traceEvents"] if isinstance(e, dict)]
    slices = [e for e in events if e.get("ph") == "X" and isinstance(e.get("ts"), int | float)]
    processes, threads = _tracks(events)
    drawn = sorted(slices, key=lambda e: -float(e.get("dur", 0)))[:MAX_SLICES]
    keys = sorted({(e.get("pid"), e.get("tid")) for e in slices}, key=repr)
    rows = [
        {
            "process": processes.get(pid, f"pid {pid}"),
            "track": threads.get((pid, tid), f"tid {tid}"),
        }
        for pid, tid in keys
    ]
    index = {key: i for i, key in enumerate(keys)}
    data = {
        "rows": rows,
        "slices": [
            {
                "row": index[(e.get("pid"), e.get("tid"))],
                "name": str(e.get("name", "")),
                "ts": float(e["ts"]),
                "dur": float(e.get("dur", 0)),
                "depth": int(e.get("args", {}).get("depth", 0))
                if isinstance(e.get("args"), dict)
                else 0,
                "args": e.get("args", {}),
            }
            for e in sorted(drawn, key=lambda e: float(e["ts"]))
        ],
        "total": len(slices),
    }
    # "</" inside the JSON would end the script element early.
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    note = (
        f"<p class='note'>The timeline shows the {MAX_SLICES:,} longest of {len(slices):,} "
        "slices; the table counts them all.</p>"
        if len(slices) > MAX_SLICES
        else ""
    )
    return _PAGE.format(
        title=html.escape(title),
        summary=html.escape(
            f"{_count(len(slices), 'slice')} on {_count(len(rows), 'track')} of "
            f"{_count(len(processes) or 1, 'process')}"
        ),
        note=note,
        table=_table(slices),
        payload=payload,
        script=_SCRIPT,
    )


_SCRIPT: Final = r"""
"use strict";
window.addEventListener("error", (e) => {
  document.body.dataset.errors = (document.body.dataset.errors || "") + e.message + "\n";
});
function fmt(ns) {
  const units = [["s", 1e9], ["ms", 1e6], ["\u00b5s", 1e3]];
  for (const [u, s] of units) if (Math.abs(ns) >= s) return (ns / s).toPrecision(4) + " " + u;
  return Math.round(ns) + " ns";
}
function draw() {
  const data = JSON.parse(document.getElementById("trace-data").textContent);
  const box = document.getElementById("timeline");
  if (!data.slices.length) { box.textContent = "No slices in this trace."; return; }
  let t0 = Infinity, t1 = -Infinity;
  for (const s of data.slices) { t0 = Math.min(t0, s.ts); t1 = Math.max(t1, s.ts + s.dur); }
  const span = Math.max(t1 - t0, 1e-3);
  const depths = data.rows.map(() => 0);
  for (const s of data.slices) depths[s.row] = Math.max(depths[s.row], s.depth + 1);
  const axis = document.createElement("div");
  axis.className = "axis";
  axis.textContent = "0 \u2192 " + fmt(span * 1000);
  box.appendChild(axis);
  const lanes = data.rows.map((row, i) => {
    const lane = document.createElement("div");
    lane.className = "row";
    const label = document.createElement("div");
    label.className = "label";
    label.textContent = row.process + " \u00b7 " + row.track;
    label.title = label.textContent;
    const area = document.createElement("div");
    area.className = "area";
    area.style.height = (depths[i] * 18 + 2) + "px";
    lane.append(label, area);
    box.appendChild(lane);
    return area;
  });
  const palette = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
                   "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
  const colours = new Map();
  for (const s of data.slices) {
    if (!colours.has(s.name)) colours.set(s.name, palette[colours.size % palette.length]);
    const el = document.createElement("div");
    el.className = "slice";
    el.style.left = ((s.ts - t0) / span * 100) + "%";
    el.style.width = Math.max(s.dur / span * 100, 0.05) + "%";
    el.style.top = (s.depth * 18 + 1) + "px";
    el.style.background = colours.get(s.name);
    el.textContent = s.name;
    const labels = Object.entries(s.args || {}).map(([k, v]) => k + ": " + v).join("\n");
    el.title = s.name + "\n" + fmt(s.dur * 1000) + "\nat +" + fmt((s.ts - t0) * 1000) +
      (labels ? "\n" + labels : "");
    lanes[s.row].appendChild(el);
  }
  document.body.dataset.rendered = String(data.slices.length);
}
draw();
"""

_PAGE: Final = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}: eventapi trace report</title>
<style>
body {{ font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }}
h1 {{ font-size: 1.3em; }} h2 {{ font-size: 1.1em; margin-top: 1.5em; }}
#timeline {{ border: 1px solid #ccc; padding: 4px; }}
.axis {{ color: #666; font-size: 12px; margin-left: 260px; }}
.row {{ display: flex; border-top: 1px solid #eee; }}
.label {{ width: 250px; flex: none; font-size: 12px; padding: 2px 10px 2px 0;
  overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }}
.area {{ position: relative; flex: 1; min-width: 0; }}
.slice {{ position: absolute; height: 16px; color: #fff; font-size: 11px; line-height: 16px;
  overflow: hidden; white-space: nowrap; border-radius: 2px; box-sizing: border-box;
  padding: 0 3px; border: 1px solid rgba(0,0,0,.2); cursor: default; }}
table {{ border-collapse: collapse; }}
th, td {{ padding: 3px 10px; border-bottom: 1px solid #ddd; text-align: right; }}
th[scope=row], thead th:first-child {{ text-align: left; }}
.note {{ color: #666; }}
</style></head>
<body>
<h1>{title}</h1>
<p>{summary}. Hover a slice for its name, duration and labels; open the trace in Perfetto
(ui.perfetto.dev) to zoom.</p>
<div id="timeline"></div>
{note}
<h2>Per name</h2>
{table}
<script type="application/json" id="trace-data">{payload}</script>
<script>{script}</script>
</body></html>
"""
