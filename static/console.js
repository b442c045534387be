/* The console's own script: no inline scripts or handlers anywhere, so the
   Content-Security-Policy can say script-src 'self'. Behaviour hangs off data
   attributes: data-autosubmit, data-select-all, data-confirm, data-default-view
   and the charts' json_script blocks. */
(function () {
  "use strict";

  // A <select data-autosubmit> submits its form when changed.
  document.addEventListener("change", function (e) {
    var t = e.target;
    if (t.matches && t.matches("select[data-autosubmit]") && t.form) t.form.submit();
  });

  // A table[data-sortable]'s header sorts its rows (numbers as numbers,
  // times by their datetime attribute), again to reverse.
  function cellKey(td) {
    var time = td.querySelector("time[datetime]");
    if (time) return Date.parse(time.getAttribute("datetime"));
    var text = td.textContent.trim().replace(/,/g, "");
    var n = parseFloat(text);
    return text !== "" && !isNaN(n) && /^-?[0-9.]+(e[-+]?[0-9]+)?$/i.test(text) ? n : td.textContent.trim().toLowerCase();
  }
  document.addEventListener("click", function (e) {
    var th = e.target.closest && e.target.closest("table[data-sortable] thead th");
    if (!th) return;
    var table = th.closest("table"), body = table.tBodies[0];
    var col = Array.prototype.indexOf.call(th.parentNode.children, th);
    var up = th.dataset.sorted !== "asc";
    table.querySelectorAll("thead th").forEach(function (h) { delete h.dataset.sorted; h.removeAttribute("aria-sort"); });
    th.dataset.sorted = up ? "asc" : "desc";
    th.setAttribute("aria-sort", up ? "ascending" : "descending");
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = cellKey(a.cells[col]), y = cellKey(b.cells[col]);
      var r = typeof x === typeof y ? (x < y ? -1 : x > y ? 1 : 0) : (typeof x === "number" ? -1 : 1);
      return up ? r : -r;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  });
  // An input[data-filter-table=id] shows only the rows of #id containing its text.
  document.addEventListener("input", function (e) {
    var t = e.target;
    if (!t.matches || !t.matches("input[data-filter-table]")) return;
    var table = document.getElementById(t.dataset.filterTable);
    if (!table) return;
    var q = t.value.trim().toLowerCase();
    Array.prototype.forEach.call(table.tBodies[0].rows, function (r) {
      r.hidden = q !== "" && r.textContent.toLowerCase().indexOf(q) < 0;
    });
  });

  document.addEventListener("click", function (e) {
    var t = e.target;
    if (!t.closest) return;
    // A checkbox data-select-all="name" ticks every input[name=...] of the page.
    var all = t.closest("input[data-select-all]");
    if (all) {
      document.querySelectorAll('input[name="' + all.dataset.selectAll + '"]')
        .forEach(function (c) { c.checked = all.checked; });
    }
    // A button data-confirm="question" asks before it submits.
    var ask = t.closest("[data-confirm]");
    if (ask && !window.confirm(ask.dataset.confirm)) e.preventDefault();
  });

  // Message bodies: JSON / text / hex tabs.
  function bodyTabs() {
    var tabs = document.querySelector(".tabs[data-default-view]");
    if (!tabs) return;
    function show(view) {
      document.querySelectorAll("pre[data-body]").forEach(function (p) { p.hidden = p.dataset.body !== view; });
      tabs.querySelectorAll("a[data-view]").forEach(function (a) { a.classList.toggle("active", a.dataset.view === view); });
    }
    tabs.querySelectorAll("a[data-view]").forEach(function (a) {
      a.addEventListener("click", function (e) { e.preventDefault(); show(a.dataset.view); });
    });
    show(tabs.dataset.defaultView);
  }

  // Charts (Chart.js is loaded, deferred, only by the pages that draw some).
  var charts = {};
  function data(id) {
    var el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }
  function line(id, labels, sets, legend) {
    var canvas = document.getElementById(id);
    if (!canvas) return;
    if (charts[id] && charts[id].canvas === canvas) {
      charts[id].data.labels = labels;
      sets.forEach(function (s, i) { charts[id].data.datasets[i].data = s.data; });
      charts[id].update("none");
      return;
    }
    charts[id] = new window.Chart(canvas, {type: "line",
      data: {labels: labels, datasets: sets.map(function (s) {
        // One point draws no line: show it as a dot, or nothing is seen.
        return {label: s.label, data: s.data, pointRadius: labels.length === 1 ? 4 : 0, borderWidth: 1.5};
      })},
      options: {animation: false, maintainAspectRatio: false,
        plugins: {legend: {display: legend === undefined ? sets.length > 1 : legend}},
        scales: {y: {beginAtZero: true}}}});
  }
  // Axis labels: HH:MM, or HH:MM:SS when the samples span under two hours
  // (several samples a minute would otherwise repeat a label).
  function clock(ts, end) {
    if (ts.length > 1 && Date.parse(ts[ts.length - 1]) - Date.parse(ts[0]) < 7200000) end = 19;
    return ts.map(function (t) { return t.slice(11, end); });
  }
  function drawCharts() {
    if (!window.Chart) return;
    var d = data("series-data");
    if (d) line("traffic", clock(d.t, 16), [{label: "messages / minute", data: d.rate}]);
    var tx = data("tx-series-data");
    if (tx && tx.t.length) {
      line("tx-outcomes", clock(tx.t, 16), [{label: "commits / min", data: tx.commits_min},
        {label: "rollbacks / min", data: tx.rollbacks_min}, {label: "discards / min", data: tx.discards_min}]);
      line("tx-checks", clock(tx.t, 16), [{label: "check-backs / min", data: tx.checks_min},
        {label: "failed / min", data: tx.failed_min}]);
    }
    var h = data("history-data");
    if (h && h.t.length) line("history", clock(h.t, 19), [{label: "messages", data: h.n}], false);
    // A report's charts: every bucket is in the data (empty ones 0, or null for
    // a gap where a statistic has no value), so nothing is drawn across gaps.
    var reports = data("chart-data");
    if (reports) {
      reports.forEach(function (c, i) {
        var canvas = document.getElementById("chart-" + (i + 1));
        if (!canvas) return;
        new window.Chart(canvas, {type: c.type,
          data: {labels: c.labels, datasets: c.datasets.map(function (d) {
            return {label: d.label, data: d.data, borderWidth: 1.5,
              pointRadius: c.type === "line" && c.labels.length === 1 ? 4 : 1};
          })},
          options: {animation: false, maintainAspectRatio: false, spanGaps: false,
            scales: {y: {beginAtZero: true}}}});
      });
    }
  }

  // Live lists: an element data-live="N" (with an id) is fetched again every
  // N seconds and swapped in place; a button pauses it. No refresh while the
  // tab is hidden, while a row of the list is ticked or something in it has the focus (a
  // selection or a half-typed reason must not vanish).
  function liveLists() {
    document.querySelectorAll("[data-live][id]").forEach(function (el) {
      var every = parseFloat(el.dataset.live) * 1000;
      if (!every || !window.htmx) return;
      var paused = false;
      var bar = document.createElement("p");
      bar.className = "livebar muted";
      var note = document.createElement("span");
      var button = document.createElement("button");
      button.type = "button";
      button.className = "link";
      button.setAttribute("aria-pressed", "false");
      bar.append(note, " ", button);
      el.parentNode.insertBefore(bar, el);
      function label() {
        note.textContent = paused ? "Updates paused." : "Updates every " + every / 1000 + " s.";
        button.textContent = paused ? "Resume" : "Pause";
        button.setAttribute("aria-pressed", String(paused));
      }
      button.addEventListener("click", function () { paused = !paused; label(); });
      label();
      setInterval(function () {
        var current = document.getElementById(el.id);
        if (paused || !current || !current.dataset.live || document.hidden) return;
        if (current.querySelector("tbody input[type=checkbox]:checked") || current.contains(document.activeElement)) return;
        window.htmx.ajax("GET", window.location.href, {target: "#" + el.id, select: "#" + el.id, swap: "outerHTML"});
      }, every);
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    liveLists();
    bodyTabs();
    drawCharts();
    document.body.addEventListener("htmx:afterSwap", drawCharts);
  });
})();
