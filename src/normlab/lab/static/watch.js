/* normlab lab: the /watch page, a normlab.watch log followed live as a training run writes it.
 *
 * The server embeds the log's state in the page, then sends it again as a Server-Sent Event
 * (GET /api/watch/stream, event "state") whenever the log has grown. A state carries its
 * figures described as data and its tables, drawn by the one generic renderer (render.js);
 * this file only places the summary, the skipped lines and the list of label changes. The
 * browser's EventSource reconnects by itself when the stream drops; a stream the lab refused
 * (too many pages follow the log) is asked for again a few seconds later.
 *
 * For tests, the section exposes data-state (the log's status), data-records and data-version
 * (of the state drawn last) and data-link ("live", "reconnecting" or "refused").
 */
"use strict";

(() => {
  const { el } = window.NLDom;
  const REFUSED_RETRY_MS = 5000;

  function list(node, items, empty) {
    const shown = items.length ? items.map((text) => el("li", { text })) : [el("li", { class: "nl-none", text: empty })];
    node.replaceChildren(...shown);
  }

  function skipped(node, state) {
    node.hidden = !state.errors.length;
    node.replaceChildren(
      el("p", { text: `Skipped ${state.skipped} line(s) that are not watch records; the other lines are shown.` }),
      el("ul", {}, ...state.errors.map((text) => el("li", { text }))),
    );
  }

  async function draw(root, state) {
    root.querySelector(".nl-watch-summary").textContent = state.summary;
    skipped(root.querySelector(".nl-watch-errors"), state);
    list(root.querySelector(".nl-watch-events"), state.events, "none so far");
    await window.NLRender.draw(root.querySelector(".nl-watch-plot"), state.figures);
    window.NLRender.tables(root.querySelector(".nl-watch-table"), state.tables);
    Object.assign(root.dataset, { state: state.status, records: state.records, version: state.version });
  }

  /** A function that draws the states it is given one at a time, skipping to the newest. */
  function painter(root) {
    let next = null;
    let busy = false;
    let asked = null; // the version drawn or about to be
    return async (state) => {
      if (state.version === asked) return; // the stream's first event repeats the page's state
      asked = state.version;
      next = state;
      if (busy) return;
      busy = true;
      try {
        while (next) {
          const s = next;
          next = null;
          await draw(root, s);
        }
      } finally {
        busy = false;
      }
    };
  }

  function follow(root, show) {
    const link = (how, text) => {
      root.dataset.link = how;
      root.querySelector(".nl-watch-link").textContent = text;
    };
    const source = new EventSource(root.dataset.stream);
    source.addEventListener("open", () => link("live", "· live: redrawn as the log grows"));
    source.addEventListener("state", (event) => show(JSON.parse(event.data)));
    source.addEventListener("error", () => {
      if (source.readyState !== EventSource.CLOSED) {
        link("reconnecting", "· the lab does not answer: reconnecting…");
        return;
      }
      link("refused", `· not live: the lab refused the stream; asking again in ${REFUSED_RETRY_MS / 1000} s`);
      setTimeout(() => follow(root, show), REFUSED_RETRY_MS);
    });
  }

  function start() {
    const root = document.querySelector(".nl-watch");
    if (!root) return;
    const show = painter(root);
    const initial = root.querySelector("script.nl-initial");
    if (initial) show(JSON.parse(initial.textContent));
    follow(root, show);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
