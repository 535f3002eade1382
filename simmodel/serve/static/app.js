// The request-simulator page: one POST /api/scenarios call, drawn as cards, a table and the run's charts.
"use strict";
const $ = (id) => document.getElementById(id);
const PAGE = 25;
let rows = [], sortKey = "id", sortUp = true, page = 0;

function headers() {
  const h = {"Content-Type": "application/json"};
  const token = $("token").value || sessionStorage.getItem("simmodel-token");
  if (token) { h.Authorization = "Bearer " + token; sessionStorage.setItem("simmodel-token", token); }
  return h;
}

async function load() {
  const [ready, catalog] = await Promise.all([fetch("api/scenarios/ready", {headers: headers()}),
                                              fetch("api/catalog", {headers: headers()})]);
  if (ready.status === 401) {
    $("status").textContent = "this server wants its API token: enter it under Advanced scheduler assumptions, then Run";
    $("status").className = "error";
    return;
  }
  $("scenario").innerHTML = ""; $("models").innerHTML = ""; $("systems").innerHTML = "";
  if (ready.ok) {
    for (const s of await ready.json()) {
      const o = document.createElement("option");
      o.value = s.name; o.textContent = `${s.name} (${s.model} on ${s.hardware}, ${s.backend}, ${s.mode})`;
      if (s.name === "quickstart") o.selected = true;
      $("scenario").appendChild(o);
    }
  }
  if (catalog.ok) {
    const c = await catalog.json();
    for (const [list, ids] of [["models", c.models], ["systems", c.systems]]) {
      for (const id of ids) { const o = document.createElement("option"); o.value = id; $(list).appendChild(o); }
    }
  }
}

function number(id) { const v = $(id).value; return v === "" ? null : Number(v); }

function body() {
  const b = {num_requests: number("num_requests"), prompt_tokens: number("prompt_tokens"),
             output_tokens: number("output_tokens"), arrival_rate_rps: number("arrival_rate_rps"), charts: true};
  if (document.querySelector("input[name=pick]:checked").value === "scenario") b.scenario = $("scenario").value;
  else b.engine = {model: $("model").value, hardware: $("hardware").value,
                   workers: {aggregated: {parallelism: {tensor: number("tensor") || 1}}}};
  const sched = {};
  for (const k of ["max_num_seqs", "max_num_batched_tokens"]) if (number(k) !== null) sched[k] = number(k);
  if (Object.keys(sched).length) b.scheduler = sched;
  return b;
}

function fmt(v, digits = 2) {
  return v === null || v === undefined ? "–" : (typeof v === "number" ? v.toFixed(digits) : String(v));
}

function cards(agg) {
  const shown = [["ttft_ms_p50", "TTFT p50 (ms)"], ["ttft_ms_p99", "TTFT p99 (ms)"], ["itl_ms_p50", "ITL p50 (ms)"],
                 ["e2e_ms_p50", "E2E p50 (ms)"], ["e2e_ms_p99", "E2E p99 (ms)"], ["output_tokens_per_s", "output tokens/s"]];
  $("cards").innerHTML = shown.map(([k, label]) =>
    `<div class="card" data-key="${k}"><div class="value">${fmt(agg[k])}</div><div class="label">${label}</div></div>`).join("");
}

const COLUMNS = ["id", "arrival_s", "prompt_tokens", "output_tokens", "ttft_ms", "tpot_ms", "e2e_ms", "queue_ms",
                 "preemptions", "status"];

function table() {
  const sorted = [...rows].sort((a, b) => {
    const x = a[sortKey], y = b[sortKey];
    const c = (x === y) ? 0 : (x === null ? 1 : y === null ? -1 : (x < y ? -1 : 1));
    return sortUp ? c : -c;
  });
  const pages = Math.max(1, Math.ceil(sorted.length / PAGE));
  page = Math.min(page, pages - 1);
  const shown = sorted.slice(page * PAGE, (page + 1) * PAGE);
  $("table").innerHTML = `<h2>Requests</h2><table id="requests"><thead><tr>${COLUMNS.map(c =>
      `<th data-col="${c}">${c}${c === sortKey ? (sortUp ? " ▲" : " ▼") : ""}</th>`).join("")}</tr></thead><tbody>` +
    shown.map(r => `<tr>${COLUMNS.map(c => `<td>${typeof r[c] === "number" ?
      (Number.isInteger(r[c]) ? r[c] : fmt(r[c], 3)) : fmt(r[c])}</td>`).join("")}</tr>`).join("") +
    `</tbody></table><p><button id="prev">previous</button> page ${page + 1} of ${pages} ` +
    `<button id="next">next</button></p>`;
  for (const th of document.querySelectorAll("#requests th")) th.onclick = () => {
    const c = th.dataset.col; sortUp = (c === sortKey) ? !sortUp : true; sortKey = c; table();
  };
  $("prev").onclick = () => { page = Math.max(0, page - 1); table(); };
  $("next").onclick = () => { page = page + 1; table(); };
}

function charts(figures) {
  $("charts").innerHTML = "<h2>Charts</h2>";
  for (const fig of figures) {
    const div = document.createElement("div"); div.className = "chart"; $("charts").appendChild(div);
    Plotly.newPlot(div, fig.data, fig.layout, {responsive: true});
  }
}

$("call").onsubmit = async (event) => {
  event.preventDefault();
  if (!$("scenario").options.length) await load();  // (a token entered since the page loaded)
  if (!$("scenario").options.length && document.querySelector("input[name=pick]:checked").value === "scenario") return;
  $("status").textContent = "running…"; $("status").className = "";
  const response = await fetch("api/scenarios", {method: "POST", headers: headers(), body: JSON.stringify(body())});
  const got = await response.json();
  if (!response.ok) {
    const detail = Array.isArray(got.detail) ? got.detail.map(d => `${d.loc.slice(1).join(".")}: ${d.msg}`).join("; ")
                                             : got.detail;
    $("status").textContent = detail; $("status").className = "error"; return;
  }
  $("status").textContent = `done: ${got.requests.length} requests, ${got.steps_total} pass rows` +
    (got.steps_downsampled ? ` (${got.steps_returned} shown)` : "");
  cards(got.aggregate);
  $("provenance").innerHTML = "<h2>Provenance of the passes' times</h2><ul>" +
    Object.entries(got.provenance_counts).map(([k, v]) => `<li>${k}: ${v}</li>`).join("") + "</ul>";
  rows = got.requests; page = 0; table();
  charts(got.charts || []);
};

load();
