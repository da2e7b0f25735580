// normlab lab: the exercises at the end of a lesson, and the learner's progress.
//
// Questions come from GET /api/exercises (the lesson's own, in order); an answer goes to
// POST /api/exercises/{id}/submit, which checks it on the server (code runs in the sandbox) and
// keeps the attempt in the progress store; its answer carries the store's attempt count, which
// the card shows. A code exercise also has Run (or Ctrl+Enter), which tries the code through
// POST /api/run and counts nothing, and its code is kept as the learner types
// (PUT /api/exercises/{id}/code) and comes back from GET /api/progress on the next visit.
// GET /api/progress says what is already solved, so a solved exercise shows as solved on every
// visit. On the home page the same progress fills in each lesson's "n of m solved".
"use strict";

(function () {
  const SAVE_DELAY_MS = 600;
  const { el } = window.NLDom;

  // Prompt text with `code` spans; everything else stays text (never parsed as HTML).
  function promptNodes(text) {
    const out = [];
    text.split(/(`[^`]+`)/).forEach((part) => {
      if (part.startsWith("`") && part.endsWith("`") && part.length > 1) {
        out.push(el("code", { text: part.slice(1, -1) }));
      } else if (part) {
        out.push(document.createTextNode(part));
      }
    });
    return out;
  }

  async function getJson(url) {
    const res = await fetch(url);
    if (!res.ok) throw new Error(`${url}: HTTP ${res.status}`);
    return res.json();
  }

  // fetch with a JSON body; a refusal throws the lab's message (and the parameter it names)
  async function sendJson(method, url, body, options = {}) {
    const res = await fetch(url, {
      method,
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
      ...options,
    });
    const data = await res.json().catch(() => null);
    if (!res.ok) {
      const d = data && data.detail;
      const err = new Error(d && d.message ? d.message : `HTTP ${res.status}`);
      err.parameter = d ? d.parameter : null;
      throw err;
    }
    return data;
  }

  const exerciseUrl = (id, what) => `/api/exercises/${encodeURIComponent(id)}/${what}`;

  function lessonProgress(progress, slug) {
    const lessons = (progress && progress.lessons) || {};
    return lessons[slug] || null;
  }

  function exerciseProgress(progress, slug, id) {
    const lp = lessonProgress(progress, slug);
    const ex = (lp && lp.exercises) || {};
    return ex[id] || { solved: false, attempts: 0 };
  }

  function attemptsText(n) {
    return n ? `${n} attempt${n === 1 ? "" : "s"}` : "";
  }

  function choiceInput(ex, name) {
    const group = el("div", { class: "nl-choices", role: "radiogroup" });
    ex.choices.forEach((choice, i) => {  // in this learner's order, as the server sent them
      const input = el("input", { type: "radio", name, value: String(i), id: `${name}-${i}` });
      input.dataset.choice = choice;
      group.append(el("label", { for: `${name}-${i}`, class: "nl-choice" }, input, " ", ...promptNodes(choice)));
    });
    return {
      node: group,
      value: () => {
        const picked = group.querySelector("input:checked");
        return picked ? picked.dataset.choice : null;
      },
    };
  }

  // The text goes to the server as typed: its parser (lessons/numbers.py) reads "10,355",
  // "1e-3" or "-0.5" and says what is wrong with anything else.
  function numberInput(ex, onEnter) {
    const input = el("input", { type: "text", inputmode: "decimal", class: "nl-number-answer",
      "aria-label": "your answer (a number)", autocomplete: "off" });
    input.addEventListener("keydown", (ev) => { if (ev.key === "Enter") { ev.preventDefault(); onEnter(); } });
    const tol = ex.tolerance_text ? el("span", { class: "nl-tolerance", text: ` (${ex.tolerance_text})` }) : "";
    return {
      node: el("label", { class: "nl-number" }, "Your answer: ", input, tol),
      value: () => (input.value.trim() === "" ? null : input.value.trim()),
    };
  }

  function showRun(box, r) {
    box.hidden = false;
    box.dataset.status = r.status;
    box.replaceChildren(el("p", { class: `nl-run-head nl-run-${r.status}` }, "your run (not an attempt): ",
      el("strong", { text: r.status }), ` · ${Number(r.duration_s).toFixed(2)} s`));
    if (r.stdout) box.append(el("pre", { class: "nl-run-stdout", "aria-label": "standard output", text: r.stdout }));
    if (r.stderr) box.append(el("pre", { class: "nl-run-stderr", "aria-label": "standard error", text: r.stderr }));
    if (!r.stdout && !r.stderr) box.append(el("p", { class: "nl-note", text: "The code printed nothing." }));
  }

  // A code exercise's editor: the learner's kept code (else the starter), saved as they type;
  // Run (or Ctrl+Enter) tries it in the sandbox through POST /api/run, which is no attempt.
  function codeInput(ex, kept) {
    const host = el("div", { class: "nl-src nl-src-edit" });
    let timer = null;
    let sent = typeof kept === "string" ? kept : ex.starter || ""; // kept, or last sent to be
    const note = el("span", { class: "nl-saved-note", role: "status" });
    const result = el("div", { class: "nl-run-result", "aria-live": "polite" });
    result.hidden = true;
    // Saves go one after another (the lab writes each in a thread of its own, so two at once
    // could land in either order): the last edit is the one kept. The note says "kept" only
    // while the editor holds what the lab has acknowledged; an edit clears it.
    let saving = Promise.resolve();
    const save = (options) => {
      clearTimeout(timer);
      timer = null;
      const code = editor.value;
      if (code === sent) return saving;
      sent = code;
      const put = () => sendJson("PUT", exerciseUrl(ex.id, "code"), { code }, options);
      // leaving the page: send at once (keepalive), not after the saves still under way
      saving = (options && options.keepalive ? put() : saving.then(put))
        .then(() => { if (editor.value === code) note.textContent = "your code is kept"; })
        .catch((err) => { sent = null; note.textContent = `not kept: ${err.message}`; });
      return saving;
    };
    // leaving the page within the save delay: send the last edit anyway (keepalive outlives it)
    window.addEventListener("pagehide", () => { if (timer !== null) save({ keepalive: true }); });
    const runBtn = el("button", { type: "button", class: "nl-run-btn", text: "Run" });
    let seq = 0;
    async function run() {
      const mine = ++seq;
      runBtn.disabled = true;
      result.hidden = false;
      delete result.dataset.status;
      result.replaceChildren(el("p", { class: "nl-run-head", text: "Running…" }));
      save();
      try {
        const r = await sendJson("POST", "/api/run", { code: editor.value });
        if (mine === seq) showRun(result, r);
      } catch (err) {
        if (mine === seq) {
          result.dataset.status = "failed";
          result.replaceChildren(el("p", { class: "nl-run-head nl-run-error", text: `Could not run: ${err.message}` }));
        }
      } finally {
        if (mine === seq) runBtn.disabled = false;
      }
    }
    const editor = window.NLEditor.create(host, sent, {
      label: `your code for exercise ${ex.id}`,
      onChange: () => { note.textContent = ""; clearTimeout(timer); timer = setTimeout(save, SAVE_DELAY_MS); },
      onRun: run,
    });
    const resetBtn = el("button", { type: "button", class: "nl-reset-btn", text: "Reset" });
    resetBtn.addEventListener("click", () => { editor.value = ex.starter || ""; save(); });
    runBtn.addEventListener("click", run);
    const tools = el("div", { class: "nl-run-bar nl-exercise-tools" }, runBtn, resetBtn,
      el("span", { class: "nl-hint", text: "Run tries your code (Ctrl+Enter); Check counts as an attempt" }), note);
    return { node: el("div", { class: "nl-exercise-code" }, host, tools, result), value: () => editor.value, save };
  }

  function answerInput(ex, name, kept, onEnter) {
    if (ex.kind === "choice") return choiceInput(ex, name);
    if (ex.kind === "number") return numberInput(ex, onEnter);
    return codeInput(ex, kept);
  }

  function showVerdict(feedback, r) {
    feedback.dataset.passed = r.passed ? "true" : "false";
    const said = /^(right|not yet)\b/i.test(r.feedback);
    feedback.replaceChildren(el("strong", { text: said ? "" : r.passed ? "Right. " : "Not yet. " }),
      el("span", { class: "nl-feedback-text", text: r.feedback }));
    if (r.passed && r.explanation) {  // the server's own HTML (its formulas as MathML), never the learner's
      const box = el("div", { class: "nl-explanation" });
      box.innerHTML = r.explanation;
      feedback.append(box);
    }
    if (r.output) {  // what the learner's code printed while it was checked
      feedback.append(el("pre", { class: "nl-feedback-output", "aria-label": "what your code printed", text: r.output }));
    }
  }

  function renderExercise(ex, index, slug, progress, onSolved) {
    const state = exerciseProgress(progress, slug, ex.id);
    const card = el("li", { class: "nl-exercise", id: `exercise-${ex.id}` });
    card.dataset.exercise = ex.id;
    card.dataset.kind = ex.kind;
    card.dataset.solved = state.solved ? "true" : "false";
    const badge = el("span", { class: "nl-solved-badge", text: state.solved ? "solved" : "" });
    const head = el("p", { class: "nl-exercise-prompt" },
      el("strong", { text: `Exercise ${index + 1}. ` }), ...promptNodes(ex.prompt), " ", badge);
    const kept = ((progress && progress.exercise_code) || {})[ex.id];
    const input = answerInput(ex, `answer-${ex.id}`, kept, () => check());
    const button = el("button", { type: "button", class: "nl-submit-btn",
      text: ex.kind === "code" ? "Check my code" : "Check" });
    const feedback = el("div", { class: "nl-feedback", role: "status", "aria-live": "polite" });
    const attempts = el("span", { class: "nl-attempts", text: attemptsText(state.attempts) });
    attempts.dataset.attempts = String(state.attempts);
    card.append(head, input.node, el("div", { class: "nl-run-bar" }, button, attempts), feedback);

    async function check() {
      const value = input.value();
      if (value === null) {
        feedback.dataset.passed = "false";
        feedback.textContent = ex.kind === "choice" ? "Pick one of the answers first."
          : "Type a number first, like 10355, 10,355, -0.5 or 1e-3.";
        return;
      }
      if (button.disabled) return;
      button.disabled = true;
      feedback.dataset.passed = "";
      feedback.textContent = ex.kind === "code" ? "Running the checks on your code…" : "Checking…";
      try {
        if (input.save) await input.save();
        const r = await sendJson("POST", exerciseUrl(ex.id, "submit"), ex.kind === "code" ? { code: value } : { answer: value });
        showVerdict(feedback, r);
        if (r.saved === false) {  // checked, but the progress database could not keep it
          feedback.append(el("p", { class: "nl-unsaved", role: "alert", text: r.unsaved }));
        } else {
          attempts.textContent = attemptsText(r.attempts);  // the store's count after this one
          attempts.dataset.attempts = String(r.attempts);
        }
        if (r.solved) {
          card.dataset.solved = "true";
          badge.textContent = "solved";
        }
        onSolved().catch(() => {});
      } catch (err) {
        feedback.dataset.passed = "false";
        // a refused answer ("Infinity", "0,5") reads as the lab's own message
        feedback.textContent = err.parameter === "answer" ? err.message : `Could not check: ${err.message}`;
      } finally {
        button.disabled = false;
      }
    }
    button.addEventListener("click", check);
    return card;
  }

  function summaryText(lp) {
    if (!lp || !lp.total) return "";
    return `${lp.solved} of ${lp.total} solved`;
  }

  async function refreshProgress() {
    const p = await getJson("/api/progress");
    window.NLProgress.last = p;
    document.querySelectorAll("[data-progress-lesson]").forEach((node) => {
      const lp = lessonProgress(p, node.dataset.progressLesson);
      node.textContent = summaryText(lp);
      if (lp) {
        node.dataset.solved = String(lp.solved);
        node.dataset.total = String(lp.total);
      }
    });
    return p;
  }

  async function initLesson(section) {
    const slug = section.dataset.lesson;
    try {
      const [all, progress] = await Promise.all([getJson("/api/exercises"), refreshProgress()]);
      const mine = all.filter((ex) => ex.lesson === slug);
      const list = el("ol", { class: "nl-exercise-list" });
      mine.forEach((ex, i) => list.append(renderExercise(ex, i, slug, progress, refreshProgress)));
      section.querySelector(".nl-exercises-body").replaceChildren(list);
      section.dataset.state = "ready";
    } catch (err) {
      section.querySelector(".nl-exercises-body").replaceChildren(
        el("p", { class: "nl-note", text: `The exercises could not be loaded: ${err.message}` }));
      section.dataset.state = "error";
    }
  }

  function init() {
    window.NLProgress = { last: null, refresh: refreshProgress };
    const section = document.querySelector("section.nl-exercises[data-lesson]");
    if (section) initLesson(section);
    else if (document.querySelector("[data-progress-lesson]")) {
      refreshProgress()
        .then(() => { document.body.dataset.progress = "ready"; })
        .catch(() => { document.body.dataset.progress = "error"; });
    }
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
