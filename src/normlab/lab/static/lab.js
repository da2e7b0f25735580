/* normlab lab: live widgets built from the experiment registry. Plain JS, no build step.
 *
 * A widget is a <figure class="nl-widget" data-experiment="NAME" data-widget="ID"> rendered by
 * the server. Its controls come from the parameter declarations at GET /api/experiments, its
 * plot from VIEWS[NAME] (Result JSON -> plotly traces, layout and a table of key numbers).
 *
 * State lives in the address: ?ID.param=value for every parameter of every widget that differs
 * from where the page started it, written with history.replaceState on each change and read
 * back on load, so a link reproduces the view (the seed included).
 *
 * For tests, each widget element exposes data-state="ready|loading|error", nlParams (the
 * settings shown), nlLastParams / nlLastResult (what is plotted) and nlError.
 */
"use strict";

(() => {
  const DEBOUNCE_MS = 150; // sliders: wait for the hand to rest
  const TYPING_MS = 400; // number inputs: wait for the typing to stop
  const LOG_FLOOR = 1e-30; // a collapsed variance (0 in float32) still shows on a log axis
  const INIT_TRAIN_FLOOR = 1e-12;
  const LOSS_CLIP = 5; // bn-lr: a diverging loss is drawn at this ceiling
  const SWEEP_FLOOR = 1e-6; // bn-lr-sweep: a final loss of 0 still shows on the log axis
  const LR_TICKS = [0.01, 0.02, 0.03, 0.05, 0.1, 0.2, 0.3, 0.5, 1, 2, 3, 5];
  const MAX_LINES = 8;
  const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  const GRAY = "#8c96a3";
  const RED = "#d62728";
  const BLUE = "#1f77b4";
  const GREEN = "#2ca02c";
  const PURPLE = "#9467bd";

  // -- numbers --------------------------------------------------------------------------------

  const isNum = (x) => typeof x === "number" && Number.isFinite(x);

  /** Fixed digits, as the seeds print, never "-0.0000". */
  function fixed(x, digits = 4) {
    if (x === null || x === undefined) return "n/a";
    if (!Number.isFinite(x)) return String(x);
    const text = x.toFixed(digits);
    return /^-0\.?0*$/.test(text) ? text.slice(1) : text;
  }

  /** Significant digits; exponents written as e-7. */
  function sig(x, digits = 4) {
    if (x === null || x === undefined) return "n/a";
    if (!Number.isFinite(x)) return String(x);
    if (x === 0) return "0";
    const a = Math.abs(x);
    if (a >= 1e-3 && a < 1e5) return String(Number(x.toPrecision(digits)));
    const [m, e] = x.toExponential(digits - 1).split("e");
    return `${Number(m)}e${Number(e)}`;
  }

  const list = (xs, digits) => "[" + xs.map((v) => fixed(v, digits)).join(", ") + "]";
  const floorAt = (xs, floor) => xs.map((v) => (v === null ? null : Math.max(v, floor)));
  const range = (a, b) => Array.from({ length: b - a }, (_, i) => a + i);
  const column = (rows, j) => rows.map((row) => row[j]);

  function decimals(step) {
    const text = String(step);
    return text.includes("e-") ? Number(text.split("e-")[1]) : (text.split(".")[1] || "").length;
  }

  // -- parameters -----------------------------------------------------------------------------

  /** A value from the address bar; text that does not parse is kept so the API can name it. */
  function parseValue(p, text) {
    const t = text.trim();
    if (p.kind === "int") return /^[-+]?\d+$/.test(t) ? Number(t) : t;
    if (p.kind === "float") return t !== "" && Number.isFinite(Number(t)) ? Number(t) : t;
    if (p.kind === "bool") return t === "true" ? true : t === "false" ? false : t;
    if (p.kind === "float_list") {
      const parts = t.split(",").map((s) => s.trim());
      const values = parts.map(Number);
      return parts.every((s) => s !== "") && values.every(Number.isFinite) ? values : t;
    }
    return t;
  }

  const formatValue = (p, v) => (Array.isArray(v) ? v.map(String).join(",") : String(v));
  const encode = (s) => encodeURIComponent(s).replace(/%2C/gi, ",");

  function sameParams(params, a, b) {
    return params.every((p) => JSON.stringify(a[p.name]) === JSON.stringify(b[p.name]));
  }

  /** How a number parameter maps onto a slider: linear, or logarithmic for wide ranges. */
  function scaleOf(p) {
    const lo = p.min;
    const hi = p.max;
    const round = (v) => {
      if (p.kind === "int") return Math.round(v);
      const d = p.step ? decimals(p.step) : null;
      return d === null ? v : Number(v.toFixed(d));
    };
    const clamp = (v) => Math.min(hi, Math.max(lo, v));
    if (lo > 0 && hi / lo >= 1000) {
      return {
        log: true,
        min: Math.log10(lo),
        max: Math.log10(hi),
        step: 0.001,
        toPos: (v) => Math.log10(v),
        fromPos: (pos) => clamp(round(Number((10 ** pos).toPrecision(3)))),
      };
    }
    const step = p.step || (p.kind === "int" ? 1 : (hi - lo) / 100);
    return { log: false, min: lo, max: hi, step, toPos: (v) => v, fromPos: (pos) => clamp(round(pos)) };
  }

  function usesNumberInput(p) {
    if (p.min === undefined || p.max === undefined) return true;
    if (p.name === "seed" || p.name.endsWith("_seed")) return true;
    const s = scaleOf(p);
    return !s.log && (s.max - s.min) / s.step > 5000;
  }

  // -- controls -------------------------------------------------------------------------------

  let uid = 0;
  const { el } = window.NLDom;

  function label(p, forId, output) {
    const head = el("span", { class: "nl-label" },
      el("label", { for: forId, class: "nl-name", text: p.name }));
    if (output) head.append(output);
    return head;
  }

  /** One slider (or number box) for a number; calls change(value, typing) on user input. */
  function numberInput(p, id, change, lo, hi) {
    const spec = { ...p, min: lo ?? p.min, max: hi ?? p.max };
    if (usesNumberInput(spec)) {
      const input = el("input", {
        type: "number", id, min: spec.min, max: spec.max,
        step: spec.kind === "int" ? 1 : spec.step || "any", "data-param": p.name,
      });
      input.addEventListener("input", () => {
        if (input.value.trim() === "") return;
        change(Number(input.value), true);
      });
      return { input, output: null, set: (v) => { input.value = String(v); } };
    }
    const s = scaleOf(spec);
    const input = el("input", {
      type: "range", id, min: s.min, max: s.max, step: s.step, "data-param": p.name,
      "data-scale": s.log ? "log" : "linear",
    });
    const output = el("output", { for: id });
    let current = null;
    const set = (v) => {
      current = v;
      output.textContent = String(v);
      if (isNum(v)) input.value = String(s.toPos(v));
    };
    input.addEventListener("input", () => {
      const pos = Number(input.value);
      let v = s.fromPos(pos);
      if (s.log && isNum(current) && v === current && pos !== s.toPos(current)) {
        // a small move on a log slider can round back to the same value: move to the next one
        const dir = Math.sign(pos - s.toPos(current));
        for (let k = 2; v === current && k <= 1000; k += 1) v = s.fromPos(s.toPos(current) + dir * k * s.step);
        input.value = String(s.toPos(v));
      }
      current = v;
      output.textContent = String(v);
      change(v, false);
    });
    return { input, output, set };
  }

  /** The control for one declared parameter: {node, set(value), mark(invalid)}. */
  function makeControl(p, widgetId, change) {
    const id = `nl-${widgetId}-${p.name}-${++uid}`;
    const wrap = el("div", { class: `nl-control nl-${p.kind}`, "data-param": p.name, title: p.help });
    const help = el("span", { class: "nl-help", text: p.help });
    let set;
    if (p.kind === "bool") {
      const input = el("input", { type: "checkbox", id, "data-param": p.name });
      input.addEventListener("change", () => change(input.checked, false));
      wrap.append(input, el("span", {},
        el("label", { for: id, class: "nl-name", text: p.name }), el("br"), help));
      set = (v) => { input.checked = v === true; };
    } else if (p.kind === "choice") {
      const input = el("select", { id, "data-param": p.name });
      for (const c of p.choices) input.append(el("option", { value: c, text: c }));
      input.addEventListener("change", () => change(input.value, false));
      wrap.append(label(p, id), input, help);
      set = (v) => { input.value = String(v); };
    } else if (p.kind === "float_list") {
      const rows = el("div", { class: "nl-list" });
      const buttons = el("div", { class: "nl-list-buttons" });
      let values = [];
      const emit = () => change(values.slice(), false);
      const draw = () => {
        rows.replaceChildren();
        values.forEach((v, i) => {
          const item = numberInput(p, `${id}-${i}`, (x) => { values[i] = x; emit(); });
          item.input.setAttribute("data-index", i);
          item.input.setAttribute("aria-label", `${p.name} entry ${i + 1}`);
          item.set(v);
          const row = el("div", { class: "nl-list-row" }, item.input);
          if (item.output) row.append(item.output);
          if (values.length > 1) {
            const remove = el("button", { type: "button", class: "nl-remove", title: "remove this entry", text: "−" });
            remove.addEventListener("click", () => { values.splice(i, 1); draw(); emit(); });
            row.append(remove);
          }
          rows.append(row);
        });
        buttons.replaceChildren();
        if (values.length < (p.max_len || 1)) {
          const add = el("button", { type: "button", class: "nl-add", text: `+ add a value (up to ${p.max_len})` });
          add.addEventListener("click", () => {
            const last = values[values.length - 1];
            values.push(isNum(last) ? last : p.default[0]);
            draw();
            emit();
          });
          buttons.append(add);
        }
      };
      wrap.append(el("span", { class: "nl-label" }, el("span", { class: "nl-name", id, text: p.name })),
        rows, buttons, help);
      set = (v) => { values = Array.isArray(v) ? v.slice() : p.default.slice(); draw(); };
    } else {
      const item = numberInput(p, id, change);
      wrap.append(label(p, id, item.output), item.input, help);
      set = item.set;
    }
    const mark = (bad) => wrap.classList.toggle("nl-invalid", bad);
    return { node: wrap, set, mark, param: p };
  }

  // -- the registry and the address bar ---------------------------------------------------------

  let registry = null;
  function loadRegistry() {
    registry ??= fetch("/api/experiments", { headers: { Accept: "application/json" } })
      .then((r) => {
        if (!r.ok) throw new Error(`GET /api/experiments answered ${r.status}`);
        return r.json();
      })
      .then((items) => new Map(items.map((e) => [e.name, e])));
    return registry;
  }

  const widgets = [];

  function writeAddress() {
    const mine = (key) => widgets.some((w) => key.startsWith(`${w.id}.`));
    const parts = [];
    for (const [k, v] of new URLSearchParams(location.search)) {
      if (!mine(k)) parts.push(`${encode(k)}=${encode(v)}`);
    }
    for (const w of widgets) {
      if (sameParams(w.params, w.state, w.initial)) continue;
      for (const p of w.params) parts.push(`${encode(`${w.id}.${p.name}`)}=${encode(formatValue(p, w.state[p.name]))}`);
    }
    const search = parts.length ? `?${parts.join("&")}` : "";
    if (search !== location.search) {
      history.replaceState(history.state, "", location.pathname + search + location.hash);
    }
  }

  function readAddress(id, params) {
    const query = new URLSearchParams(location.search);
    const out = {};
    for (const p of params) {
      const text = query.get(`${id}.${p.name}`);
      if (text !== null) out[p.name] = parseValue(p, text);
    }
    return out;
  }

  // -- one widget -------------------------------------------------------------------------------

  const PLOT_CONFIG = {
    responsive: true,
    displaylogo: false,
    modeBarButtonsToRemove: ["lasso2d", "select2d", "autoScale2d"],
  };

  class Widget {
    constructor(node, spec) {
      this.node = node;
      this.spec = spec;
      this.id = node.dataset.widget;
      this.name = node.dataset.experiment;
      this.params = spec.parameters;
      const defaults = Object.fromEntries(this.params.map((p) => [p.name, p.default]));
      this.initial = { ...defaults, ...JSON.parse(node.dataset.params || "{}") };
      this.state = { ...this.initial, ...readAddress(this.id, this.params) };
      this.seq = 0;
      this.timer = null;
      this.controller = null;
      this.plot = node.querySelector(".nl-plot");
      this.table = node.querySelector(".nl-table");
      this.status = node.querySelector(".nl-status");
      this.buildControls(JSON.parse(node.dataset.show || "null"));
      this.buildStatus();
      Object.defineProperty(node, "nlParams", { get: () => structuredClone(this.state), configurable: true });
      node.nlWidget = this;
      node.nlLastParams = null;
      node.nlLastResult = null;
      node.nlError = null;
    }

    buildControls(show) {
      const box = this.node.querySelector(".nl-controls");
      const shown = new Set(show || this.params.map((p) => p.name));
      shown.add("seed"); // the seed is part of the state: always in sight
      const more = el("div", { class: "nl-more" });
      this.controls = new Map();
      for (const p of this.params) {
        const control = makeControl(p, this.id, (v, typing) => this.change(p.name, v, typing));
        control.set(this.state[p.name]);
        this.controls.set(p.name, control);
        (shown.has(p.name) ? box : more).append(control.node);
      }
      if (more.childElementCount) {
        const details = el("details", { class: "nl-details" },
          el("summary", { text: `More settings (${more.childElementCount})` }), more);
        box.append(details);
      }
    }

    buildStatus() {
      this.message = el("span", { class: "nl-msg" });
      const reset = el("button", { type: "button", class: "nl-reset", title: "back to this widget's starting settings", text: "Reset" });
      reset.addEventListener("click", () => this.reset());
      this.status.append(this.message, el("span", { class: "nl-actions" }, reset));
      this.errorBox = el("div", { class: "nl-error", role: "alert", hidden: true });
      this.status.after(this.errorBox);
    }

    setState(state, text) {
      this.node.dataset.state = state;
      this.message.textContent = text;
    }

    change(name, value, typing) {
      this.state[name] = value;
      writeAddress();
      this.schedule(typing ? TYPING_MS : DEBOUNCE_MS);
    }

    reset() {
      this.state = structuredClone(this.initial);
      for (const [name, control] of this.controls) control.set(this.state[name]);
      writeAddress();
      this.schedule(0);
    }

    schedule(delay) {
      clearTimeout(this.timer);
      this.setState("loading", "waiting…");
      this.timer = setTimeout(() => this.run(), delay);
    }

    async run() {
      const seq = ++this.seq;
      this.controller?.abort(); // the older answer is no longer wanted
      const controller = new AbortController();
      this.controller = controller;
      const params = structuredClone(this.state);
      this.setState("loading", this.spec.trains ? "training… (a few seconds)" : "running…");
      const started = performance.now();
      let response;
      let body;
      try {
        response = await fetch(`/api/experiments/${encodeURIComponent(this.name)}`, {
          method: "POST",
          headers: { "Content-Type": "application/json", Accept: "application/json" },
          body: JSON.stringify(params),
          signal: controller.signal,
        });
        body = await response.json();
      } catch (err) {
        if (err.name === "AbortError" || seq !== this.seq) return;
        this.fail(params, null, `the lab server did not answer (${err.message})`);
        return;
      }
      if (seq !== this.seq) return; // superseded while in flight
      if (!response.ok) {
        const detail = body && typeof body.detail === "object" ? body.detail : {};
        this.fail(params, detail.parameter ?? null, detail.message ?? `HTTP ${response.status}`);
        return;
      }
      await this.draw(params, body, seq, performance.now() - started);
    }

    async draw(params, result, seq, ms) {
      let figure;
      try {
        figure = (VIEWS[this.name] || genericView)(result, params);
      } catch (err) {
        this.fail(params, null, `could not draw this result (${err.message})`);
        return;
      }
      await Plotly.react(this.plot, figure.data, baseLayout(figure.layout), PLOT_CONFIG);
      if (seq !== this.seq) return; // a newer run owns the widget now
      renderTables(this.table, figure.tables || []);
      this.node.nlLastParams = params;
      this.node.nlLastResult = result;
      this.node.nlError = null;
      for (const control of this.controls.values()) control.mark(false);
      this.errorBox.hidden = true;
      this.errorBox.textContent = "";
      const when = ms === null ? "computed with the page" : `answered in ${Math.round(ms)} ms`;
      this.setState("ready", `seed ${params.seed ?? "–"} · ${when}`);
    }

    fail(params, parameter, message) {
      this.node.nlError = { params, parameter, message };
      for (const [name, control] of this.controls) control.mark(name === parameter);
      this.errorBox.textContent = message;
      this.errorBox.hidden = false;
      const shown = this.node.nlLastResult ? "the plot still shows the last good run" : "nothing to plot yet";
      this.setState("error", `not run: ${shown}`);
    }

    start(initialResult) {
      const embedded = initialResult && initialResult.params;
      if (embedded && sameParams(this.params, this.state, embedded)) {
        this.seq += 1;
        this.draw(structuredClone(this.state), initialResult, this.seq, null);
      } else {
        this.schedule(0);
      }
    }
  }

  function renderTables(box, tables) {
    const wrap = el("div", { class: "nl-tables" });
    for (const t of tables) {
      const table = el("table");
      if (t.caption) table.append(el("caption", { text: t.caption }));
      const head = el("tr");
      for (const c of t.columns) head.append(el("th", { scope: "col", text: c }));
      table.append(el("thead", {}, head));
      const body = el("tbody");
      for (const row of t.rows) {
        const tr = el("tr");
        row.forEach((cell, i) => tr.append(el(i === 0 ? "th" : "td", i === 0 ? { scope: "row", text: cell } : { text: cell })));
        body.append(tr);
      }
      table.append(body);
      wrap.append(table);
    }
    box.replaceChildren(wrap);
  }

  // -- plot helpers -----------------------------------------------------------------------------

  function baseLayout(extra) {
    const family = getComputedStyle(document.body).fontFamily;
    const layout = {
      font: { family, size: 12, color: "#1d2430" },
      margin: { l: 64, r: 20, t: 56, b: 52 },
      height: 380,
      paper_bgcolor: "#ffffff",
      plot_bgcolor: "#ffffff",
      legend: { font: { size: 11 } },
      hovermode: "closest",
      ...extra,
    };
    for (const key of Object.keys(layout)) {
      if (/^[xy]axis\d*$/.test(key)) {
        layout[key] = { gridcolor: "#e6e9ee", zerolinecolor: "#c5ccd5", automargin: true, ...layout[key] };
      }
    }
    return layout;
  }

  const axisTitle = (text) => ({ text });
  const title = (text) => ({ text, font: { size: 14 }, x: 0.01, xanchor: "left" });

  function panelTitle(text, xref, y = 1.0) {
    return {
      text, xref: `${xref} domain`, yref: "paper", x: 0.5, y, xanchor: "center", yanchor: "bottom",
      showarrow: false, font: { size: 12 },
    };
  }

  const hline = (y, xref = "x", yref = "y", dash = "dot") => ({
    type: "line", xref: `${xref} domain`, yref, x0: 0, x1: 1, y0: y, y1: y,
    line: { color: GRAY, width: 1, dash },
  });

  function histogram(h, color, name, meta, axes, opacity = 0.7) {
    const edges = h.edges;
    const counts = h.counts.map((c) => (isNum(c) ? c : 0));
    const finite = edges.every(isNum);
    return {
      type: "bar", name, meta,
      x: finite ? counts.map((_, i) => (edges[i] + edges[i + 1]) / 2) : counts.map((_, i) => i),
      width: finite ? counts.map((_, i) => edges[i + 1] - edges[i]) : undefined,
      y: counts,
      marker: { color, line: { width: 0 } },
      opacity,
      hovertemplate: "%{x:.3g}: %{y} values<extra></extra>",
      ...axes,
    };
  }

  /** y range that cuts a bin dwarfing all others (ReLU's zeros), with a note saying so. */
  function capSpike(h, yaxis, xref) {
    const counts = h.counts.map((c) => (isNum(c) ? c : 0));
    const sorted = counts.slice().sort((a, b) => b - a);
    if (sorted.length < 2 || sorted[1] <= 0 || sorted[0] < 4 * sorted[1]) return null;
    const top = 1.6 * sorted[1];
    const peak = counts.indexOf(sorted[0]);
    return {
      range: [0, top],
      note: {
        text: `↑ ${sorted[0]} values at ${sig(h.edges[peak], 2)} (bar cut)`,
        xref: `${xref} domain`, yref: `${yaxis} domain`, x: 0.98, y: 0.95, xanchor: "right",
        showarrow: false, font: { size: 10, color: "#5b6573" },
      },
    };
  }

  // -- one view per experiment: Result JSON -> {data, layout, tables} ----------------------------

  function stackView(r) {
    const layers = range(0, r.stds.length + 1);
    const act = r.activation;
    const stack = r.norm === "none" ? `Linear → ${act}` : `Linear → ${r.norm} norm → ${act}`;
    const what = r.norm === "none" ? "nothing resets the scale" : "the normalization pins the scale";
    const rows = [["input", fixed(r.input_mean), fixed(r.input_std)]];
    const shown = r.stds.length <= 12 ? range(0, r.stds.length)
      : [...range(0, 6), null, ...range(r.stds.length - 4, r.stds.length)];
    for (const i of shown) {
      rows.push(i === null ? ["…", "", ""] : [`layer ${i + 1}`, fixed(r.means[i]), fixed(r.stds[i])]);
    }
    return {
      data: [
        { type: "scatter", mode: "lines+markers", name: "std", meta: "std", x: layers,
          y: [r.input_std, ...r.stds], line: { color: BLUE, width: 2 }, marker: { size: 7 } },
        { type: "scatter", mode: "lines+markers", name: "mean", meta: "mean", x: layers,
          y: [r.input_mean, ...r.means], line: { color: "#ff7f0e", dash: "dash" }, marker: { symbol: "square", size: 6 } },
      ],
      layout: {
        title: title(`${r.stds.length} × (${stack}): ${what}`),
        xaxis: { title: axisTitle("layer (0 = the input)"), dtick: layers.length <= 21 ? 1 : undefined },
        yaxis: { title: axisTitle("statistic of the layer's output") },
        shapes: [hline(0, "x", "y", "solid")],
      },
      tables: [{
        caption: `per-layer statistics · std from ${fixed(Math.min(...r.stds))} to ${fixed(Math.max(...r.stds))}`,
        columns: ["", "mean", "std"], rows,
      }],
    };
  }

  const VIEWS = {
    "linear-scale": (r) => {
      const labels = ["normal input", `${sig(r.scale)} × input`];
      const ratio = r.scaled_output_std / r.output_std;
      const bar = (name, meta, y, color) => ({
        type: "bar", name, meta, x: labels, y, marker: { color },
        text: y.map((v) => sig(v)), textposition: "outside", cliponaxis: false,
      });
      return {
        data: [
          bar("input std", "input_std", [r.input_std, r.scaled_input_std], GRAY),
          bar("output std", "output_std", [r.output_std, r.scaled_output_std], BLUE),
        ],
        layout: {
          title: title(`One Linear layer: output std grew ${fixed(ratio, 2)}× for a ${sig(r.scale)}× input`),
          barmode: "group",
          yaxis: { title: axisTitle("standard deviation") },
        },
        tables: [{
          caption: `output std ratio: ${fixed(ratio, 4)}`,
          columns: ["pass", "input std", "output std"],
          rows: [["normal input", fixed(r.input_std), fixed(r.output_std)],
            [`${sig(r.scale)} × input`, fixed(r.scaled_input_std), fixed(r.scaled_output_std)]],
        }],
      };
    },

    drift: stackView,
    "bn-stack": stackView,

    "bn-columns": (r) => {
      const cols = r.input_stds.map((_, j) => `column ${j}`);
      const bars = (name, meta, y, color, axes, labels) => ({
        type: "bar", name, meta, x: cols, y, marker: { color }, legendgroup: name,
        text: labels, textposition: "outside", cliponaxis: false, ...axes,
      });
      const right = { xaxis: "x2", yaxis: "y2", showlegend: false };
      return {
        data: [
          bars("before", "std_before", floorAt(r.input_stds, 1e-12), RED, {}, r.input_stds.map((v) => sig(v, 3))),
          bars("after BatchNorm1d", "std_after", floorAt(r.output_stds, 1e-12), BLUE, {}, r.output_stds.map((v) => sig(v, 3))),
          bars("before", "mean_before", r.input_means, RED, right, r.input_means.map((v) => sig(v, 3))),
          bars("after BatchNorm1d", "mean_after", r.output_means, BLUE, right, r.output_means.map((v) => sig(v, 1))),
        ],
        layout: {
          barmode: "group",
          height: 400,
          margin: { t: 80 },
          xaxis: { domain: [0, 0.45] },
          xaxis2: { domain: [0.57, 1], anchor: "y2" },
          yaxis: { type: "log", title: axisTitle("std (biased, ÷N), log scale") },
          yaxis2: { anchor: "x2", title: axisTitle("mean") },
          legend: { orientation: "h", x: 0, y: -0.15 },
          shapes: [hline(1, "x", "y"), hline(0, "x2", "y2", "solid")],
          annotations: [panelTitle("std per column: all 1 after", "x", 1.02), panelTitle("mean per column: all 0 after", "x2", 1.02)],
          title: title("BatchNorm1d in training mode, column by column"),
        },
        tables: [{
          caption: "std is the biased batch std (÷N), the one the layer divides by",
          columns: ["", "mean before", "std before", "mean after", "std after"],
          rows: cols.map((c, j) => [c, fixed(r.input_means[j]), fixed(r.input_stds[j]),
            fixed(r.output_means[j]), fixed(r.output_stds[j])]),
        }],
      };
    },

    "bn-running-stats": (r, params) => {
      const passes = range(0, r.running_means.length + 1);
      const after = passes.slice(1);
      const nFeat = r.running_means[0].length;
      const data = [];
      for (let j = 0; j < Math.min(nFeat, MAX_LINES); j += 1) {
        const color = COLORS[j % COLORS.length];
        const group = { legendgroup: `f${j}` };
        data.push(
          { type: "scatter", mode: "lines+markers", name: `feature ${j}`, meta: `running_mean:${j}`, x: passes,
            y: [0, ...column(r.running_means, j)], line: { color }, ...group },
          { type: "scatter", mode: "markers", name: `feature ${j}: batch`, meta: `batch_mean:${j}`, x: after,
            y: column(r.batch_means, j), marker: { symbol: "x", color, size: 8 }, showlegend: false, ...group },
          { type: "scatter", mode: "lines+markers", name: `feature ${j}`, meta: `running_var:${j}`, x: passes,
            y: [1, ...column(r.running_vars, j)], line: { color }, xaxis: "x2", yaxis: "y2", showlegend: false, ...group },
          { type: "scatter", mode: "markers", name: `feature ${j}: batch`, meta: `batch_var:${j}`, x: after,
            y: column(r.batch_vars, j), marker: { symbol: "x", color, size: 8 }, xaxis: "x2", yaxis: "y2",
            showlegend: false, ...group },
        );
      }
      data.push({ type: "scatter", mode: "markers", name: "that pass's batch statistic", x: [null], y: [null],
        marker: { symbol: "x", color: GRAY, size: 8 } });
      const vars = [...r.running_vars.flat(), ...r.batch_vars.flat(), r.true_var, 1].filter((v) => isNum(v) && v > 0);
      const logVar = vars.length && Math.max(...vars) / Math.min(...vars) >= 100;
      const rule = params.cumulative ? "cumulative average (momentum=None)" : `momentum ${params.momentum}`;
      const n = r.running_means.length;
      const picks = n <= 8 ? range(0, n) : [0, 1, 2, null, n - 3, n - 2, n - 1];
      return {
        data,
        layout: {
          height: 400,
          margin: { t: 80 },
          xaxis: { domain: [0, 0.45], title: axisTitle("training pass (0 = new layer)") },
          xaxis2: { domain: [0.57, 1], anchor: "y2", title: axisTitle("training pass (0 = new layer)") },
          yaxis: { title: axisTitle("running mean") },
          yaxis2: { anchor: "x2", type: logVar ? "log" : "linear", title: axisTitle(logVar ? "running var (log scale)" : "running var") },
          shapes: [
            { ...hline(r.true_mean, "x", "y", "dash"), line: { color: "#000", width: 1, dash: "dash" } },
            { ...hline(r.true_var, "x2", "y2", "dash"), line: { color: "#000", width: 1, dash: "dash" } },
          ],
          annotations: [
            panelTitle(`running mean (dashed: the data's mean ${sig(r.true_mean)})`, "x", 1.02),
            panelTitle(`running var (dashed: the data's variance ${sig(r.true_var)})`, "x2", 1.02),
          ],
          title: title(`BatchNorm1d running statistics, ${rule}`),
        },
        tables: [{
          caption: "stored estimates after each pass",
          columns: ["pass", "running mean", "running var"],
          rows: picks.map((i) => (i === null ? ["…", "", ""]
            : [String(i + 1), list(r.running_means[i], 2), list(r.running_vars[i], 2)])),
        }],
      };
    },

    symmetry: (r) => {
      const steps = range(0, r.weights.length);
      const hidden = r.weights[0].length;
      const data = [];
      for (let j = 0; j < hidden; j += 1) {
        const color = COLORS[j % COLORS.length];
        data.push(
          { type: "scatter", mode: "lines", name: `unit ${j}`, meta: `weight:${j}`, legendgroup: `u${j}`, x: steps,
            y: r.weights.map((w) => w[j][0]), line: { color, width: 2 } },
          { type: "scatter", mode: "lines", name: `unit ${j}`, meta: `grad:${j}`, legendgroup: `u${j}`, x: steps,
            y: r.grads.map((g) => g[j][0]), line: { color, width: 2 }, xaxis: "x2", yaxis: "y2", showlegend: false },
        );
      }
      const s = r.summary;
      const note = s.distinct_units === 1 ? `all ${hidden} lines lie on top of each other`
        : `${s.distinct_units} distinct units of ${hidden}`;
      const row = (x) => [`${x.init} init`, fixed(x.max_weight_diff), fixed(x.max_grad_diff), String(x.distinct_units)];
      return {
        data,
        layout: {
          height: 400,
          margin: { t: 80 },
          xaxis: { domain: [0, 0.44], title: axisTitle("training step") },
          xaxis2: { domain: [0.56, 1], anchor: "y2", title: axisTitle("training step") },
          yaxis: { title: axisTitle("weight W1[unit, 0]") },
          yaxis2: { anchor: "x2", title: axisTitle("gradient dL/dW1[unit, 0]") },
          annotations: [panelTitle("incoming weight of each hidden unit", "x", 1.02), panelTitle("its gradient", "x2", 1.02)],
          title: title(`${r.init} init: ${note}`),
        },
        tables: [{
          caption: "hidden unit 0 against unit 1, over every step",
          columns: ["", "max |w0 − w1|", "max |g0 − g1|", "distinct units"],
          rows: [row(r.summary), row(r.contrast)],
        }],
      };
    },

    variance: (r) => {
      const data = [];
      r.curves.forEach((c, i) => {
        const color = COLORS[i % COLORS.length];
        data.push(
          { type: "scatter", mode: "markers", name: `g = ${c.gain} measured`, meta: `measured:${i}`, legendgroup: `g${i}`,
            x: r.layers, y: floorAt(c.measured, LOG_FLOOR), marker: { color, size: 6 } },
          { type: "scatter", mode: "lines", name: `g = ${c.gain} theory`, meta: `theory:${i}`, legendgroup: `g${i}`,
            x: r.layers, y: floorAt(c.theory, LOG_FLOOR), line: { color, dash: "dash", width: 1.5 }, showlegend: false },
        );
      });
      const clipped = r.curves.some((c) => [...c.measured, ...c.theory].some((v) => v !== null && v < LOG_FLOOR));
      data.push({ type: "scatter", mode: "lines", name: r.activation === "linear" ? "theory g^(2k) (dashed)" : "theory, ReLU rule (dashed)",
        x: [null], y: [null], line: { color: GRAY, dash: "dash" } });
      const depth = r.layers.length;
      const ks = [1, 2, 5, 10, 20, 30, 40, 50, 75, 100, depth].filter((k, i, a) => k <= depth && a.indexOf(k) === i).sort((a, b) => a - b);
      return {
        data,
        layout: {
          height: 420,
          xaxis: { title: axisTitle("layer k") },
          yaxis: { type: "log", title: axisTitle(`activation variance (log scale${clipped ? `, clipped at ${LOG_FLOOR}` : ""})`), exponentformat: "power" },
          shapes: [hline(1)],
          title: title(`${r.activation === "linear" ? "Linear" : "ReLU"} stack, weight std g/√n: measured (dots) against theory (dashed)`),
        },
        tables: [{
          caption: "variance after layer k: measured / theory",
          columns: ["layer k", ...r.curves.map((c) => `g = ${c.gain}`)],
          rows: ks.map((k) => [String(k), ...r.curves.map((c) => `${sig(c.measured[k - 1])} / ${sig(c.theory[k - 1])}`)]),
        }],
      };
    },

    "init-compare": (r) => {
      const n = r.curves.length;
      const data = [];
      const clipped = r.curves.some((c) => [...c.variances, ...c.theory].some((v) => v !== null && v < LOG_FLOOR));
      const layout = {
        height: 150 * n + 130,
        margin: { t: 70 },
        xaxis: { domain: [0, 0.52], title: axisTitle("ReLU layer k") },
        yaxis: { type: "log", title: axisTitle(`activation variance (log scale${clipped ? `, clipped at ${LOG_FLOOR}` : ""})`), exponentformat: "power" },
        shapes: [hline(1), { type: "line", xref: "x", yref: "y domain", x0: r.hist_layer, x1: r.hist_layer, y0: 0, y1: 1,
          line: { color: "#000", width: 1, dash: "dot" } }],
        annotations: [panelTitle(`variance per layer: measured (dots), theory (dashed); histograms at layer ${r.hist_layer} →`, "x", 1.01)],
        legend: { orientation: "h", x: 0, y: -0.12 },
        bargap: 0,
        title: title("Four initializations on a deep ReLU stack"),
      };
      const gap = 0.11;
      const h = (1 - gap * (n - 1)) / n;
      r.curves.forEach((c, i) => {
        const color = COLORS[i % COLORS.length];
        const layers = range(1, c.variances.length + 1);
        data.push(
          { type: "scatter", mode: "lines+markers", name: c.scheme, meta: `variance:${i}`, legendgroup: `s${i}`,
            x: layers, y: floorAt(c.variances, LOG_FLOOR), line: { color }, marker: { size: 5 } },
          { type: "scatter", mode: "lines", name: `${c.scheme} theory`, meta: `theory:${i}`, legendgroup: `s${i}`,
            x: layers, y: floorAt(c.theory, LOG_FLOOR), line: { color, dash: "dash", width: 1 }, showlegend: false },
        );
        const ax = i + 2;
        const top = 1 - i * (h + gap);
        data.push(histogram(c.histogram, color, c.scheme, `hist:${i}`, { xaxis: `x${ax}`, yaxis: `y${ax}`, showlegend: false }));
        layout[`xaxis${ax}`] = { domain: [0.62, 1], anchor: `y${ax}`, tickfont: { size: 10 }, exponentformat: "power" };
        const cap = capSpike(c.histogram, `y${ax}`, `x${ax}`);
        layout[`yaxis${ax}`] = { domain: [top - h, top], anchor: `x${ax}`, tickfont: { size: 10 }, ...(cap ? { range: cap.range } : {}) };
        layout.annotations.push(panelTitle(`${c.scheme}: layer ${r.hist_layer}`, `x${ax}`, top + 0.003));
        if (cap) layout.annotations.push(cap.note);
      });
      const last = r.curves[0].variances.length;
      return {
        data,
        layout,
        tables: [
          { caption: "formula against what normlab.init draws",
            columns: ["", "formula", "drawn"],
            rows: [["Xavier uniform bound a", fixed(r.xavier_bound_formula, 5), `${fixed(r.xavier_max_abs, 5)} (max |w|)`],
              ["He normal std", fixed(r.he_std_formula, 5), `${fixed(r.he_std_measured, 5)} (std of w)`]] },
          { caption: "activation variance",
            columns: ["", `layer ${r.hist_layer}`, `layer ${last}`],
            rows: r.curves.map((c) => [c.scheme, sig(c.variances[r.hist_layer - 1], 3), sig(c.variances[last - 1], 3)]) },
        ],
      };
    },

    "init-train": (r) => {
      const layers = range(1, r.forward_variances.length + 1);
      const losses = r.losses;
      const finite = losses.filter((v) => isNum(v) && v > 0);
      const logLoss = finite.length && Math.max(...finite) / Math.min(...finite) > 100;
      const bad = losses.findIndex((v) => !isNum(v));
      const marks = [...new Set([0, Math.floor(losses.length / 4), Math.floor(losses.length / 2),
        Math.floor((3 * losses.length) / 4), losses.length - 1])].sort((a, b) => a - b);
      const layout = {
        height: 400,
        margin: { t: 80 },
        xaxis: { domain: [0, 0.44], title: axisTitle("hidden layer"), dtick: 1 },
        xaxis2: { domain: [0.56, 1], anchor: "y2", title: axisTitle("training step") },
        yaxis: { type: "log", title: axisTitle("variance at initialization (log)"), exponentformat: "power" },
        yaxis2: { anchor: "x2", type: logLoss ? "log" : "linear", title: axisTitle(logLoss ? "BCE loss (log)" : "BCE loss"),
          rangemode: logLoss ? undefined : "tozero" },
        legend: { orientation: "h", x: 0, y: -0.2 },
        shapes: [hline(1)],
        annotations: [panelTitle("at initialization: forward and backward", "x", 1.02), panelTitle("training loss", "x2", 1.02)],
        title: title(`Initialization "${r.method}": does the deep ReLU net train?`),
      };
      if (bad >= 0) {
        layout.shapes.push({ type: "line", xref: "x2", yref: "y2 domain", x0: bad, x1: bad, y0: 0, y1: 1,
          line: { color: "#000", width: 1, dash: "dash" } });
        layout.annotations.push({ text: `loss not finite from step ${bad}`, xref: "x2", yref: "y2 domain", x: bad, y: 1,
          showarrow: false, xanchor: "right", font: { size: 10 } });
      }
      return {
        data: [
          { type: "scatter", mode: "lines+markers", name: "activation variance (forward)", meta: "forward", x: layers,
            y: floorAt(r.forward_variances, INIT_TRAIN_FLOOR), line: { color: BLUE }, marker: { size: 11 } },
          { type: "scatter", mode: "lines+markers", name: "gradient variance dL/dh (backward)", meta: "backward", x: layers,
            y: floorAt(r.backward_variances, INIT_TRAIN_FLOOR), line: { color: PURPLE, dash: "dash" }, marker: { symbol: "square", size: 7 } },
          { type: "scatter", mode: "lines", name: "training loss", meta: "loss", x: range(0, losses.length), y: losses,
            line: { color: RED, width: 2 }, xaxis: "x2", yaxis: "y2" },
        ],
        layout,
        tables: [
          { caption: `at initialization (${r.method}); values below 1e-12 are drawn at 1e-12`,
            columns: ["hidden layer", "activation var", "gradient var"],
            rows: layers.map((k) => [String(k), sig(r.forward_variances[k - 1], 3), sig(r.backward_variances[k - 1], 3)]) },
          { caption: "training loss (BCE)", columns: ["step", "loss"],
            rows: marks.map((t) => [String(t + 1), fixed(losses[t])]) },
        ],
      };
    },

    "bn-from-scratch": (r) => {
      const p = r.parity;
      const nCols = r.before_means.length;
      return {
        data: [
          histogram(r.before_hist, RED, "before", "before", { showlegend: false }),
          histogram(r.after_hist, BLUE, "x̂ (γ = 1, β = 0)", "after", { xaxis: "x2", yaxis: "y2" }),
          histogram(r.rescaled_hist, GREEN, "γ = 2, β = 1", "rescaled", { xaxis: "x2", yaxis: "y2" }, 0.45),
        ],
        layout: {
          height: 380,
          margin: { t: 84 },
          barmode: "overlay",
          bargap: 0,
          xaxis: { domain: [0, 0.44], title: axisTitle("value") },
          xaxis2: { domain: [0.56, 1], anchor: "y2", title: axisTitle("value") },
          yaxis: { title: axisTitle("count") },
          yaxis2: { anchor: "x2", title: axisTitle("count") },
          legend: { x: 1, xanchor: "right", y: 1 },
          annotations: [
            panelTitle(`column 0 before: mean ${fixed(r.before_means[0], 2)}, std ${fixed(r.before_stds[0], 2)}`, "x", 1.02),
            panelTitle(`after batch_norm: x̂ mean ${fixed(r.after_means[0], 2)}, std ${fixed(r.after_stds[0], 2)}`, "x2", 1.02),
          ],
          title: title("A skewed column, re-centred and rescaled by normlab.functional.batch_norm"),
        },
        tables: [
          { caption: "every column (std unbiased, ÷(N−1))", columns: ["", "mean", "std"],
            rows: [["before", list(r.before_means, 2), list(r.before_stds, 2)],
              ["after", list(r.after_means, 3), list(r.after_stds, 3)]] },
          { caption: `normlab BatchNorm1d vs torch.nn.BatchNorm1d, ${nCols} features: max |difference|`,
            columns: ["quantity", "max diff"],
            rows: [["train-mode output", sig(p.train_output, 3)], ["running_mean", sig(p.running_mean, 3)],
              ["running_var", sig(p.running_var, 3)], ["eval-mode output", sig(p.eval_output, 3)],
              ["input gradient", sig(p.input_grad, 3)]] },
        ],
      };
    },

    "bn-lr": (r) => {
      const clip = (xs) => xs.map((v) => (isNum(v) ? Math.min(Math.max(v, 0), LOSS_CLIP) : LOSS_CLIP));
      const curve = (bn) => (bn === r.batch_norm ? r.losses : r.contrast_losses);
      const data = [false, true].map((bn) => {
        const chosen = bn === r.batch_norm;
        const ys = curve(bn);
        return {
          type: "scatter", mode: "lines", meta: `bn:${bn}`,
          name: `${bn ? "with BN" : "without BN"}${chosen ? " (chosen)" : ""}`,
          x: range(0, ys.length), y: clip(ys),
          line: { color: bn ? BLUE : RED, width: chosen ? 3 : 1.2 }, opacity: chosen ? 1 : 0.6,
        };
      });
      const rows = [false, true].map((bn) => {
        const ys = curve(bn);
        const key = (v) => (isNum(v) ? v : Infinity); // a diverged step is the highest
        let peak = 0;
        ys.forEach((v, t) => { if (key(v) > key(ys[peak])) peak = t; });
        return [bn ? "with BN" : "without BN", fixed(ys[0]), fixed(ys[ys.length - 1]), `${fixed(ys[peak])} at step ${peak}`];
      });
      return {
        data,
        layout: {
          xaxis: { title: axisTitle("training step") },
          yaxis: { title: axisTitle(`BCE loss (clipped at ${LOSS_CLIP})`), range: [0, LOSS_CLIP] },
          legend: { x: 1, xanchor: "right", y: 1 },
          title: title(`Learning rate ${r.lr}: batch norm ${r.batch_norm ? "on" : "off"} (bold), the other setting thin`),
        },
        tables: [{ caption: `training loss at learning rate ${r.lr}`, columns: ["", "first", "last", "highest"], rows }],
      };
    },

    "bn-lr-sweep": (r) => {
      // non-finite or above the ceiling: drawn on the ceiling line; 0: at the floor of the log axis
      const shown = (xs) => xs.map((v) => (isNum(v) ? (v > LOSS_CLIP ? LOSS_CLIP : Math.max(v, SWEEP_FLOOR)) : LOSS_CLIP));
      const clipped = r.curves.some((c) => [...c.final_losses, ...c.peak_losses].some((v) => !isNum(v) || v > LOSS_CLIP));
      const n = r.lrs.length;
      const finals = r.curves.flatMap((c) => shown(c.final_losses));
      const yLo = Math.min(0.1, ...finals) / 1.6;
      const yHi = LOSS_CLIP * 1.6;
      const xs = r.lrs.filter((v) => isNum(v) && v > 0);
      const xLo = xs.length ? Math.min(...xs) / 1.15 : 0.1;
      const xHi = xs.length ? Math.max(...xs) * 1.15 : 1;
      const stableLoss = r.params?.stable_loss;
      const data = [];
      const best = {};
      for (const c of r.curves) {
        const bn = c.batch_norm;
        const name = bn ? "with BN" : "without BN";
        const color = bn ? BLUE : RED;
        const largest = c.stable.lastIndexOf(true);
        best[bn] = largest;
        data.push(
          { type: "scatter", mode: "lines", name, meta: `final:${bn}`, legendgroup: name, x: r.lrs,
            y: shown(c.final_losses), line: { color, width: 2.5 }, hoverinfo: "skip" },
          // the dots on top of the line: filled where the run was stable, hollow where not
          { type: "scatter", mode: "markers", name, meta: `dots:${bn}`, legendgroup: name, x: r.lrs,
            y: shown(c.final_losses), showlegend: false,
            marker: { size: 9, color: c.stable.map((ok) => (ok ? color : "#ffffff")), line: { color, width: 2 } },
            customdata: c.stable.map((ok, i) => [ok ? "stable" : "unstable", sig(c.final_losses[i]), sig(c.peak_losses[i])]),
            hovertemplate: `${name}, lr %{x:.3g}: final loss %{customdata[1]}, peak %{customdata[2]} (%{customdata[0]})<extra></extra>` },
          { type: "scatter", mode: "markers", name: `${name}: peak loss`, meta: `peak:${bn}`, legendgroup: name, x: r.lrs,
            y: shown(c.peak_losses), marker: { symbol: "triangle-up", size: 10, color }, opacity: 0.4, showlegend: false,
            customdata: c.peak_losses.map((v) => sig(v)),
            hovertemplate: `${name}, lr %{x:.3g}: peak loss after warm-up %{customdata}<extra></extra>` },
        );
        if (largest >= 0 && isNum(r.lrs[largest])) {
          const lr = r.lrs[largest];
          data.push({ type: "scatter", mode: "lines", name: `largest stable rate ${name}: ${sig(lr, 3)}`, meta: `largest:${bn}`,
            x: [lr, lr], y: [yLo, yHi], line: { color, width: 1.5, dash: "dot" }, hoverinfo: "skip" });
        }
      }
      const key = (name, marker) => ({ type: "scatter", mode: "markers", name, x: [null], y: [null], marker, hoverinfo: "skip" });
      data.push(
        key("peak loss after warm-up", { symbol: "triangle-up", size: 10, color: GRAY, opacity: 0.5 }),
        key("filled: stable", { size: 9, color: GRAY }),
        key("hollow: unstable", { size: 9, color: "#ffffff", line: { color: GRAY, width: 2 } }),
      );
      const shapes = [{ type: "line", xref: "x domain", yref: "y", x0: 0, x1: 1, y0: LOSS_CLIP, y1: LOSS_CLIP,
        line: { color: "#000", width: 1 }, opacity: 0.6 }];
      if (isNum(stableLoss)) {
        shapes.push(hline(stableLoss, "x", "y", "dash"));
        data.push({ type: "scatter", mode: "lines", name: `stable_loss ${stableLoss}`, x: [null], y: [null],
          line: { color: GRAY, width: 1, dash: "dash" }, hoverinfo: "skip" });
      }
      const rateText = (bn) => (best[bn] >= 0 ? sig(r.lrs[best[bn]], 3) : "none");
      const rows = r.curves.map((c) => {
        const i = best[c.batch_norm];
        const count = c.stable.filter(Boolean).length;
        return [c.batch_norm ? "with BN" : "without BN", rateText(c.batch_norm),
          i >= 0 ? fixed(c.final_losses[i]) : "–", `${count} of ${n}`];
      });
      const [plainBest, bnBest] = [best[false], best[true]];
      const ratio = plainBest >= 0 && bnBest >= 0 ? r.lrs[bnBest] / r.lrs[plainBest] : null;
      const tail = r.params?.tail;
      return {
        data,
        layout: {
          height: 460,
          margin: { t: 64 },
          xaxis: { type: "log", title: axisTitle("learning rate (log scale)"), range: [Math.log10(xLo), Math.log10(xHi)],
            tickvals: LR_TICKS, ticktext: LR_TICKS.map(String) },
          yaxis: { type: "log", title: axisTitle(`final loss (mean of the last ${tail ?? ""} steps, log)`),
            range: [Math.log10(yLo), Math.log10(yHi)], dtick: 1, exponentformat: "power" },
          legend: { orientation: "h", x: 0, y: -0.2 },
          shapes,
          annotations: [{ text: `${clipped ? "not finite or " : ""}above ${LOSS_CLIP}: drawn on this line`,
            xref: "x domain", yref: "y", x: 0.01, y: Math.log10(LOSS_CLIP), xanchor: "left", yanchor: "bottom",
            showarrow: false, font: { size: 10, color: "#5b6573" } }],
          title: title(`Final loss against the learning rate: stable up to ${rateText(false)} without BN, ${rateText(true)} with BN`),
        },
        tables: [{
          caption: `largest stable learning rate: ends below stable_loss ${stableLoss ?? ""} and never climbs above its starting loss`
            + (ratio === null ? "" : ` · with BN it reaches ${fixed(ratio, 1)}× further`),
          columns: ["", "largest stable lr", "final loss there", "stable rates"],
          rows,
        }],
      };
    },
  };

  // Label colours of the doctor: problems stand out, ok stays quiet.
  const LABEL_COLORS = {
    vanishing: "#1f77b4", exploding: "#d62728", dead: "#7f3c8d", saturated: "#ff7f0e",
    symmetric: "#2ca02c", ok: GRAY,
  };
  const DOCTOR_FLOOR = 1e-30;

  VIEWS.doctor = (r) => {
    const names = r.layers.map((l) => l.name);
    const x = range(0, names.length);
    const first = (l) => l.labels.find((k) => k !== "ok") || "ok";
    const colors = r.layers.map((l) => LABEL_COLORS[first(l)] || GRAY);
    const hover = r.layers.map((l) => `${l.name} (${l.kind})<br>${l.labels.join(", ")}`);
    const curve = (name, meta, y, axes, color) => ({
      type: "scatter", mode: "lines+markers", name, meta, x, y: floorAt(y, DOCTOR_FLOOR),
      line: { color, width: 1.5 }, marker: { color: colors, size: 9, line: { color: "#fff", width: 1 } },
      text: hover, hovertemplate: "%{text}<br>%{y:.3g}<extra></extra>", ...axes,
    });
    const ticks = { tickvals: x, ticktext: names, tickangle: -45, tickfont: { size: 9 } };
    const counts = {};
    r.layers.forEach((l) => l.labels.forEach((k) => { counts[k] = (counts[k] || 0) + 1; }));
    const legend = Object.keys(LABEL_COLORS).filter((k) => counts[k]).map((k) => ({
      type: "scatter", mode: "markers", name: `${k} (${counts[k]})`, x: [null], y: [null],
      marker: { color: LABEL_COLORS[k], size: 9 }, hoverinfo: "skip",
    }));
    const frac = (v) => (v === null ? "–" : `${Math.round(v * 100)}%`);
    // The gradient ratio exists for weight layers only: its line joins them over the others.
    const rho = { ...curve("gradient ratio ρ", "grad_ratio", r.layers.map((l) => l.grad_ratio), { xaxis: "x2", yaxis: "y2", showlegend: false }, PURPLE), connectgaps: true };
    return {
      data: [
        curve("activation std", "act_std", r.layers.map((l) => l.act_std), {}, BLUE),
        rho,
        curve("gradient std", "grad_std", r.layers.map((l) => l.grad_std), { xaxis: "x3", yaxis: "y3", showlegend: false }, GRAY),
        ...legend,
      ],
      layout: {
        height: 720,
        margin: { t: 80, b: 40 },
        grid: { rows: 3, columns: 1, pattern: "independent", roworder: "top to bottom" },
        xaxis: { ...ticks, showticklabels: false },
        xaxis2: { ...ticks, matches: "x", showticklabels: false },
        xaxis3: { ...ticks, matches: "x" },
        yaxis: { type: "log", exponentformat: "power", title: axisTitle("activation std"), domain: [0.7, 1] },
        yaxis2: { type: "log", exponentformat: "power", title: axisTitle("gradient ratio ρ"), domain: [0.35, 0.65] },
        yaxis3: { type: "log", exponentformat: "power", title: axisTitle("gradient std"), domain: [0, 0.3] },
        // the legend just above the top panel, the title above it (the verdict is the caption)
        legend: { orientation: "h", x: 0, y: 1, yanchor: "bottom" },
        title: { ...title(`${r.model} (${r.init} init): ${r.problems.join(", ") || "healthy"}`), y: 0.98, yanchor: "top" },
      },
      tables: [
        {
          caption: `verdict: ${r.verdict}`,
          columns: ["layer", "kind", "act mean", "act std", "dead", "saturated", "grad std", "grad ratio", "labels"],
          rows: r.layers.map((l) => [l.name, l.kind, sig(l.act_mean, 3), sig(l.act_std, 3),
            frac(l.dead_frac), frac(l.saturated_frac), sig(l.grad_std, 3), sig(l.grad_ratio, 3),
            l.labels.join(", ")]),
        },
        { caption: "what to change", columns: ["suggestion"], rows: r.suggestions.map((s) => [s]) },
      ],
    };
  };

  /** Any other experiment: its scalars in a table, its flat number lists as lines. */
  function genericView(r) {
    const rows = [];
    const data = [];
    for (const [k, v] of Object.entries(r)) {
      if (k === "params" || k === "experiment") continue;
      if (typeof v === "number" || typeof v === "string" || typeof v === "boolean") rows.push([k, String(v)]);
      else if (Array.isArray(v) && v.length && v.every((x) => x === null || typeof x === "number")) {
        data.push({ type: "scatter", mode: "lines+markers", name: k, meta: k, x: range(0, v.length), y: v });
      }
    }
    return {
      data,
      layout: { title: title(r.experiment), xaxis: { title: axisTitle("index") } },
      tables: rows.length ? [{ caption: "scalars", columns: ["field", "value"], rows }] : [],
    };
  }

  // -- start ------------------------------------------------------------------------------------

  async function start() {
    const nodes = [...document.querySelectorAll(".nl-widget")];
    if (!nodes.length) return;
    let specs;
    try {
      specs = await loadRegistry();
    } catch (err) {
      for (const node of nodes) {
        node.dataset.state = "error";
        node.querySelector(".nl-status").textContent = `could not load the experiments (${err.message})`;
      }
      return;
    }
    for (const node of nodes) {
      const spec = specs.get(node.dataset.experiment);
      if (!spec) {
        node.dataset.state = "error";
        node.querySelector(".nl-status").textContent = `unknown experiment ${node.dataset.experiment}`;
        continue;
      }
      const initial = node.querySelector("script.nl-initial");
      const widget = new Widget(node, spec);
      widgets.push(widget);
      widget.start(initial ? JSON.parse(initial.textContent) : null);
    }
    writeAddress(); // drop values that equal the page's own starting point
  }

  window.normlab = { widgets, VIEWS, fixed, sig };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
