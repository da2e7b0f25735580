/* normlab lab: the one plotly renderer of figure descriptions (normlab.figures), and tables.
 *
 * A result describes its figures as data: a Figure is a grid of Panels, each with an x and a y
 * Axis, the Series drawn on it, reference Lines, shaded Bands and a note. This file turns any
 * such description into plotly traces and a layout, and a result's tables into HTML tables. It
 * knows no experiment: every value it draws is in the description, already clipped or floored
 * by the experiment that made it. The matplotlib twin is normlab/plots.py.
 *
 * Every Series becomes exactly one trace, in order (figure by figure, panel by panel), named as
 * the series: reference lines and bands are layout shapes, notes and panel titles annotations.
 */
"use strict";

(() => {
  const { el } = window.NLDom;

  const PT = 4 / 3; // matplotlib sizes are points, plotly's CSS pixels
  const PX_PER_INCH = 80; // a Figure's height is in inches per row, as matplotlib's figsize
  const MIN_PANEL_PX = 300; // narrower than this per column: the panels stack
  const WIDE_PX = 720; // from this width the legend sits at the right, below it under the plot
  const BAR_WIDTH = 0.8; // matplotlib's default bar width
  const COLORBAR_PX = 80; // a colour bar, its ticks and its title
  const Y_AXIS_PX = 64; // a y axis' tick labels and title, left of the plot
  const LEGEND_PX = 180; // a legend at the right
  const WAITING = "waiting for the first points";
  const SYMBOLS = { circle: "circle", square: "square", triangle: "triangle-up", diamond: "diamond", x: "x" };
  const INK = "#1d2430";
  const MUTED = "#5b6573";
  const CONFIG = {
    responsive: false, // the renderer sizes its plots (see "drawing into the page")
    displaylogo: false,
    modeBarButtonsToRemove: ["lasso2d", "select2d", "autoScale2d"],
  };

  const isNum = (x) => typeof x === "number" && Number.isFinite(x);
  // plotly reads <b>, <br>, ... in its texts: a "<" of ours must stay a character
  const plain = (text) => String(text ?? "").replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const axisSuffix = (i) => (i === 0 ? "" : String(i + 1));

  // -- series -> traces -----------------------------------------------------------------------

  function scatterTrace(s, color) {
    // a line of one point (a run's first step) draws nothing: its point is shown as a marker
    const lone = s.kind === "line" && (s.y || []).filter(isNum).length < 2;
    const mode = lone ? "lines+markers" : { line: "lines", markers: "markers", "line+markers": "lines+markers" }[s.kind];
    const colors = s.colors || color;
    const trace = {
      type: "scatter", mode: s.labels ? `${mode}+text` : mode,
      line: { color, width: s.width * PT, dash: s.dash || "solid" },
      marker: {
        color: colors, size: s.marker_size * PT,
        symbol: (SYMBOLS[s.marker] || "circle") + (s.hollow ? "-open" : ""),
        line: { color: colors, width: s.hollow ? 1.5 : 0 },
      },
    };
    if (s.labels) Object.assign(trace, { text: s.labels, textposition: "top center", cliponaxis: false });
    return trace;
  }

  /** Bars; `slot` {k, n}: the k-th of n bar series on the panel, which stand side by side. */
  function barTrace(s, color, slot) {
    const widths = s.x.map((_, i) => (isNum(s.widths?.[i]) ? s.widths[i] : BAR_WIDTH));
    const fill = s.colors || color;
    const trace = {
      type: "bar",
      width: widths.map((w) => w / slot.n),
      marker: s.hollow ? { color: "rgba(0,0,0,0)", line: { color: fill, width: 1.5 } } : { color: fill },
    };
    if (slot.n > 1) trace.offset = widths.map((w) => -w / 2 + (slot.k * w) / slot.n);
    if (s.labels) Object.assign(trace, { text: s.labels.map(plain), textposition: "outside", cliponaxis: false });
    return trace;
  }

  /** Bars at the bin centres, as wide as the bins; nothing when the edges cannot place them. */
  function histogramTrace(s, color) {
    const edges = s.edges || [];
    const usable = edges.length === s.y.length + 1 && edges.every(isNum);
    return {
      type: "bar",
      x: usable ? s.y.map((_, i) => (edges[i] + edges[i + 1]) / 2) : [],
      y: usable ? s.y : [],
      width: usable ? s.y.map((_, i) => edges[i + 1] - edges[i]) : [],
      marker: { color: s.colors || color, line: { width: 0 } },
    };
  }

  // plotly's named scales (matplotlib's lower-case names of the same scales map onto them)
  const SCALES = ["Blackbody", "Bluered", "Blues", "Cividis", "Earth", "Electric", "Greens", "Greys",
    "Hot", "Jet", "Picnic", "Portland", "Rainbow", "RdBu", "Reds", "Viridis", "YlGnBu", "YlOrRd"];
  // these run the other way in plotly (its RdBu starts blue, its Blues dark): flipped back, so
  // that a name means what it means to matplotlib; "_r" reverses a scale, as in matplotlib
  const FLIPPED = new Set(["rdbu", "blues", "greens", "greys", "ylgnbu", "ylorrd"]);

  /** A colour scale named as matplotlib names it: {colorscale, reversescale} for plotly. */
  function scaleOf(name) {
    const text = String(name ?? "viridis").toLowerCase();
    const base = text.endsWith("_r") ? text.slice(0, -2) : text;
    const found = SCALES.find((k) => k.toLowerCase() === base);
    if (!found) return { colorscale: "Viridis", reversescale: false };
    return { colorscale: found, reversescale: FLIPPED.has(base) !== text.endsWith("_r") };
  }

  const hasColorbar = (s) => s.kind === "heatmap" && s.colorbar !== false;

  function heatmapTrace(s, where) {
    const t = { type: "heatmap", z: s.z, ...scaleOf(s.colorscale), showlegend: false,
      showscale: hasColorbar(s) };
    if (s.zlimits) Object.assign(t, { zmin: s.zlimits[0], zmax: s.zlimits[1], zauto: false });
    // the colour bar beside its own panel (not at the figure's edge), named as the series
    if (t.showscale) {
      t.colorbar = { x: where.x[1] + 0.005, xanchor: "left", y: (where.y[0] + where.y[1]) / 2,
        len: where.y[1] - where.y[0], thickness: 10, outlinewidth: 0,
        title: { text: plain(s.name), side: "right" } };
    }
    return t;
  }

  function trace(s, color, slot, where, axes) {
    const kind = s.kind || "line";
    let t;
    if (kind === "bars") t = barTrace(s, color, slot);
    else if (kind === "histogram") t = histogramTrace(s, color);
    else if (kind === "heatmap") t = heatmapTrace(s, where);
    else t = scatterTrace(s, color);
    return {
      name: plain(s.name), x: s.x, y: s.y, opacity: s.opacity ?? 1,
      xaxis: `x${axes}`, yaxis: `y${axes}`, ...t,
    };
  }

  /** The traces of one panel, colours taken from the palette in order by series without one. */
  function panelTraces(panel, axes, where, legend) {
    const bars = panel.series.filter((s) => s.kind === "bars");
    return panel.series.map((s) => {
      const color = s.color || INK; // the description colours every series but a heat map
      const t = trace(s, color, { k: bars.indexOf(s), n: Math.max(bars.length, 1) }, where, axes);
      // one legend entry per name and colour: the same curve on two panels is listed once
      const key = `${s.name}\u0000${color}`;
      t.legendgroup = key;
      if (t.showlegend === undefined) t.showlegend = s.legend !== false && s.name !== "" && !legend.has(key);
      if (t.showlegend) legend.add(key);
      return t;
    });
  }

  // -- log axes: tick values chosen from the range shown and the room along the axis -----------

  const FONT_PX = 12; // the layout's font size
  const CHAR_PX = 0.62 * FONT_PX; // the width of a digit, near enough
  const Y_LABEL_PX = 30; // at least this far apart on a y axis (one line, superscripts included)
  const X_LABEL_GAP_PX = 14; // at least this between two labels' ends on an x axis
  const MAX_LABELS = 10;
  const SINGLE_HALF = Math.log10(2) / 2; // a single value is shown on a factor of 2 around it

  /** A tick's label: 0.01 to 1000 as numbers, 10^k beyond (every decade but 1 and 10 so when
   * `powers`, as on a long range), 2×10^k between decades. */
  function logLabel(v, powers = false) {
    const k = Math.floor(Math.log10(v) + 1e-9);
    const m = Number((v / 10 ** k).toPrecision(3));
    if (k >= -2 && k <= 3 && !(powers && m === 1 && (k < 0 || k > 1))) return g(v);
    const power = `10<sup>${String(k).replace("-", "\u2212")}</sup>`;
    return m === 1 ? power : `${g(m)}\u00d7${power}`;
  }

  /** The labels of a set of ticks, decades written alike. */
  function logLabels(vals) {
    const powers = vals.some((v) => Math.abs(Math.log10(v) - 0.5) > 3);
    return vals.map((v) => logLabel(v, powers));
  }

  /** Width of a label on the page, from its characters (a superscript's are smaller). */
  function labelPx(text) {
    const sup = (text.match(/<sup>(.*?)<\/sup>/) || ["", ""])[1];
    const base = text.replace(/<sup>.*?<\/sup>/, "");
    return (base.length + 0.7 * sup.length) * CHAR_PX;
  }

  /** Whether labels at `vals` along `px` pixels of the range [lo, hi] (log10) stay apart. */
  function fits(vals, lo, hi, px, along) {
    const at = vals.map((v) => ((Math.log10(v) - lo) / (hi - lo)) * px);
    const text = logLabels(vals);
    for (let i = 1; i < vals.length; i++) {
      const room = along === "y" ? Y_LABEL_PX : (labelPx(text[i - 1]) + labelPx(text[i])) / 2 + X_LABEL_GAP_PX;
      if (at[i] - at[i - 1] < room) return false;
    }
    return true;
  }

  /** Every `step`-th decade in [lo, hi] (log10), on multiples of the step so that 1 is one. */
  function decades(lo, hi, step) {
    const out = [];
    for (let k = Math.ceil(lo / step - 1e-9) * step; k <= hi + 1e-9; k += step) out.push(10 ** k);
    return out;
  }

  /** 1, 2 and 5 times each power of ten in [lo, hi] (log10). */
  function oneTwoFive(lo, hi) {
    const out = [];
    for (let k = Math.floor(lo); k <= Math.ceil(hi); k++) {
      for (const m of [1, 2, 5]) {
        const v = m * 10 ** k;
        if (Math.log10(v) >= lo - 1e-9 && Math.log10(v) <= hi + 1e-9) out.push(Number(v.toPrecision(12)));
      }
    }
    return out;
  }

  /** Multiples of `step` in [10^lo, 10^hi]: the ticks of a range narrower than a decade or two. */
  function multiples(lo, hi, step) {
    const out = [];
    const first = Math.ceil(10 ** lo / step - 1e-9);
    for (let i = first; i * step <= 10 ** hi * (1 + 1e-12) && out.length <= 100; i++) {
      out.push(Number((i * step).toPrecision(12)));
    }
    return out.filter((v) => v > 0);
  }

  /** Candidate tick sets for [lo, hi] (log10), in order of preference when as many fit. */
  function candidates(lo, hi) {
    const sets = [];
    for (let m = 1; m <= Math.max(1, hi - lo); m *= 10) {
      for (const k of [1, 2, 3, 4, 5]) sets.push(decades(lo, hi, k * m));
    }
    sets.push(oneTwoFive(lo, hi));
    const span = 10 ** hi - 10 ** lo;
    for (let e = Math.floor(Math.log10(span / 50)); e <= Math.ceil(Math.log10(span)); e++) {
      for (const m of [1, 2, 5]) sets.push(multiples(lo, hi, m * 10 ** e));
    }
    return sets;
  }

  /** Tick values for a log axis over [lo, hi] (log10) along `px` pixels: the most labels that
   * stay apart (at least two), decades thinned on a long range, 1-2-5 or finer steps on a short one. */
  function logTicks(lo, hi, px, along) {
    let best = null;
    for (const vals of candidates(lo, hi)) {
      const ok = vals.length >= 2 && vals.length <= MAX_LABELS && fits(vals, lo, hi, px, along);
      if (ok && (!best || vals.length > best.length)) best = vals;
    }
    if (best) return best;
    // room for no set of round values: two values a fifth in from the ends
    return [lo + (hi - lo) / 5, hi - (hi - lo) / 5].map((e) => Number((10 ** e).toPrecision(3)));
  }

  /** The range a log axis shows (log10): its limits, else its values padded by 5 %. */
  function logRange(a, data) {
    const [lo, hi] = a.limits || [];
    if (a.limits && lo > 0 && hi > lo) return [Math.log10(lo), Math.log10(hi)];
    const logs = data.filter((v) => v > 0).map(Math.log10);
    if (!logs.length) return null;
    const low = Math.min(...logs);
    const high = Math.max(...logs);
    const pad = high - low > 1e-6 ? (high - low) / 20 : SINGLE_HALF;
    return [Math.max(low - pad, -323), Math.min(high + pad, 308)]; // within a double's range
  }

  /** Range and ticks of a log axis without ticks of its own, `px` pixels long. */
  function logAxis(a, data, px, along) {
    const range = logRange(a, data);
    if (!range) return { range: [-1, 1] }; // nothing to place: (0.1, 10)
    const vals = logTicks(range[0], range[1], px, along);
    return { range, autorange: false, tickmode: "array", tickvals: vals, ticktext: logLabels(vals) };
  }

  // -- panels -> axes, shapes, annotations -----------------------------------------------------

  /** String x values of the panel in order of first appearance: category i sits at i. */
  function categories(panel) {
    const found = [];
    for (const s of panel.series) {
      for (const v of s.x || []) if (typeof v === "string" && !found.includes(v)) found.push(v);
    }
    return found;
  }

  /** Every finite value the panel places along "x" or "y" (category positions for names). */
  function values(panel, which, cats) {
    const out = [];
    for (const s of panel.series) {
      const vs = s.kind === "histogram" ? (which === "x" ? s.edges || [] : s.y) : which === "x" ? s.x : s.y;
      for (const v of vs || []) out.push(typeof v === "string" ? cats.indexOf(v) : v);
    }
    return out.filter(isNum);
  }

  const placeable = (v, log) => isNum(v) && (v > 0 || !log);
  const g = (t) => String(Number(t.toPrecision(6))); // Python's f"{t:g}", near enough for ticks

  /** What an axis must show: the panel's values, its reference lines and its bands' ends. */
  function shown(panel, which, cats) {
    const marks = [...(panel.lines || []), ...(panel.bands || [])].filter((m) => (m.axis || "y") === which);
    const ends = marks.flatMap((m) => ("value" in m ? [m.value] : [m.low, m.high]));
    return [...values(panel, which, cats), ...ends.filter(isNum)];
  }

  /** One axis; `data` is what it must show, `px` its length on the page along `along`. */
  function axisLayout(a, cats, data, px, along) {
    const log = a.scale === "log";
    const out = {
      title: { text: plain(a.label), standoff: 6 }, automargin: true,
      type: log ? "log" : cats.length ? "category" : "linear",
      gridcolor: "#e6e9ee", zerolinecolor: "#c5ccd5", linecolor: "#c5ccd5",
    };
    if (cats.length) Object.assign(out, { categoryorder: "array", categoryarray: cats });
    const [lo, hi] = a.limits || [];
    if (log && !a.ticks) Object.assign(out, logAxis(a, data, px, along));
    else if (a.limits && (!log || (lo > 0 && hi > 0))) out.range = log ? [Math.log10(lo), Math.log10(hi)] : [lo, hi];
    else if (log && !data.some((v) => v > 0)) out.range = [-1, 1]; // nothing to place: (0.1, 10)
    let names = null;
    if (a.ticks) {
      // on a category axis a tick is a position: name it by its category
      const at = (t) => (cats.length && Number.isInteger(t) && cats[t] !== undefined ? cats[t] : t);
      names = (a.tick_labels || a.ticks.map(g)).map(plain);
      Object.assign(out, { tickmode: "array", tickvals: a.ticks.map(at), ticktext: names });
    } else if (cats.length) {
      const every = Math.ceil(cats.length / 30); // more names than 30 crowd an axis
      names = cats.filter((_, i) => i % every === 0);
      Object.assign(out, { tickmode: "array", tickvals: names, ticktext: names.map(plain) });
    }
    if (names && names.join("").length > 60) out.tickangle = -45;
    return out;
  }

  /** A reference line across the panel: horizontal for axis "y", vertical for "x". */
  function lineShape(line, axes) {
    const across = line.axis === "x" ? "y" : "x";
    return {
      type: "line", [`${across}ref`]: `${across}${axes} domain`, [`${across}0`]: 0, [`${across}1`]: 1,
      [`${line.axis}ref`]: `${line.axis}${axes}`, [`${line.axis}0`]: line.value, [`${line.axis}1`]: line.value,
      line: { color: line.color, width: 1.5, dash: line.dash || "dot" },
      name: plain(line.label), showlegend: !!line.label,
    };
  }

  /** A shaded range; an end the axis cannot place reaches the edge of the data's range. */
  function bandShape(band, axes, data, log) {
    const across = band.axis === "x" ? "y" : "x";
    const shown = data.filter((v) => placeable(v, log));
    const low = placeable(band.low, log) ? band.low : Math.min(...shown);
    const high = placeable(band.high, log) ? band.high : Math.max(...shown);
    if (!isNum(low) || !isNum(high)) return null; // neither end nor any data to reach
    return {
      type: "rect", layer: "below", line: { width: 0 }, fillcolor: band.color, opacity: band.opacity,
      [`${across}ref`]: `${across}${axes} domain`, [`${across}0`]: 0, [`${across}1`]: 1,
      [`${band.axis}ref`]: `${band.axis}${axes}`, [`${band.axis}0`]: low, [`${band.axis}1`]: high,
      name: plain(band.label), showlegend: !!band.label,
    };
  }

  /** The panel's reference lines and bands as layout shapes (lines it cannot place left out). */
  function panelShapes(panel, axes, cats) {
    const log = { x: panel.x.scale === "log", y: panel.y.scale === "log" };
    const data = { x: values(panel, "x", cats), y: values(panel, "y", cats) };
    const bands = (panel.bands || []).map((b) => ({ axis: "y", ...b }))
      .map((b) => bandShape(b, axes, data[b.axis], log[b.axis])).filter(Boolean);
    const lines = (panel.lines || []).map((l) => ({ axis: "y", ...l }))
      .filter((l) => placeable(l.value, log[l.axis])).map((l) => lineShape(l, axes));
    return [...bands, ...lines];
  }

  function panelAnnotations(panel, where, axes) {
    const out = [];
    if (panel.title) {
      out.push({ text: plain(panel.title), xref: "paper", yref: "paper", x: (where.x[0] + where.x[1]) / 2,
        y: where.y[1], xanchor: "center", yanchor: "bottom", yshift: 4, showarrow: false, font: { size: 12 } });
    }
    if (panel.note) {
      out.push({ text: plain(panel.note).replace(/\n/g, "<br>"), xref: `x${axes} domain`, yref: `y${axes} domain`,
        x: 0.99, y: 0.02, xanchor: "right", yanchor: "bottom", align: "right", showarrow: false,
        font: { size: 10, color: MUTED }, bgcolor: "rgba(255,255,255,0.8)" });
    }
    return out;
  }

  // -- a figure -> {data, layout} ----------------------------------------------------------------

  /** Rows and columns for `width` pixels: the figure's own grid, or stacked when too narrow. */
  function gridOf(fig, width) {
    const n = fig.panels.length;
    let cols = Math.min(fig.columns || n, n) || 1;
    cols = Math.max(1, Math.min(cols, Math.floor(width / MIN_PANEL_PX)));
    return { rows: Math.ceil(n / cols), cols };
  }

  /** Each panel's [x0, x1] and [y0, y1] on the paper, with room between for ticks and titles. */
  function domains(fig, grid, width, rowPx) {
    const hasTitles = fig.panels.some((p) => p.title);
    const gapX = grid.cols > 1 ? Math.min(0.2, 90 / width) : 0;
    const gapPx = (fig.shared_x ? 24 : 64) + (hasTitles ? 22 : 0);
    const paper = grid.rows * rowPx + (grid.rows - 1) * gapPx;
    const colW = (1 - gapX * (grid.cols - 1)) / grid.cols;
    const out = fig.panels.map((_, i) => {
      const r = Math.floor(i / grid.cols);
      const c = i % grid.cols;
      const top = 1 - (r * (rowPx + gapPx)) / paper;
      // a heatmap's colour bar sits inside its panel's cell, clear of the next panel and the legend
      const bar = fig.panels[i].series.some(hasColorbar) ? Math.min(0.3, COLORBAR_PX / width) : 0;
      return { x: [c * (colW + gapX), c * (colW + gapX) + colW - bar], y: [top - rowPx / paper, top] };
    });
    return { where: out, paper };
  }

  function legendLayout(wide) {
    if (wide) return { font: { size: 11 }, x: 1.02, xanchor: "left", y: 1, yanchor: "top" };
    return { font: { size: 11 }, orientation: "h", x: 0, xanchor: "left",
      y: 0, yref: "container", yanchor: "bottom" };
  }

  /** The x and y axes of panel i, placed on the paper; a shared x shows its ticks once.
   * `room` is the panel's size on the page in pixels, which the log axes' ticks must fit. */
  function panelAxes(fig, i, grid, where, room) {
    const panel = fig.panels[i];
    const axes = axisSuffix(i);
    const cats = categories(panel);
    const xs = fig.shared_x ? fig.panels.flatMap((p) => shown(p, "x", categories(p))) : shown(panel, "x", cats);
    const x = { ...axisLayout(panel.x, cats, xs, room.x, "x"), domain: where.x, anchor: `y${axes}` };
    const y = { ...axisLayout(panel.y, [], shown(panel, "y", cats), room.y, "y"), domain: where.y, anchor: `x${axes}` };
    if (fig.shared_x && i > 0 && !isEmpty(fig.panels[0]) && !isEmpty(panel)) x.matches = "x";
    if (fig.shared_x && i + grid.cols < fig.panels.length) { // another panel sits under this one
      Object.assign(x, { showticklabels: false, title: { text: "" } });
    }
    if (isEmpty(panel)) for (const a of [x, y]) Object.assign(a, { visible: false, range: [0, 1], type: "linear" });
    return { [`xaxis${axes}`]: x, [`yaxis${axes}`]: y };
  }

  /** A panel with nothing to place yet, as a streamed run's panel before its first points. */
  const isEmpty = (panel) => !values(panel, "y", categories(panel)).some((v) => placeable(v, panel.y.scale === "log"));

  /** What stands in for an empty panel's axes: a line saying what it waits for. */
  const waiting = (where) => ({ text: WAITING, xref: "paper", yref: "paper", showarrow: false,
    x: (where.x[0] + where.x[1]) / 2, y: (where.y[0] + where.y[1]) / 2, font: { size: 12, color: MUTED } });

  function figurePlot(fig, width) {
    const grid = gridOf(fig, width);
    const rowPx = Math.max(200, Math.round((fig.height || 4.2) * PX_PER_INCH));
    const { where, paper } = domains(fig, grid, width, rowPx);
    const legend = new Set();
    const data = [];
    const layout = { shapes: [], annotations: [] };
    fig.panels.forEach((panel, i) => {
      const axes = axisSuffix(i);
      data.push(...panelTraces(panel, axes, where[i], legend));
      if (!isEmpty(panel)) layout.shapes.push(...panelShapes(panel, axes, categories(panel)));
      else layout.annotations.push(waiting(where[i]));
      layout.annotations.push(...panelAnnotations(panel, where[i], axes));
    });
    const entries = legend.size + layout.shapes.filter((s) => s.showlegend).length;
    const wide = width >= WIDE_PX;
    // the plotting width: the page's less the margins, the y axis' labels and title, a legend beside
    const plotPx = width - 16 - Y_AXIS_PX - (wide && entries ? LEGEND_PX : 0);
    fig.panels.forEach((_, i) => {
      const room = { x: plotPx * (where[i].x[1] - where[i].x[0]), y: rowPx };
      Object.assign(layout, panelAxes(fig, i, grid, where[i], room));
    });
    const top = 12 + (fig.panels.slice(0, grid.cols).some((p) => p.title) ? 24 : 0);
    const bottom = wide || !entries ? 8 : 8 + 22 * Math.ceil(entries / Math.max(1, Math.floor(width / 150)));
    Object.assign(layout, {
      width, height: top + paper + bottom + 48, // 48: the bottom row's tick labels and axis title
      margin: { l: 8, r: 8, t: top, b: bottom + 48, autoexpand: true },
      font: { family: getComputedStyle(document.body).fontFamily, size: FONT_PX, color: INK },
      paper_bgcolor: "#ffffff", plot_bgcolor: "#ffffff", hovermode: "closest",
      barmode: "overlay", bargap: 0, showlegend: entries > 0, legend: legendLayout(wide),
    });
    return { data, layout };
  }

  // -- drawing into the page ---------------------------------------------------------------------
  //
  // The renderer owns each plot's size: plotly gets the width and the height, and the plot's box
  // is given that height before plotly draws into it. (Left to autosize, plotly's own resize set
  // the plot's container to 100% of a box whose height came from that container, and the chart
  // was drawn over what follows it.) A box is redrawn when its width changes, a window resize
  // or a scroll bar coming or going, with the figures it was last asked to draw; draws into one
  // box are taken one at a time, in order.

  const drawn = new Map(); // box -> {figures, width, queue}

  function holder(box, i) {
    let node = box.children[i];
    if (!node) {
      node = el("div", { class: "nl-figure" },
        el("p", { class: "nl-figure-title" }), el("div", { class: "nl-figure-plot" }));
      box.append(node);
    }
    return node;
  }

  async function paint(box, figures) {
    const width = box.clientWidth || 800;
    drawn.get(box).width = width;
    for (const [i, fig] of figures.entries()) {
      const node = holder(box, i);
      node.querySelector(".nl-figure-title").textContent = fig.title || "";
      const { data, layout } = figurePlot(fig, width);
      const plot = node.querySelector(".nl-figure-plot");
      plot.style.height = `${layout.height}px`; // the box reserves the chart's height
      await Plotly.react(plot, data, layout, CONFIG);
      followZoom(plot);
    }
    while (box.children.length > figures.length) {
      const extra = box.lastElementChild;
      Plotly.purge(extra.querySelector(".nl-figure-plot"));
      extra.remove();
    }
  }

  /** After a zoom or a pan, a log axis whose ticks the renderer chose has them chosen again
   * for the range it now shows. */
  function followZoom(plot) {
    if (plot.nlFollowsZoom) return;
    plot.nlFollowsZoom = true;
    plot.on("plotly_relayout", (change) => {
      const update = {};
      for (const key of Object.keys(change)) {
        const name = (key.match(/^([xy]axis\d*)\.(range|autorange)/) || [])[1];
        const ax = name && plot._fullLayout[name];
        if (!ax || ax.type !== "log" || plot.layout[name]?.autorange !== false) continue;
        const vals = logTicks(ax.range[0], ax.range[1], ax._length, name[0]);
        Object.assign(update, { [`${name}.tickvals`]: vals, [`${name}.ticktext`]: logLabels(vals) });
      }
      if (Object.keys(update).length) Plotly.relayout(plot, update);
    });
  }

  /** Draw `figures` into `box`, one titled plotly plot per figure; resolves once drawn, or
   * at once when newer figures came for the box while it waited for an earlier draw. */
  function draw(box, figures) {
    if (!drawn.has(box)) {
      drawn.set(box, { figures, width: null, queue: Promise.resolve() });
      widths.observe(box);
    }
    const entry = drawn.get(box);
    entry.figures = figures;
    const done = entry.queue.catch(() => {}).then(() => (entry.figures === figures ? paint(box, figures) : null));
    entry.queue = done;
    return done;
  }

  let resizeTimer = null;
  const widths = new ResizeObserver(() => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => {
      for (const [box, entry] of drawn) {
        if (!box.isConnected) {
          drawn.delete(box);
          widths.unobserve(box);
        } else if ((box.clientWidth || 800) !== entry.width) {
          draw(box, entry.figures).catch(() => {}); // a failed redraw leaves the last drawing
        }
      }
    }, 150);
  });

  // -- tables ------------------------------------------------------------------------------------

  /** One table of already formatted cells: title as caption, first cell of a row as its header. */
  function tableBlock(t) {
    const table = el("table");
    if (t.title) table.append(el("caption", { text: t.title }));
    const head = el("tr");
    for (const c of t.columns) head.append(el("th", { scope: "col", text: c }));
    table.append(el("thead", {}, head));
    const body = el("tbody");
    for (const row of t.rows) {
      const tr = el("tr");
      row.forEach((cell, i) => tr.append(i === 0 ? el("th", { scope: "row", text: cell }) : el("td", { text: cell })));
      body.append(tr);
    }
    table.append(body);
    const block = el("div", { class: "nl-table-block" }, table);
    for (const note of t.notes || []) block.append(el("p", { class: "nl-table-note", text: note }));
    return block;
  }

  function tables(box, list) {
    box.replaceChildren(el("div", { class: "nl-tables" }, ...list.map(tableBlock)));
  }

  window.NLRender = { draw, tables, figurePlot };
})();
