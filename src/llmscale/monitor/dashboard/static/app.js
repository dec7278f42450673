// llmscale dashboard: polls /api/run every 2 s and draws inline SVG (no library, no network beyond this server).
"use strict";
const NS = "http://www.w3.org/2000/svg";
const COLORS = { data: "#8e44ad", compute: "#2f6fdb", comm: "#e67e22", checkpoint: "#27ae60", idle: "#95a5a6" };

function el(tag, attrs, text) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function fmt(x, digits) { return x === null || x === undefined ? "–" : Number(x).toPrecision(digits || 4); }

function lineChart(svg, points, key) {
  svg.replaceChildren();
  if (!points.length) return;
  const W = 480, H = 200, L = 46, B = 20;
  const xs = points.map(p => p.step), ys = points.map(p => p[key]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  const sx = s => L + (W - L - 6) * (x1 > x0 ? (s - x0) / (x1 - x0) : 0.5);
  const sy = v => H - B - (H - B - 8) * (y1 > y0 ? (v - y0) / (y1 - y0) : 0.5);
  svg.append(el("line", { x1: L, y1: H - B, x2: W, y2: H - B, class: "axis" }));
  svg.append(el("line", { x1: L, y1: 0, x2: L, y2: H - B, class: "axis" }));
  svg.append(el("text", { x: 2, y: 12 }, fmt(y1, 3)), el("text", { x: 2, y: H - B }, fmt(y0, 3)));
  svg.append(el("text", { x: L, y: H - 4 }, "step " + x0), el("text", { x: W - 60, y: H - 4 }, "step " + x1));
  const d = points.map((p, i) => (i ? "L" : "M") + sx(p.step).toFixed(1) + "," + sy(p[key]).toFixed(1)).join("");
  svg.append(el("path", { d: d, class: "line", "data-points": points.length }));
}

function predictionLabel(doc) {
  const st = doc.prediction.state;
  return st === "predicting" ? "predicting…" : st === "ready" ? "predicted" : "no prediction";
}

function breakdown(svg, doc) {
  svg.replaceChildren();
  const rows = [["measured", doc.measured], ["predicted", doc.predicted]];
  const total = Math.max(...rows.filter(r => r[1]).map(r => doc.phases.reduce((a, p) => a + (r[1][p] || 0), 0)),
                         1e-12);
  rows.forEach(([name, parts], i) => {
    let x = 80;
    const y = 8 + i * 48;
    svg.append(el("text", { x: 2, y: y + 20 }, name === "predicted" ? predictionLabel(doc) : name));
    if (!parts) return;
    for (const p of doc.phases) {
      const w = 390 * (parts[p] || 0) / total;
      svg.append(el("rect", { x: x, y: y, width: w, height: 32, fill: COLORS[p], class: "bar", "data-phase": p,
                              "data-row": name, "data-ms": (1e3 * (parts[p] || 0)).toFixed(3) }));
      x += w;
    }
    svg.append(el("text", { x: x + 4, y: y + 20 }, fmt(doc.phases.reduce((a, p) => a + (parts[p] || 0), 0) * 1e3, 4)
                            + " ms"));
  });
  doc.phases.forEach((p, i) => {
    svg.append(el("rect", { x: 80 + i * 80, y: 112, width: 10, height: 10, fill: COLORS[p] }));
    svg.append(el("text", { x: 94 + i * 80, y: 121 }, p));
  });
  const body = document.querySelector("#breakdown-table tbody");
  body.replaceChildren();
  const none = doc.predicted ? null : predictionLabel(doc);
  for (const p of doc.phases) {
    const m = doc.measured[p], q = doc.predicted ? doc.predicted[p] : null, e = doc.errors_pct[p];
    const err = e === null || e === undefined ? "–" : (e >= 0 ? "+" : "") + e.toFixed(1) + "%";
    const tr = document.createElement("tr");
    tr.id = "part-" + p;
    for (const cell of [p, fmt(m * 1e3), none || fmt(q * 1e3), err]) {
      const td = document.createElement("td"); td.textContent = cell; tr.append(td);
    }
    body.append(tr);
  }
  const note = document.getElementById("prediction-note");
  note.textContent = doc.prediction.state === "ready" ? "" : predictionLabel(doc) + ": " + doc.prediction.reason;
  note.dataset.state = doc.prediction.state;
}

function heat(svg, doc) {
  svg.replaceChildren();
  const cols = doc.heat.length, rows = doc.ranks.length;
  if (!cols) return;
  // colour range: the 2nd–98th percentile of the cells shown, so one restart's slow step does not flatten the rest
  const all = doc.heat.flatMap(c => c.ranks).sort((a, b) => a - b);
  const lo = all[Math.floor(0.02 * (all.length - 1))], hi = all[Math.ceil(0.98 * (all.length - 1))];
  const cw = (480 - 40) / cols, rh = (200 - 20) / rows;
  doc.heat.forEach((c, i) => c.ranks.forEach((v, r) => {
    const t = hi > lo ? Math.min(Math.max((v - lo) / (hi - lo), 0), 1) : 0;
    const fill = "rgb(" + Math.round(255 * t) + "," + Math.round(80 + 120 * (1 - t)) + "," + Math.round(220 * (1 - t)) + ")";
    const cell = el("rect", { x: 40 + i * cw, y: r * rh, width: Math.max(cw, 1), height: rh, fill: fill,
                              class: "cell", "data-rank": doc.ranks[r], "data-step": c.step });
    cell.append(el("title", {}, "rank " + doc.ranks[r] + " step " + c.step + ": " + fmt(v * 1e3) + " ms"));
    svg.append(cell);
  }));
  doc.ranks.forEach((rank, r) => svg.append(el("text", { x: 2, y: r * rh + rh / 2 + 4 }, "r" + rank)));
  svg.append(el("text", { x: 40, y: 196 }, "step " + doc.heat[0].step + "  →  " + doc.heat[cols - 1].step +
                          "   (colour: " + fmt(lo * 1e3, 3) + "–" + fmt(hi * 1e3, 3) + " ms, 2nd–98th percentile)"));
  svg.setAttribute("data-cells", cols * rows);
  const w = doc.windows[doc.windows.length - 1];
  document.getElementById("slowest").textContent = w ? "slowest rank, steps " + w.first + "–" + w.last + ": rank " +
    w.slowest_rank + " (" + w.slowest_host + "), mean lag " + fmt(w.mean_lag_s * 1e3, 3) + " ms" : "";
}

function eventLine(e) {
  const li = document.createElement("li");
  li.className = e.event + (e.highlight ? " hl" : "");
  const when = new Date(e.time_unix * 1000).toISOString().slice(11, 19);
  const bits = [when, "attempt " + e.attempt, e.event];
  if (e.step !== null) bits.push("step " + e.step);
  if (e.tier) bits.push(e.tier);
  if (e.cause) bits.push("cause " + e.cause);
  if (e.ranks.length) bits.push((e.ranks.length > 1 ? "ranks " : "rank ") + e.ranks.join(","));
  if (e.hosts.length) bits.push("host " + e.hosts.join(","));
  if (e.save_blocking_s !== null) bits.push("blocked " + fmt(e.save_blocking_s * 1e3, 3) + " ms");
  if (e.restored_step !== null) bits.push("restored step " + e.restored_step);
  if (e.steps_lost !== null) bits.push(e.steps_lost + " steps lost");
  if (e.reason) bits.push(e.reason);
  else if (e.message && e.event !== "launch") bits.push(e.message);
  li.textContent = bits.join("  ");
  return li;
}

function timeline(doc) {
  // newest first, one line per (attempt, kind, step) with the ranks folded (api.py); faults, restores, failed
  // saves and excluded hosts also in their own list, so a long run's saves never push them out of view
  const all = document.getElementById("timeline"), incidents = document.getElementById("incidents");
  all.replaceChildren(...doc.events.map(eventLine));
  const marked = doc.events.filter(e => e.highlight);
  incidents.replaceChildren(...marked.map(eventLine));
  if (!marked.length) incidents.append(Object.assign(document.createElement("li"), { textContent: "none" }));
}

async function refresh() {
  try {
    const doc = await (await fetch("/api/run", { cache: "no-store" })).json();
    if (doc.error) throw new Error(doc.error);
    document.getElementById("run-dir").textContent = doc.run_dir;
    const last = doc.curves[doc.curves.length - 1];
    document.getElementById("latest-step").textContent = doc.latest_step === null ? "–" : doc.latest_step;
    document.getElementById("loss-value").textContent = last ? fmt(last.loss) : "–";
    document.getElementById("tps-value").textContent = last ? fmt(last.tokens_per_s) : "–";
    lineChart(document.getElementById("loss-chart"), doc.curves, "loss");
    lineChart(document.getElementById("tps-chart"), doc.curves, "tokens_per_s");
    breakdown(document.getElementById("breakdown"), doc);
    heat(document.getElementById("heat"), doc);
    timeline(doc);
    document.getElementById("status").textContent = "updated " + new Date().toISOString().slice(11, 19);
  } catch (err) {
    document.getElementById("status").textContent = "error: " + err.message;
  }
}

refresh();
setInterval(refresh, 2000);
