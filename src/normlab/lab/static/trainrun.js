/* normlab lab: the live run of the /train page, and what each of its sides shows.
 *
 * The page's run is one event stream, GET /api/train/stream?<setup>&steps&speed&play (with
 * compare=true and b.NAME for a second side, trained in lockstep on the same data): a Link
 * opens it and hands each side its part of every event. A Side draws what it is handed:
 * each frame's figures, described by the server (normlab.trainview.figures) and drawn by
 * render.js, and now and then the layers' figures and table (its "stats"); it builds none.
 * Play, Pause, Step and Reset are POSTed to the run's control URL and taken at its next step.
 * A new setting opens a new stream in place of the old one (replaces=RUN), so the server ends
 * the old run at once; leaving the page closes the stream, which ends the run.
 *
 * For tests, each side's element (.nl-train-side) exposes data-state (loading, ready, error,
 * ended), data-run, data-step, data-frames, data-playing, data-drawn and data-stats-drawn
 * (the step whose boundary, and whose layers, were drawn last) and nlSide (its last frame,
 * data, last error).
 */
"use strict";

(() => {
  const { el } = window.NLDom;
  const State = window.NLState;

  async function postJson(url, body) {
    const response = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body) });
    if (!response.ok) throw await window.NLEvents.refusal(response);
    return response.json();
  }

  /** A function that draws with `draw` once per animation frame, skipping to the newest. */
  function painter(draw) {
    let busy = false;
    let again = false;
    return async () => {
      if (busy) { again = true; return; }
      busy = true;
      try {
        do {
          again = false;
          await new Promise((resolve) => requestAnimationFrame(resolve));
          await draw();
        } while (again);
      } finally {
        busy = false;
      }
    };
  }

  // -- what one side shows ----------------------------------------------------------------------

  class Side {
    constructor(page, key, root) {
      Object.assign(this, { page, key, root, data: null, error: null, values: null });
      Object.assign(this, { step: 0, frames: 0, playing: false, frame: null, layers: null });
      this.plot = root.querySelector(".nl-train-plot");
      this.stats = root.querySelector(".nl-train-stats");
      this.table = root.querySelector(".nl-table");
      this.message = root.querySelector(".nl-train-msg");
      this.errorBox = root.querySelector(".nl-error");
      this.paint = painter(() => this.draw());
      this.code = new Code(this, root.querySelector(".nl-code-panel"), root.querySelector(".nl-code-toggle"));
      root.nlSide = this;
    }

    setState(state, text) {
      this.root.dataset.state = state;
      this.message.textContent = text;
    }

    sync() {
      Object.assign(this.root.dataset, { step: this.step, frames: this.frames, playing: this.playing });
    }

    /** A new run of `values` is starting: nothing of the old one stays. */
    begin(values, text) {
      Object.assign(this, { values: structuredClone(values), data: null, step: 0, frames: 0, playing: false,
        frame: null, layers: null });
      delete this.root.dataset.run;
      this.sync();
      this.clearError();
      this.setState("loading", text);
      this.code.follow();
    }

    /** The part of an event for this side (`part` is null for the events the sides share). */
    on(name, data, part) {
      if (name === "run") {
        this.data = part;
        this.root.dataset.run = data.run;
      } else if (name === "replay") {
        this.setState("loading", `replaying: step ${data.step} of ${data.of}`);
      } else if (name === "status") {
        Object.assign(this, { playing: data.playing, step: data.step });
        if (this.frame) this.setState("ready", this.playing ? "training…" : "paused");
      } else if (name === "stats") { // the layers' figures catching up with a paused run
        this.layers = part;
        this.paint();
      } else if (name === "frame") {
        this.frame = part;
        if (part.stats) this.layers = part.stats;
        this.step = part.step;
        this.frames += 1;
        this.setState("ready", this.playing ? "training…" : "paused");
        this.paint();
      }
      this.sync();
    }

    /** The boundary and the loss every time; the layers' figures and table when new ones
     * came (the server sends them at most once a second while the run plays). */
    async draw() {
      const frame = this.frame;
      if (!frame) return;
      await window.NLRender.draw(this.plot, frame.figures);
      this.root.dataset.drawn = frame.step;
      const layers = this.layers;
      if (!layers) return;
      this.layers = null;
      await window.NLRender.draw(this.stats, layers.figures);
      window.NLRender.tables(this.table, layers.tables);
      this.root.dataset.statsDrawn = layers.step;
    }

    fail(err, text) {
      this.error = { parameter: err.parameter ?? null, message: err.message, status: err.status ?? null };
      this.errorBox.textContent = err.status ? err.message : `the lab server did not answer (${err.message})`;
      this.errorBox.hidden = false;
      this.setState("error", text);
    }

    clearError() {
      this.error = null;
      this.errorBox.hidden = true;
      this.errorBox.textContent = "";
    }
  }

  // -- the page's one stream --------------------------------------------------------------------

  class Link {
    constructor(page) {
      Object.assign(this, { page, run: null, controller: null });
    }

    /** A new run of each side's values ({a, b?}), `steps` steps in (replayed), playing or not. */
    async open(values, { steps = 0, play = false } = {}) {
      const old = this.run?.run;
      this.close();
      const controller = new AbortController();
      this.controller = controller;
      const sides = Object.keys(values).map((k) => this.page.sides[k]);
      for (const side of sides) side.begin(values[side.key], steps ? `replaying ${steps} steps…` : "starting a run…");
      const params = this.page.params;
      const query = [State.query(params, values.a), `steps=${steps}`, `speed=${this.page.speed}`, `play=${play}`];
      if (values.b) {
        query.push("compare=true");
        for (const name of this.page.own) {
          const p = params.find((q) => q.name === name);
          query.push(`b.${State.encode(name)}=${State.encode(State.formatValue(p, values.b[name]))}`);
        }
      }
      if (old) query.push(`replaces=${encodeURIComponent(old)}`);
      const onEvent = (name, data) => { if (controller === this.controller) this.on(name, data, sides); };
      try {
        await window.NLEvents.read(`/api/train/stream?${query.join("&")}`, { signal: controller.signal, onEvent });
        if (controller !== this.controller) return;
        for (const side of sides) side.setState("ended", "this run has ended (the lab stopped it): change a setting to start again");
      } catch (err) {
        if (err.name === "AbortError" || controller !== this.controller) return;
        this.page.refused(err, sides);
      }
      this.page.changed();
    }

    close() {
      this.controller?.abort();
      this.controller = null;
      this.run = null;
    }

    on(name, data, sides) {
      if (name === "run") this.run = data;
      const keyed = ["run", "frame", "stats"].includes(name);
      for (const side of sides) {
        const part = name === "run" ? data.data[side.key] : keyed ? data[side.key] : null;
        side.on(name, data, part);
      }
      this.page.changed();
    }

    async control(body) {
      if (!this.run) return;
      try {
        await postJson(this.run.control, body);
      } catch (err) {
        this.page.sides.a.message.textContent = `not sent: ${err.message}`;
      }
    }
  }

  // -- the code of a side -----------------------------------------------------------------------

  /** "Show the code": the plain PyTorch script that trains this side's setup to its step count. */
  class Code {
    constructor(side, panel, button) {
      Object.assign(this, { side, panel, button, controller: null });
      this.box = panel.querySelector(".nl-code-box");
      this.note = panel.querySelector(".nl-code-note");
      this.link = panel.querySelector(".nl-open-playground");
      button.addEventListener("click", () => this.toggle());
    }

    get open() { return !this.panel.hidden; }

    query() {
      const steps = this.side.step || this.side.page.spec.code_steps.default;
      return `${State.query(this.side.page.params, this.side.values)}&steps=${steps}`;
    }

    toggle() {
      this.panel.hidden = this.open;
      this.button.setAttribute("aria-expanded", String(this.open));
      this.button.textContent = this.open ? "Hide the code" : "Show the code";
      if (this.open) this.follow();
    }

    /** The playground link points at the setup and the step count shown. */
    links() {
      if (this.side.values) this.link.href = `/playground/train?${this.query()}`;
    }

    /** The links, and the code in the box while it is open. */
    async follow() {
      this.links();
      if (!this.open || !this.side.values) return;
      const query = this.query();
      this.controller?.abort();
      const controller = new AbortController();
      this.controller = controller;
      this.panel.dataset.state = "loading";
      try {
        const response = await fetch(`/api/train/code?${query}`, { signal: controller.signal });
        if (!response.ok) throw await window.NLEvents.refusal(response);
        const code = await response.json();
        this.box.replaceChildren(el("code", { class: "language-python" }));
        this.box.firstChild.innerHTML = code.html; // highlighted and escaped by the server
        this.note.textContent = `plain PyTorch: this script trains this setup ${code.steps} steps and prints every step's losses`;
        this.side.root.nlCode = code;
        this.panel.dataset.state = "ready";
      } catch (err) {
        if (err.name === "AbortError") return;
        this.panel.dataset.state = "error";
        this.note.textContent = `could not show the code: ${err.message}`;
      }
    }
  }

  window.NLTrainRun = { Side, Link, postJson };
})();
