// lakelog's web console: plain JavaScript over the server's HTTP API (no build step, no network but this server).
"use strict";

const BASE = location.pathname.replace(/\/ui(\/.*)?$/, "");  // the server's prefix (empty unless proxied)
const KEY_STORE = "lakelog.apiKey";
const REFRESH_MS = 5000;
const COLOURS = ["#0b6bcb", "#d9480f", "#2b8a3e", "#862e9c", "#c92a2a", "#1098ad", "#e67700", "#5c940d"];

const view = document.getElementById("view");
const statusBox = document.getElementById("status");
const series = new Map();  // plot name -> Map(line name -> [[time ms, value]]), from the server's history
let refreshTimer = null;

// ---- API -----------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.code = body && body.error_code;
  }
}

function apiKey() { return sessionStorage.getItem(KEY_STORE) || ""; }

async function api(path, options = {}) {
  const headers = Object.assign({}, options.headers || {});
  if (apiKey()) headers["Authorization"] = "Bearer " + apiKey();
  const response = await fetch(BASE + path, Object.assign({}, options, { headers }));
  const text = await response.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (e) { body = { message: text }; }
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

const enc = encodeURIComponent;

// ---- DOM helpers (text only: record contents never become HTML) ----------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function table(id, columns, rows, empty) {
  // columns: [label, {num: true}?]; rows: arrays of cells (text or nodes)
  const head = el("tr", {}, columns.map(([label, opts]) => el("th", { class: opts && (opts.num ? "num" : opts.th) }, label)));
  const body = rows.length
    ? rows.map((cells) => el("tr", {}, cells.map((cell, i) => {
        const opts = columns[i][1] || {};
        return el("td", { class: opts.num ? "num" : opts.cls || null }, cell);
      })))
    : [el("tr", {}, el("td", { colspan: columns.length, class: "muted" }, empty || "none"))];
  return el("table", { id }, el("thead", {}, head), el("tbody", {}, body));
}

function replace(id, node) {
  const old = document.getElementById(id);
  if (old) old.replaceWith(node);
}

function showError(error) {
  let text = error.message || String(error);
  if (error.status === 401) text = "This server needs an API key: enter it above. (" + text + ")";
  else if (error.status === 403) text = "Not allowed with this API key: " + text;
  else if (error.code) text = error.code + ": " + text;
  statusBox.textContent = text;
  statusBox.className = "error";
}

function clearError() { statusBox.textContent = ""; statusBox.className = ""; }

function formatBytes(n) {
  if (n < 1024) return n + " B";
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let value = n / 1024, unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return value.toFixed(1) + " " + units[unit];
}

function formatTime(ms) { return new Date(ms).toISOString().replace("T", " ").replace("Z", ""); }

function encoded(value, encoding) {
  if (value === null || value === undefined) return el("span", { class: "muted" }, "null");
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return encoding ? [text, el("span", { class: "enc" }, encoding)] : text;
}

// ---- plots: the server's history (GET .../history), drawn as SVG ---------------------------------
// The node that leads a topic (coordinates a group) samples it every few seconds and keeps an hour, so a page
// just opened plots the last hour at once; each refresh then asks only for the samples since the last one.

function extend(plot, answer, lines, fresh) {
  // lines: Map(line name -> values aligned with answer.times_ms, null where not sampled); fresh: start over
  if (fresh || !series.has(plot)) series.set(plot, new Map());
  const plotted = series.get(plot);
  const times = answer.times_ms;
  for (const [name, values] of lines) {
    if (!plotted.has(name)) plotted.set(name, []);
    const points = plotted.get(name);
    values.forEach((value, i) => { if (value !== null) points.push([times[i], value]); });
  }
  const oldest = (times.length ? times[times.length - 1] : Date.now()) - answer.window_ms;
  for (const points of plotted.values()) {
    const kept = points.findIndex((p) => p[0] > oldest);
    points.splice(0, kept < 0 ? points.length : kept);
  }
}

function historyPoller(path) {
  // The history since the last sample seen (all of it the first time); `fresh` tells the first answer.
  let since = null;
  return async () => {
    const fresh = since === null;
    const answer = await api(path + (fresh ? "" : `?since_ms=${since}`));
    if (answer.times_ms.length) since = answer.times_ms[answer.times_ms.length - 1];
    return [answer, fresh];
  };
}

function formatRate(v) { return (v >= 100 ? v.toFixed(0) : v.toFixed(1)) + "/s"; }

function chart(id, title, plot, format) {
  const width = 460, height = 150, pad = { left: 58, right: 10, top: 10, bottom: 22 };
  const lines = series.get(plot) || new Map();
  const all = [...lines.values()].flat();
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("width", width); svg.setAttribute("height", height);
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const add = (tag, attrs, text) => {
    const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    svg.append(node);
  };
  add("rect", { x: pad.left, y: pad.top, width: width - pad.left - pad.right, height: height - pad.top - pad.bottom,
                fill: "none", stroke: "#dde1e8" });
  const legend = el("div", { class: "legend" });
  // loops, not Math.min(...all): an hour of many partitions is more arguments than a call takes
  const least = (i, start) => all.reduce((m, p) => Math.min(m, p[i]), start);
  const most = (i, start) => all.reduce((m, p) => Math.max(m, p[i]), start);
  const t0 = all.length ? least(0, Infinity) : null;
  if (all.length) {
    const t1 = most(0, t0 + 1);
    const v0 = least(1, 0), v1 = most(1, v0 + 1);
    const x = (t) => pad.left + (t - t0) / (t1 - t0) * (width - pad.left - pad.right);
    const y = (v) => height - pad.bottom - (v - v0) / (v1 - v0) * (height - pad.top - pad.bottom);
    add("text", { x: pad.left - 4, y: pad.top + 10, "text-anchor": "end", "font-size": 10 }, format(v1));
    add("text", { x: pad.left - 4, y: height - pad.bottom, "text-anchor": "end", "font-size": 10 }, format(v0));
    add("text", { x: pad.left, y: height - 6, "font-size": 10 }, new Date(t0).toLocaleTimeString());
    add("text", { x: width - pad.right, y: height - 6, "text-anchor": "end", "font-size": 10 },
        new Date(t1).toLocaleTimeString());
    [...lines.entries()].forEach(([name, points], i) => {
      const colour = COLOURS[i % COLOURS.length];
      const coords = points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`);
      if (points.length === 1) add("circle", { cx: x(points[0][0]), cy: y(points[0][1]), r: 2.5, fill: colour });
      else if (points.length > 1) add("polyline", { points: coords.join(" "), fill: "none", stroke: colour, "stroke-width": 1.5 });
      legend.append(el("span", { style: `color:${colour}` }, "● " + name));
    });
  }
  // data-from: the oldest point's time, data-points: how many (for tests and anyone inspecting the page)
  return el("figure", { class: "chart", id, "data-from": t0, "data-points": all.length },
            el("figcaption", {}, title), svg, legend);
}

// ---- pages ----------------------------------------------------------------------------------------

async function topicsPage() {
  view.replaceChildren(el("h1", {}, "Topics"), el("table", { id: "topics" }));
  return async () => {
    const { topics } = await api("/v1/topics");
    const details = await Promise.all(topics.map((t) => api("/v1/topics/" + enc(t.name))));
    replace("topics", table("topics",
      [["Topic"], ["Partitions", { num: true }], ["Log start offsets"], ["Log end offsets"],
       ["Records", { num: true }], ["Size", { num: true }]],
      details.map((d) => [
        el("a", { href: "#/topics/" + enc(d.name) }, d.name),
        d.partitions.length,
        d.partitions.map((p) => p.log_start_offset).join(", "),
        d.partitions.map((p) => p.log_end_offset).join(", "),
        d.partitions.reduce((n, p) => n + p.log_end_offset - p.log_start_offset, 0),
        formatBytes(d.partitions.reduce((n, p) => n + p.size_bytes, 0)),
      ]), "no topics (or none you may describe)"));
  };
}

async function topicPage(name) {
  const browser = el("form", { class: "inline", id: "browse" },
    el("label", {}, "Partition", el("select", { id: "browse-partition" })),
    el("label", {}, "From offset", el("input", { id: "browse-offset", type: "number", min: 0, size: 8,
                                                   placeholder: "latest" })),
    el("label", {}, "Records", el("input", { id: "browse-max", type: "number", min: 1, max: 500, value: 20 })),
    el("label", {}, "Value as", el("select", { id: "browse-format" },
      el("option", { value: "string" }, "text"), el("option", { value: "base64" }, "base64"),
      el("option", { value: "json" }, "JSON"))),
    el("button", { type: "submit", id: "browse-go" }, "Show records"));
  const producer = el("form", { class: "inline", id: "produce" },
    el("label", {}, "Key", el("input", { id: "produce-key", size: 14 })),
    el("label", {}, "Value", el("input", { id: "produce-value", size: 30 })),
    el("button", { type: "submit" }, "Produce"), el("span", { id: "produce-result", class: "muted" }));
  view.replaceChildren(
    el("h1", {}, "Topic ", el("span", { id: "topic-name" }, name)),
    el("h2", {}, "Partitions"), el("table", { id: "partitions" }),
    el("div", { class: "charts" }, el("figure", { id: "rate-chart" }), el("figure", { id: "size-chart" })),
    el("h2", {}, "Records"), browser, el("table", { id: "records" }),
    el("h2", {}, "Produce a record"), producer,
    el("h2", {}, "Config"), el("table", { id: "config" }));
  let described = null, filled = false;
  const history = historyPoller(`/v1/topics/${enc(name)}/history`);

  async function browse() {
    const partition = Number(document.getElementById("browse-partition").value || 0);
    const max = Math.max(1, Math.min(500, Number(document.getElementById("browse-max").value) || 20));
    const format = document.getElementById("browse-format").value;
    const info = described.partitions.find((p) => p.partition === partition);
    const asked = document.getElementById("browse-offset").value;
    const offset = asked === "" ? Math.max(info.log_start_offset, info.log_end_offset - max) : Number(asked);
    const answer = await api(`/v1/topics/${enc(name)}/partitions/${partition}/records?offset=${offset}`
                             + `&max_records=${max}&timeout_ms=0` + recordsQuery(isTyped(described), format));
    // records.js: a typed topic's records by field, any other's as key and value
    replace("records", recordsTable(answer, `no records in partition ${partition} from offset ${offset}`));
  }

  browser.addEventListener("submit", (e) => { e.preventDefault(); browse().then(clearError, showError); });
  producer.addEventListener("submit", (e) => {
    e.preventDefault();
    const key = document.getElementById("produce-key").value;
    const record = { value: document.getElementById("produce-value").value };
    if (key !== "") record.key = key;
    api(`/v1/topics/${enc(name)}/records`, {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ records: [record] }),
    }).then((answer) => {
      const o = answer.offsets[0];
      document.getElementById("produce-result").textContent = `written to partition ${o.partition} at offset ${o.offset}`;
      clearError();
    }, showError);
  });

  return async () => {
    const [[answer, fresh], topic] = await Promise.all([history(), api("/v1/topics/" + enc(name))]);
    described = topic;
    // records/s: the log end offset's change between two samples, worked out by the server
    extend("rate:" + name, answer, new Map(answer.partitions.map((p) => ["p" + p.partition, p.records_per_s])), fresh);
    extend("size:" + name, answer, new Map(answer.partitions.map((p) => ["p" + p.partition, p.size_bytes])), fresh);
    replace("partitions", table("partitions",
      [["Partition", { num: true }], ["Log start offset", { num: true }], ["Log end offset", { num: true }],
       ["Records", { num: true }], ["Size", { num: true }]],
      described.partitions.map((p) => [p.partition, p.log_start_offset, p.log_end_offset,
                                       p.log_end_offset - p.log_start_offset, formatBytes(p.size_bytes)])));
    replace("rate-chart", chart("rate-chart", "Produce rate per partition (records/s, last hour)", "rate:" + name,
                                formatRate));
    replace("size-chart", chart("size-chart", "Size per partition (last hour)", "size:" + name, formatBytes));
    replace("config", table("config", [["Key"], ["Value"]],
      Object.entries(described.config).sort().map(([k, v]) => [k, String(v)])));
    const select = document.getElementById("browse-partition");
    if (select.options.length !== described.partitions.length) {
      const chosen = select.value;
      select.replaceChildren(...described.partitions.map((p) => el("option", { value: p.partition }, p.partition)));
      if (chosen) select.value = chosen;
    }
    if (!filled) {  // the latest records of the first partition with any
      filled = true;
      const first = described.partitions.find((p) => p.log_end_offset > p.log_start_offset);
      if (first) select.value = first.partition;
      await browse();
    }
  };
}

async function groupsPage() {
  view.replaceChildren(el("h1", {}, "Consumer groups"), el("table", { id: "groups" }));
  return async () => {
    const { groups } = await api("/v1/groups");
    const details = await Promise.all(groups.map((g) => api("/v1/groups/" + enc(g.group))));
    replace("groups", table("groups",
      [["Group"], ["Type"], ["State"], ["Members", { num: true }], ["Topics"], ["Lag", { num: true }]],
      details.map((d) => [
        el("a", { href: "#/groups/" + enc(d.group) }, d.group), d.type, d.state, d.members.length,
        [...new Set(d.offsets.map((o) => o.topic))].join(", "),
        d.offsets.reduce((n, o) => n + (o.lag || 0), 0),
      ]), "no consumer groups (or none you may describe)"));
  };
}

async function groupPage(name) {
  view.replaceChildren(
    el("h1", {}, "Consumer group ", el("span", { id: "group-name" }, name)),
    el("p", { id: "group-state" }),
    el("h2", {}, "Members"), el("table", { id: "members" }),
    el("h2", {}, "Committed offsets and lag"), el("table", { id: "offsets" }),
    el("div", { class: "charts" }, el("figure", { id: "lag-chart" })));
  const history = historyPoller(`/v1/groups/${enc(name)}/history`);
  return async () => {
    const [[answer, fresh], d] = await Promise.all([history(), api("/v1/groups/" + enc(name))]);
    document.getElementById("group-state").textContent =
      `State ${d.state} · generation ${d.generation} · assignor ${d.assignor || "-"}`;
    const tp = (list) => list.map((a) => `${a.topic}-${a.partition}`).join(", ");
    replace("members", table("members",
      [["Member"], ["Instance id"], ["Subscription"], ["Assignment"], ["Revoking"], ["Last heartbeat", { num: true }]],
      d.members.map((m) => [m.member_id, m.group_instance_id || "-", m.pattern ? `/${m.pattern}/` : m.topics.join(", "),
                            tp(m.assignment), tp(m.revoking), `${m.last_heartbeat_ms_ago} ms ago`]),
      "no members"));
    const owner = new Map();
    for (const m of d.members) for (const a of m.assignment) owner.set(`${a.topic}-${a.partition}`, m.member_id);
    replace("offsets", table("offsets",
      [["Topic"], ["Partition", { num: true }], ["Committed offset", { num: true }], ["Lag", { num: true }],
       ["Member"]],
      d.offsets.map((o) => [o.topic, o.partition, o.offset, o.lag === null ? "-" : o.lag,
                            owner.get(`${o.topic}-${o.partition}`) || "-"]),
      "no committed offsets"));
    extend("lag:" + name, answer, new Map(answer.partitions.map((p) => [`${p.topic}-${p.partition}`, p.lag])), fresh);
    replace("lag-chart", chart("lag-chart", "Lag per partition (last hour)", "lag:" + name, String));
  };
}

async function jobsPage() {
  view.replaceChildren(
    el("h1", {}, "Jobs"),
    el("h2", {}, "Last runs"), el("p", { id: "jobs-note", class: "muted" }), el("table", { id: "job-runs" }),
    el("h2", {}, "Nodes"), el("table", { id: "nodes" }),
    el("h2", {}, "Replica sites"), el("table", { id: "sites" }));
  return async () => {
    const [cluster, jobs] = await Promise.all([api("/v1/cluster"), api("/v1/jobs").catch((error) => error)]);
    const leads = (node) => Object.entries(cluster.topics).filter(([, n]) => n === node).map(([t]) => t);
    replace("nodes", table("nodes",
      [["Node"], ["Address"], ["Kafka"], ["State"], ["Leads topics"], ["Coordinates groups", { num: true }]],
      cluster.nodes.map((n) => [n.node_id, n.address, n.kafka || "-", n.node_id === cluster.node ? "live (this node)" : "live",
                                leads(n.node_id).join(", ") || "-",
                                Object.values(cluster.groups).filter((g) => g === n.node_id).length]),
      "no cluster membership"));
    replace("sites", table("sites", [["Site"], ["Control tables"], ["Leads topics"], ["Out of sync"]],
      cluster.sites.map((s) => [s.name, s.control ? "yes" : "-", s.leads.join(", ") || "-",
                                s.out_of_sync.join(", ") || "-"]),
      "no replica sites configured (one root)"));
    const note = document.getElementById("jobs-note");
    if (jobs instanceof Error) {  // e.g. no describe right on the cluster: the nodes still show
      note.textContent = (jobs.status === 403 ? "Not allowed with this API key: " : "") + jobs.message;
      replace("job-runs", table("job-runs", [["Job"]], [], "not available"));
      return;
    }
    note.textContent = "Recorded by the job scheduler of `lakelog serve` after each round.";
    replace("job-runs", table("job-runs",
      [["Job"], ["Started"], ["Duration", { num: true }], ["Result"], ["Topics"], ["Commits", { num: true }],
       ["Files removed", { num: true }], ["Files added", { num: true }], ["Bytes removed", { num: true }],
       ["Records in → out", { num: true }], ["Files deleted", { num: true }]],
      jobs.runs.map((r) => [r.job, formatTime(r.started_ms), r.seconds.toFixed(1) + " s", r.ok ? "ok" : "failed",
                            r.topics || "-", r.commits, r.files_removed, r.files_added, formatBytes(r.bytes_removed),
                            `${r.records_in} → ${r.records_out}`, r.files_deleted]),
      "no runs recorded yet (the scheduler runs every few minutes while `lakelog serve` is up)"));
  };
}

// ---- routing, refresh, API key --------------------------------------------------------------------

const ROUTES = [
  [/^#\/topics\/(.+)$/, (m) => topicPage(decodeURIComponent(m[1])), "nav-topics"],
  [/^#\/groups\/(.+)$/, (m) => groupPage(decodeURIComponent(m[1])), "nav-groups"],
  [/^#\/groups$/, () => groupsPage(), "nav-groups"],
  [/^#\/share-groups\/(.+)$/, (m) => shareGroupPage(decodeURIComponent(m[1])), "nav-share-groups"],  // share_groups.js
  [/^#\/share-groups$/, () => shareGroupsPage(), "nav-share-groups"],
  [/^#\/jobs$/, () => jobsPage(), "nav-jobs"],
  [/^(#\/topics)?$|^#?\/?$/, () => topicsPage(), "nav-topics"],
];

async function route() {
  clearInterval(refreshTimer);
  clearError();
  const hash = location.hash;
  const [pattern, page, nav] = ROUTES.find(([re]) => re.test(hash)) || ROUTES[ROUTES.length - 1];
  for (const link of document.querySelectorAll("header nav a")) link.classList.toggle("active", link.id === nav);
  const refresh = await page(hash.match(pattern) || []);
  const tick = () => refresh().then(clearError, showError);
  await tick();
  document.body.dataset.loaded = "true";
  refreshTimer = setInterval(tick, REFRESH_MS);
}

function showKeyState() {
  document.getElementById("auth-state").textContent = apiKey() ? "key set" : "no key";
}

document.getElementById("auth").addEventListener("submit", (e) => {
  e.preventDefault();
  const input = document.getElementById("api-key");
  if (input.value) sessionStorage.setItem(KEY_STORE, input.value);
  input.value = "";
  showKeyState();
  route();
});
document.getElementById("forget-key").addEventListener("click", () => {
  sessionStorage.removeItem(KEY_STORE);
  showKeyState();
  route();
});
window.addEventListener("hashchange", route);
showKeyState();
route();
