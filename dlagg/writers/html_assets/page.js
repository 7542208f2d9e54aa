// dlagg's HTML page: draws the Vega-Lite charts (vega-embed, inlined above) and turns each
// embedded CSV table into a sortable, filterable table with a download of exactly that CSV text.
// Status for people and tests: window.dlagg.charts[id] is "rendered" or "error: ...",
// window.dlagg.errors lists script errors, window.dlagg.ready is true once every chart settled,
// window.dlagg.views[id] is a drawn chart's Vega view (its data, scales and signals).
(function () {
  "use strict";
  const PAGE_ROWS = 300; // rows shown at first; "show all" shows the rest
  const LONG_CELL = 60; // characters from which a cell is cut (the whole text is its tooltip)
  const data = JSON.parse(document.getElementById("dlagg-data").textContent);
  const status = window.dlagg;

  function parseCsv(text) {
    const rows = [];
    let row = [], cell = "", quoted = false, i = 0;
    const n = text.length;
    while (i < n) {
      const c = text[i];
      if (quoted) {
        if (c === '"') {
          if (text[i + 1] === '"') { cell += '"'; i += 2; continue; }
          quoted = false; i += 1; continue;
        }
        cell += c; i += 1; continue;
      }
      if (c === '"') { quoted = true; i += 1; continue; }
      if (c === ",") { row.push(cell); cell = ""; i += 1; continue; }
      if (c === "\n") { row.push(cell); rows.push(row); row = []; cell = ""; i += 1; continue; }
      cell += c; i += 1;
    }
    if (cell !== "" || row.length) { row.push(cell); rows.push(row); }
    return rows;
  }

  const INTEGER = /^-?\d+$/, DECIMAL = /^(-?\d+)(\.\d+)$/;
  function shown(value, numeric) {
    if (!numeric) return value;
    if (INTEGER.test(value)) return Number(value).toLocaleString("en-US");
    const m = DECIMAL.exec(value);
    return m ? Number(m[1]).toLocaleString("en-US") + m[2] : value;
  }

  function download(name, text) {
    const url = URL.createObjectURL(new Blob([text], {type: "text/csv;charset=utf-8"}));
    const a = document.createElement("a");
    a.href = url; a.download = name;
    document.body.appendChild(a); a.click(); a.remove();
    setTimeout(function () { URL.revokeObjectURL(url); }, 1000);
  }

  function buildTable(box, spec) {
    const parsed = parseCsv(spec.csv);
    const header = spec.keyValue ? ["Figure", "Value"] : (parsed.shift() || []);
    const numeric = spec.keyValue ? [false, true] : spec.numeric;
    const rows = parsed;
    let order = rows.map(function (_, k) { return k; });
    let shownRows = order, limit = PAGE_ROWS, sortColumn = -1, sortDir = 1;

    const tools = document.createElement("div");
    tools.className = "table-tools";
    const filter = document.createElement("input");
    filter.type = "search"; filter.placeholder = "filter rows (text)";
    const count = document.createElement("span");
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = "Download CSV";
    button.title = spec.download + ": exactly these rows as in the report's CSV file";
    button.addEventListener("click", function () { download(spec.download, spec.downloadCsv || spec.csv); });
    if (!spec.keyValue) tools.append(filter);
    tools.append(button, count);

    const scroll = document.createElement("div");
    scroll.className = "scroll";
    const table = document.createElement("table");
    table.className = "data";
    const thead = table.createTHead().insertRow();
    header.forEach(function (title, c) {
      const th = document.createElement("th");
      th.textContent = title;
      if (!spec.keyValue) th.addEventListener("click", function () { sortBy(c, th); });
      thead.appendChild(th);
    });
    const tbody = table.createTBody();
    scroll.appendChild(table);
    const more = document.createElement("button");
    more.type = "button"; more.className = "more";
    more.addEventListener("click", function () { limit = Infinity; draw(); });
    box.append(tools, scroll, more);

    function draw() {
      tbody.textContent = "";
      const upto = Math.min(shownRows.length, limit);
      const fragment = document.createDocumentFragment();
      for (let k = 0; k < upto; k++) {
        const tr = document.createElement("tr");
        const row = rows[shownRows[k]];
        for (let c = 0; c < header.length; c++) {
          const td = document.createElement("td");
          const value = row[c] === undefined ? "" : row[c];
          const text = shown(value, numeric[c]);
          if (spec.keyValue && value.length > LONG_CELL && !/^[-+]?[\d.,]+(e[-+]?\d+)?%?$/i.test(value)) {
            // a sentence among a key/value table's figures: wrapped in its own width, so that it does not push
            // the figures out of the table's box
            const wrap = document.createElement("div");
            wrap.className = "wrap"; wrap.textContent = text;
            td.className = "text"; td.appendChild(wrap);
          } else {
            td.textContent = text;
            if (numeric[c]) td.className = "num";
            else if (value.length > LONG_CELL) { td.className = "long"; td.title = value; }
          }
          tr.appendChild(td);
        }
        fragment.appendChild(tr);
      }
      tbody.appendChild(fragment);
      const total = spec.total !== spec.rows ? " (" + spec.total.toLocaleString("en-US") + " in the report)" : "";
      count.textContent = shownRows.length.toLocaleString("en-US") + " of " + rows.length.toLocaleString("en-US")
        + " rows" + total;
      more.hidden = shownRows.length <= limit;
      more.textContent = "Show all " + shownRows.length.toLocaleString("en-US") + " rows";
    }

    function applyFilter() {
      const needle = filter.value.trim().toLowerCase();
      shownRows = needle ? order.filter(function (k) { return rows[k].join("\u0001").toLowerCase().includes(needle); })
        : order;
      draw();
    }

    function sortBy(c, th) {
      sortDir = sortColumn === c ? -sortDir : (numeric[c] ? -1 : 1);
      sortColumn = c;
      thead.querySelectorAll("th").forEach(function (h) { h.classList.remove("asc", "desc"); });
      th.classList.add(sortDir > 0 ? "asc" : "desc");
      const key = rows.map(function (row) {
        const v = row[c] === undefined ? "" : row[c];
        return numeric[c] ? (v === "" ? NaN : Number(v)) : v;
      });
      order = rows.map(function (_, k) { return k; });
      order.sort(function (a, b) {
        const x = key[a], y = key[b];
        if (numeric[c]) {
          if (isNaN(x) || isNaN(y)) return isNaN(x) - isNaN(y) || a - b; // blanks last
          return (x - y) * sortDir || a - b;
        }
        return x.localeCompare(y) * sortDir || a - b;
      });
      applyFilter();
    }

    filter.addEventListener("input", applyFilter);
    draw();
    status.tables[box.id] = {rows: rows.length, header: header, csv: spec.csv, download: spec.download};
  }

  document.querySelectorAll("[data-table]").forEach(function (box) {
    try {
      buildTable(box, data.tables[box.dataset.table]);
    } catch (error) {
      status.errors.push("table " + box.id + ": " + (error.stack || error));
    }
  });

  const pending = [];
  document.querySelectorAll("[data-chart]").forEach(function (box) {
    const id = box.dataset.chart;
    if (typeof window.vegaEmbed !== "function") {  // written without the Vega libraries: the run's warnings say why
      status.charts[id] = "not drawn";
      const message = document.createElement("div");
      message.className = "chart-error";
      message.textContent = "This chart is not drawn: the page was written without its charting libraries (see the warnings above).";
      box.replaceChildren(message);
      return;
    }
    status.charts[id] = "pending";
    const options = {actions: {export: true, source: false, compiled: false, editor: false}, renderer: "canvas"};
    pending.push(window.vegaEmbed(box, data.charts[id], options).then(function (result) {
      status.charts[id] = "rendered";
      status.views[id] = result.view;
      box.dataset.rendered = "true";
    }, function (error) {
      status.charts[id] = "error: " + error;
      status.errors.push("chart " + id + ": " + error);
      box.innerHTML = "";
      const message = document.createElement("div");
      message.className = "chart-error";
      message.textContent = "This chart could not be drawn: " + error;
      box.appendChild(message);
    }));
  });
  Promise.allSettled(pending).then(function () {
    status.ready = true;
    document.body.dataset.ready = "true";
  });
})();
