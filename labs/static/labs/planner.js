// The term capacity planner's heatmap: the load of each hour of the week (x), week by week (y).
// Data from the page (json_script "planner-data", labs.selectors.planner.plan_heatmap); no inline script (CSP).
(function () {
  "use strict";
  const box = document.getElementById("planner-heatmap");
  const source = document.getElementById("planner-data");
  if (!box || !source || !window.echarts) {
    return;
  }
  const data = JSON.parse(source.textContent);
  const lang = document.documentElement.lang || "en";
  const chart = window.echarts.init(box, null, { renderer: "svg", locale: lang.startsWith("zh") ? "ZH" : "EN" });
  chart.setOption({
    animation: false,
    // Drawn inside the chart: the HTML tooltip writes style attributes, which the CSP refuses.
    tooltip: {
      renderMode: "richText",
      formatter: (p) => `${data.weeks[p.value[1]]} ${data.hours[p.value[0]]}: ${p.value[2]} %${p.value[3] ? " · " + data.labels.short : ""}`,
    },
    grid: { left: 96, right: 24, top: 16, bottom: 72 },
    xAxis: { type: "category", data: data.hours, splitArea: { show: true }, axisLabel: { interval: 23 } },
    yAxis: { type: "category", data: data.weeks, inverse: true },
    visualMap: {
      min: 0,
      max: data.max,
      calculable: true,
      orient: "horizontal",
      left: "center",
      bottom: 0,
      text: [data.labels.load, ""],
      inRange: { color: ["#f5f7fa", "#f0b429", "#c7000b"] },
    },
    series: [{ name: data.labels.load, type: "heatmap", data: data.cells.map((c) => [c[0], c[1], c[2], c[3]]) }],
  });
  window.addEventListener("resize", () => chart.resize());
  box.dataset.ready = "yes";
  box.dataset.cells = String(data.cells.length);
})();
