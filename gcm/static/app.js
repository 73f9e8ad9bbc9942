// The RoQ-Py dashboard: draws the GCM's live feed (/api/v1/stream) on one screen.
//
// Plain DOM, no framework. A state is drawn at most once per animation frame; host cards and queue rows
// are kept by name and updated in place; every history is bounded. Text from the server goes in through
// textContent only. window.roqRender(state) and window.roqAddEvent(event) draw without the feed (tests);
// open the page with ?feed=0 to keep the feed off.
"use strict";

(function () {
  const HISTORY_S = 300;  // the window of the sparklines and of the exchange chart
  const MAX_POINTS = 400;  // points per history, however fast states come
  const MAX_EVENTS = 200;
  const MAX_PUBS_SHOWN = 8;  // publishers listed per exchange in the detail
  const STALE_MS = 5000;  // an open feed with no state for this long is shown as stale
  const RETRY_MS = 5000;  // a feed the browser gave up on (an HTTP error) is opened again after this
  const SVG = "http://www.w3.org/2000/svg";
  const COLUMNS = ["name", "state", "in", "out", "spark", "exchanges", "publishers", "subscribers",
    "relocations", "failovers", "scale_outs", "scale_ins"];
  const CATEGORY = {
    relocated: "move", relocation_failed: "bad", failover: "bad", exchange_lost: "bad",
    scale_out: "scale", scale_in: "scale", scale_out_done: "scale",
    thresholds_adopted: "tune", rules_changed: "tune", exchange_joined: "join", monitor_started: "join",
  };

  const $ = (id) => document.getElementById(id);
  const queueBody = $("queues").tBodies[0];
  const hostBox = $("hosts");
  const eventList = $("events");
  const filterBox = $("filter");

  const treePanel = $("tree-panel");
  const treeList = $("t-tree");
  const linkBytes = new Map();  // child cluster -> {t, bytes}: what its link had carried at the last state
  const queueRows = new Map();  // queue name -> {tr, cells, line}
  const hostCards = new Map();  // host address -> {root, name, cpu, mem, text}
  const history = new Map();  // queue name -> {t: [], rin: [], nx: []}, oldest first
  const events = [];  // newest first: {key, time, li, match}
  const shown = new Set();  // keys of the events in the list
  let current = null;  // the state drawn last
  let pending = null;  // the newest state not drawn yet
  let frame = 0;
  let renders = 0;
  let selected = null;
  let filter = "";
  let lastState = 0;
  let conn = "connecting";

  // ------------------------------------------------------------------ small helpers

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function setText(node, text) {
    if (node.textContent !== text) node.textContent = text;
  }

  function num(v) {
    return typeof v === "number" && isFinite(v) ? v : 0;
  }

  function rate(v) {
    v = num(v);
    if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (v >= 1e4) return (v / 1e3).toFixed(0) + "k";
    if (v >= 1e3) return (v / 1e3).toFixed(1) + "k";
    return v >= 10 || v === 0 ? v.toFixed(0) : v.toFixed(1);
  }

  function millis(v) {  // -1 or null: no records in the last period
    return typeof v === "number" && v >= 0 ? (v < 10 ? v.toFixed(2) : v.toFixed(0)) + " ms" : "–";
  }

  function bytes(v) {
    v = num(v);
    const units = ["B", "kB", "MB", "GB", "TB"];
    let i = 0;
    while (v >= 1000 && i < units.length - 1) {
      v /= 1000;
      i++;
    }
    return (i ? v.toFixed(1) : v.toFixed(0)) + " " + units[i];
  }

  function journalText(j) {  // a durable queue's journal, as its monitor last heard it
    const where = "journal on " + String(j.host || "?");
    if (j.alive == null) return where + ": not heard yet";
    const failures = num(j.write_failures);
    return where + (j.alive ? "" : " (silent)") + " · " + String(j.durability || "") + " · " + bytes(j.size_bytes) +
      ", offsets " + num(j.first_offset) + ".." + num(j.next_offset) + " · lag " + bytes(j.lag_bytes) +
      " · unsynced " + bytes(j.unsynced_bytes) + " · sync " + millis(j.sync_ms) + " (max " + millis(j.sync_max_ms) +
      ")" + (failures ? " · " + failures + " failed writes" : "") +
      (j.replicas || []).map((r) => " · " + String(r.replica) + " " + String(r.role) + " e" + num(r.epoch) +
        (r.learner ? " (learner)" : "") + (r.alive ? "" : " (silent)") + (r.in_sync ? "" : " lag " + num(r.lag))).join("");
  }

  function clock(t) {
    return new Date(t * 1000).toLocaleTimeString([], { hour12: false });
  }

  function bar(parts, percent, label) {
    const p = Math.max(0, Math.min(100, num(percent)));
    const width = p.toFixed(0) + "%";
    if (parts.fill.style.width !== width) parts.fill.style.width = width;
    parts.fill.classList.toggle("hot", p >= 80);
    setText(parts.label, label);
  }

  function makeBar() {
    const root = el("div", "bar");
    const fill = el("div", "fill");
    const label = el("span", "label");
    root.append(fill, label);
    return { root, fill, label };
  }

  // ------------------------------------------------------------------ history

  function seed(past) {  // a feed's first state: the last minutes of each queue the page has not seen yet
    for (const [name, h] of Object.entries(past || {})) {
      if (history.has(name) || !h || !Array.isArray(h.t)) continue;
      const n = Math.min(h.t.length, MAX_POINTS);
      history.set(name, { t: h.t.slice(-n).map(num), rin: (h.rin || []).slice(-n).map(num),
                          nx: (h.nx || []).slice(-n).map(num) });
    }
  }

  function ingest(state) {
    seed(state.history);
    const t = num(state.time) || Date.now() / 1000;
    const names = new Set();
    for (const q of state.queues || []) {
      names.add(q.name);
      let h = history.get(q.name);
      if (!h) history.set(q.name, h = { t: [], rin: [], nx: [] });
      if (h.t.length && t <= h.t[h.t.length - 1]) continue;  // a state seen already (a reconnect)
      h.t.push(t);
      h.rin.push(num(q.records_in_per_s));
      h.nx.push((q.exchanges || []).length);
      while (h.t.length > MAX_POINTS || h.t[0] < t - HISTORY_S) {
        h.t.shift();
        h.rin.shift();
        h.nx.shift();
      }
    }
    for (const name of history.keys()) if (!names.has(name)) history.delete(name);
  }

  function sparkPoints(h) {
    if (!h || !h.t.length) return "";
    const end = h.t[h.t.length - 1];
    const top = Math.max(1, ...h.rin);
    let out = "";
    for (let i = 0; i < h.t.length; i++) {
      const x = 100 - (end - h.t[i]) / HISTORY_S * 100;
      const y = 19 - h.rin[i] / top * 18;
      out += x.toFixed(1) + "," + y.toFixed(1) + " ";
    }
    return out;
  }

  function stepPath(h) {  // the exchange count as steps, 300 x 60
    if (!h || !h.t.length) return { d: "", low: 0, high: 0 };
    const end = h.t[h.t.length - 1];
    const low = Math.min(...h.nx), high = Math.max(...h.nx);
    const y = (n) => (56 - n / Math.max(high, 1) * 48).toFixed(1);
    const x = (t) => (300 - (end - t) / HISTORY_S * 300).toFixed(1);
    let d = "M" + x(h.t[0]) + " " + y(h.nx[0]);
    for (let i = 1; i < h.t.length; i++) d += "H" + x(h.t[i]) + "V" + y(h.nx[i]);
    return { d: d + "H300", low, high };
  }

  // ------------------------------------------------------------------ drawing

  function render(state) {
    current = state;
    renders += 1;
    document.body.dataset.renders = String(renders);
    const queues = Array.isArray(state.queues) ? state.queues : [];
    const hosts = Array.isArray(state.hosts) ? state.hosts : [];
    let rin = 0, rout = 0;
    for (const q of queues) {
      rin += num(q.records_in_per_s);
      rout += num(q.records_out_per_s);
    }
    setText($("leader"), String(state.leader || "–"));
    setText($("n-hosts"), String(hosts.length));
    setText($("n-queues"), String(queues.length));
    setText($("total-in"), rate(rin));
    setText($("total-out"), rate(rout));
    renderHosts(hosts);
    renderTree(state.federation, num(state.time));
    renderQueues(queues);
    renderDetail(queues);
  }

  // the cluster's place in its tree: its path up to the root, itself, and each child with its link's state and rate
  function renderTree(tree, now) {
    treePanel.hidden = !tree;
    if (!tree) return;
    const path = Array.isArray(tree.path) ? tree.path.map(String) : [];
    setText($("t-place"), String(tree.name) + " (" + String(tree.role) + ")");
    const items = [];
    const up = path.slice().reverse();  // the root first
    up.forEach((name, depth) => items.push({ cls: "t-up", depth, text: name }));
    items.push({ cls: "t-self", depth: up.length, text: String(tree.name) + " (this cluster)" });
    const children = Array.isArray(tree.children) ? tree.children : [];
    const seen = new Set();
    for (const c of children) {
      const name = String(c.name);
      seen.add(name);
      const links = Array.isArray(c.links) ? c.links : [];
      let carried = 0, records = 0, backlog = 0, cap = 0, refused = false;
      for (const x of links) {
        carried += num(x.bytes);
        records += num(x.records);
        backlog += num(x.backlog);
        cap = Math.max(cap, num(x.rate_limit));
        refused = refused || Boolean(x.refused);
      }
      const before = linkBytes.get(name);
      const per = before && now > before.t && carried >= before.bytes ? (carried - before.bytes) / (now - before.t) : 0;
      linkBytes.set(name, { t: now, bytes: carried });
      const heard = num(c.heard_s);
      const state = refused ? "REFUSED" : heard < 3 ? "up" : "silent " + heard.toFixed(0) + "s";
      const below = num(c.below) ? " · " + num(c.below) + " below" : "";
      items.push({ cls: "t-child", depth: up.length + 1, name, state,
        text: name + below + " · " + state + " · " + rate(records) + " records · " + rate(per) + "B/s" +
          (cap ? " (cap " + rate(cap) + "B/s)" : "") + " · backlog " + bytes(backlog) });
    }
    for (const name of linkBytes.keys()) if (!seen.has(name)) linkBytes.delete(name);
    while (treeList.children.length > items.length) treeList.lastChild.remove();
    items.forEach((it, i) => {
      let li = treeList.children[i];
      if (!li) {
        li = el("li");
        treeList.appendChild(li);
      }
      li.className = it.cls;
      li.style.paddingLeft = (it.depth * 1.5) + "em";
      if (it.name) li.dataset.child = it.name; else delete li.dataset.child;
      if (it.state) li.dataset.state = it.state; else delete li.dataset.state;
      setText(li, (it.depth ? "└ " : "") + it.text);
    });
  }

  function renderHosts(hosts) {
    const keep = new Set();
    hosts.forEach((h, i) => {
      const key = String(h.address);
      keep.add(key);
      let card = hostCards.get(key);
      if (!card) {
        card = { root: el("div", "host"), name: el("div", "name", key), cpu: makeBar(), mem: makeBar(),
          text: el("div", "muted") };
        card.root.dataset.host = key;
        card.root.append(card.name, card.cpu.root, card.mem.root, card.text);
        hostCards.set(key, card);
      }
      if (hostBox.children[i] !== card.root) hostBox.insertBefore(card.root, hostBox.children[i] || null);
      const cpu = num(h.cpu_percent), mem = num(h.memory_percent);
      bar(card.cpu, cpu, "CPU " + cpu.toFixed(0) + "% of " + num(h.cpus) + " cores");
      bar(card.mem, mem, "memory " + mem.toFixed(0) + "%");
      setText(card.text, "exchanges " + num(h.exchanges) + "/" + num(h.max_exchanges) + " · monitors " +
        num(h.monitors) + " · net " + rate(h.net_bytes_per_s) + "B/s");
    });
    for (const [key, card] of hostCards) {
      if (!keep.has(key)) {
        card.root.remove();
        hostCards.delete(key);
      }
    }
  }

  function makeRow(name) {
    const tr = el("tr");
    tr.dataset.queue = name;
    const cells = {};
    for (const c of COLUMNS) {
      cells[c] = el("td", "c-" + c);
      tr.appendChild(cells[c]);
    }
    cells.name.textContent = name;
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("viewBox", "0 0 100 20");
    svg.setAttribute("preserveAspectRatio", "none");
    const line = document.createElementNS(SVG, "polyline");
    svg.appendChild(line);
    cells.spark.appendChild(svg);
    return { tr, cells, line };
  }

  function renderQueues(queues) {
    const keep = new Set();
    queues.forEach((q, i) => {
      const name = String(q.name);
      keep.add(name);
      let row = queueRows.get(name);
      if (!row) queueRows.set(name, row = makeRow(name));
      if (queueBody.rows[i] !== row.tr) queueBody.insertBefore(row.tr, queueBody.rows[i] || null);
      const c = row.cells, counters = q.counters || {};
      const state = String(q.state || "");
      // a running queue whose monitor did not answer shows its topology only: say so, not zeros
      setText(c.state, state + (state === "running" && q.status_from === "topology" ? " (no monitor status)" : ""));
      if (c.state.dataset.state !== state) c.state.dataset.state = state;
      setText(c.in, rate(q.records_in_per_s));
      setText(c.out, rate(q.records_out_per_s));
      setText(c.exchanges, String((q.exchanges || []).length));
      setText(c.publishers, String(num(q.publishers)));
      setText(c.subscribers, String(num(q.subscribers)));
      for (const k of ["relocations", "failovers", "scale_outs", "scale_ins"]) setText(c[k], String(num(counters[k])));
      const points = sparkPoints(history.get(name));
      if (row.line.getAttribute("points") !== points) row.line.setAttribute("points", points);
    });
    for (const [name, row] of queueRows) {
      if (!keep.has(name)) {
        row.tr.remove();
        queueRows.delete(name);
      }
    }
    if (!queueRows.has(selected)) selected = queues.length ? String(queues[0].name) : null;
    for (const [name, row] of queueRows) row.tr.classList.toggle("selected", name === selected);
  }

  function renderDetail(queues) {
    const q = queues.find((x) => String(x.name) === selected);
    setText($("d-name"), q ? String(q.name) : "–");
    setText($("d-state"), q ? String(q.state || "") : "");
    setText($("d-host"), q ? "monitor on " + String(q.host || "?") : "");
    const journal = $("d-journal"), j = q && q.journal && typeof q.journal === "object" ? q.journal : null;
    journal.hidden = !j;
    setText(journal, j ? journalText(j) : "");
    journal.dataset.alive = j && j.alive ? "1" : "0";
    const chart = stepPath(q && history.get(selected));
    $("d-chart").firstElementChild.setAttribute("d", chart.d);
    setText($("d-chart-label"), q ? "exchanges, last 5 min: now " + (q.exchanges || []).length + ", lowest " +
      chart.low + ", highest " + chart.high : "exchanges, last 5 min");

    const placement = (q && q.placement) || {};
    const onExchange = new Map();
    for (const p of (q && q.publisher_list) || []) {
      const x = String(p.exchange);
      if (!onExchange.has(x)) onExchange.set(x, []);
      onExchange.get(x).push(p);
    }
    const rows = [];
    for (const x of (q && q.exchanges) || []) {
      const id = String(x.id);
      const tr = el("tr", x.draining ? "exchange draining" : "exchange");
      tr.dataset.exchange = id;
      const pubs = el("td", "pubs");
      const list = (onExchange.get(id) || []).sort((a, b) => num(b.records_per_s) - num(a.records_per_s));
      for (const p of list.slice(0, MAX_PUBS_SHOWN)) {
        // p.id is the publisher's label: opaque, stable while this GCM runs (its id needs a token: /publishers)
        const pub = el("span", "pub", String(p.id).slice(0, 8) + " " + rate(p.records_per_s) + "/s");
        pub.title = "an opaque label of the publisher, not its id";
        pubs.appendChild(pub);
      }
      const more = Math.max(list.length, num(x.publishers)) - Math.min(list.length, MAX_PUBS_SHOWN);
      if (more > 0) pubs.appendChild(el("span", "muted", "+" + more + " more"));
      if (!pubs.childNodes.length) pubs.appendChild(el("span", "muted", "none"));
      const host = x.host || placement[id.split("-")[0]];  // the feed says; older feeds: by slot
      tr.append(el("td", null, id + (x.draining ? " (draining)" : "")), el("td", null, host ? String(host) : "?"),
        el("td", "n", rate(x.records_per_s)), el("td", "n", rate(x.records_out_per_s)),
        el("td", "n", (num(x.busy) * 100).toFixed(0) + "%"), pubs);
      rows.push(tr);
    }
    $("d-exchanges").tBodies[0].replaceChildren(...rows);

    const groups = new Map();  // prefix -> {n, p50s, p99s}
    for (const s of (q && q.latency) || []) {
      const prefix = s.prefix === "" || s.prefix == null ? "(all keys)" : String(s.prefix);
      if (!groups.has(prefix)) groups.set(prefix, { n: 0, p50s: [], p99s: [] });
      const g = groups.get(prefix);
      g.n += 1;
      if (typeof s.p50 === "number" && s.p50 >= 0) g.p50s.push(s.p50);
      if (typeof s.p99 === "number" && s.p99 >= 0) g.p99s.push(s.p99);
    }
    const latency = [];
    for (const [prefix, g] of [...groups].sort((a, b) => (a[0] < b[0] ? -1 : 1))) {
      g.p50s.sort((a, b) => a - b);
      const tr = el("tr");
      tr.append(el("td", null, prefix), el("td", "n", String(g.n)),
        el("td", "n", millis(g.p50s.length ? g.p50s[g.p50s.length >> 1] : null)),
        el("td", "n", millis(g.p99s.length ? Math.max(...g.p99s) : null)));
      tr.title = "p50: the median of the group's subscribers; p99: the highest";
      latency.push(tr);
    }
    $("d-latency").tBodies[0].replaceChildren(...latency);
  }

  function select(name) {
    selected = name;
    if (current) render(current);
  }

  function schedule(state) {
    pending = state;
    if (!frame) {
      frame = requestAnimationFrame(() => {
        frame = 0;
        const s = pending;
        pending = null;
        if (s) render(s);
      });
    }
  }

  // ------------------------------------------------------------------ events

  function addEvent(ev) {
    if (!ev || typeof ev !== "object") return;
    const time = num(ev.time), queue = String(ev.queue ?? ""), kind = String(ev.kind ?? "");
    const key = queue + "/" + ev.seq + "/" + time;  // seq counts per queue, and restarts with a new queue
    if (shown.has(key)) return;  // a reconnected feed sends the newest events again
    let i = 0;
    while (i < events.length && events[i].time > time) i++;
    if (i >= MAX_EVENTS) return;
    const li = el("li");
    li.dataset.kind = kind;
    li.dataset.queue = queue;
    li.dataset.category = CATEGORY[kind] || (kind.startsWith("limit") ? "bad" : "info");
    const when = el("time", null, clock(time));
    when.dateTime = new Date(time * 1000).toISOString();
    li.append(when, el("span", "queue", queue), el("span", "kind", kind),
      el("span", "text", String(ev.text ?? "")));
    const match = (kind + " " + queue).toLowerCase();
    li.hidden = filter !== "" && !match.includes(filter);
    eventList.insertBefore(li, i < events.length ? events[i].li : null);
    events.splice(i, 0, { key, time, li, match });
    shown.add(key);
    while (events.length > MAX_EVENTS) {
      const old = events.pop();
      old.li.remove();
      shown.delete(old.key);
    }
  }

  filterBox.addEventListener("input", () => {
    filter = filterBox.value.trim().toLowerCase();
    for (const e of events) e.li.hidden = filter !== "" && !e.match.includes(filter);
  });

  queueBody.addEventListener("click", (e) => {
    const tr = e.target.closest("tr");
    if (tr && tr.dataset.queue) select(tr.dataset.queue);
  });

  eventList.addEventListener("click", (e) => {
    const q = e.target.closest(".queue");
    if (q && queueRows.has(q.textContent)) select(q.textContent);
  });

  // ------------------------------------------------------------------ the feed

  function setConn(value) {
    conn = value;
    const node = $("conn");
    setText(node, value);
    node.dataset.state = value;
    document.body.dataset.connected = value === "live" ? "1" : "0";
  }

  function parse(text) {
    try {
      return JSON.parse(text);
    } catch (e) {
      return null;
    }
  }

  function connect() {
    const source = new EventSource("/api/v1/stream");
    source.onopen = () => setConn("live");
    source.onerror = () => {
      setConn("reconnecting");  // the browser tries again by itself, unless the server answered an error
      if (source.readyState === EventSource.CLOSED) setTimeout(connect, RETRY_MS);
    };
    source.addEventListener("state", (e) => {
      const state = parse(e.data);
      if (!state || typeof state !== "object") return;
      lastState = performance.now();
      if (conn !== "live") setConn("live");
      ingest(state);
      schedule(state);
    });
    source.addEventListener("event", (e) => addEvent(parse(e.data)));
  }

  window.roqRender = (state) => {
    ingest(state);
    pending = null;
    render(state);
  };
  window.roqAddEvent = addEvent;

  if (new URLSearchParams(location.search).get("feed") === "0") {
    setConn("off");
  } else {
    connect();
    setInterval(() => {
      if (conn === "live" && performance.now() - lastState > STALE_MS) setConn("stale");
    }, 1000);
  }
})();
