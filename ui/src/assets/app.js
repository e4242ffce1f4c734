// The operator UI's pages: plain JavaScript over the JSON API (/api/v1/),
// no framework and nothing fetched from elsewhere. Routes: #/ (runs),
// #/run/ID (one run), #/gates (gates waiting in every run). Every page
// follows the store: a run page polls its store version and redraws when it
// moves; the lists refresh every two seconds.
"use strict";

const main = document.getElementById("main");
const live = document.getElementById("live");
let timer = null;
let shownVersion = null;

function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
}

async function api(path, body) {
  const init = body === undefined ? {credentials: "same-origin"} : {
    method: "POST", credentials: "same-origin",
    headers: {"Content-Type": "application/json"}, body: JSON.stringify(body),
  };
  const r = await fetch("/api/v1" + path, init);
  const doc = await r.json().catch(() => ({error: {type: "bad_response", message: r.statusText}}));
  live.classList.toggle("stale", !r.ok && r.status >= 500);
  if (!r.ok) throw doc.error || {type: "error", message: r.statusText};
  return doc;
}

function status(s) { return `<span class="status ${esc(s)}">${esc(s)}</span>`; }
function when(ms) { return ms ? new Date(ms).toISOString().replace("T", " ").slice(0, 19) : ""; }
function spend(l) {
  if (!l || !l.spent) return "";
  const s = l.spent;
  return `$${(+s.usd).toFixed(2)} · ${s.tokens} tok · ${s.dispatches} disp`;
}

function every(ms, fn) {
  clearInterval(timer);
  timer = setInterval(() => fn().catch(() => live.classList.add("stale")), ms);
}

async function runsPage() {
  const filter = new URLSearchParams(location.hash.split("?")[1] || "").get("status") || "";
  const q = filter ? `?status=${encodeURIComponent(filter)}` : "";
  const doc = await api("/runs" + q);
  const options = ["", "running", "completed", "failed", "killed", "cancelled", "budget_exhausted"]
    .map(s => `<option value="${s}" ${s === filter ? "selected" : ""}>${s || "all"}</option>`).join("");
  const rows = doc.runs.map(r => `<tr data-run="${esc(r.runId)}">
      <td><a href="#/run/${esc(r.runId)}">${esc(r.runId)}</a></td><td>${status(r.status)}</td>
      <td>${esc(r.flow)}</td>
      <td>${r.progress ? `${r.progress.done}/${r.progress.total}` : esc(r.unreadable || "")}</td>
      <td>${spend(r.ledger)}</td>
      <td>${(r.waitingGates || []).map(g => `<span class="badge">${esc(g)}</span>`).join(" ")}</td>
      <td>${when(r.updatedMs)}</td></tr>`).join("");
  main.innerHTML = `<h1>Runs</h1>
    <label>status <select id="filter">${options}</select></label>
    ${doc.runs.length ? `<table id="runs"><tr><th>run</th><th>status</th><th>flow</th><th>progress</th><th>spent</th><th>gates waiting</th><th>updated</th></tr>${rows}</table>`
      : `<p class="muted">no runs${filter ? " with status " + esc(filter) : ""}</p>`}
    ${doc.truncated ? `<p class="muted">only the newest runs are shown</p>` : ""}`;
  document.getElementById("filter").onchange = e => {
    location.hash = e.target.value ? `#/?status=${e.target.value}` : "#/";
  };
}

function gateForm(runId, g) {
  const choices = g.options ? `<label>choice <select name="choice"><option value="">(none)</option>${
    g.options.map(o => `<option>${esc(o)}</option>`).join("")}</select></label>` : "";
  return `<div class="gate" data-gate="${esc(g.stepId)}" data-run="${esc(runId)}">
    <b>gate ${esc(g.stepId)}</b> of <a href="#/run/${esc(runId)}">${esc(runId)}</a>
    <span class="muted">round ${g.round}${g.maxRounds != null ? "/" + g.maxRounds : ""} · token ${esc(g.gateToken)}</span>
    <form data-token="${esc(g.gateToken)}">
      ${choices}
      <input type="text" name="note" placeholder="note (recorded with the decision)">
      <button type="submit" name="decision" value="approve">Approve</button>
      <button type="submit" name="decision" value="revise">Revise</button>
      <button type="submit" name="decision" value="kill">Kill</button>
    </form><div class="result"></div></div>`;
}

function wireGateForms() {
  for (const form of main.querySelectorAll(".gate form")) {
    form.onsubmit = async e => {
      e.preventDefault();
      const box = form.closest(".gate");
      const body = {decision: e.submitter.value, token: form.dataset.token};
      const note = form.elements.note.value.trim();
      if (note) body.note = note;
      if (form.elements.choice && form.elements.choice.value) body.choice = form.elements.choice.value;
      const out = box.querySelector(".result");
      try {
        const d = await api(`/runs/${encodeURIComponent(box.dataset.run)}/gates/${encodeURIComponent(box.dataset.gate)}`, body);
        out.innerHTML = `<p class="msg ok">recorded: ${esc(d.decision)}${d.choice ? " (" + esc(d.choice) + ")" : ""}; the run is ${esc(d.status)}${d.ready.length ? ", ready: " + esc(d.ready.join(", ")) : ""}</p>`;
        form.remove();
      } catch (err) {
        out.innerHTML = `<p class="msg err">${esc(err.type)}: ${esc(err.message)}</p>`;
      }
    };
  }
}

async function gatesPage() {
  const doc = await api("/gates");
  if (main.querySelector(".gate form input:focus")) return; // do not redraw under the operator's typing
  main.innerHTML = `<h1>Gates waiting</h1>${doc.gates.length
    ? doc.gates.map(g => gateForm(g.runId, g)).join("") : `<p class="muted">no gates waiting</p>`}`;
  wireGateForms();
}

// The violations of a step's last failed attempt, from its `result` events.
function lastViolations(events, id) {
  const failed = events.filter(e => e.type === "result" && e.stepId === id && e.detail && e.detail.failure);
  return failed.length ? (failed[failed.length - 1].detail.failure.violations || []) : [];
}

// A step's failure (its reason), then each violation (kind and what it says).
function failure(reason, violations) {
  if (!reason) return "";
  const items = violations.map(v => {
    const kind = v && typeof v === "object" ? (v.kind || v.type || "") : "";
    const text = v && typeof v === "object" ? (v.message || v.statement || v.path || JSON.stringify(v)) : String(v);
    return `<li><b>${esc(kind)}</b> ${esc(String(text).slice(0, 300))}</li>`;
  }).join("");
  return `${esc(typeof reason === "string" ? reason : reason.reason || "")}${items ? `<ul class="violations">${items}</ul>` : ""}`;
}

function section(title, body) { return body ? `<h2>${title}</h2>${body}` : ""; }

function timeline(events) {
  const rows = events.map(e => `<tr><td>${when(e.at)}</td><td>${esc(e.type)}</td><td>${esc(e.stepId || "")}</td>
      <td><code>${esc(JSON.stringify(e.detail ?? "")).slice(0, 300)}</code></td></tr>`).join("");
  return `<table id="timeline"><tr><th>at</th><th>event</th><th>step</th><th>detail</th></tr>${rows}</table>`;
}

async function runPage(id) {
  const doc = await api(`/runs/${encodeURIComponent(id)}`);
  const r = doc.run;
  shownVersion = r.storeVersion;
  const steps = r.steps.map(s => `<tr data-step="${esc(s.id)}"><td>${"&nbsp;".repeat(2 * s.depth)}${esc(s.id)}</td>
      <td>${esc(s.kind)}</td><td>${status(s.status)}</td><td>${s.attempts}</td>
      <td>${s.gateRounds != null ? s.gateRounds + (s.gateMaxRounds != null ? "/" + s.gateMaxRounds : "") : ""}${s.decision ? " " + esc(s.decision) : ""}</td>
      <td>${esc(s.outputSummary || "")}</td><td>${failure(s.failure, lastViolations(doc.events, s.id))}</td></tr>`).join("");
  const verdicts = doc.events.filter(e => e.type === "judged").map(e => {
    const d = e.detail || {};
    const score = d.score != null ? `${d.score}${d.threshold != null ? " / " + d.threshold : ""}` : "";
    const reasons = (d.reasons && d.reasons.length ? d.reasons : [d.reason]).filter(Boolean);
    return `<tr><td>${esc(e.stepId || "")}</td><td>${esc(d.statement)}</td>
      <td><span class="status ${d.holds ? "succeeded" : "failed"}">${d.holds ? "holds" : "fails"}</span></td>
      <td>${esc(score)}</td><td>${esc(d.judge || "")} ${esc(d.model || "")}</td>
      <td>${reasons.map(r => esc(r)).join("<br>")}</td></tr>`;
  }).join("");
  const now = new Map(((doc.verify && doc.verify.files) || []).map(f => [`${f.step}|${f.attempt}|${f.path}`, f.status]));
  const files = doc.manifests.flatMap(m => (m.files || []).map(f => {
    const owner = m.itemIndex != null ? `${m.step}/${m.itemIndex}` : m.step;
    const st = now.get(`${owner}|${m.attempt}|${f.path}`) || "";
    return `<tr><td>${esc(owner)}</td><td>${m.attempt}</td>
      <td>${esc(f.path)}</td><td><code>${esc(f.sha256 || "")}</code></td><td class="verify ${esc(st)}">${esc(st)}</td></tr>`;
  })).join("");
  const patches = doc.patches.map(p => `<details><summary>${esc(p.step)}${p.itemIndex != null ? "/" + p.itemIndex : ""} attempt ${p.attempt}:
      ${p.files.map(f => esc(f.path)).join(", ")}</summary><pre>${esc(p.diff)}</pre></details>`).join("");
  const receipts = doc.receipts.map(c => `<tr><td>${esc(c.step || "")}</td><td>${esc(c.command || "")}</td>
      <td>${esc(c.exit ?? "")}</td><td>${esc(c.ms ?? "")}</td></tr>`).join("");
  main.innerHTML = `<h1>${esc(r.runId)} ${status(r.status)}</h1>
    <p>flow <b>${esc(r.flow)}</b> · progress ${r.progress.done}/${r.progress.total} · round ${r.round}${r.maxRounds != null ? "/" + r.maxRounds : ""}
      · spent ${spend(r.ledger)} · started ${when(r.startedMs)} · store version <span id="store-version">${r.storeVersion}</span>
      ${r.status === "running" ? `<button id="cancel">Cancel run</button>` : ""}</p>
    <div id="cancel-result"></div>
    ${r.failure ? `<p class="msg err">${esc(r.failure.reason || JSON.stringify(r.failure))}</p>` : ""}
    ${r.gates.map(g => gateForm(r.runId, g)).join("")}
    <h2>Graph</h2><div class="graph"><img id="graph" alt="the run's flow graph" src="/api/v1/runs/${encodeURIComponent(id)}/graph.svg?v=${r.storeVersion}"></div>
    <h2>Steps</h2><table id="steps"><tr><th>step</th><th>kind</th><th>status</th><th>attempts</th><th>rounds</th><th>output</th><th>failure</th></tr>${steps}</table>
    ${section("Verdicts", verdicts && `<table id="verdicts"><tr><th>step</th><th>statement</th><th>verdict</th><th>score</th><th>judge</th><th>reasons</th></tr>${verdicts}</table>`)}
    ${section("Artifacts", files && `<table id="artifacts"><tr><th>step</th><th>attempt</th><th>file</th><th>sha256</th><th>now</th></tr>${files}</table>`)}
    ${section("Patches", patches)}
    ${section("Command receipts", receipts && `<table><tr><th>step</th><th>command</th><th>exit</th><th>ms</th></tr>${receipts}</table>`)}
    ${r.output ? section("Output", `<pre>${esc(JSON.stringify(r.output, null, 2))}</pre>`) : ""}
    <h2>Audit timeline</h2>${timeline(doc.events)}`;
  wireGateForms();
  const cancel = document.getElementById("cancel");
  if (cancel) cancel.onclick = async () => {
    if (!confirm(`Cancel ${id}?`)) return;
    const out = document.getElementById("cancel-result");
    try { const d = await api(`/runs/${encodeURIComponent(id)}/cancel`, {}); out.innerHTML = `<p class="msg ok">run ${esc(d.status)}</p>`; }
    catch (err) { out.innerHTML = `<p class="msg err">${esc(err.type)}: ${esc(err.message)}</p>`; }
  };
}

async function follow(id) {
  const v = await api(`/runs/${encodeURIComponent(id)}/version`);
  const typing = main.querySelector(".gate form input:focus");
  if (v.storeVersion !== shownVersion && !typing) await runPage(id);
}

async function route() {
  clearInterval(timer);
  const hash = location.hash || "#/";
  try {
    if (hash.startsWith("#/run/")) {
      const id = decodeURIComponent(hash.slice(6));
      await runPage(id);
      every(1000, () => follow(id));
    } else if (hash.startsWith("#/gates")) {
      await gatesPage();
      every(2000, gatesPage);
    } else {
      await runsPage();
      every(2000, runsPage);
    }
  } catch (err) {
    main.innerHTML = `<p class="msg err">${esc(err.type)}: ${esc(err.message)}</p>`;
  }
}

window.addEventListener("hashchange", route);
route();
