// Tollgate status page: polls /api/pools and /api/events (and a selected
// pool's leases and waiters) every second and renders them, with charts of
// the last minutes. Plain DOM, no framework; all text goes through textContent.
"use strict";

const POLL_MS = 1000;
const fmt = new Intl.NumberFormat("en-US");

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function num(n) {
  return fmt.format(n);
}

// The limits in force: effective when the server reports them, else configured.
function limits(p) {
  return p.effective || p.configured;
}

function utilisation(p) {
  // An active or passive pool's capacity is its instances, within its
  // concurrency limit if it has one.
  let lim = limits(p).concurrency_limit;
  if (p.resource_kind) {
    const inst = p.status.resources || 0;
    lim = lim ? Math.min(lim, inst) : inst;
  }
  const held = p.status.held;
  if (p.resource_kind && !lim) {
    return el("div", { class: "bar" }, el("span", { class: "muted" }, num(held) + " held, no instances"));
  }
  if (!lim && limits(p).rate) {
    // A rate-only pool: the bar shows how much of its rate is in use,
    // tokens granted per second since the last poll against the rate.
    const rate = limits(p).rate;
    const used = rateUsed(p.name);
    return bar(used / rate, "% of the rate in use (tokens granted per second, over the last second)",
      num(Math.round(used * 10) / 10) + " / " + num(rate) + " per s");
  }
  if (!lim) {
    return el("div", { class: "bar" }, el("span", { class: "muted" }, num(held) + " held, no concurrency limit"));
  }
  return bar(held / lim, "% of the concurrency limit in use", num(held) + " / " + num(lim));
}

// bar draws a utilisation bar filled to frac, with its title and text.
function bar(frac, title, text) {
  const pct = Math.min(100, Math.round(frac * 100));
  let cls = "fill";
  if (frac >= 0.9) cls += " full";
  else if (frac >= 0.7) cls += " warn";
  const fill = el("div", { class: cls });
  fill.style.width = pct + "%";
  return el("div", { class: "bar", title: pct + title },
    el("div", { class: "track" }, fill),
    el("span", { class: "ratio" }, text));
}

// waitText renders a wait in milliseconds for people.
function waitText(ms) {
  if (ms === 0) return "0";
  if (ms < 1) return (Math.round(ms * 1000)) + " µs";
  if (ms < 1000) return (Math.round(ms * 10) / 10) + " ms";
  return (Math.round(ms / 100) / 10) + " s";
}

// history keeps, per pool, the samples of the last HISTORY_MS since the
// page was opened, one per poll, for the charts.
const HISTORY_MS = 5 * 60 * 1000;
const history = new Map();

// record adds one sample per pool of data, at the server's time, and
// forgets the pools data no longer lists.
function record(data) {
  const t = Date.parse(data.time) || Date.now();
  const seen = new Set();
  for (const p of data.pools) {
    seen.add(p.name);
    let h = history.get(p.name);
    if (!h) history.set(p.name, h = []);
    // A sample at the same server time as the last replaces it.
    if (h.length && t <= h[h.length - 1].t) h.pop();
    const prev = h[h.length - 1];
    const lim = limits(p);
    let granted = 0;
    if (prev) granted = Math.max(0, p.status.tokens_granted - prev.tokens) * 1000 / (t - prev.t);
    h.push({ t, held: p.status.held, waiting: p.status.waiting, limit: lim.concurrency_limit,
      rate: lim.rate, tokens: p.status.tokens_granted, granted });
    while (h.length && h[0].t < t - HISTORY_MS) h.shift();
  }
  for (const name of history.keys()) if (!seen.has(name)) history.delete(name);
}

// rateUsed is the pool's tokens granted per second at its last sample.
function rateUsed(name) {
  const h = history.get(name);
  return h && h.length ? h[h.length - 1].granted : 0;
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

// chart draws a pool's history, w by h pixels: for a pool with a
// concurrency limit, held (area) against the limit in force (line) and
// waiting acquires (red line); for a pool with only a rate, tokens
// granted per second (area) against the rate (line). With labels it also
// writes the scale and a legend.
function chart(name, w, h, labels) {
  const samples = history.get(name) || [];
  const box = svg("svg", { width: w, height: h, viewBox: "0 0 " + w + " " + h, class: "spark", role: "img" });
  const last = samples[samples.length - 1];
  const rateOnly = last && !last.limit && last.rate;
  const area = s => rateOnly ? s.granted : s.held;
  const line = s => rateOnly ? s.rate : s.limit;
  let top = 1;
  for (const s of samples) top = Math.max(top, area(s), line(s) || 0, rateOnly ? 0 : s.waiting);
  const padTop = labels ? 20 : 2, padBottom = labels ? 14 : 2;
  const end = last ? last.t : 0;
  const x = t => w - 1 - (end - t) / HISTORY_MS * (w - 2);
  const y = v => h - padBottom - v / top * (h - padTop - padBottom);
  const path = (get) => samples.map((s, i) => (i ? "L" : "M") + x(s.t).toFixed(1) + "," + y(get(s)).toFixed(1)).join("");
  box.append(svg("line", { x1: 0, x2: w, y1: y(0), y2: y(0), class: "axis" }));
  if (samples.length > 1) {
    box.append(svg("path", { d: path(area) + "L" + x(end).toFixed(1) + "," + y(0) + "L" + x(samples[0].t).toFixed(1) + "," + y(0) + "Z", class: "area" }));
    if (line(last)) box.append(svg("path", { d: path(s => line(s) || 0), class: "limit" }));
    if (!rateOnly) box.append(svg("path", { d: path(s => s.waiting), class: "waiting" }));
  }
  const what = rateOnly ? "tokens granted per second against the rate" : "held against the limit in force, and waiting acquires";
  const title = svg("title", {});
  title.textContent = name + ": " + what + ", over the last 5 minutes";
  box.append(title);
  if (labels) {
    const text = (tx, ty, str, cls) => { const e = svg("text", { x: tx, y: ty, class: cls || "" }); e.textContent = str; box.append(e); };
    text(4, 11, num(Math.round(top * 10) / 10));
    text(4, h - 2, "5 min ago");
    text(w - 4, h - 2, "now", "end");
    const legend = rateOnly ? [["area", "granted /s"], ["limit", "rate"]] : [["area", "held"], ["limit", "limit in force"], ["waiting", "waiting"]];
    let lx = w - 4;
    for (const [cls, label] of legend.reverse()) {
      text(lx, 11, label, "end key " + cls);
      lx -= 8 * label.length + 14;
    }
  }
  return box;
}

function poolRow(p) {
  const lim = limits(p);
  const st = p.status;
  const name = el("td", { class: "name", title: p.name }, p.name);
  if (st.recovering_until) {
    name.append(" ", el("span", { class: "badge recovering", title: "recovering from a restart until " + st.recovering_until + ": renewed leases are re-adopted, new grants wait" }, "recovering"));
  }
  if (st.suspended) {
    name.append(" ", el("span", { class: "badge suspended", title: "suspended by an operator: no leases are granted until it is resumed (tollgate pool resume " + p.name + ")" }, "suspended"));
  }
  if (st.throttle_reason) {
    name.append(" ", el("span", { class: "badge throttled", title: "adaptive control lowered the effective limits because of reported " + st.throttle_reason }, "throttled: " + st.throttle_reason));
  }
  if (p.description) name.append(el("span", { class: "desc", title: p.description }, p.description));
  if (p.owner) name.append(el("span", { class: "desc owner", title: "the server that leads this pool's shard" }, "on " + p.owner));
  if (p.resource_kind) {
    const prov = p.resource_kind === "passive" ? ", " + num(st.providers || 0) + (st.providers === 1 ? " provider" : " providers") : "";
    name.append(el("span", { class: "desc resources", title: p.resource_kind + " pool: its permits are instances (tollgate resource list " + p.name + ")" },
      p.resource_kind + ": " + num(st.resources_free || 0) + " of " + num(st.resources || 0) + " instances free" + prov));
  }
  const waiting = el("td", { class: "num waiting" + (st.waiting > 0 ? " waiting-some" : "") }, num(st.waiting));
  const wait = el("td", { class: "num wait", title: st.wait_grants ? "waits of the " + num(st.wait_grants) + " grants of the last minute: median " + waitText(st.wait_p50_ms) + ", 99th percentile " + waitText(st.wait_p99_ms) : "no grants in the last minute" },
    st.wait_grants ? waitText(st.wait_p99_ms) : "—");
  const rate = el("td", { class: "num rate" }, lim.rate ? num(lim.rate) : "—");
  if (lim.rate) {
    rate.append(el("span", { class: "sub tokens", title: "tokens in the bucket now, of its burst" }, num(Math.floor(st.tokens_available)) + " / " + num(lim.burst)));
  }
  if (st.share_holders) {
    rate.append(el("span", { class: "sub", title: "rate granted to " + st.share_holders + " rate share holders" }, num(st.shares_granted) + " in " + num(st.share_holders) + (st.share_holders === 1 ? " share" : " shares")));
  }
  const row = el("tr", { "data-pool": p.name, class: "pool" + (p.name === selectedPool() ? " selected" : ""), title: "show who holds " + p.name });
  row.addEventListener("click", () => { location.hash = "pool=" + encodeURIComponent(p.name); });
  row.append(
    name,
    el("td", { class: "util" }, utilisation(p)),
    el("td", { class: "trend" }, chart(p.name, 100, 28, false)),
    waiting,
    wait,
    el("td", { class: "num leases" }, num(st.leases)),
    rate,
    el("td", { class: "num granted" }, num(st.granted)),
    el("td", { class: "num expired" }, num(st.expired)),
    el("td", { class: "num revoked" }, num(st.revoked)),
    el("td", { class: "num rejected" }, num(st.rejected)),
    el("td", { class: "num timeouts" }, num(st.wait_timeouts)));
  return row;
}

// selectedPool is the pool whose leases are shown: "#pool=NAME" in the
// address, set by clicking a pool.
function selectedPool() {
  const m = /^#pool=(.+)$/.exec(location.hash);
  return m ? decodeURIComponent(m[1]) : "";
}

function leaseRow(l) {
  const exp = new Date(l.expire_time);
  return el("tr", { "data-lease": l.id },
    el("td", { class: "num" }, l.id),
    el("td", {}, l.client_id || "—"),
    el("td", { class: "num" }, num(l.weight)),
    el("td", { class: "num" }, num(l.priority)),
    el("td", {}, l.ttl),
    el("td", { class: "muted", title: l.expire_time }, isNaN(exp) ? l.expire_time : exp.toLocaleTimeString("en-GB", { hour12: false })),
    el("td", {}, (l.resources || []).join(", ")),
    el("td", { class: "detail" }, l.description || ""));
}

function renderLeases(pool, data) {
  const sec = document.getElementById("leases");
  sec.hidden = !pool;
  if (!pool) return;
  document.getElementById("leases-pool").textContent = pool;
  document.getElementById("lease-rows").replaceChildren(...(data ? data.leases.map(leaseRow) : []));
  let note = "";
  if (!data) note = "No pool named " + pool + ".";
  else if (data.leases.length === 0) note = "No live leases.";
  else if (data.more) note = "Showing the first " + num(data.leases.length) + " leases (tollgate lease list " + pool + " lists them all).";
  document.getElementById("leases-note").textContent = note;
}

function waiterRow(w) {
  return el("tr", { "data-waiter": w.position },
    el("td", { class: "num" }, num(w.position)),
    el("td", {}, w.client_id || "—"),
    el("td", { class: "num" }, num(w.weight)),
    el("td", { class: "num" }, num(w.priority)),
    el("td", { class: "num" }, waitText(w.waited_ms)));
}

function renderWaiters(pool, data) {
  if (!pool) return;
  document.getElementById("waiter-rows").replaceChildren(...(data ? data.waiters.map(waiterRow) : []));
  let note = "";
  if (data && data.total === 0) note = "No acquire waits.";
  else if (data && data.total > data.waiters.length) note = "Showing the first " + num(data.waiters.length) + " of " + num(data.total) + " waiting acquires.";
  document.getElementById("waiters-note").textContent = note;
  document.getElementById("pool-chart").replaceChildren(chart(pool, 720, 140, true));
}

function eventRow(ev) {
  const t = new Date(ev.time);
  const when = isNaN(t) ? ev.time : t.toLocaleTimeString("en-GB", { hour12: false });
  const details = [ev.detail, ev.description && "“" + ev.description + "”", ev.actor && "by " + ev.actor]
    .filter(Boolean).join(" · ");
  return el("tr", { "data-event": ev.seq },
    el("td", { class: "muted", title: ev.time }, when),
    el("td", {}, el("span", { class: "ev-type " + ev.type }, ev.type.replaceAll("_", " "))),
    el("td", {}, ev.pool),
    el("td", { class: "num" }, ev.lease_id || ""),
    el("td", {}, ev.client_id || ""),
    el("td", { class: "detail" }, details));
}

let lastPools = null;
let timer = 0;
// The pages of pools visited, the one shown last: the name each starts
// after ("" for the first) and how many pools come before it. The server
// sends a page of at most 500 pools (GET /api/pools?after=NAME).
const pages = [{ after: "", before: 0 }];

function turnPage(forward) {
  const page = pages[pages.length - 1];
  if (forward && lastPools && lastPools.pools.length > 0) {
    pages.push({ after: lastPools.pools[lastPools.pools.length - 1].name, before: page.before + lastPools.pools.length });
  } else if (!forward && pages.length > 1) {
    pages.pop();
  }
  refresh();
}

function pageButton(id, text, forward) {
  const b = el("button", { type: "button", id: id }, text);
  b.addEventListener("click", () => turnPage(forward));
  return b;
}

function renderPools(data) {
  if (data !== lastPools) record(data);
  lastPools = data;
  const filter = document.getElementById("filter").value.trim().toLowerCase();
  const rows = document.getElementById("pool-rows");
  const shown = data.pools.filter(p => !filter || p.name.toLowerCase().includes(filter));
  rows.replaceChildren(...shown.map(poolRow));
  let held = 0, waiting = 0;
  for (const p of data.pools) { held += p.status.held; waiting += p.status.waiting; }
  document.getElementById("summary").textContent =
    num(data.total) + (data.total === 1 ? " pool" : " pools") + " · " + num(held) + " held · " + num(waiting) + " waiting";
  const page = pages[pages.length - 1];
  const note = document.getElementById("pools-note");
  if (data.total === 0) note.textContent = "No pools yet. Create one with: tollgate pool create NAME --concurrency N";
  else if (data.more || pages.length > 1) {
    note.replaceChildren("Pools " + num(page.before + 1) + "–" + num(page.before + data.pools.length) + " of " + num(data.total) +
      (filter ? " (the filter applies to this page). " : ". "),
      pages.length > 1 ? pageButton("pools-prev", "Previous", false) : null, " ",
      data.more ? pageButton("pools-next", "Next", true) : null);
  } else if (filter && shown.length === 0) note.textContent = "No pool matches the filter.";
  else note.textContent = "";
  if (data.unreachable && data.unreachable.length) {
    note.append(" The pools of " + data.unreachable.join(", ") + " are missing: " +
      (data.unreachable.length === 1 ? "it" : "they") + " did not answer in time.");
  }
  const state = document.getElementById("state");
  state.textContent = data.serving ? "serving" : "shutting down";
  state.className = "badge " + (data.serving ? "serving" : "down");
}

function renderEvents(data) {
  const rows = document.getElementById("event-rows");
  rows.replaceChildren(...data.events.slice(0, 50).map(eventRow));
  document.getElementById("events-note").textContent =
    data.events.length === 0 ? "No events yet: pool changes and leases that expire show here." : "";
}

async function getJSON(path) {
  const r = await fetch(path, { cache: "no-store", credentials: "same-origin" });
  if (!r.ok) {
    const body = await r.json().catch(() => null);
    const err = new Error(body && body.error ? body.error : path + ": HTTP " + r.status);
    err.reason = body && body.reason;
    throw err;
  }
  return r.json();
}

async function refresh() {
  try {
    const pool = selectedPool();
    const path = "/api/pools/" + encodeURIComponent(pool);
    const [pools, events, leases, waiters] = await Promise.all([getJSON("/api/pools?after=" + encodeURIComponent(pages[pages.length - 1].after)), getJSON("/api/events"),
      pool ? getJSON(path + "/leases").catch(() => null) : null,
      pool ? getJSON(path + "/waiters").catch(() => null) : null]);
    renderPools(pools);
    renderEvents(events);
    renderLeases(pool, leases);
    renderWaiters(pool, waiters);
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString("en-GB", { hour12: false });
  } catch (e) {
    const state = document.getElementById("state");
    const follower = e.reason === "NOT_LEADER";
    state.textContent = follower ? "follower" : "unreachable";
    state.className = follower ? "badge recovering" : "badge down";
    document.getElementById("updated").textContent = String(e.message || e);
  } finally {
    clearTimeout(timer);
    timer = setTimeout(refresh, POLL_MS);
  }
}

document.getElementById("filter").addEventListener("input", () => { if (lastPools) renderPools(lastPools); });
window.addEventListener("hashchange", refresh);
refresh();
