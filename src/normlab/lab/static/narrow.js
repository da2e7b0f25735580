// normlab lab: tables and formulas that fit a narrow screen (a phone held upright).
//
// A table wider than its box is stacked: each row becomes a block of "column: value" pairs
// (lab.css, table[data-fit="stack"]), its cells labelled here with their column's header, so
// no column is ever off-screen. A display formula wider than its box is set a little smaller
// (down to MIN_SCALE); one that would need more is broken into lines after its top-level
// commas, and before its relations too where that is not enough (data-fit="wrap"), then
// scaled if a line is still too wide. Everything is measured, never guessed from the screen's
// width: it runs again when a box changes width, when a table is added (the widgets draw
// theirs) and when the fonts arrive.
"use strict";

(function () {
  const TABLES = "table.figures, .nl-table-block > table";
  const FORMULAS = ".nl-math-block";
  const MIN_SCALE = 0.8; // smaller than this, a formula is broken into lines instead
  const MIN_WRAPPED_SCALE = 0.6; // and a line of it is never set smaller than this
  const MATHML = "http://www.w3.org/1998/Math/MathML";
  const RELATIONS = new Set(["=", "≈", "<", ">", "≤", "≥", "→"]);
  const SEPARATORS = new Set([",", ";"]);
  const GROUP = "nl-math-line";

  const tooWide = (box) => box.scrollWidth > box.clientWidth + 1;

  /** Each body cell's data-label, the text of its column's header (colspans counted), and
   * its content in one span.nl-cell: stacked, a value such as 3 × 10<sup>-7</sup> then
   * moves as one piece. A cell labelled before is left as it is. */
  function label(table) {
    const heads = [];
    for (const th of table.querySelectorAll("thead tr:last-child > *")) {
      for (let i = 0; i < (th.colSpan || 1); i++) heads.push(th.textContent.trim());
    }
    for (const row of table.querySelectorAll("tbody tr")) {
      let col = 0;
      for (const cell of row.children) {
        if (heads[col] && !cell.dataset.label) {
          cell.dataset.label = heads[col];
          const value = document.createElement("span");
          value.className = "nl-cell";
          value.append(...cell.childNodes);
          cell.append(value);
        }
        col += cell.colSpan || 1;
      }
    }
  }

  /** A table stacks when its rows, laid out as a table, are wider than their box. */
  function fitTable(table) {
    label(table);
    const box = table.matches(".figures") ? table : table.parentElement;
    delete table.dataset.fit;
    if (tooWide(box)) table.dataset.fit = "stack";
  }

  /** The top-level terms of a formula as lines: a break after each comma, and with
   * ``relations`` also before each relation (a line then starts "= ..."). */
  function group(row, relations) {
    const lines = [[]];
    for (const child of [...row.children]) {
      const op = child.localName === "mo" ? child.textContent.trim() : "";
      if (relations && RELATIONS.has(op) && lines[lines.length - 1].length) lines.push([]);
      lines[lines.length - 1].push(child);
      if (SEPARATORS.has(op)) lines.push([]);
    }
    for (const items of lines.filter((l) => l.length)) {
      const line = document.createElementNS(MATHML, "mrow");
      line.setAttribute("class", GROUP);
      items[0].before(line);
      line.append(...items);
    }
  }

  function ungroup(row) {
    for (const line of row.querySelectorAll(`:scope > mrow.${GROUP}`)) line.replaceWith(...line.childNodes);
  }

  /** Scale the formula by ``k`` of its own font size (the style's, not a previous scaling). */
  function scale(math, k) {
    math.style.fontSize = "";
    if (k < 1) math.style.fontSize = `${k * parseFloat(getComputedStyle(math).fontSize)}px`;
  }

  function fitFormula(box) {
    const math = box.querySelector("math");
    if (!math) return;
    const row = math.querySelector(":scope > mrow"); // the formula's top-level terms
    delete box.dataset.fit;
    if (row) ungroup(row);
    scale(math, 1);
    if (!tooWide(box)) return;
    const k = box.clientWidth / box.scrollWidth;
    if (k >= MIN_SCALE) {
      scale(math, k * 0.98);
      box.dataset.fit = "scale";
      return;
    }
    box.dataset.fit = "wrap";
    if (row) group(row, false);
    if (row && tooWide(box)) { ungroup(row); group(row, true); }
    if (tooWide(box)) scale(math, Math.max(MIN_WRAPPED_SCALE, 0.98 * box.clientWidth / box.scrollWidth));
  }

  // -- when: a box changes width, a table is added, the fonts arrive -----------------------

  const widths = new WeakMap();
  let pending = false;

  function fitAll() {
    pending = false;
    for (const table of document.querySelectorAll(TABLES)) {
      watch(table.parentElement);
      fitTable(table);
    }
    for (const box of document.querySelectorAll(FORMULAS)) {
      watch(box);
      fitFormula(box);
    }
  }

  function schedule() {
    if (!pending) { pending = true; requestAnimationFrame(fitAll); }
  }

  const resized = new ResizeObserver((entries) => {
    for (const e of entries) {
      if (widths.get(e.target) === e.contentRect.width) continue; // only a new width counts
      widths.set(e.target, e.contentRect.width);
      schedule();
    }
  });
  function watch(el) { resized.observe(el); }

  const hasTable = (n) => n.nodeType === 1 && (n.localName === "table" || !!n.querySelector("table"));
  new MutationObserver((records) => {
    if (records.some((r) => [...r.addedNodes].some(hasTable))) schedule();
  }).observe(document.documentElement, { childList: true, subtree: true });

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", schedule);
  else schedule();
  if (document.fonts) document.fonts.ready.then(schedule);
})();
