// The cluster page, live: the page listens on /ws/cluster/ and, when something changed, reads
// the cluster's state again (at most once a second) and reshades each card in place.
(function () {
  "use strict";
  const box = document.getElementById("cluster");
  if (!box) return;
  const lang = document.documentElement.lang || "en";
  const gib = (mib) => (Number(mib) / 1024).toLocaleString(lang, { maximumFractionDigits: 3 }) + " GiB";
  let timer = null;

  function draw(state) {
    // The counts above the heatmap: drained, unready and unanswering nodes, in the reader's language.
    if (state.summary) {
      ["nodes", "cards", "nothing_stranded"].forEach((key) => {
        const el = document.querySelector('[data-summary="' + key + '"]');
        if (el) el.textContent = state.summary[key === "nothing_stranded" ? key : key + "_text"];
      });
    }
    state.nodes.forEach((node) => {
      const nodeEl = box.querySelector('[data-node="' + CSS.escape(node.name) + '"]');
      if (!nodeEl) return;
      const sessions = nodeEl.querySelector("[data-node-sessions]");
      if (sessions) sessions.textContent = String(node.sessions);
      const evacuation = nodeEl.querySelector("[data-node-evacuation]");
      if (evacuation) {
        evacuation.textContent = node.evacuation;
        evacuation.hidden = !node.evacuation;
        evacuation.classList.toggle("ok", Boolean(node.empty));
      }
      node.cards.forEach((card) => {
        const cell = nodeEl.querySelector('[data-card="' + card.id + '"]');
        if (!cell) return;
        cell.className = cell.className.replace(/\blevel-\d+\b/, "level-" + card.level);
        cell.classList.toggle("unusable", !card.usable);
        cell.querySelector('[data-field="core"]').textContent = card.core_percent + " %";
        cell.querySelector('[data-field="memory"]').textContent = gib(card.memory_reserved_mib);
        cell.querySelector('[data-field="instances"]').textContent = card.instances + "/" + card.cap;
        const reading = (value, digits) =>
          value === null || value === undefined ? "–" : Number(value).toLocaleString(lang, { minimumFractionDigits: digits, maximumFractionDigits: digits });
        cell.querySelector('[data-field="temperature"]').textContent = reading(card.temperature_celsius, 0);
        cell.querySelector('[data-field="power"]').textContent = reading(card.power_watts, 1);
        cell.dataset.instances = String(card.instances);
      });
    });
  }

  async function refresh() {
    timer = null;
    const response = await fetch(box.dataset.stateUrl, { headers: { Accept: "application/json" }, credentials: "same-origin" });
    if (response.ok) draw(await response.json());
  }

  function changed() {
    if (!timer) timer = setTimeout(refresh, 1000);
  }

  let delay = 500;
  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + "/ws/cluster/");
    socket.addEventListener("open", () => { delay = 500; document.body.dataset.live = "yes"; changed(); });
    socket.addEventListener("message", changed);
    socket.addEventListener("close", (event) => {
      document.body.dataset.live = "no";
      if (event.code === 4401 || event.code === 4403) return;
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 15000);
    });
  }
  connect();
})();
