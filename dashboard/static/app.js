// corral dashboard: the process list and the selected process's output,
// kept live over one WebSocket (docs/api.md, "Dashboard WebSocket").
"use strict";

const $ = id => document.getElementById(id);
const sessions = new Map(); // id -> session
let selected = null;        // selected session id
let screen = null;          // AnsiScreen of the selected session's output
let nextOffset = 0;         // output offset received so far
let ws = null;
let retry = 500;
let dirty = false;

function connect() {
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  ws = new WebSocket(`${proto}//${location.host}/ws`);
  ws.onopen = () => { retry = 500; setConn(true); if (selected) subscribe(selected, 0); };
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
    sessions.clear();
    for (const s of m.sessions) sessions.set(s.id, s);
    renderList();
    if (selected) renderDetail();
  },
  session_updated(m) {
    sessions.set(m.session.id, m.session);
    renderList();
    if (m.session.id === selected) renderDetail();
  },
  session_removed(m) {
    sessions.delete(m.sessionId);
    renderList();
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

function age(created) {
  const d = Math.max(0, (Date.now() - Date.parse(created)) / 1000);
  if (d < 60) return `${Math.floor(d)}s`;
  if (d < 3600) return `${Math.floor(d / 60)}m`;
  if (d < 86400) return `${Math.floor(d / 3600)}h${Math.floor(d % 3600 / 60)}m`;
  return `${Math.floor(d / 86400)}d`;
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
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
    tr.className = (final ? "final " : "") + (s.id === selected ? "selected" : "");
    cell(tr, s.id, "id");
    cell(tr, s.command, "cmd").title = s.command;
    cell(tr, s.backend);
    cell(tr, s.state_text, "state state-" + s.state + (s.backend_condition ? " sick" : ""));
    cell(tr, age(s.created_at), "age").dataset.created = s.created_at;
    cell(tr, s.pid ? String(s.pid) : "");
    const labels = cell(tr, "");
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
  $("count").textContent = `${shown.length} of ${sessions.size} processes`;
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

function renderDetail() {
  const s = sessions.get(selected);
  if (!s) return;
  const final = !["starting", "recovering", "running"].includes(s.state);
  $("d-id").textContent = s.id;
  $("d-state").textContent = s.state_text + (s.pty ? " · terminal" : "");
  $("d-state").className = "state-" + s.state + (s.backend_condition ? " sick" : "");
  $("d-cmd").textContent = `${s.backend}: ${s.command}`;
  const treeRuns = !final || s.tree_running;
  $("b-kill").disabled = !treeRuns;
  $("b-force").disabled = !treeRuns;
  $("b-remove").disabled = treeRuns;
  $("stdin").hidden = !(s.stdin && !final);
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
  setInterval(() => {
    for (const td of document.querySelectorAll("td.age")) td.textContent = age(td.dataset.created);
  }, 1000);
  connect();
});
