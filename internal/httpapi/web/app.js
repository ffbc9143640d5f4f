// Tollgate status page: polls /api/pools and /api/events every second and
// renders them. Plain DOM, no framework; all text goes through textContent.
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
  if (!lim && limits(p).rate && limits(p).burst) {
    // A rate-only pool: the bar shows how much of its burst is spent.
    const burst = limits(p).burst;
    const avail = Math.max(0, Math.min(burst, p.status.tokens_available || 0));
    return bar((burst - avail) / burst, "% of the burst spent (" + num(limits(p).rate) + " tokens/s refill it)",
      num(Math.floor(avail)) + " / " + num(burst) + " tokens left");
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

function poolRow(p) {
  const lim = limits(p);
  const st = p.status;
  const name = el("td", { class: "name" }, p.name);
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
  if (p.resource_kind) {
    const prov = p.resource_kind === "passive" ? ", " + num(st.providers || 0) + (st.providers === 1 ? " provider" : " providers") : "";
    name.append(el("span", { class: "desc resources", title: p.resource_kind + " pool: its permits are instances (tollgate resource list " + p.name + ")" },
      p.resource_kind + ": " + num(st.resources_free || 0) + " of " + num(st.resources || 0) + " instances free" + prov));
  }
  const waiting = el("td", { class: "num waiting" + (st.waiting > 0 ? " waiting-some" : "") }, num(st.waiting));
  const wait = el("td", { class: "num wait", title: st.wait_grants ? "waits of the " + num(st.wait_grants) + " grants of the last minute: median " + waitText(st.wait_p50_ms) + ", 99th percentile " + waitText(st.wait_p99_ms) : "no grants in the last minute" },
    st.wait_grants ? waitText(st.wait_p99_ms) : "—");
  const rate = el("td", { class: "num rate" }, lim.rate ? num(lim.rate) : "—");
  if (st.share_holders) {
    rate.append(el("span", { class: "sub", title: "rate granted to " + st.share_holders + " rate share holders" }, num(st.shares_granted) + " in " + num(st.share_holders) + (st.share_holders === 1 ? " share" : " shares")));
  }
  const tokens = lim.rate ? (Math.floor(st.tokens_available * 10) / 10) + " / " + num(lim.burst) : "—";
  const row = el("tr", { "data-pool": p.name, class: "pool" + (p.name === selectedPool() ? " selected" : ""), title: "show who holds " + p.name });
  row.addEventListener("click", () => { location.hash = "pool=" + encodeURIComponent(p.name); });
  row.append(
    name,
    el("td", { class: "util" }, utilisation(p)),
    waiting,
    wait,
    el("td", { class: "num leases" }, num(st.leases)),
    rate,
    el("td", { class: "num tokens" }, tokens),
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

function eventRow(ev) {
  const t = new Date(ev.time);
  const when = isNaN(t) ? ev.time : t.toLocaleTimeString("en-GB", { hour12: false });
  const details = [ev.detail, ev.description && "“" + ev.description + "”", ev.actor && "by " + ev.actor]
    .filter(Boolean).join(" · ");
  return el("tr", { "data-event": ev.seq },
    el("td", { class: "muted", title: ev.time }, when),
    el("td", {}, el("span", { class: "ev-type " + ev.type }, ev.type.replace("_", " "))),
    el("td", {}, ev.pool),
    el("td", { class: "num" }, ev.lease_id || ""),
    el("td", {}, ev.client_id || ""),
    el("td", { class: "detail" }, details));
}

let lastPools = null;
let timer = 0;

function renderPools(data) {
  lastPools = data;
  const filter = document.getElementById("filter").value.trim().toLowerCase();
  const rows = document.getElementById("pool-rows");
  const shown = data.pools.filter(p => !filter || p.name.toLowerCase().includes(filter));
  rows.replaceChildren(...shown.map(poolRow));
  let held = 0, waiting = 0;
  for (const p of data.pools) { held += p.status.held; waiting += p.status.waiting; }
  document.getElementById("summary").textContent =
    num(data.total) + (data.total === 1 ? " pool" : " pools") + " · " + num(held) + " held · " + num(waiting) + " waiting";
  let note = "";
  if (data.pools.length === 0) note = "No pools yet. Create one with: tollgate pool create NAME --concurrency N";
  else if (data.more) note = "Showing the first " + num(data.pools.length) + " of " + num(data.total) + " pools.";
  else if (filter && shown.length === 0) note = "No pool matches the filter.";
  document.getElementById("pools-note").textContent = note;
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
    const [pools, events, leases] = await Promise.all([getJSON("/api/pools"), getJSON("/api/events"),
      pool ? getJSON("/api/pools/" + encodeURIComponent(pool) + "/leases").catch(() => null) : null]);
    renderPools(pools);
    renderEvents(events);
    renderLeases(pool, leases);
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
