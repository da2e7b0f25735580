/* normlab lab: the /sweeps/ID page, one sweep's heat map and tables, followed while it runs,
 * and the /sweeps page's form that starts a sweep.
 *
 * The server embeds the sweep's state in the page (GET /api/sweeps/ID answers the same). A
 * state carries its figures described as data and its tables, drawn by the one generic
 * renderer (render.js), and the sweep's axes, from which this file builds the controls: the
 * heat map's x and y axes, the value it shows, and for every other axis "mean" or one of its
 * values (fix). A change asks for the state of that view and writes it in the page's URL, so
 * that every view can be shared. The store is filled by `normlab sweep` in another process:
 * while the sweep is incomplete the page asks again every data-poll milliseconds.
 *
 * For tests, the section exposes data-done and data-complete (of the state drawn last),
 * data-view (its x, y and value, as "x|y|value") and data-busy ("true" while a request runs).
 *
 * The form sends its grid as the lines it holds, NAME=SPEC texts as on the command line (the
 * server parses them as `normlab sweep --grid` does): POST /api/sweeps, then the sweep's page,
 * or the server's one-line refusal beside the form.
 */
"use strict";

(() => {
  const { el } = window.NLDom;

  function select(name, label, help, options, chosen) {
    const box = el("select", { name, "aria-label": label });
    for (const [value, text] of options) box.append(el("option", { value, text, selected: value === chosen }));
    return el("label", { class: "nl-control" },
      el("span", { class: "nl-label" }, el("span", { class: "nl-name", text: label })),
      box, el("span", { class: "nl-help", text: help }));
  }

  /** The controls of a state: x, y, value, and fix for each axis not on the map. */
  function controls(state) {
    const { x, y, value, fixed } = state.view;
    const names = state.axes.map((a) => [a.name, a.name]);
    const out = [];
    if (x !== null) out.push(select("x", "x axis", "the heat map's columns", names, x));
    if (y !== null) out.push(select("y", "y axis", "the heat map's rows", names, y));
    out.push(select("value", "value", "what each cell shows", state.values.map((v) => [v, v]), value));
    for (const a of state.axes) {
      if (a.name === x || a.name === y || (value === "sensitivity" && a.name === state.lr_axis)) continue;
      const options = [["", "mean over all"], ...a.values.map((v) => [v, v])];
      out.push(select(`fix:${a.name}`, a.name, a.help, options, fixed[a.name] ?? ""));
    }
    return out;
  }

  /** The query of the view the controls show (the one that changed: `changed`). */
  function query(root, changed) {
    const q = new URLSearchParams();
    const pick = (name) => root.querySelector(`select[name="${name}"]`)?.value;
    const value = pick("value");
    q.set("value", value);
    if (changed === "value") return q; // the server chooses axes that suit the new value
    let x = pick("x");
    let y = pick("y");
    if (x && x === y && changed === "x") y = root.dataset.x; // the two axes trade places
    if (x && x === y && changed === "y") x = root.dataset.y;
    if (x) q.set("x", x);
    if (y && y !== x) q.set("y", y);
    for (const s of root.querySelectorAll('select[name^="fix:"]')) {
      const axis = s.name.slice(4);
      if (s.value && axis !== x && axis !== y) q.append("fix", `${axis}=${s.value}`);
    }
    return q;
  }

  async function draw(root, state) {
    const key = JSON.stringify([state.view, state.axes, state.values]);
    if (root.dataset.key !== key) {
      root.dataset.key = key;
      root.querySelector(".nl-sweep-controls").replaceChildren(...controls(state));
    }
    const raised = state.errors ? `, ${state.errors} raised` : "";
    root.querySelector(".nl-sweep-progress").textContent = `${state.done} of ${state.total} cells stored${raised}`;
    root.querySelector(".nl-sweep-link").textContent = state.complete ? "· complete" : "· running: redrawn as cells arrive";
    await window.NLRender.draw(root.querySelector(".nl-sweep-plot"), state.figures);
    window.NLRender.tables(root.querySelector(".nl-sweep-table"), state.tables);
    const { x, y, value } = state.view;
    Object.assign(root.dataset, { done: state.done, complete: state.complete, view: `${x}|${y}|${value}`, x: x ?? "", y: y ?? "" });
  }

  function follow(root) {
    let asked = 0;
    let timer = null;
    const problem = root.querySelector(".nl-sweep-error");
    async function refresh(q) {
      const mine = ++asked;
      clearTimeout(timer);
      root.dataset.busy = "true";
      try {
        const answer = await fetch(`/api/sweeps/${root.dataset.id}?${q}`, { headers: { Accept: "application/json" } });
        const body = await answer.json();
        if (mine !== asked) return;
        if (!answer.ok) {
          problem.hidden = false;
          problem.replaceChildren(el("p", { text: body.detail?.message ?? `the lab answered ${answer.status}` }));
          return;
        }
        problem.hidden = true;
        await draw(root, body);
        history.replaceState(null, "", `${location.pathname}?${q}`);
        if (!body.complete) timer = setTimeout(() => refresh(q), Number(root.dataset.poll));
      } catch (err) {
        if (mine === asked) timer = setTimeout(() => refresh(q), Number(root.dataset.poll));
      } finally {
        if (mine === asked) root.dataset.busy = "false";
      }
    }
    root.querySelector(".nl-sweep-controls").addEventListener("change", (event) => {
      refresh(query(root, event.target.name));
    });
    return refresh;
  }

  function startForm(form) {
    const problem = form.querySelector(".nl-sweep-form-error");
    const button = form.querySelector('button[type="submit"]');
    const say = (text) => {
      problem.hidden = false;
      problem.replaceChildren(el("p", { text }));
    };
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const grid = form.elements.grid.value.split("\n").map((line) => line.trim()).filter(Boolean);
      const seeds = form.elements.seeds.value.trim();
      const body = { experiment: form.elements.experiment.value, grid, seeds: seeds ? Number(seeds) : null };
      button.disabled = true;
      form.dataset.busy = "true";
      try {
        const answer = await fetch("/api/sweeps", {
          method: "POST",
          headers: { "Content-Type": "application/json", Accept: "application/json" },
          body: JSON.stringify(body),
        });
        const reply = await answer.json();
        if (answer.ok) {
          location.assign(reply.url);
          return;
        }
        say(reply.detail?.message ?? `the lab answered ${answer.status}`);
      } catch (err) {
        say(`the lab did not answer: ${err}`);
      } finally {
        button.disabled = false;
        form.dataset.busy = "false";
      }
    });
  }

  async function start() {
    const form = document.querySelector(".nl-sweep-form");
    if (form) startForm(form);
    const root = document.querySelector(".nl-sweep");
    if (!root) return;
    const refresh = follow(root);
    const state = JSON.parse(root.querySelector("script.nl-initial").textContent);
    await draw(root, state);
    if (!state.complete) refresh(new URLSearchParams(location.search));
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
