// The instructor console's live parts: use against guarantee (refreshed when the course's
// sessions change, heard over the same websocket as the session rows), the template form's
// "how many fit" preview, the usage chart (also drawn on the operator's usage page) and the
// roster import's copy buttons. No inline script: everything starts from here.
(function () {
  "use strict";
  const lang = document.documentElement.lang || "en";

  function gib(mib) {
    const value = Number(mib) / 1024;
    return value.toLocaleString(lang, { maximumFractionDigits: 3 }) + " GiB";
  }

  // --- live use -------------------------------------------------------------------------------
  const useBlocks = Array.from(document.querySelectorAll("[data-course-use]"));
  if (useBlocks.length) {
    const byCourse = new Map(useBlocks.map((el) => [el.dataset.courseUse, el]));
    const pending = new Set();
    let timer = null;

    async function refresh() {
      timer = null;
      const ids = Array.from(pending);
      pending.clear();
      for (const id of ids) {
        const el = byCourse.get(id);
        const response = await fetch(el.dataset.useUrl, { headers: { Accept: "application/json" }, credentials: "same-origin" });
        if (!response.ok) continue;
        const use = await response.json();
        el.querySelectorAll("[data-use]").forEach((field) => {
          const value = use[field.dataset.use];
          field.textContent = field.dataset.format === "gib" ? gib(value) : String(value);
          const meter = field.parentElement.querySelector("meter");
          if (meter) meter.value = value;
        });
      }
    }

    function changed(courseId) {
      if (!byCourse.has(String(courseId))) return;
      pending.add(String(courseId));
      if (!timer) timer = setTimeout(refresh, 400);
    }

    let delay = 500;
    function connect() {
      const scheme = location.protocol === "https:" ? "wss://" : "ws://";
      const query = Array.from(byCourse.keys()).map((id) => "course=" + encodeURIComponent(id)).join("&");
      const socket = new WebSocket(scheme + location.host + "/ws/sessions/?" + query);
      socket.addEventListener("open", () => { delay = 500; byCourse.forEach((_, id) => changed(id)); });
      socket.addEventListener("message", (event) => {
        const message = JSON.parse(event.data);
        if (message.type === "sessions") message.sessions.forEach((s) => changed(s.course_id));
        else if (message.type === "resync") byCourse.forEach((_, id) => changed(id)); // updates may have been missed
      });
      socket.addEventListener("close", (event) => {
        if (event.code === 4401 || event.code === 4403) return;
        setTimeout(connect, delay);
        delay = Math.min(delay * 2, 15000);
      });
    }
    connect();
  }

  // --- template preview -----------------------------------------------------------------------
  const templateForm = document.getElementById("template-form");
  if (templateForm) {
    const box = document.getElementById("fit-preview");
    const show = (name) => box.querySelectorAll("[data-preview]").forEach((p) => { p.hidden = p.dataset.preview !== name; });
    let timer = null;
    let asked = 0;

    async function preview() {
      const data = new FormData(templateForm);
      const params = new URLSearchParams();
      ["core_percent", "memory_mib", "card_count", "scenario", "image"].forEach((name) => params.set(name, data.get(name) || ""));
      const ticket = ++asked;
      try {
        const response = await fetch(templateForm.dataset.previewUrl + "?" + params, { headers: { Accept: "application/json" } });
        const body = await response.json();
        if (ticket !== asked) return; // a newer question is on its way
        if (!response.ok) {
          const messages = Object.values(body.errors || {}).flat();
          box.querySelector('[data-preview="error"]').textContent = messages.join(" ");
          show("error");
          return;
        }
        box.querySelectorAll("[data-fit]").forEach((field) => {
          const value = body[field.dataset.fit];
          field.textContent = value === null || value === undefined ? "–" : value.toLocaleString(lang) + (body.capped && field.dataset.fit === "cluster" ? "+" : "");
        });
        show("result");
      } catch (e) {
        /* the next keystroke asks again */
      }
    }

    templateForm.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(preview, 300);
    });
    preview();
  }

  // --- usage chart ----------------------------------------------------------------------------
  const chartBox = document.getElementById("usage-chart");
  const chartData = document.getElementById("usage-data");
  if (chartBox && chartData && window.echarts) {
    const data = JSON.parse(chartData.textContent);
    const chart = window.echarts.init(chartBox, null, { renderer: "svg", locale: lang.startsWith("zh") ? "ZH" : "EN" });
    chart.setOption({
      animation: false,
      // Drawn inside the chart: the HTML tooltip writes style attributes, which the CSP refuses.
      tooltip: { trigger: "axis", renderMode: "richText" },
      legend: { data: [data.labels.core, data.labels.gib] },
      grid: { left: 48, right: 48, bottom: 32, top: 40 },
      xAxis: { type: "category", data: data.days },
      yAxis: [{ type: "value", name: data.labels.core }, { type: "value", name: data.labels.gib }],
      series: [
        { name: data.labels.core, type: "bar", data: data.core, itemStyle: { color: "#c7000b" } },
        { name: data.labels.gib, type: "line", yAxisIndex: 1, data: data.gib, itemStyle: { color: "#3e4c59" } },
      ],
    });
    window.addEventListener("resize", () => chart.resize());
    chartBox.dataset.ready = "yes";
  }

  // --- copy buttons (the roster import's invitation links) ----------------------------------------
  document.querySelectorAll("button[data-copy]").forEach((button) => {
    button.addEventListener("click", async () => {
      const source = document.getElementById(button.dataset.copy);
      try {
        await navigator.clipboard.writeText(source.textContent.trim());
      } catch (error) {
        // No clipboard (a page not served over HTTPS): select the link so that Ctrl+C copies it.
        window.getSelection().selectAllChildren(source);
        return;
      }
      button.textContent = button.dataset.copied;
    });
  });
})();
