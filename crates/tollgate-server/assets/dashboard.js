// tollgate's dashboard: polls the public JSON endpoints once a second and
// draws them. No framework, no network beyond this server.
"use strict";

const COLORS = ["#3b6fd8", "#1f9d55", "#d98c1f", "#8e44ad", "#16a2b8", "#d64545", "#6b7486", "#b5651d"];
const $ = (id) => document.getElementById(id);
const charts = {};
let selectedClient = "";
// The plan to inspect it under: a top row's (an Envoy client has no plan of
// its own by its key), or "" for the client's own.
let selectedPlan = "";
// Why the selected client is shown on another plan than the one clicked
// (a reload removed that plan), kept across the refreshes.
let selectedNote = "";

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

// A client id, which its caller chose (up to 256 bytes of anything): in an
// element of its own, bidi-isolated (a U+202E in it reverses nothing around
// it) and, by the style, broken anywhere when it has no break point. Its
// text goes in as text, never as markup.
// An id as text of its own, its spaces kept; one that begins or ends with
// white space is shown between quotes drawn by the page (not part of its
// text), so that "trail " never reads as "trail", another client.
function clientId(id) {
  const padded = id.length > 0 && id !== id.trim();
  return el("bdi", { class: "client-id" + (padded ? " padded" : "") }, id);
}

function duration(ms) {
  if (ms === null || ms === undefined) return "unknown";
  if (ms < 1000) return ms + " ms";
  const s = ms / 1000;
  if (s < 120) return (Math.round(s * 10) / 10) + " s";
  if (s < 7200) return Math.round(s / 60) + " min";
  if (s < 172800) return Math.round(s / 3600) + " h";
  return Math.round(s / 86400) + " d";
}

async function getJson(path) {
  const response = await fetch(path, { cache: "no-store" });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

// One uPlot per kind ("allowed", "rejected"), rebuilt when the plans change.
function drawChart(kind, stats) {
  const box = $("chart-" + kind);
  const plans = stats.plans.map((p) => p.plan);
  const data = [stats.time_ms.map((t) => t / 1000), ...stats.plans.map((p) => p[kind])];
  const key = plans.join("\u0000");
  let chart = charts[kind];
  if (!chart || chart.key !== key) {
    if (chart) chart.plot.destroy();
    const width = Math.max(300, box.clientWidth);
    const opts = {
      width, height: 240,
      scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(1, max * 1.1)] } },
      series: [{}, ...plans.map((name, i) => ({
        label: name, stroke: COLORS[i % COLORS.length], width: 2,
        fill: COLORS[i % COLORS.length] + "22", points: { show: false },
      }))],
      axes: [
        { stroke: "#6b7486", grid: { stroke: "#eef1f5" }, space: 60, values: (u, splits) => splits.map(clockLabel) },
        { stroke: "#6b7486", grid: { stroke: "#eef1f5" }, size: 50 },
      ],
      legend: { live: false },
    };
    box.replaceChildren();
    chart = { key, plot: new uPlot(opts, data, box) };
    charts[kind] = chart;
  } else {
    chart.plot.setData(data);
  }
  // For people and tests alike: how many seconds have something drawn.
  const points = data[0].filter((_, i) => data.slice(1).some((s) => s[i] > 0)).length;
  box.dataset.points = String(points);
}

// "14:05" on whole minutes, ":30" between them.
function clockLabel(seconds) {
  const d = new Date(seconds * 1000);
  const two = (n) => String(n).padStart(2, "0");
  return d.getSeconds() === 0 ? two(d.getHours()) + ":" + two(d.getMinutes()) : ":" + two(d.getSeconds());
}

function lastFull(column) {
  // The second before the current one is complete.
  return column.length > 1 ? column[column.length - 2] : 0;
}

function drawStore(store) {
  const pill = $("store-pill");
  pill.dataset.status = store.status;
  $("store-text").textContent = store.kind + ": " + store.status;
  const rows = [["kind", store.kind], ["status", store.status],
    ["errors, last 10 s", store.errors_last_10s ?? "counters off"]];
  if (store.tracked_clients !== null) rows.push(["clients in memory", store.tracked_clients]);
  if (store.calls) {
    rows.push(["decided by the store", store.calls.store]);
    rows.push(["answered by the failure policy",
      store.calls.fail_open + store.calls.fail_closed + store.calls.local_fallback]);
    rows.push(["timeouts", store.calls.timeouts]);
    rows.push(["errors", store.calls.transient_errors + store.calls.permanent_errors]);
  }
  // Calls Redis ran and counted whose reply came after the caller gave up,
  // or never came, or that an Envoy request gave back when another of its
  // clients refused: taken back, or kept (the client was used since, or the
  // refund failed); how many replies never came; and how many refunds
  // have not ended yet (Redis could not be reached: sent again); and the
  // decisions too few replicas acknowledged ([store] replicas_to_ack),
  // answered by the failure policy and taken back.
  if (store.refunds) {
    rows.push(["uses taken back", store.refunds.restored]);
    rows.push(["uses not taken back", store.refunds.stale + store.refunds.failed]);
    rows.push(["replies lost", store.refunds.replies_lost]);
    rows.push(["refunds pending", store.refunds.pending]);
    rows.push(["not acknowledged by replicas", store.refunds.not_replicated]);
  }
  const kv = el("div", { class: "kv" });
  for (const [k, v] of rows) kv.append(el("div", {}, k), el("div", {}, v));
  // On a cluster, each master's circuit: who is answered by the failure policy, and why.
  for (const circuit of store.circuits) {
    kv.append(el("div", {}, "circuit " + circuit.part),
      el("div", { "data-circuit": circuit.part, "data-open": String(circuit.open) },
        circuit.open ? "open" : "closed"));
  }
  $("store").replaceChildren(kv);
}

function drawLatency(stats) {
  const last = (col) => col.slice(-60).reduce((a, b) => Math.max(a, b), 0);
  const p50 = stats.latency_us.p50.slice(-60).filter((v) => v > 0);
  const median = p50.length ? p50.sort((a, b) => a - b)[Math.floor(p50.length / 2)] : 0;
  const kv = el("div", { class: "kv" },
    el("div", {}, "p50 (median second)"), el("div", {}, median + " µs"),
    el("div", {}, "p99 (worst second)"), el("div", {}, last(stats.latency_us.p99) + " µs"));
  $("latency").replaceChildren(kv);
}

async function refreshStats() {
  const stats = await getJson("/v1/stats");
  drawChart("allowed", stats);
  drawChart("rejected", stats);
  drawStore(stats.store);
  drawLatency(stats);
  $("rate-now").textContent = lastFull(stats.decisions);
  $("rejected-now").textContent = lastFull(stats.rejected);
  // The server's clock, not the browser's: what the numbers are as of.
  $("updated").textContent = "as of " + new Date(stats.now_ms).toLocaleTimeString();
}

async function refreshTop() {
  const top = await getJson("/v1/top?by=rejected&limit=10");
  const body = $("top").querySelector("tbody");
  body.replaceChildren(...top.clients.map((c) => {
    const row = el("tr", { "data-client": c.client },
      el("td", {}, clientId(c.client)), el("td", {}, c.plan), el("td", { class: "why" }, c.limited_by || ""),
      el("td", { class: "num" }, c.count === c.at_least ? c.count : c.at_least + "–" + c.count));
    row.addEventListener("click", () => { $("client-id").value = c.client; showClient(c.client, c.plan); });
    return row;
  }));
  $("top-empty").hidden = top.clients.length > 0;
  $("top-note").textContent = top.error_bound > 0 ? "Counts may be up to " + top.error_bound + " high (Space-Saving bound)." : "";
}

function gauge(limit) {
  const fraction = limit.limit > 0 ? limit.remaining / limit.limit : 0;
  const color = fraction === 0 ? "#d64545" : fraction < 0.25 ? "#d98c1f" : "#1f9d55";
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 120 70");
  const arc = (stroke, length) => {
    const path = document.createElementNS(ns, "path");
    path.setAttribute("d", "M 10 62 A 50 50 0 0 1 110 62");
    path.setAttribute("fill", "none");
    path.setAttribute("stroke", stroke);
    path.setAttribute("stroke-width", "11");
    path.setAttribute("stroke-linecap", "round");
    path.setAttribute("pathLength", "100");
    path.setAttribute("stroke-dasharray", length + " 100");
    return path;
  };
  svg.append(arc("#e3e7ee", 100));
  if (fraction > 0) svg.append(arc(color, Math.max(1, fraction * 100)));
  const policy = limit.policy + (limit.shadow ? ", shadow" : "");
  const waits = limit.remaining > 0 ? "full in " + duration(limit.reset_ms)
    : "next in " + duration(limit.retry_after_ms) + ", full in " + duration(limit.reset_ms);
  const box = el("div", {
    class: "gauge" + (limit.remaining === 0 ? " empty-quota" : ""),
    "data-limit": limit.name, "data-remaining": String(limit.remaining),
  }, svg, el("div", { class: "value" }, limit.remaining + " / " + limit.limit),
     el("div", {}, limit.name + " (" + policy + ")"),
     el("div", { class: "label" }, "remaining · " + waits));
  if (limit.entries) box.append(el("div", { class: "label" }, limit.entries.length + " logged time(s) in the window"));
  return box;
}

async function showClient(client, plan = "", note = "") {
  selectedClient = client;
  selectedPlan = plan;
  selectedNote = note;
  const out = $("client");
  out.dataset.client = client;
  if (!client) { out.replaceChildren(); return; }
  try {
    // The id in the query, not the path: a browser removes an id of "." or
    // ".." (even written %2e) from a path as a dot segment.
    const query = "?client=" + encodeURIComponent(client) + (plan ? "&plan=" + encodeURIComponent(plan) : "");
    const state = await getJson("/v1/clients" + query);
    if (selectedClient !== client || selectedPlan !== plan) return;
    const verdict = state.allowed
      ? el("span", { class: "verdict yes" }, "a request would pass now")
      : el("span", { class: "verdict no" }, "limited: next request in " + duration(state.retry_after_ms));
    out.replaceChildren(
      el("div", { class: "client-head" }, el("b", {}, clientId(state.client)), " on plan ", el("b", {}, state.plan), " — ", verdict),
      el("div", { class: "gauges" }, ...state.limits.map(gauge)));
    if (note) out.append(el("p", { class: "note plan-gone" }, note));
    out.dataset.loaded = "1";
  } catch (e) {
    if (selectedClient !== client || selectedPlan !== plan) return;
    // A row of the top clients names the plan of the client's latest
    // request in the last minute, which a reload may have removed since.
    if (plan && !(await planConfigured(plan))) {
      return showClient(client, "", "Plan " + plan + " is no longer configured (a reload removed it): "
        + "shown on the plan this client has now.");
    }
    out.replaceChildren(el("p", { class: "error" }, e.message));
  }
}

// Whether the config in force has `plan` (true when that cannot be read, so
// that the error at hand is shown).
async function planConfigured(plan) {
  try {
    return (await getJson("/v1/config")).plans.some((p) => p.name === plan);
  } catch {
    return true;
  }
}

async function refreshConfig() {
  const config = await getJson("/v1/config");
  const plans = config.plans.map((plan) => el("div", { class: "plan" },
    el("div", {}, el("span", { class: "plan-name" }, plan.name),
      plan.default ? el("span", { class: "tag" }, "default") : "",
      plan.clients ? el("span", { class: "tag" }, plan.clients + " client(s)") : ""),
    el("table", {}, el("tbody", {}, ...plan.limits.map((l) => el("tr", {},
      el("td", {}, l.name), el("td", {}, l.policy),
      el("td", { class: "num" }, l.limit + " per " + duration(l.window_ms)),
      el("td", {}, l.shadow ? "shadow" : "")))))));
  const store = config.store;
  const kv = el("div", { class: "kv" },
    el("div", {}, "store"), el("div", {}, store.kind + (store.url ? " " + store.url : "")),
    el("div", {}, "failure policy"),
    el("div", {}, store.kind === "memory" ? store.failure_policy + " (applies to a shared store only)" : store.failure_policy),
    el("div", {}, "listen"), el("div", {}, config.listen.join(", ")),
    el("div", {}, "client id"), el("div", {}, config.client_id));
  $("config").replaceChildren(...plans, kv);
}

async function tick() {
  const jobs = [refreshStats(), refreshTop()];
  if (selectedClient) jobs.push(showClient(selectedClient, selectedPlan, selectedNote));
  const results = await Promise.allSettled(jobs);
  const failed = results.find((r) => r.status === "rejected");
  if (failed) $("updated").textContent = "error: " + failed.reason.message;
}

$("search").addEventListener("submit", (event) => {
  event.preventDefault();
  // As typed: ids are their callers' to choose, spaces included.
  showClient($("client-id").value);
});
window.addEventListener("resize", () => {
  for (const kind of Object.keys(charts)) {
    const box = $("chart-" + kind);
    charts[kind].plot.setSize({ width: Math.max(300, box.clientWidth), height: 240 });
  }
});

refreshConfig().catch((e) => { $("config").textContent = e.message; });
tick();
setInterval(tick, 1000);
setInterval(() => refreshConfig().catch(() => {}), 30000);
