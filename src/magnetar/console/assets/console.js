// Magnetar's web console: plain JavaScript over the broker's admin REST API (same origin).
// No build step, no third-party code: views are rendered from template strings whose
// every value goes through esc(); charts are drawn on <canvas> by drawChart().
"use strict";

const TOKEN_KEY = "magnetar.console.token";
const REFRESH_MS = Math.max(1000, Number(new URLSearchParams(location.search).get("refresh")) || 5000);
const main = document.getElementById("main");
let session = null; // the /admin/v2/console/namespaces answer: role, tenants, ...
let refreshTimer = null;
let loginWaiters = [];

// ---- HTTP -------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, reason) { super(reason); this.status = status; }
}

async function api(path, { method = "GET", body, raw = false } = {}) {
  for (;;) {
    const headers = {};
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers["Authorization"] = "Bearer " + token;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const res = await fetch(path, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
      redirect: "follow", credentials: "same-origin",
    });
    if (res.status === 401) {
      await askToken(await reasonOf(res));
      continue;
    }
    if (!res.ok) throw new ApiError(res.status, await reasonOf(res));
    if (raw) return res;
    if (res.status === 204) return null;
    const text = await res.text();
    return text ? JSON.parse(text) : null;
  }
}

async function reasonOf(res) {
  try { return (await res.json()).reason || res.statusText; } catch { return res.statusText; }
}

function askToken(reason) {
  const dialog = document.getElementById("login");
  document.getElementById("login-reason").textContent = reason || "";
  if (!dialog.open) dialog.showModal();
  return new Promise((resolve) => loginWaiters.push(resolve));
}

document.getElementById("login-form").addEventListener("submit", () => {
  const token = document.getElementById("token").value.trim();
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  const waiters = loginWaiters;
  loginWaiters = [];
  waiters.forEach((w) => w());
});

document.getElementById("sign-out").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  session = null;
  main.innerHTML = '<p class="muted">Signed out.</p>';
  document.getElementById("whoami").textContent = "";
  document.getElementById("token").value = "";
  location.hash = "#/";
  route();
});

// ---- formatting ---------------------------------------------------------------------------

function esc(v) {
  return String(v ?? "").replace(/[&<>"']/g, (c) => (
    { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
const num = (v, digits = 1) => (typeof v === "number" ? v.toLocaleString("en-US", { maximumFractionDigits: digits }) : "–");
function bytes(n) {
  if (typeof n !== "number") return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${num(n, 1)} ${units[i]}`;
}
function age(seconds) {
  if (typeof seconds !== "number" || seconds < 0) return "–";
  if (seconds < 120) return `${seconds} s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)} min`;
  return `${Math.round(seconds / 3600)} h`;
}
const tag = (text, kind = "") => `<span class="tag ${kind}">${esc(text)}</span>`;
function table(headers, rows, attrs = "") {
  const head = headers.map((h) => (h.startsWith("#") ? `<th class="num">${esc(h.slice(1))}</th>` : `<th>${esc(h)}</th>`)).join("");
  const body = rows.length ? rows.join("") : `<tr><td colspan="${headers.length}" class="muted">none</td></tr>`;
  return `<table ${attrs}><thead><tr>${head}</tr></thead><tbody>${body}</tbody></table>`;
}
function toast(message, error = false) {
  const div = document.createElement("div");
  div.textContent = message;
  if (error) div.className = "error";
  document.getElementById("status").appendChild(div);
  setTimeout(() => div.remove(), 6000);
}

// Topic names: persistent://tenant/ns/local -> {domain, tenant, ns, local, path}
function parseTopic(full) {
  const m = /^(persistent|non-persistent):\/\/([^/]+)\/([^/]+)\/(.+)$/.exec(full);
  if (!m) return null;
  const [, domain, tenant, ns, local] = m;
  return { full, domain, tenant, ns, local, path: `${domain}/${tenant}/${ns}/${encodeURIComponent(local)}` };
}

// ---- charts -------------------------------------------------------------------------------

// Draws the series [{label, color, points: [[x, y], ...]}] on a canvas, one y axis from 0.
function drawChart(canvas, series, unit) {
  const ratio = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 420, h = canvas.clientHeight || 160;
  canvas.width = w * ratio; canvas.height = h * ratio;
  const g = canvas.getContext("2d");
  g.scale(ratio, ratio);
  g.clearRect(0, 0, w, h);
  const pad = { l: 48, r: 8, t: 8, b: 20 };
  const all = series.flatMap((s) => s.points);
  const x0 = Math.min(...all.map((p) => p[0])), x1 = Math.max(...all.map((p) => p[0]));
  const yMax = Math.max(1, ...all.map((p) => p[1])) * 1.1;
  const X = (x) => pad.l + (x1 > x0 ? (x - x0) / (x1 - x0) : 1) * (w - pad.l - pad.r);
  const Y = (y) => h - pad.b - (y / yMax) * (h - pad.t - pad.b);
  g.strokeStyle = "#d9dee5"; g.fillStyle = "#687382"; g.font = "11px system-ui"; g.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const y = (yMax * i) / 4;
    g.beginPath(); g.moveTo(pad.l, Y(y)); g.lineTo(w - pad.r, Y(y)); g.stroke();
    g.fillText(num(y, y < 10 ? 1 : 0), 4, Y(y) + 4);
  }
  if (all.length) {
    const span = Math.round((x1 - x0) / 1000);
    g.fillText(`last ${span} s${unit ? " · " + unit : ""}`, pad.l, h - 5);
  }
  for (const s of series) {
    g.strokeStyle = s.color; g.lineWidth = 2; g.beginPath();
    s.points.forEach(([x, y], i) => (i ? g.lineTo(X(x), Y(y)) : g.moveTo(X(x), Y(y))));
    g.stroke();
  }
}

function chartBox(id, title, legend) {
  const keys = legend.map(([label, kind]) => `<span><i class="${kind}"></i>${esc(label)}</span>`).join("");
  return `<div class="chart"><div><b>${esc(title)}</b> <span class="legend">${keys}</span></div>
    <canvas id="${id}"></canvas></div>`;
}

// ---- views --------------------------------------------------------------------------------

async function loadSession() {
  if (!session) session = await api("/admin/v2/console/namespaces");
  document.getElementById("nav-cluster").hidden = !session.superUser;
  document.getElementById("whoami").textContent = session.role ? `role: ${session.role}` : "";
  document.getElementById("sign-out").hidden = !sessionStorage.getItem(TOKEN_KEY);
  return session;
}

async function viewNamespaces() {
  const s = await loadSession();
  const rows = [];
  for (const [tenant, names] of Object.entries(s.tenants)) {
    for (const ns of names) {
      const [, local] = ns.name.split("/");
      rows.push(`<tr data-namespace="${esc(ns.name)}"><td>${esc(tenant)}</td>
        <td><a href="#/ns/${esc(ns.name)}">${esc(local)}</a></td>
        <td>${ns.admin ? tag("admin", "ok") : tag("produce/consume")}</td></tr>`);
    }
  }
  main.innerHTML = `<h1>Tenants and namespaces</h1>${table(["Tenant", "Namespace", "Access"], rows, 'id="namespaces"')}`;
}

async function viewCluster() {
  await loadSession();
  const c = await api("/admin/v2/console/cluster");
  const ctl = c.controller;
  const brokers = c.brokers.map((b) => `<tr><td>${esc(b)}</td><td>${ctl && ctl.brokerId === b ? tag("controller", "ok") : ""}</td></tr>`);
  const bookies = c.bookies.map((b) => `<tr data-bookie="${esc(b.bookieId)}"><td>${esc(b.bookieId)}</td>
    <td>${b.readOnly ? tag("read-only", "bad") : tag("writable", "ok")}</td></tr>`);
  const bundles = c.bundles.map((b) => `<tr><td>${esc(b.namespace)}</td><td>${esc(b.bundle)}</td><td>${esc(b.brokerId ?? "–")}</td></tr>`);
  main.innerHTML = `<h1>Cluster ${esc(c.cluster)}</h1>
    <div class="cards">
      <div class="card"><div class="v">${c.brokers.length}</div><div class="k">brokers</div></div>
      <div class="card"><div class="v">${c.bookies.length}</div><div class="k">bookies</div></div>
      <div class="card"><div class="v" id="controller">${esc(ctl ? ctl.brokerId : c.clusterMode ? "none elected" : "standalone")}</div>
        <div class="k">controller${ctl ? " · epoch " + esc(ctl.epoch) : ""}</div></div>
    </div>
    <h2>Brokers</h2>${table(["Broker", ""], brokers, 'id="brokers"')}
    <h2>Bookies</h2>${table(["Bookie", "State"], bookies, 'id="bookies"')}
    <h2>Bundle ownership</h2>${table(["Namespace", "Bundle", "Owner"], bundles, 'id="bundles"')}`;
}

async function viewNamespace(tenant, ns) {
  const s = await loadSession();
  const entry = (s.tenants[tenant] || []).find((n) => n.name === `${tenant}/${ns}`);
  const crumbs = `<p class="crumbs"><a href="#/">namespaces</a> / ${esc(tenant)} / ${esc(ns)}</p>`;
  if (!entry || !entry.admin) {
    main.innerHTML = `${crumbs}<h1>${esc(tenant)}/${esc(ns)}</h1>
      <p class="muted">Listing topics needs tenant admin; open a topic by name:</p>
      <form id="open-topic" class="actions"><input id="topic-name" placeholder="topic"> <button>Open</button></form>`;
    document.getElementById("open-topic").addEventListener("submit", (e) => {
      e.preventDefault();
      const local = document.getElementById("topic-name").value.trim();
      if (local) location.hash = `#/topic/persistent/${tenant}/${ns}/${encodeURIComponent(local)}`;
    });
    return;
  }
  const names = await api(`/admin/v2/persistent/${tenant}/${ns}`);
  const owners = await Promise.all(names.map((n) => ownerOf(s, parseTopic(n))));
  const stats = await Promise.all(names.map((n, i) => (owners[i].local
    ? api(`/admin/v2/${parseTopic(n).path}/stats`).catch((e) => ({ error: e.message }))
    : null)));
  const rows = names.map((n, i) => {
    const t = parseTopic(n), st = stats[i];
    if (!st) return `<tr data-topic="${esc(n)}"><td>${esc(t.local)}</td><td colspan="6">${elsewhere(owners[i], t)}</td></tr>`;
    if (st.error) return `<tr><td>${esc(t.local)}</td><td colspan="6" class="error">${esc(st.error)}</td></tr>`;
    const backlog = Object.values(st.subscriptions || {}).reduce((a, x) => a + (x.msgBacklog || 0), 0);
    return `<tr data-topic="${esc(n)}"><td><a href="#/topic/${esc(t.path)}">${esc(t.local)}</a></td>
      <td class="num">${num(st.msgRateIn)}</td><td class="num">${num(st.msgRateOut)}</td>
      <td class="num">${bytes(st.storageSize)}</td><td class="num backlog">${num(backlog, 0)}</td>
      <td class="num">${age(st.oldestBacklogMessageAgeSeconds)}</td>
      <td class="num">${Object.keys(st.subscriptions || {}).length}</td></tr>`;
  });
  let functions = "";
  if (s.functions) {
    for (const kinds of ["functions", "sources", "sinks"]) {
      const list = await api(`/admin/v3/${kinds}/${tenant}/${ns}`).catch(() => []);
      if (!list.length && kinds !== "functions") continue;
      const statuses = await Promise.all(list.map((f) => api(`/admin/v3/${kinds}/${tenant}/${ns}/${encodeURIComponent(f)}/status`).catch((e) => ({ error: e.message }))));
      const frows = list.map((f, i) => {
        const st = statuses[i];
        if (st.error) return `<tr><td>${esc(f)}</td><td colspan="3" class="error">${esc(st.error)}</td></tr>`;
        const errors = (st.instances || []).map((x) => x.status?.error).filter(Boolean);
        return `<tr data-${kinds.slice(0, -1)}="${esc(f)}"><td>${esc(f)}</td>
          <td class="num">${num(st.numRunning, 0)} / ${num(st.numInstances, 0)}</td>
          <td>${(st.instances || []).map((x) => tag(`#${x.instanceId} ${x.status?.running ? "running" : "stopped"}`, x.status?.running ? "ok" : "bad")).join(" ")}</td>
          <td class="error">${esc(errors.join("; "))}</td></tr>`;
      });
      const title = kinds[0].toUpperCase() + kinds.slice(1);
      functions += `<h2>${title}</h2>${table([title.slice(0, -1), "#Running", "Instances", "Errors"], frows, `id="${kinds}"`)}`;
    }
  }
  main.innerHTML = `${crumbs}<h1>${esc(tenant)}/${esc(ns)}</h1>
    ${table(["Topic", "#In msg/s", "#Out msg/s", "#Storage", "#Backlog", "#Backlog age", "#Subs"], rows, 'id="topics"')}
    ${functions}`;
}

// The broker serving a topic: this one in a standalone, else as the cluster says.
function ownerOf(s, t) {
  if (!s.clusterMode) return Promise.resolve({ local: true });
  return api(`/admin/v2/console/owner/${t.path}`).catch((e) => ({ local: false, error: e.message }));
}

function elsewhere(owner, t) {
  if (owner.error) return `<span class="error">${esc(owner.error)}</span>`;
  return `served by broker <b class="owner">${esc(owner.brokerId)}</b>:
    <a href="${esc(owner.httpUrl)}/#/topic/${esc(t.path)}">open on its console</a>`;
}

async function viewTopic(domain, tenant, ns, localEncoded) {
  const local = decodeURIComponent(localEncoded);
  const t = parseTopic(`${domain}://${tenant}/${ns}/${local}`);
  const base = `/admin/v2/${t.path}`;
  const owner = await ownerOf(await loadSession(), t);
  if (!owner.local) {
    main.innerHTML = `<p class="crumbs"><a href="#/">namespaces</a> / <a href="#/ns/${esc(tenant)}/${esc(ns)}">${esc(tenant)}/${esc(ns)}</a></p>
      <h1 id="topic-title">${esc(t.full)}</h1><p id="topic-owner">${elsewhere(owner, t)}</p>`;
    return;
  }
  const [st, history] = await Promise.all([
    api(`${base}/stats`),
    api(`/admin/v2/console/history/${t.path}`).catch(() => ({ samples: [] })),
  ]);
  const subs = Object.entries(st.subscriptions || {});
  const backlog = subs.reduce((a, [, x]) => a + (x.msgBacklog || 0), 0);
  const subRows = subs.map(([name, x]) => {
    const consumers = (x.consumers || []).map((c) => `<tr><td>${esc(c.consumerName)}${x.activeConsumerName === c.consumerName && x.type === "Failover" ? " " + tag("active", "ok") : ""}</td>
      <td>${esc(c.address)}</td><td class="num">${num(c.msgRateOut)}</td><td class="num">${num(c.availablePermits, 0)}</td>
      <td class="num">${num(c.unackedMessages, 0)}</td><td class="num">${num(c.msgRateRedeliver)}</td></tr>`);
    return `<section class="panel" data-subscription="${esc(name)}">
      <h2>${esc(name)} ${tag(x.type)} ${x.activeConsumerName ? `<span class="muted">active consumer: <b class="active-consumer">${esc(x.activeConsumerName)}</b></span>` : ""}</h2>
      <div class="cards">
        <div class="card"><div class="v backlog">${num(x.msgBacklog, 0)}</div><div class="k">backlog (msgs)</div></div>
        <div class="card"><div class="v">${num(x.msgRateOut)}</div><div class="k">out msg/s</div></div>
        <div class="card"><div class="v">${num(x.unackedMessages, 0)}</div><div class="k">unacked</div></div>
        <div class="card"><div class="v">${num(x.msgRateRedeliver)}</div><div class="k">redeliveries/s</div></div>
      </div>
      ${table(["Consumer", "Address", "#Out msg/s", "#Permits", "#Unacked", "#Redeliver/s"], consumers)}
      <div class="actions sub-actions">
        <button class="danger" data-action="skip-all">Clear backlog</button>
        <label>reset to <input type="number" min="0" value="10" size="4" class="reset-minutes"> min ago</label>
        <button class="danger" data-action="reset">Reset cursor</button>
        <button data-action="peek">Peek first message</button>
      </div>
      <pre class="peek" hidden></pre></section>`;
  });
  const repl = Object.entries(st.replication || {}).map(([cluster, r]) => `<tr><td>${esc(cluster)}</td>
    <td>${r.connected ? tag("connected", "ok") : tag("disconnected", "bad")}</td>
    <td class="num">${num(r.replicationBacklog, 0)}</td><td class="num">${num(r.msgRateOut)}</td>
    <td class="num">${num(r.replicationDelayInSeconds, 0)}</td></tr>`);
  const offload = await api(`${base}/offload`).catch(() => null);
  main.innerHTML = `<p class="crumbs"><a href="#/">namespaces</a> / <a href="#/ns/${esc(tenant)}/${esc(ns)}">${esc(tenant)}/${esc(ns)}</a></p>
    <h1 id="topic-title">${esc(t.full)}</h1>
    <div class="cards">
      <div class="card"><div class="v">${num(st.msgRateIn)}</div><div class="k">in msg/s</div></div>
      <div class="card"><div class="v">${num(st.msgRateOut)}</div><div class="k">out msg/s</div></div>
      <div class="card"><div class="v" id="topic-backlog">${num(backlog, 0)}</div><div class="k">backlog (msgs)</div></div>
      <div class="card"><div class="v">${age(st.oldestBacklogMessageAgeSeconds)}</div><div class="k">oldest backlog</div></div>
      <div class="card"><div class="v">${bytes(st.storageSize)}</div><div class="k">storage</div></div>
      <div class="card"><div class="v">${bytes(st.offloadedStorageSize)}</div><div class="k">offloaded${offload ? " · " + esc(offload.status) : ""}</div></div>
      <div class="card"><div class="v">${num((st.publishers || []).length, 0)}</div><div class="k">producers</div></div>
    </div>
    <div class="actions"><button id="unload" class="danger">Unload topic</button>
      <span class="muted">closes it here; its next lookup loads it again (on any broker)</span></div>
    <h2>Last minutes</h2>
    <div class="charts">${chartBox("chart-rates", "Rates (msg/s)", [["in", "in"], ["out", "out"]])}
      ${chartBox("chart-backlog", "Backlog (msgs)", [["backlog", "backlog"]])}</div>
    <h2>Subscriptions</h2>${subRows.join("") || '<p class="muted">none</p>'}
    <h2>Replication</h2>${table(["Cluster", "State", "#Backlog", "#Out msg/s", "#Delay s"], repl)}`;
  const samples = history.samples || [];
  const css = getComputedStyle(document.documentElement);
  const color = (v) => css.getPropertyValue(v).trim();
  const rates = document.getElementById("chart-rates");
  const backlogChart = document.getElementById("chart-backlog");
  backlogChart.dataset.points = String(samples.length);
  backlogChart.dataset.backlog = samples.map((p) => p.msgBacklog).join(",");
  drawChart(rates, [
    { color: color("--in"), points: samples.map((p) => [p.timestamp, p.msgRateIn]) },
    { color: color("--out"), points: samples.map((p) => [p.timestamp, p.msgRateOut]) },
  ], "msg/s");
  drawChart(backlogChart, [{ color: color("--backlog"), points: samples.map((p) => [p.timestamp, p.msgBacklog]) }], "msgs");

  document.getElementById("unload").addEventListener("click", () => act(`Unload ${t.full}?`, () => api(`${base}/unload`, { method: "PUT" }), "unloaded"));
  for (const panel of main.querySelectorAll("section[data-subscription]")) {
    const sub = encodeURIComponent(panel.dataset.subscription);
    const subBase = `${base}/subscription/${sub}`;
    panel.querySelector('[data-action="skip-all"]').addEventListener("click", () => act(`Clear the backlog of ${panel.dataset.subscription}?`, () => api(`${subBase}/skip_all`, { method: "POST" }), "backlog cleared"));
    panel.querySelector('[data-action="reset"]').addEventListener("click", () => {
      const minutes = Number(panel.querySelector(".reset-minutes").value) || 0;
      const at = Date.now() - minutes * 60000;
      act(`Reset ${panel.dataset.subscription} to ${new Date(at).toISOString()}?`, () => api(`${subBase}/resetcursor/${at}`, { method: "POST" }), "cursor reset");
    });
    panel.querySelector('[data-action="peek"]').addEventListener("click", async () => {
      const out = panel.querySelector("pre.peek");
      try {
        const res = await api(`${subBase}/position/1`, { raw: true });
        const body = new Uint8Array(await res.arrayBuffer());
        const text = new TextDecoder("utf-8", { fatal: false }).decode(body.slice(0, 4096));
        const id = res.headers.get("X-Pulsar-Message-ID") || "";
        out.textContent = `${id}\n${text.replace(/[^\x20-\x7e\n\t\u00a0-\uffff]/g, ".")}`;
      } catch (e) {
        out.textContent = e.message;
      }
      out.hidden = false;
    });
  }
}

async function act(question, call, done) {
  if (!window.confirm(question)) return;
  try {
    await call();
    toast(done);
  } catch (e) {
    toast(e.message, true);
  }
  route();
}

// ---- routing ------------------------------------------------------------------------------

const ROUTES = [
  [/^#?\/?$/, viewNamespaces, "namespaces"],
  [/^#\/cluster$/, viewCluster, "cluster"],
  [/^#\/ns\/([^/]+)\/([^/]+)$/, viewNamespace, "namespaces"],
  [/^#\/topic\/(persistent|non-persistent)\/([^/]+)\/([^/]+)\/(.+)$/, viewTopic, "namespaces"],
];

async function route() {
  clearTimeout(refreshTimer);
  const hash = location.hash || "#/";
  const found = ROUTES.find(([re]) => re.test(hash));
  if (!found) { main.innerHTML = '<p class="error">No such page.</p>'; return; }
  const [re, view, nav] = found;
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.view === nav);
  try {
    await view(...re.exec(hash).slice(1));
    document.body.dataset.loaded = String(Date.now());
  } catch (e) {
    main.innerHTML = `<p class="error" id="view-error">${esc(e.message)}</p>`;
  }
  if (nav === "namespaces" && hash !== "#/") refreshLater();
}

// Refreshes the topic and namespace views while the tab is visible and no peeked message
// is shown: a hidden tab asks nothing, so the broker's history sampler stops.
function refreshLater() {
  const paused = () => document.hidden || main.querySelector("pre.peek:not([hidden])");
  refreshTimer = setTimeout(() => (paused() ? refreshLater() : route()), REFRESH_MS);
}

window.addEventListener("hashchange", route);
route();
