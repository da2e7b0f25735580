/* normlab lab: live widgets built from the experiment registry. Plain JS, no build step.
 *
 * A widget is a <figure class="nl-widget" data-experiment="NAME" data-widget="ID"> rendered by
 * the server, with the page's own run of its starting settings embedded. Its controls come from
 * the parameter declarations at GET /api/experiments (controls.js), its state lives in the
 * address (state.js), and each answer of POST /api/experiments/NAME carries the result's
 * figures and tables, drawn by the one generic renderer (render.js). "Show the code" shows the
 * plain-PyTorch script behind the current settings (GET .../code), with links to run it in the
 * playground and to download it as a notebook.
 *
 * A training widget whose experiment streams reads its run from GET .../stream instead
 * (events.js): the figures of each frame are drawn as they come, so the curves grow while the
 * run trains and the status says how many steps are done, then the answer is drawn as a POST's
 * would be. A new setting closes the run in progress at once (the server stops it), before the
 * new one waits for the hand to rest.
 *
 * For tests, each widget element exposes data-state="ready|loading|error", nlParams (the
 * settings shown), nlLastParams / nlLastResult (what is drawn), nlError, nlFrames and
 * nlLastFrame (the frames of the latest streamed run), and, once the code is shown,
 * nlCodeParams / nlCode (the code route's answer) with data-code-state on its panel.
 */
"use strict";

(() => {
  const DEBOUNCE_MS = 150; // sliders: wait for the hand to rest
  const TYPING_MS = 400; // number inputs: wait for the typing to stop
  const { el } = window.NLDom;
  const State = window.NLState;

  /** The answer of a fetch as JSON, or an Error carrying the 422's {parameter, message}. */
  async function fetchJson(url, options) {
    const response = await fetch(url, { ...options, headers: { Accept: "application/json", ...options?.headers } });
    let body = null;
    try { body = await response.json(); } catch (_) { body = null; }
    if (!response.ok) {
      const detail = body && typeof body.detail === "object" ? body.detail : {};
      const err = new Error(detail.message ?? `HTTP ${response.status}`);
      err.parameter = detail.parameter ?? null;
      err.status = response.status;
      throw err;
    }
    return body;
  }

  let registry = null;
  function loadRegistry() {
    registry ??= fetchJson("/api/experiments").then((items) => new Map(items.map((e) => [e.name, e])));
    return registry;
  }

  const widgets = [];
  const writeAddress = () => State.write(widgets);

  // -- the code behind a widget ---------------------------------------------------------------

  /** "Show the code": the script for the widget's settings, and links to run or download it. */
  class CodePanel {
    constructor(widget) {
      this.widget = widget;
      this.controller = null;
      this.button = el("button", { type: "button", class: "nl-code-toggle", "aria-expanded": "false",
        title: "the plain-PyTorch code that makes this result", text: "Show the code" });
      this.button.addEventListener("click", () => this.toggle());
      this.playground = el("a", { class: "nl-open-playground", target: "_blank", rel: "noopener",
        text: "Open in the playground" });
      this.notebook = el("a", { class: "nl-download-notebook", download: `normlab-${widget.name}.ipynb`,
        text: "Download notebook" });
      this.box = el("pre", { class: "nl-code-box", tabindex: "0", "aria-label": `code of ${widget.name}` });
      this.note = el("p", { class: "nl-code-note", role: "status" });
      this.panel = el("div", { class: "nl-code-panel", id: `nl-code-${widget.id}`, hidden: true, "data-state": "idle" },
        el("div", { class: "nl-code-links" }, this.playground, this.notebook), this.note, this.box);
      this.button.setAttribute("aria-controls", this.panel.id);
      this.links(widget.state);
    }

    get open() { return !this.panel.hidden; }

    toggle() {
      this.panel.hidden = this.open;
      this.button.setAttribute("aria-expanded", String(this.open));
      this.button.textContent = this.open ? "Hide the code" : "Show the code";
      if (this.open) this.follow(this.widget.state);
      else this.controller?.abort();
    }

    /** The links always point at the settings shown, the code box only while open. */
    links(params) {
      const query = State.query(this.widget.params, params);
      const name = encodeURIComponent(this.widget.name);
      this.playground.href = `/playground?experiment=${name}&${query}`;
      this.notebook.href = `/api/experiments/${name}/notebook?${query}`;
    }

    async follow(state) {
      const params = structuredClone(state);
      this.links(params);
      if (!this.open) return;
      this.controller?.abort(); // the older code is no longer wanted
      const controller = new AbortController();
      this.controller = controller;
      this.panel.dataset.state = "loading";
      this.note.textContent = "loading the code…";
      const query = State.query(this.widget.params, params);
      try {
        const code = await fetchJson(`/api/experiments/${encodeURIComponent(this.widget.name)}/code?${query}`,
          { signal: controller.signal });
        this.show(params, code);
      } catch (err) {
        if (err.name === "AbortError" || controller !== this.controller) return;
        this.panel.dataset.state = "error";
        this.note.textContent = `could not show the code: ${err.message}`;
      }
    }

    show(params, code) {
      // the server highlights with the lesson listings' classes; keep only the code's own markup
      const parsed = document.createElement("template");
      parsed.innerHTML = code.html;
      const inner = parsed.content.querySelector("code, pre");
      this.box.replaceChildren(el("code", { class: "language-python" }));
      this.box.firstChild.innerHTML = inner ? inner.innerHTML : code.html;
      this.note.textContent = "plain PyTorch: this script makes the result above, for these settings";
      this.widget.node.nlCodeParams = params;
      this.widget.node.nlCode = code;
      this.panel.dataset.state = "ready";
    }
  }

  // -- one widget -------------------------------------------------------------------------------

  class Widget {
    constructor(node, spec) {
      this.node = node;
      this.spec = spec;
      this.id = node.dataset.widget;
      this.name = node.dataset.experiment;
      this.params = spec.parameters;
      this.initial = { ...State.defaults(this.params), ...JSON.parse(node.dataset.params || "{}") };
      this.state = { ...this.initial, ...State.read(this.id, this.params) };
      this.seq = 0;
      this.timer = null;
      this.controller = null;
      this.drawing = null; // a frame being drawn (see frame)
      this.waiting = null; // the latest frame that came meanwhile
      this.plot = node.querySelector(".nl-plot");
      this.table = node.querySelector(".nl-table");
      this.status = node.querySelector(".nl-status");
      this.controls = window.NLControls.build(node.querySelector(".nl-controls"), this.params, this.state,
        JSON.parse(node.dataset.show || "null"), this.id, (name, v, typing) => this.change(name, v, typing));
      this.follow(); // an address whose pair disagrees (an old link) is brought in line
      this.code = new CodePanel(this);
      this.buildStatus();
      Object.defineProperty(node, "nlParams", { get: () => structuredClone(this.state), configurable: true });
      node.nlWidget = this;
      node.nlLastParams = null;
      node.nlFrames = 0;
      node.nlLastFrame = null;
      node.nlLastResult = null;
      node.nlError = null;
    }

    buildStatus() {
      this.message = el("span", { class: "nl-msg" });
      const reset = el("button", { type: "button", class: "nl-reset",
        title: "back to this widget's starting settings", text: "Reset" });
      reset.addEventListener("click", () => this.reset());
      this.status.append(this.message, el("span", { class: "nl-actions" }, this.code.button, reset));
      this.errorBox = el("div", { class: "nl-error", role: "alert", hidden: true });
      this.status.after(this.errorBox);
      (this.node.querySelector(".nl-body") || this.table).after(this.code.panel);
    }

    setState(state, text) {
      this.node.dataset.state = state;
      this.message.textContent = text;
    }

    change(name, value, typing) {
      this.state[name] = value;
      this.follow();
      writeAddress();
      this.code.links(this.state);
      this.schedule(typing ? TYPING_MS : DEBOUNCE_MS);
    }

    /** Parameters declared to follow a partner (`follows`: at most the depth, larger than
     * lr_min, ...) moved back in line with it, as the server would otherwise refuse. */
    follow() {
      for (const p of this.params) {
        if (!p.follows) continue;
        const { relation, partner } = p.follows;
        const bound = this.state[partner];
        const step = p.step ?? (p.kind === "int" ? 1 : 0.01);
        const near = (x) => Number(x.toFixed(String(step).split(".")[1]?.length ?? 0));
        let v = this.state[p.name];
        if (relation === "<=" && !(v <= bound)) v = bound;
        else if (relation === "<" && !(v < bound)) v = Math.max(p.min, near(bound - step));
        else if (relation === ">" && !(v > bound)) v = Math.min(p.max, near(bound + step));
        if (v === this.state[p.name]) continue;
        this.state[p.name] = v;
        this.controls.get(p.name)?.set(v);
      }
    }

    reset() {
      this.state = structuredClone(this.initial);
      for (const [name, control] of this.controls) control.set(this.state[name]);
      writeAddress();
      this.code.links(this.state);
      this.schedule(0);
    }

    /** A new setting: the run in progress is cancelled at once (its request or stream is
     * closed, so the server stops it at its next step), and the new one starts once the hand
     * rests. */
    schedule(delay) {
      clearTimeout(this.timer);
      this.seq += 1; // what the older run still sends is not drawn
      this.controller?.abort();
      this.controller = null;
      this.setState("loading", "waiting…");
      this.timer = setTimeout(() => this.run(), delay);
    }

    async run() {
      const seq = ++this.seq;
      this.controller?.abort(); // the older answer is no longer wanted
      const controller = new AbortController();
      this.controller = controller;
      const params = structuredClone(this.state);
      this.code.follow(params);
      // a streamed run's frames say how far it is (step k of n); until the first, no guess
      this.setState("loading", this.spec.trains ? "training…" : "running…");
      const started = performance.now();
      if (this.spec.streams) {
        await this.stream(params, seq, controller);
        return;
      }
      let result;
      try {
        result = await fetchJson(`/api/experiments/${encodeURIComponent(this.name)}`, {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify(params),
          signal: controller.signal,
        });
      } catch (err) {
        if (err.name === "AbortError" || seq !== this.seq) return;
        const message = err.status ? err.message : `the lab server did not answer (${err.message})`;
        this.fail(params, err.parameter ?? null, message);
        return;
      }
      if (seq !== this.seq) return; // superseded while in flight
      await this.draw(params, result, seq, performance.now() - started);
    }

    /** The run as it goes: each frame's figures drawn as they come, then the answer. */
    async stream(params, seq, controller) {
      const started = performance.now();
      const url = `/api/experiments/${encodeURIComponent(this.name)}/stream?${State.query(this.params, params)}`;
      let result = null;
      this.node.nlFrames = 0;
      try {
        await window.NLEvents.read(url, { signal: controller.signal, onEvent: (name, data) => {
          if (seq !== this.seq) return;
          if (name === "frame") this.frame(data);
          else if (name === "result") result = data;
          else if (name === "error") throw Object.assign(new Error(data.message), { parameter: data.parameter, status: 503 });
        } });
      } catch (err) {
        if (err.name === "AbortError" || seq !== this.seq) return;
        this.fail(params, err.parameter ?? null, err.status ? err.message : `the lab server did not answer (${err.message})`);
        return;
      }
      if (seq !== this.seq) return;
      if (result === null) {
        this.fail(params, null, "the run's stream ended before its result");
        return;
      }
      await this.drawing;
      await this.draw(params, result, seq, performance.now() - started);
    }

    /** One frame of a streamed run; a frame that comes while one is drawn waits, and only
     * the latest waiting one is drawn. */
    frame(data) {
      this.node.nlFrames += 1;
      this.node.nlLastFrame = data;
      // "training… step 40 of 80", "running… layer 12 of 64": the run's own steps, done of all
      const doing = this.spec.trains ? "training…" : "running…";
      this.setState("loading", `${doing} ${data.unit} ${data.done} of ${data.total}`);
      this.waiting = data;
      this.drawing ??= (async () => {
        while (this.waiting) {
          const next = this.waiting;
          this.waiting = null;
          try { await window.NLRender.draw(this.plot, next.figures); } catch (_) { /* the answer redraws */ }
        }
        this.drawing = null;
      })();
    }

    async draw(params, result, seq, ms) {
      try {
        await window.NLRender.draw(this.plot, result.figures || []);
      } catch (err) {
        this.fail(params, null, `could not draw this result (${err.message})`);
        return;
      }
      if (seq !== this.seq) return; // a newer run owns the widget now
      window.NLRender.tables(this.table, result.tables || []);
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

    /** Draw the page's own run when the address asks for the same settings, else run them. */
    start(initialResult) {
      const embedded = initialResult && initialResult.params && Array.isArray(initialResult.figures);
      if (embedded && State.sameParams(this.params, this.state, initialResult.params)) {
        this.seq += 1;
        this.draw(structuredClone(this.state), initialResult, this.seq, null);
      } else {
        this.schedule(0);
      }
    }
  }

  // -- start ------------------------------------------------------------------------------------

  function broken(node, text) {
    node.dataset.state = "error";
    node.querySelector(".nl-status").textContent = text;
  }

  /** A lesson's training view (a frame of /train/embed, same origin) as tall as its content. */
  function fitFrames() {
    for (const frame of document.querySelectorAll("iframe.nl-train-frame")) {
      const fit = () => {
        const body = frame.contentDocument?.body;
        if (body) frame.style.height = `${Math.ceil(body.getBoundingClientRect().height) + 2}px`;
      };
      const follow = () => {
        const body = frame.contentDocument?.body;
        if (!body) return;
        new ResizeObserver(fit).observe(body);
        fit();
      };
      frame.addEventListener("load", follow);
      const doc = frame.contentDocument;
      if (doc && doc.readyState === "complete" && doc.location.href !== "about:blank") follow();
    }
  }

  async function start() {
    fitFrames();
    const nodes = [...document.querySelectorAll(".nl-widget")];
    if (!nodes.length) return;
    let specs;
    try {
      specs = await loadRegistry();
    } catch (err) {
      for (const node of nodes) broken(node, `could not load the experiments (${err.message})`);
      return;
    }
    for (const node of nodes) {
      const spec = specs.get(node.dataset.experiment);
      if (!spec) {
        broken(node, `unknown experiment ${node.dataset.experiment}`);
        continue;
      }
      const initial = node.querySelector("script.nl-initial");
      const widget = new Widget(node, spec);
      widgets.push(widget);
      widget.start(initial ? JSON.parse(initial.textContent) : null);
    }
    writeAddress(); // drop values that equal the page's own starting point
  }

  window.normlab = { widgets, state: State, render: window.NLRender, controls: window.NLControls };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
