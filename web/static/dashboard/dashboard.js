/* The dashboard's live refresh (web/dashboard.py renders the page and serves its JSON twin).
 *
 * Polling, not server-sent events: gunicorn runs a few gthread threads per process, and an
 * event stream holds one of them for as long as a tab stays open, so a handful of open
 * dashboards would starve the admin and the API; a fetch every few seconds holds a thread
 * only for the time of its queries. A hidden tab does not ask at all, and the next request
 * starts only when the last one has answered.
 *
 * The payload: values (text of [data-value] elements), tables (rows of cells for
 * tbody[data-table]), bars (segments for [data-bar]), charts (per-minute series drawn as
 * inline SVG in svg[data-chart]) and problems ([data-list="problems"]).
 */
(function () {
  "use strict";

  var SVG = "http://www.w3.org/2000/svg";
  var body = document.body;
  var source = body.dataset.source;
  var every = (Number(body.dataset.refreshS) || 2) * 1000;
  var live = document.getElementById("live");
  var timer = null;
  var busy = false;
  var stopped = false;

  function el(name, attrs, text) {
    var node = name.indexOf("svg:") === 0
      ? document.createElementNS(SVG, name.slice(4))
      : document.createElement(name);
    Object.keys(attrs || {}).forEach(function (key) { node.setAttribute(key, attrs[key]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function segments(bar) {
    var out = document.createDocumentFragment();
    bar.forEach(function (seg) {
      var span = el("span", {class: "seg seg-" + seg.name, title: seg.name + ": " + seg.n});
      span.style.width = seg.pct + "%";
      out.appendChild(span);
    });
    return out;
  }

  function cell(data) {
    var td = el("td", data.cls ? {class: data.cls} : {});
    if (data.bar) {
      var bar = el("span", {class: "bar"});
      bar.appendChild(segments(data.bar));
      td.appendChild(bar);
      td.appendChild(document.createTextNode(" "));
    }
    td.appendChild(data.href ? el("a", {href: data.href}, data.text)
                             : document.createTextNode(data.text));
    return td;
  }

  function table(tbody, rows) {
    var columns = tbody.closest("table").querySelectorAll("thead th").length || 1;
    var fresh = document.createDocumentFragment();
    rows.forEach(function (row) {
      var tr = el("tr");
      row.forEach(function (data) { tr.appendChild(cell(data)); });
      fresh.appendChild(tr);
    });
    if (!rows.length) {
      var empty = el("tr", {class: "empty"});
      empty.appendChild(el("td", {colspan: columns}, tbody.dataset.empty || "none"));
      fresh.appendChild(empty);
    }
    tbody.replaceChildren(fresh);
  }

  function clock(unix) {
    var d = new Date(unix * 1000);
    return String(d.getHours()).padStart(2, "0") + ":" + String(d.getMinutes()).padStart(2, "0");
  }

  // The axis' top: the highest value rounded up to 1, 2 or 5 times a power of ten.
  function ceiling(value) {
    if (value <= 0) return 1;
    var power = Math.pow(10, Math.floor(Math.log10(value)));
    var m = value / power;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * power;
  }

  function figure(value) {
    return String(Number(value.toFixed(value >= 10 ? 0 : value >= 1 ? 1 : 2)));
  }

  // One bar a minute, the current minute (so far) last.
  function chart(svg, series) {
    var box = svg.viewBox.baseVal;
    var left = 44, right = 8, top = 10, bottom = 22;
    var width = box.width - left - right, height = box.height - top - bottom;
    var values = series.values;
    var most = ceiling(Math.max.apply(null, values.concat([0])));
    var scale = height / most;
    var step = width / values.length;
    var out = document.createDocumentFragment();
    [0, 0.5, 1].forEach(function (f) {
      var y = top + height - f * height;
      out.appendChild(el("svg:line", {class: "grid", x1: left, x2: left + width, y1: y, y2: y}));
      out.appendChild(el("svg:text", {class: "axis", x: left - 6, y: y + 4, "text-anchor": "end"},
                         figure(most * f)));
    });
    values.forEach(function (v, i) {
      var h = Math.max(v > 0 ? 1 : 0, v * scale);
      var start = series.start + i * series.step;
      var rect = el("svg:rect", {class: "value", x: (left + i * step + 1).toFixed(1),
                                 y: (top + height - h).toFixed(1),
                                 width: Math.max(1, step - 2).toFixed(1), height: h.toFixed(1)});
      rect.appendChild(el("svg:title", {}, clock(start) + "  " + v + " pages/s"));
      out.appendChild(rect);
    });
    [0, Math.floor(values.length / 2), values.length - 1].forEach(function (i) {
      out.appendChild(el("svg:text", {class: "axis", x: left + (i + 0.5) * step,
                                      y: box.height - 6, "text-anchor": "middle"},
                         clock(series.start + i * series.step)));
    });
    svg.replaceChildren(out);
  }

  function show(data) {
    document.querySelectorAll("[data-value]").forEach(function (node) {
      var value = data.values[node.dataset.value];
      if (value === undefined) return;
      node.textContent = value;
      var prefix = node.dataset.classPrefix;
      if (prefix) {
        Array.from(node.classList).forEach(function (name) {
          if (name.indexOf(prefix) === 0) node.classList.remove(name);
        });
        node.classList.add(prefix + value);
      }
    });
    document.querySelectorAll("tbody[data-table]").forEach(function (tbody) {
      var rows = data.tables[tbody.dataset.table];
      if (rows) table(tbody, rows);
    });
    document.querySelectorAll("[data-bar]").forEach(function (node) {
      var bar = data.bars[node.dataset.bar];
      if (bar) node.replaceChildren(segments(bar));
    });
    document.querySelectorAll("svg[data-chart]").forEach(function (svg) {
      var series = data.charts[svg.dataset.chart];
      if (series) chart(svg, series);
    });
    var problems = document.querySelector("[data-list='problems']");
    if (problems) {
      problems.replaceChildren.apply(problems, data.problems.map(function (p) {
        return el("li", {}, p);
      }));
    }
  }

  function status(text, kind) {
    if (!live) return;
    live.classList.remove("failing", "stopped");
    if (kind) live.classList.add(kind);
    if (text) live.title = text;
  }

  function schedule() {
    clearTimeout(timer);
    if (!stopped && !document.hidden) timer = setTimeout(refresh, every);
  }

  function refresh() {
    if (busy) return;
    busy = true;
    clearTimeout(timer);
    fetch(source, {headers: {Accept: "application/json"}, cache: "no-store",
                   credentials: "same-origin"})
      .then(function (response) {
        var type = response.headers.get("Content-Type") || "";
        if (response.ok && type.indexOf("application/json") !== 0) {
          stopped = true;  // the session ended: the login page answered instead
          throw new Error("signed out: reload the page to sign in again");
        }
        if (!response.ok) throw new Error("the server answered " + response.status);
        return response.json();
      })
      .then(function (data) {
        show(data);
        status("The numbers refresh every " + every / 1000 + " s", "");
      })
      .catch(function (error) {
        status("Not refreshed: " + error.message, stopped ? "stopped" : "failing");
      })
      .then(function () {
        busy = false;
        schedule();
      });
  }

  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) refresh();
  });

  var initial = document.getElementById("dashboard-data");
  if (initial) show(JSON.parse(initial.textContent));
  if (source) schedule();
})();
