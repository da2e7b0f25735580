// normlab lab: every code listing of a lesson becomes a playground.
//
// The listing's text moves into an editor (editor.js) with Run and Reset. Run posts the code to
// /api/run, which executes it in a contained process, and shows what came back: stdout, stderr
// with the traceback, the matplotlib figures, and the run's status and time. The learner's last
// code per listing is saved to the lab's progress store (PUT /api/listings/{id}) and comes back
// on the next visit; Reset brings back the lesson's own code. The id is the listing's own
// (data-listing, given in the lesson template), never its place on the page, so a listing
// added above another leaves the other's saved edits where they were.
"use strict";

(function () {
  const SAVE_DELAY_MS = 800;
  const STATUS_TEXT = {
    ok: "finished",
    error: "raised an exception",
    timeout: "stopped: it ran past the time limit",
    killed: "stopped: it went past a resource limit",
  };

  const { el } = window.NLDom;

  async function postJson(method, url, body, options = {}) {
    const res = await fetch(url, {
      method,
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
      ...options,
    });
    let data = null;
    try { data = await res.json(); } catch (_) { data = null; }
    if (!res.ok) {
      const detail = data && data.detail;
      const msg = detail && detail.message ? detail.message : `HTTP ${res.status}`;
      throw new Error(msg);
    }
    return data;
  }

  function showResult(box, r) {
    box.replaceChildren();
    box.hidden = false;
    box.dataset.status = r.status;
    const head = el("p", { class: `nl-run-head nl-run-${r.status}` });
    head.append(
      "your run: ", el("strong", { text: r.status }),
      ` · ${STATUS_TEXT[r.status] || ""} · ${Number(r.duration_s).toFixed(2)} s`,
    );
    box.append(head);
    const streams = [];
    if (r.stdout) streams.push(outputBox("nl-run-stdout", "standard output", r.stdout));
    if (r.stderr) streams.push(outputBox("nl-run-stderr", "standard error", r.stderr));
    box.append(...streams);
    if (!r.stdout && !r.stderr && !(r.figures || []).length) {
      box.append(el("p", { class: "nl-note", text: "The code printed nothing." }));
    }
    (r.figures || []).forEach((png, i) => {
      box.append(el("img", {
        class: "nl-run-figure", src: `data:image/png;base64,${png}`,
        alt: `figure ${i + 1} made by the code`,
      }));
    });
    // A long output opens at its end, as a terminal's does: the last lines (the result, the
    // traceback) are usually the ones that matter. The box scrolls up to the head.
    streams.forEach((pre) => { pre.scrollTop = pre.scrollHeight; });
  }

  // One stream of a run, in a box of bounded height with its own scroll (lab.css), so that a
  // flood of prints cannot stretch the page; focusable, so the keyboard can scroll it too.
  function outputBox(cls, label, text) {
    return el("pre", { class: cls, "aria-label": label, tabindex: "0", text });
  }

  function makePlayground(listing, id) {
    const pre = listing.querySelector("pre.nl-src");
    const original = pre.textContent.replace(/\n$/, "");
    const host = el("div", { class: "nl-src nl-src-edit" });
    pre.replaceWith(host);
    let saveTimer = null;
    let sent = null; // the code last sent to be saved (or restored from the lab)
    const note = el("span", { class: "nl-saved-note", role: "status" });
    // Saves go one after another (the lab writes each in a thread of its own, so two at once
    // could land in either order): the last edit is the one kept. The note says "saved" only
    // while the editor holds what the lab has acknowledged; an edit clears it.
    let saving = Promise.resolve();
    const save = (options) => {
      clearTimeout(saveTimer);
      saveTimer = null;
      const code = editor.value;
      if (code === sent) return saving;
      sent = code;
      const put = () => postJson("PUT", `/api/listings/${encodeURIComponent(id)}`, { code }, options);
      // leaving the page: send at once (keepalive), not after the saves still under way
      saving = (options && options.keepalive ? put() : saving.then(put))
        .then(() => {
          if (editor.value === code) note.textContent = code === original ? "" : "your edits are saved";
        })
        .catch((err) => { sent = null; note.textContent = `not saved: ${err.message}`; });
      return saving;
    };
    const scheduleSave = () => {
      note.textContent = "";
      clearTimeout(saveTimer);
      saveTimer = setTimeout(save, SAVE_DELAY_MS);
    };
    // leaving the page within the save delay: send the last edit anyway (keepalive outlives it)
    window.addEventListener("pagehide", () => { if (saveTimer !== null) save({ keepalive: true }); });
    const editor = window.NLEditor.create(host, original, {
      label: `Python code of listing ${id}, editable`,
      onChange: scheduleSave,
      onRun: () => run(),
    });
    const runBtn = el("button", { type: "button", class: "nl-run-btn", text: "Run" });
    const resetBtn = el("button", { type: "button", class: "nl-reset-btn", text: "Reset" });
    const bar = el("div", { class: "nl-run-bar" }, runBtn, resetBtn,
      el("span", { class: "nl-hint", text: "Ctrl+Enter runs · Esc leaves the editor" }), note);
    const result = el("div", { class: "nl-run-result", "aria-live": "polite" });
    result.hidden = true;
    host.after(bar);
    listing.append(result);

    let seq = 0;
    async function run() {
      const mine = ++seq;
      runBtn.disabled = true;
      listing.dataset.running = "true";
      result.hidden = false;
      result.replaceChildren(el("p", { class: "nl-run-head", text: "Running…" }));
      save();
      try {
        const r = await postJson("POST", "/api/run", { code: editor.value });
        if (mine === seq) showResult(result, r);
      } catch (err) {
        if (mine === seq) {
          result.replaceChildren(el("p", { class: "nl-run-head nl-run-error", text: `Could not run: ${err.message}` }));
          result.dataset.status = "failed";
        }
      } finally {
        if (mine === seq) { runBtn.disabled = false; delete listing.dataset.running; }
      }
    }
    runBtn.addEventListener("click", run);
    resetBtn.addEventListener("click", () => {
      editor.value = original;
      result.hidden = true;
      result.replaceChildren();
      delete result.dataset.status;
      save();
    });
    return {
      id,
      restore(code) {
        if (typeof code !== "string" || code === original) return;
        editor.value = code;
        sent = code;
        note.textContent = "your saved edits (Reset brings back the lesson's code)";
      },
    };
  }

  function savedCode(entry) {
    if (typeof entry === "string") return entry;
    return entry && typeof entry.code === "string" ? entry.code : null;
  }

  function init() {
    const article = document.querySelector("article.lesson[data-lesson]");
    if (!article || !window.NLEditor) return;
    const listings = Array.from(article.querySelectorAll(".nl-code[data-listing]"))
      .filter((l) => l.querySelector("pre.nl-src"));
    const playgrounds = listings.map((l) => makePlayground(l, l.dataset.listing));
    fetch("/api/progress")
      .then((res) => (res.ok ? res.json() : null))
      .then((p) => {
        const saved = (p && p.listings) || {};
        playgrounds.forEach((pg) => pg.restore(savedCode(saved[pg.id])));
        article.dataset.playgrounds = "ready";
      })
      .catch(() => { article.dataset.playgrounds = "ready"; });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
