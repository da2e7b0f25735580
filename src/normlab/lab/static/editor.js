// normlab lab: a small offline code editor for Python listings.
//
// A <textarea> (the real input: selection, undo, IME, accessibility) lies over a <pre> that shows
// the same text highlighted, beside a gutter of line numbers. The textarea's text is transparent
// and its caret visible, so the learner edits plain text while seeing colours. Both use the same
// monospace metrics (lab.css) and scroll together.
//
// Keys: Tab / Shift+Tab indent and dedent the selected lines by 4 spaces, Enter keeps the
// indentation (one level more after a colon), Ctrl+Enter or Cmd+Enter runs (options.onRun),
// Esc leaves the editor (the focus goes to the next control after it, Run in a listing), so Tab
// indenting is no keyboard trap.
"use strict";

(function () {
  const KEYWORDS = new Set(("False None True and as assert async await break class continue def " +
    "del elif else except finally for from global if import in is lambda nonlocal not or pass " +
    "raise return try while with yield match case").split(" "));
  const BUILTINS = new Set(("abs all any bool dict dir divmod enumerate filter float format " +
    "getattr hasattr hash int isinstance issubclass iter len list map max min next object open " +
    "pow print range repr reversed round set setattr slice sorted str sum super tuple type zip " +
    "ValueError TypeError RuntimeError Exception AssertionError KeyError IndexError").split(" "));
  // One alternation, tried left to right at each position: comment, string (prefixes, triple or
  // single quotes, an unterminated single-quoted string runs to the end of its line), number, name.
  const TOKEN = new RegExp([
    "(#[^\\n]*)",
    "((?:[rRbBuUfF]{1,2})?(?:'''[\\s\\S]*?(?:'''|$)|\"\"\"[\\s\\S]*?(?:\"\"\"|$)|'(?:\\\\.|[^'\\\\\\n])*'?|\"(?:\\\\.|[^\"\\\\\\n])*\"?))",
    "(\\b(?:0[xX][0-9a-fA-F_]+|0[bB][01_]+|0[oO][0-7_]+|(?:\\d[\\d_]*\\.?[\\d_]*|\\.\\d[\\d_]*)(?:[eE][+-]?\\d+)?j?)\\b)",
    "([A-Za-z_][A-Za-z0-9_]*)",
  ].join("|"), "g");

  function escapeHtml(s) {
    return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  // Python source -> HTML with the same tok-* classes the server's listings use.
  function highlight(src) {
    let out = "";
    let last = 0;
    let previous = "";
    TOKEN.lastIndex = 0;
    for (let m = TOKEN.exec(src); m !== null; m = TOKEN.exec(src)) {
      if (m[0] === "") { TOKEN.lastIndex++; continue; }
      out += escapeHtml(src.slice(last, m.index));
      let cls = null;
      if (m[1] !== undefined) cls = "c";
      else if (m[2] !== undefined) cls = "s";
      else if (m[3] !== undefined) cls = "n";
      else if (KEYWORDS.has(m[4])) cls = "k";
      else if (previous === "def" || previous === "class") cls = "f";
      else if (BUILTINS.has(m[4])) cls = "b";
      const text = escapeHtml(m[0]);
      out += cls ? `<span class="tok-${cls}">${text}</span>` : text;
      if (m[1] === undefined) previous = m[0];
      last = TOKEN.lastIndex;
    }
    return out + escapeHtml(src.slice(last));
  }

  function lineStart(text, pos) { return text.lastIndexOf("\n", pos - 1) + 1; }

  const FOCUSABLE = "a[href], button:not([disabled]), input:not([disabled]), select:not([disabled]), " +
    "textarea:not([disabled]), summary, [tabindex]:not([tabindex='-1'])";

  /** Focus on the first control after `wrap` (outside it), or nowhere when there is none. */
  function leave(wrap) {
    const after = [...document.querySelectorAll(FOCUSABLE)].find((node) => !wrap.contains(node) &&
      (wrap.compareDocumentPosition(node) & Node.DOCUMENT_POSITION_FOLLOWING) && node.offsetParent !== null);
    if (after) after.focus();
    else document.activeElement?.blur();
  }

  function create(host, text, options = {}) {
    const wrap = document.createElement("div");
    wrap.className = "nl-editor";
    const gutter = document.createElement("pre");
    gutter.className = "nl-gutter";
    gutter.setAttribute("aria-hidden", "true");
    const area = document.createElement("div");
    area.className = "nl-edit-area";
    const shown = document.createElement("pre");
    shown.className = "nl-hl";
    shown.setAttribute("aria-hidden", "true");
    const code = document.createElement("code");
    shown.appendChild(code);
    const input = document.createElement("textarea");
    input.className = "nl-input";
    input.spellcheck = false;
    input.setAttribute("autocapitalize", "off");
    input.setAttribute("autocomplete", "off");
    input.setAttribute("aria-label", options.label || "Python code, editable");
    input.setAttribute("aria-description", "Tab indents; Escape leaves the editor");
    input.wrap = "off";
    input.value = text;
    area.append(shown, input);
    wrap.append(gutter, area);
    host.appendChild(wrap);

    function render() {
      const value = input.value;
      // a trailing newline needs a character after it, or the <pre> is one line short
      code.innerHTML = highlight(value) + (value.endsWith("\n") ? " " : "");
      const lines = value.split("\n").length;
      if (gutter.childElementCount !== lines) {
        gutter.textContent = Array.from({ length: lines }, (_, i) => String(i + 1)).join("\n");
      }
      input.rows = Math.max(lines, 2);
      syncScroll();
    }
    function syncScroll() {
      shown.scrollTop = input.scrollTop;
      shown.scrollLeft = input.scrollLeft;
      gutter.scrollTop = input.scrollTop;
    }
    function edit(start, end, replacement, selStart, selEnd) {
      input.setSelectionRange(start, end);
      // execCommand keeps the browser's undo history; fall back to setRangeText where it is gone
      if (!document.execCommand || !document.execCommand("insertText", false, replacement)) {
        input.setRangeText(replacement, start, end, "end");
      }
      input.setSelectionRange(selStart, selEnd);
      render();
      if (options.onChange) options.onChange(input.value);
    }
    function indentLines(dedent) {
      const v = input.value;
      const s = input.selectionStart;
      const e = input.selectionEnd;
      const from = lineStart(v, s);
      const to = e > s && v[e - 1] === "\n" ? e - 1 : e;
      const block = v.slice(from, to);
      const lines = block.split("\n");
      let firstDelta = 0;
      const changed = lines.map((line, i) => {
        if (!dedent) { if (i === 0) firstDelta = 4; return "    " + line; }
        const cut = line.match(/^ {0,4}/)[0].length;
        if (i === 0) firstDelta = -cut;
        return line.slice(cut);
      }).join("\n");
      const start = Math.max(from, s + firstDelta);
      edit(from, to, changed, start, to + (changed.length - block.length));
    }

    input.addEventListener("input", () => {
      render();
      if (options.onChange) options.onChange(input.value);
    });
    input.addEventListener("scroll", syncScroll);
    input.addEventListener("keydown", (ev) => {
      if (ev.key === "Escape") {
        ev.preventDefault();
        leave(wrap);
        return;
      }
      if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) {
        ev.preventDefault();
        if (options.onRun) options.onRun();
        return;
      }
      if (ev.key === "Tab" && !ev.altKey && !ev.ctrlKey && !ev.metaKey) {
        const multi = input.value.slice(input.selectionStart, input.selectionEnd).includes("\n");
        ev.preventDefault();
        if (ev.shiftKey || multi) indentLines(ev.shiftKey);
        else edit(input.selectionStart, input.selectionEnd, "    ",
          input.selectionStart + 4, input.selectionStart + 4);
        return;
      }
      if (ev.key === "Enter" && !ev.shiftKey && input.selectionStart === input.selectionEnd) {
        const v = input.value;
        const s = input.selectionStart;
        const line = v.slice(lineStart(v, s), s);
        let indent = line.match(/^ */)[0];
        if (/:\s*(#.*)?$/.test(line)) indent += "    ";
        ev.preventDefault();
        edit(s, s, "\n" + indent, s + 1 + indent.length, s + 1 + indent.length);
      }
    });
    render();
    return {
      element: wrap,
      input,
      get value() { return input.value; },
      set value(v) { input.value = v; render(); },
      focus() { input.focus(); },
    };
  }

  window.NLEditor = { create, highlight };
})();
