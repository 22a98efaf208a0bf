// The console page: renders the snapshots the server streams. Data is put
// in the page with textContent only, never as HTML.
"use strict";

let writable = false;
let faults = { rules: [] };

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function table(caption, headers, rows, attrs) {
  return el("table", attrs,
    caption ? el("caption", {}, caption) : null,
    el("thead", {}, el("tr", {}, headers.map(h => el("th", { scope: "col" }, h)))),
    el("tbody", {}, rows.length ? rows : [el("tr", {}, el("td", { colspan: headers.length, class: "muted" }, "none"))]));
}

function badge(ok, yes, no, extra) {
  return el("span", { class: "badge " + (ok ? "ok" : "bad") }, ok ? yes : (extra || no));
}

function replace(id, ...nodes) { document.getElementById(id).replaceChildren(...nodes); }

function ago(t) {
  const s = Math.max(0, Math.round((Date.now() - new Date(t).getTime()) / 1000));
  return s < 60 ? s + "s ago" : s < 3600 ? Math.round(s / 60) + "m ago" : Math.round(s / 3600) + "h ago";
}

function backendList(backends) {
  if (!backends || !backends.length) return el("span", { class: "muted" }, "no backends");
  return el("ul", { class: "backends" }, backends.map(b => {
    const healthy = b.healthy;
    const label = healthy ? "healthy" : (b.draining ? "draining" : "unhealthy");
    return el("li", { "data-backend": b.name || b.node, "data-healthy": String(healthy) },
      el("span", { class: "badge " + (healthy ? "ok" : "bad"), "aria-label": (b.name || b.node) + " " + label }, label), " ",
      b.name || b.node, " ", el("span", { class: "mono muted" }, b.address),
      (b.activeConns || b.conns) ? el("span", { class: "muted" }, " · " + (b.activeConns || b.conns) + " conns") : null,
      !healthy && (b.lastError || b.error) ? el("div", { class: "muted" }, b.lastError || b.error) : null);
  }));
}

function renderCluster(cl) {
  if (!cl) {
    replace("cluster-note", "This cloud was started without --console-kubeconfig: only the cloud side is shown.");
    replace("cluster-services"); replace("cluster-nodes");
    return;
  }
  if (!cl.connected) {
    replace("cluster-note", "Cluster: " + (cl.error || "not connected"));
    replace("cluster-services"); replace("cluster-nodes");
    return;
  }
  replace("cluster-note", "Each LoadBalancer Service, the cloud load balancer serving it, its backends as the data plane sees them, and its pods.");
  replace("cluster-services", table("Services of type LoadBalancer",
    ["Service", "Status", "Ingress", "Ports", "Load balancer", "Backends (nodes)", "Pods"],
    cl.services.map(s => el("tr", { "data-service": s.namespace + "/" + s.name },
      el("td", {}, el("strong", {}, s.namespace + "/" + s.name), s.class ? el("div", { class: "muted" }, "class " + s.class) : null),
      el("td", { class: s.status.startsWith("serving:") ? "ok" : "warn" }, s.status),
      el("td", { class: "mono" }, s.ingress.join(", ") || "—"),
      el("td", { class: "mono" }, s.ports.join(", ")),
      el("td", { class: "mono" }, s.loadBalancer ? el("a", { href: "#lb-" + s.loadBalancer }, s.loadBalancer) : "—"),
      el("td", {}, backendList(s.backends)),
      el("td", {}, s.pods.length ? el("ul", { class: "backends" }, s.pods.map(p =>
        el("li", {}, badge(p.ready, "ready", "not ready"), " ", p.name || p.ip, p.node ? el("span", { class: "muted" }, " on " + p.node) : null))) : el("span", { class: "muted" }, "no endpoints"))))));
  replace("cluster-nodes", table("Nodes",
    ["Node", "Initialized", "Ready", "Zone", "Instance type", "Pod CIDRs", "Addresses", "Provider ID"],
    cl.nodes.map(n => el("tr", { "data-node": n.name },
      el("td", {}, el("strong", {}, n.name)),
      el("td", {}, badge(n.initialized, "initialized", "not initialized"), n.why ? el("div", { class: n.initialized ? "muted" : "bad" }, n.why) : null),
      el("td", {}, badge(n.ready, "Ready", "NotReady")),
      el("td", {}, n.zone || "—"), el("td", {}, n.instanceType || "—"),
      el("td", { class: "mono" }, (n.podCIDRs || []).join(", ") || "—"),
      el("td", { class: "mono" }, (n.addresses || []).join(", ")),
      el("td", { class: "mono" }, n.providerID || "—")))));
}

function renderCloud(c) {
  replace("lbs", table(null, ["Name", "State", "VIPs", "Listeners", "Health check", "Backends (data plane)", "Service"],
    (c.loadBalancers || []).map(lb => el("tr", { id: "lb-" + lb.name, "data-lb": lb.name },
      el("td", { class: "mono" }, lb.name, el("div", { class: "muted" }, "cluster " + lb.cluster)),
      el("td", {}, badge(lb.state === "active" && lb.health.serving, "serving", "", lb.state === "active" ? "not serving" : lb.state), lb.message ? el("div", { class: "bad" }, lb.message) : null),
      el("td", { class: "mono" }, (lb.vips || []).join(", ")),
      el("td", { class: "mono" }, lb.listeners.map(l => {
        const hs = (lb.health.listeners || []).filter(h => h.protocol === l.protocol && h.address.endsWith(":" + l.port));
        const down = hs.find(h => !h.serving);
        const rejected = hs.reduce((n, h) => n + (h.rejected || 0), 0);
        return el("div", {}, l.protocol + " " + l.port + " → " + l.backendPort,
          down ? el("div", { class: "bad" }, "not serving: " + (down.lastError || "accept errors")) : null,
          rejected ? el("div", { class: "warn" }, rejected + " over the connection cap") : null);
      })),
      el("td", { class: "mono" }, lb.healthCheck ? (lb.healthCheck.type + (lb.healthCheck.type === "http" ? " :" + lb.healthCheck.port + lb.healthCheck.path : "")) : "tcp"),
      el("td", {}, backendList(lb.health.backends)),
      el("td", { class: "mono" }, (lb.tags || {})["kubernetes.io/service-name"] || "—")))));

  const byZone = {};
  for (const z of (c.regions || []).flatMap(r => r.zones.map(zone => ({ zone, region: r.name })))) byZone[z.zone] = { region: z.region, list: [] };
  for (const i of c.instances || []) (byZone[i.zone] = byZone[i.zone] || { region: i.region, list: [] }).list.push(i);
  replace("zones", ...Object.entries(byZone).map(([zone, z]) => el("div", { class: "zone" },
    table(zone + " (" + z.region + ") · " + z.list.length + " instances", ["Name", "State", "Type", "Addresses"],
      z.list.map(i => el("tr", { "data-instance": i.name },
        el("td", {}, i.name, el("div", { class: "mono muted" }, i.id)),
        el("td", {}, badge(i.state === "running", "running", "", i.state)),
        el("td", {}, i.type),
        el("td", { class: "mono" }, (i.addresses || []).map(a => el("div", {}, a.address)))))))));

  replace("routes-t", table(null, ["Destination", "Node", "Instance", "Cluster", "Created"],
    (c.routes || []).map(r => el("tr", {}, el("td", { class: "mono" }, r.destinationCIDR, r.blackhole ? el("span", { class: "badge bad" }, "blackhole") : null),
      el("td", {}, r.targetNode), el("td", { class: "mono" }, r.targetInstance || "—"), el("td", {}, r.cluster), el("td", {}, ago(r.createdAt))))));
  replace("volumes-t", table(null, ["Name", "ID", "Zones", "Size"],
    (c.volumes || []).map(v => el("tr", {}, el("td", {}, v.name), el("td", { class: "mono" }, v.id), el("td", {}, v.zones.join(", ")), el("td", {}, v.sizeGiB + " GiB")))));
  replace("registries-t", table(null, ["Host", "Served here", "Created"],
    (c.registries || []).map(r => el("tr", {}, el("td", { class: "mono" }, r.host), el("td", {}, r.served ? "yes" : "no (credentials only)"), el("td", {}, ago(r.createdAt))))));

  faults = c.faults && c.faults.rules ? c.faults : { rules: [] };
  replace("faults-t", table(null, ["Method", "Path prefix", "Error rate", "Throttle rate", "Retry-After", "Latency", ""],
    faults.rules.map((r, idx) => el("tr", { "data-fault": idx },
      el("td", {}, r.method), el("td", { class: "mono" }, r.pathPrefix || "(all)"),
      el("td", {}, pct(r.errorRate)), el("td", {}, pct(r.throttleRate)),
      el("td", {}, (r.retryAfterSeconds || 0) + " s"), el("td", {}, (r.latencyMillis || 0) + " ms"),
      el("td", {}, el("button", { type: "button", class: "danger", disabled: !writable, "aria-label": "Remove rule " + (idx + 1),
        onclick: () => setFaults({ rules: faults.rules.filter((_, j) => j !== idx) }) }, "Remove"))))));

  replace("calls-t", table(null, ["When", "Call", "Status", "Latency", "Caller"],
    (c.calls || []).slice().reverse().map(k => el("tr", {},
      el("td", {}, new Date(k.time).toLocaleTimeString()),
      el("td", { class: "mono" }, k.method + " " + k.path),
      el("td", { class: k.status >= 500 || k.status === 429 ? "bad" : k.status >= 400 ? "warn" : "ok" }, k.status),
      el("td", {}, k.latencyMillis.toFixed(1) + " ms"),
      el("td", { class: "mono" }, k.caller)))));
}

function pct(x) { return Math.round((x || 0) * 100) + " %"; }

function render(snap) {
  renderCluster(snap.cluster);
  renderCloud(snap.cloud);
  const when = new Date(snap.generated).toLocaleTimeString();
  replace("status", snap.cloudError ? "Cloud error: " + snap.cloudError : "Live · updated " + when);
}

function setMode() {
  replace("mode", writable ? "read-write" : "read-only");
  for (const e of document.querySelectorAll("#fault-form input, #fault-form select, #fault-form button")) e.disabled = !writable;
  replace("fault-msg", writable ? "" : "Read-only session: log in with the API token to change faults.");
}

async function setFaults(f) {
  replace("fault-msg", "Saving…");
  const resp = await fetch("/console/api/faults", {
    method: "PUT", headers: { "Content-Type": "application/json", "X-Portside-Console": "1" }, body: JSON.stringify(f),
  });
  replace("fault-msg", resp.ok ? "Saved: " + f.rules.length + " rule(s) in force." : "Refused: " + (await resp.text()));
}

document.getElementById("fault-form").addEventListener("submit", ev => {
  ev.preventDefault();
  const num = id => Number(document.getElementById(id).value || 0);
  const rule = { method: document.getElementById("f-method").value, pathPrefix: document.getElementById("f-path").value.trim(),
    errorRate: num("f-error"), throttleRate: num("f-throttle"), retryAfterSeconds: num("f-retry"), latencyMillis: num("f-latency") };
  setFaults({ rules: faults.rules.concat([rule]) });
});
document.getElementById("f-clear").addEventListener("click", () => setFaults({ rules: [] }));

function connect() {
  const es = new EventSource("/console/api/events");
  es.addEventListener("session", e => { writable = JSON.parse(e.data).writable; setMode(); });
  es.addEventListener("snapshot", e => render(JSON.parse(e.data)));
  // The server ends the stream with "ended" when the session is over.
  es.addEventListener("ended", () => { es.close(); location.href = "/console/login"; });
  es.onerror = () => {
    replace("status", "Disconnected: reconnecting…");
    if (es.readyState === EventSource.CLOSED) {
      // A closed stream is usually an expired session.
      fetch("/console/api/state").then(r => { if (r.status === 401) location.href = "/console/login"; else setTimeout(connect, 2000); })
        .catch(() => setTimeout(connect, 2000));
    }
  };
}
setMode();
connect();
