"use strict";
window.addEventListener("error", (e) => {
  document.body.dataset.errors = (document.body.dataset.errors || "") + e.message + "\n";
});
function fmt(ns) {
  const units = [["s", 1e9], ["ms", 1e6], ["\u00b5s", 1e3]];
  for (const [u, s] of units) if (Math.abs(ns) >= s) return (ns / s).toPrecision(4) + " " + u;
  return Math.round(ns) + " ns";
}
function tickLabel(us, stepUs) {
  // The unit of the step, and as many decimals as the step needs.
  const units = [["s", 1e6], ["ms", 1e3], ["\u00b5s", 1]];
  const [u, size] = units.find(([, size]) => stepUs >= size) || ["ns", 1e-3];
  const decimals = Math.max(0, Math.ceil(-Math.log10(stepUs / size) - 1e-9));
  return (us / size).toFixed(Math.min(decimals, 6)) + " " + u;
}
function make(tag, className, text) {
  const el = document.createElement(tag);
  if (className) el.className = className;
  if (text !== undefined) el.textContent = text;
  return el;
}
function niceStep(rawUs) {
  const power = Math.pow(10, Math.floor(Math.log10(rawUs)));
  return ([1, 2, 5].find((m) => m * power >= rawUs) || 10) * power;
}
function draw() {
  const data = JSON.parse(document.getElementById("trace-data").textContent);
  const box = document.getElementById("timeline");
  if (!data.slices.length) { box.textContent = "No slices in this trace."; return; }
  const S = data.slices;  // [row, name, ts, dur, depth, bound, args]
  let t0 = Infinity, t1 = -Infinity;
  for (const s of S) { t0 = Math.min(t0, s[2]); t1 = Math.max(t1, s[2] + s[3]); }
  const full = Math.max(t1 - t0, 1e-3);
  let v0 = t0, v1 = t0 + full;

  const reset = make("button", "", "Reset zoom");
  reset.type = "button"; reset.id = "reset";
  const shown = make("span", "shown");
  const bar = make("div", "toolbar");
  bar.append(reset, make("span", "hint", "wheel: zoom \u00b7 drag: pan \u00b7 double-click: " +
    "reset \u00b7 times from the first slice \u00b7 the address keeps the view"), shown);
  const axis = make("div", "axis");
  const head = make("div", "axisrow");
  head.append(make("div", "corner"), axis);
  const grid = make("div", "grid");
  const lanes = make("div", "lanes");
  lanes.appendChild(grid);
  const depths = data.rows.map(() => 0);
  for (const s of S) depths[s[0]] = Math.max(depths[s[0]], s[4] + 1);
  let group = null;
  const areas = data.rows.map((row, i) => {
    if (row.process !== group) {
      group = row.process;
      lanes.appendChild(make("div", "process", row.process));
    }
    const label = make("div", "label", row.track);
    label.title = row.process + " \u00b7 " + row.track;
    const area = make("div", "area");
    area.style.height = (depths[i] * 18 + 2) + "px";
    const lane = make("div", "row");
    lane.append(label, area);
    lanes.appendChild(lane);
    return area;
  });
  box.append(bar, head, lanes);

  const els = S.map((s, i) => {
    const el = make("div", "slice", data.names[s[1]]);
    el.dataset.i = String(i);
    el.style.top = (s[4] * 18 + 1) + "px";
    [el.style.background, el.style.color] = data.colours[s[1]];
    areas[s[0]].appendChild(el);
    return el;
  });

  function width() { return Math.max(areas[0].clientWidth, 1); }
  function layout() {
    const w = width(), scale = w / (v1 - v0);
    for (let i = 0; i < S.length; i++) {
      const s = S[i], el = els[i];
      const x = (s[2] - v0) * scale, x2 = (s[2] + s[3] - v0) * scale;
      if (x > w || x2 < 0) { el.style.display = "none"; continue; }
      const left = Math.max(x, -1), right = Math.min(Math.max(x2, x + 1), w + 1);
      el.style.display = "";
      el.style.left = left + "px";
      el.style.width = Math.max(right - left, 1) + "px";
      el.style.borderWidth = right - left < 4 ? "0" : "";  // a sliver is all border otherwise
    }
    const step = niceStep((v1 - v0) / Math.max(2, Math.floor(w / 110)));
    axis.textContent = ""; grid.textContent = "";
    for (let t = Math.ceil((v0 - t0) / step) * step; t0 + t <= v1; t += step) {
      const x = (t0 + t - v0) * scale;
      const tick = make("div", "tick", tickLabel(t, step));
      const line = make("div", "gridline");
      tick.style.left = line.style.left = x + "px";
      axis.appendChild(tick);
      grid.appendChild(line);
    }
    shown.textContent = "showing " + fmt((v1 - v0) * 1000) + " of " + fmt(full * 1000);
    box.dataset.view = (v0 - t0).toFixed(3) + "," + (v1 - t0).toFixed(3);
  }
  let pending = false;
  function schedule() {
    if (!pending) { pending = true; requestAnimationFrame(() => { pending = false; layout(); }); }
  }
  function view(a, width) {  // from a, width wide: at least 1 ns, at most the trace, inside it
    const span = Math.min(Math.max(width, 1e-3), full);
    v0 = Math.min(Math.max(a, t0), t0 + full - span); v1 = v0 + span;
  }
  function setView(a, b) {
    view(a, b - a);
    // The view in the address (microseconds from the first slice): a link that opens here.
    history.replaceState(null, "", "#view=" + (v0 - t0).toFixed(3) + "," + (v1 - t0).toFixed(3));
    schedule();
  }
  const asked = /[#&]view=([-\d.e+]+),([-\d.e+]+)/.exec(location.hash);
  if (asked) {
    const a = Number(asked[1]), b = Number(asked[2]);
    if (isFinite(a) && isFinite(b) && b > a) view(t0 + a, b - a);
  }
  function timeAt(clientX) {
    const r = areas[0].getBoundingClientRect();
    return v0 + (clientX - r.left) / width() * (v1 - v0);
  }
  lanes.addEventListener("wheel", (e) => {
    e.preventDefault();
    const delta = e.deltaMode === 1 ? e.deltaY * 16 : e.deltaY;
    const factor = Math.exp(delta * 0.002), t = timeAt(e.clientX);
    setView(t - (t - v0) * factor, t + (v1 - t) * factor);
  }, {passive: false});
  let drag = null;
  lanes.addEventListener("mousedown", (e) => {
    if (e.button !== 0) return;
    drag = {x: e.clientX, v0: v0, v1: v1};
    lanes.classList.add("dragging");
    e.preventDefault();
  });
  window.addEventListener("mousemove", (e) => {
    if (!drag) return;
    const shift = (e.clientX - drag.x) / width() * (drag.v1 - drag.v0);
    setView(drag.v0 - shift, drag.v1 - shift);
  });
  window.addEventListener("mouseup", () => { drag = null; lanes.classList.remove("dragging"); });
  lanes.addEventListener("dblclick", () => setView(t0, t0 + full));
  reset.addEventListener("click", () => setView(t0, t0 + full));
  window.addEventListener("resize", schedule);

  const tip = document.getElementById("tip");
  function line(key, value) {
    const row = make("div");
    row.append(make("span", "k", key), " " + value);
    tip.appendChild(row);
  }
  lanes.addEventListener("mouseover", (e) => {
    const el = e.target.closest ? e.target.closest(".slice") : null;
    if (!el || drag) return;
    const s = S[Number(el.dataset.i)], row = data.rows[s[0]];
    tip.replaceChildren(make("strong", "", data.names[s[1]] || "(no name)"));
    line("duration", fmt(s[3] * 1000));
    line("start", "+" + fmt((s[2] - t0) * 1000));
    line("depth", String(s[4]));
    line("bound", s[5] === null ? "not stated" : "\u00b1 " + fmt(s[5]));
    line("track", row.process + " \u00b7 " + row.track);
    for (const [k, v] of Object.entries(s[6] || {})) {
      line(k, typeof v === "object" ? JSON.stringify(v) : String(v));
    }
    tip.hidden = false;
  });
  lanes.addEventListener("mousemove", (e) => {
    if (tip.hidden) return;
    const x = Math.min(e.clientX + 14, window.innerWidth - tip.offsetWidth - 4);
    const y = e.clientY + 16 + tip.offsetHeight > window.innerHeight
      ? e.clientY - tip.offsetHeight - 8 : e.clientY + 16;
    tip.style.left = Math.max(x, 0) + "px";
    tip.style.top = Math.max(y, 0) + "px";
  });
  lanes.addEventListener("mouseout", (e) => {
    if (!e.relatedTarget?.closest?.(".slice")) tip.hidden = true;
  });
  layout();
  document.body.dataset.rendered = String(S.length);
}
draw();
