// The status page's script (served at /status.js; the page's policy runs no other).
"use strict";
// Two minutes of one-second samples; the page asks for /status.json once a second.
const HISTORY = 120;
const VERDICTS = ["allowed", "throttled", "denied"];
const CHART = { left: 60, right: 950, top: 12, base: 208 };
const rates = { allowed: [], throttled: [], denied: [] };
// The proxy's uptime at each rate sample (the chart spans the samples it has).
const times = [];
let previous = null;

function byId(id) { return document.getElementById(id); }

// Replaces the rows of a table's body; every cell is set as text, never as markup.
function rows(tableId, data, numeric) {
  const body = byId(tableId).tBodies[0];
  while (body.firstChild) body.removeChild(body.firstChild);
  for (const cells of data) {
    const tr = document.createElement("tr");
    cells.forEach(function (value, i) {
      const td = document.createElement("td");
      td.textContent = String(value);
      if (numeric.includes(i)) td.className = "n";
      tr.appendChild(td);
    });
    body.appendChild(tr);
  }
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB"];
  let u = 0;
  while (n >= 1024 && u < units.length - 1) { n /= 1024; u += 1; }
  return (u === 0 ? n : n.toFixed(1)) + " " + units[u];
}

function rateText(r) { return r >= 100 ? r.toFixed(0) : r.toFixed(1); }

function draw() {
  let highest = 1;
  for (const v of VERDICTS) for (const r of rates[v]) highest = Math.max(highest, r);
  const step = (CHART.right - CHART.left) / Math.max(times.length - 1, 1);
  const scale = (CHART.base - CHART.top) / highest;
  for (const v of VERDICTS) {
    const series = rates[v];
    const points = series.map(function (r, i) {
      return (CHART.left + i * step).toFixed(1) + "," + (CHART.base - r * scale).toFixed(1);
    });
    document.querySelector("polyline." + v).setAttribute("points", points.join(" "));
    if (series.length > 0) {
      byId("now-" + v).textContent = v + " " + rateText(series[series.length - 1]) + "/s";
    }
  }
  byId("y-top").textContent = rateText(highest);
  byId("y-mid").textContent = rateText(highest / 2);
  byId("x-left").textContent = (times[times.length - 1] - times[0]).toFixed(1) + " s ago";
}

function show(s) {
  if (previous !== null && s.uptime_seconds > previous.uptime_seconds) {
    const seconds = s.uptime_seconds - previous.uptime_seconds;
    for (const v of VERDICTS) {
      rates[v].push(Math.max(0, s.totals[v] - previous.totals[v]) / seconds);
      if (rates[v].length > HISTORY) rates[v].shift();
    }
    times.push(s.uptime_seconds);
    if (times.length > HISTORY) times.shift();
    draw();
  }
  previous = s;
  byId("failures").textContent = s.decide_failures > 0
    ? "decisions failed (let through): " + s.decide_failures : "";
  rows("listeners", s.listeners.map(function (l) {
    return [l.name, l.protocol, l.address, l.allowed, l.throttled, l.denied, l.open, l.held, l.sessions];
  }), [3, 4, 5, 6, 7, 8]);
  rows("offenders", s.offenders.map(function (o) {
    return [o.source, o.rejected, o.error, o.last];
  }), [1, 2]);
  const sketch = function (kind) {
    return function (k) {
      return [kind + " " + k.window, bytes(k.memory_bytes), k.events_current,
              (k.front_fill * 100).toFixed(1) + " %", k.overcount_bound,
              (k.confidence * 100).toFixed(1) + " %"];
    };
  };
  rows("sketches", s.sketches.map(sketch("limits")).concat(s.penalties.map(sketch("penalty"))),
       [1, 2, 3, 4, 5]);
}

async function poll() {
  const state = byId("state");
  try {
    const answer = await fetch("status.json", { cache: "no-store" });
    if (!answer.ok) throw new Error("HTTP " + answer.status);
    show(await answer.json());
    state.className = "live";
    state.textContent = "live, every second";
  } catch (err) {
    state.className = "down";
    state.textContent = "no answer from the proxy (" + err.message + "); retrying";
  } finally {
    setTimeout(poll, 1000);
  }
}

poll();
