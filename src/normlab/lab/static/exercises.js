// normlab lab: the exercises at the end of a lesson, and the learner's progress.
//
// Questions come from GET /api/exercises (the lesson's own, in order); an answer goes to
// POST /api/exercises/{id}/submit, which checks it on the server (code runs in the sandbox) and
// keeps the attempt in the progress store. GET /api/progress says what is already solved, so a
// solved exercise shows as solved on every visit. On the home page the same progress fills in
// each lesson's "n of m solved".
"use strict";

(function () {
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

  async function submit(id, body) {
    const res = await fetch(`/api/exercises/${encodeURIComponent(id)}/submit`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    const data = await res.json().catch(() => null);
    if (!res.ok) {
      const d = data && data.detail;
      throw new Error(d && d.message ? d.message : `HTTP ${res.status}`);
    }
    return data;
  }

  function lessonProgress(progress, slug) {
    const lessons = (progress && progress.lessons) || {};
    return lessons[slug] || null;
  }

  function exerciseProgress(progress, slug, id) {
    const lp = lessonProgress(progress, slug);
    const ex = (lp && lp.exercises) || {};
    return ex[id] || { solved: false, attempts: 0 };
  }

  function answerInput(ex, name) {
    if (ex.kind === "choice") {
      const group = el("div", { class: "nl-choices", role: "radiogroup" });
      ex.choices.forEach((choice, i) => {
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
    if (ex.kind === "number") {
      const input = el("input", { type: "text", inputmode: "decimal", class: "nl-number-answer",
        "aria-label": "your answer (a number)", autocomplete: "off" });
      const tol = ex.tolerance_text ? el("span", { class: "nl-tolerance", text: ` (${ex.tolerance_text})` }) : "";
      return {
        node: el("label", { class: "nl-number" }, "Your answer: ", input, tol),
        value: () => {
          const text = input.value.trim();
          return text === "" ? null : Number(text);
        },
      };
    }
    const host = el("div", { class: "nl-src nl-src-edit" });
    const editor = window.NLEditor.create(host, ex.starter || "", {
      label: `your code for exercise ${ex.id}`,
    });
    return { node: host, value: () => editor.value, editor };
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
    const input = answerInput(ex, `answer-${ex.id}`);
    const button = el("button", { type: "button", class: "nl-submit-btn",
      text: ex.kind === "code" ? "Check my code" : "Check" });
    const feedback = el("div", { class: "nl-feedback", role: "status", "aria-live": "polite" });
    const attempts = el("span", { class: "nl-attempts",
      text: state.attempts ? `${state.attempts} attempt${state.attempts === 1 ? "" : "s"}` : "" });
    card.append(head, input.node, el("div", { class: "nl-run-bar" }, button, attempts), feedback);

    button.addEventListener("click", async () => {
      const value = input.value();
      if (value === null || (typeof value === "number" && Number.isNaN(value))) {
        feedback.dataset.passed = "false";
        feedback.textContent = ex.kind === "choice" ? "Pick one of the answers first." : "Type a number first.";
        return;
      }
      button.disabled = true;
      feedback.dataset.passed = "";
      feedback.textContent = ex.kind === "code" ? "Running the checks on your code…" : "Checking…";
      try {
        const body = ex.kind === "code" ? { code: value } : { answer: value };
        const r = await submit(ex.id, body);
        feedback.dataset.passed = r.passed ? "true" : "false";
        const said = /^(right|not yet)\b/i.test(r.feedback);
        feedback.replaceChildren(el("strong", { text: said ? "" : r.passed ? "Right. " : "Not yet. " }),
          el("span", { class: "nl-feedback-text", text: r.feedback }));
        if (r.output) {  // what the learner's code printed while it was checked
          feedback.append(el("pre", { class: "nl-feedback-output", "aria-label": "what your code printed", text: r.output }));
        }
        if (r.passed) {
          card.dataset.solved = "true";
          badge.textContent = "solved";
        }
        await onSolved();
        const fresh = exerciseProgress(window.NLProgress.last, slug, ex.id);
        attempts.textContent = fresh.attempts ? `${fresh.attempts} attempt${fresh.attempts === 1 ? "" : "s"}` : "";
      } catch (err) {
        feedback.dataset.passed = "false";
        feedback.textContent = `Could not check: ${err.message}`;
      } finally {
        button.disabled = false;
      }
    });
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
