// Live session cards and rows: one websocket, no polling. Events carry a per-session version;
// an older event than what the page shows is dropped, so out-of-order delivery is harmless.
(function () {
  "use strict";
  const list = document.getElementById("sessions");
  if (!list) return;
  const courseEl = document.querySelector("[data-course]");
  const courseId = courseEl ? courseEl.dataset.course : "";
  const stopUrl = (id) => list.dataset.stopUrl.replace("00000000-0000-0000-0000-000000000000", id);
  const template = document.getElementById("session-card") || document.getElementById("session-row");
  const ended = new Set(["stopped", "failed"]);

  function csrfToken() {
    const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    if (match) return decodeURIComponent(match[1]);
    const input = document.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  function flash(text, kind) {
    const box = document.getElementById("flash");
    const p = document.createElement("p");
    p.className = "flash " + (kind || "info");
    p.textContent = text;
    box.replaceChildren(p);
  }

  function elementFor(session) {
    let el = list.querySelector('[data-session-id="' + session.id + '"]');
    if (el) return el;
    if (courseId && ended.has(session.state)) return null; // the course page lists open sessions only
    el = template.content.firstElementChild.cloneNode(true);
    el.dataset.sessionId = session.id;
    el.dataset.version = "0";
    const stop = el.querySelector('[data-role="stop"]');
    if (stop) stop.action = stopUrl(session.id);
    const empty = list.querySelector(".empty");
    if (empty) empty.remove();
    if (courseId) list.append(el); else list.prepend(el);
    return el;
  }

  function apply(session) {
    const el = elementFor(session);
    if (!el || Number(el.dataset.version) >= session.version) return;
    el.dataset.version = String(session.version);
    el.dataset.state = session.state;
    const share = session.core_percent + " % · " + session.memory_mib + " MiB";
    const values = Object.assign({}, session, { share: share });
    el.querySelectorAll("[data-field]").forEach((field) => {
      const value = values[field.dataset.field];
      if (value !== undefined) field.textContent = value;
    });
    const open = el.querySelector('[data-role="open"]');
    if (open) {
      open.hidden = !session.access_url;
      open.href = session.access_url || "#";
    }
    const stop = el.querySelector('[data-role="stop"]');
    if (stop) stop.hidden = !session.can_stop;
    if (courseId && ended.has(session.state)) el.remove();
  }

  async function post(url, body) {
    const response = await fetch(url, {
      method: "POST",
      headers: { "X-CSRFToken": csrfToken(), Accept: "application/json" },
      body: body,
      credentials: "same-origin",
    });
    let data = {};
    try { data = await response.json(); } catch (e) { /* not JSON: an error page */ }
    return { ok: response.ok, status: response.status, data: data };
  }

  document.addEventListener("submit", async (event) => {
    const form = event.target;
    const isLaunch = form.classList.contains("js-launch");
    const isStop = form.dataset.role === "stop";
    if (!isLaunch && !isStop) return;
    event.preventDefault();
    if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) return;
    const button = form.querySelector("button");
    if (button) button.disabled = true;
    try {
      const result = await post(form.action, new FormData(form));
      if (isLaunch && result.ok) apply(result.data.session);
      else if (!result.ok) flash(result.data.error || "Request failed (" + result.status + ")", "error");
    } catch (e) {
      flash("The portal cannot be reached; try again.", "error");
    } finally {
      if (button) button.disabled = false;
    }
  });

  // After a reconnect, events sent while disconnected are gone: fetch each shown session once.
  async function refreshShown() {
    const ids = Array.from(list.querySelectorAll("[data-session-id]")).map((el) => el.dataset.sessionId).filter(Boolean);
    for (const id of ids) {
      const response = await fetch("/sessions/" + id + "/", { headers: { Accept: "application/json" } });
      if (response.ok) apply((await response.json()).session);
    }
  }

  let delay = 500;
  function connect(isReconnect) {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + "/ws/sessions/" + (courseId ? "?course=" + courseId : ""));
    socket.addEventListener("open", () => {
      document.body.dataset.live = "yes";
      delay = 500;
      if (isReconnect) refreshShown();
    });
    socket.addEventListener("message", (event) => {
      const message = JSON.parse(event.data);
      if (message.type === "sessions") message.sessions.forEach(apply);
    });
    socket.addEventListener("close", (event) => {
      document.body.dataset.live = "no";
      if (event.code === 4401 || event.code === 4403) return;
      setTimeout(() => connect(true), delay);
      delay = Math.min(delay * 2, 15000);
    });
  }
  connect(false);
})();
