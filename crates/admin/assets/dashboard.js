// switchyard dashboard: live charts fed by /api/v1/events (server-sent
// events, one sample per second with rates computed by the server), the
// services, cache and pools tables, the per-server actions, and (with [cluster])
// the replication peers, polled from /api/v1/cluster every second.
//
// No framework, no build step. Server data reaches the page only through
// textContent and data attributes, never as HTML. Each chart canvas carries
// its latest plotted values in data-latest (JSON) and its sample count in
// data-points, so tests and curious operators can read what is drawn.
"use strict";

(() => {
  const WINDOW_MS = 5 * 60 * 1000;
  const TOKEN_KEY = "switchyard.token";
  const RETRY_MS = 3000;
  const $ = (id) => document.getElementById(id);

  const state = {
    samples: [],
    lastT: 0,
    latest: null,
    generation: null,
    structure: "",
    source: null,
    retry: null,
    healthTimer: null,
    clusterTimer: null,
    toastTimer: null,
  };

  // ---- API -----------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  const token = () => sessionStorage.getItem(TOKEN_KEY) || "";

  async function api(method, path, body) {
    const headers = {};
    if (token()) headers.Authorization = "Bearer " + token();
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const res = await fetch(path, {
      method,
      headers,
      cache: "no-store",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (_) {
      data = null;
    }
    if (res.status === 401) {
      signedOut();
      throw new ApiError(401, (data && data.error) || "a token is required");
    }
    if (!res.ok) throw new ApiError(res.status, (data && data.error) || text || res.statusText);
    return data;
  }

  const serverPath = (pool, server, action) =>
    `/api/v1/pools/${encodeURIComponent(pool)}/servers/${encodeURIComponent(server)}/${action}`;

  // ---- Session and feed ----------------------------------------------------

  async function start() {
    clearTimeout(state.retry);
    try {
      await refreshHealth();
      await refreshStats();
    } catch (e) {
      if (e.status !== 401) {
        setFeed("reconnecting", "unreachable");
        state.retry = setTimeout(start, RETRY_MS);
      }
      return;
    }
    $("login").hidden = true;
    $("logout").hidden = !token();
    openFeed();
    clearInterval(state.healthTimer);
    state.healthTimer = setInterval(() => refreshHealth().catch(() => {}), 10000);
    clearInterval(state.clusterTimer);
    refreshCluster().catch(() => {});
    state.clusterTimer = setInterval(() => refreshCluster().catch(() => {}), 1000);
  }

  function signedOut() {
    closeFeed();
    clearInterval(state.healthTimer);
    clearInterval(state.clusterTimer);
    setFeed("signed-out", token() ? "token refused" : "sign in");
    $("login").hidden = false;
    $("logout").hidden = true;
    $("token").focus();
  }

  function openFeed() {
    closeFeed();
    const url = "/api/v1/events" + (token() ? "?token=" + encodeURIComponent(token()) : "");
    const source = new EventSource(url);
    state.source = source;
    source.addEventListener("open", () => setFeed("live", "live"));
    source.addEventListener("history", (e) => {
      for (const sample of JSON.parse(e.data)) addSample(sample);
      render();
    });
    source.addEventListener("stats", (e) => {
      addSample(JSON.parse(e.data));
      render();
    });
    source.addEventListener("error", () => {
      setFeed("reconnecting", "reconnecting");
      // CLOSED means the browser gave up (refused or server gone): start over,
      // which also finds out whether a token is now needed.
      if (source.readyState === EventSource.CLOSED) {
        closeFeed();
        state.retry = setTimeout(start, RETRY_MS);
      }
    });
  }

  function closeFeed() {
    if (state.source) state.source.close();
    state.source = null;
  }

  function setFeed(kind, text) {
    const pill = $("feed");
    pill.dataset.feed = kind;
    pill.textContent = text;
  }

  $("login").addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
    $("token").value = "";
    start();
  });

  $("logout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    location.reload();
  });

  // ---- Health and structure ------------------------------------------------

  async function refreshHealth() {
    const h = await api("GET", "/api/v1/health");
    const meta = $("meta");
    meta.replaceChildren(
      ...[`v${h.version}`, `up ${duration(h.uptime_s)}`, `${h.workers} workers`, `generation ${h.generation}`, h.config_source].map(
        (text) => el("span", {}, text)
      )
    );
    const changed = state.generation !== null && state.generation !== h.generation;
    state.generation = h.generation;
    if (changed) await refreshStats();
  }

  // The static part of the tables (modes, listeners, addresses) comes from
  // /api/v1/stats; the live part from each sample.
  async function refreshStats() {
    const stats = await api("GET", "/api/v1/stats");
    buildServices(stats.services);
    buildPools(stats.pools);
    state.structure = structureOf(stats.services, stats.pools);
    if (state.latest) renderTables(state.latest);
  }

  const structureOf = (services, pools) =>
    JSON.stringify([services.map((s) => s.name), pools.map((p) => [p.name, p.servers.map((s) => s.name)])]);

  // ---- Samples -------------------------------------------------------------

  function addSample(sample) {
    if (sample.t <= state.lastT) return;
    state.lastT = sample.t;
    state.samples.push(sample);
    while (state.samples.length && state.samples[0].t < sample.t - WINDOW_MS) state.samples.shift();
    state.latest = sample;
    if (state.structure && structureOf(sample.services, sample.pools) !== state.structure) {
      state.structure = "";
      refreshStats().catch(() => {});
    }
  }

  function render() {
    if (!state.latest) return;
    const t = state.latest.total;
    $("kpi-rps").textContent = number(t.rps);
    $("kpi-bytes").textContent = `${bytes(t.in)}/s · ${bytes(t.out)}/s`;
    $("kpi-conns").textContent = number(t.conns);
    $("kpi-latency").textContent = `${ms(t.p50)} / ${ms(t.p99)}`;
    for (const chart of charts) chart.draw(state.samples);
    renderTables(state.latest);
    renderCaches(state.latest.caches || []);
  }

  // ---- Charts --------------------------------------------------------------

  class Chart {
    constructor(id, series, format, base = 10) {
      this.canvas = $(id);
      this.series = series;
      this.format = format;
      this.base = base;
      const legend = this.canvas.parentElement.querySelector(".legend");
      legend.replaceChildren(
        ...series.map((s) => {
          const swatch = el("i");
          swatch.style.background = `var(${s.color})`;
          return el("span", {}, swatch, s.label);
        })
      );
    }

    draw(samples) {
      const canvas = this.canvas;
      const dpr = window.devicePixelRatio || 1;
      const w = canvas.clientWidth;
      const h = canvas.clientHeight;
      if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
        canvas.width = Math.round(w * dpr);
        canvas.height = Math.round(h * dpr);
      }
      const ctx = canvas.getContext("2d");
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, w, h);
      const css = getComputedStyle(document.documentElement);
      let max = 0;
      for (const sample of samples) {
        for (const s of this.series) {
          const v = s.value(sample);
          if (Number.isFinite(v)) max = Math.max(max, v);
        }
      }
      const top = scaleTop(max, this.base);
      const labels = [0, 1, 2, 3, 4].map((i) => [(top * i) / 4, this.format((top * i) / 4, top / 4)]);
      ctx.font = "11px system-ui, sans-serif";
      const labelWidth = Math.max(...labels.map(([, text]) => ctx.measureText(text).width));
      const pad = { left: Math.ceil(labelWidth) + 14, right: 10, top: 8, bottom: 20 };
      const plotW = Math.max(1, w - pad.left - pad.right);
      const plotH = Math.max(1, h - pad.top - pad.bottom);
      const end = samples.length ? samples[samples.length - 1].t : Date.now();
      const x = (t) => pad.left + plotW * (1 - (end - t) / WINDOW_MS);
      const y = (v) => pad.top + plotH * (1 - v / top);

      ctx.lineWidth = 1;
      ctx.strokeStyle = css.getPropertyValue("--grid");
      ctx.fillStyle = css.getPropertyValue("--muted");
      ctx.textAlign = "right";
      ctx.textBaseline = "middle";
      for (const [v, text] of labels) {
        const gy = Math.round(y(v)) + 0.5;
        ctx.beginPath();
        ctx.moveTo(pad.left, gy);
        ctx.lineTo(pad.left + plotW, gy);
        ctx.stroke();
        ctx.fillText(text, pad.left - 8, gy);
      }
      ctx.textAlign = "center";
      ctx.textBaseline = "top";
      for (let m = 0; m <= 5; m++) {
        ctx.fillText(m === 0 ? "now" : `-${m}m`, Math.min(x(end - m * 60000), pad.left + plotW - 12), pad.top + plotH + 6);
      }

      const latest = {};
      for (const s of this.series) {
        ctx.strokeStyle = css.getPropertyValue(s.color);
        ctx.lineWidth = 1.75;
        ctx.lineJoin = "round";
        ctx.beginPath();
        let penDown = false;
        for (const sample of samples) {
          const v = s.value(sample);
          if (!Number.isFinite(v)) {
            penDown = false;
            continue;
          }
          if (penDown) ctx.lineTo(x(sample.t), y(v));
          else ctx.moveTo(x(sample.t), y(v));
          penDown = true;
        }
        ctx.stroke();
        const last = samples.length ? s.value(samples[samples.length - 1]) : null;
        latest[s.key] = Number.isFinite(last) ? last : null;
      }
      canvas.dataset.latest = JSON.stringify(latest);
      canvas.dataset.points = String(samples.length);
    }
  }

  const charts = [
    new Chart("chart-requests", [{ key: "requests", label: "requests/s", color: "--series-1", value: (s) => s.total.rps }], number),
    new Chart(
      "chart-bytes",
      [
        { key: "in", label: "in", color: "--series-1", value: (s) => s.total.in },
        { key: "out", label: "out", color: "--series-2", value: (s) => s.total.out },
      ],
      (v) => bytes(v),
      1024
    ),
    new Chart("chart-connections", [{ key: "connections", label: "active", color: "--series-3", value: (s) => s.total.conns }], number),
    new Chart(
      "chart-latency",
      [
        { key: "p50", label: "p50", color: "--series-1", value: (s) => s.total.p50 },
        { key: "p90", label: "p90", color: "--series-2", value: (s) => s.total.p90 },
        { key: "p99", label: "p99", color: "--series-4", value: (s) => s.total.p99 },
      ],
      (v, step) => v.toFixed(decimals(step))
    ),
  ];

  window.addEventListener("resize", () => {
    for (const chart of charts) chart.draw(state.samples);
  });

  // ---- Tables --------------------------------------------------------------

  function buildServices(services) {
    const body = $("services").tBodies[0];
    body.replaceChildren(
      ...services.map((s) =>
        el(
          "tr",
          { "data-service": s.name },
          el("td", {}, s.name),
          el("td", {}, s.mode),
          el("td", { class: "mono" }, s.listeners.join(", ")),
          ...["conns", "rps", "in", "out", "p50", "p99"].map((f) => el("td", { class: "num", "data-field": f }, "–"))
        )
      )
    );
  }

  function buildPools(pools) {
    $("pools").replaceChildren(
      ...pools.map((pool) => {
        const title = el("div", { class: "pool-title" }, pool.name, el("small", {}, poolNote(pool)));
        const head = el(
          "tr",
          {},
          ...["Server", "Address", "State"].map((h) => el("th", {}, h)),
          ...["Weight", "Active", "Req/s"].map((h) => el("th", { class: "num" }, h)),
          el("th", {})
        );
        const rows = pool.servers.map((s) => serverRow(pool.name, s));
        const table = el("table", { class: "grid" }, el("thead", {}, head), el("tbody", {}, ...rows));
        return el("div", { class: "pool", "data-pool": pool.name }, title, table);
      })
    );
  }

  const poolNote = (pool) => pool.algorithm + (pool.persistence ? ` · persistence ${pool.persistence}` : "");

  function serverRow(pool, s) {
    const actions = ["enable", "drain", "disable"].map((action) =>
      el("button", { type: "button", "data-action": action, "data-pool": pool, "data-server": s.name }, capitalise(action))
    );
    const row = el(
      "tr",
      { id: `server-${slug(pool)}-${slug(s.name)}`, class: "server", "data-pool": pool, "data-server": s.name },
      el("td", {}, s.name),
      el("td", { class: "mono" }, s.address),
      el("td", {}, el("span", { class: "state", "data-field": "state" })),
      el("td", { class: "num", "data-field": "weight" }),
      el("td", { class: "num", "data-field": "active" }),
      el("td", { class: "num", "data-field": "rps" }, "–"),
      el("td", { class: "actions" }, ...actions)
    );
    updateServerRow(row, s);
    return row;
  }

  function findServerRow(pool, server) {
    for (const row of document.querySelectorAll("tr.server")) {
      if (row.dataset.pool === pool && row.dataset.server === server) return row;
    }
    return null;
  }

  // `s` is a sample's server ({state, weight, active, rps}) or a ServerView.
  function updateServerRow(row, s) {
    row.dataset.state = s.state;
    const field = (name) => row.querySelector(`[data-field="${name}"]`);
    field("state").textContent = s.state + (s.backup ? " (backup)" : "");
    field("weight").textContent = String(s.weight);
    field("active").textContent = number(s.active);
    if (s.rps !== undefined) field("rps").textContent = number(s.rps);
    const current = { up: "enable", draining: "drain", maintenance: "disable" }[s.state];
    for (const button of row.querySelectorAll("button[data-action]")) {
      if (!button.dataset.busy) button.disabled = button.dataset.action === current;
    }
  }

  function renderTables(sample) {
    for (const s of sample.services) {
      const row = [...$("services").tBodies[0].rows].find((r) => r.dataset.service === s.name);
      if (!row) continue;
      const set = (f, text) => (row.querySelector(`[data-field="${f}"]`).textContent = text);
      set("conns", number(s.conns));
      set("rps", number(s.rps));
      set("in", `${bytes(s.in)}/s`);
      set("out", `${bytes(s.out)}/s`);
      set("p50", ms(s.p50));
      set("p99", ms(s.p99));
    }
    for (const pool of sample.pools) {
      for (const s of pool.servers) {
        const row = findServerRow(pool.name, s.name);
        if (row) updateServerRow(row, s);
      }
    }
  }

  // ---- Cache ---------------------------------------------------------------

  // One row per service with a cache, rebuilt from each sample; the panel
  // stays hidden when no service has one. Each row carries its raw values in
  // data attributes (hit ratio as a fraction, served bytes per second).
  function renderCaches(caches) {
    $("caches").hidden = caches.length === 0;
    const percent = (r) => (Number.isFinite(r) ? `${(r * 100).toFixed(1)} %` : "–");
    $("cache-table").tBodies[0].replaceChildren(
      ...caches.map((c) => {
        const cell = (field, text) => el("td", { class: "num", "data-field": field }, text);
        return el(
          "tr",
          {
            class: "cache",
            "data-service": c.name,
            "data-hit-ratio": String(c.hit_ratio),
            "data-served": String(c.served),
          },
          el("td", {}, c.name),
          cell("hit-ratio", percent(c.hit_ratio)),
          cell("hit-ratio-total", percent(c.hit_ratio_total)),
          cell("served", `${bytes(c.served)}/s`),
          cell("served-total", bytes(c.served_total)),
          cell("stored", `${bytes(c.bytes)} / ${bytes(c.size)}`),
          cell("keys", number(c.keys))
        );
      })
    );
  }

  // ---- Cluster -------------------------------------------------------------

  // /api/v1/cluster answers 503 while the node is not ready, with the same
  // body: both are shown. Without [cluster] (no node name) the panel stays hidden.
  async function refreshCluster() {
    let view;
    try {
      view = await api("GET", "/api/v1/cluster");
    } catch (e) {
      if (e.status !== 503) throw e;
      view = await clusterBody();
    }
    if (!view || !view.node) {
      $("cluster").hidden = true;
      return;
    }
    $("cluster").hidden = false;
    const readiness = view.stopping ? "stopping" : view.ready ? "ready" : "not ready";
    $("cluster-node").textContent = `${view.node} · ${readiness}${view.synced ? " · synced" : ""} · ${view.refused} refused`;
    $("cluster").dataset.ready = String(view.ready);
    $("peers").tBodies[0].replaceChildren(...view.peers.map(peerRow));
  }

  async function clusterBody() {
    const headers = token() ? { Authorization: "Bearer " + token() } : {};
    const res = await fetch("/api/v1/cluster", { headers, cache: "no-store" });
    return res.json();
  }

  const link = (up) => el("span", { class: "state" }, up ? "up" : "down");

  function peerRow(p) {
    const cell = (field, text) => el("td", { class: "num", "data-field": field }, text);
    return el(
      "tr",
      {
        class: "peer",
        "data-peer": p.name,
        "data-connected": String(p.connected),
        "data-inbound": String(p.inbound),
        "data-state": p.connected && p.inbound ? "up" : "down",
      },
      el("td", {}, p.name),
      el("td", { class: "mono" }, p.address),
      el("td", { "data-field": "connected" }, link(p.connected)),
      el("td", { "data-field": "inbound" }, link(p.inbound)),
      cell("sent", String(p.sent)),
      cell("received", String(p.received)),
      cell("dropped", String(p.dropped)),
      cell("queued", String(p.queued)),
      cell("lag", ms(p.lag_ms)),
      cell("syncs", `${p.syncs_sent} / ${p.syncs_received}`)
    );
  }

  $("pools").addEventListener("click", async (e) => {
    const button = e.target.closest("button[data-action]");
    if (!button) return;
    const { action, pool, server } = button.dataset;
    button.dataset.busy = "1";
    button.disabled = true;
    try {
      const view = await api("POST", serverPath(pool, server, action));
      delete button.dataset.busy;
      const row = findServerRow(pool, server);
      if (row) updateServerRow(row, view);
      toast(`${pool}/${server}: ${view.state}`);
    } catch (err) {
      delete button.dataset.busy;
      button.disabled = false;
      toast(`${action} ${pool}/${server}: ${err.message}`, true);
    }
  });

  // ---- Helpers -------------------------------------------------------------

  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
    for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    return node;
  }

  function toast(text, error = false) {
    const box = $("toast");
    box.textContent = text;
    box.dataset.kind = error ? "error" : "info";
    box.hidden = false;
    clearTimeout(state.toastTimer);
    state.toastTimer = setTimeout(() => (box.hidden = true), error ? 8000 : 3000);
  }

  // The top of a chart's scale: four equal steps of a round size (1, 2, 2.5
  // or 5 times a power of ten, or of 1024 for bytes) just above `max`.
  function scaleTop(max, base) {
    if (!(max > 0)) return 4;
    const quarter = (max * 1.1) / 4; // Headroom: a flat line never sits on the frame.
    const unit = base === 1024 && quarter >= 1024 ? Math.pow(1024, Math.floor(Math.log(quarter) / Math.log(1024))) : 1;
    const v = quarter / unit;
    const exp = Math.pow(10, Math.floor(Math.log10(v)));
    const f = v / exp;
    const step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * exp;
    return step * unit * 4;
  }

  // Decimals that show every multiple of `step` exactly (0.5 → 1, 2.5 → 1, 20 → 0).
  function decimals(step) {
    const exp = Math.floor(Math.log10(step));
    const mantissa = step / Math.pow(10, exp);
    const extra = Math.abs(mantissa - Math.round(mantissa)) > 1e-9 ? 1 : 0;
    return Math.max(0, extra - exp);
  }

  function number(v) {
    if (!Number.isFinite(v)) return "–";
    if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (v >= 1e4) return (v / 1e3).toFixed(1) + "k";
    if (v >= 100 || Number.isInteger(v)) return Math.round(v).toString();
    return v.toFixed(1);
  }

  function bytes(v) {
    if (!Number.isFinite(v)) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (v >= 1024 && i < units.length - 1) {
      v /= 1024;
      i++;
    }
    return (i === 0 ? Math.round(v) : v.toFixed(1)) + " " + units[i];
  }

  const ms = (v) => (Number.isFinite(v) ? `${v.toFixed(v < 10 ? 2 : 1)} ms` : "–");

  function duration(s) {
    const d = Math.floor(s / 86400);
    const h = Math.floor(s / 3600) % 24;
    const m = Math.floor(s / 60) % 60;
    if (d) return `${d}d ${h}h`;
    if (h) return `${h}h ${m}m`;
    if (m) return `${m}m ${s % 60}s`;
    return `${s}s`;
  }

  const capitalise = (s) => s.charAt(0).toUpperCase() + s.slice(1);
  const slug = (s) => s.replace(/[^A-Za-z0-9_-]/g, "_");

  start();
})();
