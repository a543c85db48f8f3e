// corral dashboard: the process list and the selected process's output,
// kept live over one WebSocket (docs/api.md, "Dashboard WebSocket").
// The server computes every text of the list (the columns and texts of
// corral ps); this page only lays them out.
"use strict";

const $ = id => document.getElementById(id);
const sessions = new Map(); // id -> session
let columns = [];           // [{key, title}]: the texts of each session's row
let selected = null;        // selected session id
let screen = null;          // AnsiScreen of the selected session's output
let nextOffset = 0;         // output offset received so far
let ws = null;
let retry = 500;
let dirty = false;
const histories = new Map(); // id -> recent samples [{at, cpu_percent, rss_bytes}], for the sparklines

function connect() {
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  ws = new WebSocket(`${proto}//${location.host}/ws`);
  ws.onopen = () => { retry = 500; lastStatsAsk = 0; setConn(true); if (selected) subscribe(selected, 0); };
  ws.onclose = () => {
    setConn(false);
    setTimeout(connect, retry);
    retry = Math.min(retry * 2, 10000);
  };
  ws.onmessage = ev => {
    let m;
    try { m = JSON.parse(ev.data); } catch { return; }
    (handlers[m.type] || (() => {}))(m);
  };
}

function send(m) {
  if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(m));
}

function setConn(up) {
  const el = $("conn");
  el.className = "conn " + (up ? "up" : "down");
  el.textContent = up ? "live" : "reconnecting…";
}

const handlers = {
  sessions(m) {
    columns = m.columns || [];
    renderHead();
    sessions.clear();
    for (const s of m.sessions) sessions.set(s.id, s);
    renderList();
    if (selected) renderDetail();
    askStats();
  },
  session_updated(m) {
    sessions.set(m.session.id, m.session);
    scheduleList();
    if (m.session.id === selected) renderDetail();
  },
  session_removed(m) {
    sessions.delete(m.sessionId);
    histories.delete(m.sessionId);
    scheduleList();
    if (m.sessionId === selected) { select(null); }
  },
  output(m) {
    if (m.sessionId !== selected) return;
    const bytes = Uint8Array.from(atob(m.data || ""), c => c.charCodeAt(0));
    if (m.omitted) {
      screen.write(bytes.subarray(0, m.omittedAt));
      screen.marker(`… ${m.omitted} bytes omitted (not held by corral's buffer) …`);
      screen.write(bytes.subarray(m.omittedAt));
    } else {
      screen.write(bytes);
    }
    nextOffset = m.offset + bytes.length + (m.omitted || 0);
    scheduleOutput();
  },
  output_end(m) {
    if (m.sessionId !== selected) return;
    sessions.set(m.session.id, m.session);
    renderDetail();
  },
  stats_history(m) {
    for (const [id, h] of Object.entries(m.histories || {})) {
      histories.set(id, h);
      const tr = document.querySelector(`#rows tr[data-id="${CSS.escape(id)}"]`);
      const s = sessions.get(id);
      if (tr && s) drawSparks(tr, s);
    }
  },
  kill_result: showResult,
  force_kill_result: showResult,
  send_stdin_result: showResult,
  remove_result: showResult,
  error(m) { showResult({ success: false, message: m.message }); },
};

function showResult(m) {
  // The last answer, for people in the console and for the browser tests.
  window.corralLastResult = m;
  const el = $("result");
  el.className = m.success ? "ok" : "fail";
  el.textContent = m.message + (m.forced ? " — SIGKILL was needed" : "");
}

// Filters.
function matches(s) {
  const state = $("f-state").value;
  const final = !["starting", "recovering", "running"].includes(s.state);
  if (state === "live" && final) return false;
  if (state === "final" && !final) return false;
  if (state && !["live", "final"].includes(state) && s.state !== state) return false;
  const backend = $("f-backend").value;
  if (backend && s.backend !== backend) return false;
  const label = $("f-label").value.trim();
  if (label) {
    const [k, v] = label.split("=", 2);
    const have = (s.labels || {})[k];
    if (have === undefined || (v !== undefined && have !== v)) return false;
  }
  return true;
}

// text is session s's text in column key.
function text(s, key) {
  const i = columns.findIndex(c => c.key === key);
  return (i >= 0 && s.row) ? s.row[i] : "";
}

function renderHead() {
  const tr = document.createElement("tr");
  for (const c of [...columns, { key: "labels", title: "LABELS" }]) {
    const th = document.createElement("th");
    th.textContent = c.title;
    th.className = c.key;
    tr.appendChild(th);
  }
  $("head").replaceChildren(tr);
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

// scheduleList renders the list once per frame however many updates
// came: every second each young process's age changes, one message each.
let listDirty = false;
function scheduleList() {
  if (listDirty) return;
  listDirty = true;
  requestAnimationFrame(() => { listDirty = false; renderList(); });
}

function renderList() {
  const backends = new Set([...sessions.values()].map(s => s.backend));
  const sel = $("f-backend");
  const have = new Set([...sel.options].map(o => o.value));
  for (const b of backends) if (!have.has(b)) sel.add(new Option(b, b));

  const shown = [...sessions.values()].filter(matches)
    .sort((a, b) => Date.parse(b.created_at) - Date.parse(a.created_at));
  const rows = document.createDocumentFragment();
  for (const s of shown) {
    const tr = document.createElement("tr");
    tr.dataset.id = s.id;
    const final = !["starting", "recovering", "running"].includes(s.state);
    tr.className = (final ? "final " : "") + (s.runaway ? "runaway " : "") + (s.id === selected ? "selected" : "");
    columns.forEach((c, i) => {
      const td = cell(tr, (s.row || [])[i] || "", c.key);
      if (c.key === "state") td.className += " state-" + s.state + (s.backend_condition ? " sick" : "");
      if (c.key === "state" && s.runaway) td.append(" ", runawayBadge());
      if (c.key === "state" && s.waiting_input) td.append(" ", inputBadge(s.waiting_input));
      if (c.key === "command") td.title = td.textContent;
    });
    drawSparks(tr, s);
    const labels = cell(tr, "", "labels");
    for (const [k, v] of Object.entries(s.labels || {})) {
      const span = document.createElement("span");
      span.className = "label";
      span.textContent = `${k}=${v}`;
      labels.appendChild(span);
    }
    tr.onclick = () => select(s.id);
    rows.appendChild(tr);
  }
  $("rows").replaceChildren(rows);
  $("empty").hidden = sessions.size !== 0;
  $("nomatch").hidden = sessions.size === 0 || shown.length !== 0;
  $("count").textContent = `${shown.length} of ${sessions.size} processes`;
  renderHint();
}

// renderHint fills the right pane while no process is chosen: how to
// start one when there is none, else what choosing one does.
function renderHint() {
  $("hint").hidden = !!selected;
  $("hint-start").hidden = sessions.size !== 0;
  $("hint-choose").hidden = sessions.size === 0;
}

function select(id) {
  if (selected && id !== selected) send({ type: "unsubscribe_output" });
  selected = id;
  $("result").textContent = "";
  $("detail").hidden = !id;
  renderList();
  if (!id) return;
  subscribe(id, 0);
  renderDetail();
}

function subscribe(id, offset) {
  screen = new AnsiScreen(5000);
  nextOffset = offset;
  $("output").replaceChildren();
  send({ type: "subscribe_output", sessionId: id, offset });
}

// runawayBadge marks a process whose Info says runaway: an episode is on,
// which its runaway event described.
function runawayBadge() {
  const b = document.createElement("span");
  b.className = "badge runaway";
  b.textContent = "runaway";
  b.title = "past its runaway thresholds (--runaway-cpu, --runaway-memory): its runaway event in corral events says what was seen";
  return b;
}

// inputBadge marks a process whose Info says waiting_input: it is blocked
// reading its terminal or stdin, and the prompt it printed is the title.
function inputBadge(w) {
  const b = document.createElement("span");
  b.className = "badge input";
  b.textContent = "input";
  b.title = `waits for input (${w.kind})` + (w.prompt ? `: ${w.prompt}` : "") + ": answer in the box below its output";
  return b;
}

// focusedWait is the wait (process and since) the input box was last
// focused for, so that a redraw does not take the focus back.
let focusedWait = "";

function renderDetail() {
  const s = sessions.get(selected);
  if (!s) return;
  const final = !["starting", "recovering", "running"].includes(s.state);
  $("d-id").textContent = s.id;
  $("d-state").textContent = text(s, "state") + (s.pty ? " · terminal" : "");
  $("d-state").className = "state-" + s.state + (s.backend_condition ? " sick" : "");
  if (s.runaway) $("d-state").append(" ", runawayBadge());
  if (s.waiting_input) $("d-state").append(" ", inputBadge(s.waiting_input));
  $("d-cmd").textContent = `${s.backend}: ${text(s, "command")}`;
  // The reason in the registry's words: an OOM kill names the memory
  // limit ("out of memory (limit 100M)"), which the state text cannot.
  $("d-limits").textContent = s.limits_text ? `limits: ${s.limits_text}` : "";
  $("d-reason").textContent = final && s.reason ? s.reason : "";
  $("d-info").hidden = !$("d-limits").textContent && !$("d-reason").textContent;
  const treeRuns = !final || s.tree_running;
  $("b-kill").disabled = !treeRuns;
  $("b-force").disabled = !treeRuns;
  $("b-remove").disabled = treeRuns;
  $("stdin").hidden = !((s.stdin || s.pty) && !final);
  // A new wait puts the cursor where the answer goes, once.
  const wait = s.waiting_input && !final ? `${s.id} ${s.waiting_input.since}` : "";
  if (wait && wait !== focusedWait) {
    $("stdin-line").placeholder = s.waiting_input.kind === "password" ? "password (not shown)" : (s.waiting_input.prompt || "answer");
    $("stdin-line").type = s.waiting_input.kind === "password" ? "password" : "text";
    $("stdin-line").focus();
  }
  focusedWait = wait;
}

// Sparklines: CPU and MEM over the recent past, beside the figures, for
// the running processes on screen. Their samples are asked for at most
// every statsEvery ms, only for rows that are visible and measured, and
// not while the page is hidden.
const statsEvery = 3000;
let lastStatsAsk = 0;

function askStats() {
  if (document.hidden || Date.now() - lastStatsAsk < statsEvery - 1000) return;
  const box = $("list").getBoundingClientRect();
  const ids = [];
  for (const tr of $("rows").children) {
    const s = sessions.get(tr.dataset.id);
    if (!s || !s.tree_running || !s.stats) continue;
    const r = tr.getBoundingClientRect();
    if (r.bottom < box.top || r.top > box.bottom) continue;
    ids.push(s.id);
    if (ids.length === 100) break; // the server's bound; more never fit on a screen
  }
  if (ids.length === 0) return;
  lastStatsAsk = Date.now();
  send({ type: "stats_history", sessionIds: ids });
}

// drawSparks puts (or replaces) the sparklines in tr's cpu and mem cells;
// a process whose tree no longer runs, or without samples, gets none.
function drawSparks(tr, s) {
  const h = histories.get(s.id);
  for (const [key, field, floor] of [["cpu", "cpu_percent", 100], ["mem", "rss_bytes", 0]]) {
    const td = tr.querySelector("td." + key);
    if (!td) continue;
    const old = td.querySelector("svg.spark");
    if (old) old.remove();
    if (!s.tree_running || !h || h.length === 0) continue;
    td.appendChild(sparkline(h, field, floor, key));
    const mins = Math.max(1, Math.round((Date.parse(h[h.length - 1].at) - Date.parse(h[0].at)) / 60000));
    td.title = `${key === "cpu" ? "CPU" : "memory"} over the last ${mins} min`;
  }
}

// sparkline draws samples' field against time, from 0 to the larger of
// floor and its peak (CPU: at least one core, so an idle process stays low).
function sparkline(samples, field, floor, key) {
  const W = 48, H = 14, NS = "http://www.w3.org/2000/svg";
  const t0 = Date.parse(samples[0].at), t1 = Date.parse(samples[samples.length - 1].at);
  const top = Math.max(floor, ...samples.map(p => p[field] || 0)) || 1;
  const pts = samples.map(p => {
    const x = t1 > t0 ? (Date.parse(p.at) - t0) / (t1 - t0) * W : W;
    const y = H - 1 - (p[field] || 0) / top * (H - 2);
    return `${x.toFixed(1)},${y.toFixed(1)}`;
  });
  if (pts.length === 1) pts.unshift(`0,${pts[0].split(",")[1]}`);
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("class", `spark spark-${key}`);
  svg.setAttribute("width", W);
  svg.setAttribute("height", H);
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("aria-hidden", "true");
  const line = document.createElementNS(NS, "polyline");
  line.setAttribute("points", pts.join(" "));
  svg.appendChild(line);
  return svg;
}

function scheduleOutput() {
  if (dirty) return;
  dirty = true;
  requestAnimationFrame(() => {
    dirty = false;
    const el = $("output");
    const atBottom = el.scrollHeight - el.scrollTop - el.clientHeight < 40;
    screen.render(el);
    if (atBottom) el.scrollTop = el.scrollHeight;
  });
}

function action(type) {
  if (!selected) return;
  $("result").className = "";
  $("result").textContent = `${type.replace("_", " ")} ${selected}…`;
  send({ type, sessionId: selected });
}

window.addEventListener("DOMContentLoaded", () => {
  $("b-kill").onclick = () => action("kill");
  $("b-force").onclick = () => action("force_kill");
  $("b-remove").onclick = () => action("remove");
  $("stdin").onsubmit = ev => {
    ev.preventDefault();
    send({ type: "send_stdin", sessionId: selected, line: $("stdin-line").value });
    $("stdin-line").value = "";
  };
  for (const id of ["f-state", "f-backend", "f-label"]) $(id).oninput = renderList;
  $("filters").onsubmit = ev => ev.preventDefault();
  setInterval(askStats, statsEvery);
  $("list").addEventListener("scroll", () => setTimeout(askStats, 200), { passive: true });
  connect();
});
