// HTDA dashboard: polls /api/v1/dashboard/summary and renders it.
// Data from the pool (LFNs, node names) is only ever set as text, never as HTML.
"use strict";

const settings = JSON.parse(document.body.dataset.settings || "{}");
const refreshMs = Math.max(1, settings.refresh || 3) * 1000;

function size(bytes) {
  if (typeof bytes !== "number") return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (Math.abs(bytes) >= 1024 && i < units.length - 1) { bytes /= 1024; i++; }
  return (i === 0 ? bytes.toFixed(0) : bytes.toFixed(1)) + " " + units[i];
}

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const cell of cells) tr.appendChild(cell instanceof Node ? cell : el("td", cell));
  return tr;
}

function fill(tableId, rows, emptyText, columns) {
  const body = document.querySelector(`#${tableId} tbody`);
  body.replaceChildren(...rows);
  if (!rows.length) {
    const td = el("td", emptyText, "empty");
    td.colSpan = columns;
    body.appendChild(row([td]));
  }
}

function meter(used, capacity) {
  const td = el("td");
  if (!capacity) { td.textContent = "–"; return td; }
  const bar = el("span", null, "meter");
  const inner = el("span");
  inner.style.width = Math.min(100, (100 * used) / capacity).toFixed(1) + "%";
  bar.appendChild(inner);
  td.append(bar, `${size(used)} / ${size(capacity)}`);
  return td;
}

function renderMembers(summary) {
  const rows = summary.members.map((m) => {
    const cache = m.cache || {};
    const tr = row([el("td", m.name, "name"), m.roles.join(", "), m.version, `${m.age.toFixed(1)} s ago`,
                    el("td", m.health, `health-${m.health}`), meter(cache.used_bytes, cache.capacity_bytes),
                    m.cache ? cache.files : "", m.cache ? cache.staging : ""]);
    tr.dataset.node = m.name;
    return tr;
  });
  fill("members", rows, "no members", 8);
}

function renderTotals(summary) {
  const t = summary.totals;
  document.getElementById("total-members").textContent = summary.members.length;
  document.getElementById("total-caches").textContent = t.cache_nodes;
  document.getElementById("total-used").textContent = t.capacity_bytes
    ? `${size(t.used_bytes)} / ${size(t.capacity_bytes)}` : "–";
  document.getElementById("total-files").textContent = t.files;
  document.getElementById("total-staging").textContent = t.staging;
  const hits = summary.hits;
  document.getElementById("hit-ratio").textContent = hits && hits.ratio !== null
    ? `${(100 * hits.ratio).toFixed(1)} % of ${hits.looked_up}` : "–";
}

function renderStaging(summary) {
  const rows = summary.staging.map((s) => {
    if (s.error) return row([s.node, el("td", s.error, "empty"), "", ""]);
    const now = s.active.map((j) => `${j.lfn} (${size(j.done_bytes)} / ${size(j.size)})`).join("\n");
    return row([s.node, el("td", now || "idle", now ? "lfn" : "empty"), s.queued, s.failed]);
  });
  fill("staging", rows, "no cache nodes", 4);
  const failing = summary.staging.flatMap((s) => (s.failing || []).map((f) => row([s.node, el("td", f.lfn, "lfn"),
    f.permanent ? `${f.attempts} (not retried)` : `${f.attempts}`, f.error || ""])));
  fill("failing", failing, "no failing copies", 4);
}

function renderTop(summary) {
  const top = summary.top_files;
  document.getElementById("top-source").textContent = top.error ? `(${top.error})`
    : `(from ${top.coordinator})`;
  const rows = (top.files || []).map((f) => row([el("td", f.lfn, "lfn"),
    typeof f.score === "number" ? f.score.toPrecision(4) : "", size(f.size), f.node || ""]));
  fill("top-files", rows, top.error ? "unavailable" : "no files rated yet", 4);
}

function setStatus(text, ok) {
  const status = document.getElementById("status");
  status.textContent = text;
  status.className = "status " + (ok ? "ok" : "error");
}

async function refresh() {
  try {
    const answer = await fetch("/api/v1/dashboard/summary", { cache: "no-store" });
    if (!answer.ok) throw new Error(`HTTP ${answer.status}`);
    const summary = await answer.json();
    document.getElementById("node-name").textContent = `via ${summary.node.name} (HTDA ${summary.node.version})`;
    renderTotals(summary);
    renderMembers(summary);
    renderStaging(summary);
    renderTop(summary);
    setStatus(`updated ${new Date(summary.time * 1000).toLocaleTimeString()}`, true);
    document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
  } catch (err) {
    setStatus(`cannot reach the node: ${err.message}`, false);
  } finally {
    setTimeout(refresh, refreshMs);
  }
}

refresh();
