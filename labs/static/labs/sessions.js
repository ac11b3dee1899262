// Live session cards and rows: one websocket, no polling. Events carry a per-session version;
// an older event than what the page shows is dropped, so out-of-order delivery is harmless.
// Of two events with one version (a queue place moved, the session did not change) the one
// read later wins. A card's timed lines (queue place and wait, started, time left, stops at)
// come composed by the server in its reader's language (labs/presentation.py card_line), in the
// first render and in every update, but for one slot that moves with the clock: a time, shown in
// the reader's time zone, or a duration, which this fills every 30 s from the phrases the page embeds.
(function () {
  "use strict";
  const list = document.getElementById("sessions");
  if (!list) return;
  const courseEl = document.querySelector("[data-course]");
  const courseId = courseEl ? courseEl.dataset.course : "";
  const stopUrl = (id) => list.dataset.stopUrl.replace("00000000-0000-0000-0000-000000000000", id);
  const template = document.getElementById("session-card") || document.getElementById("session-row");
  const ended = new Set(["stopped", "failed"]);
  // Sessions whose row the course page took away because they ended: an ended session never
  // opens again, so an answer read before its end (a read that left before the message and
  // came back after it) must not put the row back.
  const gone = new Set();
  const wordsEl = document.getElementById("session-card-words");
  const words = wordsEl ? JSON.parse(wordsEl.textContent) : null;
  const lang = document.documentElement.lang || undefined;
  const TICK_MS = 30000;
  const RESYNC_SPREAD_MS = 3000; // pages told to read again spread their requests over this long

  const lines = new WeakMap(); // each [data-piece] element's line, as last heard

  function fill(phrase, values) {
    return phrase.replace(/%\((\w+)\)s|%%/g, (match, key) => (key ? String(values[key]) : "%"));
  }

  function duration(seconds) {
    if (seconds < 60) return words.under_a_minute;
    const total = Math.floor(seconds / 60);
    const hours = Math.floor(total / 60);
    const minutes = total % 60;
    return hours ? fill(words.hours, { hours: hours, minutes: minutes }) : fill(words.minutes, { minutes: minutes });
  }

  function clock(iso) {
    return new Intl.DateTimeFormat(lang, { hour: "2-digit", minute: "2-digit", hourCycle: "h23" }).format(new Date(iso));
  }

  // A line as heard: a wait counts down from when the page heard it, so the two clocks never need to agree.
  function heard(line) {
    if (!line) return null;
    if (line.seconds !== undefined) line.untilMs = Date.now() + 1000 * line.seconds;
    else if (line.until) line.untilMs = Date.parse(line.until);
    return line;
  }

  // The line at ``now``: its clock slot filled (line_text() in labs/presentation.py does the first render's).
  function lineText(line, now) {
    if (!line) return "";
    if (line.at) return line.text.replace("%(time)s", () => clock(line.at));
    if (line.untilMs === undefined) return line.text;
    const left = Math.max(0, (line.untilMs - now) / 1000);
    if (line.soon && left < 60) return line.soon;
    return line.text.replace("%(duration)s", () => duration(left));
  }

  function showTimes(el) {
    if (!words) return;
    const now = Date.now();
    el.querySelectorAll("[data-piece]").forEach((piece) => {
      const text = lineText(lines.get(piece), now);
      piece.textContent = text;
      piece.hidden = !text;
    });
  }

  function setLines(el, session) {
    const heardLines = session.lines || {};
    el.querySelectorAll("[data-piece]").forEach((piece) => lines.set(piece, heard(heardLines[piece.dataset.piece])));
  }

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
    if (courseId && (ended.has(session.state) || gone.has(session.id))) return null; // the course page lists open sessions only
    el = template.content.firstElementChild.cloneNode(true);
    el.dataset.sessionId = session.id;
    el.dataset.version = "0";
    el.dataset.readAtMs = "0";
    const stop = el.querySelector('[data-role="stop"]');
    if (stop) stop.action = stopUrl(session.id);
    const extend = el.querySelector('[data-role="extend"]');
    if (extend) extend.action = stopUrl(session.id).replace(/stop\/$/, "extend/");
    const keep = el.querySelector('[data-role="keep"]');
    if (keep) keep.action = stopUrl(session.id).replace(/stop\/$/, "keep/");
    const smaller = el.querySelector('[data-role="smaller"]');
    if (smaller) smaller.action = stopUrl(session.id).replace(/stop\/$/, "smaller/");
    const empty = list.querySelector(".empty");
    if (empty) empty.remove();
    if (courseId) list.append(el); else list.prepend(el);
    return el;
  }

  function apply(session) {
    const el = elementFor(session);
    if (!el) return;
    const shown = Number(el.dataset.version);
    const readAt = session.read_at_ms || 0;
    if (session.version < shown || (session.version === shown && readAt <= Number(el.dataset.readAtMs || 0))) return;
    el.dataset.version = String(session.version);
    el.dataset.readAtMs = String(readAt);
    el.dataset.state = session.state;
    el.querySelectorAll("[data-field]").forEach((field) => {
      const value = session[field.dataset.field];
      if (value === undefined || value === null) return;
      field.textContent = value;
      if ("optional" in field.dataset) field.hidden = !value; // no empty line where there is nothing to say
    });
    setLines(el, session);
    showTimes(el);
    const runsOn = el.querySelector('[data-role="runs-on"]');
    if (runsOn) runsOn.hidden = !(session.state === "running" && session.placement);
    const open = el.querySelector('[data-role="open"]');
    if (open) {
      open.hidden = !session.access_url;
      open.href = session.access_url || "#";
    }
    const stop = el.querySelector('[data-role="stop"]');
    if (stop) stop.hidden = !session.can_stop;
    const extend = el.querySelector('[data-role="extend"]');
    if (extend) extend.hidden = !session.extensions_left;
    const keep = el.querySelector('[data-role="keep"]');
    if (keep) keep.hidden = !session.can_keep;
    // Queued for capacity with a smaller template that starts now: one click switches to it.
    const smaller = el.querySelector('[data-role="smaller"]');
    if (smaller) {
      const offer = session.smaller_offer;
      smaller.hidden = !offer;
      if (offer) smaller.querySelector('input[name="template"]').value = offer.template;
    }
    if (courseId && ended.has(session.state)) {
      gone.add(session.id);
      el.remove();
    }
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
    const isExtend = form.dataset.role === "extend" || form.dataset.role === "keep";
    const isSwitch = form.dataset.role === "smaller";
    if (!isLaunch && !isStop && !isExtend && !isSwitch) return;
    event.preventDefault();
    if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) return;
    const button = form.querySelector("button");
    if (button) button.disabled = true;
    try {
      const result = await post(form.action, new FormData(form));
      if (isLaunch && result.ok) apply(result.data.session);
      else if (isSwitch && result.ok) {
        apply(result.data.withdrawn);
        apply(result.data.session);
      }
      else if (!result.ok) flash(result.data.error || list.dataset.msgFailed + " (HTTP " + result.status + ")", "error");
    } catch (e) {
      flash(list.dataset.msgUnreachable, "error");
    } finally {
      if (button) button.disabled = false;
    }
  });

  // Events sent while no socket was open are gone: after a reconnect fetch each shown session
  // once; on the first open only those still on their way (a change between the page's render
  // and the socket's open, e.g. a stop just asked for, would otherwise never show).
  const settled = new Set(["running", "stopped", "failed"]);
  async function refreshShown(onlyMoving) {
    const ids = Array.from(list.querySelectorAll("[data-session-id]"))
      .filter((el) => !onlyMoving || !settled.has(el.dataset.state))
      .map((el) => el.dataset.sessionId)
      .filter(Boolean);
    for (const id of ids) {
      const response = await fetch("/sessions/" + id + "/", { headers: { Accept: "application/json" } });
      if (response.ok) apply((await response.json()).session);
    }
  }

  // The first render's lines (their waits count from now); then every card's timed lines follow the clock.
  list.querySelectorAll("[data-session-id]").forEach((el) => {
    el.querySelectorAll("[data-piece]").forEach((piece) => lines.set(piece, heard(piece.dataset.line ? JSON.parse(piece.dataset.line) : null)));
    showTimes(el);
  });
  setInterval(() => list.querySelectorAll("[data-session-id]").forEach(showTimes), TICK_MS);

  let delay = 500;
  function connect(isReconnect) {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + "/ws/sessions/" + (courseId ? "?course=" + courseId : ""));
    socket.addEventListener("open", () => {
      document.body.dataset.live = "yes";
      delay = 500;
      refreshShown(!isReconnect);
    });
    socket.addEventListener("message", (event) => {
      const message = JSON.parse(event.data);
      if (message.type === "sessions") message.sessions.forEach(apply);
      // The server's link to the updates was lost and is back: what was sent meanwhile is gone.
      // Every page of the web process hears this at once, so each waits a moment of its own.
      else if (message.type === "resync") setTimeout(() => refreshShown(false), Math.random() * RESYNC_SPREAD_MS);
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
