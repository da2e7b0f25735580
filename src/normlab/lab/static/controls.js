/* normlab lab: a widget's controls, built from the registry's parameter declarations.
 *
 * One control per declared parameter, chosen by its kind: a slider (logarithmic for wide
 * ranges) or a number box for int and float, a checkbox for bool, a select for choice, a list
 * of sliders with add/remove buttons for float_list. Each calls change(value, typing) on user
 * input and offers set(value) and mark(invalid). Every input carries data-param (and
 * data-index for list entries), which the browser tests use.
 */
"use strict";

(() => {
  const { el } = window.NLDom;
  const isNum = (x) => typeof x === "number" && Number.isFinite(x);
  let uid = 0;

  function decimals(step) {
    const text = String(step);
    return text.includes("e-") ? Number(text.split("e-")[1]) : (text.split(".")[1] || "").length;
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
        log: true, min: Math.log10(lo), max: Math.log10(hi), step: 0.001,
        toPos: (v) => Math.log10(v),
        fromPos: (pos) => clamp(round(Number((10 ** pos).toPrecision(3)))),
      };
    }
    const step = p.step || (p.kind === "int" ? 1 : (hi - lo) / 100);
    return { log: false, min: lo, max: hi, step, toPos: (v) => v, fromPos: (pos) => clamp(round(pos)) };
  }

  /** A number box where a slider would not help: no bounds, a seed, or too many steps. */
  function usesNumberInput(p) {
    if (p.min === undefined || p.max === undefined) return true;
    if (p.name === "seed" || p.name.endsWith("_seed")) return true;
    const s = scaleOf(p);
    return !s.log && (s.max - s.min) / s.step > 5000;
  }

  function numberBox(p, id, change) {
    const input = el("input", {
      type: "number", id, min: p.min, max: p.max,
      step: p.kind === "int" ? 1 : p.step || "any", "data-param": p.name,
    });
    input.addEventListener("input", () => {
      if (input.value.trim() === "") return;
      change(Number(input.value), true);
    });
    return { input, output: null, set: (v) => { input.value = String(v); } };
  }

  function slider(p, id, change) {
    const s = scaleOf(p);
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

  /** One slider (or number box) for a number: {input, output, set}. */
  const numberInput = (p, id, change) => (usesNumberInput(p) ? numberBox : slider)(p, id, change);

  function label(p, forId, output) {
    const head = el("span", { class: "nl-label" },
      el("label", { for: forId, class: "nl-name", text: p.name }));
    if (output) head.append(output);
    return head;
  }

  function listRow(p, id, values, i, redraw, emit) {
    const item = numberInput(p, `${id}-${i}`, (x) => { values[i] = x; emit(); });
    item.input.setAttribute("data-index", i);
    item.input.setAttribute("aria-label", `${p.name} entry ${i + 1}`);
    item.set(values[i]);
    const row = el("div", { class: "nl-list-row" }, item.input);
    if (item.output) row.append(item.output);
    if (values.length > 1) {
      const remove = el("button", { type: "button", class: "nl-remove", title: "remove this entry", text: "−" });
      remove.addEventListener("click", () => { values.splice(i, 1); redraw(); emit(); });
      row.append(remove);
    }
    return row;
  }

  /** A float_list: one slider per entry, "+ add" up to max_len, "−" down to one entry. */
  function listControl(p, id, wrap, help, change) {
    const rows = el("div", { class: "nl-list" });
    const buttons = el("div", { class: "nl-list-buttons" });
    let values = [];
    const emit = () => change(values.slice(), false);
    const draw = () => {
      rows.replaceChildren(...values.map((_, i) => listRow(p, id, values, i, draw, emit)));
      buttons.replaceChildren();
      if (values.length >= (p.max_len || 1)) return;
      const add = el("button", { type: "button", class: "nl-add", text: `+ add a value (up to ${p.max_len})` });
      add.addEventListener("click", () => {
        const last = values[values.length - 1];
        values.push(isNum(last) ? last : p.default[0]);
        draw();
        emit();
      });
      buttons.append(add);
    };
    wrap.append(el("span", { class: "nl-label" }, el("span", { class: "nl-name", id, text: p.name })),
      rows, buttons, help);
    return (v) => { values = Array.isArray(v) ? v.slice() : p.default.slice(); draw(); };
  }

  /** The control for one declared parameter: {node, set(value), mark(invalid), param}. */
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
      set = listControl(p, id, wrap, help, change);
    } else {
      const item = numberInput(p, id, change);
      wrap.append(label(p, id, item.output), item.input, help);
      set = item.set;
    }
    const mark = (bad) => wrap.classList.toggle("nl-invalid", bad);
    return { node: wrap, set, mark, param: p };
  }

  /**
   * Every control of a widget into `box`: those named in `show` (and the seed) in sight, the
   * rest folded under "More settings". Returns Map(name -> control).
   */
  function build(box, params, state, show, widgetId, change) {
    const shown = new Set(show || params.map((p) => p.name));
    shown.add("seed"); // the seed is part of the state: always in sight
    const more = el("div", { class: "nl-more" });
    const controls = new Map();
    for (const p of params) {
      const control = makeControl(p, widgetId, (v, typing) => change(p.name, v, typing));
      control.set(state[p.name]);
      controls.set(p.name, control);
      (shown.has(p.name) ? box : more).append(control.node);
    }
    if (more.childElementCount) {
      box.append(el("details", { class: "nl-details" },
        el("summary", { text: `More settings (${more.childElementCount})` }), more));
    }
    return controls;
  }

  window.NLControls = { build, makeControl, scaleOf };
})();
