/* normlab lab: what the /train page draws of a live run, as figure descriptions.
 *
 * The server streams a run's points once and then frames (normlab.trainview.Session.frame):
 * losses, the decision boundary on a grid, every layer's statistics with the doctor's labels,
 * and histograms of each hidden block's activations and gradients. A History keeps what the
 * curves need of the frames seen so far (bounded), and figures() describes it in the shape
 * normlab.figures gives every result, so the one generic renderer (render.js) draws it. This
 * file draws nothing itself and computes no statistic: every number comes from the frames.
 */
"use strict";

(() => {
  const MAX_POINTS = 5000; // points per curve kept; older ones are thinned out
  const MAX_COLUMNS = 150; // frames kept for the histograms over time
  const BLUE = "#1f77b4"; // normlab.figures' palette (matplotlib's tab10)
  const ORANGE = "#ff7f0e";
  const RED = "#d62728";
  const PALETTE = [BLUE, ORANGE, "#2ca02c", RED, "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  const GREEN = "#2ca02c";

  const isNum = (x) => typeof x === "number" && Number.isFinite(x);
  const positive = (x) => (isNum(x) && x > 0 ? x : null); // a log axis places no 0

  /** Keep every other entry of the older half once `list` is longer than `limit`. */
  function thin(list, limit) {
    if (list.length <= limit) return list;
    const half = Math.floor(list.length / 2);
    return [...list.slice(0, half).filter((_, i) => i % 2 === 0), ...list.slice(half)];
  }

  /** What the curves need of the frames seen so far. */
  class History {
    constructor() { this.clear(); }

    clear() {
      this.loss = []; // {step, train, test}
      this.columns = []; // {step, act, grad}: histograms over time
      this.layers = []; // {step, scale: [...], ratio: [...]} per frame
      this.last = null;
      this.firstBoundary = null;
    }

    /** The curves up to a replayed step (Session.losses: the step after each loss). */
    losses(h) {
      this.loss = h.train.map((train, i) => ({ step: h.start + i + 1, train, test: h.test[i] }));
      this.loss = thin(this.loss, MAX_POINTS);
    }

    add(frame) {
      if (this.last && frame.step < this.last.step) this.clear(); // a reset went back
      if (this.last === null) this.firstBoundary = frame.boundary;
      this.last = frame;
      const loss = this.loss;
      if (!loss.length || loss[loss.length - 1].step !== frame.step) {
        loss.push({ step: frame.step, train: frame.train_loss, test: frame.test_loss });
        this.loss = thin(loss, MAX_POINTS);
      }
      this.columns.push({ step: frame.step, act: frame.hist.act, grad: frame.hist.grad });
      if (this.columns.length > MAX_COLUMNS) this.columns.shift();
      this.layers.push({ step: frame.step, scale: frame.layers.map((l) => l.scale),
        ratio: frame.layers.map((l) => l.grad_ratio) });
      this.layers = thin(this.layers, MAX_POINTS);
    }
  }

  const axis = (label, extra = {}) => ({ label, scale: "linear", ...extra });
  const series = (name, x, y, extra = {}) => ({ name, x, y, kind: "line", width: 1.5, dash: "solid",
    marker: "circle", marker_size: 5, hollow: false, opacity: 1, legend: true, ...extra });

  /** The points of one part (train, test) coloured by class, on the boundary. */
  function points(data, part) {
    const p = data[part];
    return series(`${part} points`, p.x, p.y, { kind: "markers", color: "#000000",
      colors: p.label.map((c) => (c ? RED : BLUE)), hollow: part === "test", marker_size: 4 });
  }

  function boundaryPanel(data, frame) {
    const b = frame.boundary;
    const ext = data.extent;
    return {
      title: `decision boundary at step ${frame.step}`,
      x: axis("x0 (standardized)", { limits: ext.x }), y: axis("x1 (standardized)", { limits: ext.y }),
      series: [
        series("P(class 1)", b.x, b.y, { kind: "heatmap", z: b.z, colorscale: "RdBu_r", zlimits: [0, 1], opacity: 0.75 }),
        points(data, "train"), points(data, "test"),
      ],
      lines: [], bands: [], note: "",
    };
  }

  function lossPanel(h) {
    const steps = h.loss.map((p) => p.step);
    const acc = h.last.accuracy;
    const note = isNum(acc.test) ? `accuracy: train ${acc.train.toFixed(3)}, test ${acc.test.toFixed(3)}`
      : `accuracy: train ${isNum(acc.train) ? acc.train.toFixed(3) : "n/a"}`;
    return {
      title: "loss",
      x: axis("steps taken"), y: axis("BCE loss (log)", { scale: "log" }),
      series: [
        series("train", steps, h.loss.map((p) => positive(p.train)), { color: BLUE }),
        series("test", steps, h.loss.map((p) => positive(p.test)), { color: ORANGE }),
      ],
      lines: [], bands: [], note,
    };
  }

  /** The histograms of one kind (act, grad) over the frames kept: a heat map per block. */
  function histFigure(h, kind, title) {
    const hist = h.last.hist;
    const centres = hist.edges.slice(0, -1).map((e, i) => (e + hist.edges[i + 1]) / 2);
    const steps = h.columns.map((c) => c.step);
    const panels = hist.layers.map((name, k) => ({
      title: `block ${k + 1} (module ${name})`,
      x: axis("steps taken"), y: axis(hist.scale),
      // log(1 + count): fastai's colourful dimension, so that a few values still show
      series: [series("log(1 + count)", steps, centres, { kind: "heatmap", colorscale: "viridis", colorbar: false,
        z: centres.map((_, j) => h.columns.map((c) => (c[kind][k] ? Math.log1p(c[kind][k][j] ?? 0) : null))) })],
      lines: [], bands: [], note: "",
    }));
    return { title, panels, columns: Math.min(panels.length, 4), height: 2.2, shared_x: false };
  }

  /** Each layer's scale and gradient ratio over the frames, and the doctor's healthy ranges. */
  function scaleFigure(h, limits) {
    const steps = h.layers.map((f) => f.step);
    const layers = h.last.layers;
    const curve = (key, i) => h.layers.map((f) => positive(f[key][i]));
    const colour = (i) => PALETTE[i % PALETTE.length];
    const scale = layers.map((l, i) => series(`${l.name} ${l.kind}`, steps, curve("scale", i), { color: colour(i) }));
    const ratio = layers.map((l, i) => ({ l, i })).filter(({ l }) => l.kind === "Linear")
      .map(({ l, i }) => series(`${l.name} ${l.kind}`, steps, curve("ratio", i), { color: colour(i) }));
    const band = (low, high, label) => [{ low, high, axis: "y", label, color: GREEN, opacity: 0.12 }];
    return {
      title: "Every layer's scale and gradient ratio, with the doctor's healthy ranges",
      columns: 2, height: 3, shared_x: false,
      panels: [
        { title: "output std / input std", x: axis("steps taken"), y: axis("scale (log)", { scale: "log" }),
          series: scale, lines: [], bands: band(limits.vanishing, limits.exploding, "healthy scale"), note: "" },
        { title: "gradient ratio (weight layers)", x: axis("steps taken"), y: axis("ratio (log)", { scale: "log" }),
          series: ratio, lines: [], bands: band(limits.grad_vanishing, limits.grad_exploding, "healthy ratio"),
          note: "" },
      ],
    };
  }

  /** Every figure of a run: loss and boundary, activations, gradients, scales. */
  function figures(h, data, limits) {
    if (!h.last || !data) return [];
    return [
      { title: "", panels: [boundaryPanel(data, h.last), lossPanel(h)], columns: 2, height: 3.6, shared_x: false },
      scaleFigure(h, limits),
      histFigure(h, "act", "Activations of each hidden block over steps: histogram of log10 |value|"),
      histFigure(h, "grad", "Gradients at each hidden block over steps: histogram of log10 |value|"),
    ];
  }

  const g3 = (x) => (isNum(x) ? String(Number(x.toPrecision(3))) : "n/a");

  /** The layers of a frame as a table, the doctor's labels last. */
  function table(frame) {
    return {
      title: `Every layer at step ${frame.step}`,
      columns: ["layer", "kind", "block", "act std", "grad std", "grad ratio", "labels"],
      rows: frame.layers.map((l) => [l.name, l.kind, String(l.block ?? ""), g3(l.act_std), g3(l.grad_std),
        g3(l.grad_ratio), l.labels.join(", ")]),
      notes: ["statistics of the last step's own forward and backward pass (before the first step: of the initialization)"],
    };
  }

  window.NLTrainView = { History, figures, table };
})();
