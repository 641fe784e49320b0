// Jobwire dashboard. Plain JavaScript, no dependencies. Every value that came from the broker
// is put on the page as text (textContent, createTextNode) and never parsed as HTML, so a
// payload, job type or error message cannot run script here.
"use strict";

const REFRESH_MS = 2000;
const state = { role: "viewer", auth: false, page: null, timer: null, busy: false, paged: 0 };

// ---- DOM helpers -------------------------------------------------------------------------

// el builds an element. attrs sets properties (on* are listeners, "class" the class name);
// children are nodes or strings, and strings always become text nodes.
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else if (k === "dataset") Object.assign(e.dataset, v);
    else e[k] = v;
  }
  append(e, children);
  return e;
}

function append(parent, children) {
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    parent.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); return e; }

function table(headers, rows, empty) {
  const head = el("tr", {}, headers.map((h) => {
    const [label, cls] = Array.isArray(h) ? h : [h, ""];
    return el("th", { class: cls }, label);
  }));
  const body = rows.length ? rows : [el("tr", {}, el("td", { colSpan: headers.length, class: "muted" }, empty || "None."))];
  return el("table", {}, el("thead", {}, head), el("tbody", {}, body));
}

function td(v, cls) { return el("td", { class: cls }, v); }
function num(v) { return td(fmtNum(v), "num"); }
function badge(text, cls) { return el("span", { class: "badge " + (cls || text) }, text); }
function isAdmin() { return state.role === "admin"; }
function adminButton(label, onclick, cls) { return isAdmin() ? el("button", { type: "button", class: cls, onclick }, label) : null; }
// jobLink links to a job's page, its id the text unless text is given.
function jobLink(id, text) { return el("a", { href: "#/job/" + encodeURIComponent(id), dataset: { job: id } }, text ?? String(id)); }

// ---- formatting --------------------------------------------------------------------------

function fmtNum(v) { return Number(v || 0).toLocaleString("en-US"); }
function short(enumName, prefix) { return String(enumName || "").replace(prefix, ""); }
function jobState(s) { return short(s, "JOB_STATE_"); }
function fmtTime(ts) {
  if (!ts) return "";
  const d = new Date(ts);
  return isNaN(d) ? String(ts) : d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}
function seconds(dur) { return dur ? parseFloat(String(dur)) : 0; }
function fmtDur(dur) {
  let s = seconds(dur);
  if (s < 1) return s ? (s * 1000).toFixed(0) + "ms" : "0s";
  if (s < 120) return s.toFixed(s < 10 ? 1 : 0) + "s";
  if (s < 7200) return (s / 60).toFixed(0) + "m";
  return (s / 3600).toFixed(1) + "h";
}
// decodePayload turns protobuf JSON bytes (base64) into text, pretty-printed when it is JSON.
function decodePayload(b64) {
  if (!b64) return { text: "", json: false };
  let text;
  try {
    const bin = atob(b64);
    const bytes = Uint8Array.from(bin, (c) => c.charCodeAt(0));
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch (e) {
    return { text: "(" + atob(b64).length + " bytes of binary data, base64) " + b64, json: false, binary: true };
  }
  try { return { text: JSON.stringify(JSON.parse(text), null, 2), json: true }; } catch (e) { return { text, json: false }; }
}
function encodePayload(text) {
  const bytes = new TextEncoder().encode(text);
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin);
}

// ---- API ---------------------------------------------------------------------------------

async function answer(res) {
  if (res.status === 401) { location.href = "/login"; throw new Error("not logged in"); }
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(body.error || res.status + " " + res.statusText);
  return body;
}
async function read(method, req) {
  const q = req ? "?req=" + encodeURIComponent(JSON.stringify(req)) : "";
  return answer(await fetch("/api/rpc/" + method + q, { credentials: "same-origin" }));
}
async function write(method, req) {
  return answer(await fetch("/api/rpc/" + method, {
    method: "POST", credentials: "same-origin",
    headers: { "Content-Type": "application/json" }, body: JSON.stringify(req || {}),
  }));
}
function showError(err) {
  const box = document.getElementById("error");
  if (!err) { box.hidden = true; return; }
  box.textContent = String(err.message || err);
  box.hidden = false;
}
// act runs an admin action, shows its error, and refreshes the page.
async function act(fn) {
  try { await fn(); showError(null); } catch (e) { showError(e); }
  await refresh();
}

// ---- pages -------------------------------------------------------------------------------
// Each page has render(main, arg), which builds the parts that stay (filters, forms), and
// refresh(), which redraws the data and runs again every REFRESH_MS while "live" is on.

const pages = {};

pages.overview = {
  render(main) {
    this.graph = el("div");
    this.totals = el("div", { class: "cards" });
    this.queues = el("div");
    this.breakers = el("div");
    this.brokers = el("div");
    append(main, [el("h1", {}, "Overview"),
      el("section", {}, el("h2", {}, "Throughput, last minutes (per second, averaged over a minute)"), this.graph),
      el("h2", {}, "Jobs by state"), this.totals,
      el("section", {}, el("h2", {}, "Queues"), this.queues),
      el("section", {}, el("h2", {}, "Breakers not closed"), this.breakers),
      el("section", {}, el("h2", {}, "Brokers serving the database"), this.brokers)]);
  },
  async refresh() {
    const [stats, tp, br, bk] = await Promise.all([read("GetStats"), answer(await fetch("/api/throughput")), read("ListBreakers"), read("ListBrokers")]);
    clear(this.graph).appendChild(throughputGraph(tp.samples || []));
    const byState = {};
    for (const c of stats.counts || []) byState[jobState(c.state)] = (byState[jobState(c.state)] || 0) + Number(c.count);
    clear(this.totals);
    for (const s of ["PENDING", "SCHEDULED", "WAITING", "LEASED", "RUNNING", "SUCCEEDED", "DEAD", "CANCELLED"]) {
      append(this.totals, [el("div", { class: "stat", dataset: { state: s } }, el("div", { class: "n" }, fmtNum(byState[s])), el("div", { class: "l" }, s))]);
    }
    clear(this.queues).appendChild(queueTable(stats.queues || [], false));
    const open = (br.breakers || []).filter((b) => short(b.state, "BREAKER_STATE_") !== "CLOSED");
    clear(this.breakers).appendChild(table(["Job type", "State", "Failures in window", "Next probe"],
      open.map((b) => el("tr", { class: "alert" }, td(b.type), td(badge(short(b.state, "BREAKER_STATE_"))), num(b.failures_in_window), td(fmtTime(b.next_probe_at)))),
      "Every breaker is closed."));
    // A broker that stopped or died stays listed, not alive, until the leader forgets it.
    clear(this.brokers).appendChild(table(["Broker", "Address", "Host", ["PID", "num"], "Started", "Last seen", "Role", "State"],
      (bk.brokers || []).map((b) => el("tr", { class: b.alive ? "" : "alert", dataset: { broker: b.id || "-", leader: b.leader ? "1" : "0" } },
        td(el("span", {}, b.id || "-", b.answering ? " (this one)" : "")), td(b.addr || "-"), td(b.host || "-"), num(b.pid),
        td(fmtTime(b.started_at)), td(fmtTime(b.last_seen)), td(b.leader ? badge("leader", "CLOSED") : "follower"),
        td(b.alive ? "alive" : badge("not seen", "OPEN")))),
      "No broker listed."));
  },
};

// throughputGraph draws enqueued, succeeded and failed per second as lines in an SVG, each
// averaged by the broker's sampler over the same trailing minute, against a clock-time axis.
function throughputGraph(samples) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "graph");
  svg.setAttribute("viewBox", "0 0 800 230");
  svg.setAttribute("preserveAspectRatio", "none");
  const series = [
    { name: "enqueued", key: "enqueued_per_second", color: "#2457c5", pts: [] },
    { name: "succeeded", key: "succeeded_per_second", color: "#1a7f37", pts: [] },
    { name: "failed", key: "failed_per_second", color: "#b42318", pts: [] },
  ];
  for (const smp of samples) {
    const t = new Date(smp.at).getTime();
    if (isNaN(t)) continue;
    for (const s of series) s.pts.push([t, Number(smp[s.key] || 0)]);
  }
  const all = series.flatMap((s) => s.pts);
  const line = (x1, y1, x2, y2) => {
    const l = document.createElementNS(ns, "line");
    for (const [k, v] of Object.entries({ x1, y1, x2, y2 })) l.setAttribute(k, v);
    l.setAttribute("class", "axis");
    return l;
  };
  const text = (x, y, s, anchor) => {
    const t = document.createElementNS(ns, "text");
    t.setAttribute("x", x); t.setAttribute("y", y);
    if (anchor) t.setAttribute("text-anchor", anchor);
    t.textContent = s;
    return t;
  };
  svg.appendChild(line(40, 200, 790, 200));
  svg.appendChild(line(40, 10, 40, 200));
  if (all.length === 0) {
    svg.appendChild(text(60, 110, "Collecting samples…"));
  } else {
    const t0 = Math.min(...all.map((p) => p[0])), t1 = Math.max(...all.map((p) => p[0]));
    const ymax = Math.max(1, ...all.map((p) => p[1]));
    const x = (t) => 40 + (t1 === t0 ? 750 : ((t - t0) / (t1 - t0)) * 750);
    const y = (v) => 200 - (v / ymax) * 185;
    svg.appendChild(text(2, 18, ymax.toFixed(ymax < 10 ? 1 : 0)));
    svg.appendChild(text(2, 200, "0"));
    // The time axis: ticks at the start, the end and three points between, in UTC as every
    // other time on the dashboard.
    const ticks = t1 === t0 ? [t0] : [0, 1, 2, 3, 4].map((i) => t0 + ((t1 - t0) * i) / 4);
    const axis = document.createElementNS(ns, "g");
    axis.setAttribute("class", "time-axis");
    ticks.forEach((t, i) => {
      axis.appendChild(line(x(t), 200, x(t), 205));
      const anchor = ticks.length === 1 ? "start" : i === 0 ? "start" : i === ticks.length - 1 ? "end" : "middle";
      axis.appendChild(text(x(t), 220, new Date(t).toISOString().slice(11, 19), anchor));
    });
    axis.appendChild(text(790, 10, "UTC", "end"));
    svg.appendChild(axis);
    for (const s of series) {
      const p = document.createElementNS(ns, "polyline");
      p.setAttribute("points", s.pts.map((q) => x(q[0]).toFixed(1) + "," + y(q[1]).toFixed(1)).join(" "));
      p.setAttribute("fill", "none");
      p.setAttribute("stroke", s.color);
      p.setAttribute("stroke-width", "2");
      p.dataset.series = s.name;
      svg.appendChild(p);
    }
  }
  const legend = el("div", { class: "legend" }, series.map((s) => {
    const i = el("i");
    i.style.background = s.color;
    const last = s.pts.length ? s.pts[s.pts.length - 1][1] : 0;
    return el("span", {}, i, s.name + " " + last.toFixed(1) + "/s");
  }));
  return el("div", {}, svg, legend);
}

function queueTable(queues, actions) {
  const rows = queues.map((q) => {
    const d = q.depth_by_state || {};
    const cap = q.concurrency_limit ? " / " + q.concurrency_limit : "";
    const cells = [td(el("span", {}, q.name, " ", q.paused ? badge("paused") : null)),
      num(d.PENDING), num(d.SCHEDULED), td(fmtNum(q.running) + cap, "num"), td(q.oldest_ready_age ? fmtDur(q.oldest_ready_age) : "-", "num"), num(d.DEAD)];
    if (actions) {
      const limit = el("input", { type: "number", min: 0, value: q.concurrency_limit || 0, size: 5, ariaLabel: "limit of " + q.name });
      cells.push(td(isAdmin() ? el("span", { class: "row" },
        q.paused ? adminButton("Resume", () => act(() => write("ResumeQueue", { queue: q.name })))
          : adminButton("Pause", () => act(() => write("PauseQueue", { queue: q.name }))),
        limit, adminButton("Set limit", () => act(() => write("SetQueueLimit", { queue: q.name, limit: Number(limit.value) })))) : ""));
    }
    return el("tr", { dataset: { queue: q.name } }, cells);
  });
  const headers = ["Queue", ["Ready", "num"], ["Scheduled", "num"], ["Running / cap", "num"], ["Oldest ready", "num"], ["Dead", "num"]];
  if (actions) headers.push("");
  return table(headers, rows, "No queues yet.");
}

pages.queues = {
  render(main) {
    this.list = el("div");
    this.keys = el("div", { id: "concurrency" });
    append(main, [el("h1", {}, "Queues"), el("section", {}, this.list),
      el("section", {}, el("h2", {}, "Concurrency per key"), this.keys)]);
  },
  async refresh() {
    const [res, keys] = await Promise.all([read("ListQueues"), read("ListConcurrencyRules")]);
    clear(this.list).appendChild(queueTable(res.queues || [], true));
    clear(this.keys).appendChild(concurrencyView(keys.rules || []));
  },
};

// concurrencyView is the limits of running jobs per key, with how busy their keys are, and
// for an admin the form that adds or replaces one and a button that removes each.
function concurrencyView(rules) {
  const rows = rules.map((r) => {
    const p = r.rule || null;
    const name = p ? p.name : "(producers' keys)";
    return el("tr", { dataset: { rule: name } }, [td(name), td(p ? p.type || "any" : "-"), td(p ? p.queue || "any" : "-"),
      td(p ? p.key : "-"), td(p ? String(p.max_running) : "per job", "num"), num(r.keys), num(r.keys_at_limit), num(r.running), num(r.waiting),
      td(p ? adminButton("Remove", () => act(() => write("RemoveConcurrencyRule", { name: p.name }))) : "")]);
  });
  const out = el("div", {}, table(["Rule", "Type", "Queue", "Key", ["Max running", "num"], ["Keys", "num"], ["At limit", "num"],
    ["Running", "num"], ["Waiting", "num"], ""], rows, "No concurrency rules."));
  if (isAdmin()) {
    const f = {
      name: el("input", { placeholder: "name", ariaLabel: "rule name" }),
      type: el("input", { placeholder: "type (any)", ariaLabel: "rule type" }),
      key: el("input", { placeholder: "payload.customer_id", ariaLabel: "rule key" }),
      max: el("input", { type: "number", min: 1, value: 1, size: 5, ariaLabel: "max running" }),
    };
    out.appendChild(el("form", { class: "row", onsubmit: (e) => {
      e.preventDefault();
      act(() => write("SetConcurrencyRule", { rule: { name: f.name.value.trim(), type: f.type.value.trim(), key: f.key.value.trim(),
        max_running: Number(f.max.value) } }));
    } }, f.name, f.type, f.key, f.max, el("button", { type: "submit", class: "primary" }, "Set rule")));
  }
  return out;
}

const STATES = ["", "PENDING", "SCHEDULED", "WAITING", "LEASED", "RUNNING", "SUCCEEDED", "DEAD", "CANCELLED"];

// The lists of jobs keep their filters, sort and page in the address (#/jobs?queue=mail&sort=
// run_at&order=asc&page=TOKEN), so a link an operator pastes opens the same view. The broker
// sorts and pages (ListJobs and ListDeadJobs take the column and the direction), so a sort
// orders the whole list, not the page shown, and a page token belongs to its sort.
pages.jobs = {
  render(main, _arg, params) {
    this.params = params;
    this.stateSel = el("select", { ariaLabel: "state" }, STATES.map((s) => el("option", { value: s, selected: s === (params.get("state") || "") }, s || "any state")));
    this.queue = el("input", { placeholder: "queue", ariaLabel: "queue", value: params.get("queue") || "" });
    this.type = el("input", { placeholder: "type", ariaLabel: "type", value: params.get("type") || "" });
    const apply = () => navigate("jobs", { state: this.stateSel.value, queue: this.queue.value.trim(), type: this.type.value.trim(),
      sort: params.get("sort"), order: params.get("order") });
    this.list = el("div", { id: "jobs-list" });
    this.pager = el("div", { class: "row" });
    append(main, [el("h1", {}, "Jobs"),
      el("form", { class: "row", onsubmit: (e) => { e.preventDefault(); apply(); } }, this.stateSel, this.queue, this.type,
        el("button", { type: "submit", class: "primary" }, "Filter")),
      el("section", {}, this.list, this.pager)]);
  },
  async refresh() {
    const p = this.params;
    const req = Object.assign({ page_size: 50, page_token: p.get("page") || "", queue: p.get("queue") || "", type: p.get("type") || "" },
      listSort("jobs", p).req);
    if (p.get("state")) req.state = "JOB_STATE_" + p.get("state");
    const res = await read("ListJobs", req);
    clear(this.list).appendChild(jobTable(res.jobs || [], "jobs", p, isAdmin() ? (j) => waitingActions(j, jobState(j.state), String(j.id), false) : null));
    urlPager(this.pager, "jobs", p, res.next_page_token);
  },
};

// navigate shows a page with the given query in the address; empty values are left out.
function navigate(route, query) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v) q.set(k, v);
  const s = q.toString();
  location.hash = "#/" + route + (s ? "?" + s : "");
}

function withParams(params, changes) {
  const out = Object.fromEntries(params.entries());
  return Object.assign(out, changes);
}

// drawPager offers the previous page (the page keeps a stack of page tokens) and the next.
function drawPager(page, next) {
  clear(page.pager);
  if (page.tokens.length > 1) append(page.pager, [el("button", { type: "button", onclick: () => { page.tokens.pop(); refresh(); } }, "Previous page")]);
  if (next) append(page.pager, [el("button", { type: "button", onclick: () => { page.tokens.push(next); refresh(); } }, "Next page")]);
}

// urlPager offers the first page, the one before (through the browser's history, which holds
// it when the operator paged here) and the next, each as an address.
function urlPager(box, route, params, next) {
  clear(box);
  if (params.get("page")) {
    append(box, [el("button", { type: "button", onclick: () => navigate(route, withParams(params, { page: "" })) }, "First page")]);
    if (state.paged > 0) append(box, [el("button", { type: "button", onclick: () => { state.paged--; history.back(); } }, "Previous page")]);
  }
  if (next) append(box, [el("button", { type: "button", id: "next-page", onclick: () => { state.paged++; navigate(route, withParams(params, { page: next })); } }, "Next page")]);
}

// JOB_COLUMNS are the columns a list of jobs can show; sorts: the broker sorts a list by the
// column of that name (ListJobs' and ListDeadJobs' sort).
const JOB_COLUMNS = {
  id: { label: "Id", sorts: true, cell: (j) => td(jobLink(j.id)) },
  type: { label: "Type", sorts: true, cell: (j) => td(j.type) },
  queue: { label: "Queue", sorts: true, cell: (j) => td(j.queue) },
  state: { label: "State", sorts: true, cell: (j) => td(badge(jobState(j.state))) },
  attempts: { label: "Attempts", num: true, sorts: true, cell: (j) => td(j.attempts + " / " + j.max_attempts, "num") },
  created_at: { label: "Created", sorts: true, cell: (j) => td(fmtTime(j.created_at)) },
  // A job waiting for its time shows when it runs; one that is running or done shows nothing.
  run_at: { label: "Runs at", sorts: true, cell: (j) => td(nextRun(j) ? fmtTime(nextRun(j)) : "-") },
  died_at: { label: "Died at", sorts: true, cell: (j) => td(fmtTime(j.finished_at)) },
  reason: { label: "Reason", sorts: true, cell: (j) => td(el("span", {}, short(j.dead_reason, "DEAD_REASON_").replace("UNSPECIFIED", "") ? badge(short(j.dead_reason, "DEAD_REASON_"), "OPEN") : null, " ",
    [j.last_error_type, j.last_error_message].filter(Boolean).join(": "))) },
  last_error: { label: "Last error", cell: (j) => td([j.last_error_type, j.last_error_message].filter(Boolean).join(": ")) },
};
// Each list's columns and its default sort, the broker's: newest first.
const LIST_COLUMNS = {
  jobs: { cols: ["id", "type", "queue", "state", "attempts", "created_at", "run_at", "last_error"], sort: "created_at" },
  dlq: { cols: ["id", "type", "queue", "attempts", "died_at", "reason"], sort: "died_at" },
};

function nextRun(j) {
  const st = jobState(j.state);
  return (st === "SCHEDULED" || st === "PENDING") && j.run_at ? j.run_at : "";
}

// listSort reads a list's sort from the address: a column of the list that sorts (else the
// default) and a direction (descending unless order=asc), and the request fields that ask the
// broker for it.
function listSort(route, params) {
  const list = LIST_COLUMNS[route];
  const name = list.cols.includes(params.get("sort")) && JOB_COLUMNS[params.get("sort")].sorts ? params.get("sort") : list.sort;
  const order = params.get("order") === "asc" ? "asc" : "desc";
  return { name, order, req: { sort: name, ascending: order === "asc" } };
}

// jobTable lists jobs in the columns of the route, in the order the broker sent them. A header
// links to the list sorted by its column (again: the other way round), from the first page,
// since a page token continues only the sort it came with. select, when given, is the set of
// ids ticked in the first column.
function jobTable(jobs, route, params, extra, select) {
  const list = LIST_COLUMNS[route];
  const { name: sort, order } = listSort(route, params);
  const tick = select ? (j) => td(el("input", { type: "checkbox", class: "pick", ariaLabel: "select job " + j.id, checked: select.has(String(j.id)),
    onchange: (e) => { if (e.target.checked) select.add(String(j.id)); else select.delete(String(j.id)); select.changed(); } })) : null;
  const head = el("tr", {}, select ? el("th") : null, list.cols.map((name) => {
    const c = JOB_COLUMNS[name];
    if (!c.sorts) return el("th", { class: c.num ? "num" : "" }, c.label);
    const on = name === sort;
    const next = on && order === "desc" ? "asc" : on ? "desc" : (name === list.sort ? "desc" : "asc");
    return el("th", { class: (c.num ? "num " : "") + "sortable", dataset: { sort: name, order: on ? order : "" }, ariaSort: on ? (order === "asc" ? "ascending" : "descending") : null },
      el("a", { href: "#/" + route + "?" + new URLSearchParams(Object.entries(withParams(params, { sort: name, order: next, page: "" })).filter(([, v]) => v)).toString() },
        c.label, on ? (order === "asc" ? " ▲" : " ▼") : ""));
  }), extra ? el("th") : null);
  const width = list.cols.length + (extra ? 1 : 0) + (select ? 1 : 0);
  const body = jobs.length ? jobs.map((j) => el("tr", { dataset: { job: j.id, state: jobState(j.state) } }, tick ? tick(j) : null,
    list.cols.map((name) => JOB_COLUMNS[name].cell(j)), extra ? td(extra(j)) : null))
    : [el("tr", {}, el("td", { colSpan: width, class: "muted" }, route === "dlq" ? "No dead job matches." : "No jobs match."))];
  return el("table", {}, el("thead", {}, head), el("tbody", {}, body));
}

pages.job = {
  render(main, id) {
    this.id = id;
    this.body = el("div");
    append(main, [el("h1", {}, "Job " + id), this.body]);
  },
  async refresh() {
    const res = await read("GetJob", { id: this.id });
    const j = res.job;
    // Why it is not running, in the broker's words: the same rules its dispatcher applies.
    const waiting = res.waiting && res.waiting.detail ? el("div", { class: "notice", id: "waiting", dataset: { reason: short(res.waiting.reason, "WAIT_REASON_") } },
      "Not running: " + res.waiting.detail + ".") : null;
    const st = jobState(j.state);
    const payload = decodePayload(j.payload);
    const meta = j.metadata && Object.keys(j.metadata).length ? j.metadata : null;
    clear(this.body);
    const final = ["SUCCEEDED", "DEAD", "CANCELLED"].includes(st);
    append(this.body, [
      el("section", {}, el("div", { class: "row" }, badge(st),
        waitingActions(j, st, this.id, true),
        !final ? adminButton("Cancel job", () => act(() => write("CancelJob", { id: this.id })), "danger") : null),
      waiting,
      el("dl", { class: "kv" }, [
        ["Type", j.type], ["Queue", j.queue], ["Priority", j.priority], ["Attempts", j.attempts + " / " + j.max_attempts],
        ["Created", fmtTime(j.created_at)], ["Run at", fmtTime(j.run_at)], ["Finished", fmtTime(j.finished_at)],
        ["Idempotency key", j.idempotency_key], ["Dead reason", short(j.dead_reason, "DEAD_REASON_").replace("UNSPECIFIED", "")],
        ["Unique key", j.unique_key ? j.unique_key.slice(0, 16) + "… while " + (j.unique_states || []).map(jobState).join(", ") : ""],
      ].flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, String(v ?? ""))]))),
      el("section", {}, el("h2", {}, payload.json ? "Payload (JSON)" : "Payload"), el("pre", { id: "payload" }, payload.text)),
      ...outcomeSections(j),
      meta ? el("section", {}, el("h2", {}, "Metadata"), el("dl", { class: "kv" },
        Object.entries(meta).flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]))) : null,
      depsSection(j.dependencies, final),
      el("section", {}, el("h2", {}, "Attempts"), table(["#", "Worker", "Started", "Finished", "Outcome", "Kind", "Error type", "Message", "Details"],
        (j.attempt_history || []).map((a) => el("tr", {}, td(a.number), td(a.worker_id), td(fmtTime(a.started_at)), td(fmtTime(a.finished_at)),
          td(short(a.outcome, "ATTEMPT_OUTCOME_")), td(short(a.failure_kind, "FAILURE_KIND_").replace("UNSPECIFIED", "")),
          td(a.error_type), td(a.message), td(a.details ? el("pre", {}, a.details) : ""))), "No attempt yet.")),
    ]);
  },
};

// waitingActions are the operator's actions on a job that waits to run (SCHEDULED or PENDING):
// run it now, retry it now (a retry waiting out its backoff), change its priority, delete it.
// The broker checks the state again in its write, so a job leased meanwhile is refused with a
// message naming its state. full adds the priority field (the job page); a deleted job's page
// goes back to the list.
function waitingActions(j, st, id, full) {
  if (!isAdmin() || (st !== "SCHEDULED" && st !== "PENDING")) return null;
  const prio = full ? el("input", { type: "number", min: -1000, max: 1000, value: j.priority || 0, size: 5, ariaLabel: "priority of job " + id }) : null;
  const del = full ? async () => {
    try { await write("DeleteJob", { id }); showError(null); navigate("jobs", {}); } catch (e) { showError(e); await refresh(); }
  } : () => act(() => write("DeleteJob", { id }));
  return el("span", { class: "row waiting-actions" },
    st === "SCHEDULED" ? adminButton("Run now", () => act(() => write("RunJobNow", { id })), "primary") : null,
    st === "SCHEDULED" && Number(j.attempts) > 0 ? adminButton("Retry now", () => act(() => write("RetryJobNow", { id }))) : null,
    prio, prio ? adminButton("Set priority", () => act(() => write("SetJobPriority", { id, priority: Number(prio.value) }))) : null,
    adminButton("Delete", del, "danger"));
}

// outcomeSections shows what a job gives back: the newest progress its attempt reported, and
// once SUCCEEDED the result it returned.
function outcomeSections(j) {
  const out = [];
  const p = j.progress;
  if (p) {
    const parts = [];
    if (p.fraction !== undefined && p.fraction !== null) parts.push(Math.round(p.fraction * 100) + "%");
    if (p.message) parts.push(p.message);
    out.push(el("section", {}, el("h2", {}, "Progress"),
      el("div", { id: "progress" }, parts.join(" ") + " (attempt " + p.attempt + ", " + fmtTime(p.updated_at) + ")")));
  }
  if (jobState(j.state) === "SUCCEEDED") {
    const r = j.result ? decodePayload(j.result) : { text: "none", json: false };
    out.push(el("section", {}, el("h2", {}, r.json ? "Result (JSON)" : "Result"), el("pre", { id: "result" }, r.text)));
  }
  return out;
}

pages.dlq = {
  render(main, _arg, params) {
    this.params = params;
    this.queue = el("input", { placeholder: "queue", ariaLabel: "queue", value: params.get("queue") || "" });
    this.type = el("input", { placeholder: "type", ariaLabel: "type", value: params.get("type") || "" });
    this.errorType = el("input", { placeholder: "error type", ariaLabel: "error type", value: params.get("error_type") || "" });
    this.top = el("div");
    this.list = el("div", { id: "dlq-list" });
    this.pager = el("div", { class: "row" });
    this.bulk = el("div", { id: "bulk" });
    this.editor = el("div", { id: "editor" });
    // The ids ticked in the list; a redraw keeps those still listed.
    this.selected = Object.assign(new Set(), { changed: () => this.drawSelection() });
    this.selBar = el("div", { class: "row", id: "selection" });
    const apply = () => navigate("dlq", { queue: this.queue.value.trim(), type: this.type.value.trim(), error_type: this.errorType.value.trim(),
      sort: params.get("sort"), order: params.get("order") });
    append(main, [el("h1", {}, "Dead letters"),
      el("section", {}, el("h2", {}, "Top errors"), this.top),
      el("form", { class: "row", onsubmit: (e) => { e.preventDefault(); apply(); } }, this.queue, this.type, this.errorType,
        el("button", { type: "submit", class: "primary" }, "Filter"),
        adminButton("Preview requeue", () => this.preview("RequeueDeadJobs", "Requeue")),
        adminButton("Preview purge", () => this.preview("PurgeDeadJobs", "Purge"), "danger")),
      this.bulk, this.editor,
      el("section", {}, this.selBar, this.list, this.pager)]);
  },
  // drawSelection offers to act on the ticked jobs: exactly those ids, whatever the filter.
  drawSelection() {
    clear(this.selBar);
    const ids = [...this.selected];
    if (!isAdmin() || ids.length === 0) return;
    const n = ids.length, jobs = n + " job" + (n === 1 ? "" : "s");
    const run = (method, verb) => { this.selected.clear(); this.actOn(method, verb, ids); };
    append(this.selBar, [el("span", {}, n + " selected"),
      el("button", { type: "button", class: "primary", id: "requeue-selected", onclick: () => run("RequeueDeadJobs", "Requeue") }, "Requeue " + jobs),
      el("button", { type: "button", class: "danger", id: "purge-selected", onclick: () => run("PurgeDeadJobs", "Purge") }, "Purge " + jobs),
      el("button", { type: "button", onclick: () => { this.selected.clear(); refresh(); } }, "Clear")]);
  },
  filter() { return { queue: this.queue.value, type: this.type.value, error_type: this.errorType.value }; },
  // preview asks the broker which jobs the filter matches, and offers to act on exactly those:
  // the confirm names the previewed ids, so a job that died since, or a filter edited since,
  // changes nothing, and a previewed job that left the DLQ meanwhile makes the broker refuse.
  async preview(method, verb) {
    clear(this.bulk);
    try {
      const res = await write(method, { selection: { filter: this.filter(), preview: true } });
      const ids = (res.matched_ids || []).map(String);
      const n = ids.length;
      append(this.bulk, [el("div", { class: "notice" }, verb + " " + n + " dead job" + (n === 1 ? "" : "s") + " matching this filter? ",
        n > 0 ? el("button", { type: "button", class: verb === "Purge" ? "danger" : "primary", id: "confirm", onclick: () => this.actOn(method, verb, ids) }, verb + " " + n) : null,
        el("button", { type: "button", onclick: () => clear(this.bulk) }, "Cancel"))]);
    } catch (e) { showError(e); }
  },
  // actOn requeues or purges exactly ids, all of them rather than the broker's default cap, and
  // says how many it did: a confirmed preview and the ticked rows both end here.
  actOn(method, verb, ids) {
    return act(async () => {
      const done = await write(method, { selection: { ids, limit: ids.length } });
      clear(this.bulk);
      append(this.bulk, [el("div", { class: "notice" }, verb + "d " + done.affected + " job" + (Number(done.affected) === 1 ? "" : "s") + ".")]);
    });
  },
  // edit opens one dead job's payload for correction before requeueing it.
  async edit(id) {
    clear(this.editor);
    try {
      const j = (await read("GetJob", { id })).job;
      const area = el("textarea", { id: "edit-payload", ariaLabel: "payload" });
      area.value = decodePayload(j.payload).text;
      append(this.editor, [el("section", {}, el("h2", {}, "Requeue job " + id + " with this payload"), area,
        el("div", { class: "row" },
          el("button", { type: "button", class: "primary", id: "requeue-edited", onclick: () => act(async () => {
            await write("RequeueDeadJobs", { selection: { ids: [id] }, payload: encodePayload(area.value) });
            clear(this.editor);
          }) }, "Requeue"),
          el("button", { type: "button", onclick: () => clear(this.editor) }, "Cancel")))]);
    } catch (e) { showError(e); }
  },
  async refresh() {
    const [top, res] = await Promise.all([read("TopDeadErrors", { filter: this.filter(), limit: 10 }),
      read("ListDeadJobs", Object.assign({ filter: this.filter(), page_size: 50, page_token: this.params.get("page") || "" }, listSort("dlq", this.params).req))]);
    clear(this.top).appendChild(table(["Error type", ["Jobs", "num"], "Last seen", "Sample message"],
      (top.groups || []).map((g) => el("tr", {}, td(g.error_type), num(g.count), td(fmtTime(g.last_seen)), td(g.sample_message))), "The DLQ is empty."));
    const listed = new Set((res.jobs || []).map((j) => String(j.id)));
    for (const id of [...this.selected]) if (!listed.has(id)) this.selected.delete(id);
    clear(this.list).appendChild(jobTable(res.jobs || [], "dlq", this.params, isAdmin() ? (j) => el("span", { class: "row" },
      el("button", { type: "button", onclick: () => act(() => write("RequeueDeadJobs", { selection: { ids: [j.id] } })) }, "Requeue"),
      el("button", { type: "button", onclick: () => this.edit(j.id) }, "Edit & requeue")) : null, isAdmin() ? this.selected : null));
    this.drawSelection();
    urlPager(this.pager, "dlq", this.params, res.next_page_token);
  },
};

pages.breakers = {
  render(main) {
    this.list = el("div");
    this.trips = el("div");
    append(main, [el("h1", {}, "Circuit breakers"), el("section", {}, this.list), el("section", {}, this.trips)]);
  },
  async refresh() {
    const res = await read("ListBreakers");
    const all = res.breakers || [];
    clear(this.list).appendChild(table(["Job type", "State", ["Failures in window", "num"], ["Calls in window", "num"], "Opened", "Next probe", ["Probes", "num"], "Last change", ""],
      all.map((b) => {
        const st = short(b.state, "BREAKER_STATE_");
        const force = el("select", { ariaLabel: "state for " + b.type }, ["CLOSED", "OPEN", "HALF_OPEN"].map((s) => el("option", { value: s, selected: s === st }, s)));
        return el("tr", { class: st === "CLOSED" ? "" : "alert", dataset: { type: b.type } },
          td(b.type), td(el("span", {}, badge(st), b.disabled ? " (disabled)" : "")), num(b.failures_in_window),
          b.mode === "ratio" && st === "CLOSED" ? num(b.calls_in_window) : td("-", "num"), td(fmtTime(b.opened_at)),
          td(fmtTime(b.next_probe_at)), num(b.probes_in_flight),
          td(b.changed_reason ? b.changed_reason + " at " + fmtTime(b.changed_at) : "-", "changed"),
          td(isAdmin() ? el("span", { class: "row" },
            adminButton("Reset", () => act(() => write("ResetBreaker", { type: b.type }))),
            force, adminButton("Force", () => act(() => write("ForceBreaker", { type: b.type, state: "BREAKER_STATE_" + force.value })))) : ""));
      }), "No breaker has seen a job yet."));
    const tripped = all.filter((b) => b.trip);
    clear(this.trips);
    if (tripped.length) {
      append(this.trips, [el("h2", {}, "Why they opened"), ...tripped.map((b) => el("div", { class: "trip", dataset: { trip: b.type } },
        el("p", {}, el("strong", {}, b.type), " opened at " + fmtTime(b.trip.at) + ": " + tripSummary(b.trip)),
        table(["Job", "Kind", "At", "Error"], (b.trip.last_failures || []).map((f) =>
          el("tr", {}, td(jobLink(f.job_id)), td(f.kind), td(fmtTime(f.at)), td(f.message || "-"))),
        "No failure was noted.")))]);
    }
  },
};

// tripSummary says in a line why a breaker opened (BreakerTrip).
function tripSummary(t) {
  switch (t.reason) {
    case "ratio": return `${t.failures} of ${t.calls} calls failed (${Math.round(100 * t.ratio)}%) within ${t.window} (mode ratio)`;
    case "threshold": return `${t.failures} failures within ${t.window} (mode count)`;
    case "fatal": return "a fatal failure under open_on_fatal";
    case "probe_failed": return "a probe failed";
  }
  return t.reason;
}

// The periodic schedules: when each fires next, its last occurrence and that job's state,
// with pause (and its note), resume and trigger for admins.
pages.schedules = {
  render(main) {
    this.list = el("div");
    append(main, [el("h1", {}, "Schedules"), el("section", {}, this.list)]);
  },
  async refresh() {
    const res = await read("ListSchedules");
    clear(this.list).appendChild(table(["Name", "Cron", "Job type", "Status", "Next fire", "Last fire", "Last job", "Last state", ""],
      (res.schedules || []).map((s) => {
        const note = el("input", { placeholder: "why (a note)", ariaLabel: "note for " + s.name });
        const last = s.last_job_id && s.last_job_id !== "0";
        return el("tr", { class: s.paused ? "paused" : "", dataset: { schedule: s.name } },
          td(s.name), td(s.cron + (s.time_zone ? " (" + s.time_zone + ")" : "")), td(s.type),
          td(el("span", { class: "status" }, s.paused ? badge("paused") : badge("active"), s.note ? " " + s.note : "")),
          td(fmtTime(s.next_fire_at)), td(fmtTime(s.last_fire_at)),
          td(last ? jobLink(s.last_job_id) : "-"),
          td(last ? (s.last_job_state === "JOB_STATE_UNSPECIFIED" ? "deleted" : badge(jobState(s.last_job_state))) : "-", "last-state"),
          td(isAdmin() ? el("span", { class: "row" },
            s.paused ? adminButton("Resume", () => act(() => write("ResumeSchedule", { name: s.name })))
              : el("span", { class: "row" }, note, adminButton("Pause", () => act(() => write("PauseSchedule", { name: s.name, note: note.value.trim() })))),
            adminButton("Trigger", () => act(() => write("TriggerSchedule", { name: s.name })))) : ""));
      }), "No schedule yet: declare one in the configuration file or with jobwire schedules add."));
  },
};

pages.workers = {
  render(main) {
    this.list = el("div");
    append(main, [el("h1", {}, "Workers"), el("section", {}, this.list)]);
  },
  async refresh() {
    const res = await read("ListWorkers");
    clear(this.list).appendChild(table(["Worker", "Stream", "Job types", "Queues", ["Slots used / free", "num"], ["Running", "num"], ["Leases held", "num"], "Connected"],
      (res.workers || []).map((w) => el("tr", { dataset: { worker: w.worker_id } },
        td(el("span", {}, w.worker_id, w.draining ? " " : "", w.draining ? badge("draining", "paused") : null)), td(w.session_id),
        td((w.job_types || []).join(", ")), td((w.queues || []).length ? w.queues.join(", ") : "every queue"),
        td(w.leases_held + " / " + Math.max(0, w.capacity - w.leases_held), "num"), num(w.running), num(w.leases_held), td(fmtTime(w.connected_at)))),
      "No worker is connected."));
  },
};

const AUDIT_ACTIONS = ["", "job.cancel", "job.run_now", "job.retry_now", "job.delete", "job.priority", "dlq.requeue", "dlq.purge", "jobs.purge_succeeded", "queue.pause", "queue.resume",
  "queue.limit", "breaker.reset", "breaker.force", "token.create", "token.revoke", "schedule.add", "schedule.update",
  "schedule.remove", "schedule.pause", "schedule.resume", "schedule.trigger", "schedule.backfill",
  "ratelimit.set", "ratelimit.remove", "concurrency.set", "concurrency.remove"];

// The audit trail: who did each operator action, newest first.
pages.audit = {
  render(main) {
    this.tokens = [""];
    this.action = el("select", { ariaLabel: "action" }, AUDIT_ACTIONS.map((a) => el("option", { value: a }, a || "any action")));
    this.actor = el("input", { placeholder: "token id or name", ariaLabel: "actor" });
    const apply = () => { this.tokens = [""]; refresh(); };
    this.list = el("div", { id: "audit-list" });
    this.pager = el("div", { class: "row" });
    append(main, [el("h1", {}, "Audit trail"),
      el("div", { class: "row" }, this.action, this.actor, el("button", { type: "button", class: "primary", onclick: apply }, "Filter")),
      el("section", {}, this.list, this.pager)]);
  },
  async refresh() {
    const res = await read("ListAuditEvents", { action: this.action.value, actor: this.actor.value.trim(), page_size: 50,
      page_token: this.tokens[this.tokens.length - 1] });
    clear(this.list).appendChild(table(["Time", "Actor", "Source", "Action", "Target", ["Jobs", "num"], "Detail", "Broker"],
      (res.events || []).map((e) => el("tr", { dataset: { event: e.id, action: e.action } },
        td(fmtTime(e.time)), td(el("span", {}, e.actor_name, e.actor_token_id ? " (" + e.actor_token_id + ")" : "")),
        td([e.source, e.peer].filter(Boolean).join(" ")), td(e.action), td(e.target), num(e.count),
        td(e.detail), td(e.broker_id || "-"))),
      "No operator action recorded."));
    drawPager(this, res.next_page_token);
  },
};

// Batches: their counts, and the callbacks each runs once when its last job is final.
const BATCH_STATES = ["", "OPEN", "CLOSED", "COMPLETE"];

function batchCallback(type, id) {
  if (!type) return "-";
  if (!id || id === "0") return el("span", { class: "muted" }, type + " (waiting)");
  return jobLink(id, type + " #" + id);
}

function batchProgress(b) {
  const total = Number(b.total || 0), final = Number(b.succeeded || 0) + Number(b.dead || 0) + Number(b.cancelled || 0);
  const bar = el("progress", { max: Math.max(total, 1), value: final, ariaLabel: "final of total" });
  return td(el("span", {}, bar, " " + fmtNum(final) + " / " + fmtNum(total)));
}

pages.batches = {
  render(main) {
    this.tokens = [""];
    this.state = el("select", { ariaLabel: "state" }, BATCH_STATES.map((s) => el("option", { value: s ? "BATCH_STATE_" + s : "" }, s ? s.toLowerCase() : "any state")));
    this.state.onchange = () => { this.tokens = [""]; refresh(); };
    this.list = el("div", { id: "batch-list" });
    this.pager = el("div", { class: "row" });
    append(main, [el("h1", {}, "Batches"), el("div", { class: "row" }, this.state), el("section", {}, this.list, this.pager)]);
  },
  async refresh() {
    const res = await read("ListBatches", { state: this.state.value || undefined, page_size: 50,
      page_token: this.tokens[this.tokens.length - 1] });
    clear(this.list).appendChild(table(["Batch", "Description", "State", "Final / total", ["Succeeded", "num"], ["Dead", "num"],
      ["Cancelled", "num"], "On success", "On complete", "Created"],
      (res.batches || []).map((b) => el("tr", { dataset: { batch: b.id, state: short(b.state, "BATCH_STATE_") } },
        td(String(b.id)), td(b.description || "-"), td(badge(short(b.state, "BATCH_STATE_").toLowerCase(), short(b.state, "BATCH_STATE_") === "COMPLETE" ? "SUCCEEDED" : "paused")),
        batchProgress(b), num(b.succeeded), num(b.dead), num(b.cancelled),
        td(batchCallback(b.on_success_type, b.success_job_id)), td(batchCallback(b.on_complete_type, b.complete_job_id)),
        td(fmtTime(b.created_at)))),
      "No batch yet."));
    drawPager(this, res.next_page_token);
  },
};

// ---- routing and refresh -----------------------------------------------------------------

// refresh redraws the current page. One runs at a time; a refresh asked for meanwhile (a new
// page, an action) runs once the one in flight is done, so no page is left without its data.
async function refresh() {
  if (state.busy) { state.again = true; return; }
  state.busy = true;
  try {
    do {
      state.again = false;
      const p = state.page;
      if (!p) break;
      try { await p.refresh(); if (p === state.page) document.body.dataset.loaded = state.route; }
      catch (e) { showError(e); }
    } while (state.again);
  } finally { state.busy = false; }
}

function route() {
  const [path, query] = (location.hash.replace(/^#\/?/, "") || "overview").split("?");
  const [name, arg] = path.split("/");
  const params = new URLSearchParams(query || "");
  const page = pages[name] || pages.overview;
  state.route = pages[name] ? name : "overview";
  state.page = Object.create(page);
  delete document.body.dataset.loaded;
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.page === (name === "job" ? "jobs" : state.route));
  const main = clear(document.getElementById("main"));
  showError(null);
  state.page.render(main, arg && decodeURIComponent(arg), params);
  refresh();
}

async function start() {
  try {
    const me = await answer(await fetch("/api/me"));
    state.role = me.role;
    state.auth = me.auth;
  } catch (e) { showError(e); }
  // ?live=0 opens the page with live refresh off (it can be turned on with the checkbox).
  if (new URLSearchParams(location.search).get("live") === "0") document.getElementById("live").checked = false;
  document.getElementById("role").textContent = state.auth ? "signed in as " + state.role : "";
  document.getElementById("logout").hidden = !state.auth;
  window.addEventListener("hashchange", route);
  route();
  state.timer = setInterval(() => { if (document.getElementById("live").checked) refresh(); }, REFRESH_MS);
}

start();
