/* normlab lab: the /train page, a real PyTorch run trained live, one frame at a time.
 *
 * The controls are built from the setup's parameter declarations (embedded by the server,
 * the same as GET /api/train), grouped as data, network and training. The run is one stream
 * (a Link, trainrun.js) and each side of it a Side. Ticking compare makes run B a copy of run
 * A's setup as it is then, with one difference to start from (the spec's contrast: the other
 * normalization); the learner changes what else they want to compare. Both sides show every
 * group, so their boundaries line up; the data group is one setting shown twice (the runs
 * train in lockstep on the same points and seed): a change on either side is both runs'.
 *
 * Play, Pause, Step and Reset are what the learner asked for, kept here (`wanted`): a new run
 * (a changed setting) plays or not as they last asked, not as the old run's last status said,
 * which may not have come yet.
 *
 * The address holds the state in state.js's one table, as a lesson's widgets do: every setting
 * (all of them once any differs from its default), steps=N (the step count: a reload replays to
 * it), speed, compare=1 with the second run's settings as b.NAME, and the classroom flags hide=
 * and lock= (comma-separated names of settings, or speed, compare, share, code), which hide or
 * freeze those controls. The page's own keys are declared as settings are (`keys`), so state.js
 * reads and writes them all; "Share this setup" builds such a link.
 *
 * For tests, the section exposes nlPage and data-compare; the buttons carry data-action.
 */
"use strict";

(() => {
  const { el } = window.NLDom;
  const State = window.NLState;
  const DEBOUNCE_MS = 250; // sliders: wait for the hand to rest
  const TYPING_MS = 400; // number inputs: wait for the typing to stop
  const ADDRESS_MS = 500; // while playing, the step count in the address moves at most this often
  const SPEEDS = [1, 2, 5, 10, 25, 50]; // steps per frame offered (within what the stream allows)
  const FLAGS = ["speed", "compare", "share", "code"]; // what hide= and lock= name besides settings

  const pick = (values, names) => Object.fromEntries(names.map((n) => [n, values[n]]));

  /** The page's own keys in the address, declared as settings are: the stream's steps and speed,
   * compare (written compare=1), and the classroom flags hide= and lock= (lists of names). */
  function keys(spec) {
    const play = (name) => spec.play.find((p) => p.name === name);
    return {
      view: [play("steps"), play("speed"), { ...play("compare"), kind: "flag" }],
      classroom: ["hide", "lock"].map((name) => ({ name, kind: "list", default: [] })),
    };
  }

  /** What the address asks for: both runs' settings, the step count, speed, compare, flags.
   * A step count or speed that is no whole number is the default's. */
  function readAddress(params, { view, classroom }) {
    const fallback = State.defaults(view);
    const start = { ...fallback, ...State.read("", view) };
    const whole = (name) => (Number.isInteger(start[name]) ? start[name] : fallback[name]);
    const asked = { ...State.defaults(classroom), ...State.read("", classroom) };
    return {
      a: { ...State.defaults(params), ...State.read("", params) }, b: State.read("b", params),
      steps: Math.max(0, whole("steps")), speed: whole("speed"), compare: start.compare,
      hide: new Set(asked.hide), lock: new Set(asked.lock),
    };
  }

  /** The second run's start: the first one's settings with the spec's contrast switched
   * (the normalization: none against batch, any other against none), then what the address
   * says (nothing, when compare is ticked). */
  function contrast(a, b, names, { name, values }) {
    const other = a[name] === values[0] ? values[1] : values[0];
    return { ...pick(a, names), [name]: other, ...b };
  }

  class TrainPage {
    constructor(root) {
      this.root = root;
      this.spec = JSON.parse(root.querySelector("script.nl-train-spec").textContent);
      this.params = this.spec.parameters;
      this.shared = this.spec.groups.data;
      this.own = this.params.map((p) => p.name).filter((n) => !this.shared.includes(n));
      this.keys = keys(this.spec);
      const asked = readAddress(this.params, this.keys);
      Object.assign(this, { a: asked.a, speed: asked.speed, compare: asked.compare, hide: asked.hide, lock: asked.lock });
      this.b = contrast(asked.a, asked.b, this.own, this.spec.contrast);
      this.written = 0;
      this.wanted = false; // playing, as the learner last asked (Play; Pause, Step or Reset)
      this.sides = Object.fromEntries(["a", "b"].map((k) =>
        [k, new window.NLTrainRun.Side(this, k, root.querySelector(`.nl-train-side[data-side="${k}"]`))]));
      this.link = new window.NLTrainRun.Link(this);
      this.controls = { a: this.build("a"), b: this.build("b") };
      this.bar();
      this.share = new Share(this, root.querySelector(".nl-share"));
      this.flags();
      root.nlPage = this;
      this.showCompare();
      this.open(asked.steps, false);
      this.write();
      window.addEventListener("pagehide", () => this.link.close());
    }

    /** Each side's full setup: the second one shares the first one's data and seed. */
    values() {
      const out = { a: { ...this.a } };
      if (this.compare) out.b = this.setup("b");
      return out;
    }

    open(steps, play) { this.link.open(this.values(), { steps, play }); }

    /** Each side's full setup as its controls show it: the second one with the first one's
     * data. */
    setup(key) {
      return key === "a" ? this.a : { ...this.b, ...pick(this.a, this.shared) };
    }

    /** The controls of one side, in fieldsets by group: the same groups on both sides, so
     * that what follows them (the boundary) sits at the same height. */
    build(key) {
      const box = this.sides[key].root.querySelector(".nl-train-controls");
      const controls = new Map();
      for (const [group, names] of Object.entries(this.spec.groups)) {
        const grid = el("div", { class: "nl-controls" });
        const title = key === "b" && group === "data" ? `${group} (the same for both runs)` : group;
        box.append(el("fieldset", { class: "nl-train-group", "data-group": group }, el("legend", { text: title }), grid));
        const params = this.params.filter((p) => names.includes(p.name));
        const built = window.NLControls.build(grid, params, this.setup(key), null, `train-${key}`,
          (name, v, typing) => this.change(key, name, v, typing));
        for (const [name, control] of built) controls.set(name, control);
      }
      return controls;
    }

    /** Play, Pause, Step, Reset, the speed and the compare switch. */
    bar() {
      const root = this.root;
      this.buttons = [...root.querySelectorAll(".nl-train-bar button[data-action]")];
      for (const button of this.buttons) {
        button.addEventListener("click", () => {
          this.wanted = button.dataset.action === "play";
          this.link.control({ action: button.dataset.action });
        });
      }
      this.speedBox = root.querySelector("select.nl-speed");
      const top = this.spec.play.find((p) => p.name === "speed").max;
      for (const v of SPEEDS.filter((s) => s <= top)) this.speedBox.append(el("option", { value: v, text: `${v} step${v > 1 ? "s" : ""} per frame` }));
      this.speedBox.value = String(this.speed);
      this.speedBox.addEventListener("change", () => this.setSpeed(Number(this.speedBox.value)));
      this.compareBox = root.querySelector("input.nl-compare");
      this.compareBox.checked = this.compare;
      this.compareBox.addEventListener("change", () => this.toggleCompare(this.compareBox.checked));
      this.counter = root.querySelector(".nl-step-count");
    }

    /** hide= and lock= from the address: those controls out of sight, or frozen. */
    flags() {
      const nodes = (name) => {
        const found = Object.values(this.controls).map((c) => c.get(name)?.node).filter(Boolean);
        return found.length ? found : [...this.root.querySelectorAll(`[data-flag="${name}"]`)];
      };
      for (const name of this.hide) for (const node of nodes(name)) node.hidden = true;
      for (const name of this.lock) {
        for (const node of nodes(name)) {
          node.classList.add("nl-locked");
          node.title = "fixed by this link";
          for (const input of node.querySelectorAll("input, select, button")) input.disabled = true;
        }
      }
    }

    /** A setting changed: a new run (both sides from step 0), once the hand rests, playing
     * if the learner last asked it to. A data setting is both sides': the other side's
     * control shows it too. */
    change(key, name, value, typing) {
      if (this.shared.includes(name)) {
        this.a[name] = value;
        this.controls[key === "a" ? "b" : "a"].get(name).set(value);
      } else {
        this[key][name] = value;
      }
      clearTimeout(this.timer);
      this.timer = setTimeout(() => this.open(0, this.wanted), typing ? TYPING_MS : DEBOUNCE_MS);
      this.write();
    }

    setSpeed(speed) {
      this.speed = speed;
      this.link.control({ speed });
      this.write();
    }

    /** Compare on: run B is run A's setup as it is now with the contrast switched, and both
     * sides run anew at the first one's step count (replayed); off: the first side alone,
     * from there. Either way it plays if the learner last asked it to. */
    toggleCompare(on) {
      clearTimeout(this.timer); // a change still waiting is in what opens now
      this.compare = on;
      if (on) {
        this.b = contrast(this.a, {}, this.own, this.spec.contrast);
        const b = this.setup("b");
        for (const [name, control] of this.controls.b) control.set(b[name]);
      }
      this.showCompare();
      this.open(this.sides.a.step, this.wanted);
      this.write();
    }

    showCompare() {
      this.root.dataset.compare = String(this.compare);
      this.sides.b.root.hidden = !this.compare;
      this.sides.a.root.querySelector(".nl-train-side-title").textContent = this.compare ? "Run A" : "This run";
    }

    /** The stream was refused: the control it names marked, its message shown. */
    refused(err, sides) {
      const parameter = err.parameter ?? "";
      const key = parameter.startsWith("b.") ? "b" : "a";
      const name = parameter.replace(/^b\./, "");
      for (const k of ["a", "b"]) for (const [n, control] of this.controls[k]) control.mark(k === key && n === name);
      for (const side of sides) side.fail(err, "not running");
    }

    /** The run sent something: the counter, the buttons and (now and then) the address. */
    changed() {
      const [a, b] = [this.sides.a, this.sides.b];
      this.counter.textContent = String(a.step);
      this.root.dataset.playing = String(a.playing);
      const ready = Boolean(this.link.run) && a.frames > 0;
      for (const button of this.buttons) {
        const action = button.dataset.action;
        button.disabled = !ready || (action === "play" && a.playing) || (action === "pause" && !a.playing);
      }
      if (ready) for (const c of this.controls.a.values()) c.mark(false);
      if (ready && this.compare) for (const c of this.controls.b.values()) c.mark(false);
      for (const side of [a, b]) side.code.links();
      clearTimeout(this.addressTimer);
      const wait = a.playing ? Math.max(0, ADDRESS_MS - (performance.now() - this.written)) : 0;
      this.addressTimer = setTimeout(() => this.write(), wait);
    }

    /** This view as state.js's table, in the address's order: the settings (all of them once
     * any differs from its default), steps, speed and compare (each where it differs), the
     * second run's own settings (b.NAME, while compare is on) and `flags` ({hide, lock}: Sets,
     * the page's or the Share panel's). */
    entries(flags) {
      const { view, classroom } = this.keys;
      const b = this.params.filter((p) => this.own.includes(p.name));
      const now = { steps: this.sides.a.step, speed: this.speed, compare: this.compare };
      const chosen = { hide: [...flags.hide], lock: [...flags.lock] };
      return [
        { id: "", params: this.params, state: this.a, initial: State.defaults(this.params) },
        { id: "", params: view, state: now, initial: State.defaults(view), each: true },
        { id: "b", params: b, state: this.compare ? this.b : null, initial: null },
        { id: "", params: classroom, state: chosen, initial: State.defaults(classroom), each: true },
      ];
    }

    write() {
      this.written = performance.now();
      State.write(this.entries({ hide: this.hide, lock: this.lock }));
      this.share.update();
    }
  }

  // -- share this setup -------------------------------------------------------------------------

  /** A link to this view for a class: every setting and the step count, chosen controls hidden or locked. */
  class Share {
    constructor(page, root) {
      Object.assign(this, { page, root, hide: new Set(page.hide), lock: new Set(page.lock) });
      this.output = root.querySelector("input.nl-share-link");
      const rows = root.querySelector(".nl-share-flags tbody");
      for (const name of [...page.params.map((p) => p.name), ...FLAGS]) rows.append(this.row(name));
      root.querySelector("button.nl-share-copy").addEventListener("click", () => this.copy());
    }

    row(name) {
      const box = (kind) => {
        const input = el("input", { type: "checkbox", "data-share": kind, "data-name": name, "aria-label": `${kind} ${name}` });
        input.checked = this[kind].has(name);
        input.addEventListener("change", () => { this[kind][input.checked ? "add" : "delete"](name); this.update(); });
        return el("td", {}, input);
      };
      return el("tr", {}, el("th", { scope: "row", text: name }), box("hide"), box("lock"));
    }

    update() {
      const path = this.page.root.dataset.page ?? location.pathname; // the full page, also from a lesson's frame
      const search = State.search(this.page.entries({ hide: this.hide, lock: this.lock }));
      this.output.value = `${location.origin}${path}${search}`;
    }

    async copy() {
      this.output.select();
      const note = this.root.querySelector(".nl-share-note");
      try {
        await navigator.clipboard.writeText(this.output.value);
        note.textContent = "copied";
      } catch (_) {
        note.textContent = "selected: press Ctrl+C to copy";
      }
    }
  }

  function start() {
    const root = document.querySelector(".nl-train");
    if (root) new TrainPage(root);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
